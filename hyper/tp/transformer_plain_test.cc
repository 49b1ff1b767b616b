// The example transformer block built from plain torch::nn modules
// (examples/common/transformer_block.h, PlainTransformerBlock), parallelized with
// hyper::tp::parallelize_module: its parameters become DTensor tensors and its unmodified
// forward (at::linear, view/transpose, matmul, masked_fill, softmax, layer_norm, gelu, the
// residual adds) runs on DTensor tensors through hyper's dispatch key. Against the
// single-device block on 2 and 4 ranks (threads): outputs, every parameter gradient, and
// torch::optim::AdamW training steps; the same under sequence parallelism
// (TpPlainTransformerSp: a Shard(1) DTensor input, batch 1 and 2, uneven sequences, the
// collectives of one step counted).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>
#include <torch/optim/adamw.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "examples/common/transformer_block.h"
#include "hyper/comm/stats.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/tp/testing_transformer.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::examples {
namespace {

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

using tp_testing::on_mesh;

TransformerConfig small_config(bool causal) { return tp_testing::small_config(causal); }

/// The placements parallelize_module gave parameter `name` of `block`.
std::string placements_of(PlainTransformerBlockImpl& block, const std::string& name) {
  const at::Tensor* p = block.named_parameters().find(name);
  if (p == nullptr) return "<missing>";
  if (!is_dtensor(*p)) return "<plain>";
  return as_dtensor(*p).layout().to_string();
}

// Forward and backward of the parallelized block against the single-device block: the full
// output, every parameter gradient and, under sequence parallelism (`sp`: the input a Shard(1)
// DTensor, the output S(1) too), the input's gradient. Without it the input is a plain tensor
// (Replicate).
void check_forward_backward(int n, int64_t batch, int64_t seq, bool causal, bool sp) {
  SCOPED_TRACE(std::to_string(n) + " ranks, batch " + std::to_string(batch) + ", seq " +
               std::to_string(seq) + (causal ? ", causal" : ", plain") + (sp ? ", SP" : ""));
  const auto cfg = small_config(causal);
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto ref = make_block<PlainTransformerBlock>(cfg, 3);
    const Batch b = make_batch(cfg, batch, seq, 5);
    const at::Tensor xr = b.x.clone().requires_grad_();
    const at::Tensor ref_out = ref->forward(xr);
    examples::mse_loss(ref_out, b.target).backward();

    auto block = copy_block(*ref);
    parallelize_plain_block(block, mesh, sp);
    EXPECT_NE(placements_of(*block, "attn.q.weight").find("[S(0)]"), std::string::npos);
    EXPECT_NE(placements_of(*block, "attn.o.weight").find("[S(1)]"), std::string::npos);
    EXPECT_NE(placements_of(*block, "norm1.weight").find("[R]"), std::string::npos);
    EXPECT_NE(placements_of(*block, "norm2.bias").find("[R]"), std::string::npos);
    const at::Tensor x = sp ? shard_sequence_dtensor(b.x, mesh).requires_grad_() : b.x;
    const at::Tensor y = block->forward(x);
    ASSERT_TRUE(is_dtensor(y));
    EXPECT_EQ(y.sizes(), b.x.sizes());
    if (sp) {
      EXPECT_EQ(as_dtensor(y).layout().to_string(),
                as_dtensor(x).layout().to_string());  // S(1) [batch, seq, hidden]
    }
    const at::Tensor loss = examples::mse_loss(y, b.target);
    const at::Tensor y_full = as_dtensor(y).full_tensor();
    EXPECT_TRUE(at::allclose(y_full, ref_out.detach(), kRtol, kAtol))
        << "max |diff| " << (y_full - ref_out).abs().max().item<double>();
    loss.backward();
    const auto mism = compare_gradients(*block, *ref, mesh, kRtol, kAtol);
    EXPECT_TRUE(mism.empty()) << describe(mism);
    if (!sp) return;
    ASSERT_TRUE(x.grad().defined());
    const at::Tensor gx = as_dtensor(x.grad()).full_tensor();
    EXPECT_TRUE(at::allclose(gx, xr.grad(), kRtol, kAtol))
        << "input gradient, max |diff| " << (gx - xr.grad()).abs().max().item<double>();
  });
}

TEST(TpPlainTransformer, TwoRanksCausal) { check_forward_backward(2, 2, 6, true, false); }
TEST(TpPlainTransformer, FourRanksCausal) { check_forward_backward(4, 2, 5, true, false); }
TEST(TpPlainTransformer, FourRanksPlainAttention) { check_forward_backward(4, 2, 7, false, false); }

