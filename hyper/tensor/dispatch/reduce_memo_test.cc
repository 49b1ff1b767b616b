// A Partial DTensor tensor read by several ops is reduced once (DTensorImpl::local_as): the
// second read of the same layout moves no bytes and gives the same values; any write to the
// tensor (in-place op on the wrapper, a write to its local through the DTensor API) makes the
// next read reduce again; in-place and view ops never receive the remembered local. Values
// against the single-device computation on the full tensors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>

#include "hyper/comm/stats.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::bytes_of;
using dispatch_testing::make;


TEST(ReduceMemo, APartialReadTwiceIsReducedOnce) {
  for (const std::vector<int64_t>& ms : {std::vector<int64_t>{2}, {4}, {2, 2}}) {
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      const Placements pp(mesh.ndim(), Partial());
      const at::Tensor a = make(A, mesh, pp).as_tensor();
      at::Tensor r1, r2, r3;
      const int64_t first = bytes_of(mesh, [&] { r1 = at::relu(a); });    // reduces (R)
      const int64_t second = bytes_of(mesh, [&] { r2 = at::sigmoid(a); });  // the memo
      const int64_t third = bytes_of(mesh, [&] { r3 = at::pow(a, 2); });
      EXPECT_GT(first, 0);
      EXPECT_EQ(second, 0);
      EXPECT_EQ(third, 0);
      expect_close(full(r1), at::relu(A), "relu");
      expect_close(full(r2), at::sigmoid(A), "sigmoid");
      expect_close(full(r3), at::pow(A, 2), "pow");
    });
  }
}

TEST(ReduceMemo, AWriteToTheWrapperOrItsLocalReducesAgain) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    at::Tensor a = make(A, mesh, {Partial()}).as_tensor();
    expect_close(full(at::relu(a)), at::relu(A), "before");
    // In-place op on the wrapper: adds 1 to the global value (on one coordinate), stays P.
    a.add_(1);
    ASSERT_TRUE(as_dtensor(a).layout().placements()[0].is_partial());
    at::Tensor r;
    EXPECT_GT(bytes_of(mesh, [&] { r = at::relu(a); }), 0);
    expect_close(full(r), at::relu(A + 1), "after add_");
    // A write to the local through the DTensor API (the wrapper's version is unchanged).
    as_dtensor(a).to_local().mul_(2);
    EXPECT_GT(bytes_of(mesh, [&] { r = at::relu(a); }), 0);
    expect_close(full(r), at::relu(2 * (A + 1)), "after to_local().mul_");
  });
}

TEST(ReduceMemo, GradientsThroughARememberedReductionEqualOneDevice) {
  // mse of a Partial activation: pow reads it forward and backward; layer_norm likewise.
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({3, 4, 8}), W = global_b({8, 8}), T = global_b({3, 4, 8});
    // x R, w S(0): the matmul of x S(-1) by w gives P(sum), as a Rowwise layer does.
    const at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor x = make(X, mesh, {Shard(2)}).as_tensor();
    const at::Tensor Wr = W.clone().requires_grad_();
    at::Tensor y, loss;
    const int64_t fwd = bytes_of(mesh, [&] {
      y = at::matmul(x, w);
      ASSERT_TRUE(as_dtensor(y).layout().placements()[0].is_partial());
      const at::Tensor z = at::layer_norm(y, {8}) + (y - make(T, mesh, {Replicate()}).as_tensor()).pow(2);
      loss = z.sum();
    });
    const int64_t bwd = bytes_of(mesh, [&] { loss.backward(); });
    const at::Tensor yr = at::matmul(X, Wr);
    const at::Tensor lr = (at::layer_norm(yr, {8}) + (yr - T).pow(2)).sum();
    lr.backward();
    expect_close(full(loss), lr.detach(), "loss");
    expect_close(full(w.grad()), Wr.grad(), "w.grad");
    // y is reduced once, by layer_norm forward (its backward reads the memo); y - T is a
    // second Partial, reduced by pow forward (pow backward reads the memo): two reductions
    // of y's size forward, none backward (without the memo: two more).
    const int64_t one = bytes_of(mesh, [&] { (void)at::relu(make(X, mesh, {Partial()}).as_tensor()); });
    EXPECT_GT(one, 0);
    EXPECT_EQ(fwd, 2 * one) << "forward bytes";
    EXPECT_EQ(bwd, 0) << "backward bytes";
  });
}

TEST(ReduceMemo, InPlaceAndViewOpsGetAFreshLocal) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    const at::Tensor a = make(A, mesh, {Partial()}).as_tensor();
    const at::Tensor r1 = at::relu(a);  // memo: a's reduction
    // copy_ into another tensor from the Partial source, then write the copy: the memo
    // (still read below) must be unchanged.
    at::Tensor c = make(at::zeros_like(A), mesh, {Replicate()}).as_tensor();
    c.copy_(a);
    c.add_(5);
    expect_close(full(c), A + 5, "copy_ then add_");
    expect_close(full(at::sigmoid(a)), at::sigmoid(A), "a after the copy was written");
    expect_close(full(r1), at::relu(A), "relu");
  });
}

}  // namespace
}  // namespace hyper
