#include "hyper/comm/world.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>

#include <cerrno>
#include <cstdlib>
#include <mutex>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/internal/state.h"
#include "hyper/core/errors.h"

namespace hyper {

namespace {

const char* const kVars[] = {"RANK",        "WORLD_SIZE",  "LOCAL_RANK",
                             "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE"};

std::mutex g_default_mu;
std::shared_ptr<comm::internal::WorldState> g_default;  // write-once default world

}  // namespace

TorchrunEnv read_torchrun_env() {
  std::map<std::string, std::string> env;
  for (const char* k : kVars) {
    if (const char* v = std::getenv(k)) env[k] = v;
  }
  return parse_torchrun_env(env);
}

World::World(std::shared_ptr<comm::internal::WorldState> state) : state_(std::move(state)) {}

namespace {
comm::internal::WorldState& ws(const std::shared_ptr<comm::internal::WorldState>& s) {
  HYPER_CHECK_VALUE(s != nullptr, "use of an undefined hyper::World");
  return *s;
}
}  // namespace

int World::rank() const { return ws(state_).rank; }
int World::size() const { return ws(state_).size; }
int World::local_rank() const { return ws(state_).local_rank; }
const ProcessGroupOptions& World::options() const { return ws(state_).options; }
std::chrono::milliseconds World::timeout() const { return ws(state_).options.timeout; }

comm::Group World::group() const {
  auto& s = ws(state_);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.world_group_made) return s.world_group;
  }
  std::vector<int> ranks(s.size);
  for (int i = 0; i < s.size; ++i) ranks[i] = i;
  const auto device =
      s.options.backend == "nccl" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  comm::Group g = comm::internal::create_group(s, ranks, "world", device);
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.world_group_made) {
    s.world_group = g;
    s.world_group_made = true;
  }
  return s.world_group;
}

comm::Group World::new_group(const std::vector<int>& ranks, const std::string& key,
                             c10::DeviceType device) const {
  auto& s = ws(state_);
  for (int r : ranks) {
    HYPER_CHECK_VALUE(r >= 0 && r < s.size, "new_group: rank ", r, " is not in the world of size ",
                      s.size);
  }
  return comm::internal::create_group(s, ranks, key, device);
}

comm::Group World::dedicated_group(const std::string& key) const {
  auto& s = ws(state_);
  {
    std::lock_guard<std::mutex> lock(s.mu);
    auto it = s.dedicated_groups.find(key);
    if (it != s.dedicated_groups.end()) return it->second;
  }
  std::vector<int> ranks(static_cast<std::size_t>(s.size));
  for (int i = 0; i < s.size; ++i) ranks[i] = i;
  comm::Group g = comm::internal::create_group(s, ranks, key, c10::DeviceType::CPU);
  std::lock_guard<std::mutex> lock(s.mu);
  return s.dedicated_groups.emplace(key, g).first->second;
}

comm::Work World::exchange_background(const std::string& key, comm::Work next) const {
  auto& s = ws(state_);
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.background.find(key);
  if (it == s.background.end()) {
    s.background.emplace(key, std::move(next));
    return comm::Work();
  }
  comm::Work prev = std::move(it->second);
  it->second = std::move(next);
  return prev;
}

int64_t World::next_mesh_id() const { return ws(state_).next_mesh_id.fetch_add(1); }

namespace {

/// Gloo writes to peer sockets with writev (no MSG_NOSIGNAL), so a write to a peer that has
/// died raises SIGPIPE, whose default action kills this rank before the collective can fail
/// with a CommError. Python (hence PyTorch) ignores SIGPIPE at start-up; a C++ program gets
/// the same here: a default SIGPIPE disposition becomes "ignore" (the write then fails with
/// EPIPE). A handler the program installed is kept.
void ignore_default_sigpipe() {
  struct sigaction old {};
  if (::sigaction(SIGPIPE, nullptr, &old) == 0 && !(old.sa_flags & SA_SIGINFO) &&
      old.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

World make_world(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                 const ProcessGroupOptions& options, int local_rank) {
  HYPER_CHECK_VALUE(world_size >= 1, "make_world: world size ", world_size, " must be >= 1");
  HYPER_CHECK_VALUE(rank >= 0 && rank < world_size, "make_world: rank ", rank, " is not in [0, ",
                    world_size, ")");
  HYPER_CHECK_VALUE(options.backend == "gloo" || options.backend == "nccl", "unknown backend \"",
                    options.backend, "\" (expected gloo or nccl)");
  ignore_default_sigpipe();
  auto s = std::make_shared<comm::internal::WorldState>();
  if (store) store->setTimeout(options.timeout);
  s->store = std::move(store);
  s->rank = rank;
  s->size = world_size;
  s->local_rank = local_rank >= 0 ? local_rank : rank;
  s->options = options;
  return World(std::move(s));
}

World init_process_group(const ProcessGroupOptions& options) {
  {
    std::lock_guard<std::mutex> lock(g_default_mu);
    if (g_default != nullptr && !options.env) {
      throw ValueError(
          "init_process_group: already initialised in this process (call "
          "destroy_process_group() first)");
    }
  }
  const TorchrunEnv e = options.env ? parse_torchrun_env(*options.env) : read_torchrun_env();
  HYPER_CHECK_VALUE(options.backend == "gloo" || options.backend == "nccl",
                    "init_process_group: unknown backend \"", options.backend,
                    "\" (expected gloo or nccl)");
  c10d::TCPStoreOptions so;
  so.port = static_cast<std::uint16_t>(e.master_port);
  // Under torchrun 2.x the agent serves the store; otherwise (hyperrun, torchrun 1.x, by
  // hand) rank 0 does.
  so.isServer = e.rank == 0 && !e.agent_store;
  so.numWorkers = static_cast<std::size_t>(e.world_size);
  so.waitWorkers = !e.agent_store;
  so.timeout = options.timeout;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(e.master_addr, so);
  } catch (const std::exception& ex) {
    throw CommError(
        hyper::internal::str_cat("init_process_group: rendezvous at MASTER_ADDR=", e.master_addr,
                                 " MASTER_PORT=", e.master_port, " failed for RANK=", e.rank,
                                 " WORLD_SIZE=", e.world_size, ": ", message_of(ex)));
  }
  World w = make_world(store, e.rank, e.world_size, options, e.local_rank);
  w.state()->master_addr = e.master_addr;
  try {
    w.group();  // rendezvous of the world group now, so failures surface here
  } catch (const comm::CommError& ex) {
    throw comm::CommError("init_process_group (RANK=" + std::to_string(e.rank) +
                          " WORLD_SIZE=" + std::to_string(e.world_size) + " MASTER_ADDR=" +
                          e.master_addr + " MASTER_PORT=" + std::to_string(e.master_port) +
                          "): " + ex.what());
  }
  if (!options.env) {
    std::lock_guard<std::mutex> lock(g_default_mu);
    g_default = w.state();
  }
  return w;
}

World default_world() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (g_default == nullptr) {
    throw ValueError("no default world: call hyper::init_process_group() first, or pass a World");
  }
  return World(g_default);
}

void destroy_process_group() {
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default.reset();
}

comm::CommStats stats_of(const World& world) { return ws(world.state()).counters->snapshot(); }
void reset_stats_of(const World& world) { ws(world.state()).counters->reset(); }

namespace comm {
CommStats stats() { return stats_of(default_world()); }
void reset_stats() { reset_stats_of(default_world()); }
c10::intrusive_ptr<c10d::Store> store_of(const World& world) { return ws(world.state()).store; }
}  // namespace comm

}  // namespace hyper
