// loss_parallel kernels of the DTensor dispatch key: softmax / log_softmax and nll_loss with
// the class dim sharded (see loss_kernels.h).
#include "hyper/tensor/dispatch/loss_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/cross_entropy_loss_native.h>
#include <ATen/ops/nll_loss_nd.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <optional>

#include "hyper/comm/collectives.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/dispatch/loss_rules.h"
#include "hyper/tensor/dispatch/nn_rules.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

/// `t` all_reduced over each of the mesh dims `dims` in turn.
at::Tensor all_reduce_over(at::Tensor t, comm::ReduceOp op, const DeviceMesh& mesh,
                           const std::vector<int64_t>& dims) {
  for (int64_t m : dims) t = comm::all_reduce(t, op, mesh.get_group(m));
  return t;
}

/// The mesh dims whose placement in `l` is Shard(dim).
std::vector<int64_t> mesh_dims_sharding(const Layout& l, int64_t dim) {
  std::vector<int64_t> r;
  for (size_t m = 0; m < l.placements().size(); ++m)
    if (l.placements()[m].is_shard() && l.placements()[m].dim() == dim)
      r.push_back(static_cast<int64_t>(m));
  return r;
}

int64_t normalize_dim(int64_t dim, int64_t rank) {
  return dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim;
}

// ---- softmax / log_softmax ----------------------------------------------------------------

// _softmax / _log_softmax (`log`)(self, dim, half_to_float)
template <bool log>
std::vector<c10::IValue> softmax_forward(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const int64_t dim = a[1].toInt();
  const bool half_to_float = a[2].toBool();
  const Propagation p = propagate_softmax(name, {arg_layout(self)}, dim);
  const DTensor ref = dtensor_of(self);
  const at::Tensor x = local_as(self, *p.inputs[0], ref);
  const int64_t d = normalize_dim(dim, self.dim());
  const std::vector<int64_t> across = mesh_dims_sharding(p.output, d);
  at::AutoDispatchBelowADInplaceOrView below;
  at::Tensor out;
  if (across.empty()) {
    out = log ? at::_log_softmax(x, dim, half_to_float) : at::_softmax(x, dim, half_to_float);
  } else {
    const at::Tensor xf = half_to_float ? x.to(at::kFloat) : x;
    at::Tensor mx;
    if (xf.dim() > 0 && xf.size(d) == 0) {  // a rank with none of the classes
      std::vector<int64_t> s = xf.sizes().vec();
      s[d] = 1;
      mx = at::full(s, -std::numeric_limits<double>::infinity(), xf.options());
    } else {
      mx = at::amax(xf, {d}, true);
    }
    mx = all_reduce_over(mx, comm::ReduceOp::kMax, ref.device_mesh(), across);
    const at::Tensor e = at::exp(xf - mx);
    const at::Tensor s =
        all_reduce_over(at::sum(e, {d}, true), comm::ReduceOp::kSum, ref.device_mesh(), across);
    out = log ? xf - mx - at::log(s) : e / s;
  }
  return {wrap(out, ref, p.output)};
}

// _softmax_backward_data / _log_softmax_backward_data (`log`)(grad_output, output, dim,
// input_dtype)
template <bool log>
std::vector<c10::IValue> softmax_backward(const std::string& name,
                                          const std::vector<c10::IValue>& a) {
  const at::Tensor g = a[0].toTensor(), y = a[1].toTensor();
  const int64_t dim = a[2].toInt();
  const auto dtype = static_cast<at::ScalarType>(a[3].toInt());
  const Propagation p = propagate_softmax(name, {arg_layout(g), arg_layout(y)}, dim);
  const DTensor ref = first_dtensor({g, y});
  const at::Tensor lg = local_as(g, *p.inputs[0], ref), ly = local_as(y, *p.inputs[1], ref);
  const int64_t d = normalize_dim(dim, y.dim());
  const std::vector<int64_t> across = mesh_dims_sharding(p.output, d);
  at::AutoDispatchBelowADInplaceOrView below;
  at::Tensor gi;
  if (across.empty()) {
    gi = log ? at::_log_softmax_backward_data(lg, ly, dim, dtype)
             : at::_softmax_backward_data(lg, ly, dim, dtype);
  } else {
    const DeviceMesh& mesh = ref.device_mesh();
    if (log) {
      gi = lg - at::exp(ly) * all_reduce_over(at::sum(lg, {d}, true), comm::ReduceOp::kSum, mesh, across);
    } else {
      const at::Tensor gy = lg * ly;
      gi = gy - ly * all_reduce_over(at::sum(gy, {d}, true), comm::ReduceOp::kSum, mesh, across);
    }
    gi = gi.to(dtype);
  }
  return {wrap(gi, ref, p.output)};
}

