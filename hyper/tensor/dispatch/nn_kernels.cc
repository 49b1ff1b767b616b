// Per-op kernels of the DTensor dispatch key for layer_norm and the decomposed reductions
// (see nn_kernels.h).
#include "hyper/tensor/dispatch/nn_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <optional>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/nn_rules.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

// ---- layer_norm -------------------------------------------------------------------------

std::vector<c10::IValue> layer_norm(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor input = a[0].toTensor();
  const std::vector<int64_t> shape = a[1].toIntVector();
  const auto w = opt_tensor(a[2]), b = opt_tensor(a[3]);
  const double eps = a[4].toDouble();
  auto opt_layout = [](const std::optional<at::Tensor>& t) {
    return t ? std::optional<ArgLayout>(arg_layout(*t)) : std::nullopt;
  };
  const LayerNormPropagation p =
      propagate_layer_norm(name, arg_layout(input), shape, opt_layout(w), opt_layout(b));
  const DTensor ref = first_dtensor({input, w ? *w : at::Tensor(), b ? *b : at::Tensor()});
  const at::Tensor x = local_as(input, p.input, ref);
  const at::Tensor lw = w ? local_as(*w, *p.weight, ref) : at::Tensor();
  const at::Tensor lb = b ? local_as(*b, *p.bias, ref) : at::Tensor();
  at::AutoDispatchBelowADInplaceOrView below;
  auto [o, mean, rstd] = at::native_layer_norm(x, shape, lw, lb, eps);
  return {wrap(o, ref, p.out), wrap(mean, ref, p.stats), wrap(rstd, ref, p.stats)};
}

std::vector<c10::IValue> layer_norm_backward(const std::string& name,
                                             const std::vector<c10::IValue>& a) {
  const at::Tensor g = a[0].toTensor(), input = a[1].toTensor();
  const std::vector<int64_t> shape = a[2].toIntVector();
  const at::Tensor mean = a[3].toTensor(), rstd = a[4].toTensor();
  const auto w = opt_tensor(a[5]), b = opt_tensor(a[6]);
  const auto mask_list = a[7].toBoolList();
  const std::array<bool, 3> mask = {mask_list.get(0), mask_list.get(1), mask_list.get(2)};
  auto opt_layout = [](const std::optional<at::Tensor>& t) {
    return t ? std::optional<ArgLayout>(arg_layout(*t)) : std::nullopt;
  };
  const LayerNormBackwardPropagation p = propagate_layer_norm_backward(
      name, arg_layout(g), arg_layout(input), shape, arg_layout(mean), arg_layout(rstd),
      opt_layout(w), opt_layout(b));
  const DTensor ref = first_dtensor({g, input, mean, rstd, w ? *w : at::Tensor(), b ? *b : at::Tensor()});
  const at::Tensor lg = local_as(g, p.grad_out, ref), x = local_as(input, p.input, ref);
  const at::Tensor lm = local_as(mean, p.stats, ref), lr = local_as(rstd, p.stats, ref);
  const at::Tensor lw = w ? local_as(*w, *p.weight, ref) : at::Tensor();
  const at::Tensor lb = b ? local_as(*b, *p.bias, ref) : at::Tensor();
  at::AutoDispatchBelowADInplaceOrView below;
  auto [gi, gw, gb] = at::native_layer_norm_backward(lg, x, shape, lm, lr, lw, lb, mask);
  auto out = [&](const at::Tensor& t, const Layout& l) {
    return t.defined() ? c10::IValue(wrap(t, ref, l)) : c10::IValue(at::Tensor());
  };
  return {out(gi, p.grad_input), out(gw, p.grad_param), out(gb, p.grad_param)};
}

// ---- decomposed reductions --------------------------------------------------------------

struct Reduced {
  std::vector<int64_t> dims;  ///< normalised, sorted (every dim when none were given)
  int64_t count = 1;          ///< elements reduced into each output element (global)
  bool all = false;           ///< every dim is reduced
  /// The dims as sum's argument: None for all dims (a RaggedShard local is flat: explicit
  /// dims would not name its dims).
  at::OptionalIntArrayRef sum_dims() const {
    return all ? at::OptionalIntArrayRef() : at::OptionalIntArrayRef(dims);
  }
  /// The dims as amax's argument: empty for all dims.
  at::IntArrayRef max_dims() const { return all ? at::IntArrayRef() : at::IntArrayRef(dims); }
};

