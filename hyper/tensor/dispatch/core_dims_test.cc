// Ops over core dims (dispatch/core_dims_kernels.h) and the view copies / rot90 / addmv / addr /
// addbmm decompositions (dispatch/decompositions.h): values and gradients against one device,
// the batch Shards kept with no bytes, a core-dim Shard gathered, several operands made
// whole, complex intermediates (the FFTs) carrying gradients, linalg errors raised alike on
// every rank, and the ValueErrors. (The op catalogue covers more layouts of det / svdvals /
// inv / matrix_exp, the *_copy views, rot90, addmv and addr.)
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::bytes_of;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

using Fn = std::function<at::Tensor(const at::Tensor&)>;

/// f on X laid out as ps: the output's values and X's gradient under (y * W).sum() equal one
/// device's.
void check(const DeviceMesh& mesh, const at::Tensor& X, const Placements& ps, const Fn& f,
           const std::string& what) {
  const at::Tensor xr = X.clone().requires_grad_();
  const at::Tensor want = f(xr);
  const at::Tensor w = global_b(want.sizes().vec());
  (want * w).sum().backward();
  const at::Tensor x = make(X, mesh, ps).as_tensor().requires_grad_();
  const at::Tensor y = f(x);
  expect_close(full(y), want.detach(), what);
  (y * make(w, mesh, Placements(ps.size(), Replicate())).as_tensor()).sum().backward();
  expect_close(full(x.grad()), xr.grad(), what + " grad");
}

at::Tensor well_conditioned(const std::vector<int64_t>& shape) {
  return at::linalg_matrix_exp(global_a(shape) * 0.2);
}

TEST(CoreDims, MatricesBatchedOverShardedLeadingDimsMoveNoBytes) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = well_conditioned({4, 3, 3});
    const std::vector<std::pair<std::string, Fn>> ops = {
        {"inv", [](const at::Tensor& t) { return at::linalg_inv(t); }},
        {"det", [](const at::Tensor& t) { return at::linalg_det(t); }},
        {"svdvals", [](const at::Tensor& t) { return at::linalg_svdvals(t); }},
        {"eigvalsh", [](const at::Tensor& t) { return at::linalg_eigvalsh(t + t.mT()); }},
        {"qr.R", [](const at::Tensor& t) { return std::get<1>(at::linalg_qr(t)); }},
        {"slogdet", [](const at::Tensor& t) { return std::get<1>(at::linalg_slogdet(t)); }},
        {"cholesky", [](const at::Tensor& t) {
           return at::linalg_cholesky(at::matmul(t, t.mT()) + at::eye(3, t.options()));
         }},
        {"matrix_exp", [](const at::Tensor& t) { return at::linalg_matrix_exp(t * 0.1); }},
        {"pinv", [](const at::Tensor& t) { return at::linalg_pinv(t); }},
    };
    for (const auto& [name, f] : ops)
      for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)},
                                   Placements{Shard(1)}, Placements{Shard(2)}, Placements{Partial()}})
        check(mesh, A, ps, f, name + " " + to_string(ps));
    // A batch Shard is kept: the output stays Shard(0) and nothing moves.
    const at::Tensor x = make(A, mesh, {Shard(0)}).as_tensor();
    at::Tensor inv;
    EXPECT_EQ(bytes_of(mesh, [&] { inv = std::get<0>(at::linalg_inv_ex(x)); }), 0);
    EXPECT_EQ(as_dtensor(inv).placements(), Placements{Shard(0)});
    at::Tensor det;
    EXPECT_EQ(bytes_of(mesh, [&] { det = at::linalg_det(x); }), 0);
    EXPECT_EQ(as_dtensor(det).placements(), Placements{Shard(0)});
    // Without gradients svdvals skips U and Vh (empty outputs, Replicate).
    {
      at::NoGradGuard no_grad;
      const at::Tensor S = at::linalg_svdvals(x);
      EXPECT_EQ(as_dtensor(S).placements(), Placements{Shard(0)});
      expect_close(full(S), at::linalg_svdvals(A), "svdvals without gradients");
    }
    // A Shard of a matrix dim is gathered (one all-gather of the tensor) and Replicate out.
    const at::Tensor xc = make(A, mesh, {Shard(2)}).as_tensor();
    at::Tensor inv2;
    EXPECT_GT(bytes_of(mesh, [&] { inv2 = std::get<0>(at::linalg_inv_ex(xc)); }), 0);
    EXPECT_EQ(as_dtensor(inv2).placements(), Placements{Replicate()});
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {  // uneven: 2,2,1,0 matrices
    const at::Tensor A = well_conditioned({5, 3, 3});
    check(mesh, A, {Shard(0)}, [](const at::Tensor& t) { return at::linalg_inv(t); }, "inv uneven");
    check(mesh, A, {Shard(0)}, [](const at::Tensor& t) { return at::linalg_svdvals(t); }, "svdvals uneven");
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    check(mesh, well_conditioned({4, 3, 3}), {Shard(0), Shard(2)},
          [](const at::Tensor& t) { return at::linalg_det(t); }, "det 2x2");
  });
}

