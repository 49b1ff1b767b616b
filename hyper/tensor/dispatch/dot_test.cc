// dot / vdot / 1-D matmul of DTensor tensors (dispatch/dot_kernels.h): values,
// placements and gradients vs one device for every pair of {R, S(0), P(sum)} on 2 and 4 ranks
// (uneven: [5] on 4 ranks 2,1,1,1; [3]: 1,1,1,0, an empty shard) and a 2x2 mesh; the
// ValueErrors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

void dot_cases(const DeviceMesh& mesh, int64_t n, const std::vector<Placements>& cat) {
  const at::Tensor U = global_a({n}), V = global_b({n});
  for (const auto& pu : cat)
    for (const auto& pv : cat)
      for (int op = 0; op < 3; ++op) {
        const char* names[] = {"dot", "vdot", "matmul"};
        auto f = [op](const at::Tensor& a, const at::Tensor& b) {
          return op == 0 ? at::dot(a, b) : op == 1 ? at::vdot(a, b) : at::matmul(a, b);
        };
        const std::string what = std::string(names[op]) + " " + to_string(pu) + " " + to_string(pv) +
                                 " [" + std::to_string(n) + "] on " + std::to_string(mesh.size());
        const at::Tensor ur = U.clone().requires_grad_(), vr = V.clone().requires_grad_();
        const at::Tensor yr = f(ur, vr);
        (yr * 1.75).backward();
        const at::Tensor u = make(U, mesh, pu).as_tensor().requires_grad_();
        const at::Tensor v = make(V, mesh, pv).as_tensor().requires_grad_();
        at::Tensor y;
        try {
          y = f(u, v);
          expect_close(full(y), yr.detach(), what);
          (y * 1.75).backward();
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        expect_close(full(u.grad()), ur.grad(), "grad u " + what);
        expect_close(full(v.grad()), vr.grad(), "grad v " + what);
        // S(0) x S(0) (and S(0) beside R) moves no bytes: the result is P(sum); R x R is R.
        if (mesh.topology().ndim() == 1) {
          if (pu[0].is_shard() || pv[0].is_shard()) EXPECT_EQ(as_dtensor(y).placements()[0], Partial()) << what;
          if (pu[0].is_replicate() && pv[0].is_replicate()) EXPECT_EQ(as_dtensor(y).placements()[0], Replicate()) << what;
        }
      }
}

TEST(DotOps, EveryPairOn2And4Ranks) {
  const std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Partial()}};
  run_on_mesh({2}, [&](const DeviceMesh& mesh) { dot_cases(mesh, 6, cat); });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    dot_cases(mesh, 5, cat);  // 2,1,1,1
    dot_cases(mesh, 3, cat);  // 1,1,1,0: an empty shard
  });
}
TEST(DotOps, EveryPairOn2x2Mesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    dot_cases(mesh, 6, {{Shard(0), Shard(0)}, {Replicate(), Shard(0)}, {Partial(), Replicate()},
                        {Shard(0), Partial()}});
  });
}

// dot.out / vdot.out (out_kernels.h): the functional op, then copy_ into the 0-dim out,
// which keeps its layout (an R out all-reduces a P(sum) result; a P(sum) out keeps it).
TEST(DotOps, OutOverloadsWriteIntoADTensorOut) {
  for (const int64_t n : {2, 4})
    run_on_mesh({n}, [](const DeviceMesh& mesh) {
      const at::Tensor U = global_a({5}), V = global_b({5});
      for (const Placements& po : {Placements{Replicate()}, Placements{Partial()}}) {
        const at::Tensor u = make(U, mesh, {Shard(0)}).as_tensor();
        const at::Tensor v = make(V, mesh, {Replicate()}).as_tensor();
        at::Tensor out = make(at::zeros({}, U.options()), mesh, po).as_tensor();
        at::Tensor& r = at::dot_out(out, u, v);
        EXPECT_TRUE(r.is_same(out));
        EXPECT_EQ(as_dtensor(out).layout().placements(), po) << to_string(po);
        expect_close(full(out), at::dot(U, V), "dot.out " + to_string(po));
        at::vdot_out(out, v, u);
        expect_close(full(out), at::vdot(V, U), "vdot.out " + to_string(po));
      }
    });
}

TEST(DotOps, ValueErrorsNameTheLayouts) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor u = make(global_a({6}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor w = make(global_a({4}), mesh, {Replicate()}).as_tensor();
    const at::Tensor m2 = make(global_a({2, 3}), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)at::dot(u, w); });
    EXPECT_NE(m.find("aten::dot(arg 0: mesh=[2] placements=[S(0)] shape=[6]; arg 1: mesh=[2] "
                     "placements=[R] shape=[4]): sizes 6 and 4 differ"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::vdot(m2, u); });
    EXPECT_NE(m.find("aten::vdot(arg 0: mesh=[2] placements=[S(0)] shape=[2,3]; arg 1: mesh=[2] "
                     "placements=[S(0)] shape=[6]): 1-D tensors expected, got 2-D and 1-D"),
              std::string::npos) << m;
    const at::Tensor f = make(global_a({6}).to(at::kFloat), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::dot(u, f); });
    EXPECT_NE(m.find("): dtypes Double and Float differ"), std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
