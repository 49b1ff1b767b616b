// at::linear with a DTensor argument (see linear_kernels.h).
#include "hyper/tensor/dispatch/linear_kernels.h"

#include <ATen/ATen.h>

#include <ATen/ops/linear_native.h>
#include <ATen/ops/matmul_native.h>
#include <torch/csrc/autograd/custom_function.h>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/linear_rules.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/boundary_function.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/dtensor_impl.h"

namespace hyper::dispatch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Identity on global values: forward relayouts the local (remembered on the input), backward
/// passes the gradient on in whatever layout it has.
struct RelayoutFn : public ::hyper::dispatch::BoundaryFunction<RelayoutFn> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& t, const Layout& target) {
    const auto* impl = static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl());
    const DTensor& d = impl->dtensor();
    return wrap_dtensor(DTensor::from_local_with_layout(impl->local_as(target, /*memo=*/true),
                                                     d.device_mesh(), target, d.plan_cache()));
  }
  static variable_list backward_body(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

// Per thread: the forward runs on the thread that calls the op (ranks in tests are threads).
thread_local bool g_overlap_gather = true;

/// The overlapped gather's output layout (linear_rules.h) when the switch is on and the gather
/// is not remembered on `in` already; nullopt otherwise (the ordinary path).
std::optional<Layout> overlap_layout(const DTensorImpl& in, const Layout& target,
                                     const at::Tensor& other) {
  if (!g_overlap_gather) return std::nullopt;
  std::optional<Layout> out = overlapped_gather_output(in.dtensor().layout(), target, arg_layout(other));
  if (!out || in.remembered(target).defined()) return std::nullopt;
  return out;
}

variable_list matmul_grads(AutogradContext* ctx, const at::Tensor& g, bool gather_input);

/// input @ other whose input gather overlaps the product of the local rows (overlap_layout):
/// the gather is issued asynchronously, this rank's rows are multiplied meanwhile, then the
/// other ranks' rows; the gathered input is remembered on `input` (q, k and v read it once).
/// The values are matmul's on the gathered input; the backward is matmul's, on DTensors.
struct OverlapMatmulFn : public ::hyper::dispatch::BoundaryFunction<OverlapMatmulFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& other,
                            const Layout& target, const Layout& out) {
    const auto* impl = static_cast<const DTensorImpl*>(input.unsafeGetTensorImpl());
    const DTensor& x = impl->dtensor();
    const Layout& from = x.layout();
    const int64_t d = from.placements()[0].dim();
    const DTensor pending = x.redistribute(x.device_mesh(), target.placements(), /*async_op=*/true);
    const at::Tensor o = dtensor_of(other).to_local();
    const at::Tensor own = at::matmul(x.to_local(), o);  // while the gather is in flight
    const at::Tensor full = pending.to_local();          // waits
    impl->remember(target, full);
    const int64_t me = x.device_mesh().get_local_rank(0);
    int64_t before = 0;
    for (int64_t r = 0; r < me; ++r) before += from.local_shape(r)[d];
    const int64_t mine = own.size(d), after = full.size(d) - before - mine;
    std::vector<at::Tensor> parts;
    if (before > 0) parts.push_back(at::matmul(full.narrow(d, 0, before), o));
    parts.push_back(own);
    if (after > 0) parts.push_back(at::matmul(full.narrow(d, before + mine, after), o));
    const at::Tensor local = parts.size() == 1 ? own : at::cat(parts, d);
    ctx->save_for_backward({input, other});
    return wrap_dtensor(DTensor::from_local_with_layout(local, x.device_mesh(), out, x.plan_cache()));
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    // The weight's gradient reads the input as gathered in forward (remembered; gathered
    // again only if it was written).
    variable_list g = matmul_grads(ctx, grads[0], /*gather_input=*/true);
    g.resize(4);  // target, out: no gradient
    return g;
  }
};