TEST(CoreDims, SeveralOperandsAreMadeWhole) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = well_conditioned({4, 4});
    const at::Tensor B = global_b({4, 3});
    for (const Placements& pa : {Placements{Shard(0)}, Placements{Partial()}, Placements{Replicate()}})
      for (const Placements& pb : {Placements{Shard(1)}, Placements{Replicate()}}) {
        const std::string what = "solve " + to_string(pa) + " " + to_string(pb);
        const at::Tensor ar = A.clone().requires_grad_(), br = B.clone().requires_grad_();
        const at::Tensor want = at::linalg_solve(ar, br);
        const at::Tensor w = global_a({4, 3});
        (want * w).sum().backward();
        const at::Tensor a = make(A, mesh, pa).as_tensor().requires_grad_();
        const at::Tensor b = make(B, mesh, pb).as_tensor().requires_grad_();
        const at::Tensor y = at::linalg_solve(a, b);
        EXPECT_EQ(as_dtensor(y).placements(), Placements{Replicate()}) << what;
        expect_close(full(y), want.detach(), what);
        (y * w).sum().backward();
        expect_close(full(a.grad()), ar.grad(), what + " grad A");
        expect_close(full(b.grad()), br.grad(), what + " grad B");
      }
  });
}

TEST(CoreDims, FftGradientsThroughComplexIntermediates) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6, 8});
    const std::vector<std::pair<std::string, Fn>> ops = {
        {"rfft abs", [](const at::Tensor& t) { return at::abs(at::fft_rfft(t)); }},
        {"irfft", [](const at::Tensor& t) { return at::fft_irfft(t, 8); }},
        {"fft2 abs", [](const at::Tensor& t) { return at::abs(at::fft_fft2(t)); }},
        {"rfftn over 1,2", [](const at::Tensor& t) {
           return at::abs(at::fft_rfftn(t, std::nullopt, std::vector<int64_t>{1, 2}));
         }},
    };
    for (const auto& [name, f] : ops)
      for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(2)}})
        check(mesh, X, ps, f, name + " " + to_string(ps));
    // A transformed dim out of range: ValueError naming it (the op called directly).
    const at::Tensor scalar = make(at::scalar_tensor(2.0, at::kDouble), mesh, {Replicate()}).as_tensor();
    const std::string m = error_of<ValueError>([&] { (void)at::_fft_r2c(scalar, {0}, 0, true); });
    EXPECT_NE(m.find("aten::_fft_r2c: dim 0 out of range for a tensor of 0 dims"), std::string::npos) << m;
    // Shard(0) is not transformed: kept, no bytes.
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    at::Tensor y;
    EXPECT_EQ(bytes_of(mesh, [&] { y = at::fft_rfft(x); }), 0);
    EXPECT_EQ(as_dtensor(y).placements(), Placements{Shard(0)});
  });
}

TEST(CoreDims, LinalgErrorsAreRaisedOnEveryRank) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    // Only rank 1's matrix is singular; linalg.inv checks the gathered info, so both ranks
    // raise (ATen's message), and linalg.inv_ex reports it without raising.
    at::Tensor A = at::eye(3, at::kDouble).repeat({2, 1, 1});
    A[1].zero_();
    const at::Tensor x = make(A, mesh, {Shard(0)}).as_tensor();
    const std::string m = error_of<c10::Error>([&] { (void)at::linalg_inv(x); });
    EXPECT_NE(m.find("linalg.inv"), std::string::npos) << m;
    const auto [inv, info] = at::linalg_inv_ex(x);
    const at::Tensor got = full(info);
    EXPECT_TRUE(got[0].item<int>() == 0 && got[1].item<int>() > 0) << got;
  });
}

// view_as_real / view_as_complex (view_rules.cc): every placement kept (a trailing dim of 2
// appended or folded); a Shard of that trailing dim is refused by view_as_complex.
TEST(ViewAsReal, KeepsPlacementsAndRefusesASplitComplexNumber) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor C = at::complex(global_a({4, 6}), global_b({4, 6}));
    for (const Placements& ps : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()},
                                 Placements{Partial()}}) {
      const at::Tensor c = make(C, mesh, ps).as_tensor();
      const at::Tensor r = at::view_as_real(c);
      EXPECT_EQ(as_dtensor(r).placements(), ps) << to_string(ps);
      expect_close(full(r), at::view_as_real(C), "view_as_real " + to_string(ps));
      const at::Tensor back = at::view_as_complex(r);
      EXPECT_EQ(as_dtensor(back).placements(), ps) << to_string(ps);
      EXPECT_TRUE(at::allclose(full(back), C)) << to_string(ps);
    }
    const at::Tensor R = at::view_as_real(C).contiguous();  // [4, 6, 2]
    const at::Tensor split = make(R, mesh, {Shard(2)}).as_tensor();
    std::string m = error_of<NotImplementedError>([&] { (void)at::view_as_complex(split); });
    EXPECT_NE(m.find("aten::view_as_complex(arg 0: mesh=[2] placements=[S(2)] shape=[4,6,2]): "
                     "view_as_complex of a Shard of the last dim (real and imaginary parts on "
                     "different ranks) is not implemented"), std::string::npos) << m;
    const at::Tensor odd = make(global_a({4, 3}), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::view_as_complex(odd); });
    EXPECT_NE(m.find("Tensor must have a last dimension of size 2"), std::string::npos) << m;
  });
}

