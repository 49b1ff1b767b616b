// at::matmul of DTensor tensors with more than one batch dim, at hyper's autograd key (see
// matmul_kernels.h).
#include "hyper/tensor/dispatch/matmul_kernels.h"

#include <ATen/ATen.h>
#include <ATen/ops/matmul_native.h>

#include <algorithm>
#include <optional>
#include <limits>
#include <memory>
#include <cmath>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/linear_kernels.h"
#include "hyper/tensor/dispatch/linear_rules.h"
#include "hyper/tensor/dispatch/matmul_rules.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"

namespace hyper::dispatch {

at::Tensor dtensor_matmul(const at::Tensor& a, const at::Tensor& b) {
  // [.., n, k] x [k, m] (torch::nn::Linear): gathered before LibTorch's fold, where the view or
  // the mm rule would gather it, and remembered on `a` (linear_rules.h).
  if (a.dim() >= 3 && b.dim() == 2 && is_dtensor(a)) {
    return gathered_matmul(a, b, matmul_input_layout(arg_layout(a), arg_layout(b)));
  }
  const ArgLayout la = arg_layout(a), lb = arg_layout(b);
  const std::vector<int64_t> order = batched_matmul_order(la, lb);
  if (order.empty()) return at::native::matmul(a, b);
  // Two or more batch dims sharded (batch and heads on a 2x2 mesh): a fold would make the
  // inner one a strided shard (gathered by the view rule); each rank multiplies its own
  // batches instead, one local matmul with a local backward (local_op.h).
  if (const auto ps = batch_local_placements(la, lb); ps && sharded_batch_dims(la, lb).size() >= 2) {
    auto op = std::make_shared<LocalOp>();
    op->name = "aten::matmul";
    op->ins = {a, b};
    op->ref = first_dtensor({a, b});
    const MeshTopology& mesh = op->ref.layout().mesh();
    Shape out = a.sizes().vec();
    out.back() = b.size(-1);
    op->in = {Layout(mesh, *ps, a.sizes().vec()), Layout(mesh, *ps, b.sizes().vec())};
    op->out = {Layout(mesh, *ps, out)};
    op->diff_out = {true};
    op->f = [](const std::vector<at::Tensor>& l) { return std::vector<at::Tensor>{at::matmul(l[0], l[1])}; };
    return run_local_op(std::move(op), /*record=*/true)[0];
  }
  // Sharded batch dims first, then the batch dims folded into bmm's one (the Shard stays on
  // the folded dim: the outermost of the group), then unfolded and permuted back. Every step is
  // an at:: op on the wrappers, so autograd records it as usual.
  const int64_t nb = a.dim() - 2;
  std::vector<int64_t> batch;
  int64_t folded = 1;
  for (int64_t i = 0; i < nb; ++i) {
    batch.push_back(a.size(order[i]));
    folded *= a.size(order[i]);
  }
  const at::Tensor ap = a.permute(order).reshape({folded, a.size(-2), a.size(-1)});
  const at::Tensor bp = b.permute(order).reshape({folded, b.size(-2), b.size(-1)});
  at::Tensor y = at::bmm(ap, bp);
  std::vector<int64_t> unfolded = batch;
  unfolded.push_back(a.size(-2));
  unfolded.push_back(b.size(-1));
  y = y.view(unfolded);
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[order[i]] = static_cast<int64_t>(i);
  return y.permute(inverse);
}

at::Tensor dtensor_sdpa(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                        const std::optional<at::Tensor>& attn_mask, double dropout_p,
                        bool is_causal, std::optional<double> scale, bool enable_gqa) {
  // ATen's math path (_scaled_dot_product_attention_math), with its mask added out of place:
  // ATen adds it in place into the scores, a view of the batched matmul's output here
  // (dtensor_matmul permutes back), and autograd's rebase of an in-place op on a view needs
  // as_strided, which DTensors do not have.
  auto where = [&] {
    std::vector<ArgLayout> in = {arg_layout(query), arg_layout(key), arg_layout(value)};
    if (attn_mask && attn_mask->defined()) in.push_back(arg_layout(*attn_mask));
    return describe_args("aten::scaled_dot_product_attention", in);
  };
  HYPER_CHECK_VALUE(query.dim() >= 2 && key.dim() == query.dim() && value.dim() == query.dim(),
                    where(), ": query, key and value need the same number of dims (2 or more)");
  HYPER_CHECK_IMPLEMENTED(!enable_gqa || query.dim() < 3 || query.size(-3) == key.size(-3),
                          where(), ": enable_gqa with fewer key/value heads than query heads is "
                          "not implemented for DTensor tensors (repeat_interleave has no rule)");
  HYPER_CHECK_VALUE(!(is_causal && attn_mask && attn_mask->defined()), where(),
                    ": an explicit attn_mask and is_causal=true are exclusive (as in ATen)");
  const int64_t L = query.size(-2), S = key.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const double root = std::sqrt(std::abs(s));
  const at::Tensor q = query * (s < 0 ? -root : root);
  at::Tensor attn = at::matmul(q, key.transpose(-2, -1) * root);
  // A boolean mask (true: attend) becomes 0 / -inf, as ATen converts it; causal is the lower
  // triangle. The mask is a plain tensor (Replicate) or a DTensor.
  auto additive = [&](const at::Tensor& m) {
    if (m.scalar_type() != at::kBool) return m;
    return at::where(m, at::zeros({}, attn.options()),
                     at::full({}, -std::numeric_limits<double>::infinity(), attn.options()));
  };
  if (is_causal)
    attn = attn + additive(at::ones({L, S}, at::TensorOptions().dtype(at::kBool)).tril());
  else if (attn_mask && attn_mask->defined())
    attn = attn + additive(*attn_mask);
  attn = at::_safe_softmax(attn, -1);
  if (dropout_p > 0.0) attn = at::dropout(attn, dropout_p, /*train=*/true);
  return at::matmul(attn, value);
}

}  // namespace hyper::dispatch
