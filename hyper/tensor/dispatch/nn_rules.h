#pragma once
/// \file dispatch/nn_rules.h
/// Sharding rules of the DTensor dispatch key for the nn ops a transformer block calls:
/// softmax / log_softmax and their backward, layer_norm and its backward, embedding and
/// its backward, torch-free. The
/// pointwise ops these need (sigmoid, silu, rsqrt, abs, sgn, pow, comparisons, masked_fill_ and
/// the *_backward ops autograd calls for them) are in pointwise_rules.h; mean, var,
/// std and linalg_vector_norm are kernels that decompose into ops with rules
/// (dispatch/nn_kernels.h).
///
///   // softmax over dim 1 of a [5,7] with S(0): S(0) kept, no communication.
///   Propagation p = propagate_softmax("aten::_softmax", {ArgLayout::of(x)}, 1);
///   // p.inputs[0] == x, p.output == x's layout. With S(1) too (loss_parallel: no gather).

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {


/// _softmax / _log_softmax (args: {self}) and _softmax_backward_data /
/// _log_softmax_backward_data (args: {grad_output, output}) over `dim`. Forward: a Partial is
/// reduced first; Shards are kept, a Shard on `dim` too (the kernel, loss_kernels.h, reduces
/// the row max and sums across it); the output has the input's new layout. Backward:
/// `output` loses any Partial; on each mesh dim the Shard of output (else of grad_output) is
/// used for both; a Partial(sum/avg) grad_output stays Partial (the backward is linear in it:
/// y*(g - sum(g*y)) and g - exp(y)*sum(g)), the output then too. Throws ValueError for a dim
/// out of range or operands of different shapes; NotImplementedError for a RaggedShard or
/// plain-tensor operand.
Propagation propagate_softmax(const std::string& op_name, const std::vector<ArgLayout>& args,
                              int64_t dim);

/// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd).
struct LayerNormPropagation {
  Layout input;                   ///< the input's layout for the local op
  std::optional<Layout> weight;   ///< Replicate (absent: no weight)
  std::optional<Layout> bias;     ///< Replicate (absent: no bias)
  Layout out;                     ///< = input
  Layout stats;                   ///< mean / rstd: input.shape[:axis] + [1]*k, the input's Shards
};

/// The normalized (trailing `normalized_ndim`) dims are unsharded (a Shard there is gathered),
/// a Partial input is reduced; weight / bias are made Replicate. Throws ValueError when the
/// input's trailing dims or weight/bias shapes differ from `normalized_shape`;
/// NotImplementedError for a RaggedShard or plain-tensor input, weight or bias.
LayerNormPropagation propagate_layer_norm(const std::string& op_name, const ArgLayout& input,
                                          const std::vector<int64_t>& normalized_shape,
                                          const std::optional<ArgLayout>& weight,
                                          const std::optional<ArgLayout>& bias);

/// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?,
/// output_mask) -> (grad_input, grad_weight, grad_bias).
struct LayerNormBackwardPropagation {
  Layout grad_out;
  Layout input;
  Layout stats;                   ///< mean and rstd
  std::optional<Layout> weight;   ///< Replicate
  std::optional<Layout> bias;     ///< Replicate
  Layout grad_input;
  Layout grad_param;              ///< grad_weight / grad_bias: shape normalized_shape
};

/// On each mesh dim: the input's Shard of a leading dim (else grad_out's) is used for
/// grad_out, input, mean and rstd; then grad_input has that Shard and grad_weight / grad_bias
/// are Partial(sum) (each rank summed its rows). Otherwise a Partial(sum/avg) grad_out stays
/// Partial (all three results are linear in it), the input is reduced, and grad_input /
/// grad_weight / grad_bias get grad_out's Partial; else all Replicate. Throws as
/// propagate_layer_norm.
LayerNormBackwardPropagation propagate_layer_norm_backward(
    const std::string& op_name, const ArgLayout& grad_out, const ArgLayout& input,
    const std::vector<int64_t>& normalized_shape, const ArgLayout& mean, const ArgLayout& rstd,
    const std::optional<ArgLayout>& weight, const std::optional<ArgLayout>& bias);

/// embedding(weight, indices, ...) and embedding_dense_backward(grad_output, indices, ...).
struct EmbeddingPropagation {
  Layout weight;                 ///< forward: the weight's layout for the local lookup;
                                 ///< backward: grad_output's layout
  std::optional<Layout> indices; ///< the indices' layout (for plain indices: how to slice them)
  Layout output;                 ///< forward: indices.shape + [E]; backward: [num_weights, E]
  bool masked = false;           ///< forward: weight rows sharded: masked local lookup
  bool sharded_rows = false;     ///< backward: each rank sums the rows of its index slice
};

/// Forward, on each mesh dim: indices Shard(k) (a DTensor) -> the weight made Replicate there,
/// output Shard(k); otherwise (plain indices act as Replicate) weight Shard(1) -> output
/// Shard(-1); weight Shard(0) -> a masked local lookup (ids outside the rank's rows give 0),
/// output Partial(sum); a Partial(sum/avg) weight stays Partial (the lookup is linear);
/// Replicate -> Replicate. Throws ValueError for a weight that is not 2-D;
/// NotImplementedError for RaggedShard operands, a plain weight, Partial indices.
EmbeddingPropagation propagate_embedding(const std::string& op_name, const ArgLayout& weight,
                                         const ArgLayout& indices);

/// Backward (grad_weight [num_weights, E]), on each mesh dim: grad_output Shard(-1) -> grad
/// weight Shard(1); a Shard of an index dim (grad_output's or the indices') -> both sliced so,
/// grad_weight Partial(sum); a Partial(sum/avg) grad_output stays Partial; else Replicate.
/// Throws ValueError when grad_output is not indices.shape + [E]; NotImplementedError for
/// RaggedShard operands, a plain grad_output, Partial indices.
EmbeddingPropagation propagate_embedding_backward(const std::string& op_name,
                                                  const ArgLayout& grad_output,
                                                  const ArgLayout& indices, int64_t num_weights);

/// cat(tensors, dim): every operand laid out alike (Shards of other dims cut every operand the
/// same way, so the local cat is the output's local block).
struct CatPropagation {
  std::vector<Layout> inputs;  ///< each operand's target layout (its own shape)
  Layout output;
  int64_t dim = 0;             ///< normalised
};

/// On each mesh dim, the first DTensor operand's placement decides: a Shard of the cat dim is
/// gathered (Replicate); a Shard of another dim is kept (the other operands are moved to it);
/// a Partial(sum/avg) is kept when every DTensor operand has it (cat is linear; a plain
/// operand is zeroed off coordinate 0), else every operand is reduced. Plain operands are
/// Replicate. Throws ValueError for no operand, ranks or sizes that do not match off the cat
/// dim, a dim out of range, operands on different meshes; NotImplementedError for RaggedShard
/// operands (fail-closed).
CatPropagation propagate_cat(const std::string& op_name, const std::vector<ArgLayout>& in,
                             int64_t dim);

}  // namespace hyper::dispatch
