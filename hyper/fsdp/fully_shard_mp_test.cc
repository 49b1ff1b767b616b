// hyper::fsdp::fully_shard on 2 and 4 ranks (threads): a Llama-style C++ model (hookable
// blocks of plain torch::nn modules) trains like the same model on one device over the whole
// global batch; gradients, reshard_after_forward both ways, prefetch, gradient accumulation,
// mixed precision, zero-unit ranks and the refusals.

#include "hyper/fsdp/fully_shard.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/world.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/dcp/state_dict.h"
#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"
#include "hyper/nn/hookable.h"
#include "hyper/nn/parameters.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/parallelize.h"

namespace hyper::fsdp {
namespace {

using comm::testing::run_on_mesh;
using hyper::testing::error_of;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 101, kDim = 48, kHeads = 4, kHidden = 136, kLayers = 3, kSeq = 16;
constexpr int64_t kPerRank = 2;

/// RMSNorm reading its weight through the registry (fully_shard swaps registered tensors).
struct RMSNormImpl : torch::nn::Module {
  explicit RMSNormImpl(int64_t d) { register_parameter("weight", torch::ones({d})); }
  at::Tensor forward(const at::Tensor& x) {
    const at::Tensor w = named_parameters(false)["weight"];
    return x * at::rsqrt(x.pow(2).mean(-1, true) + 1e-6) * w;
  }
};
TORCH_MODULE(RMSNorm);

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  auto halves = x.chunk(2, -1);
  return at::cat({halves[0] * cos - halves[1] * sin, halves[0] * sin + halves[1] * cos}, -1);
}

torch::nn::Linear linear(int64_t in, int64_t out) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false));
}

struct BlockImpl : torch::nn::Module {
  BlockImpl() {
    attention_norm = register_module("attention_norm", RMSNorm(kDim));
    wq = register_module("wq", linear(kDim, kDim));
    wk = register_module("wk", linear(kDim, kDim));
    wv = register_module("wv", linear(kDim, kDim));
    wo = register_module("wo", linear(kDim, kDim));
    ffn_norm = register_module("ffn_norm", RMSNorm(kDim));
    w1 = register_module("w1", linear(kDim, kHidden));
    w3 = register_module("w3", linear(kDim, kHidden));
    w2 = register_module("w2", linear(kHidden, kDim));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
    const int64_t b = x.size(0), s = x.size(1);
    const auto split = [&](const at::Tensor& t) {
      return t.view({b, s, kHeads, kDim / kHeads}).transpose(1, 2);
    };
    const at::Tensor h = attention_norm(x);
    const at::Tensor q = rotary(split(wq(h)), cos, sin), k = rotary(split(wk(h)), cos, sin);
    const at::Tensor y = at::scaled_dot_product_attention(q, k, split(wv(h)), {}, 0.0, true);
    const at::Tensor x2 = x + wo(y.transpose(1, 2).reshape({b, s, kDim}));
    const at::Tensor f = ffn_norm(x2);
    return x2 + w2(at::silu(w1(f)) * w3(f));
  }
  RMSNorm attention_norm{nullptr}, ffn_norm{nullptr};
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr}, w1{nullptr},
      w2{nullptr}, w3{nullptr};
};
using Block = nn::Hooked<BlockImpl>;

struct LlamaImpl : torch::nn::Module {
  LlamaImpl() {
    tok_embeddings = register_module("tok_embeddings", torch::nn::Embedding(kVocab, kDim));
    layers = register_module("layers", torch::nn::ModuleList());
    for (int64_t i = 0; i < kLayers; ++i) {
      blocks.push_back(Block());
      layers->push_back(blocks.back().ptr());
    }
    norm = register_module("norm", RMSNorm(kDim));
    output = register_module("output", linear(kDim, kVocab));
    const int64_t half = kDim / kHeads / 2;
    const at::Tensor freqs = 1.0 / at::pow(10000.0, at::arange(half, at::kFloat) / half);
    const at::Tensor angles = at::outer(at::arange(kSeq, at::kFloat), freqs);
    cos = angles.cos();
    sin = angles.sin();
  }
  at::Tensor forward(const at::Tensor& tokens) {
    const int64_t s = tokens.size(1);
    at::Tensor h = tok_embeddings(tokens);
    const at::Tensor c = cos.narrow(0, 0, s).to(h.scalar_type());
    const at::Tensor n = sin.narrow(0, 0, s).to(h.scalar_type());
    for (auto& b : blocks) h = b->forward(h, c, n);
    return output(norm(h));
  }
  torch::nn::Embedding tok_embeddings{nullptr};
  torch::nn::ModuleList layers{nullptr};
  std::vector<Block> blocks;
  RMSNorm norm{nullptr};
  torch::nn::Linear output{nullptr};
  at::Tensor cos, sin;
};
using Llama = nn::Hooked<LlamaImpl>;

