#pragma once
/// \file transformer_block.h
/// A pre-norm transformer block built only from hookable hyper::nn modules, so that
/// hyper::tp::parallelize_module can shard it by name, plus the helpers the examples, the
/// tests and the benchmark share: the tensor-parallel plans (sequence parallel and plain),
/// deterministic initialization and copies, a synthetic batch and MSE loss, and checks of
/// a parallelized block's parameters and gradients against a single-device block.
/// Header-only; include it from programs and tests (it includes torch, never from library
/// headers).
///
/// The block (names as in named_modules()):
///
///   y = x + attn.o( attention( attn.q(h), attn.k(h), attn.v(h) ) ),  h = norm1(x)
///   z = y + mlp.w2( act( mlp.w1( norm2(y) ) ) )
///
///   norm1, norm2           hyper::nn::LayerNorm([hidden])
///   attn.q, attn.k, attn.v hyper::nn::Linear(hidden -> n_heads * head_dim)
///   attn.o                 hyper::nn::Linear(n_heads * head_dim -> hidden)
///   mlp.w1                 hyper::nn::Linear(hidden -> ffn)
///   mlp.w2                 hyper::nn::Linear(ffn -> hidden)
///
/// Input and output are [batch, seq, hidden]. Attention is softmax(q k^T / sqrt(head_dim))
/// v per head, causal (a position attends to itself and earlier ones) or plain. The number
/// of heads computed locally is derived at forward time from the *local* rows of attn.q's
/// weight (local rows / head_dim), so once q/k/v are ColwiseParallel each rank computes
/// n_heads / tp_size whole heads and attn.o (RowwiseParallel) sums their contributions.
///
/// Sequence-parallel tensor parallelism (sequence_parallel_plan; Megatron-LM's SP):
///
///   x local [b, s/n, h] -> norm1 (SequenceParallel, seq dim 1)
///     -> q/k/v Colwise(input Shard(1)): all-gather seq, local [b, s, heads/n * d]
///     -> local attention over heads/n heads
///     -> o Rowwise(output Shard(1)): reduce-scatter, local [b, s/n, h]  (+ residual)
///     -> norm2 (SequenceParallel) -> w1 Colwise(input Shard(1)) -> act
///     -> w2 Rowwise(output Shard(1)) -> local [b, s/n, h]               (+ residual)
///
/// Each rank feeds its sequence shard of x (shard_sequence) and gets its sequence shard of
/// the output; gather_sequence rebuilds the whole output. With tensor_parallel_plan (no
/// sequence parallelism) every rank feeds the whole x and gets the whole output; the norms
/// stay unsharded.
///
///   auto cfg = hyper::examples::TransformerConfig{};           // hidden 64, 4 heads of 16
///   auto ref = hyper::examples::make_block(cfg, /*seed=*/1);    // single-device reference
///   auto blk = hyper::examples::copy_block(*ref);               // same parameters
///   hyper::tp::parallelize_module(blk.ptr(), mesh,
///       hyper::examples::sequence_parallel_plan(cfg, mesh.size(0)));
///   auto batch = hyper::examples::make_batch(cfg, /*batch=*/2, /*seq=*/16, /*seed=*/2);
///   auto y = blk->forward(hyper::examples::shard_sequence(batch.x, mesh));
///   auto loss = hyper::examples::sp_mse_loss(
///       y, hyper::examples::shard_sequence(batch.target, mesh),
///       batch.target.numel());                                 // this rank's part
///   loss.backward();                                           // gradients == ref's (sliced)
///   double total = hyper::examples::sum_over_mesh(loss, mesh);  // the global loss
///   auto bad = hyper::examples::compare_gradients(*blk, *ref, mesh);  // after ref's backward
///
/// Sequence lengths need not divide the TP size (torch.chunk shards: 10 on 4 ranks is
/// 3, 3, 3, 1).
///
/// Initialization never touches torch's global RNG after construction: make_block
/// overwrites every parameter from a private generator seeded with `seed`, so ranks running
/// as threads of one process (which would race on the global RNG) build identical blocks.

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/options/linear.h>
#include <torch/nn/options/normalization.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/errors.h"
#include "hyper/core/placement.h"
#include "hyper/nn/modules.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/distribute_module.h"
#include "hyper/tp/parallelize.h"
#include "hyper/tp/style.h"
#include "hyper/trace/observer.h"

