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

namespace torch {
class Library;
}

namespace hyper::dispatch {

/// {"aten::dot", "aten::vdot"}: the fallback does not claim them.
std::vector<std::string> dot_kernel_names();
/// Registers the kernels on `aten` (a torch::Library IMPL of "aten" for PrivateUse3).
void register_dot_kernels(torch::Library& aten);

}  // namespace hyper::dispatch
