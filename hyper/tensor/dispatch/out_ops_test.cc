// out= overloads on DTensor tensors (dispatch/out_kernels.h): values equal the same
// op on the full tensors on one device for Replicate, Shard (even and uneven), Partial inputs
// on 2 and 4 ranks and a 2x2 mesh; out keeps its layout; out may alias an input; several
// outputs (native_layer_norm.out); the refusals (plain out, another shape, a dtype that cannot
// be cast).
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <functional>
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

/// An out= call: (out, a, b, w) -> writes out (a, b: [r,6]; w: [6,3]); its oracle on full tensors.
struct OutOp {
  std::string name;
  std::vector<int64_t> out_shape;  // for a [r,6] input a
  std::function<void(at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&)> f;
  std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)> oracle;
};

std::vector<OutOp> out_ops(int64_t r) {
  using T = at::Tensor;
  return {
      {"add.out", {r, 6}, [](T& o, const T& a, const T& b, const T&) { at::add_out(o, a, b); },
       [](const T& a, const T& b, const T&) { return a + b; }},
      {"add.out alpha", {r, 6}, [](T& o, const T& a, const T& b, const T&) { at::add_out(o, a, b, 0.5); },
       [](const T& a, const T& b, const T&) { return a + 0.5 * b; }},
      {"sub.out", {r, 6}, [](T& o, const T& a, const T& b, const T&) { at::sub_out(o, a, b); },
       [](const T& a, const T& b, const T&) { return a - b; }},
      {"mul.out", {r, 6}, [](T& o, const T& a, const T& b, const T&) { at::mul_out(o, a, b); },
       [](const T& a, const T& b, const T&) { return a * b; }},
      {"div.out", {r, 6}, [](T& o, const T& a, const T& b, const T&) { at::div_out(o, a, b); },
       [](const T& a, const T& b, const T&) { return a / b; }},
      {"exp.out", {r, 6}, [](T& o, const T& a, const T&, const T&) { at::exp_out(o, a); },
       [](const T& a, const T&, const T&) { return a.exp(); }},
      {"clamp.out", {r, 6}, [](T& o, const T& a, const T&, const T&) { at::clamp_out(o, a, -1.0, 1.5); },
       [](const T& a, const T&, const T&) { return a.clamp(-1.0, 1.5); }},
      {"sum.IntList_out", {r}, [](T& o, const T& a, const T&, const T&) { at::sum_out(o, a, {1}); },
       [](const T& a, const T&, const T&) { return a.sum({1}); }},
      {"amax.out", {6}, [](T& o, const T& a, const T&, const T&) { at::amax_out(o, a, {0}); },
       [](const T& a, const T&, const T&) { return a.amax({0}); }},
      {"mm.out", {r, 3}, [](T& o, const T& a, const T&, const T& w) { at::mm_out(o, a, w); },
       [](const T& a, const T&, const T& w) { return at::mm(a, w); }},
  };
}

/// Every out op, inputs a (placements pa) and b (pb), out (po) on `mesh`: values vs one device,
/// out's layout kept, the returned tensor is out.
void out_cases(const std::vector<int64_t>& mesh_shape, int64_t rows,
               const std::vector<Placements>& ins, const std::vector<Placements>& outs) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({rows, 6}), B = global_b({rows, 6}), W = global_b({6, 3});
    for (const auto& op : out_ops(rows))
      for (const auto& pa : ins)
        for (const auto& pb : ins)
          for (const auto& po : outs) {
            const std::string what = op.name + " " + to_string(pa) + " " + to_string(pb) + " out " +
                                     to_string(po) + " on " + std::to_string(mesh.size()) + " ranks";
            bool shardable = true;
            for (const auto& q : po)
              shardable = shardable && !(q.is_shard() && q.dim() >= static_cast<int64_t>(op.out_shape.size()));
            if (!shardable) continue;
            const at::Tensor a = make(A, mesh, pa).as_tensor(), b = make(B, mesh, pb).as_tensor();
            const at::Tensor w = make(W, mesh, pb).as_tensor();
            at::Tensor out = make(at::zeros(op.out_shape, at::kDouble), mesh, po).as_tensor();
            const Layout before = as_dtensor(out).layout();
            try {
              op.f(out, a, b, w);
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
              continue;
            }
            EXPECT_EQ(as_dtensor(out).layout(), before) << what;
            expect_close(full(out), op.oracle(A, B, W), what);
          }
  });
}