namespace hyper::examples {

/// Activation between mlp.w1 and mlp.w2.
enum class Activation { kGelu, kRelu };

/// Sizes and switches of a TransformerBlock.
struct TransformerConfig {
  int64_t hidden = 64;     ///< model width (LayerNorm size, attn.o / mlp.w2 outputs)
  int64_t n_heads = 4;     ///< attention heads (must be divisible by the TP size)
  int64_t head_dim = 16;   ///< width of one head (q/k/v produce n_heads * head_dim)
  int64_t ffn = 256;       ///< mlp.w1 output width
  bool causal = true;      ///< causal mask (else every position attends to every one)
  bool bias = true;        ///< biases in every Linear
  Activation activation = Activation::kGelu;
  double ln_eps = 1e-5;    ///< LayerNorm epsilon

  int64_t attn_width() const { return n_heads * head_dim; }
  std::string to_string() const {
    std::ostringstream os;
    os << "hidden=" << hidden << " n_heads=" << n_heads << " head_dim=" << head_dim
       << " ffn=" << ffn << (causal ? " causal" : " plain") << (bias ? " bias" : " no-bias")
       << (activation == Activation::kGelu ? " gelu" : " relu");
    return os.str();
  }
};

/// q, k, v, o projections and softmax attention; heads computed = q's weight rows / head_dim
/// (the local rows of a hookable module under TP; all rows of a plain module, whose
/// parameters are DTensor tensors with the global shape). LinearM: hyper::nn::Linear or
/// torch::nn::Linear.
template <class LinearM>
class BasicAttentionImpl : public torch::nn::Module {
 public:
  explicit BasicAttentionImpl(const TransformerConfig& cfg) : cfg_(cfg) {
    const auto lin = [&](int64_t in, int64_t out) {
      return LinearM(torch::nn::LinearOptions(in, out).bias(cfg.bias));
    };
    q = register_module("q", lin(cfg.hidden, cfg.attn_width()));
    k = register_module("k", lin(cfg.hidden, cfg.attn_width()));
    v = register_module("v", lin(cfg.hidden, cfg.attn_width()));
    o = register_module("o", lin(cfg.attn_width(), cfg.hidden));
  }

  /// Number of heads this rank computes: attn.q's local weight rows / head_dim. Throws
  /// hyper::ValueError (naming the values) when the rows are not whole heads, i.e. when
  /// q was sharded over a TP size that does not divide n_heads.
  int64_t local_heads() const {
    const int64_t rows = q->weight.size(0);
    HYPER_CHECK_VALUE(rows % cfg_.head_dim == 0, "TransformerBlock attention: attn.q holds ",
                      rows, " local output rows, not a whole number of heads of head_dim ",
                      cfg_.head_dim, " (n_heads=", cfg_.n_heads,
                      " must be divisible by the tensor-parallel size)");
    return rows / cfg_.head_dim;
  }

  /// x: [b, s, hidden] (whole sequence, as q/k/v's hooks deliver it) -> [b, s, hidden] local
  /// (partial sums under RowwiseParallel, reduced by o's hook).
  at::Tensor forward(const at::Tensor& x) {
    const int64_t heads = local_heads();
    const auto split = [&](const at::Tensor& t) {  // [b, s, heads*d] -> [b, heads, s, d]
      return t.view({t.size(0), t.size(1), heads, cfg_.head_dim}).transpose(1, 2);
    };
    at::Tensor qh = split(q->forward(x));
    at::Tensor kh = split(k->forward(x));
    at::Tensor vh = split(v->forward(x));
    HYPER_CHECK_VALUE(qh.size(2) == kh.size(2) && kh.size(1) == heads && vh.size(1) == heads,
                      "TransformerBlock attention: q/k/v shapes disagree: ", qh.sizes(), " ",
                      kh.sizes(), " ", vh.sizes());
    at::Tensor ctx;
    {
      auto region = hyper::trace::Region::compute(observer_, "attn core", observer_rank_);
      at::Tensor scores = at::matmul(qh, kh.transpose(-2, -1)) /
                          std::sqrt(static_cast<double>(cfg_.head_dim));
      if (cfg_.causal) {
        const int64_t s = scores.size(-1);
        at::Tensor mask = at::ones({s, s}, at::TensorOptions().dtype(at::kBool)).triu(1);
        scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
      }
      at::Tensor probs = at::softmax(scores, -1);
      ctx = at::matmul(probs, vh).transpose(1, 2).reshape(
          {x.size(0), qh.size(2), heads * cfg_.head_dim});
    }
    return o->forward(ctx);
  }

