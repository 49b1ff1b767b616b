// hyper::fsdp::FlatBucket on 2, 3 and 4 ranks (threads): every value against slicing the full
// parameters (identical on every rank), gathers into one buffer whose views are the
// parameters, gradients reduce-scattered against the sum computed here, and the refusals.

#include "hyper/fsdp/flat_bucket.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"

namespace hyper::fsdp {
namespace {

using comm::testing::run_on_mesh;
using hyper::testing::error_of;
using ::testing::HasSubstr;

/// The bucket's parameters: uneven sizes, one without elements; the same on every rank.
std::vector<at::Tensor> params() {
  std::vector<at::Tensor> ps;
  int64_t seed = 0;
  for (const std::vector<int64_t>& s :
       std::vector<std::vector<int64_t>>{{5, 7}, {7}, {0, 4}, {3, 11}, {4, 4, 2}}) {
    const int64_t n = at::empty(s).numel();
    ps.push_back((at::arange(n, at::kDouble) * 0.5 + static_cast<double>(++seed) * 100).view(s));
  }
  // A non-contiguous one: packing reads it in its logical row-major order.
  ps[3] = ps[3].t().contiguous().t();
  return ps;
}

at::Tensor flat_of(const std::vector<at::Tensor>& ps) {
  std::vector<at::Tensor> flat;
  for (const auto& p : ps) flat.push_back(p.reshape({-1}));
  return at::cat(flat);
}

void check_bucket(const DeviceMesh& mesh, int64_t block) {
  const auto ps = params();
  const at::Tensor flat = flat_of(ps);
  const FlatBucket b(mesh, ps, block);
  const int64_t r = mesh.get_local_rank(0), n = mesh.size();
  const FlatBucketPlan& plan = b.plan();
  ASSERT_EQ(plan.numel(), flat.numel());
  // This rank's shard is its slice of the packed parameters, on block boundaries.
  EXPECT_TRUE(at::equal(b.shard(), flat.narrow(0, plan.bound(r), plan.bound(r + 1) - plan.bound(r))))
      << plan.to_string();
  // Gathered into one buffer (given, so reused): the packed parameters; views are them.
  const at::Tensor out = at::full({plan.numel()}, -1.0, at::kDouble);
  const at::Tensor full = b.unshard_async(out).wait();
  EXPECT_TRUE(full.is_same(out));
  EXPECT_TRUE(at::equal(full, flat));
  const auto views = b.views(full);
  for (size_t p = 0; p < ps.size(); ++p) {
    EXPECT_TRUE(at::equal(views[p], ps[p])) << "param " << p;
    if (ps[p].numel() > 0) {
      EXPECT_EQ(views[p].data_ptr<double>(), full.data_ptr<double>() + plan.offset(p));
    }
  }
  EXPECT_TRUE(at::equal(b.unshard_async().wait(), flat));  // a fresh buffer
  // Mixed precision: a cast shard gathered into a buffer of its dtype; views of it.
  const at::Tensor low = b.unshard_async(std::nullopt, b.shard().to(at::kFloat)).wait();
  EXPECT_TRUE(at::equal(low, flat.to(at::kFloat)));
  EXPECT_TRUE(at::equal(b.views(low)[3], ps[3].to(at::kFloat)));
  // Each parameter as a DTensor on its piece: its full value, and a view of the shard.
  for (int64_t p = 0; p < plan.params(); ++p) {
    if (ps[static_cast<size_t>(p)].numel() == 0) {
      EXPECT_THAT(error_of([&] { b.param(p); }), HasSubstr("has no elements"));
      continue;
    }
    const DTensor d = b.param(p);
    std::vector<int64_t> dims;
    for (int64_t i = 0; i < ps[static_cast<size_t>(p)].dim(); ++i) dims.push_back(i);
    EXPECT_EQ(d.placements()[0], RaggedShard(dims, plan.param_units(p)));
    EXPECT_TRUE(at::equal(d.full_tensor(), ps[static_cast<size_t>(p)])) << "param " << p;
    const at::Tensor local = d.to_local();
    if (local.numel() > 0) {
      EXPECT_GE(local.data_ptr<double>(), b.shard().data_ptr<double>());
      EXPECT_LT(local.data_ptr<double>(), b.shard().data_ptr<double>() + b.shard().numel());
    }
  }
  // Gradients: rank k's full flat gradient is flat * (k + 1); the reduce-scatter gives this
  // rank its slice of the sum (n (n + 1) / 2) or the average ((n + 1) / 2).
  const at::Tensor g = flat * static_cast<double>(r + 1);
  const at::Tensor mine = flat.narrow(0, plan.bound(r), plan.bound(r + 1) - plan.bound(r));
  EXPECT_TRUE(at::allclose(b.reduce_scatter_grad(g, comm::ReduceOp::kSum),
                           mine * static_cast<double>(n * (n + 1) / 2)));
  EXPECT_TRUE(at::allclose(b.reduce_scatter_grad(g), mine * ((n + 1) / 2.0)));
  // Per-parameter gradients read where they lie: rank k's gradient of p is ps[p] * (k + 1)
  // (parameter 3's is not contiguous: copied and counted); parameter 1 got none (zeros).
  // The same bits as reduce_scatter_grad of the packed gradients.
  std::vector<at::Tensor> grads;
  for (const auto& p : ps) grads.push_back(p * static_cast<double>(r + 1));
  ASSERT_FALSE(grads[3].is_contiguous());
  grads[1] = at::Tensor();
  std::vector<at::Tensor> packed = grads;
  packed[1] = at::zeros_like(ps[1]);
  const int64_t copied = b.copied_bytes();
  const at::Tensor gshard = at::full({b.shard().numel()}, -1.0, at::kDouble);
  const at::Tensor got = b.reduce_scatter_grads_async(grads, comm::ReduceOp::kAvg, gshard).wait();
  EXPECT_TRUE(got.is_same(gshard));
  EXPECT_TRUE(at::equal(got, b.reduce_scatter_grad(flat_of(packed))));
  EXPECT_EQ(b.copied_bytes() - copied, grads[3].numel() * 8);
  EXPECT_TRUE(at::equal(b.reduce_scatter_grads_async(grads, comm::ReduceOp::kSum).wait(),
                        b.reduce_scatter_grad(flat_of(packed), comm::ReduceOp::kSum)));
  // Each parameter's gradient as a DTensor over the gradient shard: the full average.
  for (int64_t p = 0; p < plan.params(); ++p) {
    if (ps[static_cast<size_t>(p)].numel() == 0) continue;
    const at::Tensor want = p == 1 ? at::zeros_like(ps[1]) : ps[static_cast<size_t>(p)] * ((n + 1) / 2.0);
    EXPECT_TRUE(at::allclose(b.param_over(p, gshard).full_tensor(), want)) << "grad " << p;
  }
}

TEST(FlatBucket, PacksGathersAndReduceScattersOnTwoThreeAndFourRanks) {
  for (const int64_t ranks : {2, 3, 4})
    for (const int64_t block : {1, 4, 16})
      run_on_mesh({ranks}, [&](const DeviceMesh& mesh) { check_bucket(mesh, block); });
}

TEST(FlatBucket, ReplicasOnATwoDimensionalMesh) {
  // HSDP: sharded over mesh dim 1 (2 ranks), replicated over dim 0 (2 replicas). Each
  // parameter is a DTensor (Replicate, RaggedShard); gradients are reduce-scattered within a
  // replica and all-reduced across the replicas.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const auto ps = params();
    const at::Tensor flat = flat_of(ps);
    const FlatBucket b(mesh, ps, 4);
    EXPECT_EQ(b.shard_dim(), 1);
    const FlatBucketPlan& plan = b.plan();
    const int64_t s = mesh.get_local_rank(1);
    const at::Tensor mine = flat.narrow(0, plan.bound(s), plan.bound(s + 1) - plan.bound(s));
    EXPECT_TRUE(at::equal(b.shard(), mine));
    EXPECT_TRUE(at::equal(b.unshard_async().wait(), flat));
    const DTensor d = b.param(3);
    EXPECT_EQ(d.placements()[0], Replicate());
    EXPECT_TRUE(d.placements()[1].is_ragged_shard());
    EXPECT_TRUE(at::equal(d.full_tensor(), ps[3]));
    // Global rank g's gradient is flat * (g + 1): the average over the 4 ranks is flat * 2.5.
    const double g = static_cast<double>(mesh.get_rank() + 1);
    EXPECT_TRUE(at::allclose(b.reduce_scatter_grad(flat * g), mine * 2.5));
    std::vector<at::Tensor> grads;
    for (const auto& p : ps) grads.push_back(p * g);
    const at::Tensor got = b.reduce_scatter_grads_async(grads, comm::ReduceOp::kSum).wait();
    EXPECT_TRUE(at::allclose(got, mine * 10.0));
    EXPECT_TRUE(at::allclose(b.param_over(3, got).full_tensor(), ps[3] * 10.0));
  });
}