TEST(OutOps, ValuesEqualOneDeviceOn2Ranks) {
  out_cases({2}, 4, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}},
            {{Replicate()}, {Shard(0)}, {Partial()}});
}
TEST(OutOps, ValuesEqualOneDeviceOn4RanksUneven) {
  // [5,6] rows 2,2,1,0 under S(0) (an empty shard); amax.out over it fills the identity.
  out_cases({4}, 5, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}},
            {{Replicate()}, {Shard(0)}, {Partial()}});
}
TEST(OutOps, ValuesEqualOneDeviceOn2x2Mesh) {
  out_cases({2, 2}, 4, {{Shard(0), Shard(1)}, {Replicate(), Partial()}, {Partial(), Shard(0)}},
            {{Shard(0), Replicate()}, {Replicate(), Shard(0)}, {Partial(), Replicate()}});
}

TEST(OutOps, ReturnsOutAndItAliasesAnInput) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6}), B = global_b({5, 6});
    for (const auto& pa : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(1)}}) {
      const std::string what = to_string(pa);
      at::Tensor a = make(A, mesh, pa).as_tensor();
      const at::Tensor b = make(B, mesh, {Shard(0)}).as_tensor();
      const auto* impl = a.unsafeGetTensorImpl();
      at::Tensor& r = at::add_out(a, a, b);  // out is self: the result is computed first
      EXPECT_EQ(r.unsafeGetTensorImpl(), impl) << what;
      EXPECT_EQ(as_dtensor(a).placements(), pa) << what;
      expect_close(full(a), A + B, "add_out(a, a, b) " + what);
      at::mul_out(a, b, a);  // out is the second operand
      expect_close(full(a), B * (A + B), "mul_out(a, b, a) " + what);
      at::exp_out(a, a);
      expect_close(full(a), (B * (A + B)).exp(), "exp_out(a, a) " + what);
      // mm_out into a [5,5] out from b and a view of b.
      at::Tensor sq = make(at::zeros({5, 5}, at::kDouble), mesh, pa).as_tensor();
      at::mm_out(sq, b, b.t());
      expect_close(full(sq), at::mm(B, B.t()), "mm_out " + what);
    }
  });
}

TEST(OutOps, SeveralOutputsNativeLayerNorm) {
  // native_layer_norm.out(input, normalized_shape, weight, bias, eps, *, out0, out1, out2):
  // native_layer_norm's kernel (nn_kernels.h), then each out copied.
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6}), W = global_b({6}), Bi = global_a({6});
    const auto want = at::native_layer_norm(X, {6}, W, Bi, 1e-5);
    for (const auto& px : std::vector<Placements>{{Replicate()}, {Shard(0)}}) {
      const std::string what = "native_layer_norm_out " + to_string(px);
      const at::Tensor x = make(X, mesh, px).as_tensor();
      const at::Tensor w = make(W, mesh, {Replicate()}).as_tensor();
      const at::Tensor bi = make(Bi, mesh, {Replicate()}).as_tensor();
      at::Tensor o0 = make(at::zeros({4, 6}, at::kDouble), mesh, {Shard(0)}).as_tensor();
      at::Tensor o1 = make(at::zeros({4, 1}, at::kDouble), mesh, {Replicate()}).as_tensor();
      at::Tensor o2 = make(at::zeros({4, 1}, at::kDouble), mesh, {Shard(0)}).as_tensor();
      at::native_layer_norm_out(o0, o1, o2, x, {6}, w, bi, 1e-5);
      expect_close(full(o0), std::get<0>(want), what + " out0");
      expect_close(full(o1), std::get<1>(want), what + " out1");
      expect_close(full(o2), std::get<2>(want), what + " out2");
      EXPECT_EQ(as_dtensor(o0).placements(), (Placements{Shard(0)})) << what;
      EXPECT_EQ(as_dtensor(o1).placements(), (Placements{Replicate()})) << what;
    }
  });
}