/// The model with its parameters drawn from a generator of its own (ranks are threads: the
/// global generator is shared), the same for every call.
Llama make_llama() {
  Llama m;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.2);
  return m;
}

/// The global batch of a step: rank r trains on rows [r * kPerRank, (r + 1) * kPerRank).
at::Tensor batch(int64_t step, int64_t ranks) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1000 + step);
  return at::randint(0, kVocab, {ranks * kPerRank, kSeq + 1}, gen);
}

at::Tensor loss_of(Llama& m, const at::Tensor& tokens) {
  const at::Tensor logits = m->forward(tokens.narrow(1, 0, kSeq));
  return at::cross_entropy_loss(logits.reshape({-1, kVocab}).to(at::kFloat),
                                tokens.narrow(1, 1, kSeq).reshape({-1}));
}

at::Tensor rows(const at::Tensor& tokens, int64_t rank) {
  return tokens.narrow(0, rank * kPerRank, kPerRank);
}

FsdpModule shard_llama(Llama& m, const DeviceMesh& mesh, FsdpOptions o = {}, int64_t block = 4) {
  FsdpOptions blocks = o;
  blocks.shard_block = block;
  for (auto& b : m->blocks) fully_shard(b, mesh, blocks);
  return fully_shard(m, mesh, o);
}

/// The mean over mesh dim 0 (the data-parallel ranks) of each rank's loss (a DTensor's value
/// under tensor parallelism).
double global_loss(const at::Tensor& loss, const DeviceMesh& mesh) {
  const at::Tensor value = is_dtensor(loss) ? as_dtensor(loss).full_tensor() : loss;
  return comm::all_reduce(value.detach().to(at::kDouble).reshape({1}), comm::ReduceOp::kAvg,
                          mesh.get_group(0))
      .item<double>();
}

using Rows = std::function<at::Tensor(const at::Tensor&)>;

/// One backward of `model` on `mine(tokens)` and of `ref` on `tokens`: every gradient is a
/// DTensor laid out as its parameter, equal to one device's.
void expect_gradients_like_one_device(Llama& model, Llama& ref, const at::Tensor& tokens,
                                      const Rows& mine) {
  loss_of(model, mine(tokens)).backward();
  loss_of(ref, tokens).backward();
  const auto g = model->named_parameters(), w = ref->named_parameters();
  for (size_t i = 0; i < g.size(); ++i) {
    const at::Tensor& grad = g[i].value().grad();
    ASSERT_TRUE(grad.defined() && is_dtensor(grad)) << g[i].key();
    EXPECT_EQ(as_dtensor(grad).placements(), as_dtensor(g[i].value()).placements()) << g[i].key();
    EXPECT_TRUE(at::allclose(as_dtensor(grad).full_tensor(), w[i].value().grad(), 1e-5, 1e-7))
        << "gradient of " << g[i].key();
  }
}

/// `steps` SGD-with-momentum steps of `model` on `mine(batch)` and of `ref` on the batch of
/// `ranks` ranks' rows (gradients cleared first): each step's mean loss equals one device's.
void train_like_one_device(Llama& model, Llama& ref, int64_t steps, int64_t ranks,
                           const Rows& mine, const DeviceMesh& mesh) {
  torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  opt.zero_grad();
  ref_opt.zero_grad();
  for (int64_t step = 0; step < steps; ++step) {
    const at::Tensor tokens = batch(step, ranks);
    const at::Tensor loss = loss_of(model, mine(tokens));
    loss.backward();
    opt.step();
    opt.zero_grad();
    const at::Tensor want = loss_of(ref, tokens);
    want.backward();
    ref_opt.step();
    ref_opt.zero_grad();
    EXPECT_NEAR(global_loss(loss, mesh), want.item<double>(), 1e-5 * want.item<double>())
        << "step " << step;
  }
}

