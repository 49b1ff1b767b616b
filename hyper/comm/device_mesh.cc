#include "hyper/comm/device_mesh.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>

#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/internal/state.h"
#include "hyper/core/errors.h"

namespace hyper {

namespace {

c10::DeviceType parse_device(const std::string& name) {
  if (name == "cpu") return c10::DeviceType::CPU;
  if (name == "cuda") return c10::DeviceType::CUDA;
  throw hyper::ValueError(hyper::internal::str_cat("DeviceMesh: unknown device type \"", name,
                                                   "\" (expected \"cpu\" or \"cuda\")"));
}

const comm::internal::MeshState& ms(const std::shared_ptr<comm::internal::MeshState>& s) {
  HYPER_CHECK_VALUE(s != nullptr, "use of an undefined hyper::DeviceMesh");
  return *s;
}

std::string ranks_key(const std::vector<int>& sorted) {
  std::ostringstream os;
  for (std::size_t i = 0; i < sorted.size(); ++i) os << (i ? "," : "") << sorted[i];
  return os.str();
}

}  // namespace

DeviceMesh::DeviceMesh(std::shared_ptr<comm::internal::MeshState> state)
    : state_(std::move(state)) {}

DeviceMesh::DeviceMesh(const World& world, const std::string& device_type,
                       MeshTopology topology) {
  HYPER_CHECK_VALUE(world.defined(), "DeviceMesh: undefined World");
  // Taken first, so that ranks failing the checks below stay in step with the others.
  const int64_t id = world.next_mesh_id();
  const auto device = parse_device(device_type);
  const int rank = world.rank();
  for (int r : topology.ranks()) {
    HYPER_CHECK_VALUE(r >= 0 && r < world.size(), "DeviceMesh ", topology.to_string(), ": rank ", r,
                      " is not in the world of size ", world.size());
  }
  HYPER_CHECK_VALUE(topology.contains(rank), "DeviceMesh ", topology.to_string(), ": rank ", rank,
                    " is not part of the mesh");
  auto s = std::make_shared<comm::internal::MeshState>(
      comm::internal::MeshState{world, topology, device, device_type, {}, rank});
  for (int64_t d = 0; d < topology.ndim(); ++d) {
    const auto groups = topology.groups_along(d);
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto& members = groups[g];
      bool mine = false;
      for (int r : members) mine = mine || r == rank;
      if (!mine) continue;
      std::ostringstream key;
      key << "mesh" << id << "/dim" << d << "/group" << g;
      s->groups.push_back(world.new_group(members, key.str(), device));
    }
  }
  HYPER_CHECK_INTERNAL(static_cast<int64_t>(s->groups.size()) == topology.ndim(), "DeviceMesh ",
                       topology.to_string(), " made ", s->groups.size(), " groups");
  s->shared->id = id;
  // The whole-mesh group of an N-D mesh that is not the world is made now, while every
  // member is here (collective-safe); a mesh spanning the world uses World::group().
  if (topology.ndim() > 1 && topology.size() != world.size()) {
    std::vector<int> sorted = topology.ranks();
    std::sort(sorted.begin(), sorted.end());
    std::ostringstream key;
    key << "mesh" << id << "/all";
    s->shared->multi_dim_groups[ranks_key(sorted)] =
        world.new_group(topology.ranks(), key.str(), device);
  }
  state_ = std::move(s);
}

