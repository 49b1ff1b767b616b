#pragma once
/// \file testing/harness.h
/// Multi-rank test harness (not installed). Runs a body on N ranks either as threads of
/// this process (one Gloo group per rank over a shared c10d::HashStore, loopback
/// transport) or as re-executed processes (fork+exec of this test binary filtered to the
/// current gtest test, FileStore rendezvous in a temp dir). Both impose a deadline.
///
///   hyper::comm::testing::run_threads(4, [](int rank, int n, const hyper::World& world) {
///     auto mesh = hyper::init_device_mesh(world, "cpu", {n});
///     ...
///   });

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/world.h"

namespace hyper::comm::testing {

using RankBody = std::function<void(int rank, int world_size, const World& world)>;

struct HarnessOptions {
  /// Gloo and store timeout of every rank (what a rank waits for a missing peer).
  std::chrono::milliseconds timeout{std::chrono::seconds(5)};
  /// Whole-run deadline. Thread mode: passing it prints the ranks that did not finish and
  /// aborts the process (threads cannot be killed). Process mode: the late ranks are
  /// killed and reported.
  std::chrono::milliseconds deadline{std::chrono::seconds(90)};
  /// ProcessGroupOptions::cuda_backend of every rank ("nccl" or "gloo").
  std::string cuda_backend = "nccl";
};

/// What happened to one rank.
struct RankOutcome {
  int rank = 0;
  bool finished = false;  ///< returned or threw/exited before the deadline
  bool ok = false;        ///< finished without exception or gtest failure
  std::string error;      ///< the exception's message, exit status, or "did not finish"
  double seconds = 0;     ///< time from start to finish
};

/// Runs `body` on `world_size` ranks as threads; returns per-rank outcomes.
std::vector<RankOutcome> run_threads_collect(int world_size, const RankBody& body,
                                             const HarnessOptions& options = {});
/// The same; throws std::runtime_error naming every failed rank and its message.
void run_threads(int world_size, const RankBody& body, const HarnessOptions& options = {});

/// Runs `body` on `world_size` re-executed processes (call only from a gtest test body;
/// several calls per test are fine). In the child processes this function runs the body for
/// the child's rank and exits the process.
std::vector<RankOutcome> run_processes_collect(int world_size, const RankBody& body,
                                               const HarnessOptions& options = {});
void run_processes(int world_size, const RankBody& body, const HarnessOptions& options = {});

/// HarnessOptions with this per-rank timeout and whole-run deadline.
HarnessOptions with_timeouts(std::chrono::milliseconds timeout, std::chrono::milliseconds deadline);

/// Runs `fn(mesh)` on every rank (threads) of a fresh world of prod(mesh_shape) ranks, where
/// `mesh` is a CPU DeviceMesh of that shape over all of them. Ends with one all_reduce per
/// mesh dim, so that no rank tears its Gloo pairs down while a peer is still connecting.
void run_on_mesh(const std::vector<int64_t>& mesh_shape,
                 const std::function<void(const DeviceMesh&)>& fn,
                 const HarnessOptions& options = {});

/// A TCP port on 127.0.0.1 that the OS reports free (bind to port 0, read it back, close):
/// for a TCPStore or MASTER_PORT in tests, instead of a port derived from a pid. Throws
/// hyper::IOError when the OS refuses.
int free_tcp_port();

/// A free_tcp_port() chosen by rank 0 and handed to every rank through the store of
/// `world` under `key` (every rank must call it with the same key).
int free_tcp_port_of_rank0(int rank, const World& world, const std::string& key);

/// True inside a rank process started by run_processes.
bool in_rank_process();

/// "rank 1: <error>; rank 2: did not finish ..." (failed ranks only; "" when all ok).
std::string describe_failures(const std::vector<RankOutcome>& outcomes);

}  // namespace hyper::comm::testing
