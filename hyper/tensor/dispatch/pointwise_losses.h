#pragma once
/// \file dispatch/pointwise_losses.h
/// The elementwise losses on DTensor tensors: `mse_loss`, `smooth_l1_loss`,
/// `huber_loss`, `soft_margin_loss`, `binary_cross_entropy`, `binary_cross_entropy_with_logits`
/// (and so torch::nn::MSELoss, SmoothL1Loss, HuberLoss, SoftMarginLoss, BCELoss,
/// BCEWithLogitsLoss). Kernels at both DTensor keys, replacing ATen's (which run on the local
/// storage) with ATen's formulas written in ops that have sharding rules, so every layout
/// works (Shard and Replicate operands elementwise, a Partial operand reduced first, the
/// reduction's sum / mean a Partial or Replicate scalar) and at the autograd key autograd
/// records the ops (gradients equal the single-device ones):
///   mse:            (x - y)^2
///   smooth_l1(b):   z = |x - y|;  z < b ? z^2 / (2b) : z - b/2      (b = 0: z)
///   huber(d):       z < d ? z^2 / 2 : d (z - d/2)
///   soft_margin:    log(1 + exp(-y x))
///   bce:            -w (y max(log x, -100) + (1 - y) max(log(1 - x), -100))
///   bce_logits:     w ((1 - y) x + (1 + (p - 1) y) softplus(-x))   (softplus = -log_sigmoid)
/// then none / mean / sum. Errors as ATen's, with hyper's types and the op and layouts named
/// (ValueError): a reduction other than 0, 1, 2; beta < 0; delta <= 0; bce inputs outside
/// [0, 1] (checked on the global values: every rank raises alike).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& pointwise_loss_kernels();

}  // namespace hyper::dispatch
