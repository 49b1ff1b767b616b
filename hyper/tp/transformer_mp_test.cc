// The example transformer block (examples/common/transformer_block.h) under tensor
// parallelism against the single-device block (ranks as threads, Gloo over loopback, 2 and
// 4 ranks): gathered outputs and every parameter gradient (the matching shard of the
// single-device gradient), sequence-parallel and plain plans, async on/off bit-identical,
// uneven sequence shards, a few SGD steps, and the n_heads / TP size error.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/sgd.h>

#include <cmath>

#include <functional>
#include <string>
#include <vector>

#include "examples/common/transformer_block.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/tp/testing_transformer.h"

namespace hyper::examples {
namespace {

using comm::testing::run_threads;

constexpr double kRtol = 1e-4;
constexpr double kAtol = 1e-5;

using tp_testing::on_mesh;
using tp_testing::small_config;

/// What one parallel run produced on one rank.
struct RunResult {
  at::Tensor out;                  // gathered output [b, s, h]
  at::Tensor x_grad;               // this rank's input gradient (local)
  std::vector<at::Tensor> grads;   // local parameter gradients, named_parameters() order
  std::vector<at::Tensor> params;  // local parameter values after one SGD step
};

/// Runs forward + backward (+ one plain SGD step) of the parallelized copy of `ref` on this
/// rank, checks the gathered output and every gradient against the reference (whose
/// gradients must already be computed) and returns what it produced.
RunResult run_and_check(const TransformerBlockImpl& ref, const at::Tensor& ref_out,
                        const Batch& batch, const DeviceMesh& mesh, bool sequence_parallel,
                        bool async) {
  const int n = static_cast<int>(mesh.size(0));
  const int rank = static_cast<int>(mesh.get_local_rank(0));
  auto block = copy_block(ref);
  const auto plan = sequence_parallel ? sequence_parallel_plan(block->cfg, n, async)
                                      : tensor_parallel_plan(block->cfg, n, async);
  tp::parallelize_module(block.ptr(), mesh, plan);
  // Heads split across ranks: each computes n_heads / n of them.
  EXPECT_EQ(block->attn->local_heads(), block->cfg.n_heads / n);

  RunResult r;
  at::Tensor loss;
  if (sequence_parallel) {
    at::Tensor x = shard_sequence(batch.x, mesh).requires_grad_(true);
    at::Tensor y = block->forward(x);
    EXPECT_EQ(y.sizes(), x.sizes());
    loss = sp_mse_loss(y, shard_sequence(batch.target, mesh), batch.target.numel());
    r.out = gather_sequence(y.detach(), mesh, batch.x.sizes().vec());
    loss.backward();
    r.x_grad = x.grad();
  } else {
    at::Tensor x = batch.x.clone().requires_grad_(true);
    at::Tensor y = block->forward(x);
    loss = examples::mse_loss(y, batch.target);
    r.out = y.detach();
    loss.backward();
    r.x_grad = x.grad();
  }
  EXPECT_TRUE(at::allclose(r.out, ref_out, kRtol, kAtol))
      << "rank " << rank << " output max |diff| " << (r.out - ref_out).abs().max().item<double>();
  const auto mism = compare_gradients(*block, ref, mesh, kRtol, kAtol);
  EXPECT_TRUE(mism.empty()) << "rank " << rank << ":\n" << describe(mism);
  // compare_gradients must see every parameter: the block has 4 norm + 8 linear tensors
  // with biases.
  EXPECT_EQ(tp::state_dict(*block).size(), ref.named_parameters().size());

  for (auto& p : block->parameters()) r.grads.push_back(p.grad().clone());
  {
    at::NoGradGuard g;
    for (auto& p : block->parameters()) {
      p.sub_(p.grad() * 0.1);
      r.params.push_back(p.detach().clone());
    }
  }
  return r;
}

/// The single-device reference: forward + backward of mse(block(x), target).
at::Tensor run_reference(TransformerBlockImpl& ref, const Batch& batch, at::Tensor* x_grad) {
  at::Tensor x = batch.x.clone().requires_grad_(true);
  at::Tensor y = ref.forward(x);
  examples::mse_loss(y, batch.target).backward();
  if (x_grad != nullptr) *x_grad = x.grad();
  return y.detach();
}

void check_block(int n, int64_t seq, bool sequence_parallel, bool causal = true,
                 bool bias = true) {
  const auto cfg = small_config(causal, bias);
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto ref = make_block(cfg, 3);
    const Batch batch = make_batch(cfg, 2, seq, 5);
    at::Tensor ref_x_grad;
    const at::Tensor ref_out = run_reference(*ref, batch, &ref_x_grad);

    const RunResult sync = run_and_check(*ref, ref_out, batch, mesh, sequence_parallel, false);
    const RunResult async = run_and_check(*ref, ref_out, batch, mesh, sequence_parallel, true);
    // The input gradient too (this rank's sequence shard under SP).
    const at::Tensor expect_x_grad =
        sequence_parallel ? shard_sequence(ref_x_grad, mesh) : ref_x_grad;
    EXPECT_TRUE(at::allclose(async.x_grad, expect_x_grad, kRtol, kAtol));
    // async_op on and off: bit-identical outputs, gradients and updated parameters.
    EXPECT_TRUE(at::equal(sync.out, async.out));
    EXPECT_TRUE(at::equal(sync.x_grad, async.x_grad));
    ASSERT_EQ(sync.grads.size(), async.grads.size());
    for (size_t i = 0; i < sync.grads.size(); ++i) {
      EXPECT_TRUE(at::equal(sync.grads[i], async.grads[i])) << "gradient " << i;
      EXPECT_TRUE(at::equal(sync.params[i], async.params[i])) << "parameter " << i;
    }
  });
}

