// masked_fill_ on a Partial DTensor, share by share (partial_fill_kernels.h), and
// what it makes exact: the backward of linalg_vector_norm / norm with ord 2 of a Partial input
// (which calls masked_fill_ on a Partial). Values and gradients against one device on 2 and 4
// ranks and a 2x2 mesh, a zero row included (where the backward's fill matters).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/format.h"
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
using dispatch_testing::make;

std::vector<Placements> partial_cases(const DeviceMesh& mesh) {
  if (mesh.topology().ndim() == 1)
    return {{Partial("sum")}, {Partial("avg")}, {Partial("max")}, {Partial("min")}};
  // (Mixed sum and max/min Partials: full_tensor() itself refuses them.)
  return {{Partial("sum"), Partial("sum")}, {Partial("sum"), Shard(0)}, {Shard(1), Partial("avg")},
          {Partial("max"), Shard(0)}, {Partial("min"), Partial("min")}, {Replicate(), Partial()}};
}

void check_masked_fill(const DeviceMesh& mesh) {
  const at::Tensor A = global_a({5, 6});
  const at::Tensor M = global_b({5, 6}) > 1.5;
  for (const auto& p : partial_cases(mesh))
    for (const double v : {0.0, -7.5}) {
      const std::string what = "masked_fill_ " + to_string(p) + " value " + std::to_string(v) +
                               " on " + std::to_string(mesh.size());
      at::Tensor a = make(A, mesh, p).as_tensor();
      // The mask: plain, a Replicate DTensor, a Shard(0) DTensor, a broadcast row.
      for (int k = 0; k < 4; ++k) {
        at::Tensor a2 = make(A, mesh, p).as_tensor();
        const at::Tensor m = k == 0   ? M
                             : k == 1 ? distribute_tensor(M, mesh, Placements(p.size(), Replicate())).as_tensor()
                             : k == 2 ? distribute_tensor(M, mesh, Placements(p.size(), Shard(0))).as_tensor()
                                      : M[0];
        const at::Tensor want = A.masked_fill(k == 3 ? M[0] : M, v);
        at::Tensor& r = a2.masked_fill_(m, v);
        EXPECT_EQ(r.unsafeGetTensorImpl(), a2.unsafeGetTensorImpl()) << what;
        EXPECT_EQ(as_dtensor(a2).placements(), p) << what << " mask " << k;
        expect_close(full(a2), want, what + " mask " + std::to_string(k));
      }
    }
}

TEST(PartialFill, MaskedFillInPlaceOfPartialOn2And4Ranks) {
  run_on_mesh({2}, check_masked_fill);
  run_on_mesh({4}, check_masked_fill);
}
TEST(PartialFill, MaskedFillInPlaceOfPartialOn2x2Mesh) { run_on_mesh({2, 2}, check_masked_fill); }

void check_norm_gradients(const DeviceMesh& mesh) {
  // Row 2 is zero: its norm is 0 and the backward's fill gives it gradient 0 (not nan).
  at::Tensor X = global_a({5, 6}) * at::cos(at::arange(30, at::kDouble)).view({5, 6});
  X.select(0, 2).zero_();
  using F = std::function<at::Tensor(const at::Tensor&)>;
  const std::vector<std::pair<std::string, F>> ops = {
      {"linalg_vector_norm(2, dim 1)", [](const at::Tensor& x) { return at::linalg_vector_norm(x, 2, {1}); }},
      {"linalg_vector_norm(2, dim 1, keepdim)",
       [](const at::Tensor& x) { return at::linalg_vector_norm(x, 2, {1}, true); }},
      {"linalg_vector_norm(2)", [](const at::Tensor& x) { return at::linalg_vector_norm(x); }},
      {"norm()", [](const at::Tensor& x) { return x.norm(); }},
  };
  // P(max/min) inputs are reduced by x*x (no Partial reaches the fill); mixed sum and max/min
  // Partials are refused by x*x itself (reducing both at once: not implemented).
  std::vector<Placements> cases;
  for (const auto& p : partial_cases(mesh)) {
    bool max_min = false;
    for (const auto& q : p) max_min = max_min || (q.is_partial() && (q.reduce_op() == "max" || q.reduce_op() == "min"));
    if (!max_min) cases.push_back(p);
  }
  for (const auto& p : cases)
    for (const auto& [name, f] : ops) {
      const std::string what = name + " " + to_string(p) + " on " + std::to_string(mesh.size());
      const at::Tensor xr = X.clone().requires_grad_();
      const at::Tensor yr = f(xr);
      const at::Tensor G = global_b(yr.sizes().vec());
      (yr * G).sum().backward();
      const at::Tensor x = make(X, mesh, p).as_tensor().requires_grad_();
      try {
        const at::Tensor y = f(x);
        expect_close(full(y), yr.detach(), what);
        (y * make(G, mesh, Placements(p.size(), Replicate())).as_tensor()).sum().backward();
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
        continue;
      }
      ASSERT_FALSE(at::isnan(xr.grad()).any().item<bool>()) << what;
      expect_close(full(x.grad()), xr.grad(), "grad " + what);
    }
}

TEST(PartialFill, NormOrd2GradientOfPartialOn2And4Ranks) {
  run_on_mesh({2}, check_norm_gradients);
  run_on_mesh({4}, check_norm_gradients);
}
TEST(PartialFill, NormOrd2GradientOfPartialOn2x2Mesh) { run_on_mesh({2, 2}, check_norm_gradients); }

}  // namespace
}  // namespace hyper
