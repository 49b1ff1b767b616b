#pragma once
/// \file dispatch/dot_kernels.h
/// `dot` and `vdot` of two 1-D DTensor tensors (also `matmul` of two 1-D tensors, which
/// LibTorch turns into `dot`), kernels of the DTensor dispatch key (PrivateUse3) decomposing on
/// the wrapper: dot(a, b) = sum(a * b), vdot(a, b) = sum(conj(a) * b). The rules of `mul` and
/// `sum` give the layouts: S(0) x S(0) -> P(sum) with no bytes, R x R -> R, S(0) x R -> P(sum)
/// (the Replicate operand cut locally: no bytes, the cheapest), a Partial(sum) beside a
/// non-Partial stays P(sum), P x P reduces one factor. Autograd's formulas run above them.
/// ValueError (as ATen refuses): an operand that is not 1-D, different sizes, different dtypes.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& dot_kernels();

}  // namespace hyper::dispatch