/// The reduced dims of `self` (`dim` None or empty: all) and checks every reduction shares:
/// a floating input (ValueError; complex: NotImplementedError where `complex_ok` is false),
/// dims in range (ValueError), a RaggedShard input reduced over all dims only (or not at all
/// where `ragged_ok` is false).
Reduced reduced_dims(const std::string& name, const at::Tensor& self, const c10::IValue& dim,
                     bool keepdim, bool complex_ok, bool ragged_ok,
                     std::optional<at::ScalarType> dtype = std::nullopt) {
  const Layout& l = dtensor_of(self).layout();
  auto where = [&] { return describe_args(name, {ArgLayout::of(l)}); };
  const at::ScalarType t = dtype.value_or(self.scalar_type());
  HYPER_CHECK_IMPLEMENTED(complex_ok || !at::isComplexType(t), where(), ": ",
                          "complex inputs are not implemented");
  HYPER_CHECK_VALUE(at::isFloatingType(t) || at::isComplexType(t), where(), ": dtype ",
                    c10::toString(t), " is not a floating point type");
  const int64_t rank = self.dim();
  std::vector<bool> r(rank, false);
  std::vector<int64_t> given;
  if (!dim.isNone()) given = dim.toIntVector();
  for (int64_t d : given) {
    const int64_t k = normalized_dim(d, rank, where);
    if (rank > 0) r[k] = true;
  }
  if (given.empty()) std::fill(r.begin(), r.end(), true);
  Reduced out;
  for (int64_t d = 0; d < rank; ++d)
    if (r[d]) {
      out.dims.push_back(d);
      out.count *= self.size(d);
    }
  out.all = static_cast<int64_t>(out.dims.size()) == rank;
  if (l.is_ragged()) {
    HYPER_CHECK_IMPLEMENTED(ragged_ok, where(), ": a RaggedShard DTensor is not implemented for ",
                            "this op (fail-closed)");
    HYPER_CHECK_IMPLEMENTED(out.all && !keepdim, where(), ": a RaggedShard DTensor reduces only "
                            "over all dims, without keepdim (fail-closed)");
  }
  return out;
}

/// mean over `red` of the wrapper: sum (Partial where a reduced dim is sharded) / count.
at::Tensor mean_of(const at::Tensor& self, const Reduced& red, bool keepdim,
                   std::optional<at::ScalarType> dtype) {
  return at::sum(self, red.sum_dims(), keepdim, dtype) / static_cast<double>(red.count);
}

std::optional<at::ScalarType> opt_dtype(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return static_cast<at::ScalarType>(v.toInt());
}

// mean(self, *, dtype) (`all`) / mean.dim(self, dim, keepdim, *, dtype)
template <bool all>
std::vector<c10::IValue> mean(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  if (all) {
    const Reduced red = reduced_dims(name, self, c10::IValue(), false, true, true, opt_dtype(a[1]));
    return {mean_of(self, red, false, opt_dtype(a[1]))};
  }
  const Reduced red = reduced_dims(name, self, a[1], a[2].toBool(), true, true, opt_dtype(a[3]));
  return {mean_of(self, red, a[2].toBool(), opt_dtype(a[3]))};
}

// var.correction / std.correction (`is_std`)(self, dim?, *, correction?, keepdim)
template <bool is_std>
std::vector<c10::IValue> var_std(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const bool keepdim = a[3].toBool();
  const Reduced red = reduced_dims(name, self, a[1], keepdim, false, false);
  const double c = a[2].isNone() ? 1.0 : a[2].toScalar().toDouble();
  const at::Tensor d = self - mean_of(self, red, true, std::nullopt);
  const at::Tensor v =
      at::sum(d * d, red.sum_dims(), keepdim) / std::max(0.0, static_cast<double>(red.count) - c);
  return {is_std ? v.pow(0.5) : v};
}