void expect_params_near(Llama& got, Llama& want, double rtol, double atol, const std::string& what) {
  const auto g = got->named_parameters(), w = want->named_parameters();
  ASSERT_EQ(g.size(), w.size());
  for (size_t i = 0; i < g.size(); ++i) {
    ASSERT_TRUE(is_dtensor(g[i].value())) << what << ": " << g[i].key() << " is not a DTensor";
    const at::Tensor full = as_dtensor(g[i].value()).full_tensor();
    EXPECT_TRUE(at::allclose(full, w[i].value(), rtol, atol))
        << what << ": " << g[i].key() << " differs by "
        << (full - w[i].value()).abs().max().item<double>();
  }
}

void trains_like_one_device(const DeviceMesh& mesh, bool reshard_after_forward) {
  const int64_t r = mesh.get_local_rank(0), n = mesh.size();
  Llama model = make_llama(), ref = make_llama();
  FsdpOptions o;
  o.reshard_after_forward = reshard_after_forward;
  FsdpModule root = shard_llama(model, mesh, o);
  const Rows mine = [&](const at::Tensor& t) { return rows(t, r); };
  expect_gradients_like_one_device(model, ref, batch(9, n), mine);
  train_like_one_device(model, ref, 3, n, mine, mesh);
  expect_params_near(model, ref, 1e-5, 1e-6, "3 SGD steps");
  // Nothing copied outside the collectives; the buffers are freed after backward.
  EXPECT_EQ(root.copied_bytes(), 0);
  EXPECT_EQ(root.gathered().storage().nbytes(), 0u);
}

TEST(FullyShard, TrainsLikeOneDeviceOnTwoAndFourRanks) {
  for (const int64_t ranks : {2, 4})
    for (const bool reshard : {true, false})
      run_on_mesh({ranks}, [&](const DeviceMesh& mesh) { trains_like_one_device(mesh, reshard); });
}

TEST(FullyShard, HybridShardingOnATwoByTwoMesh) {
  // Replicate over mesh dim 0, shard over dim 1: 4 ranks, 4 different batches of rows.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const int64_t r = mesh.get_rank();
    Llama model = make_llama(), ref = make_llama();
    shard_llama(model, mesh);
    const auto w = model->named_parameters();
    EXPECT_EQ(as_dtensor(w[0].value()).placements()[0], Replicate());
    torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD ref_opt(ref->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int64_t step = 0; step < 2; ++step) {
      const at::Tensor tokens = batch(step, 4);
      const at::Tensor loss = loss_of(model, rows(tokens, r));
      loss.backward();
      opt.step();
      opt.zero_grad();
      loss_of(ref, tokens).backward();
      ref_opt.step();
      ref_opt.zero_grad();
    }
    expect_params_near(model, ref, 1e-5, 1e-6, "HSDP, 2 SGD steps");
  });
}

/// Tensor parallelism on `tp_mesh` (hyper::tp on the blocks' plain Linear modules: q / k / v
/// and w1 / w3 column-wise, wo and w2 row-wise; their activations flow on as DTensor tensors)
/// and every other parameter Replicate there.
void tensor_parallel(Llama& m, const DeviceMesh& tp_mesh) {
  for (auto& b : m->blocks)
    tp::parallelize_module(b.ptr(), tp_mesh,
                           {{"wq", tp::ColwiseParallel()}, {"wk", tp::ColwiseParallel()},
                            {"wv", tp::ColwiseParallel()}, {"wo", tp::RowwiseParallel()},
                            {"w1", tp::ColwiseParallel()}, {"w3", tp::ColwiseParallel()},
                            {"w2", tp::RowwiseParallel()}});
  for (const auto& item : m->named_modules("", /*include_self=*/true)) {
    torch::nn::Module& owner = *item.value();
    for (const auto& key : owner.named_parameters(/*recurse=*/false).keys()) {
      const at::Tensor p = nn::registered_parameter(owner, key);
      if (is_dtensor(p)) continue;
      at::Tensor r = as_tensor(distribute_tensor(p.detach(), tp_mesh, {Replicate()}));
      r.set_requires_grad(true);
      nn::replace_parameter(owner, key, r);
    }
  }
}

