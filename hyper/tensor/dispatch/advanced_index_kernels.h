#pragma once
/// \file dispatch/advanced_index_kernels.h
/// Advanced indexing and the index_* family on DTensor tensors, as compositions of
/// the ops index_kernels.h serves, registered at both DTensor keys (AutogradPrivateUse3, so
/// autograd records the ops they call, and PrivateUse3):
/// - `index.Tensor` (`x.index({idx})`, `x.index({Slice(), idx})`) with ONE integer index
///   tensor (any shape; negative indices wrap as in ATen) is `index_select(self, d, idx)`,
///   its output reshaped to `self[:d] + idx.shape + self[d+1:]` (index_select's layouts: a
///   small index into a self sharded along `d` is a masked Partial(sum), a Shard elsewhere is
///   kept, ...). Several index tensors, or a bool / uint8 mask: one local op with a local
///   backward (local_op.h). The index tensors are made whole on every rank (gathered where
///   sharded; a mask becomes its nonzero indices, one per dim it covers), except on mesh dims
///   where self is Replicate and every index is a DTensor of one shape sharded alike (each
///   rank picks with its own slice; the output keeps that Shard). Self's Shard of an indexed
///   dim is a masked Partial(sum) (each rank picks the entries in its box, zeros elsewhere:
///   `logits[arange(N), target]` with the classes sharded moves no logits), a Shard of another
///   dim stays a Shard at that dim's output position, a Partial passes (sum / avg only beside
///   a masked dim). Refused: a RaggedShard self.
/// - `index_put` / `index_put_` / `_index_put_impl_` with one integer index tensor (values
///   broadcast to the indexed shape) are `scatter` / `scatter_` (accumulate=false) and
///   `scatter_add` / `scatter_add_` (accumulate=true) with the index expanded along the
///   other dims. `x[mask] = v` (one bool / uint8 mask after leading full slices, a
///   one-element v): masked_fill(_) with the mask expanded to self's shape (self's layout
///   kept; a Partial(sum) self gets v on coordinate 0), accumulate: self + mask * v. Several
///   index tensors (`x[i, j] = v`), a mask with one value per True position, masks beside
///   integer indices: the indices made whole (plain), wrapped, checked and combined into one
///   linear index over the indexed dims, flattened into one dim of a view of self (dims apart
///   permuted to the front first, where ATen puts their values), the one-index put on that
///   view, unflattened (and permuted back); in place, that result is copied into self (self's
///   layout kept; a Shard of an inner flattened dim is gathered by the view rule first).
///   `masked_scatter` / `masked_scatter_`: `x[mask] = source.flatten()[:count]` through it.
/// - `index_add` / `index_add_` (alpha) are `scatter_add` / `scatter_add_`, `index_copy` /
///   `index_copy_` are `scatter` / `scatter_`, `index_fill.int_Scalar` / `index_fill_.int_Scalar`
///   are `scatter.value` / `scatter_.value`, `index_reduce` / `index_reduce_` are
///   `scatter_reduce` / `scatter_reduce_`, each with the 1-D index expanded to the source's
///   (self's) shape along `dim`.
/// The in-place forms keep self's layout (as the in-place scatters; what would change it is
/// refused, nothing written). Their out= overloads are served by out_kernels.h.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& advanced_index_kernels();

}  // namespace hyper::dispatch
