#pragma once
/// \file dispatch/linear_kernels.h
/// `at::linear` with a DTensor argument, at hyper's autograd key (AutogradPrivateUse3; linear
/// is a composite, so autograd records the ops it calls, as for dtensor_matmul). It brings the
/// input to linear_input_layout (dispatch/linear_rules.h) with `relayout`, then runs LibTorch's
/// linear. The gather happens where the view and matmul rules would have made it, but on the
/// unfolded input and remembered there (DTensorImpl::local_as), so several projections of one
/// input (attention's q, k, v under sequence parallelism) gather it once.

#include <ATen/core/Tensor.h>

#include <optional>

#include "hyper/core/layout.h"

namespace hyper::dispatch {

/// The DTensor tensor `t` relaid out as `target` (same global value; a read-only relayout
/// remembered on `t`, see DTensorImpl::local_as). Differentiable: the gradient passes through
/// unchanged (a relayout is the identity on global values; the gradient keeps its own layout,
/// so gradients of several readers are summed before one collective). The result must not be
/// written (it may share its local with `t`'s memo). `t` itself when the layouts are equal.
at::Tensor relayout(const at::Tensor& t, const Layout& target);

/// `input` [.., n, k] (a DTensor tensor) relaid out as `target` (which gathers, or keeps, its
/// rows; linear_rules.h), then matmul with `other` [k, m]. When the gather is the only
/// communication (a 1-D mesh; the input Shard of a leading dim, gathered to Replicate; `other`
/// a DTensor Replicate or Shard(1), a Colwise weight transposed — the q/k/v projections under
/// sequence parallelism) and hyper::overlap_linear_gather() is on (dtensor_tensor.h), the
/// gather is issued asynchronously and this rank's own rows are multiplied while it is in
/// flight, then the other ranks' rows (a collective matmul: same bytes, same values, the
/// gathered input remembered for the next projection; the backward is matmul's, on DTensors).
at::Tensor gathered_matmul(const at::Tensor& input, const at::Tensor& other, const Layout& target);

/// at::linear when an argument is a DTensor tensor (see the file comment); gathered_matmul
/// with the weight transposed, plus the bias, where the overlapped gather applies and the bias's
/// add is local (absent, plain, Replicate, or laid out like the weight's rows).
at::Tensor dtensor_linear(const at::Tensor& input, const at::Tensor& weight,
                          const std::optional<at::Tensor>& bias);

}  // namespace hyper::dispatch
