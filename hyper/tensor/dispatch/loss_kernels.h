#pragma once
/// \file dispatch/loss_kernels.h
/// loss_parallel, on by default: kernels of the DTensor dispatch key (PrivateUse3)
/// that compute softmax / log_softmax and nll_loss with the class (softmax) dim sharded,
/// without gathering it. They run below autograd (autograd's formulas call the backward
/// kernels below on the wrapper), so `torch::nn::functional::cross_entropy(logits, target)` on
/// logits Shard(1) (a Colwise lm-head's output) never gathers the logits.
/// - _softmax / _log_softmax (layouts: nn_rules.h propagate_softmax): on the mesh dims that
///   shard `dim`, all_reduce(max) of the local row max, local exp-sum, all_reduce(sum); the
///   output keeps the Shard. Bytes: two all_reduces of the rows (a [.., 1, ..] tensor) instead
///   of gathering the rows x classes. No mesh dim shards `dim`: the ATen op on the local.
/// - _softmax_backward_data / _log_softmax_backward_data: y * (g - sum(g * y)) and
///   g - exp(y) * sum(g), the sums all_reduced over the mesh dims that shard `dim`.
/// - nll_loss_forward / nll_loss2d_forward (layouts: loss_rules.h): each rank picks the targets
///   in its class range (others give 0). none: output Partial(sum) over the class mesh dims,
///   no bytes; sum / mean: one all_reduce of (loss sum, total weight, bad target count) over
///   the mesh dims that shard the input, output and total_weight Replicate (the global
///   values; mean divides by the global total weight, nan when every target is ignored, as
///   ATen). A plain `weight` is sliced to the rank's classes.
/// - nll_loss_backward / nll_loss2d_backward: grad_input laid out as the input (Shard(class)
///   kept), -w[t] * grad (/ total_weight for mean) at each rank's own targets.
/// - cross_entropy_loss (at the autograd key, as the composite it replaces): class-index
///   targets with label_smoothing > 0 are decomposed here into ops with rules (LibTorch's
///   composite would masked_fill_ the Partial class sum in place: refused): (1 - ls) * nll +
///   ls / C * smooth, smooth = -sum_c log_softmax [* weight] times the kept-target mask, summed
///   (mean: / the kept count, or / nll_loss's total weight with a weight); the loss is then
///   P(sum) on the mesh dims that shard the input (no extra bytes but, with a weight and mean,
///   one more all_reduce of 3 numbers). Everything else: LibTorch's composite (log_softmax +
///   nll_loss_nd; probability targets: its pointwise ops and sums) runs on the wrapper.
/// Throws ValueError for a target outside [0, C) other than ignore_index (on every rank: a
/// plain target is checked whole, a DTensor target's bad count is all_reduced), a
/// non-integer target; like the other kernels, NotImplementedError for a stale copied view.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& loss_kernels();

}  // namespace hyper::dispatch
