#include "hyper/fsdp/flat_bucket.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <numeric>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/layout.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::fsdp {

FlatBucket::FlatBucket(const DeviceMesh& mesh, const std::vector<at::Tensor>& params,
                       int64_t block, int64_t shard_dim)
    : mesh_(mesh) {
  HYPER_CHECK_VALUE(mesh.defined(), "FlatBucket: the mesh is undefined");
  shard_dim_ = shard_dim < 0 ? mesh.ndim() - 1 : shard_dim;
  HYPER_CHECK_VALUE(shard_dim_ >= 0 && shard_dim_ < mesh.ndim(), "FlatBucket: shard_dim ",
                    shard_dim, " of the ", mesh.ndim(), "-D mesh ", mesh.to_string());
  std::vector<int64_t> numels;
  std::vector<at::Tensor> locals;
  for (size_t p = 0; p < params.size(); ++p) {
    HYPER_CHECK_VALUE(params[p].defined(), "FlatBucket: parameter ", p, " is undefined");
    const bool dt = is_dtensor(params[p]);
    HYPER_CHECK_VALUE(dt == is_dtensor(params[0]), "FlatBucket: parameter ", p, " is ",
                      dt ? "" : "not ", "a DTensor, parameter 0 is ", dt ? "not" : "one",
                      " (a bucket is either tensor parallel on every parameter or on none)");
    locals.push_back(dt ? tensor_parallel_local(p, params[p]) : params[p]);
    const at::Tensor& t = locals.back();
    HYPER_CHECK_VALUE(t.scalar_type() == locals[0].scalar_type(), "FlatBucket: parameter ", p,
                      " is ", t.scalar_type(), ", parameter 0 ", locals[0].scalar_type(),
                      " (one dtype per bucket)");
    HYPER_CHECK_VALUE(t.device() == locals[0].device(), "FlatBucket: parameter ", p, " is on ",
                      t.device(), ", parameter 0 on ", locals[0].device());
    numels.push_back(t.numel());
    shapes_.emplace_back(t.sizes().begin(), t.sizes().end());
  }
  plan_ = plan_flat_bucket(numels, mesh.size(shard_dim_), block);
  rank_ = mesh.get_local_rank(shard_dim_);
  const auto options = params.empty() ? at::TensorOptions().dtype(at::kFloat)
                                      : locals[0].options().requires_grad(false);
  shard_ = at::empty({plan_.rank_units()[static_cast<size_t>(rank_)]}, options.layout(at::kStrided));
  at::NoGradGuard no_grad;
  int64_t at = 0;
  for (size_t p = 0; p < params.size(); ++p) {
    const auto [lo, hi] = plan_.param_range(static_cast<int64_t>(p), rank_);
    if (hi == lo) continue;
    shard_.narrow(0, at, hi - lo).copy_(locals[p].detach().reshape({-1}).narrow(0, lo, hi - lo));
    at += hi - lo;
  }
}

at::Tensor FlatBucket::tensor_parallel_local(size_t p, const at::Tensor& param) {
  const DTensor d = as_dtensor(param);
  HYPER_CHECK_VALUE(mesh_.ndim() == 2, "FlatBucket: parameter ", p, " is a DTensor on ",
                    d.device_mesh().to_string(), "; tensor-parallel parameters need a 2-D mesh "
                    "(data parallel x tensor parallel), got ", mesh_.to_string());
  const int64_t tp = 1 - shard_dim_;
  const DeviceMesh tp_mesh = mesh_[tp];
  HYPER_CHECK_VALUE(d.device_mesh() == tp_mesh, "FlatBucket: parameter ", p, " is a DTensor on ",
                    d.device_mesh().to_string(), ", not on mesh dim ", tp, " of ",
                    mesh_.to_string(), " (", tp_mesh.to_string(), ")");
  const Placement& q = d.placements()[0];
  HYPER_CHECK_VALUE(q.is_shard() || q.is_replicate(), "FlatBucket: parameter ", p, " is ",
                    q.to_string(), " on the tensor-parallel mesh; expected Shard or Replicate");
  const Layout& l = d.layout();
  for (int64_t i = 1; i < tp_mesh.size(); ++i)
    HYPER_CHECK_VALUE(l.local_numel(i) == l.local_numel(0), "FlatBucket: parameter ", p, " of "
                      "shape ", shape_to_string(l.shape()), " is ", q.to_string(), " over ",
                      tp_mesh.size(), " tensor-parallel ranks with shards of different sizes (",
                      l.local_numel(0), " and ", l.local_numel(i), " elements); the ranks of a "
                      "bucket's data-parallel groups must agree on its plan: use even shards");
  tp_placements_.push_back(q);
  global_shapes_.push_back(l.shape());
  return d.to_local().detach();
}

