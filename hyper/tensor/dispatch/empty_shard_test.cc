// amax / amin of integer and bool DTensors over a dim sharded so that a rank holds an empty
// shard: that rank's share of the Partial(max/min) is the dtype's identity (lowest /
// highest value, false / true), so the result equals one device's, all-negative values (amax)
// and all-positive values (amin) included, where a share of 0 would be wrong.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

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
using dispatch_testing::full;
using dispatch_testing::make;

void check_int_amax_amin(const DeviceMesh& mesh, const std::vector<int64_t>& shape,
                         const Placements& p) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  const at::Tensor pos = (at::arange(n, at::kLong) * 7 % 11 + 1).reshape(shape);  // 1..11
  for (const at::ScalarType t : {at::kLong, at::kInt, at::kShort, at::kChar, at::kByte, at::kBool})
    for (const bool negative : {false, true}) {
      if (negative && (t == at::kByte || t == at::kBool)) continue;
      at::Tensor X = (negative ? -pos : pos).to(t);
      if (t == at::kBool) X = negative ? at::zeros(shape, at::kBool) : (pos % 2 == 0);
      for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {0, 1}, {}})
        for (const bool keep : {false, true}) {
          const std::string what = std::string(c10::toString(t)) + (negative ? " negative " : " ") +
                                   to_string(p) + " dims " + std::to_string(dims.size()) +
                                   (keep ? " keepdim" : "") + " on " + std::to_string(mesh.size());
          const at::Tensor x = make(X, mesh, p).as_tensor();
          at::Tensor mx, mn;
          try {
            mx = x.amax(dims, keep);
            mn = x.amin(dims, keep);
          } catch (const std::exception& e) {
            ADD_FAILURE() << what << ": " << e.what();
            continue;
          }
          EXPECT_EQ(mx.scalar_type(), t) << what;
          EXPECT_TRUE(at::equal(full(mx), X.amax(dims, keep))) << what << "\n" << full(mx);
          EXPECT_TRUE(at::equal(full(mn), X.amin(dims, keep))) << what << "\n" << full(mn);
          EXPECT_TRUE(as_dtensor(mx).placements()[0].is_partial()) << what;
        }
    }
}

TEST(EmptyShard, IntegerAndBoolAmaxAminOn4Ranks) {
  // [5,6] S(0) on 4 ranks: rows 2,2,1,0; [3,6]: 1,1,1,0.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    check_int_amax_amin(mesh, {5, 6}, {Shard(0)});
    check_int_amax_amin(mesh, {3, 6}, {Shard(0)});
  });
}
TEST(EmptyShard, IntegerAndBoolAmaxAminOn2x2Mesh) {
  // [3,6] [S(0),S(0)]: rows 2 | 1 over mesh dim 0, then 1,1 | 1,0: rank (1,1) holds none.
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    check_int_amax_amin(mesh, {3, 6}, {Shard(0), Shard(0)});
  });
}
TEST(EmptyShard, IntegerAmaxAminEvenOn2Ranks) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { check_int_amax_amin(mesh, {4, 6}, {Shard(0)}); });
}

}  // namespace
}  // namespace hyper
