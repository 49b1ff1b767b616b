#pragma once
/// \file device_mesh.h
/// hyper::DeviceMesh — a MeshTopology paired with one process group per mesh dim (the group
/// along that dim that contains this rank). Groups are created once, at construction, and
/// reused; sub-meshes share them. Copyable (shared state).

#include <c10/core/DeviceType.h>

#include <memory>
#include <string>
#include <vector>

#include "hyper/comm/group.h"
#include "hyper/comm/world.h"
#include "hyper/core/mesh_topology.h"
#include "hyper/core/plan_steps.h"

namespace hyper {

namespace comm::internal {
struct MeshState;
}

class DeviceMesh {
 public:
  DeviceMesh() = default;
  /// Collective over all ranks of `world` (each calls it, same order of mesh
  /// constructions): for each mesh dim, for each group along it, the members create a
  /// process group keyed `mesh<id>/dim<d>/group<g>`; non-members skip it (no deadlock).
  /// `device_type`: "cpu" (Gloo) or "cuda" (NCCL, where built). Throws ValueError if this
  /// rank is not in the topology or the device type is unknown.
  DeviceMesh(const World& world, const std::string& device_type, MeshTopology topology);

  int64_t ndim() const;
  /// Number of ranks in the mesh.
  int64_t size() const;
  int64_t size(int64_t dim) const;
  /// This rank's coordinate.
  std::vector<int64_t> get_coordinate() const;
  /// This rank's coordinate on mesh dim `dim` (= its rank in get_group(dim)).
  int64_t get_local_rank(int64_t dim = 0) const;
  int64_t get_local_rank(const std::string& dim_name) const;
  /// Global rank of this process.
  int get_rank() const;
  /// The group along mesh dim `dim` that contains this rank.
  comm::Group get_group(int64_t dim = 0) const;
  comm::Group get_group(const std::string& dim_name) const;
  c10::DeviceType device_type() const;
  const MeshTopology& topology() const;
  const World& world() const;

  /// A group over all the mesh's ranks (group ranks in mesh order for a mesh built by the
  /// constructor; any order for sub-meshes). 1-D meshes: get_group(0). Meshes spanning the
  /// whole world: World::group() (created on first call, collective over the world, which
  /// is the mesh). Other N-D meshes: created eagerly by the constructor (key
  /// `mesh<id>/all`); sub-meshes over several (not all) dims create theirs on first call,
  /// collectively over the sub-mesh's ranks, and every mesh derived from the same
  /// constructed mesh reuses it.
  comm::Group get_mesh_group() const;

  /// The plan cache of this mesh: created once by the constructor and shared by every copy
  /// and sub-mesh (plans are keyed by layouts, which include the mesh). Thread-safe.
  const std::shared_ptr<PlanCache>& plan_cache() const;

  /// 1-D sub-mesh over the named dim; reuses this mesh's group for it (no rendezvous).
  DeviceMesh operator[](const std::string& dim_name) const;
  DeviceMesh operator[](int64_t dim) const;
  /// Sub-mesh over several dims (kept in the given order), reusing the groups.
  DeviceMesh sub_mesh(const std::vector<std::string>& dim_names) const;

  /// `DeviceMesh(cpu, [dp=2,tp=2], rank=3)`.
  std::string to_string() const;
  bool defined() const { return state_ != nullptr; }
  /// Same topology and device type.
  bool operator==(const DeviceMesh& o) const;
  bool operator!=(const DeviceMesh& o) const { return !(*this == o); }

  const std::shared_ptr<comm::internal::MeshState>& state() const { return state_; }
  explicit DeviceMesh(std::shared_ptr<comm::internal::MeshState> state);

 private:
  std::shared_ptr<comm::internal::MeshState> state_;
};

/// A mesh of `shape` (row-major over ranks 0..world.size()-1, which must equal the product
/// of shape) on `world`. Collective over all ranks.
DeviceMesh init_device_mesh(const World& world, const std::string& device_type,
                            std::vector<int64_t> shape, std::vector<std::string> names = {});
/// The same on the default world recorded by init_process_group().
DeviceMesh init_device_mesh(const std::string& device_type, std::vector<int64_t> shape,
                            std::vector<std::string> names = {});

namespace comm {
/// Counters of this rank (all groups of the mesh's World).
CommStats stats(const DeviceMesh& mesh);
void reset_stats(const DeviceMesh& mesh);
}  // namespace comm

}  // namespace hyper