/// The P(sum) output layout when input @ other is a Rowwise projection that needs no relayout
/// (linear_rules.h's contracted_rowwise_output) and a gradient will flow: its backward gathers
/// the output gradient (sequence parallelism), which ContractedMatmulFn overlaps.
std::optional<Layout> contracted_product(const at::Tensor& input, const at::Tensor& other, const Layout& target) {
  if (!g_overlap_gather || !at::GradMode::is_enabled() || !(input.requires_grad() || other.requires_grad()))
    return std::nullopt;
  return contracted_rowwise_output(dtensor_of(input).layout(), target, arg_layout(other));
}

/// input @ other for contracted_product (forward: the local product, a P(sum) output, as the
/// ordinary path computes it), whose backward issues the output gradient's gather and
/// multiplies this rank's own rows while it is in flight (gathered_matmul with `other`
/// transposed: Megatron's sequence-parallel backward of a Rowwise projection); the other
/// operand's gradient reads the remembered gather. Any other gradient layout takes the rules'
/// path (the same ops on DTensors).
struct ContractedMatmulFn : public ::hyper::dispatch::BoundaryFunction<ContractedMatmulFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& other,
                            const Layout& out) {
    const DTensor& x = dtensor_of(input);
    const at::Tensor local = at::matmul(x.to_local(), dtensor_of(other).to_local());
    ctx->save_for_backward({input, other});
    return wrap_dtensor(DTensor::from_local_with_layout(local, x.device_mesh(), out, x.plan_cache()));
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    variable_list g = matmul_grads(ctx, grads[0], /*gather_input=*/false);
    g.resize(3);  // out: no gradient
    return g;
  }
};

/// input [.., n, k] @ other [k, m] through LibTorch's composite (fold, mm, unfold) on the
/// wrappers, for an `other` whose local tensor is column-major (torch::nn::Linear's
/// `weight.t()`): the backward is matmul_grads', whose gradient of `other` follows other's
/// local memory order. LibTorch's mm backward picks it from the wrapper's strides (row-major
/// whatever the local's), so the weight's gradient came out with a transposed local and every
/// optimizer op walked it transposed (or a hook copied it).
struct FoldedMatmulFn : public ::hyper::dispatch::BoundaryFunction<FoldedMatmulFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& input, const at::Tensor& other) {
    ctx->save_for_backward({input, other});
    return at::native::matmul(input, other);
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    variable_list g = matmul_grads(ctx, grads[0], /*gather_input=*/false);
    g.resize(3);  // out: no gradient
    return g;
  }
};

/// A DTensor tensor whose 2-D local is a transposed row-major tensor.
bool column_major_local(const at::Tensor& t) {
  if (!is_dtensor(t) || t.dim() != 2) return false;
  const at::Tensor l = dtensor_of(t).to_local();
  return !l.is_contiguous() && l.t().is_contiguous();
}