TEST(FlatBucket, ZeroUnitRanks) {
  // Three elements, blocks of 4, on 4 ranks: only rank 2 holds anything.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor w = at::arange(3, at::kFloat);
    const FlatBucket b(mesh, {w}, 4);
    EXPECT_EQ(b.plan().rank_units(), (std::vector<int64_t>{0, 0, 3, 0}));
    EXPECT_EQ(b.shard().numel(), mesh.get_local_rank(0) == 2 ? 3 : 0);
    EXPECT_TRUE(at::equal(b.unshard_async().wait(), w));
    EXPECT_TRUE(at::equal(b.param(0).full_tensor(), w));
    const at::Tensor s = b.reduce_scatter_grad(at::ones({3}), comm::ReduceOp::kSum);
    EXPECT_TRUE(at::equal(s, mesh.get_local_rank(0) == 2 ? at::full({3}, 4.0f) : at::ones({0})));
  });
}

TEST(FlatBucket, Refusals) {
  run_on_mesh({2, 1}, [](const DeviceMesh& mesh) {
    EXPECT_THAT(error_of([&] { FlatBucket(mesh, {at::ones({2})}, 1, 2); }),
                HasSubstr("FlatBucket: shard_dim 2 of the 2-D mesh"));
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    EXPECT_THAT(error_of([&] { FlatBucket(mesh, {at::ones({2}), at::ones({2}, at::kDouble)}); }),
                HasSubstr("FlatBucket: parameter 1 is Double, parameter 0 Float (one dtype per bucket)"));
    EXPECT_THAT(error_of([&] { FlatBucket(mesh, {at::ones({2}), at::Tensor()}); }),
                HasSubstr("FlatBucket: parameter 1 is undefined"));
    EXPECT_THAT(error_of([&] { FlatBucket(mesh, {at::ones({2})}, 0); }),
                HasSubstr("block must be at least 1 element, got 0"));
    const FlatBucket b(mesh, {at::ones({2, 3}), at::ones({})}, 1);
    EXPECT_THAT(error_of([&] { b.views(at::ones({5})); }),
                HasSubstr("FlatBucket views: expected a contiguous 1-D Float tensor of 7 elements"));
    EXPECT_THAT(error_of([&] { b.unshard_async(at::ones({7}, at::kDouble)); }),
                HasSubstr("FlatBucket unshard_async output: expected"));
    EXPECT_THAT(error_of([&] { b.unshard_async(std::nullopt, at::ones({9})); }),
                HasSubstr("FlatBucket unshard_async source: expected a 1-D tensor of"));
    EXPECT_THAT(error_of([&] { b.unshard_async(at::ones({7}), at::ones({b.shard().numel()}, at::kHalf)); }),
                HasSubstr("expected a contiguous 1-D Half tensor of 7 elements"));
    EXPECT_THAT(error_of([&] { b.reduce_scatter_grad(at::ones({7}), comm::ReduceOp::kMax); }),
                HasSubstr("op max (expected sum or avg)"));
    EXPECT_THAT(error_of([&] { b.param(1); }), HasSubstr("parameter 1 is 0-dim"));
    EXPECT_THAT(error_of([&] { b.param(2); }), HasSubstr("FlatBucket: parameter 2 of 2"));
    EXPECT_THAT(error_of([&] { b.param_over(0, at::ones({9})); }),
                HasSubstr("FlatBucket param_over: expected a 1-D tensor of"));
    EXPECT_THAT(error_of([&] { b.reduce_scatter_grads_async({at::ones({2, 3})}); }),
                HasSubstr("FlatBucket reduce_scatter_grads: 1 gradients for 2 parameters"));
    EXPECT_THAT(error_of([&] { b.reduce_scatter_grads_async({at::ones({3, 2}), at::ones({})}); }),
                HasSubstr("gradient 0 has sizes [3, 2], parameter 0 has [2, 3]"));
    EXPECT_THAT(error_of([&] {
                  b.reduce_scatter_grads_async({at::ones({2, 3}), at::ones({}, at::kDouble)});
                }),
                HasSubstr("gradient 1 is Double on cpu, an earlier one Float on cpu"));
    EXPECT_THAT(error_of([&] {
                  b.reduce_scatter_grads_async({at::ones({2, 3}), at::ones({})}, comm::ReduceOp::kMin);
                }),
                HasSubstr("op min (expected sum or avg)"));
  });
}

}  // namespace
}  // namespace hyper::fsdp