// linalg_vector_norm(self, ord, dim?, keepdim, *, dtype?)
std::vector<c10::IValue> vector_norm(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const double ord = a[1].toScalar().toDouble();
  auto where = [&] {
    return describe_args(name, {arg_layout(self)}) + " ord=" + std::to_string(ord);
  };
  const auto dtype = opt_dtype(a[4]);
  HYPER_CHECK_IMPLEMENTED(!dtype || *dtype == self.scalar_type(), where(), ": a dtype argument (",
                          c10::toString(dtype.value_or(self.scalar_type())), ") other than the ",
                          "input's is not implemented");
  const bool keepdim = a[3].toBool();
  const Reduced red = reduced_dims(name, self, a[2], keepdim, false, true);
  if (ord == 0.0)  // the count of non-zeros (autograd's formula above gives no gradient)
    return {at::sum(self.ne(0), red.sum_dims(), keepdim).to(self.scalar_type())};
  if (std::isinf(ord))
    return {ord > 0 ? at::amax(at::abs(self), red.max_dims(), keepdim)
                    : at::amin(at::abs(self), red.max_dims(), keepdim)};
  if (ord == 1.0) return {at::sum(at::abs(self), red.sum_dims(), keepdim)};
  if (ord == 2.0) return {at::sum(self * self, red.sum_dims(), keepdim).pow(0.5)};
  return {at::sum(at::abs(self).pow(ord), red.sum_dims(), keepdim).pow(1.0 / ord)};
}

// ---- embedding --------------------------------------------------------------------------

// embedding(weight, indices, padding_idx, scale_grad_by_freq, sparse)
std::vector<c10::IValue> embedding(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor weight = a[0].toTensor(), indices = a[1].toTensor();
  const int64_t padding_idx = a[2].toInt();
  const bool scale = a[3].toBool(), sparse = a[4].toBool();
  auto where = [&] { return describe_args(name, {arg_layout(weight), arg_layout(indices)}); };
  HYPER_CHECK_IMPLEMENTED(!sparse, where(), ": sparse=true (a sparse gradient) is not implemented");
  const EmbeddingPropagation p = propagate_embedding(name, arg_layout(weight), arg_layout(indices));
  const DTensor ref = dtensor_of(weight);
  const at::Tensor lw = local_as(weight, p.weight, ref);
  const at::Tensor li = is_dtensor(indices) ? local_as(indices, *p.indices, ref) : indices;
  at::AutoDispatchBelowADInplaceOrView below;
  // Checked after the collectives above, so a rank with a bad id (sharded indices) does not
  // strand the others; the masked lookup would otherwise turn a bad id into zeros.
  const int64_t rows = weight.size(0);
  HYPER_CHECK_VALUE(li.numel() == 0 || (li.min().item<int64_t>() >= 0 && li.max().item<int64_t>() < rows),
                    where(), ": an index outside [0, ", rows, ")");
  at::Tensor out;
  if (!p.masked) {
    out = at::embedding(lw, li, padding_idx, scale, false);
  } else {
    const Box b = p.weight.local_box(ref.mesh_index());
    const int64_t off = b.offsets[0], len = b.sizes[0];
    const at::Tensor outside = at::logical_or(li < off, li >= off + len);
    std::vector<int64_t> os = li.sizes().vec();
    os.push_back(lw.size(1));
    out = len == 0 ? at::zeros(os, lw.options())
                   : at::embedding(lw, (li - off).masked_fill(outside, 0))
                         .masked_fill(outside.unsqueeze(-1), 0);
  }
  return {wrap(out, ref, p.output)};
}

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq)
std::vector<c10::IValue> embedding_backward(const std::string& name,
                                            const std::vector<c10::IValue>& a) {
  const at::Tensor g = a[0].toTensor(), indices = a[1].toTensor();
  const int64_t num_weights = a[2].toInt(), padding_idx = a[3].toInt();
  const bool scale = a[4].toBool();
  const EmbeddingPropagation p =
      propagate_embedding_backward(name, arg_layout(g), arg_layout(indices), num_weights);
  HYPER_CHECK_IMPLEMENTED(!(scale && p.sharded_rows),
                          describe_args(name, {arg_layout(g), arg_layout(indices)}),
                          ": scale_grad_by_freq with the index rows split across ranks (the "
                          "counts would be each rank's) is not implemented");
  const DTensor ref = dtensor_of(g);
  const at::Tensor lg = local_as(g, p.weight, ref);
  const at::Tensor li = local_as(indices, *p.indices, ref);  // plain indices: cut locally
  at::AutoDispatchBelowADInplaceOrView below;
  return {wrap(at::embedding_dense_backward(lg, li, num_weights, padding_idx, scale), ref, p.output)};
}