// ---- nll_loss -----------------------------------------------------------------------------

/// This rank's targets among its classes [off, off + len): `in_range` (not ignored and in the
/// range), `local` (the target as a local class index, clamped into range where not in_range)
/// and `weight` (the class weight of each target, 0 where not in_range).
struct Picks {
  at::Tensor in_range, local, weight;
};

Picks picks(const at::Tensor& t, const at::Tensor& lw, int64_t off, int64_t len,
            int64_t ignore_index, const at::TensorOptions& opts) {
  Picks p;
  p.in_range = at::logical_and(t != ignore_index, at::logical_and(t >= off, t < off + len));
  p.local = (t - off).clamp(0, std::max<int64_t>(len - 1, 0));
  if (!lw.defined()) p.weight = at::ones(t.sizes(), opts);
  else if (len == 0) p.weight = at::zeros(t.sizes(), opts);
  else p.weight = lw.index_select(0, p.local.reshape({-1})).view(t.sizes());
  p.weight = p.weight.masked_fill(p.in_range.logical_not(), 0);
  return p;
}

/// Targets that are neither ignore_index nor a class in [0, classes).
at::Tensor bad_targets(const at::Tensor& t, int64_t classes, int64_t ignore_index) {
  return at::logical_and(t != ignore_index, at::logical_or(t < 0, t >= classes));
}

std::string nll_where(const std::string& name, const at::Tensor& self, const at::Tensor& target,
                      const std::optional<at::Tensor>& w, int64_t reduction, int64_t ignore_index) {
  std::vector<ArgLayout> all{arg_layout(self), arg_layout(target)};
  if (w) all.push_back(arg_layout(*w));
  return describe_args(name, all) + " reduction=" + std::to_string(reduction) +
         " ignore_index=" + std::to_string(ignore_index);
}

// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index)
std::vector<c10::IValue> nll_forward(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor(), target = a[1].toTensor();
  const auto w = opt_tensor(a[2]);
  const int64_t reduction = a[3].toInt(), ignore_index = a[4].toInt();
  auto where = [&] { return nll_where(name, self, target, w, reduction, ignore_index); };
  const NllLossPropagation p = propagate_nll_loss(
      name, arg_layout(self), arg_layout(target),
      w ? std::optional<ArgLayout>(arg_layout(*w)) : std::nullopt, reduction);
  HYPER_CHECK_VALUE(!at::isFloatingType(target.scalar_type()) &&
                        !at::isComplexType(target.scalar_type()) && target.scalar_type() != at::kBool,
                    where(), ": target dtype ", c10::toString(target.scalar_type()),
                    " is not an integer type (class indices)");
  const int64_t c = p.class_dim, classes = self.size(c);
  if (!is_dtensor(target)) {  // every rank holds the whole target: the same verdict on each
    const at::Tensor bad = bad_targets(target, classes, ignore_index);
    HYPER_CHECK_VALUE(!bad.any().item<bool>(), where(), ": target ",
                      target.masked_select(bad).flatten()[0].item<int64_t>(),
                      " is out of bounds (classes [0, ", classes, "))");
  }
  const DTensor ref = dtensor_of(self);
  const DeviceMesh& mesh = ref.device_mesh();
  const at::Tensor x = local_as(self, p.input, ref), t = local_as(target, p.target, ref);
  const at::Tensor lw = w ? local_as(*w, *p.weight, ref) : at::Tensor();
  at::AutoDispatchBelowADInplaceOrView below;
  const Box b = p.input.local_box(ref.mesh_index());
  const int64_t off = b.offsets[c], len = b.sizes[c];
  const Picks pk = picks(t, lw, off, len, ignore_index, x.options());
  const at::Tensor picked =
      len == 0 ? at::zeros(t.sizes(), x.options()) : x.gather(c, pk.local.unsqueeze(c)).squeeze(c);
  const at::Tensor loss = (-picked * pk.weight).masked_fill(pk.in_range.logical_not(), 0);
  // A DTensor target's bad entries are counted on every rank (all_reduce) so all ranks throw.
  at::Tensor bad = is_dtensor(target) ? bad_targets(t, classes, ignore_index).sum().to(x.scalar_type())
                                      : at::zeros({}, x.options());
  at::Tensor out, total;
  if (reduction == at::Reduction::None) {
    if (is_dtensor(target)) bad = all_reduce_over(bad, comm::ReduceOp::kSum, mesh, p.reduce_mesh_dims);
    out = loss;
    total = at::zeros({}, x.options());
  } else {
    const at::Tensor s = all_reduce_over(at::stack({loss.sum(), pk.weight.sum(), bad}),
                                         comm::ReduceOp::kSum, mesh, p.reduce_mesh_dims);
    total = s.select(0, 1).clone();
    out = reduction == at::Reduction::Sum ? s.select(0, 0).clone() : s.select(0, 0) / total;
    bad = s.select(0, 2);
  }
  HYPER_CHECK_VALUE(bad.item<double>() == 0.0, where(), ": ", bad.item<double>(),
                    " target(s) out of bounds (classes [0, ", classes, "))");
  return {wrap(out, ref, p.output), wrap(total, ref, p.total_weight)};
}

// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?, reduction,
// ignore_index, total_weight)
std::vector<c10::IValue> nll_backward(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor g = a[0].toTensor(), self = a[1].toTensor(), target = a[2].toTensor();
  const auto w = opt_tensor(a[3]);
  const int64_t reduction = a[4].toInt(), ignore_index = a[5].toInt();
  const at::Tensor tw = a[6].toTensor();
  const NllLossBackwardPropagation p = propagate_nll_loss_backward(
      name, arg_layout(g), arg_layout(self), arg_layout(target),
      w ? std::optional<ArgLayout>(arg_layout(*w)) : std::nullopt, reduction, arg_layout(tw));
  const NllLossPropagation& f = p.forward;
  const DTensor ref = dtensor_of(self);
  const at::Tensor x = local_as(self, f.input, ref), t = local_as(target, f.target, ref);
  const at::Tensor lw = w ? local_as(*w, *f.weight, ref) : at::Tensor();
  const at::Tensor lg = local_as(g, p.grad_output, ref), ltw = local_as(tw, f.total_weight, ref);
  at::AutoDispatchBelowADInplaceOrView below;
  const int64_t c = f.class_dim;
  const Box b = f.input.local_box(ref.mesh_index());
  const int64_t off = b.offsets[c], len = b.sizes[c];
  at::Tensor gi = at::zeros_like(x, at::MemoryFormat::Contiguous);
  if (len > 0 && x.numel() > 0) {
    const Picks pk = picks(t, lw, off, len, ignore_index, x.options());
    at::Tensor v = -pk.weight * lg;
    if (reduction == at::Reduction::Mean) v = v / ltw;
    v = v.masked_fill(pk.in_range.logical_not(), 0);
    gi.scatter_(c, pk.local.unsqueeze(c), v.unsqueeze(c));
  }
  return {wrap(gi, ref, f.input)};
}

// ---- cross_entropy_loss (autograd key) ----------------------------------------------------

