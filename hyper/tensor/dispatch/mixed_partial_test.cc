// Redistribution that reduces Partial mesh dims of different linear ops at once ([P(avg),
// P(sum)] -> R, S, ...): two plans (redistribute.cc, first_reduction_stage), values equal to
// slicing the known global tensor; sync, async and through autograd; a mix with max/min is
// refused naming the placements.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
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
using dispatch_testing::make;

/// Rank `idx`'s piece of `global` under `layout` (no Partial in `layout`).
at::Tensor slice_of(const at::Tensor& global, const Layout& layout, int64_t idx) {
  const Box b = layout.local_box(idx);
  at::Tensor r = global;
  for (int64_t d = 0; d < b.rank(); ++d) r = r.narrow(d, b.offsets[d], b.sizes[d]);
  return r;
}

TEST(MixedPartial, AvgAndSumMeshDimsReduceToAnyLayout) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    for (const Placements& src : {Placements{Partial("avg"), Partial("sum")},
                                  Placements{Partial("sum"), Partial("avg")}}) {
      const DTensor x = make(A, mesh, src);
      expect_close(x.full_tensor(), A, "full_tensor of " + to_string(src));
      for (const Placements& dst : {Placements{Shard(0), Replicate()},
                                    Placements{Replicate(), Shard(1)},
                                    Placements{Shard(1), Shard(0)},
                                    Placements{Shard(0), Shard(0)}}) {
        const std::string what = to_string(src) + " -> " + to_string(dst);
        for (const bool async : {false, true}) {
          const DTensor y = x.redistribute(mesh, dst, async);
          EXPECT_EQ(y.layout().placements(), dst) << what;
          expect_close(y.to_local(), slice_of(A, y.layout(), y.mesh_index()),
                       what + (async ? " (async)" : ""));
        }
      }
      // Only one op reduced (the other kept): one plan.
      const DTensor kept = x.redistribute(mesh, {src[0], Replicate()});
      expect_close(kept.full_tensor(), A, "keep " + to_string(src));
    }
  });
}

TEST(MixedPartial, SumOverAShardedDimOfAnAvgPartialAndItsGradient) {
  // sum(0) of [P(avg),S(0)] is [P(avg),P(sum)]: full_tensor() and the backward (an R gradient
  // brought back to the mixed layout) equal one device's.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 7});
    const at::Tensor x = make(A, mesh, {Partial("avg"), Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor y = x.sum(0);
    ASSERT_EQ(as_dtensor(y).layout().placements(), (Placements{Partial("avg"), Partial("sum")}));
    expect_close(full(y), A.sum(0), "sum(0)");
    const at::Tensor W = global_a({7}) + 3;
    (y * make(W, mesh, {Replicate(), Replicate()}).as_tensor()).sum().backward();
    expect_close(full(x.grad()), W.expand({5, 7}), "grad");
  });
}

TEST(MixedPartial, AMixWithMaxOrMinIsRefusedNamingThePlacements) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    for (const Placements& src : {Placements{Partial("max"), Partial("sum")},
                                  Placements{Partial("avg"), Partial("min")}}) {
      const DTensor x = make(A, mesh, src);
      const std::string m = error_of<NotImplementedError>([&] { (void)x.full_tensor(); });
      EXPECT_NE(m.find("reducing Partial mesh dims of different ops at once is not implemented"),
                std::string::npos) << m;
      EXPECT_NE(m.find(to_string(src)), std::string::npos) << m;
    }
  });
}

}  // namespace
}  // namespace hyper
