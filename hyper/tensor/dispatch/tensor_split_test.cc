// tensor_split of DTensor tensors (dispatch/tensor_split_kernels.h): pieces (values,
// placements) and gradients vs ATen's tensor_split of the full tensor on one device, sections
// and indices (negative, beyond the size, decreasing), every dim, on 2 and 4 ranks (even and
// uneven Shard, an empty shard) and a 2x2 mesh, R / S / P(sum); bytes: none along an unsharded
// dim, one gather (as one narrow) along the sharded dim for all pieces; the ValueErrors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
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

struct Split {
  std::string what;
  std::function<std::vector<at::Tensor>(const at::Tensor&, int64_t)> f;
};

std::vector<Split> splits() {
  std::vector<Split> v;
  for (int64_t s : {1, 3, 4, 9})
    v.push_back({"sections " + std::to_string(s),
                 [s](const at::Tensor& t, int64_t d) { return t.tensor_split(s, d); }});
  for (std::vector<int64_t> idx : std::vector<std::vector<int64_t>>{
           {2, 5}, {-3, 10}, {0, 0, 4}, {}, {4, 2}, {-1, 1}})
    v.push_back({"indices " + shape_to_string(idx),
                 [idx](const at::Tensor& t, int64_t d) { return t.tensor_split(idx, d); }});
  return v;
}

void cases(const DeviceMesh& mesh, const std::vector<int64_t>& shape,
           const std::vector<Placements>& cat) {
  const at::Tensor X = global_a(shape);
  for (const auto& ps : cat)
    for (int64_t dim : {int64_t{0}, int64_t{1}, int64_t{-1}})
      for (const Split& s : splits()) {
        const std::string what = s.what + " dim " + std::to_string(dim) + " of " +
                                 shape_to_string(shape) + " " + to_string(ps) + " on " +
                                 std::to_string(mesh.size());
        const at::Tensor xr = X.clone().requires_grad_();
        const std::vector<at::Tensor> want = s.f(xr, dim);
        at::Tensor lr = at::zeros({}, at::kDouble);
        for (size_t i = 0; i < want.size(); ++i)
          lr = lr + (want[i] * global_b(want[i].sizes().vec()) * static_cast<double>(i + 1)).sum();
        lr.backward();
        const at::Tensor x = make(X, mesh, ps).as_tensor().requires_grad_();
        try {
          const std::vector<at::Tensor> got = s.f(x, dim);
          ASSERT_EQ(got.size(), want.size()) << what;
          at::Tensor l;
          const int64_t d = dim < 0 ? dim + X.dim() : dim;
          for (size_t i = 0; i < got.size(); ++i) {
            expect_close(full(got[i]), want[i].detach(), what + " piece " + std::to_string(i));
            // Along an unsharded dim every placement is kept (Partial too).
            bool sharded = false;
            for (const auto& q : ps) sharded = sharded || q.is_shard(d);
            if (!sharded) {
              EXPECT_EQ(as_dtensor(got[i]).placements(), ps) << what;
            }
            const at::Tensor term =
                (got[i] * global_b(want[i].sizes().vec()) * static_cast<double>(i + 1)).sum();
            l = l.defined() ? l + term : term;
          }
          l.backward();
          expect_close(full(x.grad()), xr.grad(), "grad " + what);
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
}

TEST(TensorSplit, PiecesAndGradientsOn2And4Ranks) {
  const std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {6, 4}, cat);  // even
    cases(mesh, {7, 5}, cat);  // 4,3 and 3,2
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    cases(mesh, {7, 6}, cat);  // 2,2,2,1 and 2,2,1,1
    cases(mesh, {3, 5}, cat);  // 1,1,1,0: an empty shard
  });
}

TEST(TensorSplit, TwoByTwoMesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    cases(mesh, {7, 6}, {{Shard(0), Shard(1)}, {Shard(1), Partial()}, {Shard(0), Shard(0)}});
  });
}

TEST(TensorSplit, NoBytesAlongAnUnshardedDimOneGatherAlongTheShardedDim) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({7, 6}), mesh, {Shard(0)}).as_tensor();
    auto moved = [&](const std::function<void()>& f) { return dispatch_testing::bytes_of(mesh, f); };
    EXPECT_EQ(moved([&] { (void)x.tensor_split(3, 1); }), 0);
    EXPECT_EQ(moved([&] { (void)x.tensor_split(std::vector<int64_t>{1, 4}, 1); }), 0);
    const auto one_slice = moved([&] { (void)x.narrow(0, 0, 1); });
    EXPECT_GT(one_slice, 0);
    EXPECT_EQ(moved([&] { (void)x.tensor_split(3, 0); }), one_slice);  // not once per piece
    EXPECT_EQ(moved([&] { (void)x.tensor_split(std::vector<int64_t>{1, 2, 5}, 0); }), one_slice);
    // The overload taking a tensor (ATen's composite calls the indices / sections overloads).
    EXPECT_EQ(moved([&] { (void)x.tensor_split(at::tensor(std::vector<int64_t>{1, 2, 5}), 0); }),
              one_slice);
    EXPECT_EQ(moved([&] { (void)x.tensor_split(at::tensor(int64_t{3}), 0); }), one_slice);
    EXPECT_TRUE(at::equal(full(x.tensor_split(at::tensor(std::vector<int64_t>{1, 2, 5}), 0)[2]),
                          global_a({7, 6}).tensor_split(std::vector<int64_t>{1, 2, 5}, 0)[2]));
    // Overlapping pieces (decreasing indices): slices, each gathered.
    EXPECT_EQ(moved([&] { (void)x.tensor_split(std::vector<int64_t>{5, 2}, 0); }), 3 * one_slice);
    // The pieces along the unsharded dim alias x: an in-place op on one writes x.
    at::Tensor y = make(global_a({7, 6}), mesh, {Shard(0)}).as_tensor();
    y.tensor_split(2, 1)[1].mul_(10);
    at::Tensor want = global_a({7, 6});
    want.tensor_split(2, 1)[1].mul_(10);
    expect_close(full(y), want, "in-place through a piece");
  });
}

TEST(TensorSplit, ValueErrors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)x.tensor_split(0, 1); });
    EXPECT_NE(m.find("aten::tensor_split.sections(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) "
                     "sections=0 dim=1: number of sections must be larger than 0, got 0"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)x.tensor_split(std::vector<int64_t>{1}, 2); });
    EXPECT_NE(m.find("aten::tensor_split.indices(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) "
                     "indices=[1] dim=2: dim 2 out of range [-2, 1]"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)x.tensor_split(2, -3); });
    EXPECT_NE(m.find("sections=2 dim=-3: dim -3 out of range [-2, 1]"), std::string::npos) << m;
    const at::Tensor s = make(at::ones({}, at::kDouble), mesh, {Replicate()}).as_tensor();
    m = error_of<ValueError>([&] { (void)s.tensor_split(2); });
    EXPECT_NE(m.find("aten::tensor_split.sections(arg 0: mesh=[2] placements=[R] shape=[]) "
                     "sections=2 dim=0: tensor_split expected at least a 1-dimensional tensor"),
              std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
