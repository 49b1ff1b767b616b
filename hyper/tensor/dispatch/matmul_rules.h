#pragma once
/// \file dispatch/matmul_rules.h
/// Sharding rules of the matmul family: aten::mm, aten::bmm, aten::addmm,
/// aten::baddbmm (t / transpose.int, which their backward calls, are view rules: view_rules.h). Torch-free: the fallback
/// (dispatch/fallback.cc) executes what propagate_matmul decides.
///
/// A contraction A[b..,n,k] x B[b..,k,m] -> out[b..,n,m] (`batch_dims` leading b dims: 0 for
/// mm/addmm, 1 for bmm/baddbmm). On each mesh dim one strategy (A's target, B's target ->
/// output), in this order, which is also the tie-break order:
///   0 (R, R)                 -> R
///   1 (S(i), S(i))           -> S(i)      for each batch dim i (bmm)
///   2 (S(n), R)              -> S(n)      rows
///   3 (R, S(m))              -> S(m)      columns
///   4 (S(k of A), S(k of B)) -> P(sum)    contracted dim
///   5 (P(op), R)             -> P(op)     only when A already is P(sum|avg) on that mesh dim
///   6 (R, P(op))             -> P(op)     only when B already is P(sum|avg) on that mesh dim
/// Every combination over the mesh dims is costed: the elements the core's redistribute plans
/// (plan_redistribute(...).total_sent()) move to bring every operand (and the bias) to its
/// target; the cheapest wins, ties go to the combination first in lexicographic order (mesh dim
/// 0 most significant, strategies in the order above). Bytes = elements x the element size,
/// the same for every operand (ATen requires one dtype), so elements decide. The search is
/// over up to 7^(mesh ndim) combinations with memoised plans per operand target (about 0.2 ms
/// for mm on a 2x2 mesh), cached per (op, layouts).
/// Uneven Shard is exact: the sharded dim has the same size in the operand and the output (or
/// in both operands for k), so torch.chunk gives matching pieces; the propagation checks that
/// every rank's local k sizes agree (InternalError otherwise).
/// addmm/baddbmm (self = bias, broadcast to the output): the bias follows the output: Shard(d)
/// where its dim d is not broadcast (else Replicate, sliced by broadcasting), Partial(op) when
/// the output is Partial (a Replicate bias becomes Partial(sum) by zeros off coordinate 0, no
/// bytes), Replicate when the output is Replicate. Its redistribution counts in the cost.
/// A plain (non-DTensor) operand acts as Replicate: cut locally for a Shard target, zeroed off
/// coordinate 0 for Partial(sum), no bytes (fallback.cc).
/// Refused (NotImplementedError naming op and layouts): RaggedShard operands. ValueError:
/// wrong ranks / sizes that do not contract or
/// broadcast, operands on different meshes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/layout.h"
#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// Elements on the wire, summed over ranks, to redistribute `from` to `to`: the core plan's
/// total_sent(), except a pure Partial -> Replicate (the plan's all_reduce_dims), which the
/// executor runs as all-reduces: 2(k-1)/k of each rank's local elements per reduced mesh dim of
/// k ranks (a ring), not the pieces' k-1. 0 when equal. Throws what plan_redistribute throws.
///   mesh=[4] [P(sum)] shape=[16,32] -> [R]: 3072 (the pieces: 6144)
/// (Counted as pieces, an all-reduce on 4 ranks would cost as much as 2 reduce-scatters and
/// an all-gather, and the mm rule would choose those: TpPlainTransformer.CollectivesOfOneStep.)
int64_t redistribution_cost(const Layout& from, const Layout& to);

/// What a Partial layout owes whoever reads it whole: the elements of reducing it on the mesh
/// dims `mesh_dims` (each Partial in `partial`) to its cheapest whole layout there. On each of
/// them: a reduce-scatter to Shard(0) where dim 0 has at least as many rows as the mesh dim has
/// ranks (nested under another mesh dim's Shard(0) if there is one), else an all-reduce to
/// Replicate. 0 where the core refuses the plan (Partial(max)). One
/// account for the matmul rule (a candidate that leaves an already-Partial operand's reduction
/// to the reader pays it) and the linear rule (gathering the rows vs a Partial output).
///   mesh=[2] [P(sum)] shape=[4,8] -> 16 (reduce-scatter to S(0))
int64_t owed_reduction_cost(const Layout& partial, const std::vector<int64_t>& mesh_dims);

/// `args`: {A, B} (mm, bmm) or {bias, A, B} (addmm, baddbmm, `has_bias`). Chooses the
/// strategy above; inputs[i] is each argument's target layout. Results are cached per
/// (op, layouts) in a bounded thread-safe cache.
Propagation propagate_matmul(const std::string& op_name, const std::vector<ArgLayout>& args,
                             int64_t batch_dims, bool has_bias);

/// at::matmul with several batch dims (dispatch/matmul_kernels.h), operands `a` [b.., n, k] and
/// `b` [b.., k, m] (a plain operand: no layout).
/// The batch dims (all but the last two) some mesh dim shards in `a` or in `b`, sorted.
std::vector<int64_t> sharded_batch_dims(const ArgLayout& a, const ArgLayout& b);

/// The permutation of `a`'s and `b`'s dims that puts their sharded batch dims first (then
/// the other batch dims, then the two matrix dims), or empty when LibTorch's fold is kept:
/// fewer than 4 dims, different ranks or batch sizes (broadcasting), no sharded batch dim, or
/// the sharded ones already leading.
std::vector<int64_t> batched_matmul_order(const ArgLayout& a, const ArgLayout& b);

/// The placements both operands take when each mesh dim shards one batch dim of one or both
/// operands (the same dim) or nothing (Replicate): then each rank multiplies its own batches
/// with no communication. nullopt otherwise (a Partial, a sharded matrix dim, two different
/// batch dims on one mesh dim, a RaggedShard, two meshes, no DTensor operand).
std::optional<Placements> batch_local_placements(const ArgLayout& a, const ArgLayout& b);

}  // namespace hyper::dispatch