  /// Reports the attention core (scores, softmax, weighted sum) as a compute region of
  /// `rank` to `observer` (nullptr: stop reporting).
  void set_observer(hyper::trace::Observer* observer, int rank) {
    observer_ = observer;
    observer_rank_ = rank;
  }

  LinearM q{nullptr}, k{nullptr}, v{nullptr}, o{nullptr};

 private:
  TransformerConfig cfg_;
  hyper::trace::Observer* observer_ = nullptr;
  int observer_rank_ = 0;
};

/// mlp.w1 -> activation -> mlp.w2.
template <class LinearM>
class BasicMlpImpl : public torch::nn::Module {
 public:
  explicit BasicMlpImpl(const TransformerConfig& cfg) : act_(cfg.activation) {
    w1 = register_module("w1", LinearM(torch::nn::LinearOptions(cfg.hidden, cfg.ffn).bias(cfg.bias)));
    w2 = register_module("w2", LinearM(torch::nn::LinearOptions(cfg.ffn, cfg.hidden).bias(cfg.bias)));
  }
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = w1->forward(x);
    h = act_ == Activation::kGelu ? at::gelu(h) : at::relu(h);
    return w2->forward(h);
  }
  LinearM w1{nullptr}, w2{nullptr};

 private:
  Activation act_;
};

/// The pre-norm block (see the file comment). LinearM / NormM: hyper::nn::Linear /
/// hyper::nn::LayerNorm (TransformerBlock) or torch::nn::Linear / torch::nn::LayerNorm
/// (PlainTransformerBlock).
template <class LinearM, class NormM>
class BasicTransformerBlockImpl : public torch::nn::Module {
 public:
  using Attention = torch::nn::ModuleHolder<BasicAttentionImpl<LinearM>>;
  using Mlp = torch::nn::ModuleHolder<BasicMlpImpl<LinearM>>;

  explicit BasicTransformerBlockImpl(const TransformerConfig& cfg) : cfg(cfg) {
    norm1 = register_module(
        "norm1", NormM(torch::nn::LayerNormOptions({cfg.hidden}).eps(cfg.ln_eps)));
    attn = register_module("attn", Attention(cfg));
    norm2 = register_module(
        "norm2", NormM(torch::nn::LayerNormOptions({cfg.hidden}).eps(cfg.ln_eps)));
    mlp = register_module("mlp", Mlp(cfg));
  }

  /// x: [b, s, hidden] ([b, s/n, hidden] local under sequence_parallel_plan).
  at::Tensor forward(const at::Tensor& x) {
    HYPER_CHECK_VALUE(x.dim() == 3 && x.size(2) == cfg.hidden,
                      "TransformerBlock: input must be [batch, seq, hidden=", cfg.hidden,
                      "], got ", x.sizes());
    at::Tensor y = x + attn->forward(norm1->forward(x));
    return y + mlp->forward(norm2->forward(y));
  }

  /// See AttentionImpl::set_observer.
  void set_observer(hyper::trace::Observer* observer, int rank) {
    attn->set_observer(observer, rank);
  }

  const TransformerConfig cfg;
  NormM norm1{nullptr}, norm2{nullptr};
  Attention attn{nullptr};
  Mlp mlp{nullptr};
};

using AttentionImpl = BasicAttentionImpl<hyper::nn::Linear>;
TORCH_MODULE(Attention);
using MlpImpl = BasicMlpImpl<hyper::nn::Linear>;
TORCH_MODULE(Mlp);
/// The block of hookable hyper::nn modules (hyper::tp's styles run in their hooks; the
/// activations between modules are local tensors).
using TransformerBlockImpl = BasicTransformerBlockImpl<hyper::nn::Linear, hyper::nn::LayerNorm>;
TORCH_MODULE(TransformerBlock);
/// The same block of plain torch::nn modules: parallelize_module makes its parameters
/// DTensor tensors (hyper::as_tensor) and the activations between modules are DTensor
/// tensors too (issue 14).
using PlainTransformerBlockImpl =
    BasicTransformerBlockImpl<torch::nn::Linear, torch::nn::LayerNorm>;
TORCH_MODULE(PlainTransformerBlock);

