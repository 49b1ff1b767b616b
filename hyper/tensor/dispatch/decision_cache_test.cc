// The fallback remembers a rule's decision per thread (fallback.cc DecisionQuery): a repeated
// call on the same layouts reuses it (its outputs share one Layout object), and everything the
// decision depends on is part of the key: the layouts, a plain operand's shape, the other
// arguments of views and reductions (sizes, dims, keepdim), the dtype. Values against the
// single-device computation on the full tensors. Also the fallback's other shortcut: alias /
// detach of a pending async result keep it pending.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_access.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

const Layout* layout_of(const at::Tensor& t) {
  return DTensorAccess::layout_ptr(as_dtensor(t)).get();
}

TEST(DecisionCache, ARepeatedCallSharesTheOutputLayout) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6}), B = global_b({5, 6});
    const at::Tensor a = make(A, mesh, {Shard(0)}).as_tensor();
    const at::Tensor b = make(B, mesh, {Shard(0)}).as_tensor();
    const at::Tensor r1 = at::add(a, b), r2 = at::add(a, b), r3 = at::mul(a, b);
    EXPECT_EQ(layout_of(r1), layout_of(r2));  // the remembered decision's layout
    EXPECT_NE(layout_of(r1), layout_of(r3));  // another op decides on its own
    EXPECT_EQ(as_dtensor(r1).layout(), as_dtensor(r3).layout());
    expect_close(full(r2), A + B, "add");
    expect_close(full(r3), A * B, "mul");
    // Inputs whose layouts are equal but other objects hit the same decision.
    const at::Tensor c = make(B, mesh, {Shard(0)}).as_tensor();
    EXPECT_EQ(layout_of(at::add(a, c)), layout_of(r1));
  });
}

TEST(DecisionCache, TheKeyHoldsLayoutsShapesArgumentsAndDtype) {
  for (const std::vector<int64_t>& ms : {std::vector<int64_t>{2}, {4}}) {
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({6, 4}), B = global_b({6, 4});
      const at::Tensor s0 = make(A, mesh, {Shard(0)}).as_tensor();
      const at::Tensor s1 = make(A, mesh, {Shard(1)}).as_tensor();
      const at::Tensor r = make(B, mesh, {Replicate()}).as_tensor();
      // Same op, other layouts.
      for (int rep = 0; rep < 2; ++rep) {
        EXPECT_EQ(as_dtensor(at::add(s0, r)).layout().placements()[0], Shard(0));
        EXPECT_EQ(as_dtensor(at::add(s1, r)).layout().placements()[0], Shard(1));
        expect_close(full(at::add(s1, r)), A + B, "add s1");
      }
      // A plain operand: its shape (broadcast [4] vs [6, 4]).
      const at::Tensor row = global_b({4}), whole = global_b({6, 4});
      expect_close(full(at::add(s0, row)), A + row, "add row");
      expect_close(full(at::add(s0, whole)), A + whole, "add whole");
      // A view's sizes and a reduction's dims / keepdim.
      for (int rep = 0; rep < 2; ++rep) {
        expect_close(full(s0.view({6, 2, 2})), A.view({6, 2, 2}), "view 6x2x2");
        expect_close(full(s0.view({6, 4, 1})), A.view({6, 4, 1}), "view 6x4x1");
        const at::Tensor sum0 = s0.sum(0), sum1 = s0.sum(1), sum1k = s0.sum(1, true);
        EXPECT_TRUE(as_dtensor(sum0).layout().has_partial());
        EXPECT_EQ(as_dtensor(sum1).layout().placements()[0], Shard(0));
        expect_close(full(sum0), A.sum(0), "sum 0");
        expect_close(full(sum1), A.sum(1), "sum 1");
        expect_close(full(sum1k), A.sum(1, true), "sum 1 keepdim");
      }
      // The dtype: amax over a sharded dim of an int tensor and of a float one.
      const at::Tensor Ai = (A * 10).to(at::kLong);
      const at::Tensor si = make(Ai, mesh, {Shard(0)}).as_tensor();
      EXPECT_TRUE(at::equal(full(at::amax(si, {0})), at::amax(Ai, {0})));
      expect_close(full(at::amax(s0, {0})), at::amax(A, {0}), "amax float");
    });
  }
}

}  // namespace
}  // namespace hyper

namespace hyper {
namespace {

// alias / detach of a DTensor tensor whose values are a pending async redistribute give the
// same pending DTensor (the wait stays at the first read of the values: AccumulateGrad
// detaches a gradient a hook made pending, tp/gradient_overlap.cc); other ops wait.
TEST(PendingAlias, DetachAndAliasKeepAnAsyncResultPending) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({6, 4});
    const DTensor pending = make(A, mesh, {Partial()}).redistribute(mesh, {Replicate()}, true);
    ASSERT_TRUE(pending.is_pending());
    const at::Tensor t = pending.as_tensor();
    const at::Tensor d = t.detach(), a = at::alias(t);
    EXPECT_TRUE(as_dtensor(d).is_pending());
    EXPECT_TRUE(as_dtensor(a).is_pending());
    EXPECT_EQ(pending.wait_count(), 0);
    expect_close(full(at::mul(d, 2)), A * 2, "mul of the detached pending tensor");  // waits
    EXPECT_EQ(pending.wait_count(), 1);  // the completion is shared
    EXPECT_FALSE(as_dtensor(a).is_pending());
    expect_close(full(a), A, "alias");
  });
}

}  // namespace
}  // namespace hyper