const Placement& FlatBucket::tp_placement(int64_t p) const {
  shape(p);  // the range check
  HYPER_CHECK_VALUE(tensor_parallel(), "FlatBucket: tp_placement of a bucket that is not "
                    "tensor parallel");
  return tp_placements_[static_cast<size_t>(p)];
}

const std::vector<int64_t>& FlatBucket::global_shape(int64_t p) const {
  if (!tensor_parallel()) return shape(p);
  shape(p);  // the range check
  return global_shapes_[static_cast<size_t>(p)];
}

const std::vector<int64_t>& FlatBucket::shape(int64_t p) const {
  HYPER_CHECK_VALUE(p >= 0 && p < plan_.params(), "FlatBucket: parameter ", p, " of ",
                    plan_.params());
  return shapes_[static_cast<size_t>(p)];
}

DTensor FlatBucket::param(int64_t p) const { return param_over(p, shard_); }

DTensor FlatBucket::param_over(int64_t p, const at::Tensor& flat) const {
  const std::vector<int64_t>& s = shape(p);
  HYPER_CHECK_VALUE(plan_.param_numel(p) > 0, "FlatBucket: parameter ", p,
                    " has no elements (no RaggedShard holds it)");
  HYPER_CHECK_VALUE(!s.empty(), "FlatBucket: parameter ", p,
                    " is 0-dim (a RaggedShard needs a dim to split)");
  HYPER_CHECK_VALUE(flat.defined() && flat.dim() == 1 && flat.numel() == shard_.numel(),
                    "FlatBucket param_over: expected a 1-D tensor of ", shard_.numel(),
                    " elements (this rank's shard), got ",
                    flat.defined() ? "sizes " + std::string(c10::str(flat.sizes()))
                                   : std::string("an undefined tensor"));
  const auto [lo, hi] = plan_.param_range(p, rank_);
  // Where parameter p's piece starts in this rank's shard (an empty piece: anywhere valid).
  const int64_t start = std::clamp<int64_t>(plan_.offset(p) + lo - plan_.bound(rank_), 0,
                                            shard_.numel() - (hi - lo));
  std::vector<int64_t> dims(s.size());
  std::iota(dims.begin(), dims.end(), 0);
  Placements placements(static_cast<size_t>(mesh_.ndim()), Replicate());
  placements[static_cast<size_t>(shard_dim_)] = RaggedShard(dims, plan_.param_units(p));
  if (tensor_parallel())  // the RaggedShard splits this rank's tensor-parallel shard
    placements[static_cast<size_t>(1 - shard_dim_)] = tp_placement(p);
  const Layout layout(mesh_.topology(), placements, global_shape(p));
  return DTensor::from_local_with_layout(flat.narrow(0, start, hi - lo), mesh_, layout);
}

comm::Work FlatBucket::unshard_async(std::optional<at::Tensor> output,
                                     std::optional<at::Tensor> source) const {
  if (source) {
    HYPER_CHECK_VALUE(source->defined() && source->dim() == 1 &&
                          source->numel() == shard_.numel() && source->device() == shard_.device(),
                      "FlatBucket unshard_async source: expected a 1-D tensor of ", shard_.numel(),
                      " elements on ", shard_.device(), " (this rank's shard), got ",
                      source->defined() ? source->toString() + " of sizes " +
                                              std::string(c10::str(source->sizes()))
                                        : std::string("an undefined tensor"));
  }
  const at::Tensor& in = source ? *source : shard_;
  if (output) check_full(*output, "unshard_async output", in.scalar_type());
  return comm::all_gather_v_async(in, mesh_.get_group(shard_dim_), plan_.rank_units(),
                                  std::move(output));
}

void FlatBucket::check_full(const at::Tensor& t, const char* what,
                            std::optional<at::ScalarType> dtype_) const {
  const at::ScalarType dtype = dtype_.value_or(shard_.scalar_type());
  HYPER_CHECK_VALUE(t.defined() && t.dim() == 1 && t.numel() == plan_.numel() &&
                        t.scalar_type() == dtype && t.device() == shard_.device() &&
                        t.is_contiguous(),
                    "FlatBucket ", what, ": expected a contiguous 1-D ", dtype, " tensor of ",
                    plan_.numel(), " elements on ", shard_.device(), ", got ",
                    t.defined() ? t.toString() : std::string("an undefined tensor"),
                    t.defined() ? " of sizes " + std::string(c10::str(t.sizes())) : std::string());
}

