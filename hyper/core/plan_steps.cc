#include "hyper/core/plan_steps.h"

#include <algorithm>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper {

const char* to_string(StepKind kind) {
  switch (kind) {
    case StepKind::kLocalCopy: return "local_copy";
    case StepKind::kAllReduce: return "all_reduce";
    case StepKind::kAllGatherV: return "all_gather_v";
    case StepKind::kAllToAllV: return "all_to_all_v";
  }
  return "?";
}

namespace {

std::string run(const FlatRun& r) {
  std::ostringstream os;
  os << "[" << r.begin << "," << r.end << ")";
  return os.str();
}

/// Mesh indices of the group along `dim` through `index`, by coordinate on `dim`.
std::vector<int64_t> group_along(const MeshTopology& topo, int64_t index, int64_t dim) {
  auto c = topo.coordinate_at(index);
  std::vector<int64_t> out;
  for (int64_t k = 0; k < topo.size(dim); ++k) {
    c[dim] = k;
    out.push_back(topo.index_at(c));
  }
  return out;
}

/// Every mesh index, in order.
std::vector<int64_t> whole_mesh(const MeshTopology& topo) {
  std::vector<int64_t> out(static_cast<std::size_t>(topo.size()));
  for (int64_t j = 0; j < topo.size(); ++j) out[j] = j;
  return out;
}

/// The mesh dim of a gather plan (see plan_steps), or -1.
int64_t gather_dim(const RedistributePlan& plan) {
  if (!plan.zero_fill.empty()) return -1;
  const auto& a = plan.src.placements();
  const auto& b = plan.dst.placements();
  int64_t dim = -1;
  for (std::size_t m = 0; m < a.size(); ++m) {
    if (a[m].is_replicate() && b[m].is_replicate()) continue;
    const bool gathers = b[m].is_replicate() &&
                         ((a[m].is_shard() && a[m].dim() == 0) || a[m].is_ragged_shard());
    if (!gathers || dim >= 0) return -1;
    dim = static_cast<int64_t>(m);
  }
  return dim;
}

/// Where `box` (inside `region`) starts in the rank's flat storage when its row-major
/// elements are one contiguous range there; nullopt otherwise. Contiguous iff every extent
/// before the last dim where the box is narrower than the region is 1.
std::optional<int64_t> contiguous_start(const FlatBox& region, const Box& box) {
  const auto& R = region.box;
  const std::size_t nd = R.sizes.size();
  std::size_t last = 0;  // one past the last dim where the box is narrower
  for (std::size_t d = 0; d < nd; ++d)
    if (box.sizes[d] != R.sizes[d]) last = d + 1;
  for (std::size_t d = 0; d + 1 < last; ++d)
    if (box.sizes[d] != 1) return std::nullopt;
  int64_t offset = region.local_start, stride = 1;
  for (std::size_t d = nd; d-- > 0;) {
    offset += (box.offsets[d] - R.offsets[d]) * stride;
    stride *= R.sizes[d];
  }
  return offset;
}

/// The run of flat storage the non-local pieces between `index` and the group's members
/// occupy (sending: pieces index -> member under src's regions; receiving: member -> index
/// under dst's regions), in member order then plan order, when they are consecutive.
std::optional<FlatRun> consecutive_run(const RedistributePlan& plan, int64_t index,
                                       const std::vector<int64_t>& group, bool sending) {
  const auto regions = sending ? plan.src.local_region(index) : plan.dst.local_region(index);
  int64_t begin = -1, next = -1;
  for (int64_t j : group) {
    for (const auto& p : plan.pieces) {
      if (p.is_local() || p.numel() == 0) continue;
      if (sending ? (p.src != index || p.dst != j) : (p.dst != index || p.src != j)) continue;
      const auto start =
          contiguous_start(regions[sending ? p.src_region : p.dst_region], p.box);
      if (!start) return std::nullopt;
      if (begin < 0) begin = next = *start;
      if (*start != next) return std::nullopt;
      next += p.numel();
    }
  }
  if (begin < 0) begin = next = 0;
  return FlatRun{begin, next};
}

}  // namespace

std::string PlanStep::to_string() const {
  std::ostringstream os;
  os << hyper::to_string(kind);
  if (kind == StepKind::kLocalCopy) return os.str();
  os << (mesh_dim >= 0 ? " on mesh dim " + std::to_string(mesh_dim) : std::string(" on the mesh"))
     << " group " << shape_to_string(group);
  switch (kind) {
    case StepKind::kAllReduce: os << " op " << reduce_op; break;
    case StepKind::kAllGatherV: os << " sizes " << shape_to_string(send_counts); break;
    case StepKind::kAllToAllV:
      os << " send " << shape_to_string(send_counts) << " recv " << shape_to_string(recv_counts);
      os << " send=" << (send_run ? "input" + run(*send_run) : std::string("pack"));
      os << " recv=" << (recv_run ? "output" + run(*recv_run) : std::string("unpack"));
      break;
    default: break;
  }
  return os.str();
}

bool PlanStep::operator==(const PlanStep& o) const {
  return kind == o.kind && mesh_dim == o.mesh_dim && group == o.group &&
         reduce_op == o.reduce_op && send_counts == o.send_counts &&
         recv_counts == o.recv_counts && send_run == o.send_run && recv_run == o.recv_run;
}

