// Dropout kernels of the DTensor dispatch key (see dropout_kernels.h).
#include "hyper/tensor/dispatch/dropout_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>
#include <tuple>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/dropout_rules.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/random.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

std::string where(const std::string& name, const at::Tensor& input, double p) {
  return describe_args(name, {arg_layout(input)}) + " p=" + std::to_string(p);
}

/// ATen's checks, with hyper's error types: p in [0, 1]; a floating input.
void check_args(const std::string& name, const at::Tensor& input, double p) {
  HYPER_CHECK_VALUE(p >= 0.0 && p <= 1.0, where(name, input, p),
                    ": dropout probability has to be between 0 and 1, but got ", p);
  HYPER_CHECK_VALUE(at::isFloatingType(input.scalar_type()), where(name, input, p), ": dtype ",
                    c10::toString(input.scalar_type()), " is not a floating point type");
}

// native_dropout(input, p, train?) -> (output, mask)
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const std::string name = "aten::native_dropout";
  check_args(name, input, p);
  const DTensor d = dtensor_of(input);
  const DeviceMesh& mesh = d.device_mesh();
  const DropoutPropagation pr = propagate_dropout(d.layout());  // dropout_rules.h
  const Layout& out_layout = pr.out;
  const Layout& mask_layout = pr.mask;
  at::AutoDispatchBelowADInplaceOrView below;
  at::Tensor local = d.to_local();
  if (out_layout != d.layout()) local = redistribute_local(local, mesh, d.layout(), out_layout);
  at::Tensor out, keep;
  if (train.has_value() && !*train) {
    out = local.clone();
    keep = at::ones_like(local, local.options().dtype(at::kBool));
  } else {
    const RngState r = draw_rng(mesh, d.numel());
    const at::Tensor index = global_linear_index(out_layout, d.mesh_index(), local.options());
    keep = uniform_at(index, r.seed, r.offset).ge(p);
    const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
    out = local.mul(keep).mul_(scale);
  }
  auto wrap = [&](const at::Tensor& l, const Layout& layout) {
    return wrap_dtensor(DTensor::from_local_with_layout(l, mesh, layout, d.plan_cache()));
  };
  return {wrap(out, out_layout), wrap(keep, mask_layout)};
}

// dropout(input, p, train): ATen's composite (Dropout.cpp) with native_dropout for the draw.
at::Tensor dropout(const at::Tensor& input, double p, bool train) {
  check_args("aten::dropout", input, p);
  if (p == 0.0 || !train || input.numel() == 0) return input;
  if (p == 1.0) return input.mul(at::zeros({}, input.options()));
  return std::get<0>(at::native_dropout(input, p, train));
}

at::Tensor& dropout_(at::Tensor& input, double p, bool train) {
  check_args("aten::dropout_", input, p);
  if (p == 0.0 || !train || input.numel() == 0) return input;
  if (p == 1.0) return input.mul_(at::zeros({}, input.options()));
  return input.copy_(std::get<0>(at::native_dropout(input, p, train)));
}

