#pragma once
/// \file mesh_attachment.h
/// State an upper layer keeps per DeviceMesh (hyper/tensor/random.h's RNG tracker), stored with
/// the mesh rather than in a process-global table (thread-ranks share a process).

#include <functional>
#include <memory>
#include <string>

#include "hyper/comm/device_mesh.h"

namespace hyper::comm {

/// The object stored under `key` for `mesh`, made by `make` on the first call with that key.
/// Keys live with the constructed mesh and every copy and sub-mesh derived from it (the plan
/// cache's scope), so a key that should name one mesh includes its topology
/// (`rng/cpu/[tp=2]@[2,3]`): `mesh["tp"]` taken twice finds the same object. This rank's state
/// only (no communication). Thread-safe. Throws ValueError for an undefined mesh.
std::shared_ptr<void> mesh_attachment(const DeviceMesh& mesh, const std::string& key,
                                      const std::function<std::shared_ptr<void>()>& make);

}  // namespace hyper::comm