TEST(TpTransformer, SequenceParallelTwoRanks) { check_block(2, 8, true); }
TEST(TpTransformer, SequenceParallelFourRanks) { check_block(4, 8, true); }
TEST(TpTransformer, SequenceParallelFourRanksPlainAttentionNoBias) {
  check_block(4, 12, true, /*causal=*/false, /*bias=*/false);
}
TEST(TpTransformer, TensorParallelTwoRanks) { check_block(2, 7, false); }
TEST(TpTransformer, TensorParallelFourRanks) { check_block(4, 6, false); }

// Uneven sequence shards under the sequence-parallel plan (torch.chunk sizes; the styles
// learn the global sequence length from an exchange — before that, each rank inferred
// local x ranks and Gloo aborted on the disagreeing sizes).
// seq 10 on 4 ranks: 3, 3, 3, 1.
TEST(TpTransformer, SequenceParallelUnevenSeqFourRanks) { check_block(4, 10, true); }
// seq 7 on 2 ranks: 4, 3.
TEST(TpTransformer, SequenceParallelUnevenSeqTwoRanks) { check_block(2, 7, true); }
// seq 6 on 4 ranks: 2, 2, 2, 0 (the last rank holds an empty shard).
TEST(TpTransformer, SequenceParallelEmptyShardFourRanks) { check_block(4, 6, true); }

// A few SGD steps: after every step the parallelized parameters equal the reference's
// (sharded), and the losses agree.
TEST(TpTransformer, SgdStepsFollowTheReference) {
  const auto cfg = small_config();
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto ref = make_block(cfg, 11);
    auto block = copy_block(*ref);
    tp::parallelize_module(block.ptr(), mesh, sequence_parallel_plan(cfg, 2));
    torch::optim::SGD opt_ref(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    torch::optim::SGD opt(block->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    const Batch batch = make_batch(cfg, 2, 8, 12);
    const at::Tensor xs = shard_sequence(batch.x, mesh);
    const at::Tensor ts = shard_sequence(batch.target, mesh);
    double first = 0, last = 0;
    for (int step = 0; step < 4; ++step) {
      opt_ref.zero_grad();
      at::Tensor ref_loss = examples::mse_loss(ref->forward(batch.x), batch.target);
      ref_loss.backward();
      opt_ref.step();
      opt.zero_grad();
      at::Tensor loss = sp_mse_loss(block->forward(xs), ts, batch.target.numel());
      loss.backward();
      opt.step();
      const double total = sum_over_mesh(loss, mesh);
      EXPECT_NEAR(total, ref_loss.item<double>(), 1e-4 * std::abs(ref_loss.item<double>()))
          << "step " << step;
      const auto mism = compare_parameters(*block, *ref, mesh, 1e-5, 1e-6);
      EXPECT_TRUE(mism.empty()) << "step " << step << ":\n" << describe(mism);
      if (step == 0) first = total;
      last = total;
    }
    EXPECT_LT(last, first);  // it trains
  });
}

TEST(TpTransformer, HeadsNotDivisibleByTpSize) {
  auto cfg = small_config();
  cfg.n_heads = 3;
  try {
    sequence_parallel_plan(cfg, 2);
    FAIL() << "expected ValueError";
  } catch (const ValueError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("n_heads=3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tensor-parallel size 2"), std::string::npos) << msg;
  }
  EXPECT_THROW(tensor_parallel_plan(cfg, 2), ValueError);
  EXPECT_NO_THROW(sequence_parallel_plan(cfg, 3));
  EXPECT_NO_THROW(sequence_parallel_plan(cfg, 1));
  // A hand-written plan that splits 3 heads of 8 (24 rows) over 2 ranks: the forward names
  // the local rows and head_dim.
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto block = make_block(cfg, 1);
    tp::parallelize_module(block.ptr(), mesh,
                           {{"attn.[qkv]", tp::ColwiseParallel()},
                            {"attn.o", tp::RowwiseParallel()}});
    const Batch batch = make_batch(cfg, 1, 4, 1);
    try {
      block->forward(batch.x);
      ADD_FAILURE() << "expected ValueError";
    } catch (const ValueError& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("12 local output rows"), std::string::npos) << msg;
      EXPECT_NE(msg.find("head_dim 8"), std::string::npos) << msg;
    }
  });
}

// Sanity of the helpers the checks rely on: a perturbed gradient is reported.
TEST(TpTransformer, CompareGradientsDetectsAMismatch) {
  const auto cfg = small_config();
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto ref = make_block(cfg, 3);
    const Batch batch = make_batch(cfg, 2, 8, 5);
    const at::Tensor ref_out = run_reference(*ref, batch, nullptr);
    auto block = copy_block(*ref);
    tp::parallelize_module(block.ptr(), mesh, sequence_parallel_plan(cfg, 2));
    at::Tensor y = block->forward(shard_sequence(batch.x, mesh));
    sp_mse_loss(y, shard_sequence(batch.target, mesh), batch.target.numel()).backward();
    EXPECT_TRUE(compare_gradients(*block, *ref, mesh).empty());
    {
      at::NoGradGuard g;
      block->mlp->w1->weight.mutable_grad().add_(1e-3);
    }
    const auto mism = compare_gradients(*block, *ref, mesh);
    ASSERT_EQ(mism.size(), 1u);
    EXPECT_EQ(mism[0].name, "mlp.w1.weight");
    EXPECT_TRUE(compare_parameters(*block, *ref, mesh).empty());
  });
}

}  // namespace
}  // namespace hyper::examples
