// Dropout kernels of the DTensor dispatch key (see dropout.h).
#include "hyper/tensor/dispatch/dropout.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <tuple>

#include "hyper/core/errors.h"
#include "hyper/tensor/internal/dispatch_args.h"
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

Layout with_placements(const Layout& l, Placements ps) { return Layout(l.mesh(), std::move(ps), l.shape()); }

// native_dropout(input, p, train?) -> (output, mask)
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p,
                                                  std::optional<bool> train) {
  const std::string name = "aten::native_dropout";
  check_args(name, input, p);
  {
    const c10::IValue v(input);
    check_no_stale_copy(name, &v, 1);  // dispatch_args.h
  }
  const DTensor d = as_dtensor(input);
  const DeviceMesh& mesh = d.device_mesh();
  // Partial(max/min) -> Replicate; Partial(sum/avg) stays (linear); the mask's layout has
  // every Partial Replicate.
  Placements out_ps = d.placements(), mask_ps = d.placements();
  for (size_t m = 0; m < out_ps.size(); ++m) {
    if (out_ps[m].is_partial() && !linear_partial(out_ps[m])) out_ps[m] = Replicate();
    if (mask_ps[m].is_partial()) mask_ps[m] = Replicate();
  }
  const Layout out_layout = with_placements(d.layout(), out_ps);
  const Layout mask_layout = with_placements(d.layout(), mask_ps);
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
    return as_tensor(DTensor::from_local_with_layout(l, mesh, layout, d.plan_cache()));
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

/// The dropout variants whose masks are not per element (feature: one per channel) or whose
/// output is not input * mask * scale (alpha): the input where ATen returns it, else refused.
template <const char* kName>
at::Tensor refused(const at::Tensor& input, double p, bool train) {
  check_args(kName, input, p);
  if (p == 0.0 || !train || input.numel() == 0) return input;
  throw NotImplementedError(internal::str_cat(
      where(kName, input, p), ": not implemented for DTensor (only dropout / native_dropout "
      "draw by global index; ATen's composite would draw plain per-rank noise), refused rather "
      "than run on local shards"));
}
template <const char* kName>
at::Tensor& refused_(at::Tensor& input, double p, bool train) {
  refused<kName>(input, p, train);
  return input;
}

constexpr char kFeature[] = "aten::feature_dropout";
constexpr char kFeature_[] = "aten::feature_dropout_";
constexpr char kAlpha[] = "aten::alpha_dropout";
constexpr char kAlpha_[] = "aten::alpha_dropout_";
constexpr char kFeatureAlpha[] = "aten::feature_alpha_dropout";
constexpr char kFeatureAlpha_[] = "aten::feature_alpha_dropout_";

}  // namespace

std::vector<std::string> dropout_kernel_names() {
  return {"aten::native_dropout",  "aten::dropout",          "aten::dropout_",
          "aten::feature_dropout", "aten::feature_dropout_", "aten::alpha_dropout",
          "aten::alpha_dropout_",  "aten::feature_alpha_dropout",
          "aten::feature_alpha_dropout_"};
}

void register_dropout_kernels(torch::Library& aten, torch::Library& autograd) {
  aten.impl("native_dropout", TORCH_FN(native_dropout));
  // The composites are replaced at both keys: AutogradPrivateUse3 (so autograd records what
  // they call) and PrivateUse3 (tensors without autograd keys).
  for (torch::Library* lib : {&aten, &autograd}) {
    lib->impl("dropout", TORCH_FN(dropout));
    lib->impl("dropout_", TORCH_FN(dropout_));
    lib->impl("feature_dropout", TORCH_FN(refused<kFeature>));
    lib->impl("feature_dropout_", TORCH_FN(refused_<kFeature_>));
    lib->impl("alpha_dropout", TORCH_FN(refused<kAlpha>));
    lib->impl("alpha_dropout_", TORCH_FN(refused_<kAlpha_>));
    lib->impl("feature_alpha_dropout", TORCH_FN(refused<kFeatureAlpha>));
    lib->impl("feature_alpha_dropout_", TORCH_FN(refused_<kFeatureAlpha_>));
  }
}

}  // namespace hyper::dispatch
