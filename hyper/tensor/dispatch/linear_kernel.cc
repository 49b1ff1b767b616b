// at::linear with a DTensor argument (see linear_kernel.h).
#include "hyper/tensor/dispatch/linear_kernel.h"

#include <ATen/ATen.h>
#include <ATen/ops/linear_native.h>
#include <torch/csrc/autograd/custom_function.h>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/linear_rules.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/dtensor_impl.h"

namespace hyper::dispatch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// Identity on global values: forward relayouts the local (remembered on the input), backward
/// passes the gradient on in whatever layout it has.
struct RelayoutFn : public torch::autograd::Function<RelayoutFn> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& t, const Layout& target) {
    const auto* impl = static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl());
    const DTensor& d = impl->dtensor();
    return as_tensor(DTensor::from_local_with_layout(impl->local_as(target, /*memo=*/true),
                                                     d.device_mesh(), target, d.plan_cache()));
  }
  static variable_list backward(AutogradContext*, variable_list grads) {
    return {grads[0], at::Tensor()};
  }
};

}  // namespace

at::Tensor relayout(const at::Tensor& t, const Layout& target) {
  HYPER_CHECK_VALUE(is_dtensor(t), "hyper relayout: expected a DTensor tensor, got a plain one");
  if (as_dtensor(t).layout() == target) return t;
  return RelayoutFn::apply(t, target);
}

at::Tensor dtensor_linear(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias) {
  if (!is_dtensor(input) || !weight.defined())
    return at::native::linear(input, weight, bias);
  const std::optional<ArgLayout> b =
      bias && bias->defined() ? std::optional<ArgLayout>(arg_layout(*bias)) : std::nullopt;
  const Layout target = linear_input_layout(arg_layout(input), arg_layout(weight), b);
  return at::native::linear(relayout(input, target), weight, bias);
}

}  // namespace hyper::dispatch
