#pragma once
/// \file dispatch/partial_fill_kernels.h
/// `masked_fill_.Scalar(self, mask, value)` on a Partial self, what the backward of
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


namespace hyper::dispatch {

/// The boxed fallback of fallback.cc (the rule path), for kernels that serve a case of an op.
void run_dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& partial_fill_kernels();

}  // namespace hyper::dispatch