TEST(ViewCopies, ValuesGradientsAndTheViewsRefusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 1, 6});
    const std::vector<std::pair<std::string, Fn>> ops = {
        {"permute_copy", [](const at::Tensor& t) { return at::permute_copy(t, {2, 0, 1}); }},
        {"squeeze_copy.dim", [](const at::Tensor& t) { return at::squeeze_copy(t, 1); }},
        {"transpose_copy", [](const at::Tensor& t) { return at::transpose_copy(t, 0, 2); }},
        {"unsqueeze_copy", [](const at::Tensor& t) { return at::unsqueeze_copy(t, 0); }},
        {"narrow_copy", [](const at::Tensor& t) { return at::narrow_copy(t, 2, 1, 4); }},
        {"view_copy", [](const at::Tensor& t) { return at::view_copy(t, {4, 6}); }},
        {"expand_copy", [](const at::Tensor& t) { return at::expand_copy(t, {4, 3, 6}); }},
        {"unbind_copy[1]", [](const at::Tensor& t) { return at::unbind_copy(t, 2)[1]; }},
        {"rot90 k=1", [](const at::Tensor& t) { return at::rot90(t, 1, {0, 2}); }},
        {"rot90 k=3", [](const at::Tensor& t) { return at::rot90(t, 3, {2, 0}); }},
        {"rot90 k=-2", [](const at::Tensor& t) { return at::rot90(t, -2, {0, 2}); }},
    };
    for (const auto& [name, f] : ops)
      for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(2)},
                                   Placements{Partial()}})
        check(mesh, X, ps, f, name + " " + to_string(ps));
    // A copy is a new tensor: writing it leaves x alone.
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    at::permute_copy(x, {2, 0, 1}).mul_(0);
    expect_close(full(x), X, "x after writing its permute_copy");
    // The view's refusal holds: a sharded size-1 dim is not squeezed.
    const at::Tensor s1 = make(X, mesh, {Shard(1)}).as_tensor();
    std::string m = error_of<NotImplementedError>([&] { (void)at::squeeze_copy(s1, 1); });
    EXPECT_NE(m.find("squeeze of the sharded size-1 dim 1"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::rot90(x, 1, {0}); });
    EXPECT_NE(m.find("aten::rot90(arg 0: mesh=[2] placements=[S(0)] shape=[4,1,6]): expected total "
                     "rotation dims == 2, but got dims = 1"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::rot90(x, 1, {2, -1}); });
    EXPECT_NE(m.find("expected rotation dims to be different"), std::string::npos) << m;
  });
}

TEST(AddmvAddrAddbmm, ValuesGradientsAndErrors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor S = global_a({4, 6}), V1 = global_b({4}), M = global_b({4, 6});
    for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Partial()}})
      for (double beta : {1.0, 0.0, 0.5}) {
        const std::string what = to_string(ps) + " beta " + std::to_string(beta);
        check(mesh, M, ps, [&](const at::Tensor& m) {
          return at::addmv(at::ones({4}, at::kDouble), m, at::ones({6}, at::kDouble), beta, 2.0);
        }, "addmv " + what);
        check(mesh, S, ps, [&](const at::Tensor& s) {
          return at::addr(s, at::ones({4}, at::kDouble) * 0.5, at::ones({6}, at::kDouble), beta, 1.5);
        }, "addr " + what);
        check(mesh, global_a({3, 4, 5}), ps, [&](const at::Tensor& b1) {
          return at::addbmm(at::ones({4, 2}, at::kDouble), b1, global_b({3, 5, 2}), beta, 0.5);
        }, "addbmm " + what);
      }
    // beta 0 ignores self's NaN, as ATen.
    const at::Tensor nan_self = make(at::full({4}, NAN, at::kDouble), mesh, {Shard(0)}).as_tensor();
    const at::Tensor m = make(M, mesh, {Shard(0)}).as_tensor();
    expect_close(full(at::addmv(nan_self, m, at::ones({6}, at::kDouble), 0.0, 1.0)),
                 at::mv(M, at::ones({6}, at::kDouble)), "addmv beta 0 with a NaN self");
    const at::Tensor v = make(V1, mesh, {Shard(0)}).as_tensor();
    const std::string e = error_of<ValueError>([&] { (void)at::addr(m, m, v); });
    EXPECT_NE(e.find("Expected 1-D argument vec1 and vec2, but got 2-D and 1-D"), std::string::npos) << e;
  });
}

}  // namespace
}  // namespace hyper
