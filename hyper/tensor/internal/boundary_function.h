#pragma once
/// \file internal/boundary_function.h
/// The base of hyper's autograd functions: `struct F : BoundaryFunction<F>` defines
/// `forward` and `backward_body`; autograd's engine calls the `backward` defined here, which
/// runs `F::backward_body` as a kernel run (dispatch_args.h's at_boundary). The engine calls
/// backward functions from outside any kernel, so an error leaving one goes through the kernel
/// error hook exactly once, as a kernel's does.

#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "hyper/tensor/internal/dispatch_args.h"

namespace hyper::dispatch {

template <class F>
struct BoundaryFunction : public torch::autograd::Function<F> {
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    return at_boundary([&] { return F::backward_body(ctx, std::move(grads)); });
  }
};

}  // namespace hyper::dispatch
