// The elementwise losses on DTensor tensors, in ops that have rules (see pointwise_losses.h).
#include "hyper/tensor/dispatch/pointwise_losses.h"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>
#include <torch/library.h>

#include <optional>
#include <string>

#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

at::Tensor reduced(const at::Tensor& loss, int64_t reduction, const std::string& where) {
  HYPER_CHECK_VALUE(reduction >= 0 && reduction <= 2, where, ": reduction ", reduction,
                    " is not one of 0 (none), 1 (mean), 2 (sum)");
  if (reduction == at::Reduction::Mean) return loss.mean();
  if (reduction == at::Reduction::Sum) return loss.sum();
  return loss;
}

at::Tensor mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  const at::Tensor d = self - target;
  return reduced(d * d, reduction, describe_tensors("aten::mse_loss", {self, target}));
}

at::Tensor smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                          double beta) {
  const std::string w = describe_tensors("aten::smooth_l1_loss", {self, target});
  HYPER_CHECK_VALUE(beta >= 0, w, ": smooth_l1_loss does not support negative values for beta, got ", beta);
  const at::Tensor z = (self - target).abs();
  if (beta == 0) return reduced(z, reduction, w);
  return reduced(at::where(z < beta, z * z * (0.5 / beta), z - 0.5 * beta), reduction, w);
}

at::Tensor huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction,
                      double delta) {
  const std::string w = describe_tensors("aten::huber_loss", {self, target});
  HYPER_CHECK_VALUE(delta > 0, w, ": huber_loss does not support non-positive values for delta, got ", delta);
  const at::Tensor z = (self - target).abs();
  return reduced(at::where(z < delta, z * z * 0.5, (z - 0.5 * delta) * delta), reduction, w);
}

at::Tensor soft_margin_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  return reduced(at::log1p(at::exp(-target * self)), reduction,
                 describe_tensors("aten::soft_margin_loss", {self, target}));
}

at::Tensor binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                const std::optional<at::Tensor>& weight, int64_t reduction) {
  const std::string w = describe_tensors("aten::binary_cross_entropy", {self, target, weight});
  if (self.numel() > 0) {  // ATen's check, on the global values (the same on every rank)
    at::NoGradGuard no_grad;
    const double lo = self.min().item<double>(), hi = self.max().item<double>();
    HYPER_CHECK_VALUE(lo >= 0 && hi <= 1, w, ": all elements of input should be between 0 and 1, "
                      "found min ", lo, ", max ", hi);
  }
  at::Tensor loss = (target - 1) * at::clamp_min(at::log1p(-self), -100) -
                    target * at::clamp_min(at::log(self), -100);
  if (weight && weight->defined()) loss = loss * *weight;
  return reduced(loss, reduction, w);
}

at::Tensor bce_with_logits(const at::Tensor& self, const at::Tensor& target,
                           const std::optional<at::Tensor>& weight,
                           const std::optional<at::Tensor>& pos_weight, int64_t reduction) {
  const std::string w = describe_tensors("aten::binary_cross_entropy_with_logits", {self, target, weight, pos_weight});
  // -log_sigmoid(x) as softplus(-x) (ATen's threshold 20: exact to 2e-9 beyond it), smooth at
  // 0 (log1p(exp(-|x|)) + max(-x, 0) has the same values but subgradients at 0).
  const at::Tensor soft = at::softplus(-self, 1, 20);
  at::Tensor loss;
  if (pos_weight && pos_weight->defined())
    loss = (1 - target) * self + ((*pos_weight - 1) * target + 1) * soft;
  else
    loss = (1 - target) * self + soft;
  if (weight && weight->defined()) loss = loss * *weight;
  return reduced(loss, reduction, w);
}

}  // namespace

const KernelFamily& pointwise_loss_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"pointwise loss", /*serves_out=*/true, {
      HYPER_KERNEL("aten::mse_loss", K::kBoth, mse_loss),
      HYPER_KERNEL("aten::smooth_l1_loss", K::kBoth, smooth_l1_loss),
      HYPER_KERNEL("aten::huber_loss", K::kBoth, huber_loss),
      HYPER_KERNEL("aten::soft_margin_loss", K::kBoth, soft_margin_loss),
      HYPER_KERNEL("aten::binary_cross_entropy", K::kBoth, binary_cross_entropy),
      HYPER_KERNEL("aten::binary_cross_entropy_with_logits", K::kBoth, bce_with_logits),
  }};
  return f;
}

}  // namespace hyper::dispatch