/// cross_entropy with class-index targets and label_smoothing > 0, as LibTorch's composite
/// computes it, on ops that have rules: (1 - ls) * nll + ls / C * smooth, smooth = -sum over the
/// classes of log_softmax (times the class weight), 0 at ignored targets, then summed (divided
/// for mean by the count of non-ignored targets, or with a weight by their total weight). The
/// composite's in-place masked_fill_ of the class sum (Partial where the classes are sharded)
/// becomes a product with the kept-target mask (linear: the Partial stays), and its gather of
/// the weight by the targets becomes nll_loss's own total weight (nll_loss_nd of -1s, summed).
at::Tensor cross_entropy_label_smoothing(const at::Tensor& self, const at::Tensor& target,
                                         const std::optional<at::Tensor>& w, int64_t reduction,
                                         const c10::SymInt& ignore_index, double ls) {
  const int64_t c = self.dim() == 1 ? 0 : 1;
  const at::Tensor input = at::log_softmax(self, c, self.scalar_type());
  const at::Tensor nll = at::nll_loss_nd_symint(input, target, w, reduction, ignore_index);
  // 1 where the target is kept, 0 where ignored (a DTensor target: ops with rules, no _to_copy).
  const at::Tensor keep = at::ones_like(target, input.options())
                              .masked_fill(target == ignore_index.expect_int(), 0.0);
  at::Tensor smooth;
  if (w) {
    std::vector<int64_t> shape(static_cast<size_t>(input.dim()), 1);
    shape[static_cast<size_t>(c)] = w->size(0);
    smooth = -(input * w->view(shape)).sum(c);
  } else {
    smooth = -input.sum(c);
  }
  smooth = smooth * keep;
  at::Tensor ret;
  if (reduction == at::Reduction::None) {
    ret = smooth;
  } else if (reduction == at::Reduction::Sum) {
    ret = smooth.sum();
  } else if (w) {
    at::Tensor minus_ones;
    {
      at::NoGradGuard no_grad;
      minus_ones = at::full_like(input, -1.0);
    }
    ret = smooth.sum() / at::nll_loss_nd_symint(minus_ones, target, w, at::Reduction::Sum, ignore_index);
  } else {
    ret = smooth.sum() / keep.sum();
  }
  return nll * (1 - ls) + ret * (ls / static_cast<double>(self.size(c)));
}

// cross_entropy_loss(self, target, weight?, reduction, ignore_index, label_smoothing)
void cross_entropy(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::vector<c10::IValue> a = pop_args(op, stack);  // dispatch_args.h
  const at::Tensor self = a[0].toTensor(), target = a[1].toTensor();
  const auto w = opt_tensor(a[2]);
  const int64_t reduction = a[3].toInt();
  const c10::SymInt ignore_index = a[4].toSymInt();
  const double label_smoothing = a[5].toDouble();
  // Class-index targets with smoothing: the decomposition above (the composite's would be
  // refused at its masked_fill_ of a Partial). Probability targets: the composite's ops.
  const bool index_target = !at::isFloatingType(target.scalar_type());
  stack->push_back(
      label_smoothing > 0.0 && index_target && self.dim() >= 1 && target.dim() == self.dim() - 1
          ? cross_entropy_label_smoothing(self, target, w, reduction, ignore_index, label_smoothing)
          : at::native::cross_entropy_loss_symint(self, target, w, reduction, ignore_index,
                                                  label_smoothing));
}

}  // namespace

const KernelFamily& loss_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"loss", /*serves_out=*/true, {
      HYPER_ARGS_KERNEL("aten::_softmax", K::kDTensor, softmax_forward<false>),
      HYPER_ARGS_KERNEL("aten::_log_softmax", K::kDTensor, softmax_forward<true>),
      HYPER_ARGS_KERNEL("aten::_softmax_backward_data", K::kDTensor, softmax_backward<false>),
      HYPER_ARGS_KERNEL("aten::_log_softmax_backward_data", K::kDTensor, softmax_backward<true>),
      HYPER_ARGS_KERNEL("aten::nll_loss_forward", K::kDTensor, nll_forward),
      HYPER_ARGS_KERNEL("aten::nll_loss2d_forward", K::kDTensor, nll_forward),
      HYPER_ARGS_KERNEL("aten::nll_loss_backward", K::kDTensor, nll_backward),
      HYPER_ARGS_KERNEL("aten::nll_loss2d_backward", K::kDTensor, nll_backward),
      HYPER_BOXED_KERNEL("aten::cross_entropy_loss", K::kAutograd, cross_entropy),
  }};
  return f;
}

}  // namespace hyper::dispatch