// ---- what clip_grad_norm_ and model code call ---------------------------------------------

// norm.Scalar(self, p): the vector norm of every element (torch::nn::utils::clip_grad_norm_
// calls it on each gradient), decomposed on the wrapper as linalg_vector_norm.
std::vector<c10::IValue> norm_scalar(const std::string&, const std::vector<c10::IValue>& a) {
  return {at::linalg_vector_norm(a[0].toTensor(), a[1].toScalar())};
}

// max(self) (`is_max`) / min(self) of every element: amax / amin over every dim on the wrapper.
template <bool is_max>
std::vector<c10::IValue> max_min_all(const std::string&, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  std::vector<int64_t> dims(static_cast<size_t>(self.dim()));
  for (int64_t d = 0; d < self.dim(); ++d) dims[static_cast<size_t>(d)] = d;
  return {is_max ? at::amax(self, dims) : at::amin(self, dims)};
}

// _safe_softmax(self, dim, dtype?) (scaled_dot_product_attention's math path): softmax, with
// the rows whose every element is -inf (fully masked) 0 instead of nan, as ATen's composite
// computes it, on the wrapper with ops that have rules (its `all` has none: a row is fully
// masked when it counts no element other than -inf). Autograd's formula for _safe_softmax
// runs above.
std::vector<c10::IValue> safe_softmax(const std::string&, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const int64_t dim = a[1].toInt();
  const auto dtype = a[2].toOptional<at::ScalarType>();
  const at::Tensor out = at::softmax(self, dim, dtype);
  const at::Tensor masked_rows =
      self.ne(-std::numeric_limits<double>::infinity()).sum(dim, /*keepdim=*/true).eq(0);
  return {at::where(masked_rows, at::zeros({}, out.options()), out)};
}

// logsumexp(self, dim, keepdim) as ATen computes it (amax kept, infinite maxima made 0,
// log of the sum of exp(self - max), plus the max), on the wrapper: over a sharded dim the
// max is a P(max) reduced by `where` (one small all_reduce), the sum a P(sum) reduced by
// `log` (another): the tensor itself never moves. Autograd's formula runs above. Integral
// inputs are computed in the default floating dtype (as ATen).
std::vector<c10::IValue> logsumexp(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const std::vector<int64_t> dims = a[1].toIntVector();
  const bool keepdim = a[2].toBool();
  HYPER_CHECK_VALUE(!dims.empty(), describe_args(name, {arg_layout(self)}),
                    ": logsumexp needs at least one dim");
  const at::Tensor x = at::isIntegralType(self.scalar_type(), /*includeBool=*/true)
                           ? self.to(c10::typeMetaToScalarType(c10::get_default_dtype()))
                           : self;
  at::Tensor maxes = at::amax(x, dims, /*keepdim=*/true);
  maxes = at::where(maxes.abs().eq(std::numeric_limits<double>::infinity()),
                    at::zeros({}, maxes.options()), maxes);
  const at::Tensor r = at::log(at::sum(at::exp(x - maxes), dims, keepdim));
  return {r + (keepdim ? maxes : maxes.squeeze(dims))};
}

// all / any (every element, one dim, some dims; None: every dim; an empty list: none, as
// ATen) as a count on the wrapper: all = no zero element, any = some non-zero one. Over a
// sharded dim the count is a P(sum) reduced by the comparison (one all_reduce of the
// counts). The result is bool (uint8 for a uint8 input, as ATen).
/// Which overload of all / any: (self), .dim(self, dim, keepdim), .dims(self, dim?, keepdim).
enum class Over { kEvery, kDim, kDims };

template <bool is_all, Over over>
std::vector<c10::IValue> all_any(const std::string&, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  std::optional<std::vector<int64_t>> dims;  // none: every dim
  bool keepdim = false;
  if (over == Over::kDim) {
    dims = std::vector<int64_t>{a[1].toInt()};
    keepdim = a[2].toBool();
  } else if (over == Over::kDims) {
    if (!a[1].isNone()) dims = a[1].toIntVector();
    keepdim = a[2].toBool();
  }
  at::Tensor r;
  if (dims && dims->empty()) {
    r = self.ne(0);  // no dim reduced: each element's truth
  } else {
    std::vector<int64_t> ds;
    if (dims) ds = *dims;
    else for (int64_t d = 0; d < self.dim(); ++d) ds.push_back(d);
    const at::Tensor count = (is_all ? self.eq(0) : self.ne(0)).sum(ds, keepdim);
    r = is_all ? count.eq(0) : count.gt(0);
  }
  return {self.scalar_type() == at::kByte ? r.to(at::kByte) : r};
}

