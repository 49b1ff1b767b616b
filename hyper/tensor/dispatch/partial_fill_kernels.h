#pragma once
/// \file dispatch/partial_fill_kernels.h
/// `masked_fill_.Scalar(self, mask, value)` on a Partial self (issue 14), what the backward of
/// `linalg_vector_norm` / `norm` with ord 2 calls on `self / norm` (a Partial(sum) when the
/// input is): the fill is done on every share, without communication — where the rank is off
/// coordinate 0 of a Partial(sum) mesh dim its share becomes 0, elsewhere `value` (so the sum
/// of the shares, their average, max or min is `value`). The mask is laid out as self with its
/// Partial mesh dims Replicate (the same mask on every share; a Partial mask is reduced).
/// Every other case (no Partial in self, a view self, a RaggedShard self) is the boxed
/// fallback's, with its rule and its refusals.

#include <ATen/core/dispatch/Dispatcher.h>

#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace hyper::dispatch {

/// The boxed fallback of fallback.cc (the rule path), for kernels that serve a case of an op.
void run_dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

/// {"aten::masked_fill_.Scalar"}: the fallback does not claim them.
std::vector<std::string> partial_fill_kernel_names();
/// Registers the kernel on `aten` (a torch::Library IMPL of "aten" for PrivateUse3).
void register_partial_fill_kernels(torch::Library& aten);

}  // namespace hyper::dispatch