/// The holder type of a block Impl (TransformerBlock for TransformerBlockImpl, ...).
template <class Impl>
struct BlockHolder;
template <>
struct BlockHolder<TransformerBlockImpl> {
  using type = TransformerBlock;
};
template <>
struct BlockHolder<PlainTransformerBlockImpl> {
  using type = PlainTransformerBlock;
};

// ---------------------------------------------------------------------------------------
// Plans

/// Throws hyper::ValueError when `tp_size` does not divide cfg.n_heads (each rank must
/// compute whole heads), naming both values.
inline void check_tp_size(const TransformerConfig& cfg, int64_t tp_size) {
  HYPER_CHECK_VALUE(tp_size >= 1, "TransformerBlock: tensor-parallel size must be >= 1, got ",
                    tp_size);
  HYPER_CHECK_VALUE(cfg.n_heads % tp_size == 0, "TransformerBlock: n_heads=", cfg.n_heads,
                    " is not divisible by the tensor-parallel size ", tp_size,
                    " (every rank must compute whole heads)");
}

/// The sequence-parallel plan: norms SequenceParallel(1); q/k/v ColwiseParallel with input
/// Shard(1); o RowwiseParallel with output Shard(1); w1 Colwise input Shard(1); w2 Rowwise
/// output Shard(1). `async` is every style's async_op. Throws (check_tp_size) when tp_size
/// does not divide n_heads.
inline hyper::tp::ParallelizePlan sequence_parallel_plan(const TransformerConfig& cfg,
                                                         int64_t tp_size, bool async = true) {
  check_tp_size(cfg, tp_size);
  using hyper::tp::ColwiseParallel;
  using hyper::tp::RowwiseParallel;
  using hyper::tp::SequenceParallel;
  const auto col = [&] { return ColwiseParallel().input_layouts(Shard(1)).async_op(async); };
  return {
      {"norm1", SequenceParallel(1).async_op(async)},
      {"attn.q", col()},
      {"attn.k", col()},
      {"attn.v", col()},
      {"attn.o", RowwiseParallel().output_layouts(Shard(1)).async_op(async)},
      {"norm2", SequenceParallel(1).async_op(async)},
      {"mlp.w1", col()},
      {"mlp.w2", RowwiseParallel().output_layouts(Shard(1)).async_op(async)},
  };
}

/// The plain (Megatron without sequence parallelism) plan: q/k/v and w1 ColwiseParallel
/// (input Replicate), o and w2 RowwiseParallel (output Replicate, an all-reduce); norms
/// unsharded (every rank computes them on the whole, replicated activation).
inline hyper::tp::ParallelizePlan tensor_parallel_plan(const TransformerConfig& cfg,
                                                       int64_t tp_size, bool async = true) {
  check_tp_size(cfg, tp_size);
  using hyper::tp::ColwiseParallel;
  using hyper::tp::RowwiseParallel;
  return {
      {"attn.[qkv]", ColwiseParallel().async_op(async)},
      {"attn.o", RowwiseParallel().async_op(async)},
      {"mlp.w1", ColwiseParallel().async_op(async)},
      {"mlp.w2", RowwiseParallel().async_op(async)},
  };
}

/// Tensor parallelism for the plain torch::nn block: tensor_parallel_plan makes attn.q/k/v
/// and mlp.w1 S(0), attn.o and mlp.w2 S(1) DTensor tensors; hyper::distribute_module then
/// makes every parameter the plan left plain (the norms') Replicate, so that the optimizer
/// updates them as DTensors too (their gradients are DTensor tensors). Collective (the
/// replicated values are rank 0's).
/// With `sequence_parallel`, plain_sequence_parallel_plan instead: the norms' parameters are
/// Replicate through SequenceParallel (the same values), and the block expects its input as a
/// DTensor tensor sharded on the sequence dim (shard_sequence_dtensor); see
/// plain_sequence_parallel_plan for what moves.
/// Then hyper::overlap_gradient_redistribution: the Partial gradients of the Replicate
/// parameters (the norms', the Rowwise biases') are all-reduced by async collectives issued in
/// the backward as autograd produces them, not one after another in the optimizer step.
inline void parallelize_plain_block(PlainTransformerBlock& block, const hyper::DeviceMesh& mesh,
                                    bool sequence_parallel = false);