std::vector<at::Tensor> FlatBucket::views(const at::Tensor& full) const {
  check_full(full, "views", full.defined() ? full.scalar_type() : shard_.scalar_type());
  std::vector<at::Tensor> out;
  for (int64_t p = 0; p < plan_.params(); ++p)
    out.push_back(full.narrow(0, plan_.offset(p), plan_.param_numel(p)).view(shape(p)));
  return out;
}

at::Tensor FlatBucket::reduce_scatter_grad(const at::Tensor& flat_grad, comm::ReduceOp op) const {
  check_full(flat_grad, "reduce_scatter_grad gradient");
  HYPER_CHECK_VALUE(op == comm::ReduceOp::kSum || op == comm::ReduceOp::kAvg,
                    "FlatBucket reduce_scatter_grad: op ", comm::to_string(op),
                    " (expected sum or avg)");
  return replicas_reduced(
             comm::Work::completed(comm::reduce_scatter_v(flat_grad, plan_.rank_units(), op,
                                                          mesh_.get_group(shard_dim_))),
             op)
      .wait();
}

comm::Work FlatBucket::reduce_scatter_grads_async(const std::vector<at::Tensor>& grads,
                                                  comm::ReduceOp op,
                                                  std::optional<at::Tensor> output) const {
  HYPER_CHECK_VALUE(static_cast<int64_t>(grads.size()) == plan_.params(),
                    "FlatBucket reduce_scatter_grads: ", grads.size(), " gradients for ",
                    plan_.params(), " parameters");
  HYPER_CHECK_VALUE(op == comm::ReduceOp::kSum || op == comm::ReduceOp::kAvg,
                    "FlatBucket reduce_scatter_grads: op ", comm::to_string(op),
                    " (expected sum or avg)");
  const at::Tensor* first = nullptr;
  for (size_t p = 0; p < grads.size(); ++p) {
    const at::Tensor& g = grads[p];
    if (!g.defined()) continue;
    HYPER_CHECK_VALUE(g.sizes().vec() == shapes_[p], "FlatBucket reduce_scatter_grads: gradient ",
                      p, " has sizes ", g.sizes(), ", parameter ", p, " has ",
                      c10::IntArrayRef(shapes_[p]));
    if (first == nullptr) first = &g;
    HYPER_CHECK_VALUE(g.scalar_type() == first->scalar_type() && g.device() == first->device(),
                      "FlatBucket reduce_scatter_grads: gradient ", p, " is ", g.scalar_type(),
                      " on ", g.device(), ", an earlier one ", first->scalar_type(), " on ",
                      first->device(), " (one dtype and device per reduction)");
  }
  const at::TensorOptions options =
      (first != nullptr ? first->options() : shard_.options()).requires_grad(false);
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> flat(grads.size());
  for (size_t p = 0; p < grads.size(); ++p) {
    const at::Tensor& g = grads[p];
    if (!g.defined()) continue;
    if (g.is_contiguous()) {
      flat[p] = g.detach().view({-1});
    } else {
      flat[p] = g.detach().contiguous().view({-1});
      copied_bytes_ += g.numel() * g.element_size();
    }
  }
  const int n = static_cast<int>(mesh_.size(shard_dim_));
  std::vector<std::vector<at::Tensor>> pieces(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (int64_t p = 0; p < plan_.params(); ++p) {
      const auto [lo, hi] = plan_.param_range(p, r);
      if (hi == lo) continue;
      const at::Tensor& f = flat[static_cast<size_t>(p)];
      pieces[static_cast<size_t>(r)].push_back(f.defined() ? f.narrow(0, lo, hi - lo)
                                                           : at::zeros({hi - lo}, options));
    }
  }
  if (!output) output = at::empty({plan_.rank_units()[static_cast<size_t>(rank_)]}, options);
  return replicas_reduced(comm::reduce_scatter_pieces_async(pieces, op, mesh_.get_group(shard_dim_),
                                                          std::move(output)),
                          op);
}

comm::Work FlatBucket::replicas_reduced(comm::Work shard, comm::ReduceOp op) const {
  if (mesh_.ndim() == 1 || tensor_parallel()) return shard;
  // The replicas (every other mesh dim) hold the same shard of different gradients: reduced
  // over each of those dims in turn once the reduce-scatter is done.
  const DeviceMesh mesh = mesh_;
  const int64_t shard_dim = shard_dim_;
  return shard.then("FlatBucket gradient all-reduce over the replicas",
                    [mesh, shard_dim, op](const at::Tensor& t) {
                      at::Tensor r = t;
                      for (int64_t d = 0; d < mesh.ndim(); ++d)
                        if (d != shard_dim) r = comm::all_reduce(r, op, mesh.get_group(d));
                      return r;
                    });
}

}  // namespace hyper::fsdp
