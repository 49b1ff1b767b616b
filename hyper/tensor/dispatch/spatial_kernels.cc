// Convolution, pooling, upsampling, padding and the batch / group norms of DTensor tensors
// (see spatial_kernels.h).
#include "hyper/tensor/dispatch/spatial_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/spatial_rules.h"
#include "hyper/tensor/dispatch/index_rules.h"
#include "hyper/tensor/dispatch/linear_kernels.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

using Locals = std::vector<at::Tensor>;

// ---- convolution -------------------------------------------------------------------------------

std::shared_ptr<LocalOp> conv_call(const c10::OperatorHandle&, const std::string& name,
                                   const std::vector<c10::IValue>& a) {
  const at::Tensor input = a[0].toTensor(), weight = a[1].toTensor();
  const std::optional<at::Tensor> bias = opt_tensor(a[2]);
  ConvParams c;
  c.stride = a[3].toIntVector();
  c.padding = a[4].toIntVector();
  c.dilation = a[5].toIntVector();
  c.transposed = a[6].toBool();
  c.output_padding = a[7].toIntVector();
  c.groups = a[8].toInt();
  std::optional<ArgLayout> bl;
  if (bias) bl = sized(*bias);
  const Propagation p = propagate_convolution(name, sized(input), sized(weight), bl, c);
  auto call = std::make_shared<LocalOp>();
  call->name = name;
  call->ins = {input, weight};
  if (bias) call->ins.push_back(*bias);
  for (const auto& l : p.inputs) call->in.push_back(*l);
  call->out = {p.output};
  call->diff_out = {true};
  call->ref = first_dtensor({input, weight, bias.value_or(at::Tensor())});
  const int64_t ch = input.dim() == weight.dim() ? 1 : 0;
  const int64_t per_group = input.size(ch) / c.groups;
  call->f = [c, ch, per_group](const Locals& l) -> Locals {
    const std::optional<at::Tensor> b = l.size() > 2 ? std::optional<at::Tensor>(l[2]) : std::nullopt;
    return {at::convolution(l[0], l[1], b, c.stride, c.padding, c.dilation, c.transposed,
                            c.output_padding, conv_local_groups(c.groups, l[0].size(ch), per_group))};
  };
  return call;
}

// ---- ops along the spatial dims ------------------------------------------------------------------

struct Spatial {
  int64_t dims;  ///< the last `dims` dims are the spatial ones
  bool linear;   ///< a Partial(sum/avg) passes
  bool indices;  ///< a second output: max pools' indices
  int64_t min_rank = 0;  ///< the input's fewest dims (0: dims + 1, channels before them)
};

const std::map<std::string, Spatial>& spatial_ops() {
  static const std::map<std::string, Spatial> ops = [] {
    std::map<std::string, Spatial> m;
    for (int64_t k = 1; k <= 3; ++k) {
      const std::string d = std::to_string(k) + "d";
      m["aten::max_pool" + d] = {k, false, false};
      m["aten::max_pool" + d + "_with_indices"] = {k, false, true};
      m["aten::avg_pool" + d] = {k, true, false};
      m["aten::adaptive_max_pool" + d] = {k, false, true};
      m["aten::upsample_nearest" + d] = {k, true, false};
      m["aten::_upsample_nearest_exact" + d] = {k, true, false};
      m["aten::reflection_pad" + d] = {k, true, false};
      m["aten::replication_pad" + d] = {k, true, false};
    }
    m["aten::adaptive_avg_pool1d"] = {1, true, false};
    m["aten::_adaptive_avg_pool2d"] = {2, true, false};
    m["aten::_adaptive_avg_pool3d"] = {3, true, false};
    m["aten::upsample_linear1d"] = {1, true, false};
    m["aten::upsample_bilinear2d"] = {2, true, false};
    m["aten::_upsample_bilinear2d_aa"] = {2, true, false};
    m["aten::upsample_bicubic2d"] = {2, true, false};
    m["aten::_upsample_bicubic2d_aa"] = {2, true, false};
    m["aten::upsample_trilinear3d"] = {3, true, false};
    // Channels and the plane rearranged together: the last 3 dims.
    m["aten::pixel_shuffle"] = {3, true, false, 3};
    m["aten::pixel_unshuffle"] = {3, true, false, 3};
    return m;
  }();
  return ops;
}

