#pragma once
/// \file dispatch/view_rules.h
/// Sharding rules of the DTensor dispatch key for view ops, torch-free:
/// the output layout of a view on the global shape, with the Shard dims tracked, and the layout
/// the input must have first. Every result is exact: a Shard is kept only where each rank's
/// local view is the rank's slice of the global view; otherwise that mesh dim is redistributed
/// to Replicate first (correct; costs bytes) or the op is refused (NotImplementedError naming
/// the op and the layout). Replicate and Partial pass through every rule (views are linear).
/// RaggedShard inputs are refused (fail-closed), except by the identity views.
///
/// The ops that reach the dispatch key (traced with LibTorch 2.15; CompositeImplicitAutograd
/// ops decompose above it: reshape, flatten and unflatten arrive as view -- the wrapper always
/// reports contiguous strides --, narrow and x.index({Slice}) as slice.Tensor, contiguous()
/// returns the wrapper itself): view, _unsafe_view, transpose.int, permute, t, unsqueeze,
/// squeeze / squeeze.dim / squeeze.dims (the first two are turned into squeeze.dims by
/// kernels in fallback.cc), slice.Tensor, select.int, diagonal (and diagonal_copy, what
/// `torch.diag` of a matrix calls; not a view), and
/// the gradients select_backward, slice_backward and diagonal_backward; diag_embed (not a view:
/// a new tensor, `torch.diag` of a vector) has its rule here too. A view (view, _unsafe_view) whose local tensor is not strictly row-major (a
/// transposed or sliced local) is run on a contiguous copy of it, as reshape would copy; an
/// in-place op on a view whose local is a copy is refused by the fallback.
///
///   ViewOpArgs a = {{{2, 6}}};  // view(self, size=[2,6]) of a [12] tensor with S(0) on 2 ranks
///   ViewRewrite rw;
///   Propagation p = propagate_view_op("aten::view", in, a, &rw);
///   // p.output: S(0) shape [2,6]; rw.local_shape_arg == 1 (argument 1 becomes the local shape)

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// How the fallback rewrites a view op's arguments for the local call.
/// `ps` with every Shard of tensor dim `dim` made Replicate (the input target of an op that
/// needs `dim` whole: slice, select, split along it).
Placements replicate_dim(const Placements& ps, int64_t dim);

struct ViewRewrite {
  /// >= 0: this argument becomes the output layout's local shape (view, _unsafe_view).
  int local_shape_arg = -1;
  /// >= 0: this argument (an int list) becomes `rewrite_value` (squeeze.dims: the global
  /// size-1 dims only, so a local size-1 dim of a bigger global dim is never squeezed).
  int rewrite_arg = -1;
  std::vector<int64_t> rewrite_value;
};

/// The view op `op_name`'s rule (its OpRule::view) and `rewrite` filled (when given). Throws
/// InternalError for an op without a view rule.
Propagation propagate_view_op(const std::string& op_name, const ArgLayout& in,
                              const ViewOpArgs& args, ViewRewrite* rewrite = nullptr);

/// Adds each view op's kViewOp rule to the registry (sharding_rule.cc), one line per op naming
/// its ViewRule.
void add_view_rules(std::map<std::string, OpRule>& r);

/// view(self, size) (one -1 inferred) on the global shape. The non-1 dims of the input and the
/// output are grouped into runs of equal products (like PyTorch's view_groups). A Shard(d)
/// becomes Shard(the first non-1 output dim of d's group) when d is the group's first non-1
/// input dim and, on every rank, the local box maps exactly (offset and size along d times
/// the product of the group's inner input dims equal offset and size along the output dim
/// times the product of its inner output dims) -- always true for even shards; for uneven
/// shards only when the chunks agree. Otherwise (an inner dim of a merge, a size-1 dim, an
/// uneven split that would move rows between ranks, an empty tensor) that mesh dim is made
/// Replicate first. Throws ValueError for a bad size (two -1, a different element count);
/// NotImplementedError for a ragged input.
Propagation propagate_view_groups(const std::string& op_name, const ArgLayout& in,
                                  const std::vector<int64_t>& size);