int64_t DeviceMesh::ndim() const { return ms(state_).topology.ndim(); }
int64_t DeviceMesh::size() const { return ms(state_).topology.size(); }
int64_t DeviceMesh::size(int64_t dim) const { return ms(state_).topology.size(dim); }
std::vector<int64_t> DeviceMesh::get_coordinate() const {
  const auto& s = ms(state_);
  return s.topology.coordinate_of(s.rank);
}
int64_t DeviceMesh::get_local_rank(int64_t dim) const {
  const auto& s = ms(state_);
  return s.topology.coordinate_of(s.rank)[s.topology.normalize_dim(dim)];
}
int64_t DeviceMesh::get_local_rank(const std::string& dim_name) const {
  return get_local_rank(ms(state_).topology.dim_index(dim_name));
}
int DeviceMesh::get_rank() const { return ms(state_).rank; }
comm::Group DeviceMesh::get_group(int64_t dim) const {
  const auto& s = ms(state_);
  return s.groups[s.topology.normalize_dim(dim)];
}
comm::Group DeviceMesh::get_group(const std::string& dim_name) const {
  return get_group(ms(state_).topology.dim_index(dim_name));
}
comm::Group DeviceMesh::get_mesh_group() const {
  const auto& s = ms(state_);
  if (s.topology.ndim() == 1) return s.groups[0];
  if (s.topology.size() == s.world.size()) return s.world.group();
  std::vector<int> sorted = s.topology.ranks();
  std::sort(sorted.begin(), sorted.end());
  const std::string k = ranks_key(sorted);
  // Held while creating: this rank's other users of the same mesh wait for the one group.
  std::lock_guard<std::mutex> lock(s.shared->mu);
  auto it = s.shared->multi_dim_groups.find(k);
  if (it != s.shared->multi_dim_groups.end()) return it->second;
  HYPER_CHECK_VALUE(s.shared->id >= 0, "DeviceMesh::get_mesh_group: ", to_string(),
                    " was not made by the DeviceMesh constructor");
  std::ostringstream key;
  key << "mesh" << s.shared->id << "/ranks" << k;
  comm::Group g = s.world.new_group(sorted, key.str(), s.device_type);
  s.shared->multi_dim_groups.emplace(k, g);
  return g;
}

const std::shared_ptr<PlanCache>& DeviceMesh::plan_cache() const {
  return ms(state_).shared->plan_cache;
}

c10::DeviceType DeviceMesh::device_type() const { return ms(state_).device_type; }
const MeshTopology& DeviceMesh::topology() const { return ms(state_).topology; }
const World& DeviceMesh::world() const { return ms(state_).world; }

DeviceMesh DeviceMesh::operator[](const std::string& dim_name) const {
  return sub_mesh({dim_name});
}
DeviceMesh DeviceMesh::operator[](int64_t dim) const {
  const auto& s = ms(state_);
  const int64_t d = s.topology.normalize_dim(dim);
  auto sub = std::make_shared<comm::internal::MeshState>(s);
  sub->topology = s.topology.sub_mesh(s.rank, {d});
  sub->groups = {s.groups[d]};
  return DeviceMesh(std::move(sub));
}

DeviceMesh DeviceMesh::sub_mesh(const std::vector<std::string>& dim_names) const {
  const auto& s = ms(state_);
  std::vector<int64_t> dims;
  for (const auto& n : dim_names) dims.push_back(s.topology.dim_index(n));
  auto sub = std::make_shared<comm::internal::MeshState>(s);
  sub->topology = s.topology.sub_mesh(s.rank, dims);
  sub->groups.clear();
  for (int64_t d : dims) sub->groups.push_back(s.groups[d]);
  return DeviceMesh(std::move(sub));
}

std::string DeviceMesh::to_string() const {
  if (!state_) return "DeviceMesh(undefined)";
  std::ostringstream os;
  os << "DeviceMesh(" << state_->device_name << ", " << state_->topology.to_string()
     << ", rank=" << state_->rank << ")";
  return os.str();
}

bool DeviceMesh::operator==(const DeviceMesh& o) const {
  if (state_ == o.state_) return true;
  if (!state_ || !o.state_) return false;
  return state_->topology == o.state_->topology && state_->device_type == o.state_->device_type;
}

DeviceMesh init_device_mesh(const World& world, const std::string& device_type,
                            std::vector<int64_t> shape, std::vector<std::string> names) {
  MeshTopology topo(std::move(shape), std::move(names));
  HYPER_CHECK_VALUE(topo.size() == world.size(), "init_device_mesh: mesh ", topo.to_string(),
                    " has ", topo.size(), " ranks but the world has ", world.size());
  return DeviceMesh(world, device_type, std::move(topo));
}

DeviceMesh init_device_mesh(const std::string& device_type, std::vector<int64_t> shape,
                            std::vector<std::string> names) {
  return init_device_mesh(default_world(), device_type, std::move(shape), std::move(names));
}