TEST(FullyShard, DataParallelTimesTensorParallelOnATwoByTwoMesh) {
  // Mesh [dp 2, tp 2]: the blocks tensor parallel, then fully_shard over dp on the 2-D mesh;
  // each dp rank trains on its rows (its tp ranks share them). Gradients of one backward,
  // then 2 SGD steps against one device.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const int64_t dp = mesh.get_coordinate()[0];
    Llama model = make_llama(), ref = make_llama();
    tensor_parallel(model, mesh[1]);
    FsdpModule root = shard_llama(model, mesh);
    const DTensor w1 = as_dtensor(model->blocks[0]->w1->weight);
    ASSERT_TRUE(w1.placements()[0].is_ragged_shard()) << w1.to_string();
    EXPECT_EQ(w1.placements()[1], Shard(0));
    const Rows dp_rows = [&](const at::Tensor& tokens) {
      return tokens.narrow(0, dp * 2 * kPerRank, 2 * kPerRank);
    };
    expect_gradients_like_one_device(model, ref, batch(9, 4), dp_rows);
    train_like_one_device(model, ref, 2, 4, dp_rows, mesh);
    expect_params_near(model, ref, 1e-5, 1e-6, "DP x TP, 2 SGD steps");
    EXPECT_EQ(root.copied_bytes(), 0);
  });
  // Refused: tensor-parallel parameters on a 1-D mesh, and beside plain ones.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    Llama model = make_llama();
    tensor_parallel(model, mesh[1]);
    EXPECT_THAT(error_of([&] { fully_shard(model->blocks[0], mesh[0]); }),
                HasSubstr("tensor-parallel parameters need a 2-D mesh"));
    Llama mixed = make_llama();
    tp::parallelize_module(mixed->blocks[0].ptr(), mesh[1], {{"w1", tp::ColwiseParallel()}});
    EXPECT_THAT(error_of([&] { fully_shard(mixed->blocks[0], mesh); }),
                HasSubstr("(a bucket is either tensor parallel on every parameter or on none)"));
  });
}

TEST(FullyShard, ParametersAreViewsOfTheGatheredBufferInsideForward) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    for (const bool reshard : {true, false}) {
      Llama model = make_llama();
      FsdpOptions o;
      o.reshard_after_forward = reshard;
      shard_llama(model, mesh, o);
      Block& block = model->blocks[0];
      FsdpModule b = fsdp_module(block);
      bool plain = false, view = false;
      auto h = block->register_forward_pre_hook(
          [&](torch::nn::Module&, const nn::Tensors&) -> std::optional<nn::Tensors> {
            const at::Tensor w = block->wq->weight;
            const at::Tensor full = b.gathered();
            plain = !is_dtensor(w);
            const auto* base = static_cast<const char*>(full.data_ptr());
            const auto* at = static_cast<const char*>(w.data_ptr());
            view = at >= base && at < base + full.numel() * full.element_size();
            return std::nullopt;
          });
      const at::Tensor loss = loss_of(model, rows(batch(0, 2), mesh.get_local_rank(0)));
      h.remove();
      EXPECT_TRUE(plain && view);
      EXPECT_EQ(b.gathered().storage().nbytes() == 0, reshard);
      EXPECT_TRUE(is_dtensor(block->wq->weight));
      loss.backward();
      EXPECT_EQ(b.gathered().storage().nbytes(), 0u);
    }
  });
}

