#pragma once
/// \file dispatch/decompositions.h
/// Ops whose ATen kernel would read a DTensor's storage, written as ops that have sharding
/// rules: kernels at both DTensor keys, so every layout those ops accept works
/// and, at the autograd key, autograd records the ops (gradients equal the single-device
/// ones).
///   norm (.ScalarOpt_dim, .ScalarOpt_dtype, .ScalarOpt_dim_dtype; norm.Scalar: nn_kernels.h), dist
///                       linalg_vector_norm(self [- other], p (default 2), dim, keepdim, dtype)
///                       (so torch::nn::functional::normalize, pairwise_distance)
///   var_mean, std_mean (.correction)   (var | std, mean) over the same dims
///   aminmax             (amin, amax) over dim (or every dim)
///   count_nonzero (+ .dim_IntList)     (self != 0).sum(dims)
///   equal, allclose     a bool from (self == other).all() / isclose(...).all(): the global
///                       answer, the same on every rank (one all_reduce of a flag at most)
///   mv                  mm(self, vec.unsqueeze(1)).squeeze(1)
///   repeat (and so tile) view [1, s0, 1, s1, ...], expand to [r0, s0, r1, s1, ...], reshape to
///                       [r0 s0, r1 s1, ...]: a Shard of a repeated dim is gathered by the
///                       reshape's rule, every other Shard kept
///   constant_pad_nd (F::pad constant)  per padded dim: narrow for a negative pad, cat with
///                       blocks of the value for a positive one, laid out as x (a Shard of the
///                       padded dim Replicate; a Partial(sum) block holds the value on
///                       coordinate 0), so x's other Shards and its Partial are kept and a
///                       Shard of a padded dim is gathered by cat's rule
///   glu                 a * sigmoid(b), a and b the two halves along dim
///   median(), nanmedian()  over every element: the flattened tensor's median along dim 0
///                       (a gather of what shards it); NaN for an empty tensor, as ATen
///   masked_select       self[mask] with both broadcast (advanced_index_kernels.h's mask path)
///   clamp.Tensor, clamp_.Tensor  clamp_min then clamp_max (ATen's gradients, ties included)
///   trace               self[arange(k), arange(k)].sum(): advanced indexing, a masked
///                       Partial(sum) of the k = min(n, m) diagonal values where self is
///                       sharded (no gather), summed
///   cdist               ATen's two forms: p = 2 with more than 25 rows on a side (or
///                       compute_mode 1): cat / matmul / clamp_min / sqrt of _euclidean_dist
///                       (the rows' Shards kept by the matmul rule); otherwise the p-norm of
///                       every pairwise difference ([.., P, R, M]); p = 0 refused
///   embedding_bag (+ .padding_idx; F::embedding_bag, torch::nn::EmbeddingBag)  the bags'
///                       rows by at::embedding (a row-sharded table: a masked Partial(sum), so
///                       the bags' values travel, never the table; column-sharded: Shard(1)),
///                       times per_sample_weights / the padding mask, summed per bag by
///                       index_add (mean: / the bag's count) or reduced by scatter_reduce amax
///                       (max; an empty bag 0); indices and offsets made whole; ATen's auxiliary
///                       outputs (offset2bag always filled); max picks each bag's first
///                       maximum (its gradient there alone, as ATen's); include_last_offset
///                       needs the CSR form (last offset = number of indices); sparse and
///                       scale_grad_by_freq refused
///   alias_copy, permute_copy, view_copy, squeeze_copy (.dim, .dims), t_copy, transpose_copy,
///   unsqueeze_copy, narrow_copy, expand_copy, split_with_sizes_copy, unbind_copy
///                       the view, then clone: the view's rule decides (its refusals hold)
///   _conj               _conj_physical (the conjugate materialized: no conjugate bit on a
///                       DTensor's local)
///   rot90               ATen's flips and transpose (a Shard of a flipped dim gathered by
///                       flip's rule, every other Shard kept)
///   addmv, addr, addbmm beta * self + alpha * (mv / vec1 x vec2 outer product / bmm summed over
///                       the batch) on ops with rules; beta 0 ignores self's values, as ATen
///   nonzero (argwhere)  not differentiable, below autograd only: the indices depend on every
///                       element, so the input is gathered whole (the tensor's bytes) and the
///                       [n, dim] result is Replicate
///   histc, bincount     not differentiable, below autograd only: each rank counts its own
///                       elements (histc's range and bincount's length from the global min /
///                       max, one all_reduce each), the counts Partial(sum) over the mesh dims
///                       that shard self, Replicate elsewhere: no gather (a Partial self is
///                       reduced first); bincount's weights laid out as self
///   searchsorted,       not differentiable, below autograd only: elementwise in the values;
///   bucketize           the sorted sequence (and a sorter) made whole, the values' layout
///                       kept (a Partial reduced first), an N-D sequence cut to each rank's
///                       rows; a plain values tensor or a Scalar beside a DTensor sequence:
///                       the global answer, Replicate. N-D boundaries beside RaggedShard
///                       values refused
///   _unique2, _unique   not differentiable, below autograd only: each rank's distinct values
///                       gathered over the sharding mesh dims and made distinct again (the
///                       global sorted values, Replicate); the inverse in self's layout; the
///                       counts Partial(sum) over the sharding mesh dims; NaN refused
/// Errors as ATen's, with hyper's types and the op and layouts named (ValueError): repeat with
/// fewer repeats than dims or a negative one, an odd pad list or one longer than 2 per dim, a
/// padded size < 0, glu of an odd dim, trace of a non-matrix, rot90's (not 2 distinct dims,
/// fewer than 2 dims), addr of operands that are not vectors, cdist of non-float / < 2-D
/// operands, different column counts, p < 0 or a compute_mode outside 0..2, embedding_bag's
/// (a mode outside 0..2, per_sample_weights outside sum, offsets[0] != 0, an index out of range,
/// non-integer indices), searchsorted's (boundaries neither 1-D nor matching the values'
/// leading dims, a sorter of another shape; bucketize: boundaries not 1-D).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& decomposition_kernels();

}  // namespace hyper::dispatch
