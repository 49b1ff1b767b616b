#pragma once
/// \file dispatch/loss_rules.h
/// Torch-free sharding rules of nll_loss (loss_parallel): nll_loss_forward /
/// nll_loss2d_forward and their backward with the input's CLASS dim sharded (the output of a
/// Colwise lm-head): no gather of the logits, each rank picks the targets in its class range.
/// The kernels that execute these layouts are dispatch/loss_kernels.h.
///
///   // [8,10] logits S(1) on 2 ranks, a plain target [8], reduction mean:
///   NllLossPropagation p = propagate_nll_loss("aten::nll_loss_forward", x, t, std::nullopt, 1);
///   // p.input == x's layout, p.target R, p.output / p.total_weight R (one all_reduce of two
///   // numbers over p.reduce_mesh_dims = {0}); class_mesh_dims = {0}.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// What the nll kernels run with. Shapes: input [C] (class dim 0, target []) or [N,C,...]
/// (class dim 1, target [N,...]).
struct NllLossPropagation {
  int64_t class_dim = 1;
  Layout input;                   ///< the input's Partial reduced, its Shards kept
  Layout target;                  ///< the input's Shards of non-class dims, Replicate elsewhere
  std::optional<Layout> weight;   ///< [C]: Shard(0) where the input shards the class dim
  Layout output;                  ///< none: like target, Partial(sum) on class mesh dims;
                                  ///< sum / mean: [] Replicate
  Layout total_weight;            ///< [] Replicate
  std::vector<int64_t> class_mesh_dims;   ///< mesh dims that shard the class dim
  std::vector<int64_t> reduce_mesh_dims;  ///< mesh dims that shard the input (any dim)
};

/// nll_loss_forward / nll_loss2d_forward(self, target, weight?, reduction, ignore_index).
/// On each mesh dim: input Shard(k) kept (k = class dim: the target is Replicate there, the
/// weight Shard(0), a `none` output Partial(sum); another k: the target gets the matching
/// Shard); a Partial input is reduced. Plain target / weight are Replicate (sliced locally).
/// `reduction` 0 none, 1 mean, 2 sum. Throws ValueError for a target or weight shape that
/// does not match the input, a reduction outside 0..2, operands on different meshes;
/// NotImplementedError for a plain input beside a DTensor target or weight, RaggedShard
/// operands.
NllLossPropagation propagate_nll_loss(const std::string& op_name, const ArgLayout& input,
                                      const ArgLayout& target,
                                      const std::optional<ArgLayout>& weight, int64_t reduction);

/// nll_loss_backward / nll_loss2d_backward(grad_output, self, target, weight?, reduction,
/// ignore_index, total_weight): the forward's layouts (from `input`); grad_output is laid out
/// as the forward's output with Partial made Replicate; grad_input as `input` (p.input). Throws
/// as propagate_nll_loss, and ValueError for a grad_output or total_weight of another shape.
struct NllLossBackwardPropagation {
  NllLossPropagation forward;
  Layout grad_output;
};
NllLossBackwardPropagation propagate_nll_loss_backward(
    const std::string& op_name, const ArgLayout& grad_output, const ArgLayout& input,
    const ArgLayout& target, const std::optional<ArgLayout>& weight, int64_t reduction,
    const ArgLayout& total_weight);

}  // namespace hyper::dispatch