/// The gradients of input [.., n, k] @ other [k, m] (saved by the Function's forward, in that
/// order) for the output gradient `g`, with ops on DTensors. Where g's rows are gathered for the
/// product and overlap_layout applies (a sequence-sharded gradient), input's `g @ other^T` is
/// OverlapMatmulFn's collective matmul and other's `x^T @ g` reads the remembered gather;
/// otherwise both read one folded `g` [N, m] (as LibTorch's mm backward does, so a Partial
/// gradient is reduced once for both). x is the input, gathered to Replicate first when
/// `gather_input` (remembered from the forward).
variable_list matmul_grads(AutogradContext* ctx, const at::Tensor& g, bool gather_input) {
  const auto saved = ctx->get_saved_variables();
  const at::Tensor& input = saved[0];
  const at::Tensor& other = saved[1];
  const at::Tensor ot = other.t();
  std::optional<Layout> tg, out;
  if (is_dtensor(g) && g.dim() >= 2) {
    tg = matmul_input_layout(arg_layout(g), arg_layout(ot));
    out = overlap_layout(*static_cast<const DTensorImpl*>(g.unsafeGetTensorImpl()), *tg, ot);
    if (!out) tg.reset();
  }
  at::Tensor gi, go;
  const at::Tensor g2d = tg ? at::Tensor() : g.reshape({-1, g.size(-1)});
  if (ctx->needs_input_grad(0))
    gi = tg ? OverlapMatmulFn::apply(g, ot, *tg, *out) : g2d.mm(ot).view(input.sizes());
  if (ctx->needs_input_grad(1)) {
    at::Tensor x = input;
    if (gather_input) {
      const Layout& from = dtensor_of(input).layout();
      x = relayout(input, Layout(from.mesh(), Placements(1, Replicate()), from.shape()));
    }
    const at::Tensor x2d = x.flatten(0, -2);
    const at::Tensor rhs = tg ? relayout(g, *tg).flatten(0, -2) : g2d;
    // In other's memory order: (g^T x)^T for a column-major local (a weight.t()), so the
    // weight's own gradient is row-major; the same products and layouts either way. Not for a
    // Partial g: its reduction, remembered on g for input's product, would not be found on
    // the transposed view, and would run again.
    const bool partial = is_dtensor(rhs) && dtensor_of(rhs).layout().has_partial();
    go = column_major_local(other) && !partial ? at::mm(rhs.t(), x2d).t() : at::mm(x2d.t(), rhs);
  }
  return {gi, go};
}

}  // namespace

at::Tensor relayout(const at::Tensor& t, const Layout& target) {
  HYPER_CHECK_VALUE(is_dtensor(t), "hyper relayout: expected a DTensor tensor, got a plain one");
  if (dtensor_of(t).layout() == target) return t;
  return RelayoutFn::apply(t, target);
}

at::Tensor gathered_matmul(const at::Tensor& input, const at::Tensor& other, const Layout& target) {
  const auto* impl = static_cast<const DTensorImpl*>(input.unsafeGetTensorImpl());
  if (const auto out = overlap_layout(*impl, target, other))
    return OverlapMatmulFn::apply(input, other, target, *out);
  if (const auto out = contracted_product(input, other, target)) return ContractedMatmulFn::apply(input, other, *out);
  if (at::GradMode::is_enabled() && other.requires_grad() && column_major_local(other))
    return FoldedMatmulFn::apply(relayout(input, target), other);
  return at::native::matmul(relayout(input, target), other);
}

at::Tensor dtensor_linear(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  if (!is_dtensor(input) || !weight.defined())
    return at::native::linear(input, weight, bias);
  const bool has_bias = bias && bias->defined();
  const std::optional<ArgLayout> b =
      has_bias ? std::optional<ArgLayout>(arg_layout(*bias)) : std::nullopt;
  const Layout target = linear_input_layout(arg_layout(input), arg_layout(weight), b);
  if (target == dtensor_of(input).layout()) return at::native::linear(input, weight, bias);
  // The overlapped gather when the bias's add is local too (absent, plain, Replicate, or laid
  // out like the weight's rows): matmul + bias, as torch::nn::Linear computes it.
  const bool bias_local = bias_add_local(b, arg_layout(weight));
  if (bias_local && is_dtensor(weight) && weight.dim() == 2) {
    const auto* impl = static_cast<const DTensorImpl*>(input.unsafeGetTensorImpl());
    const at::Tensor wt = weight.t();
    if (const auto out = overlap_layout(*impl, target, wt)) {
      const at::Tensor y = OverlapMatmulFn::apply(input, wt, target, *out);
      return has_bias ? y + *bias : y;
    }
  }
  return at::native::linear(relayout(input, target), weight, bias);
}

}  // namespace hyper::dispatch

namespace hyper {
void set_overlap_linear_gather(bool on) { dispatch::g_overlap_gather = on; }
bool overlap_linear_gather() { return dispatch::g_overlap_gather; }
}  // namespace hyper