/// feature_dropout, alpha_dropout, feature_alpha_dropout (and in-place): ATen's composite
/// (Dropout.cpp _dropout_impl) with its noise drawn by global index. The keep mask is
/// u(seed, offset + i) >= p for i the global row-major index of the noise: the input's
/// elements (alpha), or its (sample, channel) pairs, a [N, C, 1, ...] tensor (feature). The
/// noise (and alpha's shift b) are computed locally in the input's layout with Partials
/// Replicate (feature: Shards of dims >= 2 Replicate too, those dims have size 1), then
/// applied on the wrapper with ops that have rules: input * noise (+ b), so a Partial(sum/avg)
/// input stays Partial (b added once, on coordinate 0) and autograd records the product.
template <bool kFeatureNoise, bool kAlpha, bool kInplace>
at::Tensor noise_dropout(const char* name, at::Tensor input, double p, bool train) {
  check_args(name, input, p);
  if (p == 0.0 || !train || input.numel() == 0) return input;
  if (p == 1.0) {
    const at::Tensor zero = at::zeros({}, input.options());
    return kInplace ? input.mul_(zero) : input.mul(zero);
  }
  const DTensor d = dtensor_of(input);
  const Layout& l = d.layout();
  HYPER_CHECK_VALUE(!kFeatureNoise || input.dim() >= 2, where(name, input, p),
                    ": feature dropout requires at least 2 dimensions in the input, got ",
                    input.dim());
  HYPER_CHECK_IMPLEMENTED(!kFeatureNoise || !l.is_ragged(), where(name, input, p),
                          ": feature dropout of a RaggedShard DTensor is not implemented "
                          "(its noise is per (sample, channel), not per element)");
  const Layout noise_layout = propagate_noise(l, kFeatureNoise);  // dropout_rules.h
  const int64_t n = noise_layout.numel();
  at::Tensor noise, b;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    at::NoGradGuard no_grad;
    const RngState r = draw_rng(d.device_mesh(), n);
    const at::TensorOptions opts = d.to_local().options();
    const at::Tensor index = global_linear_index(noise_layout, d.mesh_index(), opts);
    noise = uniform_at(index, r.seed, r.offset).ge(p).to(opts.dtype());
    if (kAlpha) {
      constexpr double alpha = 1.7580993408473766;
      const double a = 1. / std::sqrt((alpha * alpha * p + 1) * (1 - p));
      b = noise.add(-1).mul_(alpha * a).add_(alpha * a * p);
      noise.mul_(a);
    } else {
      noise.div_(1 - p);
    }
  }
  at::Tensor out = input.mul(wrap(noise, d, noise_layout));
  if (kAlpha) out = out.add(wrap(b, d, noise_layout));
  // In place: copy_ keeps the input's layout (as dropout_; a P(max) input is not refused as
  // mul_ would refuse it, the result is Replicate there, a valid P(max) share).
  return kInplace ? input.copy_(out) : out;
}

constexpr char kFeature[] = "aten::feature_dropout";
constexpr char kFeature_[] = "aten::feature_dropout_";
constexpr char kAlpha[] = "aten::alpha_dropout";
constexpr char kAlpha_[] = "aten::alpha_dropout_";
constexpr char kFeatureAlpha[] = "aten::feature_alpha_dropout";
constexpr char kFeatureAlpha_[] = "aten::feature_alpha_dropout_";

template <const char* kName, bool kFeatureNoise, bool kAlpha>
at::Tensor noise_op(const at::Tensor& input, double p, bool train) {
  return noise_dropout<kFeatureNoise, kAlpha, false>(kName, input, p, train);
}
template <const char* kName, bool kFeatureNoise, bool kAlpha>
at::Tensor& noise_op_(at::Tensor& input, double p, bool train) {
  noise_dropout<kFeatureNoise, kAlpha, true>(kName, input, p, train);
  return input;
}

}  // namespace

// The composites are replaced at both keys: AutogradPrivateUse3 (so autograd records what they
// call) and PrivateUse3 (tensors without autograd keys).
const KernelFamily& dropout_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"dropout", /*serves_out=*/true, {
      HYPER_KERNEL("aten::native_dropout", K::kDTensor, native_dropout),
      HYPER_KERNEL("aten::dropout", K::kBoth, dropout),
      HYPER_KERNEL("aten::dropout_", K::kBoth, dropout_),
      HYPER_KERNEL("aten::feature_dropout", K::kBoth, noise_op<kFeature, true, false>),
      HYPER_KERNEL("aten::feature_dropout_", K::kBoth, noise_op_<kFeature_, true, false>),
      HYPER_KERNEL("aten::alpha_dropout", K::kBoth, noise_op<kAlpha, false, true>),
      HYPER_KERNEL("aten::alpha_dropout_", K::kBoth, noise_op_<kAlpha_, false, true>),
      HYPER_KERNEL("aten::feature_alpha_dropout", K::kBoth, noise_op<kFeatureAlpha, true, true>),
      HYPER_KERNEL("aten::feature_alpha_dropout_", K::kBoth, noise_op_<kFeatureAlpha_, true, true>),
  }};
  return f;
}

}  // namespace hyper::dispatch