/// Sequence parallelism for the plain torch::nn block (Megatron-LM's SP without hooks):
/// norm1/norm2 SequenceParallel(1) (weight, bias Replicate), attn.q/k/v and mlp.w1 Colwise
/// (S(0)), attn.o and mlp.w2 Rowwise (S(1)), every layout the default one (a plain module has
/// no boundary to relayout at). Given a Shard(1) input, the sharding rules then move: the
/// norms run on the sequence shard; q/k/v's linear gathers the normed input to Replicate once
/// (the first gather is remembered on the tensor, DTensorImpl::local_as), w1's likewise;
/// o's and w2's outputs are P(sum), and the residual add with the S(1) stream reduce-scatters
/// them back to S(1). Throws (check_tp_size) when tp_size does not divide n_heads.
inline hyper::tp::ParallelizePlan plain_sequence_parallel_plan(const TransformerConfig& cfg,
                                                               int64_t tp_size) {
  check_tp_size(cfg, tp_size);
  using hyper::tp::ColwiseParallel;
  using hyper::tp::RowwiseParallel;
  using hyper::tp::SequenceParallel;
  return {
      {"norm1", SequenceParallel(1)},        {"attn.[qkv]", ColwiseParallel()},
      {"attn.o", RowwiseParallel()},         {"norm2", SequenceParallel(1)},
      {"mlp.w1", ColwiseParallel()},         {"mlp.w2", RowwiseParallel()},
  };
}

inline void parallelize_plain_block(PlainTransformerBlock& block, const hyper::DeviceMesh& mesh,
                                    bool sequence_parallel) {
  hyper::tp::parallelize_module(block.ptr(), mesh,
                                sequence_parallel
                                    ? plain_sequence_parallel_plan(block->cfg, mesh.size(0))
                                    : tensor_parallel_plan(block->cfg, mesh.size(0)));
  hyper::distribute_module(block.ptr(), mesh);
  hyper::overlap_gradient_redistribution(block.ptr());
}

// ---------------------------------------------------------------------------------------
// Deterministic initialization and copies

/// A private CPU generator (thread-safe per generator; never the global one).
inline at::Generator make_generator(uint64_t seed) {
  return at::detail::createCPUGenerator(seed);
}

/// Overwrites every parameter of `block` deterministically from `seed`, in
/// named_parameters() order: Linear weights N(0, 1/in_features), biases N(0, 0.02^2),
/// LayerNorm weights 1 + N(0, 0.1^2) and biases N(0, 0.1^2) (non-trivial, so their
/// gradients are exercised). Call on an unparallelized block.
template <class Impl>
void init_block(Impl& block, uint64_t seed) {
  at::Generator gen = make_generator(seed);
  at::NoGradGuard no_grad;
  for (auto& item : block.named_parameters()) {
    at::Tensor p = item.value();
    const std::string& name = item.key();
    const bool is_norm = name.rfind("norm", 0) == 0;
    const bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    at::Tensor r = at::randn(p.sizes(), gen, p.options());
    if (is_norm) {
      p.copy_(is_bias ? r * 0.1 : 1.0 + r * 0.1);
    } else if (is_bias) {
      p.copy_(r * 0.02);
    } else {
      p.copy_(r / std::sqrt(static_cast<double>(p.size(1))));
    }
  }
}

/// A fresh block with init_block(seed) parameters.
template <class Block = TransformerBlock>
Block make_block(const TransformerConfig& cfg, uint64_t seed) {
  Block block(cfg);
  init_block(*block, seed);
  return block;
}

/// A fresh block with a copy of `src`'s parameters (src must be unparallelized).
template <class Impl>
typename BlockHolder<Impl>::type copy_block(const Impl& src) {
  typename BlockHolder<Impl>::type block(src.cfg);
  at::NoGradGuard no_grad;
  auto from = src.named_parameters();
  for (auto& item : block->named_parameters()) {
    const at::Tensor* s = from.find(item.key());
    HYPER_CHECK_VALUE(s != nullptr && s->sizes() == item.value().sizes(),
                      "copy_block: source parameter ", item.key(),
                      " missing or of another shape (is the source parallelized?)");
    item.value().copy_(*s);
  }
  return block;
}

// ---------------------------------------------------------------------------------------
// Data, loss, sequence sharding

/// A synthetic regression batch: input and target, [batch, seq, hidden], N(0, 1).
struct Batch {
  at::Tensor x;
  at::Tensor target;
};

/// The same Batch for the same arguments on every rank and thread.
inline Batch make_batch(const TransformerConfig& cfg, int64_t batch, int64_t seq, uint64_t seed) {
  at::Generator gen = make_generator(seed * 7919 + 17);
  Batch b;
  b.x = at::randn({batch, seq, cfg.hidden}, gen, at::kFloat);
  b.target = at::randn({batch, seq, cfg.hidden}, gen, at::kFloat);
  return b;
}