/// permute(self, dims) (transpose and t are permutations too): Shard(d) -> Shard(j) where
/// dims[j] == d. Throws ValueError for a bad permutation; NotImplementedError when ragged.
Propagation propagate_permute(const std::string& op_name, const ArgLayout& in,
                              const std::vector<int64_t>& dims);

/// unsqueeze(self, dim): Shard dims at or after dim move up by one.
Propagation propagate_unsqueeze(const std::string& op_name, const ArgLayout& in, int64_t dim);

/// squeeze(self, dims) (nullopt: every dim): removes the dims of global size 1 among `dims`
/// (others are left, as PyTorch does); `squeezed` receives them. Throws NotImplementedError
/// when a removed dim is sharded.
Propagation propagate_squeeze(const std::string& op_name, const ArgLayout& in,
                              const std::optional<std::vector<int64_t>>& dims,
                              std::vector<int64_t>* squeezed);

/// slice(self, dim, start, end, step): the output shape by PyTorch's clamping; placements
/// kept; a mesh dim sharding `dim` is made Replicate first (the local op then sees the
/// global indices). Throws ValueError for step <= 0 or a dim out of range.
Propagation propagate_slice(const std::string& op_name, const ArgLayout& in, int64_t dim,
                            std::optional<int64_t> start, std::optional<int64_t> end,
                            int64_t step);

/// select(self, dim, index): `dim` removed, Shard dims after it renumbered; a mesh dim
/// sharding `dim` is made Replicate first. Throws ValueError for an index out of range.
Propagation propagate_select(const std::string& op_name, const ArgLayout& in, int64_t dim,
                             int64_t index);

/// select_backward(grad, input_sizes, dim, index) and slice_backward(grad, input_sizes, dim,
/// start, end, step) (autograd's gradients of select and slice): the output, of shape
/// input_sizes, keeps the gradient's placements (Shard dims at or after `dim` move up for
/// select); a slice gradient sharded along `dim` is made Replicate there first. `select`:
/// select_backward, else slice_backward.
Propagation propagate_view_backward(const std::string& op_name, const ArgLayout& grad,
                                    const std::vector<int64_t>& input_sizes, int64_t dim,
                                    bool select);

/// diagonal(self, offset, dim1, dim2): dim1 and dim2 removed and the diagonal appended as the
/// last dim (its length by PyTorch's rule for the offset; 0 past the edge); a mesh dim sharding
/// dim1 or dim2 is made Replicate first (the local op then sees the global diagonal); other
/// Shard dims renumbered, Partial kept. Throws ValueError for dim1 == dim2 or a dim out of
/// range.
Propagation propagate_diagonal(const std::string& op_name, const ArgLayout& in, int64_t offset,
                               int64_t dim1, int64_t dim2);

/// diagonal_backward(grad, input_sizes, offset, dim1, dim2) (autograd's gradient of diagonal):
/// the output, of shape input_sizes, has the gradient's Shards of the other dims at their input
/// positions; a mesh dim sharding the diagonal (the gradient's last dim) is made Replicate
/// first. Throws ValueError when the gradient's shape is not the diagonal's.
Propagation propagate_diagonal_backward(const std::string& op_name, const ArgLayout& grad,
                                        const std::vector<int64_t>& input_sizes, int64_t offset,
                                        int64_t dim1, int64_t dim2);

/// diag_embed(self, offset, dim1, dim2) (and torch.diag of a vector): self's last dim becomes
/// the diagonal of the output dims dim1 and dim2 (of size n + |offset|), a mesh dim sharding it
/// made Replicate first; the other Shard dims renumbered around dim1 and dim2, Partial kept
/// (the zeros off the diagonal are every rank's share). Throws ValueError for a 0-dim self,
/// dim1 == dim2 or a dim out of range.
Propagation propagate_diag_embed(const std::string& op_name, const ArgLayout& in, int64_t offset,
                                 int64_t dim1, int64_t dim2);

}  // namespace hyper::dispatch
