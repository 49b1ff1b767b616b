#pragma once
/// \file dispatch/out_kernels.h
/// The `out=` overloads of the DTensor dispatch key (PrivateUse3), generically: an
/// op `aten::X.<overload>` with out arguments (`add.out`, `mm.out`, `sum.IntList_out`,
/// `max.dim_max`, ...) whose functional overload — the overload of X with the same non-out
/// arguments (names and types) and no mutable argument — is served (a rule, or a per-op
/// kernel) runs that functional op through the dispatcher on the same arguments, then
/// `out_i.copy_(result_i)` for each output: `out` keeps its layout (as in-place ops do; copy_'s
/// rule redistributes the result), and `out` may alias an input (the result is computed
/// first).
/// Refused (NotImplementedError naming the op and every tensor argument's layout): a plain
/// `out` beside DTensor inputs (ATen would write, or resize, a plain tensor with the local
/// result), an `out` whose global shape differs from the result's (ATen would resize it;
/// resizing a DTensor is not implemented). ValueError: a result dtype that cannot be cast to
/// out's dtype (as ATen).
/// `maximum.out` keeps its own kernel (fallback.cc; the same behaviour).
/// The same kernel serves `addmm_` and `baddbmm_` (in-place on a DTensor self): `addmm` /
/// `baddbmm` then `self.copy_(result)` (self's layout kept; a plain self beside DTensor
/// operands: NotImplementedError).

#include <string>
#include <vector>

namespace torch {
class Library;
}

namespace hyper::dispatch {

/// The out= overloads served here ("aten::add.out", ...): those whose functional overload is
/// among `served` (rule names and per-op kernel names). The fallback does not claim them.
std::vector<std::string> out_kernel_names(const std::vector<std::string>& served);
/// Registers the out= kernel on `aten` (a torch::Library IMPL of "aten" for PrivateUse3) for
/// each of `names` (out_kernel_names' result).
void register_out_kernels(torch::Library& aten, const std::vector<std::string>& names);

}  // namespace hyper::dispatch
