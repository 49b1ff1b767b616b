// libFuzzer target for the launch path's parsers: hyperrun's command line
// (tools/cli/hyperrun_options.h: parse_hyperrun_args) and the torchrun environment every rank
// reads in init_process_group (hyper/core/launch_env.h: parse_torchrun_env). The first byte
// picks the parser (even: hyperrun, odd: the environment); the rest is NUL-separated arguments,
// or NUL-separated NAME=VALUE entries (a later entry of the same name wins, as in a process
// environment built by setenv).
//
// Invariants: only the documented error is thrown (UsageError / ValueError; anything else,
// a crash or UB aborts); an accepted command line is one hyperrun can honour (ranks, nodes,
// node rank, world size, port and timeout within their bounds, a program, --master-addr when
// there are several nodes; the program and its arguments untouched); an accepted environment
// describes a rank inside a world hyper can build a mesh over (at most kMaxMeshSize ranks) on
// a TCP port, keeps MASTER_ADDR verbatim, defaults LOCAL_RANK to RANK, and re-parsing the
// values it returns gives the same result.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/launch_env.h"
#include "hyper/core/mesh_topology.h"
#include "tools/cli/args.h"
#include "tools/cli/fuzz/fuzz_util.h"
#include "tools/cli/hyperrun_options.h"

namespace {

void check(bool ok) {
  if (!ok) __builtin_trap();
}


void fuzz_hyperrun(const std::vector<std::string>& parts) {
  using namespace hyper::cli;
  std::vector<std::string> args{"hyperrun"};
  args.insert(args.end(), parts.begin(), parts.end());
  if (args.size() > 64) return;
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  HyperrunOptions o;
  try {
    o = parse_hyperrun_args(static_cast<int>(args.size()), argv.data());
  } catch (const UsageError& e) {
    check(std::string(e.what()).size() > 0);
    return;
  }
  if (o.help) return;
  check(o.nproc >= 1 && o.nproc <= kMaxRanks);
  check(o.nnodes >= 1 && o.nnodes <= kMaxNodes);
  check(o.node_rank >= 0 && o.node_rank < o.nnodes);
  check(static_cast<int64_t>(o.nnodes) * o.nproc <= kMaxWorldSize);
  check(o.master_port == 0 || (o.master_port >= 1 && o.master_port <= 65535));
  check(o.timeout_s == 0 || (std::isfinite(o.timeout_s) && o.timeout_s > 0 &&
                             o.timeout_s <= kMaxTimeoutSeconds));
  check(!o.command.empty());
  check(o.nnodes == 1 || (o.master_addr && !o.master_addr->empty()));
  // The program and its arguments are the input's last arguments, untouched.
  check(o.command.size() < args.size());
  for (size_t i = 0; i < o.command.size(); ++i)
    check(o.command[i] == args[args.size() - o.command.size() + i]);
}

void fuzz_env(const std::vector<std::string>& parts) {
  std::map<std::string, std::string> env;
  for (const auto& p : parts) {
    const size_t eq = p.find('=');
    if (eq == std::string::npos) continue;
    env[p.substr(0, eq)] = p.substr(eq + 1);
  }
  hyper::TorchrunEnv e;
  try {
    e = hyper::parse_torchrun_env(env);
  } catch (const hyper::ValueError& x) {
    check(std::string(x.what()).size() > 0);
    return;
  }
  check(e.world_size >= 1 && e.world_size <= hyper::kMaxMeshSize);  // a mesh over the world
  check(e.rank >= 0 && e.rank < e.world_size);
  check(e.local_rank >= 0 && e.local_rank < e.world_size);
  check(!e.master_addr.empty());
  check(e.master_port >= 1 && e.master_port <= 65535);
  check(e.master_addr == env.at("MASTER_ADDR"));
  if (env.count("LOCAL_RANK") == 0) check(e.local_rank == e.rank);
  // The canonical spelling of what was accepted parses to the same values.
  std::map<std::string, std::string> again = {
      {"RANK", std::to_string(e.rank)},           {"WORLD_SIZE", std::to_string(e.world_size)},
      {"LOCAL_RANK", std::to_string(e.local_rank)}, {"MASTER_ADDR", e.master_addr},
      {"MASTER_PORT", std::to_string(e.master_port)}};
  if (e.agent_store) again["TORCHELASTIC_USE_AGENT_STORE"] = "1";
  const hyper::TorchrunEnv f = hyper::parse_torchrun_env(again);
  check(f.rank == e.rank && f.world_size == e.world_size && f.local_rank == e.local_rank &&
        f.master_addr == e.master_addr && f.master_port == e.master_port &&
        f.agent_store == e.agent_store);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto parts = hyper::fuzz::split_nul(data + 1, size - 1);
  if (data[0] % 2 == 0) {
    fuzz_hyperrun(parts);
  } else {
    fuzz_env(parts);
  }
  return 0;
}