TEST(FullyShard, PrefetchFollowsTheFirstForward) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    Llama model = make_llama();
    shard_llama(model, mesh);
    std::vector<FsdpModule> blocks;
    for (auto& b : model->blocks) blocks.push_back(fsdp_module(b));
    std::vector<std::vector<std::string>> forward0, backward2;
    const auto states = [&] {
      std::vector<std::string> v;
      for (const auto& b : blocks) v.push_back(b.state());
      return v;
    };
    model->blocks[0]->register_forward_pre_hook(
        [&](torch::nn::Module&, const nn::Tensors&) -> std::optional<nn::Tensors> {
          forward0.push_back(states());
          return std::nullopt;
        });
    // Inside block 2's backward: a hook on the gathered w2 weight (the leaf its forward
    // used; its gradient is among the block's first).
    bool watch = false;
    model->blocks[2]->register_forward_pre_hook(
        [&](torch::nn::Module&, const nn::Tensors&) -> std::optional<nn::Tensors> {
          if (watch)
            model->blocks[2]->w2->weight.register_hook(
                [&](const at::Tensor&) { backward2.push_back(states()); });
          return std::nullopt;
        });
    for (int64_t step = 0; step < 2; ++step) {
      watch = step == 1;
      loss_of(model, rows(batch(step, 2), mesh.get_local_rank(0))).backward();
    }
    using V = std::vector<std::string>;
    ASSERT_EQ(forward0.size(), 2u);
    EXPECT_EQ(forward0[0], (V{"unsharded", "sharded", "sharded"}));   // nothing recorded yet
    EXPECT_EQ(forward0[1], (V{"unsharded", "gathering", "sharded"}));  // block 1 prefetched
    ASSERT_EQ(backward2.size(), 1u);
    EXPECT_EQ(backward2[0][0], "sharded");
    EXPECT_NE(backward2[0][1], "sharded");  // block 1's gather started in block 2's backward
    EXPECT_EQ(backward2[0][2], "unsharded");
  });
}

TEST(FullyShard, GradientAccumulationWithoutSync) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = mesh.get_local_rank(0);
    Llama model = make_llama(), ref = make_llama();
    FsdpModule root = shard_llama(model, mesh);
    root.set_requires_gradient_sync(false);
    loss_of(model, rows(batch(0, 2), r)).backward();
    for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
    root.set_requires_gradient_sync(true);
    loss_of(model, rows(batch(1, 2), r)).backward();
    loss_of(ref, batch(0, 2)).backward();
    loss_of(ref, batch(1, 2)).backward();
    const auto g = model->named_parameters(), w = ref->named_parameters();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(at::allclose(as_dtensor(g[i].value().grad()).full_tensor(),
                               w[i].value().grad(), 1e-5, 1e-7))
          << g[i].key();
  });
}

TEST(FullyShard, MixedPrecision) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = mesh.get_local_rank(0);
    Llama model = make_llama(), ref = make_llama();
    FsdpOptions o;
    o.mp_policy = {at::kBFloat16, at::kFloat};
    FsdpModule root = shard_llama(model, mesh, o);
    at::ScalarType seen_w = at::kFloat, seen_x = at::kFloat;
    model->blocks[1]->register_forward_pre_hook(
        [&](torch::nn::Module&, const nn::Tensors& in) -> std::optional<nn::Tensors> {
          seen_w = model->blocks[1]->w1->weight.scalar_type();
          seen_x = in[0].scalar_type();
          return std::nullopt;
        });
    const at::Tensor t = batch(0, 2);
    loss_of(model, rows(t, r)).backward();
    EXPECT_EQ(seen_w, at::kBFloat16);
    EXPECT_EQ(seen_x, at::kBFloat16);
    // The reference: one device in bf16 over the whole batch; the sharded gradients are fp32
    // and agree to bf16's precision.
    ref->to(at::kBFloat16);
    loss_of(ref, t).backward();
    const auto g = model->named_parameters(), w = ref->named_parameters();
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g[i].value().scalar_type(), at::kFloat);
      const at::Tensor grad = as_dtensor(g[i].value().grad()).full_tensor();
      EXPECT_EQ(grad.scalar_type(), at::kFloat);
      const at::Tensor want = w[i].value().grad().to(at::kFloat);
      EXPECT_TRUE(at::allclose(grad, want, 5e-2, 5e-3 * want.abs().max().item<double>()))
          << g[i].key() << " differs by " << (grad - want).abs().max().item<double>();
    }
    // The copies are the casts: each shard to bf16 (forward and backward gathers of the
    // blocks, the root's once).
    EXPECT_GT(root.copied_bytes(), 0);
  });
}

