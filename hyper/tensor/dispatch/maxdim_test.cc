// max.dim / min.dim / argmax / argmin of DTensor tensors (dispatch/maxdim_kernels.h):
// values, indices and gradients vs the same op on the full tensor on one device, on 2 and 4
// ranks (even and uneven Shard, an empty shard) and a 2x2 mesh, for R, S(0), S(1), P(sum),
// P(max); ties and NaN across ranks resolve to the first global index; an integer dtype; the
// placements; the bytes of a sharded dim (candidates, not the tensor); the errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <tuple>
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

const char* const kOps[] = {"max", "min", "argmax", "argmin"};

/// (values or undefined, indices) of op `o` of kOps.
std::tuple<at::Tensor, at::Tensor> run(int o, const at::Tensor& x, int64_t dim, bool keep) {
  if (o == 0) return at::max(x, dim, keep);
  if (o == 1) return at::min(x, dim, keep);
  return {at::Tensor(), o == 2 ? at::argmax(x, dim, keep) : at::argmin(x, dim, keep)};
}

bool has_partial(const Placements& ps) {
  for (const auto& q : ps)
    if (q.is_partial()) return true;
  return false;
}

/// Every op, dim and keepdim of `X` in each of `cat`: values and indices equal to one device
/// (bit for bit unless the input is Partial(sum/avg), whose reduction rounds), the values'
/// gradient (floating X) too, and the placements: a Shard of another dim kept (renumbered), a
/// Shard of dim made Replicate.
void cases(const DeviceMesh& mesh, const at::Tensor& X, const std::vector<Placements>& cat,
           const std::string& label) {
  const bool grad = at::isFloatingType(X.scalar_type());
  for (const auto& ps : cat)
    for (int64_t dim : {int64_t{0}, int64_t{1}, int64_t{-1}})
      for (bool keep : {false, true})
        for (int o = 0; o < 4; ++o) {
          const std::string what = std::string(kOps[o]) + " " + label + " " + to_string(ps) +
                                   " dim " + std::to_string(dim) + (keep ? " keepdim" : "") +
                                   " on " + std::to_string(mesh.size());
          const at::Tensor xr = grad ? X.clone().requires_grad_() : X.clone();
          const auto [vr, ir] = run(o, xr, dim, keep);
          const at::Tensor W = global_b(ir.sizes().vec());
          if (grad && vr.defined()) (vr * W).sum().backward();
          const at::Tensor x = grad ? make(X, mesh, ps).as_tensor().requires_grad_()
                                    : make(X, mesh, ps).as_tensor();
          try {
            const auto [v, i] = run(o, x, dim, keep);
            EXPECT_TRUE(at::equal(full(i), ir)) << what << "\ngot\n" << full(i) << "\nwant\n" << ir;
            if (vr.defined()) {
              if (has_partial(ps) && ps != Placements(ps.size(), Partial("max")))
                expect_close(full(v), vr.detach(), what);
              else
                EXPECT_TRUE(at::equal(full(v).nan_to_num(7.5), vr.detach().nan_to_num(7.5)))
                    << what << "\ngot\n" << full(v) << "\nwant\n" << vr;
              EXPECT_EQ(as_dtensor(v).placements(), as_dtensor(i).placements()) << what;
            }
            const int64_t d = dim < 0 ? dim + X.dim() : dim;
            for (size_t m = 0; m < ps.size(); ++m) {
              const Placement got = as_dtensor(i).placements()[m];
              if (ps[m].is_shard() && ps[m].dim() != d) {
                EXPECT_EQ(got, Shard(!keep && ps[m].dim() > d ? ps[m].dim() - 1 : ps[m].dim())) << what;
              } else {
                EXPECT_EQ(got, Replicate()) << what;
              }
            }
            if (grad && v.defined()) {
              (v * W).sum().backward();
              expect_close(full(x.grad()), xr.grad(), "grad " + what);
            }
          } catch (const std::exception& e) {
            ADD_FAILURE() << what << ": " << e.what();
          }
        }
}

