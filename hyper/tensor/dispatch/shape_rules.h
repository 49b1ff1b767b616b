#pragma once
/// \file dispatch/shape_rules.h
/// Sharding rules of the DTensor dispatch key for split / unbind, dtype casts (`to(dtype)`,
/// which arrives as `_to_copy`) and the `new_*` factories, torch-free. The kernels
/// that execute them are in dispatch/shape_kernels.h.
///
///   // split(x, 2, dim=1) of a [4,6] with S(0) on 2 ranks: pieces [4,2] S(0), no bytes moved.
///   SplitPropagation p = propagate_split("aten::split.Tensor", in, split_pieces(6, 2, w), 1, false);
///   // p.input == in's layout; p.outputs: three layouts "mesh=[2] placements=[S(0)] shape=[4,2]".

#include <cstdint>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// The piece sizes of split(self, split_size) along a dim of size `n` (PyTorch's rule: pieces
/// of `split_size`, the last one smaller; one empty piece when n == 0). Throws ValueError
/// (with `where` in front) for split_size < 0, or split_size == 0 with n > 0.
std::vector<int64_t> split_pieces(int64_t n, int64_t split_size, const std::string& where);

/// split / split_with_sizes / unbind along `dim`.
struct SplitPropagation {
  Layout input;                 ///< the input's layout for the local op
  std::vector<Layout> outputs;  ///< one per piece
  int64_t dim = 0;              ///< normalised
  std::vector<int64_t> sizes;   ///< the piece sizes along dim (unbind: all 1)
};

/// The pieces of the input along `dim` (`sizes`: their sizes, summing to the dim's size;
/// `unbind`: every index, the dim removed from each piece). A mesh dim that shards `dim` is
/// made Replicate first (every piece is then a slice of each rank's local: exact for even and
/// uneven shards); Shards of other dims are kept (renumbered for unbind) and Partials of any
/// reduce op pass through (a slice commutes with the reduction), so no bytes move unless
/// `dim` is sharded. Throws ValueError for a 0-dim input, a dim out of range, negative sizes
/// or sizes that do not sum to the dim's size; NotImplementedError for a RaggedShard input.
SplitPropagation propagate_split(const std::string& op_name, const ArgLayout& in,
                                 const std::vector<int64_t>& sizes, int64_t dim, bool unbind);

/// What a dtype cast keeps (the kernel reads it off the two dtypes, shape_kernels.cc):
/// `linear`: cast(a + b) == cast(a) + cast(b) up to the target's rounding (floating or
/// complex to floating or complex); `monotone`: a <= b implies cast(a) <= cast(b) for every
/// value of the source dtype (real to floating; bool or integer to an integer type that holds
/// every source value).
struct CastTraits {
  bool linear = false;
  bool monotone = false;
};

/// _to_copy(self, dtype): the input's layout, except that a Partial(sum/avg) the cast does
/// not keep (`!cast.linear`, e.g. to an integer or bool dtype) and a Partial(max/min) it does
/// not keep (`!cast.monotone`) are reduced to Replicate first. RaggedShard and Shard are kept
/// (the cast is elementwise).
Propagation propagate_cast(const std::string& op_name, const ArgLayout& in, CastTraits cast);

/// new_zeros / new_ones / new_full / new_empty(self, size): with `size` equal to self's global
/// shape, self's layout with every Partial made Replicate (the values are a new tensor's,
/// not self's; RaggedShard kept); with another size, Replicate on self's mesh (every rank
/// makes the same zeros / ones / fill value; new_empty's values are undefined, as ATen's).
/// Throws ValueError for a negative size.
Propagation propagate_new_factory(const std::string& op_name, const ArgLayout& in,
                                  const std::vector<int64_t>& size);

}  // namespace hyper::dispatch