// The unmodified training loop: torch::optim::AdamW on the DTensor parameters. After every
// step the parameters equal the single-device block's trained the same way, and the loss
// falls.
void check_adamw(int n, bool sp = false, int64_t batch_size = 2, int64_t seq = 6) {
  const auto cfg = small_config(true);
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto ref = make_block<PlainTransformerBlock>(cfg, 11);
    auto block = copy_block(*ref);
    parallelize_plain_block(block, mesh, sp);
    // eps 1e-3, not 1e-8: attn.k.bias's gradient is zero in exact arithmetic (softmax is
    // shift-invariant along a query row, and the k bias shifts each row by q.b_k), so its
    // float rounding noise (~1e-8, different on one device and under TP) would be normalized
    // by Adam into lr-sized steps of random sign.
    const auto opts = torch::optim::AdamWOptions(1e-2).weight_decay(0.1).eps(1e-3);
    torch::optim::AdamW opt_ref(ref->parameters(), opts);
    torch::optim::AdamW opt(block->parameters(), opts);
    const Batch batch = make_batch(cfg, batch_size, seq, 12);
    // Sequence parallel: the input is given sharded on the sequence dim.
    const at::Tensor x = sp ? shard_sequence_dtensor(batch.x, mesh) : batch.x;
    double first = 0, last = 0;
    for (int step = 0; step < 3; ++step) {
      opt_ref.zero_grad();
      const at::Tensor ref_loss = examples::mse_loss(ref->forward(batch.x), batch.target);
      ref_loss.backward();
      opt_ref.step();
      opt.zero_grad();
      const at::Tensor loss = examples::mse_loss(block->forward(x), batch.target);
      loss.backward();
      opt.step();
      const double total = as_dtensor(loss).full_tensor().item<double>();
      EXPECT_NEAR(total, ref_loss.item<double>(), 1e-4 * std::abs(ref_loss.item<double>()))
          << "step " << step;
      const auto mism = compare_parameters(*block, *ref, mesh, 1e-4, 1e-5);
      EXPECT_TRUE(mism.empty()) << "step " << step << ":\n" << describe(mism);
      if (step == 0) first = total;
      last = total;
    }
    EXPECT_LT(last, first);
  });
}

TEST(TpPlainTransformerSp, TwoRanksCausal) {
  check_forward_backward(2, 2, 8, true, true);
  check_forward_backward(2, 1, 8, true, true);
  check_forward_backward(2, 2, 7, true, true);  // uneven: 4, 3
}
TEST(TpPlainTransformerSp, TwoRanksPlainAttention) { check_forward_backward(2, 2, 6, false, true); }
TEST(TpPlainTransformerSp, FourRanksCausal) {
  check_forward_backward(4, 2, 8, true, true);
  check_forward_backward(4, 1, 10, true, true);  // uneven: 3, 3, 3, 1
  check_forward_backward(4, 2, 6, true, true);   // uneven: 2, 2, 2, 0 (an empty shard)
}
TEST(TpPlainTransformerSp, FourRanksPlainAttention) { check_forward_backward(4, 1, 7, false, true); }

// The collectives of one step (forward, backward) on every rank, by kind, batch 2: Megatron's
// sequence parallelism. Forward: the normed input gathered once for q, k and v and once for
// w1 (2 all_gather_v), o's and w2's P(sum) outputs reduce-scattered to S(1) by the residual
// adds. Backward: the S(1) gradients of o's and w2's outputs gathered, the P(sum) gradients of
// the normed inputs (q, k and v's summed first) reduce-scattered by layer_norm's backward.
std::string kinds(const comm::CommStats& after, const comm::CommStats& before) {
  std::string out;
  for (int k = 0; k < comm::kNumCollectiveKinds; ++k) {
    const auto kind = static_cast<comm::CollectiveKind>(k);
    const int64_t calls = after[kind].calls - before[kind].calls;
    if (calls > 0) out += std::string(comm::to_string(kind)) + "=" + std::to_string(calls) + " ";
  }
  return out;
}