DeviceMesh make_device_mesh(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                            const std::string& device_type, std::vector<int64_t> shape,
                            std::vector<std::string> names, const ProcessGroupOptions& options) {
  return init_device_mesh(make_world(std::move(store), rank, world_size, options), device_type,
                          std::move(shape), std::move(names));
}

DeviceMesh mesh_from_process_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                                   const std::string& device_type,
                                   const std::string& dim_name) {
  HYPER_CHECK_VALUE(pg, "mesh_from_process_group: null process group");
  const auto device = parse_device(device_type);
  World world = make_world(c10::intrusive_ptr<c10d::Store>(), pg->getRank(), pg->getSize());
  comm::Group g = comm::group_from_process_group(pg);
  g.state()->world_counters = world.state()->counters;
  {
    std::lock_guard<std::mutex> lock(world.state()->mu);
    world.state()->world_group = g;
    world.state()->world_group_made = true;
  }
  std::vector<std::string> names;
  if (!dim_name.empty()) names.push_back(dim_name);
  MeshTopology topo({static_cast<int64_t>(pg->getSize())}, names);
  auto s = std::make_shared<comm::internal::MeshState>(
      comm::internal::MeshState{world, topo, device, device_type, {g}, pg->getRank()});
  return DeviceMesh(std::move(s));
}

DeviceMesh mesh_from_process_groups(const World& world, const std::string& device_type,
                                    std::vector<int64_t> shape, std::vector<std::string> names,
                                    std::vector<c10::intrusive_ptr<c10d::ProcessGroup>> groups,
                                    std::vector<std::vector<int>> global_ranks) {
  HYPER_CHECK_VALUE(world.defined(), "mesh_from_process_groups: undefined World");
  const int64_t id = world.next_mesh_id();  // first, as DeviceMesh's constructor
  const auto device = parse_device(device_type);
  MeshTopology topo(std::move(shape), std::move(names));
  const std::string what = "mesh_from_process_groups " + topo.to_string();
  HYPER_CHECK_VALUE(topo.size() == world.size(), what, ": ", topo.size(),
                    " ranks but the world has ", world.size());
  HYPER_CHECK_VALUE(static_cast<int64_t>(groups.size()) == topo.ndim() &&
                        global_ranks.size() == groups.size(),
                    what, ": ", groups.size(), " process groups and ", global_ranks.size(),
                    " rank lists for ", topo.ndim(), " mesh dims");
  const int rank = world.rank();
  using comm::internal::ranks_to_string;
  auto s = std::make_shared<comm::internal::MeshState>(
      comm::internal::MeshState{world, topo, device, device_type, {}, rank});
  for (int64_t d = 0; d < topo.ndim(); ++d) {
    const auto& pg = groups[static_cast<size_t>(d)];
    const auto& ranks = global_ranks[static_cast<size_t>(d)];
    HYPER_CHECK_VALUE(pg, what, ": mesh dim ", d, " has no process group");
    const std::vector<int> want = topo.group_of(rank, d);
    HYPER_CHECK_VALUE(ranks == want, what, ": the process group of mesh dim ", d, " on rank ",
                      rank, " holds ranks ", ranks_to_string(ranks), ", the mesh's line is ",
                      ranks_to_string(want));
    HYPER_CHECK_VALUE(pg->getSize() == static_cast<int>(ranks.size()) &&
                          pg->getRank() == static_cast<int>(std::find(ranks.begin(), ranks.end(), rank) - ranks.begin()),
                      what, ": the process group of mesh dim ", d, " has size ", pg->getSize(),
                      " and rank ", pg->getRank(), ", expected size ", ranks.size(),
                      " with this rank (", rank, ") at its place in ", ranks_to_string(ranks));
    comm::Group g = comm::group_from_process_group(pg, ranks);
    g.state()->world_counters = world.state()->counters;
    s->groups.push_back(std::move(g));
  }
  s->shared->id = id;
  return DeviceMesh(std::move(s));
}

namespace comm {
CommStats stats(const DeviceMesh& mesh) { return stats_of(mesh.world()); }
void reset_stats(const DeviceMesh& mesh) { reset_stats_of(mesh.world()); }
}  // namespace comm

}  // namespace hyper