/// `op` called (boxed) with `args`, argument 0 replaced by `self`: its tensor outputs.
Locals call_with(const c10::OperatorHandle& op, std::vector<c10::IValue> args, const at::Tensor& self) {
  args[0] = self;
  op.callBoxed(args);
  Locals r;
  for (const c10::IValue& v : args) r.push_back(v.toTensor());
  return r;
}

std::shared_ptr<LocalOp> spatial_call(const c10::OperatorHandle& op, const std::string& name,
                                      const std::vector<c10::IValue>& a) {
  const Spatial s = spatial_ops().at(name);
  const at::Tensor self = a[0].toTensor();
  const DTensor dt = dtensor_of(self);
  const int64_t rank = self.dim();
  auto where = [&] { return describe_args(name, arg_layouts(a.data(), a.size())); };
  const int64_t min_rank = s.min_rank > 0 ? s.min_rank : s.dims + 1;
  HYPER_CHECK_VALUE(rank >= min_rank, where(), ": expected an input of at least ", min_rank,
                    " dims", s.min_rank > 0 ? "" : " (channels, then the spatial dims)", ", got ",
                    rank);
  // The output's spatial sizes: the op on one plane (every non-spatial dim 1) of zeros, which
  // also raises ATen's errors for the arguments (a kernel larger than the input, ...).
  std::vector<int64_t> plane = self.sizes().vec();
  for (int64_t d = 0; d < rank - s.dims; ++d) plane[static_cast<size_t>(d)] = 1;
  Shape out_shape = self.sizes().vec();
  {
    at::NoGradGuard no_grad;
    const at::Tensor z = at::zeros(plane, dt.to_local().options());
    const at::Tensor o = call_with(op, a, z)[0];
    HYPER_CHECK_INTERNAL(o.dim() == rank, where(), ": the output has ", o.dim(), " dims");
    for (int64_t d = rank - s.dims; d < rank; ++d) out_shape[static_cast<size_t>(d)] = o.size(d);
  }
  std::vector<int64_t> dims;
  for (int64_t d = rank - s.dims; d < rank; ++d) dims.push_back(d);
  const Propagation p = propagate_along_dims(name, arg_layout(self), dims, s.linear, out_shape);
  auto call = std::make_shared<LocalOp>();
  call->name = name;
  call->ins = {self};
  call->in = {*p.inputs[0]};
  call->out = {p.output};
  call->diff_out = {true};
  if (s.indices) {
    call->out.push_back(p.output);
    call->diff_out.push_back(false);
  }
  call->ref = dt;
  const Layout out = p.output;
  const int64_t idx = dt.mesh_index();
  call->f = [op, a, s, out, idx](const Locals& l) -> Locals {
    if (l[0].numel() > 0) return call_with(op, a, l[0]);
    // A rank holding no elements: ATen's pools refuse empty channels; nothing to compute.
    const Shape shape = out.local_shape(idx);
    Locals r = {at::zeros(shape, l[0].options())};
    if (s.indices) r.push_back(at::zeros(shape, l[0].options().dtype(at::kLong)));
    return r;
  };
  return call;
}

// ---- batch_norm, group_norm (ops with rules) ----------------------------------------------------

/// [1, C, 1, ...] of a [N, C, ...] input's rank: how a per-channel vector broadcasts.
std::vector<int64_t> channel_view(int64_t c, int64_t rank) {
  std::vector<int64_t> v(static_cast<size_t>(rank), 1);
  v[1] = c;
  return v;
}

/// A statistic of the batch with its Partial mesh dims resolved (Replicate there, Shards kept):
/// the one reduction that the running statistics' update and the normalisation then share
/// (each would reduce the Partial again). Differentiable (relayout: the gradient passes on).
at::Tensor resolved(const at::Tensor& t) {
  if (!is_dtensor(t)) return t;
  const Layout& l = dtensor_of(t).layout();
  return l.has_partial() ? relayout(t, partials_replicated(l)) : t;
}

/// running = (1 - momentum) * running + momentum * value, in place (a plain buffer or a
/// DTensor of any layout: `value` is plain, Replicate).
void update_running(const at::Tensor& running, const at::Tensor& value, double momentum) {
  running.mul_(1.0 - momentum).add_(value.to(running.scalar_type()), momentum);
}

