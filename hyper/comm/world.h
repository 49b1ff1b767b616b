#pragma once
/// \file world.h
/// Process group initialisation from torchrun's environment, and hyper::World — the handle
/// of one rank's membership in a job (store, rank, size, options, counters). The World is
/// passed explicitly to whatever needs it (DeviceMesh, groups); nothing is kept in globals
/// except the optional write-once default world that `init_process_group()` records so
/// that `init_device_mesh(device, shape, names)` (API.md's form) can find it.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <c10/core/DeviceType.h>

#include "hyper/comm/group.h"
#include "hyper/comm/work.h"
#include "hyper/comm/stats.h"
#include "hyper/core/launch_env.h"

namespace hyper {

/// Options of init_process_group / World.
struct ProcessGroupOptions {
  /// "gloo" (CPU tensors) or "nccl" (CUDA tensors; only where LibTorch was built with NCCL).
  /// Groups for a "cuda" DeviceMesh use nccl, "cpu" meshes use gloo, whatever this says;
  /// this names the backend of World::group().
  std::string backend = "gloo";
  /// Backend of the groups of a "cuda" DeviceMesh:
  ///  - "nccl" (default): NCCL moves CUDA tensors (one GPU per rank); host tensors on the same
  ///    groups (row-count exchanges, CPU metadata) go through a Gloo backend of the group;
  ///  - "gloo": Gloo moves everything; CUDA tensors are staged through host memory (several
  ///    ranks may share one GPU; what `torch.distributed` does with Gloo and CUDA tensors).
  std::string cuda_backend = "nccl";
  /// Rendezvous (store) and collective timeout.
  std::chrono::milliseconds timeout = std::chrono::minutes(5);
  /// Gloo transport: network interface (e.g. "lo", "eth0"). Empty: $GLOO_SOCKET_IFNAME,
  /// else `gloo_hostname`, else 127.0.0.1 when MASTER_ADDR is a loopback address, else the
  /// address this machine's hostname resolves to.
  std::string gloo_interface;
  std::string gloo_hostname;
  /// Environment to read instead of the process environment (tests).
  std::optional<std::map<std::string, std::string>> env;
};

// TorchrunEnv and parse_torchrun_env: hyper/core/launch_env.h (torch-free).
/// The same, reading the process environment.
TorchrunEnv read_torchrun_env();

namespace comm::internal {
struct WorldState;
}

/// One rank's handle on a job: a rendezvous store, rank, world size, options and counters.
/// Copyable (shared state). Thread-safe.
class World {
 public:
  World() = default;
  explicit World(std::shared_ptr<comm::internal::WorldState> state);

  bool defined() const { return state_ != nullptr; }
  int rank() const;
  int size() const;
  int local_rank() const;
  const ProcessGroupOptions& options() const;
  std::chrono::milliseconds timeout() const;

  /// The group of all ranks (created on first call, which is collective: every rank must
  /// call it, in the same order relative to other group creations).
  comm::Group group() const;

  /// Creates a group over `ranks` (global ranks, in group order). Only the members call it;
  /// `key` must be unique in the job and equal on all members (it prefixes the group's
  /// rendezvous keys). `device` selects the backend (kCPU: gloo, kCUDA: nccl).
  comm::Group new_group(const std::vector<int>& ranks, const std::string& key,
                        c10::DeviceType device = c10::DeviceType::CPU) const;

  /// A group of all ranks (CPU) dedicated to one purpose, named by `key` (e.g.
  /// "hyper_dcp/checkpoint"): created on the first call for that key, which is collective
  /// (every rank calls it, in the same order relative to other group creations), then the
  /// same group for the World's lifetime. Background work (an async checkpoint save) runs
  /// its collectives there, apart from the groups the training uses.
  comm::Group dedicated_group(const std::string& key) const;

  /// Serialises background jobs of one kind on this World: records `next` as the latest
  /// job of `key` and returns the previous one (a completed Work when there was none). The
  /// caller waits for the previous job before its own collectives.
  comm::Work exchange_background(const std::string& key, comm::Work next) const;

  /// Returns 0, 1, 2, ... on successive calls; every rank calls it at every mesh
  /// construction so that meshes get the same id on all ranks.
  int64_t next_mesh_id() const;

  const std::shared_ptr<comm::internal::WorldState>& state() const { return state_; }

 private:
  std::shared_ptr<comm::internal::WorldState> state_;
};

/// Rendezvous from torchrun's environment through a TCPStore (rank 0 hosts it at
/// MASTER_ADDR:MASTER_PORT), creates the world group (Gloo, or NCCL when asked and
/// available) and returns the World. Also records it as the default world (write-once:
/// a second call without destroy_process_group() throws hyper::ValueError). Throws
/// hyper::ValueError for a bad environment, hyper::CommError when the rendezvous or the
/// world group fails.
///
///   hyper::World world = hyper::init_process_group();
///   auto mesh = hyper::init_device_mesh(world, "cpu", {2, 2}, {"dp", "tp"});
World init_process_group(const ProcessGroupOptions& options = {});

/// The World recorded by init_process_group(); throws hyper::ValueError if there is none.
World default_world();
/// Forgets the default world (its groups live on while handles to them exist).
void destroy_process_group();

/// Counters of all collectives this rank issued through groups of `world`.
comm::CommStats stats_of(const World& world);
void reset_stats_of(const World& world);

namespace comm {
/// Counters of the default world (the process's rank in a normal multi-process job).
CommStats stats();
void reset_stats();
inline CommStats stats(const World& world) { return stats_of(world); }
inline void reset_stats(const World& world) { reset_stats_of(world); }
}  // namespace comm

}  // namespace hyper