/// Small integers: ties within and across every rank's shard.
at::Tensor ties(const std::vector<int64_t>& shape, int64_t mod) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return at::remainder(at::arange(n, at::kDouble) * 7, mod).reshape(shape);
}

const std::vector<Placements>& catalogue() {
  static const std::vector<Placements> c = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()},
                                            {Partial("max")}};
  return c;
}

TEST(MaxDim, ValuesIndicesAndGradientsOn2And4Ranks) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    cases(mesh, global_a({4, 6}), catalogue(), "[4,6]");  // even
    cases(mesh, global_a({5, 7}), catalogue(), "[5,7]");  // 3,2 and 4,3
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    cases(mesh, global_a({5, 6}), catalogue(), "[5,6]");  // 2,1,1,1 and 2,2,1,1
    cases(mesh, global_a({3, 4}), catalogue(), "[3,4]");  // 1,1,1,0: an empty shard
    // All negative (max) and all positive (min): the empty shard's placeholder 0 must not win.
    cases(mesh, -global_b({3, 4}), catalogue(), "-[3,4]");
    cases(mesh, global_b({3, 4}), catalogue(), "+[3,4]");
  });
}

// The out= overloads (max.dim_max, min.dim_min, argmax.out, argmin.out; out_kernels.h): the
// functional op, then copy_ into each out, which keeps its layout; values equal one device.
TEST(MaxDim, OutOverloadsWriteIntoDTensorOuts) {
  for (const int64_t n : {2, 4})
    run_on_mesh({n}, [](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({5, 6});
      const auto [mv, mi] = at::max(X, 1);
      const auto [nv, ni] = at::min(X, 0, /*keepdim=*/true);
      for (const Placements& px : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(1)}}) {
        const std::string what = "x " + to_string(px);
        const at::Tensor x = make(X, mesh, px).as_tensor();
        at::Tensor vals = make(at::zeros({5}, X.options()), mesh, {Shard(0)}).as_tensor();
        at::Tensor idx = make(at::zeros({5}, at::kLong), mesh, {Replicate()}).as_tensor();
        at::max_out(vals, idx, x, 1);
        EXPECT_EQ(as_dtensor(vals).layout().placements(), Placements{Shard(0)}) << what;
        EXPECT_EQ(as_dtensor(idx).layout().placements(), Placements{Replicate()}) << what;
        expect_close(full(vals), mv, what + " max values");
        EXPECT_TRUE(at::equal(full(idx), mi)) << what << " max indices";
        at::Tensor kv = make(at::zeros({1, 6}, X.options()), mesh, {Replicate()}).as_tensor();
        at::Tensor ki = make(at::zeros({1, 6}, at::kLong), mesh, {Shard(1)}).as_tensor();
        at::min_out(kv, ki, x, 0, /*keepdim=*/true);
        expect_close(full(kv), nv, what + " min values");
        EXPECT_TRUE(at::equal(full(ki), ni)) << what << " min indices";
        at::Tensor am = make(at::zeros({6}, at::kLong), mesh, {Shard(0)}).as_tensor();
        at::argmax_out(am, x, 0);
        EXPECT_TRUE(at::equal(full(am), at::argmax(X, 0))) << what << " argmax";
        at::Tensor an = make(at::zeros({5}, at::kLong), mesh, {Replicate()}).as_tensor();
        at::argmin_out(an, x, 1);
        EXPECT_TRUE(at::equal(full(an), at::argmin(X, 1))) << what << " argmin";
      }
      // An out of another global shape: refused, out unchanged (no resize of a DTensor).
      const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
      at::Tensor wrong = make(at::zeros({4}, at::kLong), mesh, {Replicate()}).as_tensor();
      const std::string m = error_of<NotImplementedError>([&] { at::argmax_out(wrong, x, 1); });
      EXPECT_NE(m.find("aten::argmax.out("), std::string::npos) << m;
      EXPECT_NE(m.find("out 0 has global shape [4]"), std::string::npos) << m;
      EXPECT_TRUE(at::equal(full(wrong), at::zeros({4}, at::kLong)));
    });
}