/// This rank's shard of `global` along `dim` under Shard(dim) on the 1-D `mesh` (torch.chunk
/// semantics, as the TP styles; no communication). A new tensor (contiguous).
inline at::Tensor shard_sequence(const at::Tensor& global, const hyper::DeviceMesh& mesh,
                                 int64_t dim = 1) {
  return hyper::distribute_tensor(global, mesh, {hyper::Shard(dim)}).to_local().contiguous();
}

/// `global` as a DTensor tensor sharded on `dim` (Shard(dim) on the 1-D `mesh`, torch.chunk
/// sizes; this rank's slice, no communication): the input of a plain block parallelized with
/// sequence parallelism (parallelize_plain_block(block, mesh, true)).
inline at::Tensor shard_sequence_dtensor(const at::Tensor& global, const hyper::DeviceMesh& mesh,
                                         int64_t dim = 1) {
  return hyper::as_tensor(hyper::DTensor::from_local(shard_sequence(global, mesh, dim), mesh,
                                                     {hyper::Shard(dim)}, global.sizes().vec()));
}

/// The whole tensor from every rank's Shard(dim) shard (collective; global shape given, so
/// uneven shards work). Differentiable.
inline at::Tensor gather_sequence(const at::Tensor& local, const hyper::DeviceMesh& mesh,
                                  std::vector<int64_t> global_shape, int64_t dim = 1) {
  return hyper::DTensor::from_local(local, mesh, {hyper::Shard(dim)}, std::move(global_shape))
      .full_tensor();
}

/// Single-device loss: mean squared error. Call it qualified (`hyper::examples::mse_loss`):
/// unqualified, argument-dependent lookup also finds at::mse_loss and the call is ambiguous.
inline at::Tensor mse_loss(const at::Tensor& y, const at::Tensor& target) {
  return (y - target).pow(2).mean();
}

/// This rank's part of the global MSE under sequence parallelism: sum of its squared
/// errors divided by the *global* element count. The parts sum (sum_over_mesh) to
/// mse_loss of the whole output, and calling backward() on each rank's part gives exactly
/// the single-device gradients (the styles' collectives carry the rest).
inline at::Tensor sp_mse_loss(const at::Tensor& y_local, const at::Tensor& target_local,
                              int64_t global_numel) {
  return (y_local - target_local).pow(2).sum() / static_cast<double>(global_numel);
}

/// Sum of a scalar over the 1-D mesh (an all-reduce through a Partial DTensor), as double.
inline double sum_over_mesh(const at::Tensor& scalar, const hyper::DeviceMesh& mesh) {
  at::Tensor part = scalar.detach().reshape({1}).to(at::kDouble);
  return hyper::DTensor::from_local(part, mesh, {hyper::Partial()}, std::vector<int64_t>{1})
      .full_tensor()
      .item<double>();
}

// ---------------------------------------------------------------------------------------
// Checks against the single-device block

/// One disagreement found by compare_parameters / compare_gradients.
struct Mismatch {
  std::string name;
  std::string what;
  double max_abs_diff = 0;
};