/// The collectives of one step of the plain block (batch x 8 tokens; sequence parallel or
/// not), by phase: forward, loss, backward (until every gradient is waited for), SGD step.
struct StepCollectives {
  std::string forward, loss, backward, step;
};
StepCollectives collectives_of_one_step(const DeviceMesh& mesh, int64_t batch, bool sp) {
  auto block = make_block<PlainTransformerBlock>(small_config(true), 3);
  parallelize_plain_block(block, mesh, sp);
  const Batch b = make_batch(small_config(true), batch, 8, 5);
  const at::Tensor x = sp ? shard_sequence_dtensor(b.x, mesh) : b.x;
  const auto s0 = comm::stats(mesh);
  const at::Tensor y = block->forward(x);
  const auto s1 = comm::stats(mesh);
  const at::Tensor loss = examples::mse_loss(y, b.target);
  const auto s2 = comm::stats(mesh);
  loss.backward();
  for (const auto& p : block->parameters()) DTensor::from_tensor(p.grad()).wait();
  const auto s3 = comm::stats(mesh);
  torch::optim::SGD sgd(block->parameters(), torch::optim::SGDOptions(0.1));
  sgd.step();
  const auto s4 = comm::stats(mesh);
  return {kinds(s1, s0), kinds(s2, s1), kinds(s3, s2), kinds(s4, s3)};
}

TEST(TpPlainTransformerSp, CollectivesOfOneStep) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      const StepCollectives c = collectives_of_one_step(mesh, 2, true);
      // hyper's executor runs a gather of dim 1 and a reduce-scatter to dim 1 of a [2, 8, 32]
      // tensor as one all_to_all_v each (docs/redistribute.md). Without the remembered gather
      // the forward made 6 (q, k and v gathered x each). The backward also all-reduces the
      // P(sum) gradients of the 6 Replicate parameters (norm1/norm2 weight and bias, o's and
      // w2's bias), issued as autograd produces them (overlap_gradient_redistribution, applied
      // by parallelize_plain_block), so the optimizer step moves nothing.
      EXPECT_EQ(c.forward, "all_to_all_v=4 ") << n << " ranks, forward";
      EXPECT_EQ(c.loss, "") << n << " ranks, loss";
      EXPECT_EQ(c.backward, "all_to_all_v=4 all_reduce=6 ") << n << " ranks, backward";
      EXPECT_EQ(c.step, "") << n << " ranks, optimizer step";
    });
  }
}

// Tensor parallel without sequence parallelism (the input a plain, i.e. Replicate, tensor):
// forward, o's P(sum) output all-reduced by the residual add, w2's by the loss that reads it;
// the backward's collectives are the same with the overlap switched off: the Rowwise
// products' own backward (ContractedMatmulFn) adds none. (Its first version reduced a Partial
// gradient twice, once per fold: tp_bench's plain TP step sent 8.02 MiB instead of 6.02 MiB.)
// Backward: 6 all_reduce on 2 and 4 ranks (P(sum) gradients: the normed inputs' and the
// Replicate parameters', the latter async by the gradient hook). Before the all-reduce was
// costed as the ring it runs as (matmul_rules.h, redistribution_cost), 4 ranks (one head per
// rank) ran 5 all_to_all_v + 5 all_reduce: the mm rule, charging an all-reduce 3 tensors per
// rank, reduce-scattered a P(sum) gradient, moved a [32, 32] weight S(1) -> S(0) and left
// its output Partial; o's weight gradient came out S(0) and the hook moved it back to S(1).
// The optimizer step moves nothing.
TEST(TpPlainTransformer, CollectivesOfOneStep) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      const StepCollectives c = collectives_of_one_step(mesh, 2, false);
      set_overlap_linear_gather(false);
      const StepCollectives o = collectives_of_one_step(mesh, 2, false);
      set_overlap_linear_gather(true);
      EXPECT_EQ(o.backward, c.backward) << "without the overlap";
      EXPECT_EQ(o.forward, c.forward) << "without the overlap";
      EXPECT_EQ(c.forward, "all_reduce=1 ") << n << " ranks, forward";
      EXPECT_EQ(c.loss, "all_reduce=1 ") << n << " ranks, loss";
      EXPECT_EQ(c.backward, "all_reduce=6 ")
          << n << " ranks, backward";
      EXPECT_EQ(c.step, "") << n << " ranks, optimizer step";
    });
  }
}

TEST(TpPlainTransformer, AdamWTwoRanks) { check_adamw(2); }
TEST(TpPlainTransformer, AdamWFourRanks) { check_adamw(4); }
// Batch 1: LibTorch's fold keeps the sequence Shard as rows, and the gather is chosen by the
// relayout rule (linear_rules.h) rather than the view rule; still one gather for q, k and v.
TEST(TpPlainTransformerSp, CollectivesOfOneStepBatchOne) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      EXPECT_EQ(collectives_of_one_step(mesh, 1, true).forward, "all_to_all_v=4 ") << n << " ranks, forward";
    });
  }
}

TEST(TpPlainTransformerSp, AdamWTwoRanks) { check_adamw(2, true, 2, 7); }
TEST(TpPlainTransformerSp, AdamWFourRanks) { check_adamw(4, true, 1, 8); }

}  // namespace
}  // namespace hyper::examples