std::vector<PlanStep> plan_steps(const RedistributePlan& plan, int64_t index,
                                 const ElementType& type) {
  const MeshTopology& topo = plan.src.mesh();
  HYPER_CHECK_VALUE(index >= 0 && index < topo.size(), "plan_steps: mesh index ", index,
                    " is outside the mesh ", topo.to_string(), " (", topo.size(), " ranks)");
  HYPER_CHECK_VALUE(type.size >= 1, "plan_steps: element size ", type.size, " is not positive");
  if (plan.src == plan.dst) return {};
  std::vector<PlanStep> steps;
  if (!plan.all_reduce_dims.empty() && (plan.reduce_op != "avg" || type.floating)) {
    // A ring all_reduce moves 2(k-1)/k of the tensor per rank where the direct pieces move
    // k-1 tensors. avg of avgs over equal-sized groups is the avg over all.
    for (int64_t d : plan.all_reduce_dims) {
      PlanStep s;
      s.kind = StepKind::kAllReduce;
      s.mesh_dim = d;
      s.group = group_along(topo, index, d);
      s.reduce_op = plan.reduce_op;
      steps.push_back(std::move(s));
    }
    return steps;
  }
  if (plan.total_sent() == 0) {
    steps.emplace_back();  // kLocalCopy
    return steps;
  }
  const int64_t gdim = gather_dim(plan);
  if (gdim >= 0 && plan.dst.numel() * type.size > kAllGatherRingMaxBytes) {
    PlanStep s;
    s.kind = StepKind::kAllGatherV;
    s.mesh_dim = gdim;
    s.group = group_along(topo, index, gdim);
    for (int64_t j : s.group) s.send_counts.push_back(plan.src.local_numel(j));
    steps.push_back(std::move(s));
    return steps;
  }
  // all_to_all_v: on the group along the only mesh dim that pieces cross, else the mesh's.
  const int64_t nd = topo.ndim();
  std::vector<bool> moves(static_cast<std::size_t>(nd), false);
  for (const auto& p : plan.pieces) {
    if (p.is_local()) continue;
    const auto a = topo.coordinate_at(p.src), b = topo.coordinate_at(p.dst);
    for (int64_t d = 0; d < nd; ++d) moves[d] = moves[d] || a[d] != b[d];
  }
  int64_t count = 0, dim = 0;
  for (int64_t d = 0; d < nd; ++d)
    if (moves[d]) ++count, dim = d;
  PlanStep s;
  s.kind = StepKind::kAllToAllV;
  s.mesh_dim = count <= 1 ? dim : -1;
  s.group = count <= 1 ? group_along(topo, index, dim) : whole_mesh(topo);
  const auto sc = plan.send_counts(index), rc = plan.recv_counts(index);
  for (int64_t j : s.group) {
    s.send_counts.push_back(sc[j]);
    s.recv_counts.push_back(rc[j]);
  }
  int64_t covered_send = 0, covered_recv = 0;
  for (int64_t c : s.send_counts) covered_send += c;
  for (int64_t c : s.recv_counts) covered_recv += c;
  int64_t all_send = 0, all_recv = 0;
  for (int64_t c : sc) all_send += c;
  for (int64_t c : rc) all_recv += c;
  HYPER_CHECK_VALUE(covered_send == all_send && covered_recv == all_recv,
                    "plan_steps: mesh index ", index, " exchanges data outside its group ",
                    shape_to_string(s.group), " (internal planning error)");
  s.send_run = consecutive_run(plan, index, s.group, /*sending=*/true);
  if (!plan.src.has_partial() && !plan.is_zero_fill(index))
    s.recv_run = consecutive_run(plan, index, s.group, /*sending=*/false);
  steps.push_back(std::move(s));
  return steps;
}

std::string steps_to_string(const std::vector<PlanStep>& steps, const std::string& indent) {
  std::string out;
  if (steps.empty()) return indent + "(nothing: the layouts are identical)\n";
  for (const auto& s : steps) out += indent + s.to_string() + "\n";
  return out;
}

// ---- PlanCache ---------------------------------------------------------------------------

std::shared_ptr<const RedistributePlan> PlanCache::get(const Layout& src, const Layout& dst) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find({src, dst});
    if (it != plans_.end()) {
      ++hits_;
      return it->second.plan;
    }
  }
  auto plan = std::make_shared<const RedistributePlan>(plan_redistribute(src, dst));
  std::lock_guard<std::mutex> lock(mu_);
  ++misses_;
  auto& e = plans_[std::make_pair(src, dst)];
  if (!e.plan) e.plan = std::move(plan);
  return e.plan;
}

std::shared_ptr<const std::vector<PlanStep>> PlanCache::steps(const Layout& src,
                                                              const Layout& dst, int64_t index,
                                                              const ElementType& type) {
  const auto plan = get(src, dst);
  const StepKey key{index, type.size, type.floating};
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto& e = plans_[std::make_pair(src, dst)];
    auto it = e.steps.find(key);
    if (it != e.steps.end()) return it->second;
  }
  auto steps = std::make_shared<const std::vector<PlanStep>>(plan_steps(*plan, index, type));
  std::lock_guard<std::mutex> lock(mu_);
  return plans_[std::make_pair(src, dst)].steps.emplace(key, std::move(steps)).first->second;
}

int64_t PlanCache::hits() const {
  std::lock_guard<std::mutex> lock(mu_);
  return hits_;
}

int64_t PlanCache::misses() const {
  std::lock_guard<std::mutex> lock(mu_);
  return misses_;
}

void PlanCache::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  plans_.clear();
  hits_ = misses_ = 0;
}

}  // namespace hyper