// addmm_ / baddbmm_ (in-place on a DTensor self): addmm then copy_ into self, whose layout is
// kept; values and gradients (through a clone of a leaf) vs one device.
TEST(OutOps, AddmmInPlaceValuesAndGradients) {
  for (const std::vector<int64_t>& ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      const at::Tensor S = global_a({5, 3}), M1 = global_b({5, 6}), M2 = global_a({6, 3});
      std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
      if (mesh.topology().ndim() == 2) cat = {{Shard(0), Shard(1)}, {Replicate(), Partial()}, {Partial(), Shard(0)}};
      for (const auto& ps : cat)
        for (const auto& p1 : cat)
          for (const auto& p2 : cat) {
            const std::string what = "addmm_ " + to_string(ps) + " " + to_string(p1) + " " +
                                     to_string(p2) + " on " + std::to_string(mesh.size());
            const at::Tensor sr = S.clone().requires_grad_(), m1r = M1.clone().requires_grad_(),
                             m2r = M2.clone().requires_grad_();
            at::Tensor yr = sr.clone();
            yr.addmm_(m1r, m2r, 0.5, 2.0);
            (yr * global_b({5, 3})).sum().backward();
            const at::Tensor s = make(S, mesh, ps).as_tensor().requires_grad_();
            const at::Tensor m1 = make(M1, mesh, p1).as_tensor().requires_grad_();
            const at::Tensor m2 = make(M2, mesh, p2).as_tensor().requires_grad_();
            at::Tensor y = s.clone();
            const Placements before = as_dtensor(y).placements();
            try {
              at::Tensor& r = y.addmm_(m1, m2, 0.5, 2.0);
              EXPECT_EQ(r.unsafeGetTensorImpl(), y.unsafeGetTensorImpl()) << what;
              EXPECT_EQ(as_dtensor(y).placements(), before) << what;
              expect_close(full(y), yr.detach(), what);
              (y * make(global_b({5, 3}), mesh, Placements(ps.size(), Replicate())).as_tensor()).sum().backward();
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
              continue;
            }
            expect_close(full(s.grad()), sr.grad(), "grad self " + what);
            expect_close(full(m1.grad()), m1r.grad(), "grad mat1 " + what);
            expect_close(full(m2.grad()), m2r.grad(), "grad mat2 " + what);
          }
      // baddbmm_ values.
      const at::Tensor B = global_a({4, 2, 3}), X1 = global_b({4, 2, 5}), X2 = global_a({4, 5, 3});
      at::Tensor b = make(B, mesh, Placements(mesh.topology().ndim(), Shard(0))).as_tensor();
      b.baddbmm_(make(X1, mesh, Placements(mesh.topology().ndim(), Replicate())).as_tensor(),
                 make(X2, mesh, Placements(mesh.topology().ndim(), Shard(0))).as_tensor());
      expect_close(full(b), at::baddbmm(B, X1, X2), "baddbmm_");
      EXPECT_EQ(as_dtensor(b).placements(), Placements(mesh.topology().ndim(), Shard(0)));
    });
}