// cat(tensors, dim): every operand to propagate_cat's layout, the local cat.
std::vector<c10::IValue> cat(const std::string& name, const std::vector<c10::IValue>& a) {
  const std::vector<at::Tensor> ts = a[0].toTensorVector();
  std::vector<ArgLayout> in;
  for (const auto& t : ts) in.push_back(arg_layout(t));
  const CatPropagation p = propagate_cat(name, in, a[1].toInt());
  DTensor ref;
  for (const auto& t : ts)
    if (!ref.defined() && is_dtensor(t)) ref = dtensor_of(t);
  std::vector<at::Tensor> locals;
  for (size_t i = 0; i < ts.size(); ++i) locals.push_back(local_as(ts[i], p.inputs[i], ref));
  at::AutoDispatchBelowADInplaceOrView below;
  return {wrap(at::cat(locals, p.dim), ref, p.output)};
}

// stack(tensors, dim): cat of the operands unsqueezed at dim, on the wrappers.
std::vector<c10::IValue> stack_op(const std::string&, const std::vector<c10::IValue>& a) {
  std::vector<at::Tensor> u;
  const int64_t dim = a[1].toInt();
  for (const auto& t : a[0].toTensorVector()) u.push_back(t.unsqueeze(dim));
  return {at::cat(u, dim < 0 ? dim + static_cast<int64_t>(u.empty() ? 1 : u[0].dim()) : dim)};
}

}  // namespace

const KernelFamily& nn_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"nn", /*serves_out=*/true, {
      HYPER_ARGS_KERNEL("aten::native_layer_norm", K::kDTensor, layer_norm),
      HYPER_ARGS_KERNEL("aten::native_layer_norm_backward", K::kDTensor, layer_norm_backward),
      HYPER_ARGS_KERNEL("aten::mean", K::kDTensor, mean<true>),
      HYPER_ARGS_KERNEL("aten::mean.dim", K::kDTensor, mean<false>),
      HYPER_ARGS_KERNEL("aten::var.correction", K::kDTensor, var_std<false>),
      HYPER_ARGS_KERNEL("aten::std.correction", K::kDTensor, var_std<true>),
      HYPER_ARGS_KERNEL("aten::linalg_vector_norm", K::kDTensor, vector_norm),
      HYPER_ARGS_KERNEL("aten::embedding", K::kDTensor, embedding),
      HYPER_ARGS_KERNEL("aten::embedding_dense_backward", K::kDTensor, embedding_backward),
      HYPER_ARGS_KERNEL("aten::norm.Scalar", K::kDTensor, norm_scalar),
      HYPER_ARGS_KERNEL("aten::max", K::kDTensor, max_min_all<true>),
      HYPER_ARGS_KERNEL("aten::min", K::kDTensor, max_min_all<false>),
      HYPER_ARGS_KERNEL("aten::cat", K::kDTensor, cat),
      HYPER_ARGS_KERNEL("aten::stack", K::kDTensor, stack_op),
      HYPER_ARGS_KERNEL("aten::_safe_softmax", K::kDTensor, safe_softmax),
      HYPER_ARGS_KERNEL("aten::logsumexp", K::kDTensor, logsumexp),
      HYPER_ARGS_KERNEL("aten::all", K::kDTensor, all_any<true, Over::kEvery>),
      HYPER_ARGS_KERNEL("aten::all.dim", K::kDTensor, all_any<true, Over::kDim>),
      HYPER_ARGS_KERNEL("aten::all.dims", K::kDTensor, all_any<true, Over::kDims>),
      HYPER_ARGS_KERNEL("aten::any", K::kDTensor, all_any<false, Over::kEvery>),
      HYPER_ARGS_KERNEL("aten::any.dim", K::kDTensor, all_any<false, Over::kDim>),
      HYPER_ARGS_KERNEL("aten::any.dims", K::kDTensor, all_any<false, Over::kDims>),
  }};
  return f;
}

}  // namespace hyper::dispatch
