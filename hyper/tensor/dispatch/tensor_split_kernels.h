#pragma once
/// \file dispatch/tensor_split_kernels.h
/// `tensor_split` of a DTensor tensor (sections and indices overloads), kernels at
/// both DTensor keys replacing ATen's composite, which slices once per piece (and so would gather
/// a sharded dim once per piece). The piece sizes follow ATen (sections: the first
/// `size % sections` pieces one longer; indices: [0, i0), [i0, i1), ..., negative indices
/// counted from the end, clamped to [0, size]); when the pieces tile the dim (normalised
/// indices non-decreasing, always for sections) they are `split_with_sizes` on the wrapper
/// (shape_kernels.h): along an unsharded dim views with no bytes (Shards kept, every Partial
/// kept), along a sharded dim one gather for all pieces. Overlapping pieces (decreasing
/// indices) are ATen's slices on the wrapper (a sharded dim gathered per piece: exact).
/// Autograd records split_with_sizes / slice (their backward formulas).
/// ValueError (ATen's checks, with the layout): a 0-dim input, dim out of range, sections < 1.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& tensor_split_kernels();

}  // namespace hyper::dispatch