TEST(OutOps, RefusalsNameTheOpAndLayouts) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    const at::Tensor a = make(A, mesh, {Shard(0)}).as_tensor();
    // A plain out beside DTensor inputs.
    at::Tensor plain = at::zeros({4, 6}, at::kDouble);
    std::string m = error_of<NotImplementedError>([&] { at::add_out(plain, a, a); });
    EXPECT_NE(m.find("aten::add.out(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: mesh=[2] "
                     "placements=[S(0)] shape=[4,6]; arg 2: plain tensor shape=[4,6]): out argument "
                     "'out' is a plain tensor beside DTensor inputs (ATen would write the rank's "
                     "local result into it, resizing it"),
              std::string::npos) << m;
    EXPECT_TRUE(at::equal(plain, at::zeros({4, 6}, at::kDouble)));  // untouched
    // An out of another global shape (ATen would resize it).
    at::Tensor small = make(at::zeros({2, 6}, at::kDouble), mesh, {Replicate()}).as_tensor();
    m = error_of<NotImplementedError>([&] { at::exp_out(small, a); });
    EXPECT_NE(m.find("aten::exp.out(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: mesh=[2] "
                     "placements=[R] shape=[2,6]): out 0 has global shape [2,6] but the result's is "
                     "[4,6] (ATen would resize out; resizing a DTensor is not implemented"),
              std::string::npos) << m;
    // A result dtype that cannot be cast to out's (double into long): ValueError, as ATen.
    at::Tensor lng = make(at::zeros({4, 6}, at::kLong), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { at::mul_out(lng, a, a); });
    EXPECT_NE(m.find("aten::mul.out(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: mesh=[2] "
                     "placements=[S(0)] shape=[4,6]; arg 2: mesh=[2] placements=[S(0)] "
                     "shape=[4,6]): result type Double can't be cast to out 0's dtype Long"),
              std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(lng), at::zeros({4, 6}, at::kLong)));
    // An out= op whose functional op has no rule (complex.out) stays refused, out unwritten.
    at::Tensor cs = make(at::zeros({4, 6}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    m = error_of<NotImplementedError>([&] { at::complex_out(cs, a, a); });
    EXPECT_NE(m.find("no sharding rule for aten::complex.out("), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(cs), at::zeros({4, 6}, at::kDouble)));
    // bucketize.Tensor_out: its functional op is served (decompositions.h), out keeps its layout.
    at::Tensor bo = make(at::zeros({4, 6}, at::kLong), mesh, {Shard(0)}).as_tensor();
    at::bucketize_out(bo, a, at::arange(3, at::kDouble));
    EXPECT_EQ(as_dtensor(bo).placements(), Placements{Shard(0)});
    EXPECT_TRUE(at::equal(full(bo), at::bucketize(global_a({4, 6}), at::arange(3, at::kDouble))));
    // ... into an out of the index dtype out_int32 names only (ATen's rule): a Double out, or a
    // Long out with out_int32, is a ValueError naming both, out unwritten.
    at::Tensor bd = make(at::zeros({4, 6}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { at::bucketize_out(bd, a, at::arange(3, at::kDouble)); });
    EXPECT_NE(m.find("aten::bucketize.Tensor_out("), std::string::npos) << m;
    EXPECT_NE(m.find("bucketize.Tensor_out out's dtype must be Long (out_int32 is false), got "
                     "Double"), std::string::npos) << m;
    m = error_of<ValueError>([&] { at::searchsorted_out(bo, at::arange(3, at::kDouble), a, true); });
    EXPECT_NE(m.find("searchsorted.Tensor_out out's dtype must be Int (out_int32 is true), got "
                     "Long"), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(bd), at::zeros({4, 6}, at::kDouble)));
    EXPECT_TRUE(at::equal(full(bo), at::bucketize(global_a({4, 6}), at::arange(3, at::kDouble))));
    at::Tensor bi = make(at::zeros({4, 6}, at::kInt), mesh, {Shard(1)}).as_tensor();
    at::searchsorted_out(bi, at::arange(3, at::kDouble), a, true);
    EXPECT_TRUE(at::equal(full(bi), at::searchsorted(at::arange(3, at::kDouble), global_a({4, 6}), true)));
    // addmm_ on a plain self with DTensor operands.
    at::Tensor ps = at::zeros({4, 4}, at::kDouble);
    m = error_of<NotImplementedError>([&] { ps.addmm_(a, a.t()); });
    EXPECT_NE(m.find("aten::addmm_(arg 0: plain tensor shape=[4,4]; arg 1: mesh=[2] placements=[S(0)] "
                     "shape=[4,6]; arg 2: mesh=[2] placements=[S(1)] shape=[6,4]): in-place op on a "
                     "plain tensor with a DTensor operand"),
              std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