struct TinyImpl : torch::nn::Module {
  TinyImpl() {
    register_parameter("scale", at::tensor({1.5f, -0.5f, 2.0f}));
    lin = register_module("lin", torch::nn::Linear(3, 2));
  }
  at::Tensor forward(const at::Tensor& x) { return lin(x * named_parameters(false)["scale"]); }
  torch::nn::Linear lin{nullptr};
};
using Tiny = nn::Hooked<TinyImpl>;

TEST(FullyShard, ZeroUnitRanks) {
  // 3 + 6 + 2 elements in blocks of 8: boundaries only at 0, 3, 9 and 11; rank 1 of 4 holds
  // nothing and takes part in every collective.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const int64_t r = mesh.get_local_rank(0);
    Tiny model, ref;
    {
      at::NoGradGuard no_grad;
      auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
      auto gen2 = at::make_generator<at::CPUGeneratorImpl>(3);
      for (auto& p : model->parameters()) p.copy_(at::randn(p.sizes(), gen));
      for (auto& p : ref->parameters()) p.copy_(at::randn(p.sizes(), gen2));
    }
    FsdpOptions o;
    o.shard_block = 8;
    FsdpModule m = fully_shard(model, mesh, o);
    EXPECT_THAT(m.plan(), HasSubstr("units (3,0,6,2)"));
    const at::Tensor x = at::arange(24, at::kFloat).reshape({8, 3}) / 10;
    model->forward(x.narrow(0, 2 * r, 2)).pow(2).mean().backward();
    ref->forward(x).pow(2).mean().backward();
    torch::optim::SGD(model->parameters(), 0.1).step();
    torch::optim::SGD(ref->parameters(), 0.1).step();
    const auto g = model->named_parameters(), w = ref->named_parameters();
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(at::allclose(as_dtensor(g[i].value()).full_tensor(), w[i].value(), 1e-6, 1e-6))
          << g[i].key();
  });
}

/// A module that keeps a member copy of its parameter (fully_shard cannot swap it).
struct MemberCopyImpl : torch::nn::Module {
  MemberCopyImpl() { w = register_parameter("w", at::ones({2})); }
  at::Tensor forward(const at::Tensor& x) { return x * w; }
  at::Tensor w;
};

struct ScalarImpl : torch::nn::Module {
  ScalarImpl() { register_parameter("s", at::ones({})); }
  at::Tensor forward(const at::Tensor& x) { return x; }
};

struct MixedImpl : torch::nn::Module {
  MixedImpl() {
    register_parameter("a", at::ones({2}));
    register_parameter("b", at::ones({2}, at::kDouble));
  }
  at::Tensor forward(const at::Tensor& x) { return x; }
};

TEST(FullyShard, Refusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    EXPECT_THAT(error_of([&] { fully_shard(torch::nn::Linear(2, 2), mesh); }),
                HasSubstr("has no forward hooks (LibTorch modules have none): wrap it as "
                          "hyper::nn::Hooked<torch::nn::LinearImpl>"));
    nn::Hooked<torch::nn::LinearImpl> lin(2, 2);
    fully_shard(lin, mesh);
    EXPECT_THAT(error_of([&] { fully_shard(lin, mesh); }), HasSubstr("was already given to fully_shard"));
    EXPECT_THAT(error_of([&] { fsdp_module(nn::Hooked<torch::nn::LinearImpl>(2, 2)); }),
                HasSubstr("was not given to fully_shard"));
    FsdpOptions bad;
    bad.shard_block = 0;
    EXPECT_THAT(error_of([&] { fully_shard(nn::Hooked<torch::nn::LinearImpl>(2, 2), mesh, bad); }),
                HasSubstr("shard_block must be >= 1, got 0"));
    FsdpOptions ints;
    ints.mp_policy.param_dtype = at::kInt;
    EXPECT_THAT(error_of([&] { fully_shard(nn::Hooked<torch::nn::LinearImpl>(2, 2), mesh, ints); }),
                HasSubstr("mp_policy.param_dtype must be a floating dtype, got Int"));
    EXPECT_THAT(error_of([&] { fully_shard(nn::Hooked<ScalarImpl>(), mesh); }),
                HasSubstr("parameter 's' has shape []; a RaggedShard needs at least one dim"));
    nn::Hooked<MixedImpl> mixed;
    EXPECT_THAT(error_of([&] { fully_shard(mixed, mesh); }),
                HasSubstr("one dtype per bucket: parameter 'b' is Double, 'a' Float"));
    EXPECT_FALSE(is_dtensor(mixed->named_parameters()["a"])) << "a refused call changed the module";
    EXPECT_THAT(error_of([&] { fully_shard(nn::Hooked<MemberCopyImpl>(), mesh); }),
                HasSubstr("MemberCopyImpl, at::Tensor (at::Tensor const&)>) has 1 holder(s) "
                          "besides the module's registry"));
  });
  run_on_mesh({2, 1, 1}, [](const DeviceMesh& mesh) {
    EXPECT_THAT(error_of([&] { fully_shard(nn::Hooked<torch::nn::LinearImpl>(2, 2), mesh); }),
                HasSubstr("the mesh must be 1-D (shard) or 2-D (replicate, shard: HSDP; or dp, tp"));
  });
}

