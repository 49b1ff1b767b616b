#pragma once
/// \file c10d_interop.h
/// Bridges between hyper's handles and c10d objects (stores, process groups). Kept out of
/// the other headers because c10d's headers pull in ATen/ATen.h.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/group.h"
#include "hyper/comm/world.h"

namespace hyper {

/// A World over an existing store (TCPStore, FileStore, HashStore shared by threads...).
/// Creates no process group; `options.timeout` becomes the store's timeout.
World make_world(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                 const ProcessGroupOptions& options = {}, int local_rank = -1);

/// The mesh from store + rank + world size (tests run ranks as threads or processes).
DeviceMesh make_device_mesh(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                            const std::string& device_type, std::vector<int64_t> shape,
                            std::vector<std::string> names = {},
                            const ProcessGroupOptions& options = {});

/// A 1-D mesh over an existing process group (taken as the whole world: its ranks are the
/// global ranks). Sub-groups cannot be made from it (no store).
DeviceMesh mesh_from_process_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                   const std::string& device_type = "cpu",
                                   const std::string& dim_name = "");

/// A mesh on existing process groups, one per mesh dim (torch.distributed's: a torch
/// DeviceMesh's get_group(dim)): `groups[d]` is this rank's group along mesh dim d, whose
/// members are `global_ranks[d]` in group order, which must be the mesh's line through this
/// rank (row-major over ranks 0..n-1). `world` is the job's World (its store makes the groups
/// hyper adds: dedicated ones, whole-mesh ones of sub-meshes). The groups' own timeouts apply.
/// Collective like DeviceMesh's constructor (a mesh id is taken). ValueError for a shape that
/// does not cover the world, or groups that do not match the mesh's lines, naming both.
DeviceMesh mesh_from_process_groups(const World& world, const std::string& device_type,
                                    std::vector<int64_t> shape, std::vector<std::string> names,
                                    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups,
                                    std::vector<std::vector<int>> global_ranks);

namespace comm {
/// Wraps a c10d process group (its ranks taken as global ranks 0..size-1 unless given).
Group group_from_process_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                               std::vector<int> global_ranks = {});
/// The c10d process group behind a Group.
c10::intrusive_ptr<c10d::ProcessGroup> process_group_of(const Group& group);
/// The store behind a World (null for a World made by mesh_from_process_group).
c10::intrusive_ptr<c10d::Store> store_of(const World& world);

/// Waits until the worker threads of every Gloo backend that a hyper Group wraps (hyper's
/// own, and torch.distributed's reached through a mesh made from them) and that is still
/// alive have no work queued or running, and hold no reference to a finished work; at most
/// `bound`. True when all became idle; false when one still ran a collective at the bound
/// (a peer that never arrives), leaving it running.
///
/// A Gloo worker drops its references to a work, and with them possibly the last ones to the
/// work's tensors, after waking the work's waiter. Freeing a tensor that owns a Python object
/// takes the GIL; a thread that takes it while Python finalizes is ended inside a destructor
/// and the process aborts. hyper's Python package calls this at exit (atexit) with the GIL
/// released, so that the workers drop those references first. Call it without holding
/// locks that a worker's completion callback takes.
bool quiesce_gloo_workers(std::chrono::milliseconds bound);
/// Adds `pg`'s Gloo backend (if it has one) to those quiesce_gloo_workers waits for, without
/// keeping it alive: for a group hyper does not wrap (torch.distributed's default group).
void track_gloo_workers(c10d::ProcessGroup& pg);
}  // namespace comm

}  // namespace hyper
