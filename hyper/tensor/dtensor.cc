#include "hyper/tensor/dtensor.h"

#include <ATen/ATen.h>

#include <cstring>
#include <optional>
#include <ostream>
#include <sstream>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/comm/collectives.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/autograd.h"
#include "hyper/tensor/internal/checks.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/redistribute.h"

namespace hyper {

using namespace tensor_internal;

DTensor::DTensor(at::Tensor local, DeviceMesh mesh, std::shared_ptr<const Layout> layout,
                 std::shared_ptr<PlanCache> plans, std::optional<comm::Work> pending)
    : local_(std::move(local)),
      mesh_(std::move(mesh)),
      layout_(std::move(layout)),
      plans_(plans ? std::move(plans) : mesh_.plan_cache()),
      pending_(std::move(pending)) {}

bool DTensor::is_pending() const { return pending_ && !pending_->is_finished(); }

const DTensor& DTensor::wait() const {
  if (pending_) pending_->wait();
  return *this;
}

bool DTensor::wait(std::chrono::milliseconds timeout) const {
  return !pending_ || pending_->wait(timeout);
}

comm::Work DTensor::work() const {
  if (pending_) return *pending_;
  return comm::Work::completed(local_, "DTensor values");
}

int64_t DTensor::wait_count() const { return pending_ && pending_->is_finished() ? 1 : 0; }

void DTensor::on_ready(std::function<void()> callback) const {
  if (pending_) {
    pending_->add_callback([callback = std::move(callback)](const comm::Work&) { callback(); });
  } else {
    callback();
  }
}

void DTensor::check_defined(const char* what) const {
  HYPER_CHECK_VALUE(layout_ != nullptr, "DTensor::", what, " on an undefined DTensor");
}


namespace {

/// A local tensor is this rank's plain tensor: a DTensor tensor (the at::Tensor form of a
/// DTensor) is refused, naming its layout.
void check_not_dtensor(const at::Tensor& local, const char* what) {
  HYPER_CHECK_VALUE(!local.defined() || !is_dtensor(local), what, ": the local tensor is a DTensor "
                    "tensor (", dispatch::dtensor_of(local).layout().to_string(), "), not this rank's "
                    "plain tensor; use hyper::as_dtensor(t) for its DTensor, or its to_local()");
}

/// What `from_local(run_check=true)` compares across the ranks of the mesh, field by field;
/// a rank's record is these fields, then its local-check error ("" when none).
constexpr const char* kFromLocalFacts[] = {"mesh", "placements", "global shape", "dtype",
                                           "device type"};
constexpr size_t kFromLocalCompared = sizeof(kFromLocalFacts) / sizeof(kFromLocalFacts[0]);

std::string encode(const std::vector<std::string>& fields) {
  std::string out;
  for (const auto& f : fields) {
    const uint64_t n = f.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += f;
  }
  return out;
}

std::vector<std::string> decode(const uint8_t* p, int64_t n, int rank) {
  std::vector<std::string> out;
  int64_t at = 0;
  while (at < n) {
    uint64_t len = 0;
    HYPER_CHECK_INTERNAL(at + static_cast<int64_t>(sizeof len) <= n,
                         "from_local run_check: truncated record from rank ", rank);
    std::memcpy(&len, p + at, sizeof len);
    at += sizeof len;
    HYPER_CHECK_INTERNAL(len <= static_cast<uint64_t>(n - at),
                         "from_local run_check: truncated record from rank ", rank);
    out.emplace_back(reinterpret_cast<const char*>(p + at), len);
    at += static_cast<int64_t>(len);
  }
  return out;
}

/// Gathers every mesh rank's facts and outcome (two all_gather_v over the mesh group: the
/// record sizes, then the records; sizes given, so no backend-specific row exchange) and
/// throws the same ValueError on every rank when a rank's local checks failed or a rank's
/// facts differ from the first mesh rank's. Returns normally only when all agree.
void run_from_local_check(const at::Tensor& local, const DeviceMesh& mesh,
                          const std::vector<std::string>& mine) {
  const comm::Group group = mesh.get_mesh_group();
  const std::string bytes = encode(mine);
  at::Tensor t = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
  std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  if (local.defined() && !local.is_cpu()) t = t.to(local.device());
  // First the byte counts (one each), then the records.
  at::Tensor all;
  std::vector<int64_t> rows;
  {
    at::Tensor n = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
    if (local.defined() && !local.is_cpu()) n = n.to(local.device());
    const at::Tensor counts =
        comm::all_gather_v(n, group, std::vector<int64_t>(group.size(), 1)).cpu();
    for (int64_t i = 0; i < counts.numel(); ++i) rows.push_back(counts[i].item<int64_t>());
    all = comm::all_gather_v(t, group, rows).cpu();
  }
  const auto& ranks = group.ranks();
  std::vector<std::vector<std::string>> facts;
  int64_t at = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    facts.push_back(decode(all.data_ptr<uint8_t>() + at, rows[i], ranks[i]));
    HYPER_CHECK_INTERNAL(facts.back().size() == kFromLocalCompared + 1,
                         "from_local run_check: malformed record from rank ", ranks[i]);
    at += rows[i];
  }
  std::ostringstream why;
  for (size_t i = 0; i < facts.size(); ++i) {
    if (!facts[i].back().empty()) {
      why << "\n  rank " << ranks[i] << " failed its local checks: " << facts[i].back();
    }
  }
  for (size_t i = 1; i < facts.size(); ++i) {
    for (size_t f = 0; f < kFromLocalCompared; ++f) {
      if (facts[i][f] != facts[0][f]) {
        why << "\n  rank " << ranks[i] << " passed " << kFromLocalFacts[f] << " "
            << facts[i][f] << " but rank " << ranks[0] << " passed " << facts[0][f];
      }
    }
  }
  const std::string w = why.str();
  HYPER_CHECK_VALUE(w.empty(), "DTensor::from_local(run_check): the ranks of mesh ",
                    mesh.topology().to_string(), " disagree:", w);
}

}  // namespace

