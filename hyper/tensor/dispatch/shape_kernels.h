#pragma once
/// \file dispatch/shape_kernels.h
/// Per-op kernels of the DTensor dispatch key (PrivateUse3) for ops the boxed fallback cannot
/// express: they run below autograd, as nn_kernels.h's do. Rules: shape_rules.h.
/// - split.Tensor, split_with_sizes (also `chunk`, `split(sizes)`, which LibTorch decomposes
///   into them above the key), unsafe_split.Tensor, unsafe_split_with_sizes, unbind.int: a
///   tensor-list result. The input is redistributed once (only when the split dim is
///   sharded), each piece is a slice (unbind: a select) of the local, wrapped with its layout.
///   Pieces alias the local where ATen's do (in-place ops on a piece write the base); a piece
///   whose local is a copy remembers the base's version (the fallback refuses it stale, and
///   refuses in-place ops on it). Autograd's split_backward / unbind_backward run on the
///   wrappers (`cat` / `stack` with plain zeros for unused pieces).
/// - _to_copy (`to(dtype)`, `double()`, ...): propagate_cast decides which Partials stay;
///   another device is refused (NotImplementedError naming both; "cpu:0" is "cpu"). The meta
///   device and a sparse layout never reach the key (BackendSelect picks their kernels: ATen's
///   plain meta tensor, ATen's error).
/// - new_zeros / new_ones / new_full / new_empty: propagate_new_factory (the DTensor's global
///   size keeps its layout, Partial -> Replicate; another size: Replicate); another device
///   refused.
/// - fill_.Scalar: fill_.Tensor with the scalar as a wrapped number, whose additive rule
///   (sharding_rule.cc) fills a Partial(sum) self on coordinate 0 only (zeros elsewhere).
/// rand_like / randn_like / randint_like are not served here: random_kernels.h draws them from
/// the mesh's RNG tracker (a new DTensor in self's layout, Partial mesh dims Replicate).
/// A stale copied view read by split / _to_copy is refused as by the fallback.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& shape_kernels();

}  // namespace hyper::dispatch