namespace detail {
inline std::string describe(const std::vector<Mismatch>& mismatches) {
  std::ostringstream os;
  for (const auto& m : mismatches) {
    os << m.name << ": " << m.what << " (max |diff| " << m.max_abs_diff << ")\n";
  }
  return os.str();
}

/// `allclose` (or exact for rtol = atol = 0) of two tensors, or the mismatch.
inline void compare_tensor(const std::string& name, bool grads, const at::Tensor& mine,
                           const at::Tensor& expect, double rtol, double atol,
                           std::vector<Mismatch>* out) {
  if (mine.sizes() != expect.sizes()) {
    out->push_back({name, "local shape differs"});
    return;
  }
  const bool ok = (rtol == 0 && atol == 0) ? at::equal(mine, expect)
                                           : at::allclose(mine, expect, rtol, atol);
  if (!ok) {
    const double diff = mine.numel() == 0 ? 0.0 : (mine - expect).abs().max().item<double>();
    out->push_back({name, grads ? "gradient differs" : "value differs", diff});
  }
}

/// A plain-module model whose parameters are DTensor tensors (parallelize_module on
/// torch::nn modules): each parameter's (or gradient's) full tensor against `ref`'s.
/// Collective: every rank walks the parameters in the same order.
inline std::vector<Mismatch> compare_dtensor_params(
    const torch::OrderedDict<std::string, at::Tensor>& params,
    const torch::OrderedDict<std::string, at::Tensor>& ref_params, bool grads, double rtol,
    double atol) {
  std::vector<Mismatch> out;
  if (params.size() != ref_params.size())
    out.push_back({"<all>", "parameter counts differ: " + std::to_string(params.size()) +
                                " vs " + std::to_string(ref_params.size())});
  for (const auto& item : ref_params) {
    const std::string& name = item.key();
    const at::Tensor* p = params.find(name);
    if (p == nullptr) {
      out.push_back({name, "missing in the parallelized block"});
      continue;
    }
    const at::Tensor mine = grads ? p->grad() : p->detach();
    const at::Tensor full = grads ? item.value().grad() : item.value().detach();
    if (!mine.defined() || !full.defined()) {
      out.push_back({name, grads ? "gradient undefined" : "value undefined"});
      continue;
    }
    if (!hyper::is_dtensor(mine)) {
      out.push_back({name, "not a DTensor tensor"});
      continue;
    }
    compare_tensor(name, grads, hyper::as_dtensor(mine).full_tensor(), full, rtol, atol, &out);
  }
  return out;
}

/// Compares `model`'s local tensors (parameter values or gradients) with the matching
/// shards (from hyper::tp::state_dict's recorded sharding) of `ref`'s.
inline std::vector<Mismatch> compare(const torch::nn::Module& model,
                                     const torch::nn::Module& ref, const hyper::DeviceMesh& mesh,
                                     bool grads, double rtol, double atol) {
  std::vector<Mismatch> out;
  auto params = model.named_parameters();
  auto ref_params = ref.named_parameters();
  bool dtensor_params = false;
  for (const auto& item : params) dtensor_params = dtensor_params || hyper::is_dtensor(item.value());
  if (dtensor_params) return compare_dtensor_params(params, ref_params, grads, rtol, atol);
  const hyper::tp::ParamDict sd = hyper::tp::state_dict(model, mesh);
  if (sd.size() != ref_params.size()) {
    out.push_back({"<all>", "parameter counts differ: " + std::to_string(sd.size()) + " vs " +
                                std::to_string(ref_params.size())});
  }
  for (const auto& item : ref_params) {
    const std::string& name = item.key();
    auto it = sd.find(name);
    if (it == sd.end()) {
      out.push_back({name, "missing in the parallelized block"});
      continue;
    }
    if (it->second.shape() != item.value().sizes().vec()) {
      out.push_back({name, "global shape differs"});
      continue;
    }
    at::Tensor mine = grads ? params[name].grad() : params[name].detach();
    at::Tensor full = grads ? item.value().grad() : item.value().detach();
    if (!mine.defined() || !full.defined()) {
      out.push_back({name, grads ? "gradient undefined" : "value undefined"});
      continue;
    }
    compare_tensor(name, grads, mine,
                   hyper::distribute_tensor(full, mesh, it->second.placements()).to_local(),
                   rtol, atol, &out);
  }
  return out;
}
}  // namespace detail

/// Every parameter of the parallelized `model` against the matching shard of the
/// single-device `ref`'s parameter (rtol = atol = 0: exact). Empty when all agree.
inline std::vector<Mismatch> compare_parameters(const torch::nn::Module& model,
                                                const torch::nn::Module& ref,
                                                const hyper::DeviceMesh& mesh, double rtol = 0,
                                                double atol = 0) {
  return detail::compare(model, ref, mesh, /*grads=*/false, rtol, atol);
}

/// Every parameter gradient of the parallelized `model` against the matching shard of the
/// single-device `ref`'s gradient (at::allclose(rtol, atol)). Empty when all agree.
inline std::vector<Mismatch> compare_gradients(const torch::nn::Module& model,
                                               const torch::nn::Module& ref,
                                               const hyper::DeviceMesh& mesh, double rtol = 1e-4,
                                               double atol = 1e-5) {
  return detail::compare(model, ref, mesh, /*grads=*/true, rtol, atol);
}

/// "name: what (max |diff| d)" lines of `mismatches` ("" when empty).
inline std::string describe(const std::vector<Mismatch>& mismatches) {
  return detail::describe(mismatches);
}

}  // namespace hyper::examples