TEST(MaxDim, TwoByTwoMesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const std::vector<Placements> cat = {{Shard(0), Shard(0)}, {Shard(0), Shard(1)},
                                         {Shard(1), Partial()}, {Replicate(), Shard(1)},
                                         {Shard(1), Shard(0)}, {Partial("max"), Shard(0)}};
    cases(mesh, global_a({5, 6}), cat, "[5,6]");
    // Ties: no Partial(sum) (its unequal shares round, which may break a tie either way).
    cases(mesh, ties({5, 6}, 3), {cat[0], cat[1], cat[3], cat[4], cat[5]}, "ties [5,6]");
  });
}

TEST(MaxDim, TiesAndNanResolveToTheFirstGlobalIndex) {
  // Values 0..2 (ties in every shard and across shards), then NaN in two places of one column
  // and one row (max/min propagate NaN and give its first index).
  const at::Tensor T = ties({5, 6}, 3);
  at::Tensor N = ties({5, 6}, 4);
  N.index_put_({3, 1}, NAN);
  N.index_put_({4, 1}, NAN);
  N.index_put_({2, 4}, NAN);
  N.index_put_({2, 5}, NAN);
  const std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial("max")}};
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, T, cat, "ties");
    cases(mesh, N, cat, "nan");
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    cases(mesh, T, cat, "ties");
    cases(mesh, N, cat, "nan");
  });
}

TEST(MaxDim, IntegerDtype) {
  const at::Tensor T = ties({5, 6}, 5).to(at::kLong) - 2;
  const std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Shard(1)}};
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, T, cat, "int64"); });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, ties({3, 4}, 2).to(at::kInt), cat, "int32 empty shard"); });
  // bool (max / min only: ATen's argmax has no bool kernel), values as bytes.
  const at::Tensor B = ties({5, 6}, 3).gt(1);
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    for (const Placements& ps : cat)
      for (int64_t dim : {0, 1})
        for (int o = 0; o < 2; ++o) {
          const std::string what = std::string(kOps[o]) + " bool " + to_string(ps) + " dim " + std::to_string(dim);
          const auto [vr, ir] = run(o, B, dim, false);
          const auto [v, i] = run(o, make(B, mesh, ps).as_tensor(), dim, false);
          EXPECT_TRUE(at::equal(full(v), vr)) << what;
          EXPECT_TRUE(at::equal(full(i), ir)) << what;
        }
  });
}

TEST(MaxDim, ArgmaxOverAllElementsAndOneDim) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = ties({5, 6}, 11), Y = global_a({7});
    for (const Placements& ps : catalogue())
      for (bool keep : {false, true}) {
        const std::string what = to_string(ps) + (keep ? " keepdim" : "");
        const at::Tensor x = make(X, mesh, ps).as_tensor();
        EXPECT_TRUE(at::equal(full(at::argmax(x, std::nullopt, keep)), at::argmax(X, std::nullopt, keep))) << what;
        EXPECT_TRUE(at::equal(full(at::argmin(x, std::nullopt, keep)), at::argmin(X, std::nullopt, keep))) << what;
        if (ps[0].is_shard() && ps[0].dim() == 1) continue;  // a 1-D tensor has no dim 1
        const at::Tensor y = make(Y, mesh, ps).as_tensor().requires_grad_();
        const auto [v, i] = at::max(y, 0, keep);
        const at::Tensor yr = Y.clone().requires_grad_();
        const auto [vr, ir] = at::max(yr, 0, keep);
        EXPECT_TRUE(at::equal(full(i), ir)) << what;
        expect_close(full(v), vr.detach(), what);
        (v * 3).sum().backward();
        (vr * 3).sum().backward();
        expect_close(full(y.grad()), yr.grad(), "grad 1-D " + what);
      }
  });
}