DTensor DTensor::from_local(const at::Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            std::optional<std::vector<int64_t>> shape, bool run_check) {
  if (!run_check) return from_local_unchecked(local, mesh, placements, std::move(shape));
  check_mesh(mesh, "DTensor::from_local");
  std::optional<DTensor> out;
  std::string error;
  try {
    out = from_local_unchecked(local, mesh, placements, shape);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::vector<std::string> facts = {
      mesh.topology().to_string(),
      hyper::to_string(placements),
      out ? shape_to_string(out->shape())
          : (shape ? shape_to_string(*shape) : std::string("(inferred, local checks failed)")),
      local.defined() ? std::string(c10::toString(local.scalar_type())) : std::string("undefined"),
      local.defined() ? c10::DeviceTypeName(local.device().type(), /*lower_case=*/true)
                      : std::string("undefined"),
      error};
  run_from_local_check(local, mesh, facts);
  return std::move(*out);
}

DTensor DTensor::from_local_unchecked(const at::Tensor& local, const DeviceMesh& mesh,
                                      const Placements& placements,
                                      std::optional<std::vector<int64_t>> shape) {
  check_mesh(mesh, "DTensor::from_local");
  check_device(local, mesh, "DTensor::from_local");
  check_not_dtensor(local, "DTensor::from_local");
  const MeshTopology& topo = mesh.topology();
  HYPER_CHECK_VALUE(static_cast<int64_t>(placements.size()) == topo.ndim(),
                    "DTensor::from_local: ", placements.size(), " placements ",
                    hyper::to_string(placements), " for the ", topo.ndim(), "-D mesh ", topo.to_string());
  bool ragged = false;
  for (const auto& p : placements) ragged = ragged || p.is_ragged_shard();
  const int64_t idx = mesh_index_of(mesh);
  if (ragged) {
    HYPER_CHECK_VALUE(shape.has_value(), "DTensor::from_local with ", hyper::to_string(placements),
                      " requires the global shape (pass shape=...): a ragged local tensor is "
                      "1-D and does not determine the global shape");
    check_shape(*shape, "global shape");
    Layout layout(topo, placements, *shape);
    const auto& info = *layout.ragged();
    const int64_t pos = topo.coordinate_at(idx)[info.mesh_dim];
    const Interval iv = layout.ragged_interval(idx);
    HYPER_CHECK_VALUE(local.dim() == 1, "DTensor::from_local: a RaggedShard local tensor must be "
                      "1-D (contiguous flat storage), got shape ",
                      shape_to_string(local.sizes().vec()));
    HYPER_CHECK_VALUE(local.is_contiguous(), "DTensor::from_local: a RaggedShard local tensor "
                      "must be contiguous (strides ", shape_to_string(local.strides().vec()), ")");
    HYPER_CHECK_VALUE(local.numel() == iv.size(), "local numel ", local.numel(),
                      " does not match rank ", pos, "'s RaggedShard interval ", iv.to_string(),
                      " (expected ", iv.size(), ")");
    return DTensor(local.view({-1}), mesh, std::make_shared<const Layout>(std::move(layout)),
                   nullptr);
  }
  std::vector<int64_t> global;
  if (shape) {
    global = *shape;
  } else {
    global = local.sizes().vec();
    for (int64_t m = 0; m < topo.ndim(); ++m) {
      const auto& p = placements[m];
      if (!p.is_shard()) continue;
      int64_t d = p.dim();
      if (d < 0) d += local.dim();
      HYPER_CHECK_VALUE(d >= 0 && d < local.dim(), "DTensor::from_local: ", p.to_string(),
                        " is out of range for a local tensor of shape ",
                        shape_to_string(local.sizes().vec()));
      global[d] *= topo.size(m);
    }
  }
  check_shape(global, "global shape");
  Layout layout(topo, placements, global);
  const auto expected = layout.local_shape(idx);
  HYPER_CHECK_VALUE(local.sizes().vec() == expected, "DTensor::from_local: local shape ",
                    shape_to_string(local.sizes().vec()), " does not match mesh index ", idx,
                    "'s box ", shape_to_string(expected), " of ", layout.to_string(),
                    shape ? "" : " (the global shape was inferred assuming even shards; pass "
                                 "shape= for uneven shards)");
  return DTensor(local, mesh, std::make_shared<const Layout>(std::move(layout)), nullptr);
}

DTensor DTensor::from_local_with_layout(const at::Tensor& local, const DeviceMesh& mesh,
                                        const Layout& layout, std::shared_ptr<PlanCache> plans) {
  check_mesh(mesh, "DTensor::from_local_with_layout");
  check_device(local, mesh, "DTensor::from_local_with_layout");
  check_not_dtensor(local, "DTensor::from_local_with_layout");
  HYPER_CHECK_VALUE(layout.mesh().shape() == mesh.topology().shape(),
                    "DTensor::from_local_with_layout: layout ", layout.to_string(),
                    " is not on mesh ", mesh.to_string());
  const int64_t idx = mesh_index_of(mesh);
  HYPER_CHECK_VALUE(local.numel() == layout.local_numel(idx), "DTensor::from_local_with_layout: "
                    "local numel ", local.numel(), " does not match mesh index ", idx, "'s ",
                    layout.local_numel(idx), " elements under ", layout.to_string());
  at::Tensor l = local;
  if (layout.is_ragged()) {
    HYPER_CHECK_VALUE(local.is_contiguous(), "DTensor::from_local_with_layout: a ragged local "
                      "tensor must be contiguous");
    l = local.view({-1});
  } else {
    HYPER_CHECK_VALUE(local.sizes().vec() == layout.local_shape(idx),
                      "DTensor::from_local_with_layout: local shape ",
                      shape_to_string(local.sizes().vec()), " is not mesh index ", idx, "'s box ",
                      shape_to_string(layout.local_shape(idx)), " of ", layout.to_string());
  }
  return DTensor(l, mesh, std::make_shared<const Layout>(layout), std::move(plans));
}

at::Tensor DTensor::to_local(std::optional<Placements> grad_placements) const {
  check_defined("to_local");
  wait();
  if (!grad_placements) return local_;
  Layout g(layout_->mesh(), *grad_placements, layout_->shape());
  const int64_t idx = mesh_index();
  HYPER_CHECK_VALUE(g.local_shape(idx) == layout_->local_shape(idx), "DTensor::to_local: grad "
                    "placements ", hyper::to_string(*grad_placements), " give mesh index ", idx,
                    " a local shape ", shape_to_string(g.local_shape(idx)),
                    " that differs from the DTensor's ", shape_to_string(layout_->local_shape(idx)));
  if (!local_.requires_grad()) return local_;
  if (g == grad_layout(*layout_) && grad_scale(*layout_, "to_local") == 1.0) return local_;
  return to_local_with_grad(local_, mesh_, *layout_, g, plans_);
}

at::Tensor DTensor::full_tensor(std::optional<Placements> grad_placements) const {
  check_defined("full_tensor");
  const DTensor rep = redistribute(mesh_, Placements(layout_->placements().size(), Replicate()));
  return rep.to_local(std::move(grad_placements));
}

DTensor DTensor::redistribute(const DeviceMesh& mesh, const Placements& placements,
                              bool async_op) const {
  check_defined("redistribute");
  check_mesh(mesh, "DTensor::redistribute");
  HYPER_CHECK_IMPLEMENTED(mesh == mesh_, "DTensor::redistribute to another mesh (",
                          mesh.to_string(), " from ", mesh_.to_string(), ") is not implemented");
  auto dst = std::make_shared<const Layout>(layout_->mesh(), placements, layout_->shape());
  if (*dst == *layout_) return *this;
  wait();
  if (async_op) {
    std::optional<comm::Work> pending;
    at::Tensor out = redistribute_autograd_async(local_, mesh_, *layout_, *dst, plans_, &pending);
    return DTensor(std::move(out), mesh_, std::move(dst), plans_, std::move(pending));
  }
  at::Tensor out = redistribute_autograd(local_, mesh_, *layout_, *dst, plans_);
  return DTensor(std::move(out), mesh_, std::move(dst), plans_);
}

const std::vector<int64_t>& DTensor::shape() const {
  check_defined("shape");
  return layout_->shape();
}
std::vector<int64_t> DTensor::local_shape() const {
  check_defined("local_shape");
  return local_.sizes().vec();
}
int64_t DTensor::numel() const {
  check_defined("numel");
  return layout_->numel();
}
const Placements& DTensor::placements() const {
  check_defined("placements");
  return layout_->placements();
}
const DeviceMesh& DTensor::device_mesh() const {
  check_defined("device_mesh");
  return mesh_;
}
const Layout& DTensor::layout() const {
  check_defined("layout");
  return *layout_;
}
int64_t DTensor::mesh_index() const {
  check_defined("mesh_index");
  return mesh_index_of(mesh_);
}
at::ScalarType DTensor::scalar_type() const {
  check_defined("scalar_type");
  return local_.scalar_type();
}
at::TensorOptions DTensor::options() const {
  check_defined("options");
  return local_.options();
}
bool DTensor::requires_grad() const {
  check_defined("requires_grad");
  return local_.requires_grad();
}
DTensor& DTensor::requires_grad_(bool requires_grad) {
  check_defined("requires_grad_");
  local_.requires_grad_(requires_grad);
  return *this;
}
at::Tensor DTensor::grad() const {
  check_defined("grad");
  return local_.grad();
}
DTensor DTensor::detach() const {
  check_defined("detach");
  return DTensor(local_.detach(), mesh_, layout_, plans_, pending_);
}

std::string DTensor::to_string() const {
  if (!layout_) return "DTensor(undefined)";
  std::ostringstream os;
  os << "DTensor(local_shape=" << shape_to_string(local_.sizes().vec()) << ", "
     << layout_->to_string() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DTensor& dt) { return os << dt.to_string(); }

}  // namespace hyper
