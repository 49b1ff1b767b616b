#include "hyper/core/launch_env.h"

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "hyper/core/errors.h"
#include "hyper/core/mesh_topology.h"

namespace hyper {

namespace {

const std::string* find(const std::map<std::string, std::string>& env, const std::string& k) {
  auto it = env.find(k);
  return it == env.end() ? nullptr : &it->second;
}

const std::string& require(const std::map<std::string, std::string>& env, const std::string& k) {
  const std::string* v = find(env, k);
  HYPER_CHECK_VALUE(v != nullptr, "environment variable ", k,
                    " is not set (init_process_group reads torchrun's RANK, WORLD_SIZE, "
                    "LOCAL_RANK, MASTER_ADDR, MASTER_PORT; start with torchrun --no-python "
                    "or hyperrun)");
  return *v;
}

int64_t parse_int(const std::string& name, const std::string& value) {
  HYPER_CHECK_VALUE(!value.empty(), name, "=\"\" is not an integer");
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  HYPER_CHECK_VALUE(errno == 0 && end != nullptr && *end == '\0', name, "=\"", value,
                    "\" is not an integer");
  HYPER_CHECK_VALUE(v >= INT32_MIN && v <= INT32_MAX, name, "=", value, " is out of range");
  return v;
}

}  // namespace

TorchrunEnv parse_torchrun_env(const std::map<std::string, std::string>& env) {
  TorchrunEnv e;
  const int64_t world_size = parse_int("WORLD_SIZE", require(env, "WORLD_SIZE"));
  HYPER_CHECK_VALUE(world_size >= 1, "WORLD_SIZE=", world_size, " must be at least 1");
  HYPER_CHECK_VALUE(world_size <= kMaxMeshSize, "WORLD_SIZE=", world_size, " is more than the ",
                    kMaxMeshSize, " ranks a mesh holds (kMaxMeshSize)");
  const int64_t rank = parse_int("RANK", require(env, "RANK"));
  HYPER_CHECK_VALUE(rank >= 0, "RANK=", rank, " is negative");
  HYPER_CHECK_VALUE(rank < world_size, "RANK=", rank, " is not below WORLD_SIZE=", world_size);
  int64_t local_rank = rank;
  if (const std::string* lr = find(env, "LOCAL_RANK")) {
    local_rank = parse_int("LOCAL_RANK", *lr);
    HYPER_CHECK_VALUE(local_rank >= 0, "LOCAL_RANK=", local_rank, " is negative");
    HYPER_CHECK_VALUE(local_rank < world_size, "LOCAL_RANK=", local_rank,
                      " is not below WORLD_SIZE=", world_size);
  }
  const std::string& addr = require(env, "MASTER_ADDR");
  HYPER_CHECK_VALUE(!addr.empty(), "MASTER_ADDR is empty");
  const int64_t port = parse_int("MASTER_PORT", require(env, "MASTER_PORT"));
  HYPER_CHECK_VALUE(port >= 1 && port <= 65535, "MASTER_PORT=", port,
                    " is not a TCP port (1..65535)");
  e.rank = static_cast<int>(rank);
  e.world_size = static_cast<int>(world_size);
  e.local_rank = static_cast<int>(local_rank);
  e.master_addr = addr;
  e.master_port = static_cast<int>(port);
  if (const std::string* a = find(env, "TORCHELASTIC_USE_AGENT_STORE")) {
    e.agent_store = *a == "True" || *a == "true" || *a == "1";
  }
  return e;
}

}  // namespace hyper
