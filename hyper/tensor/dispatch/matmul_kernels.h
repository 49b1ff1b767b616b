#pragma once
/// \file dispatch/matmul_kernels.h
/// `at::matmul` of DTensor tensors with several batch dims (attention's
/// `[b, heads, s, d] @ [b, heads, d, s]`). LibTorch's matmul folds the batch dims into bmm's
/// one by a reshape; with an inner batch dim sharded (heads, after Colwise q/k/v) and an outer
/// one of size > 1, the folded dim would be a strided shard, which hyper's layouts cannot
/// express, so the view rule would move the shard (an all_to_all) for each operand and back.
/// hyper's kernel at its autograd key (AutogradPrivateUse3; matmul is a composite, so
/// autograd sees the ops it calls) permutes the sharded batch dims to the front first, folds,
/// runs bmm with the Shard on the folded batch dim, unfolds and permutes back: no
/// communication for a heads-sharded attention. With two or more batch dims sharded (batch
/// and heads on a 2x2 mesh) a fold would leave the inner one a strided shard, so when every
/// mesh dim shards one batch dim of one or both operands (the same dim) or nothing, each rank
/// multiplies its own batches instead: one local matmul with a local backward
/// (dispatch/local_op.h), no bytes, the output laid out like the batches. A 3+-D DTensor times a 2-D matrix
/// (torch::nn::Linear's `input.matmul(weight.t())`) is relaid out first as
/// matmul_input_layout says (linear_rules.h: gathered before the fold, remembered on the
/// input, so q, k and v gather their common input once). Any other case is LibTorch's matmul.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace hyper::dispatch {


/// at::matmul for tensors one of which is a DTensor tensor (see the file comment).
at::Tensor dtensor_matmul(const at::Tensor& a, const at::Tensor& b);

/// at::scaled_dot_product_attention with a DTensor argument, at the autograd key (as
/// matmul): ATen's CPU entry asks its backend stub for flash attention directly, whose op has
/// no rule; this computes ATen's math path (scores scaled on both operands, the mask added,
/// `_safe_softmax`, dropout with hyper's RNG tracker, the product with value) with ops that
/// have rules, so a heads- or batch-sharded attention computes locally and autograd records
/// the ops. Throws ValueError for mismatched dims or a mask with is_causal,
/// NotImplementedError for grouped-query attention with fewer key/value heads.
at::Tensor dtensor_sdpa(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p,
                        bool is_causal, std::optional<double> scale, bool enable_gqa);

}  // namespace hyper::dispatch
