#pragma once
/// \file dispatch/linear_rules.h
/// Where `at::linear` / `at::matmul` (3+-D x 2-D) of a DTensor input gathers it (torch-free;
/// the kernels: dispatch/linear_kernels.h, dispatch/matmul_kernels.h). LibTorch's linear (and
/// torch::nn::Linear's `input.matmul(weight.t())`) folds an input of 3+ dims into 2 by a view
/// (`[b, s, h] -> [b*s, h]`) and then runs addmm (or mm); the view rule (view_rules.h) gathers a
/// Shard it cannot keep (s sharded with b > 1 would be a strided shard), and the matmul rule
/// (matmul_rules.h) may gather the folded rows. Both decisions are made here once more, on the
/// unfolded input, so that the kernel can gather *before* the fold with a read-only relayout
/// that DTensorImpl::local_as remembers: attention's q, k and v read the same input, and it is
/// gathered once instead of once per projection (the placement of PyTorch's ColwiseParallel
/// input hook, found by the same rules that would otherwise run later, so nothing else
/// changes).

#include <optional>
#include <vector>

#include "hyper/core/layout.h"
#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// The layout the input of `linear(input, weight, bias)` should have before LibTorch folds it:
/// `input`'s, except on each mesh dim where the fold (view rule) or the folded matmul (matmul
/// rule, with `weight` transposed and the optional `bias`) would gather the input's Shard of a
/// leading (non-feature) dim: Replicate there. `input`'s own layout when `input` is plain,
/// RaggedShard, has fewer than 2 dims or no elements, or when nothing would be gathered.
/// Throws what the view and matmul rules throw for inputs they refuse.
///
///   input mesh=[2] [S(1)] shape=[2,8,32], weight mesh=[2] [S(0)] shape=[32,32]
///   -> mesh=[2] [R] shape=[2,8,32]   (b = 2: the fold cannot keep S(1))
Layout linear_input_layout(const ArgLayout& input, const ArgLayout& weight,
                           const std::optional<ArgLayout>& bias);

/// The same for `at::matmul(input, other)` with a 2-D `other` [k, m] (LibTorch's
/// torch::nn::Linear calls `input.matmul(weight.t())`, then adds the bias: `bias` absent),
/// and, given `bias`, for addmm(bias, folded input, other).
Layout matmul_input_layout(const ArgLayout& input, const ArgLayout& other,
                           const std::optional<ArgLayout>& bias = std::nullopt);

/// The overlapped products of dispatch/linear_kernels.h, input `a` [.., n, k] @ `other` [k, m]:
/// both need a 1-D mesh of 2+ ranks, `a` not RaggedShard and of 2+ dims, `other` a 2-D DTensor
/// on the same mesh.
///
/// The gather of the input (`a` -> `target`) overlapping the product of its local rows: the
/// output layout where the product after the gather is local (`a` Shard(d) of a leading dim,
/// `target` Replicate, `other` Replicate -> R or Shard(1), a Colwise weight transposed -> S(last));
/// nullopt otherwise.
///   a mesh=[2] [S(0)] shape=[8,4], target [R], other [R] shape=[4,6] -> mesh=[2] [R] shape=[8,6]
std::optional<Layout> overlapped_gather_output(const Layout& a, const Layout& target, const ArgLayout& other);

/// The contraction of a sharded k with nothing to relay out (`a` already at `target`, Shard(last),
/// `other` Shard(0), k of one size: a Rowwise projection): its P(sum) output layout, whose
/// backward gathers the output gradient (sequence parallelism); nullopt otherwise.
std::optional<Layout> contracted_rowwise_output(const Layout& a, const Layout& target, const ArgLayout& other);

/// Whether the bias's add after an overlapped product stays local: no bias, a plain one, a
/// Replicate one, or a 1-D one laid out like the rows of a 2-D DTensor `weight`.
bool bias_add_local(const std::optional<ArgLayout>& bias, const ArgLayout& weight);

}  // namespace hyper::dispatch
