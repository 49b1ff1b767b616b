#pragma once
/// \file dispatch/spatial_rules.h
/// Sharding rule of `aten::convolution` (conv1d / conv2d / conv3d, conv_transpose*, every
/// torch::nn Conv module), torch-free: the kernel (dispatch/spatial_kernels.h) runs
/// what propagate_convolution decides as one local convolution per rank, with the local
/// backward of dispatch/local_op.h.
///
/// A convolution is a contraction: input [N, Cin, *spatial] x weight -> [N, Cout, *spatial']
/// (unbatched: no N). The weight is [Cout, Cin/groups, *k], transposed [Cin, Cout/groups, *k].
/// On each mesh dim one strategy (input, weight, bias -> output), in tie-break order:
///   0 (R, R, R)                     -> R
///   1 (S(0), R, R)                  -> S(0)     batch (batched input only)
///   2 (R, S(Cout of w), S(0))       -> S(C)     output channels (groups == 1)
///   3 (S(C), S(Cin of w), P(sum))   -> P(sum)   input channels (groups == 1); the bias held by
///                                               coordinate 0 (a Replicate one zeroed elsewhere)
///   4 (P(sum), R, P(sum))           -> P(sum)   only when the input already is P(sum) there
///                                               (a convolution is linear in its input)
///   5 (S(C), S(0), S(0))            -> S(C)     whole groups (groups > 1: grouped and
///                                               depthwise convolution): each rank convolves its
///                                               channels' groups (conv_local_groups)
/// A spatial dim is never sharded (a Shard of one would need a halo exchange): an input sharded
/// along one is moved to whichever strategy costs least. Every combination over the mesh dims
/// is costed like the matmul rule (matmul_rules.h): the elements the core's plans move to bring
/// input, weight and bias to their targets, times the element size, then the number of
/// redistributions, then the order above (mesh dim 0 most significant). A combination whose
/// local shapes do not convolve on some rank (an empty channel chunk: ATen's convolution
/// refuses 0 output channels) is not a candidate. A plain operand acts as Replicate.
/// Throws ValueError for shapes ATen would refuse (named: ranks, channels, groups, an output
/// size below 1, a bias that is not [Cout]) before anything moves, on every rank alike;
/// operands on different meshes; NotImplementedError for RaggedShard. (An unbatched input is
/// accepted here; aten::convolution itself gets batched inputs: conv1d/2d/3d add the dim.)
///
///   // x [8,4,10] S(0), w [6,4,3] R on 2 ranks: S(0) -> S(0), no bytes.
///   Propagation p = propagate_convolution("aten::convolution", x, w, std::nullopt, params);

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// The non-tensor arguments of aten::convolution.
struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;
  bool transposed = false;
  std::vector<int64_t> output_padding;
  int64_t groups = 1;
};

/// The output's global shape (ATen's formula), or ValueError naming the values; `where` names
/// the op and layouts.
Shape conv_output_shape(const std::string& where, const Shape& input, const Shape& weight,
                        const ConvParams& c);

/// The groups of a rank's local convolution: 1 for groups == 1 (its channel strategies split
/// one group), else the whole groups its `local_in_channels` hold (`per_group` input channels
/// each; strategy 5, or every group where the channels are not sharded).
int64_t conv_local_groups(int64_t groups, int64_t local_in_channels, int64_t per_group);

/// inputs: {input, weight, bias (when given)}.
Propagation propagate_convolution(const std::string& op_name, const ArgLayout& input,
                                  const ArgLayout& weight, const std::optional<ArgLayout>& bias,
                                  const ConvParams& params);

}  // namespace hyper::dispatch
