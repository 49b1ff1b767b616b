// Differentiable collectives: forward equals the plain collective; gradients equal the
// definition (computed locally from every rank's loss weights).
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/functional.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/comm/testing/test_data.h"

namespace hyper::comm {
namespace {

using testing::pattern;
using testing::rows_all;
using testing::rows_of;

class FunctionalSizes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(N, FunctionalSizes, ::testing::Values(1, 2, 3, 4));

// Global loss L = sum_q <y_q, W_q> with W_q = pattern(100 + q, ...) (double, exact).
TEST_P(FunctionalSizes, AllGatherVBackwardIsReduceScatterOfGradient) {
  const int n = GetParam();
  testing::run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto seen = testing::rows_seen_by(rank, n);
    const auto& rows = seen.rows;
    const int64_t total = seen.total, offset = seen.offset;
    for (bool known_sizes : {false, true}) {
      at::Tensor x = pattern(rank, rows[rank], 3, at::kDouble).requires_grad_(true);
      at::Tensor y = known_sizes ? functional::all_gather_v(x, g, rows)
                                 : functional::all_gather_v(x, g);
      std::vector<at::Tensor> pieces;
      for (int r = 0; r < n; ++r) pieces.push_back(pattern(r, rows[r], 3, at::kDouble));
      EXPECT_TRUE(at::equal(y.detach(), at::cat(pieces)));
      at::Tensor loss = (y * pattern(100 + rank, total, 3, at::kDouble)).sum();
      loss.backward();
      // dL/dx_rank = sum_q W_q[rows of rank]
      at::Tensor expected = at::zeros({rows[rank], 3}, at::kDouble);
      for (int q = 0; q < n; ++q)
        expected += pattern(100 + q, total, 3, at::kDouble).narrow(0, offset, rows[rank]);
      ASSERT_TRUE(x.grad().defined());
      EXPECT_TRUE(at::equal(x.grad(), expected)) << x.grad() << expected;
    }
  });
}

TEST_P(FunctionalSizes, AllToAllVBackwardSwapsSplits) {
  const int n = GetParam();
  testing::run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto c = testing::all_to_all_case(rank, n, 2, at::kDouble);
    const auto& in_s = c.in_splits;
    const auto& out_s = c.out_splits;
    const int64_t out_rows = c.expected.size(0);
    at::Tensor x = c.input.clone().requires_grad_(true);
    at::Tensor y = functional::all_to_all_v(x, in_s, out_s, g);
    (y * pattern(200 + rank, out_rows, 2, at::kDouble)).sum().backward();
    // x's block to j lands in y_j at the rows from `rank`: its gradient is W_j there.
    std::vector<at::Tensor> expected;
    for (int j = 0; j < n; ++j) {
      int64_t off = 0, rows_j = 0;
      for (int i = 0; i < n; ++i) {
        if (i < rank) off += testing::a2a_rows(i, j);
        rows_j += testing::a2a_rows(i, j);
      }
      expected.push_back(pattern(200 + j, rows_j, 2, at::kDouble).narrow(0, off, in_s[j]));
    }
    EXPECT_TRUE(at::equal(x.grad(), at::cat(expected)));
  });
}

TEST_P(FunctionalSizes, ReduceScatterVBackwardIsAllGather) {
  const int n = GetParam();
  testing::run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto rows = rows_all(n);
    int64_t total = 0;
    for (auto r : rows) total += r;
    at::Tensor x = pattern(rank, total, 2, at::kDouble).requires_grad_(true);
    at::Tensor y = functional::reduce_scatter_v(x, rows, g);
    EXPECT_TRUE(at::equal(y.detach(), reduce_scatter_v(x.detach(), rows, ReduceOp::kSum, g)));
    (y * pattern(300 + rank, rows[rank], 2, at::kDouble)).sum().backward();
    std::vector<at::Tensor> expected;
    for (int q = 0; q < n; ++q) expected.push_back(pattern(300 + q, rows[q], 2, at::kDouble));
    EXPECT_TRUE(at::equal(x.grad(), at::cat(expected)));
  });
}

TEST(Functional, GradientFlowsThroughAChain) {
  // y = all_to_all_v(all_gather_v(x) * 2) — backward composes both adjoints.
  testing::run_threads(2, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    at::Tensor x = at::ones({rank + 1, 1}, at::kDouble).requires_grad_(true);
    at::Tensor gathered = functional::all_gather_v(x, g) * 2;  // 3 rows
    std::vector<int64_t> in_s = rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    std::vector<int64_t> out_s = rank == 0 ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{2, 1};
    at::Tensor y = functional::all_to_all_v(gathered, in_s, out_s, g);
    y.sum().backward();
    // Every element of every gathered copy gets gradient 2; each x row appears on 2 ranks.
    EXPECT_TRUE(at::equal(x.grad(), at::full({rank + 1, 1}, 4.0, at::kDouble)));
  });
}

}  // namespace
}  // namespace hyper::comm