at::Tensor batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias,
                      const std::optional<at::Tensor>& running_mean,
                      const std::optional<at::Tensor>& running_var, bool training, double momentum,
                      double eps, bool /*cudnn_enabled*/) {
  const at::Tensor rm = running_mean.value_or(at::Tensor()), rv = running_var.value_or(at::Tensor());
  auto w = [&] { return describe_tensors("aten::batch_norm", {input, weight, bias, rm, rv}); };
  const int64_t rank = input.dim();
  HYPER_CHECK_VALUE(rank >= 2, w(), ": expected an input of at least 2 dims [N, C, ...], got ",
                    rank);
  const int64_t c = input.size(1);
  std::vector<int64_t> dims = {0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  const std::vector<int64_t> view = channel_view(c, rank);
  at::Tensor mean, var;
  if (training) {
    const int64_t per_channel = c > 0 ? input.numel() / c : 0;
    HYPER_CHECK_VALUE(per_channel != 1, w(), ": expected more than 1 value per channel when "
                      "training, got input size ", input.sizes());
    mean = resolved(input.mean(dims));
    var = resolved(input.var(dims, /*unbiased=*/false, /*keepdim=*/false));
    if (per_channel > 1 && (rm.defined() || rv.defined())) {  // (an empty batch: no update)
      at::NoGradGuard no_grad;
      const double n = static_cast<double>(per_channel);
      if (rm.defined()) update_running(rm, whole(mean.detach()), momentum);
      if (rv.defined()) update_running(rv, whole(var.detach()) * (n / (n - 1)), momentum);
    }
  } else {
    HYPER_CHECK_VALUE(rm.defined() && rv.defined(), w(), ": running_mean and running_var must "
                      "be defined in evaluation mode");
    mean = rm;
    var = rv;
  }
  at::Tensor out = (input - mean.reshape(view)) * at::rsqrt(var.reshape(view) + eps);
  if (weight && weight->defined()) out = out * weight->reshape(view);
  if (bias && bias->defined()) out = out + bias->reshape(view);
  // ATen returns the input's dtype (bf16 activations beside fp32 statistics and affine).
  return out.scalar_type() == input.scalar_type() ? out : out.to(input.scalar_type());
}

at::Tensor group_norm(const at::Tensor& input, int64_t groups,
                      const std::optional<at::Tensor>& weight,
                      const std::optional<at::Tensor>& bias, double eps, bool /*cudnn_enabled*/) {
  auto w = [&] { return describe_tensors("aten::group_norm", {input, weight, bias}); };
  const int64_t rank = input.dim();
  HYPER_CHECK_VALUE(rank >= 2, w(), ": expected an input of at least 2 dims [N, C, ...], got ",
                    rank);
  const int64_t n = input.size(0), c = input.size(1);
  HYPER_CHECK_VALUE(groups > 0 && c % groups == 0, w(), ": expected the number of channels ", c,
                    " to be divisible by num_groups=", groups);
  const at::Tensor x = input.reshape({n, groups, -1});
  const at::Tensor mean = x.mean({2}, /*keepdim=*/true);
  const at::Tensor var = x.var({2}, /*unbiased=*/false, /*keepdim=*/true);
  at::Tensor out = ((x - mean) * at::rsqrt(var + eps)).reshape(input.sizes());
  const std::vector<int64_t> view = channel_view(c, rank);
  if (weight && weight->defined()) out = out * weight->reshape(view);
  if (bias && bias->defined()) out = out + bias->reshape(view);
  return out.scalar_type() == input.scalar_type() ? out : out.to(input.scalar_type());
}

}  // namespace

const KernelFamily& spatial_kernels() {
  using K = KernelKey;
  static const KernelFamily f = [] {
    KernelFamily k{"spatial", /*serves_out=*/true, {
        HYPER_LOCAL_OP_KERNEL("aten::convolution", conv_call),
        HYPER_KERNEL("aten::batch_norm", K::kBoth, batch_norm),
        HYPER_KERNEL("aten::group_norm", K::kBoth, group_norm),
    }};
    // The ops along the spatial dims: their lines are spatial_ops()'s, above.
    for (const auto& [name, traits] : spatial_ops()) {
      k.kernels.push_back(boxed_kernel<&local_op_kernel<&spatial_call, false>>(name.c_str(), K::kDTensor));
      k.kernels.push_back(boxed_kernel<&local_op_kernel<&spatial_call, true>>(name.c_str(), K::kAutograd));
    }
    return k;
  }();
  return f;
}

}  // namespace hyper::dispatch