dcp::StateDict state_of(Llama& m) {
  dcp::StateDict sd;
  for (const auto& p : m->named_parameters()) sd["model." + p.key()] = as_dtensor(p.value());
  return sd;
}

TEST(FullyShard, CheckpointSavedOnFourRanksLoadsOnTwoWithOtherUnits) {
  std::string dir = ::testing::TempDir() + "hyper_fsdp_ck_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  // One SGD step on 4 ranks (blocks of 4), saved: ragged shards as boxes, no communication.
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    Llama model = make_llama();
    shard_llama(model, mesh);
    loss_of(model, rows(batch(0, 4), mesh.get_local_rank(0))).backward();
    torch::optim::SGD(model->parameters(), 0.1).step();
    dcp::save(state_of(model), dir + "/ckpt");
  });
  // Loaded on 2 ranks with blocks of 8 into other initial values: one device's step.
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    Llama model = make_llama();
    {
      at::NoGradGuard no_grad;
      for (auto& p : model->parameters()) p.mul_(-3);
    }
    shard_llama(model, mesh, {}, 8);
    dcp::StateDict sd = state_of(model);
    dcp::load(sd, dir + "/ckpt");
    Llama ref = make_llama();
    loss_of(ref, batch(0, 4)).backward();
    torch::optim::SGD(ref->parameters(), 0.1).step();
    expect_params_near(model, ref, 1e-5, 1e-7, "loaded");
    // The loaded values are the parameters the next forward gathers.
    const at::Tensor t = batch(1, 2);
    const double got = global_loss(loss_of(model, rows(t, mesh.get_local_rank(0))), mesh);
    EXPECT_NEAR(got, loss_of(ref, t).item<double>(), 1e-5);
  });
  std::filesystem::remove_all(dir);
}

TEST(FullyShardProcesses, ARankDyingMidStepFailsTheOthers) {
  // Ranks as processes: the last one exits inside block 1's backward; the others' next
  // collective fails with the collective and the group named, within the 3 s limit.
  comm::testing::HarnessOptions o;
  o.timeout = std::chrono::seconds(3);
  o.deadline = std::chrono::seconds(90);
  auto out = comm::testing::run_processes_collect(3, [](int rank, int n, const World& world) {
    const DeviceMesh mesh = init_device_mesh(world, "cpu", {n});
    Llama model = make_llama();
    shard_llama(model, mesh);
    if (rank == n - 1) {
      model->blocks[1]->register_forward_pre_hook(
          [&](torch::nn::Module&, const nn::Tensors&) -> std::optional<nn::Tensors> {
            // The gathered weight: its gradient arrives inside block 1's backward.
            model->blocks[1]->w2->weight.register_hook([](const at::Tensor&) { std::_Exit(3); });
            return std::nullopt;
          });
    }
    loss_of(model, rows(batch(0, n), rank)).backward();
  }, o);
  EXPECT_FALSE(out[2].ok);
  EXPECT_THAT(out[2].error, HasSubstr("exited with status 3"));
  for (int r : {0, 1}) {
    EXPECT_TRUE(out[r].finished) << out[r].error;
    EXPECT_FALSE(out[r].ok);
    EXPECT_THAT(out[r].error, HasSubstr("on group [0,1,2]"));
    EXPECT_LT(out[r].seconds, 60.0);
  }
}

}  // namespace
}  // namespace hyper::fsdp