TEST(MaxDim, PartialGradientStaysPartial) {
  // max of a Replicate input times a P(sum) factor: the gradient reaching max is P(sum), and
  // stays P(sum) in self's gradient (no bytes for it).
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6}), B = global_b({4});
    const at::Tensor x = make(X, mesh, {Replicate()}).as_tensor().requires_grad_();
    const at::Tensor b = make(B, mesh, {Partial()}).as_tensor();
    const at::Tensor xr = X.clone().requires_grad_();
    (std::get<0>(at::max(x, 1)) * b).sum().backward();
    (std::get<0>(at::max(xr, 1)) * B).sum().backward();
    expect_close(full(x.grad()), xr.grad(), "grad");
    EXPECT_EQ(as_dtensor(x.grad()).placements()[0], Partial());
  });
}

TEST(MaxDim, ShardedDimSendsCandidatesNotTheTensor) {
  // [16,512] doubles S(1) on 4 ranks, max over dim 1: each rank's candidates are 16 x (8 value
  // + 8 index + 1 flag) bytes, all_gathered: at most (n-1) x 272 bytes sent per rank, against
  // (n-1) x 16 x 128 x 8 = 49152 to gather the tensor.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const int64_t N = 16, C = 512, n = 4;
    const at::Tensor X = global_a({N, C});
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor().requires_grad_();
    const auto before = comm::stats(mesh);
    const auto [v, i] = at::max(x, 1);
    (void)i;
    v.sum().backward();
    const auto after = comm::stats(mesh);
    const int64_t sent = after.bytes_sent() - before.bytes_sent();
    EXPECT_GT(sent, 0);
    EXPECT_LE(sent, (n - 1) * N * 17) << after.to_string();
    EXPECT_EQ(as_dtensor(x.grad()).placements()[0], Shard(1));
    const at::Tensor xr = X.clone().requires_grad_();
    std::get<0>(at::max(xr, 1)).sum().backward();
    expect_close(full(x.grad()), xr.grad(), "grad");
  });
}

TEST(MaxDim, Errors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor().requires_grad_();
    std::string m = error_of<ValueError>([&] { (void)at::max(x, 2); });
    EXPECT_NE(m.find("aten::max.dim(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim=2 "
                     "keepdim=false: dim 2 out of range [-2, 1]"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::argmin(x, -3, true); });
    EXPECT_NE(m.find("aten::argmin(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim=-3 "
                     "keepdim=true: dim -3 out of range [-2, 1]"), std::string::npos) << m;
    const at::Tensor e = make(at::zeros({0, 3}, at::kDouble), mesh, {Shard(1)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::min(e, 0); });
    EXPECT_NE(m.find("aten::min.dim(arg 0: mesh=[2] placements=[S(1)] shape=[0,3]) dim=0 "
                     "keepdim=false: the reduced dim 0 has size 0"), std::string::npos) << m;
    const at::Tensor r = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    for (const char* op : {"max", "argmax"}) {
      m = error_of<NotImplementedError>([&] {
        if (std::string(op) == "max") (void)at::max(r, 1);
        else (void)at::argmax(r, 1);
      });
      EXPECT_NE(m.find(std::string("aten::") + (std::string(op) == "max" ? "max.dim" : "argmax") +
                       "(arg 0: mesh=[2] placements=[RS("),
                std::string::npos) << m;
      EXPECT_NE(m.find("shape=[6,4]) dim=1 keepdim=false: not implemented for a RaggedShard DTensor"),
                std::string::npos) << m;
    }
    // Double backward: refused (the backward's scatter is not recorded).
    const auto [v, i] = at::max(x, 1);
    (void)i;
    m = error_of<NotImplementedError>([&] { v.sum().backward({}, true, /*create_graph=*/true); });
    EXPECT_NE(m.find("aten::max.dim backward(arg 0: mesh=[2] placements=["), std::string::npos) << m;
    EXPECT_NE(m.find("arg 1: mesh=[2] placements=[S(0)] shape=[4]): double backward "
                     "(create_graph=true) through aten::max.dim of a DTensor is not implemented"),
              std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
