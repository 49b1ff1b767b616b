// nn ops on DTensor tensors (nn_rules.h, nn_kernels.h): softmax / log_softmax, layer_norm,
// the unary pointwise ops of activations and norms, mean / var / std / linalg_vector_norm,
// against the same op on the full tensors on one device (the oracle): values and gradients,
// Replicate / Shard / uneven Shard / Partial on 2 and 4 ranks and a 2x2 mesh, the output
// layouts, and every refusal. Ends with a transformer block (torch::nn LayerNorm and Linear,
// softmax attention, GELU MLP) whose loss and gradients equal the single-device run.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/nn_rules.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch::ArgLayout;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

Layout lay(const std::string& text) { return Layout::from_string(text); }
std::vector<Placements> catalogue_1d() {
  return {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("avg")}};
}
Placements placements_of(const at::Tensor& t) { return as_dtensor(t).placements(); }

// ---- torch-free rule cases -------------------------------------------------------------

std::string softmax_of(const std::vector<std::string>& in, int64_t dim) {
  std::vector<ArgLayout> args;
  for (const auto& s : in) args.push_back(ArgLayout::of(lay(s)));
  const auto p = dispatch::propagate_softmax("aten::_softmax", args, dim);
  std::string s;
  for (const auto& i : p.inputs) s += i->to_string() + "; ";
  return s + "-> " + p.output.to_string();
}

TEST(NnOpsRule, SoftmaxKeepsShardsAndReducesPartial) {
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[S(0)] shape=[5,7]"}, 1),
            "mesh=[2] placements=[S(0)] shape=[5,7]; -> mesh=[2] placements=[S(0)] shape=[5,7]");
  // A Shard of the softmax dim is kept too (loss_parallel: loss_kernels.h all_reduces the row
  // max and sums across it).
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[S(1)] shape=[5,7]"}, -1),
            "mesh=[2] placements=[S(1)] shape=[5,7]; -> mesh=[2] placements=[S(1)] shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2,2] placements=[S(1),S(0)] shape=[5,7]"}, 1),
            "mesh=[2,2] placements=[S(1),S(0)] shape=[5,7]; -> mesh=[2,2] placements=[S(1),S(0)] "
            "shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[P(sum)] shape=[5,7]"}, 0),
            "mesh=[2] placements=[R] shape=[5,7]; -> mesh=[2] placements=[R] shape=[5,7]");
  // Backward: a Partial grad stays Partial (linear in it) beside a Replicate output; beside a
  // sharded output it is reduce-scattered; the grad's Shard is used when the output has none.
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[P(sum)] shape=[5,7]",
                        "mesh=[2] placements=[R] shape=[5,7]"}, 1),
            "mesh=[2] placements=[P(sum)] shape=[5,7]; mesh=[2] placements=[R] shape=[5,7]; -> "
            "mesh=[2] placements=[P(sum)] shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[P(sum)] shape=[5,7]",
                        "mesh=[2] placements=[S(0)] shape=[5,7]"}, 1),
            "mesh=[2] placements=[S(0)] shape=[5,7]; mesh=[2] placements=[S(0)] shape=[5,7]; -> "
            "mesh=[2] placements=[S(0)] shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[S(0)] shape=[5,7]",
                        "mesh=[2] placements=[R] shape=[5,7]"}, 1),
            "mesh=[2] placements=[S(0)] shape=[5,7]; mesh=[2] placements=[S(0)] shape=[5,7]; -> "
            "mesh=[2] placements=[S(0)] shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[S(1)] shape=[5,7]",
                        "mesh=[2] placements=[S(1)] shape=[5,7]"}, 1),
            "mesh=[2] placements=[S(1)] shape=[5,7]; mesh=[2] placements=[S(1)] shape=[5,7]; -> "
            "mesh=[2] placements=[S(1)] shape=[5,7]");
  EXPECT_EQ(softmax_of({"mesh=[2] placements=[S(1)] shape=[5,7]",
                        "mesh=[2] placements=[R] shape=[5,7]"}, 1),
            "mesh=[2] placements=[S(1)] shape=[5,7]; mesh=[2] placements=[S(1)] shape=[5,7]; -> "
            "mesh=[2] placements=[S(1)] shape=[5,7]");
  std::string m = error_of<ValueError>([] { softmax_of({"mesh=[2] placements=[R] shape=[5,7]"}, 2); });
  EXPECT_NE(m.find("aten::_softmax(arg 0: mesh=[2] placements=[R] shape=[5,7]): dim 2 out of "
                   "range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
  m = error_of<ValueError>([] {
    softmax_of({"mesh=[2] placements=[R] shape=[5,7]", "mesh=[2] placements=[R] shape=[5,6]"}, 1);
  });
  EXPECT_NE(m.find("operands of different shapes"), std::string::npos) << m;
  m = error_of<NotImplementedError>([] {
    (void)dispatch::propagate_softmax("aten::_softmax_backward_data",
                                      {ArgLayout::plain({5, 7}),
                                       ArgLayout::of(lay("mesh=[2] placements=[R] shape=[5,7]"))}, 1);
  });
  EXPECT_NE(m.find("aten::_softmax_backward_data(arg 0: plain tensor shape=[5,7]; arg 1: mesh=[2] "
                   "placements=[R] shape=[5,7]): argument 0 is a plain tensor beside a DTensor"),
            std::string::npos) << m;
}

TEST(NnOpsRule, LayerNormLayouts) {
  const auto w = ArgLayout::of(lay("mesh=[2,2] placements=[S(0),P(sum)] shape=[6]"));
  const auto p = dispatch::propagate_layer_norm(
      "aten::native_layer_norm", ArgLayout::of(lay("mesh=[2,2] placements=[S(1),S(2)] shape=[4,3,6]")),
      {6}, w, std::nullopt);
  EXPECT_EQ(p.input.to_string(), "mesh=[2,2] placements=[S(1),R] shape=[4,3,6]");
  EXPECT_EQ(p.out, p.input);
  EXPECT_EQ(p.stats.to_string(), "mesh=[2,2] placements=[S(1),R] shape=[4,3,1]");
  EXPECT_EQ(p.weight->to_string(), "mesh=[2,2] placements=[R,R] shape=[6]");
  EXPECT_FALSE(p.bias.has_value());
  // Normalized over [3,6]: S(1) is gathered too; the stats are [4,1,1].
  const auto q = dispatch::propagate_layer_norm(
      "aten::native_layer_norm", ArgLayout::of(lay("mesh=[2] placements=[S(1)] shape=[4,3,6]")),
      {3, 6}, std::nullopt, std::nullopt);
  EXPECT_EQ(q.input.to_string(), "mesh=[2] placements=[R] shape=[4,3,6]");
  EXPECT_EQ(q.stats.to_string(), "mesh=[2] placements=[R] shape=[4,1,1]");
  // Backward: the input's leading Shard gives Partial(sum) parameter gradients; a Partial
  // grad_out beside a Replicate input stays Partial everywhere.
  const auto b = dispatch::propagate_layer_norm_backward(
      "aten::native_layer_norm_backward",
      ArgLayout::of(lay("mesh=[2,2] placements=[P(sum),P(sum)] shape=[4,3,6]")),
      ArgLayout::of(lay("mesh=[2,2] placements=[S(0),R] shape=[4,3,6]")), {6},
      ArgLayout::of(lay("mesh=[2,2] placements=[S(0),R] shape=[4,3,1]")),
      ArgLayout::of(lay("mesh=[2,2] placements=[S(0),R] shape=[4,3,1]")), std::nullopt, std::nullopt);
  EXPECT_EQ(b.grad_out.to_string(), "mesh=[2,2] placements=[S(0),P(sum)] shape=[4,3,6]");
  EXPECT_EQ(b.grad_input.to_string(), "mesh=[2,2] placements=[S(0),P(sum)] shape=[4,3,6]");
  EXPECT_EQ(b.grad_param.to_string(), "mesh=[2,2] placements=[P(sum),P(sum)] shape=[6]");
  EXPECT_EQ(b.stats.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[4,3,1]");
  // An operand on another mesh than the first DTensor's (layout_or_replicate, sharding_rule.h).
  const std::string mm = error_of<ValueError>([] {
    dispatch::propagate_layer_norm_backward(
        "aten::native_layer_norm_backward",
        ArgLayout::of(lay("mesh=[2] placements=[R] shape=[4,6]")),
        ArgLayout::of(lay("mesh=[4] placements=[R] shape=[4,6]")), {6},
        ArgLayout::of(lay("mesh=[2] placements=[R] shape=[4,1]")),
        ArgLayout::of(lay("mesh=[2] placements=[R] shape=[4,1]")), std::nullopt, std::nullopt);
  });
  EXPECT_NE(mm.find("aten::native_layer_norm_backward("), std::string::npos) << mm;
  EXPECT_NE(mm.find(": DTensor operands on different meshes"), std::string::npos) << mm;
  // Errors: normalized_shape not trailing; weight of another shape; a ragged input.
  std::string m = error_of<ValueError>([] {
    dispatch::propagate_layer_norm("aten::native_layer_norm",
                                   ArgLayout::of(lay("mesh=[2] placements=[R] shape=[4,6]")), {4},
                                   std::nullopt, std::nullopt);
  });
  EXPECT_NE(m.find("aten::native_layer_norm(arg 0: mesh=[2] placements=[R] shape=[4,6]) "
                   "normalized_shape=[4]: normalized_shape [4] is not the input's trailing dims"),
            std::string::npos) << m;
  m = error_of<ValueError>([] {
    dispatch::propagate_layer_norm("aten::native_layer_norm",
                                   ArgLayout::of(lay("mesh=[2] placements=[R] shape=[4,6]")), {6},
                                   ArgLayout::of(lay("mesh=[2] placements=[R] shape=[5]")), std::nullopt);
  });
  EXPECT_NE(m.find("weight shape [5] differs from normalized_shape [6]"), std::string::npos) << m;
  m = error_of<NotImplementedError>([] {
    dispatch::propagate_layer_norm(
        "aten::native_layer_norm",
        ArgLayout::of(lay("mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]")), {4},
        std::nullopt, std::nullopt);
  });
  EXPECT_NE(m.find("the input is a RaggedShard DTensor (fail-closed"), std::string::npos) << m;
}

// ---- softmax ----------------------------------------------------------------------------

TEST(NnOps, SoftmaxValuesGradientsAndLayouts) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 7}), W = global_b({5, 7});
      for (bool log : {false, true})
        for (int64_t dim : {1, 0, -1})
          for (const auto& p : catalogue_1d())
            for (const auto& pw : std::vector<Placements>{{Replicate()}, {Partial()}, {Shard(0)}}) {
              auto f = [&](const at::Tensor& x) {
                return log ? at::log_softmax(x, dim) : at::softmax(x, dim);
              };
              const std::string what = std::string(log ? "log_softmax" : "softmax") + " dim " +
                                       std::to_string(dim) + " " + to_string(p) + " w " +
                                       to_string(pw) + " on " + std::to_string(mesh.size());
              const at::Tensor xr = A.clone().requires_grad_();
              (f(xr) * W).sum().backward();
              at::Tensor x = make(A, mesh, p).as_tensor().requires_grad_();
              const at::Tensor y = f(x);
              expect_close(full(y), f(A), what);
              // A Shard is kept (off the softmax dim: the local op on the local rows; on it:
              // loss_parallel, loss_kernels.h); a Partial is Replicate.
              const int64_t d = (dim + 2) % 2;
              const Placement want = p[0].is_shard() ? p[0] : Replicate();
              EXPECT_EQ(placements_of(y)[0], want) << what;
              if (p[0].is_shard() && p[0].dim() != d)
                expect_close(as_dtensor(y).to_local(), f(as_dtensor(x).to_local()), "local " + what);
              (y * make(W, mesh, pw).as_tensor()).sum().backward();
              expect_close(full(x.grad()), xr.grad(), "grad " + what);
            }
    });
}

TEST(NnOps, SoftmaxBackwardKeepsAPartialGradient) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 7}), G = global_b({5, 7});
    for (bool log : {false, true}) {
      const at::Tensor Y = log ? at::log_softmax(A, 1) : at::softmax(A, 1);
      const at::Tensor want = log ? at::_log_softmax_backward_data(G, Y, 1, at::kDouble)
                                  : at::_softmax_backward_data(G, Y, 1, at::kDouble);
      const at::Tensor y = make(Y, mesh, {Replicate()}).as_tensor();
      const at::Tensor g = make(G, mesh, {Partial()}).as_tensor();
      const at::Tensor got = log ? at::_log_softmax_backward_data(g, y, 1, at::kDouble)
                                 : at::_softmax_backward_data(g, y, 1, at::kDouble);
      EXPECT_EQ(placements_of(got)[0], Partial()) << log;
      expect_close(full(got), want, log ? "log_softmax backward" : "softmax backward");
    }
  });
}

TEST(NnOps, Softmax2x2MeshAndRefusals) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    for (const Placements& p : std::vector<Placements>{{Shard(0), Shard(1)}, {Shard(1), Partial()},
                                                        {Shard(0), Shard(0)}}) {
      at::Tensor x = make(A, mesh, p).as_tensor().requires_grad_();
      const at::Tensor xr = A.clone().requires_grad_();
      (at::softmax(xr, 1) * at::tanh(xr)).sum().backward();
      const at::Tensor y = at::softmax(x, 1);
      expect_close(full(y), at::softmax(A, 1), "2x2 " + to_string(p));
      (y * at::tanh(x)).sum().backward();
      expect_close(full(x.grad()), xr.grad(), "2x2 grad " + to_string(p));
      if (p[0] == Shard(0)) {
        EXPECT_EQ(placements_of(y)[0], Shard(0));
      }
    }
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    const std::string m = error_of<NotImplementedError>([&] { (void)at::softmax(a, 1); });
    EXPECT_NE(m.find("aten::_softmax(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]): "
                     "argument 0 is a RaggedShard DTensor (fail-closed"),
              std::string::npos) << m;
  });
}

// ---- layer_norm -------------------------------------------------------------------------

/// layer_norm over the trailing `norm` dims of `shape`, input in every placement of `cat`,
/// weight / bias in `pw` (or none): values of out, gradients of input, weight and bias against
/// the single-device op; output layouts.
void layer_norm_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat,
                      const std::vector<Placements>& cat_w, const std::vector<int64_t>& shape,
                      const std::vector<int64_t>& norm) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a(shape), G = global_b(shape);
    const at::Tensor W = global_b(norm) - 1, B = global_a(norm) * 0.5;
    const int64_t axis = static_cast<int64_t>(shape.size() - norm.size());
    for (const auto& px : cat)
      for (const auto& pw : cat_w)
        for (bool affine : {true, false}) {
          if (!affine && pw != cat_w.front()) continue;
          const std::string what = "x " + to_string(px) + " w " + to_string(pw) +
                                   (affine ? "" : " no affine") + " mesh " + std::to_string(mesh.size());
          const at::Tensor xr = X.clone().requires_grad_(), wr = W.clone().requires_grad_(),
                           br = B.clone().requires_grad_();
          const at::Tensor yr = affine ? at::layer_norm(xr, norm, wr, br, 1e-5)
                                       : at::layer_norm(xr, norm, {}, {}, 1e-5);
          (yr * G).sum().backward();
          at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
          at::Tensor w = make(W, mesh, pw).as_tensor().requires_grad_();
          at::Tensor b = make(B, mesh, pw).as_tensor().requires_grad_();
          const at::Tensor y = affine ? at::layer_norm(x, norm, w, b, 1e-5)
                                      : at::layer_norm(x, norm, {}, {}, 1e-5);
          expect_close(full(y), yr.detach(), "layer_norm " + what);
          // Leading Shards kept, normalized-dim Shards and Partials made Replicate.
          Placements want = px;
          for (auto& q : want)
            if (q.is_partial() || (q.is_shard() && q.dim() >= axis)) q = Replicate();
          EXPECT_EQ(placements_of(y), want) << what;
          (y * make(G, mesh, px).as_tensor()).sum().backward();
          expect_close(full(x.grad()), xr.grad(), "grad x " + what);
          if (affine) {
            expect_close(full(w.grad()), wr.grad(), "grad w " + what);
            expect_close(full(b.grad()), br.grad(), "grad b " + what);
            // Partial(sum) where the input's leading dims are sharded (each rank summed its rows).
            for (size_t m = 0; m < px.size(); ++m)
              if (px[m].is_shard() && px[m].dim() < axis) {
                EXPECT_EQ(placements_of(w.grad())[m], Partial()) << what;
                EXPECT_EQ(placements_of(b.grad())[m], Partial()) << what;
              }
          } else {
            EXPECT_FALSE(w.grad().defined());
          }
        }
  });
}

// A LayerNorm whose parameters were not distributed: its plain weight and bias beside a
// DTensor input act as Replicate (API.md); the values and the input gradient equal one
// device, and the plain parameters receive DTensor gradients whose full tensors do too.
TEST(NnOps, LayerNormWithPlainWeightAndBias) {
  for (int n : {2, 4})
    run_on_mesh({n}, [](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({3, 5, 8}), G = global_b({3, 5, 8});
      for (const Placements& px : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Partial()},
                                   Placements{Replicate()}}) {
        const std::string what = "x " + to_string(px) + " on " + std::to_string(mesh.size());
        const at::Tensor wr = (global_b({8}) - 1).requires_grad_(), br = (global_a({8}) * 0.5).requires_grad_();
        const at::Tensor xr = X.clone().requires_grad_();
        (at::layer_norm(xr, {8}, wr, br, 1e-5) * G).sum().backward();
        const at::Tensor w = (global_b({8}) - 1).requires_grad_(), b = (global_a({8}) * 0.5).requires_grad_();
        const at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
        const at::Tensor y = at::layer_norm(x, {8}, w, b, 1e-5);
        expect_close(full(y), at::layer_norm(X, {8}, wr, br, 1e-5).detach(), "layer_norm " + what);
        (y * make(G, mesh, px).as_tensor()).sum().backward();
        expect_close(full(x.grad()), xr.grad(), "grad x " + what);
        ASSERT_TRUE(is_dtensor(w.grad())) << what;
        expect_close(full(w.grad()), wr.grad(), "grad w " + what);
        expect_close(full(b.grad()), br.grad(), "grad b " + what);
      }
    });
}

TEST(NnOps, LayerNormOn2Ranks) {
  layer_norm_cases({2}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()}},
                   {{Replicate()}, {Shard(0)}, {Partial()}}, {4, 3, 6}, {6});
}
TEST(NnOps, LayerNormOn4RanksUnevenAndEmptyShards) {
  // [5,3,6] S(0) on 4 ranks: rows 2,2,1,0 (rank 3 holds none).
  layer_norm_cases({4}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial("avg")}},
                   {{Replicate()}, {Shard(0)}}, {5, 3, 6}, {6});
  layer_norm_cases({4}, {{Shard(0)}, {Shard(1)}, {Partial()}}, {{Replicate()}}, {5, 3, 6}, {3, 6});
}
TEST(NnOps, LayerNorm2x2Mesh) {
  layer_norm_cases({2, 2}, {{Shard(0), Shard(1)}, {Shard(2), Shard(0)}, {Partial(), Shard(1)}},
                   {{Replicate(), Replicate()}, {Shard(0), Partial()}}, {4, 3, 6}, {6});
}

TEST(NnOps, LayerNormStatsLayoutsAndRefusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 3, 6}), W = global_b({6});
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    const at::Tensor w = make(W, mesh, {Replicate()}).as_tensor();
    auto [o, mean, rstd] = at::native_layer_norm(x, {6}, w, {}, 1e-5);
    auto [ro, rmean, rrstd] = at::native_layer_norm(X, {6}, W, {}, 1e-5);
    EXPECT_EQ(as_dtensor(mean).layout().to_string(), "mesh=[2] placements=[S(1)] shape=[4,3,1]");
    expect_close(full(mean), rmean, "mean");
    expect_close(full(rstd), rrstd, "rstd");
    expect_close(full(o), ro, "out");
    // The backward with a Replicate input and a row-sharded gradient: the input is sliced to
    // the gradient's rows (no bytes), grad_weight / grad_bias are P(sum).
    const at::Tensor G = global_b({4, 3, 6});
    const auto want = at::native_layer_norm_backward(G, X, {6}, rmean, rrstd, W, W, {true, true, true});
    const at::Tensor xr = make(X, mesh, {Replicate()}).as_tensor();
    auto [o2, mean2, rstd2] = at::native_layer_norm(xr, {6}, w, w, 1e-5);
    const auto got = at::native_layer_norm_backward(make(G, mesh, {Shard(0)}).as_tensor(), xr, {6},
                                                    mean2, rstd2, w, w, {true, true, true});
    EXPECT_EQ(placements_of(std::get<0>(got))[0], Shard(0));
    EXPECT_EQ(placements_of(std::get<1>(got))[0], Partial());
    expect_close(full(std::get<0>(got)), std::get<0>(want), "backward grad_input");
    expect_close(full(std::get<1>(got)), std::get<1>(want), "backward grad_weight");
    expect_close(full(std::get<2>(got)), std::get<2>(want), "backward grad_bias");
    // A plain weight beside a DTensor input is Replicate (NnOps.LayerNormWithPlainWeightAndBias).
    expect_close(full(at::layer_norm(x, {6}, W, {}, 1e-5)), at::layer_norm(X, {6}, W, {}, 1e-5),
                 "plain weight");
    std::string m;
    // A weight of another shape reaching the op (at::layer_norm checks before dispatch).
    m = error_of<ValueError>([&] {
      (void)at::native_layer_norm(x, {6}, make(global_b({5}), mesh, {Replicate()}).as_tensor(), {}, 1e-5);
    });
    EXPECT_NE(m.find("weight shape [5] differs from normalized_shape [6]"), std::string::npos) << m;
    // A view whose local is a copy ([5,6] S(0) -> [30] is gathered first), read after its base
    // was written: refused as the fallback refuses it.
    at::Tensor base = make(global_a({5, 6}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor flat = base.view({30});
    base.add_(1);
    m = error_of<NotImplementedError>([&] { (void)at::layer_norm(flat, {30}); });
    EXPECT_NE(m.find("aten::native_layer_norm(arg 0: mesh=[2] placements=[R] shape=[30]): argument 0 "
                     "is a view of a DTensor whose local tensor is a copy (the view redistributed its "
                     "input or copied a non-row-major local), and its base was written"),
              std::string::npos) << m;
    const at::Tensor rg = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::layer_norm(rg, {4}); });
    EXPECT_NE(m.find("aten::native_layer_norm(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                     "shape=[6,4]) normalized_shape=[4]: the input is a RaggedShard DTensor"),
              std::string::npos) << m;
  });
}

// rms_norm has no kernel of its own on CPU: LibTorch decomposes it above the dispatch key into
// pow, mean.dim, add_.Scalar, rsqrt and mul, which all have rules; the normalized dim may stay
// sharded (its mean is Partial(sum), reduced by rsqrt).
TEST(NnOps, RmsNormDecomposesIntoRuledOps) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({5, 3, 6}), W = global_b({6}), G = global_b({5, 3, 6});
      for (const auto& px : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(2)}, {Partial()}})
        for (const auto& pw : std::vector<Placements>{{Replicate()}, {Shard(0)}}) {
          const std::string what = "x " + to_string(px) + " w " + to_string(pw) + " on " +
                                   std::to_string(mesh.size());
          const at::Tensor xr = X.clone().requires_grad_(), wr = W.clone().requires_grad_();
          (at::rms_norm(xr, {6}, wr, 1e-5) * G).sum().backward();
          at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
          at::Tensor w = make(W, mesh, pw).as_tensor().requires_grad_();
          const at::Tensor y = at::rms_norm(x, {6}, w, 1e-5);
          expect_close(full(y), at::rms_norm(X, {6}, W, 1e-5), what);
          (y * make(G, mesh, px).as_tensor()).sum().backward();
          expect_close(full(x.grad()), xr.grad(), "grad x " + what);
          expect_close(full(w.grad()), wr.grad(), "grad w " + what);
        }
    });
}

// scaled_dot_product_attention: ATen asks `_fused_sdp_choice` for a backend; on DTensor
// tensors the answer is the math path (nn_kernels.cc), a composite of ops with rules, so a
// heads-sharded attention (tensor parallelism) runs without communication. Values and the
// gradients of q, k, v equal one device's: causal, an additive plain mask, a scale, a batch-
// or sequence-sharded q, and a 2x2 mesh.
TEST(NnOps, ScaledDotProductAttentionRunsTheMathPath) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor Q = global_a({2, 4, 6, 8}) * 0.3, K = global_b({2, 4, 6, 8}) * 0.5,
                       V = global_a({2, 4, 6, 8}).flip(3), G = global_b({2, 4, 6, 8});
      const at::Tensor M = global_b({6, 6}) - 1.5;  // an additive float mask, plain
      std::vector<std::vector<Placements>> cases;  // q, k, v placements
      if (mesh.ndim() == 1) {
        cases = {{{Shard(1)}, {Shard(1)}, {Shard(1)}}, {{Shard(0)}, {Shard(0)}, {Shard(0)}},
                 {{Replicate()}, {Replicate()}, {Replicate()}}, {{Shard(2)}, {Replicate()}, {Replicate()}}};
      } else {
        cases = {{{Shard(0), Shard(1)}, {Shard(0), Shard(1)}, {Shard(0), Shard(1)}}};
      }
      // A boolean mask (true: attend), the diagonal always attended.
      const at::Tensor B = (global_b({6, 6}) > 1.2).logical_or(at::eye(6, at::kBool));
      for (const auto& pl : cases)
        for (int variant = 0; variant < 4; ++variant) {
          const bool causal = variant == 0;
          const std::optional<at::Tensor> mask =
              variant == 1 ? std::optional<at::Tensor>(M)
                           : variant == 3 ? std::optional<at::Tensor>(B) : std::nullopt;
          const std::optional<double> scale = variant == 2 ? std::optional<double>(0.7) : std::nullopt;
          const std::string what = "q " + to_string(pl[0]) + " k " + to_string(pl[1]) + " v " +
                                   to_string(pl[2]) + " variant " + std::to_string(variant) +
                                   " mesh " + mesh.to_string();
          at::Tensor qr = Q.clone().requires_grad_(), kr = K.clone().requires_grad_(),
                     vr = V.clone().requires_grad_();
          const at::Tensor want = at::scaled_dot_product_attention(qr, kr, vr, mask, 0.0, causal, scale);
          (want * G).sum().backward();
          at::Tensor q = make(Q, mesh, pl[0]).as_tensor().requires_grad_();
          at::Tensor k = make(K, mesh, pl[1]).as_tensor().requires_grad_();
          at::Tensor v = make(V, mesh, pl[2]).as_tensor().requires_grad_();
          at::Tensor y;
          try {
            y = at::scaled_dot_product_attention(q, k, v, mask, 0.0, causal, scale);
          } catch (const std::exception& e) {
            ADD_FAILURE() << what << ": " << e.what();
            continue;
          }
          ASSERT_TRUE(is_dtensor(y)) << what;
          expect_close(full(y), want.detach(), what);
          // No gather of the heads / batch where each rank holds some (batch 2 on 4 ranks
          // leaves two empty, and the rules may choose another layout there); on the 2x2 mesh
          // with batch and heads both sharded each rank multiplies its own (matmul_kernels.h).
          bool own = pl[0] == pl[1] && pl[0] == pl[2];
          for (size_t m = 0; m < pl[0].size() && own; ++m)
            own = pl[0][m].is_shard() && Q.size(pl[0][m].dim()) >= mesh.size(static_cast<int64_t>(m));
          if (own) EXPECT_EQ(as_dtensor(y).placements(), pl[0]) << what;
          (y * make(G, mesh, as_dtensor(y).placements()).as_tensor()).sum().backward();
          expect_close(full(q.grad()), qr.grad(), "grad q " + what);
          expect_close(full(k.grad()), kr.grad(), "grad k " + what);
          expect_close(full(v.grad()), vr.grad(), "grad v " + what);
        }
      // Refused, naming the op and layouts: a mask with is_causal (ValueError, as ATen), fewer
      // key/value heads than query heads (grouped-query attention: NotImplementedError).
      const at::Tensor q = make(Q, mesh, Placements(mesh.ndim(), Replicate())).as_tensor();
      std::string m = error_of<ValueError>(
          [&] { (void)at::scaled_dot_product_attention(q, q, q, M, 0.0, /*is_causal=*/true); });
      EXPECT_NE(m.find("aten::scaled_dot_product_attention(arg 0: mesh="), std::string::npos) << m;
      EXPECT_NE(m.find("an explicit attn_mask and is_causal=true are exclusive"), std::string::npos) << m;
      const at::Tensor kv = make(global_b({2, 2, 6, 8}), mesh, Placements(mesh.ndim(), Replicate())).as_tensor();
      m = error_of<NotImplementedError>([&] {
        (void)at::scaled_dot_product_attention(q, kv, kv, std::nullopt, 0.0, false, std::nullopt,
                                               /*enable_gqa=*/true);
      });
      EXPECT_NE(m.find("enable_gqa with fewer key/value heads than query heads is not implemented"),
                std::string::npos) << m;
    });
}

// logsumexp over a sharded dim reduces two small Partials (the max and the sum: one value per
// row each), never the tensor; all / any count on the wrapper (uint8 in, uint8 out; an empty
// dim list reduces nothing; None every dim), values vs one device.
TEST(NnOps, LogsumexpAllAnyOverShardedDims) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 1000});
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    at::Tensor y;
    const int64_t bytes = dispatch_testing::bytes_of(mesh, [&] { y = at::logsumexp(x, {1}); });
    expect_close(full(y), at::logsumexp(X, {1}), "logsumexp S(1)");
    EXPECT_LE(bytes, 2 * 4 * 8 * 2) << "two all_reduces of 4 doubles, not the [4,1000] tensor";
    // Rows of -inf (fully masked): ATen's 0 max keeps them -inf, not nan.
    const at::Tensor NI = at::full({2, 6}, -std::numeric_limits<double>::infinity(), at::kDouble);
    expect_close(full(at::logsumexp(make(NI, mesh, {Shard(1)}).as_tensor(), {1})).isneginf().to(at::kDouble),
                 at::ones({2}, at::kDouble), "logsumexp of -inf rows");
    std::string m = error_of<ValueError>([&] { (void)at::logsumexp(x, std::vector<int64_t>{}); });
    EXPECT_NE(m.find("aten::logsumexp(arg 0: mesh=[2] placements=[S(1)] shape=[4,1000]): logsumexp "
                     "needs at least one dim"), std::string::npos) << m;
    const at::Tensor B = (global_a({4, 6}) > 0.5).to(at::kByte);
    const at::Tensor b = make(B, mesh, {Shard(1)}).as_tensor();
    for (bool keepdim : {false, true}) {
      EXPECT_TRUE(at::equal(full(at::all(b, 1, keepdim)), at::all(B, 1, keepdim)));
      EXPECT_TRUE(at::equal(full(at::any(b, 1, keepdim)), at::any(B, 1, keepdim)));
    }
    EXPECT_EQ(at::all(b).scalar_type(), at::kByte);
    EXPECT_TRUE(at::equal(full(at::all(b)), at::all(B)));
    EXPECT_TRUE(at::equal(full(at::any(b, at::OptionalIntArrayRef(std::vector<int64_t>{}), false)),
                          at::any(B, at::OptionalIntArrayRef(std::vector<int64_t>{}), false)));
    EXPECT_TRUE(at::equal(full(at::all(b, at::OptionalIntArrayRef(std::nullopt), false)),
                          at::all(B, at::OptionalIntArrayRef(std::nullopt), false)));
  });
}

// ---- unary pointwise --------------------------------------------------------------------

TEST(NnOps, UnaryPointwiseValuesGradientsAndPartial) {
  using Fn = std::function<at::Tensor(const at::Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> ops = {
      {"sigmoid", [](const at::Tensor& x) { return at::sigmoid(x); }},
      {"silu", [](const at::Tensor& x) { return at::silu(x); }},
      {"rsqrt", [](const at::Tensor& x) { return at::rsqrt(x); }},
      {"abs", [](const at::Tensor& x) { return at::abs(x - 1); }},
      {"pow 3", [](const at::Tensor& x) { return x.pow(3); }},
      {"pow 2", [](const at::Tensor& x) { return x.pow(2); }},
      {"pow 0.5", [](const at::Tensor& x) { return x.pow(0.5); }},
      {"pow -1.5", [](const at::Tensor& x) { return x.pow(-1.5); }},
  };
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor X = global_b({5, 6}), G = global_a({5, 6});  // X > 0 (rsqrt, pow 0.5)
      for (const auto& p : catalogue_1d())
        for (const auto& [name, f] : ops) {
          const std::string what = name + " " + to_string(p) + " on " + std::to_string(mesh.size());
          const at::Tensor xr = X.clone().requires_grad_();
          (f(xr) * G).sum().backward();
          at::Tensor x = make(X, mesh, p).as_tensor().requires_grad_();
          const at::Tensor y = f(x);
          expect_close(full(y), f(X).detach(), what);
          (y * make(G, mesh, {Partial()}).as_tensor()).sum().backward();
          expect_close(full(x.grad()), xr.grad(), "grad " + what);
        }
      // sgn (what abs's backward calls; its own backward makes an efficient-zero tensor,
      // which has no rule): values.
      for (const auto& p : catalogue_1d())
        expect_close(full(at::sgn(make(X, mesh, p).as_tensor() - 1.5)), at::sgn(X - 1.5),
                     "sgn " + to_string(p));
      // Not linear: a Partial input is reduced first (the output is Replicate).
      const at::Tensor xp = make(X, mesh, {Partial()}).as_tensor();
      for (const auto& y : {at::sigmoid(xp), at::silu(xp), at::rsqrt(xp), at::abs(xp), xp.pow(2)})
        EXPECT_EQ(placements_of(y)[0], Replicate());
      // In-place variants on a Shard keep it; on a Partial they are refused.
      at::Tensor s = make(X, mesh, {Shard(0)}).as_tensor();
      s.sigmoid_();
      s.pow_(2);
      s.abs_();
      s.rsqrt_();
      expect_close(full(s), at::rsqrt(at::sigmoid(X).pow(2)), "in-place chain");
      at::Tensor pp = make(X, mesh, {Partial()}).as_tensor();
      const std::string m = error_of<NotImplementedError>([&] { pp.sigmoid_(); });
      EXPECT_NE(m.find("aten::sigmoid_(arg 0: mesh=[" + std::to_string(mesh.size()) +
                       "] placements=[P(sum)] shape=[5,6]): in-place op would change argument 0's "
                       "P(sum) on mesh dim 0"), std::string::npos) << m;
    });
}

// ---- mean / var / std / linalg_vector_norm ----------------------------------------------

TEST(NnOps, MeanVarStdNormOverShardedDims) {
  using Fn = std::function<at::Tensor(const at::Tensor&)>;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::pair<std::string, Fn>> ops;
  for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {-1}, {0, 1}})
    for (bool keep : {false, true}) {
      const std::string s = " dims " + std::to_string(dims[0]) + (dims.size() > 1 ? ",1" : "") +
                            (keep ? " keepdim" : "");
      ops.push_back({"mean" + s, [=](const at::Tensor& x) { return x.mean(dims, keep); }});
      ops.push_back({"var" + s, [=](const at::Tensor& x) { return x.var(dims, true, keep); }});
      ops.push_back({"var correction 0" + s, [=](const at::Tensor& x) {
                       return at::var(x, at::OptionalIntArrayRef(dims), at::Scalar(0), keep);
                     }});
      ops.push_back({"std" + s, [=](const at::Tensor& x) { return x.std(dims, true, keep); }});
      for (double ord : {1.0, 2.0, inf, -inf, 3.0, 0.5})
        ops.push_back({"norm " + std::to_string(ord) + s, [=](const at::Tensor& x) {
                         return at::linalg_vector_norm(x, ord, dims, keep);
                       }});
    }
  ops.push_back({"mean all", [](const at::Tensor& x) { return x.mean(); }});
  ops.push_back({"var all", [](const at::Tensor& x) { return x.var(); }});
  ops.push_back({"norm all", [](const at::Tensor& x) { return at::linalg_vector_norm(x); }});
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      // [7,5] on 4 ranks: S(0) rows 2,2,2,1; S(1) columns 2,2,1,0 (an empty shard).
      const at::Tensor X = global_a({7, 5}) * at::cos(at::arange(35, at::kDouble)).view({7, 5});
      for (const auto& p : catalogue_1d())
        for (const auto& [name, f] : ops) {
          const std::string what = name + " " + to_string(p) + " on " + std::to_string(mesh.size());
          if (name.rfind("norm inf", 0) == 0 || name.rfind("norm -inf", 0) == 0)
            if (mesh.size() == 4 && p[0] == Shard(1)) continue;  // amax of an empty shard: refused
          const at::Tensor xr = X.clone().requires_grad_();
          const at::Tensor yr = f(xr);
          const at::Tensor G = global_b(yr.sizes().vec());
          (yr * G).sum().backward();
          at::Tensor x = make(X, mesh, p).as_tensor().requires_grad_();
          at::Tensor y;
          try {
            y = f(x);
          } catch (const std::exception& e) {
            ADD_FAILURE() << what << ": " << e.what();
            continue;
          }
          expect_close(full(y), yr.detach(), what);
          // ||x||_2's backward fills x / ||x|| in place where ||x|| == 0: for a Partial x, share
          // by share (partial_fill_kernels.h).
          const auto go = [&] { (y * make(G, mesh, {Replicate()}).as_tensor()).sum().backward(); };
          try {
            go();
          } catch (const std::exception& e) {
            ADD_FAILURE() << what << " backward: " << e.what();
            continue;
          }
          expect_close(full(x.grad()), xr.grad(), "grad " + what);
        }
      // A sharded reduced dim: mean is Partial(sum) of the local sums over the global count.
      const at::Tensor m0 = make(X, mesh, {Shard(0)}).as_tensor().mean(0);
      EXPECT_EQ(placements_of(m0)[0], Partial());
      EXPECT_EQ(placements_of(make(X, mesh, {Shard(0)}).as_tensor().mean(1))[0], Shard(0));
    });
}

// amax / amin's backward (grad * (x == result) / count of ties) runs on the comparison rules
// added here (eq.Tensor, isnan, logical_or): a Partial(max) result is reduced before ==.
TEST(NnOps, AmaxAminGradientsEqualOneDevice) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      // Ties on purpose in row 0 (each counted: the gradient is split between them).
      at::Tensor A = global_a({7, 7}) * at::cos(at::arange(49, at::kDouble)).view({7, 7});
      A.index_put_({0, 3}, A.max().item<double>());
      for (const auto& p : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}})
        for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {0, 1}}) {
          const std::string what = to_string(p) + " dims " + std::to_string(dims[0]) +
                                   (dims.size() > 1 ? ",1" : "") + " on " + std::to_string(mesh.size());
          for (bool mx : {true, false}) {
            auto f = [&](const at::Tensor& x) { return mx ? x.amax(dims) : x.amin(dims); };
            const at::Tensor xr = A.clone().requires_grad_();
            const at::Tensor yr = f(xr);
            const at::Tensor G = global_b(yr.sizes().vec());
            (yr * G).sum().backward();
            at::Tensor x = make(A, mesh, p).as_tensor().requires_grad_();
            (f(x) * make(G, mesh, {Replicate()}).as_tensor()).sum().backward();
            expect_close(full(x.grad()), xr.grad(), std::string(mx ? "amax" : "amin") + " grad " + what);
          }
        }
    });
}

TEST(NnOps, ReductionRefusalsAndRagged) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({6, 4});
    const at::Tensor r = make(A, mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    // Full reductions of a ragged DTensor run; anything else is refused.
    expect_close(full(r.mean()), A.mean(), "ragged mean");
    expect_close(full(at::linalg_vector_norm(r)), at::linalg_vector_norm(A), "ragged norm 2");
    expect_close(full(at::linalg_vector_norm(r, 1)), at::linalg_vector_norm(A, 1), "ragged norm 1");
    std::string m = error_of<NotImplementedError>([&] { (void)r.mean(0); });
    EXPECT_NE(m.find("aten::mean.dim(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]): "
                     "a RaggedShard DTensor reduces only over all dims, without keepdim (fail-closed)"),
              std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)r.var(); });
    EXPECT_NE(m.find("aten::var.correction(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                     "shape=[6,4]): a RaggedShard DTensor is not implemented for this op"),
              std::string::npos) << m;
    const at::Tensor x = make(A, mesh, {Shard(0)}).as_tensor();
    // ord 0: the count of non-zeros (over the sharded dim: a Partial(sum) of the counts); no
    // gradient reaches the input, as on one device.
    {
      at::Tensor Z = A.clone();
      Z.index_put_({Z > 1.0}, 0.0);
      const at::Tensor xz = make(Z, mesh, {Shard(0)}).as_tensor().requires_grad_();
      const at::Tensor zr = Z.clone().requires_grad_();
      for (const auto& dims : {std::vector<int64_t>{0}, std::vector<int64_t>{1}}) {
        const at::Tensor got = at::linalg_vector_norm(xz, 0, dims, false);
        const at::Tensor want = at::linalg_vector_norm(zr, 0, dims, false);
        expect_close(full(got), want.detach(), "norm ord 0 over dim " + std::to_string(dims[0]));
        got.sum().backward();
        want.sum().backward();
      }
      EXPECT_FALSE(zr.grad().defined());
      EXPECT_FALSE(xz.grad().defined());
      expect_close(full(at::linalg_vector_norm(xz, 0)), at::linalg_vector_norm(Z, 0), "norm ord 0");
    }
    m = error_of<NotImplementedError>(
        [&] { (void)at::linalg_vector_norm(x, 2, std::nullopt, false, at::kFloat); });
    EXPECT_NE(m.find("a dtype argument (Float) other than the input's is not implemented"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)x.mean(std::vector<int64_t>{2}); });
    EXPECT_NE(m.find("aten::mean.dim(arg 0: mesh=[2] placements=[S(0)] shape=[6,4]): dim 2 out of "
                     "range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
    const at::Tensor xi = make(at::arange(8, at::kLong).view({4, 2}), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::var(xi, at::OptionalIntArrayRef(), at::Scalar(1), false); });
    EXPECT_NE(m.find("aten::var.correction(arg 0: mesh=[2] placements=[S(0)] shape=[4,2]): dtype "
                     "Long is not a floating point type"), std::string::npos) << m;
    // mean of integers with a floating dtype runs (the sum runs in that dtype); without: refused.
    expect_close(full(xi.mean(std::vector<int64_t>{0}, false, at::kDouble)),
                 at::arange(8, at::kLong).view({4, 2}).mean({0}, false, at::kDouble), "mean dtype");
    m = error_of<ValueError>([&] { (void)xi.mean(); });
    EXPECT_NE(m.find("aten::mean(arg 0: mesh=[2] placements=[S(0)] shape=[4,2]): dtype Long is not "
                     "a floating point type"), std::string::npos) << m;
    const at::Tensor xc =
        make(at::complex(A, A).to(at::kComplexDouble), mesh, {Shard(0)}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::linalg_vector_norm(xc); });
    EXPECT_NE(m.find("complex inputs are not implemented"), std::string::npos) << m;
  });
}

// ---- embedding --------------------------------------------------------------------------

/// embedding of plain (or DTensor) ids into a [10,4] table in `pw`: values, output layout,
/// grad of the table (loss weighted by a DTensor in `pg`) against the single-device op.
void embedding_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat_w,
                     const std::vector<Placements>& cat_i, int64_t padding_idx) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor W = global_a({10, 4});
    // Every row range on 2 and 4 ranks (rows 3,3,3,1 on 4), repeats, the padding row.
    const at::Tensor I = at::tensor({9, 0, 3, 3, 7, 2, 5, 9, 1, 6, 4, 8}, at::kLong).view({4, 3});
    const at::Tensor G = global_b({4, 3, 4});
    for (const auto& pw : cat_w)
      for (const auto& pi : cat_i) {
        const std::string what = "w " + to_string(pw) + " ids " + (pi.empty() ? "plain" : to_string(pi)) +
                                 " on " + std::to_string(mesh.size());
        const at::Tensor wr = W.clone().requires_grad_();
        (at::embedding(wr, I, padding_idx) * G).sum().backward();
        at::Tensor w = make(W, mesh, pw).as_tensor().requires_grad_();
        const at::Tensor ids = pi.empty() ? I : make(I, mesh, pi).as_tensor();
        const at::Tensor y = at::embedding(w, ids, padding_idx);
        expect_close(full(y), at::embedding(W, I), what);
        for (size_t m = 0; m < pw.size(); ++m) {
          Placement want = pw[m].is_partial() ? pw[m] : Replicate();
          if (!pi.empty() && pi[m].is_shard()) want = pi[m];
          else if (pw[m] == Shard(0)) want = Partial();
          else if (pw[m] == Shard(1)) want = Shard(2);
          EXPECT_EQ(placements_of(y)[m], want) << what << " mesh dim " << m;
        }
        (y * make(G, mesh, Placements(pw.size(), Replicate())).as_tensor()).sum().backward();
        expect_close(full(w.grad()), wr.grad(), "grad " + what);
      }
  });
}

TEST(NnOps, EmbeddingRowAndColumnShardedTables) {
  const std::vector<Placements> cat = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
  embedding_cases({2}, cat, {{}, {Shard(0)}, {Shard(1)}}, -1);
  embedding_cases({4}, cat, {{}, {Shard(0)}}, 3);  // uneven rows 3,3,3,1; ids S(0) 1 row each
  embedding_cases({2, 2}, {{Shard(0), Shard(1)}, {Shard(0), Shard(0)}, {Partial(), Shard(0)}},
                  {{}, {Shard(0), Replicate()}}, -1);
}

TEST(NnOps, EmbeddingBackwardLayoutsAndRefusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor I = at::tensor({1, 0, 3, 3, 2, 1}, at::kLong).view({2, 3});
    const at::Tensor G = global_b({2, 3, 4});
    const at::Tensor want = at::embedding_dense_backward(G, I, 5, -1, false);
    // A batch-sharded gradient with plain ids: each rank sums its rows -> P(sum).
    at::Tensor g = at::embedding_dense_backward(make(G, mesh, {Shard(0)}).as_tensor(), I, 5, -1, false);
    EXPECT_EQ(placements_of(g)[0], Partial());
    expect_close(full(g), want, "backward S(0)");
    g = at::embedding_dense_backward(make(G, mesh, {Shard(2)}).as_tensor(), I, 5, -1, false);
    EXPECT_EQ(placements_of(g)[0], Shard(1));
    expect_close(full(g), want, "backward S(2)");
    g = at::embedding_dense_backward(make(G, mesh, {Partial()}).as_tensor(), I, 5, -1, true);
    EXPECT_EQ(placements_of(g)[0], Partial());
    expect_close(full(g), at::embedding_dense_backward(G, I, 5, -1, true), "backward P scaled");
    std::string m = error_of<NotImplementedError>([&] {
      (void)at::embedding_dense_backward(make(G, mesh, {Shard(0)}).as_tensor(), I, 5, -1, true);
    });
    EXPECT_NE(m.find("aten::embedding_dense_backward(arg 0: mesh=[2] placements=[S(0)] shape=[2,3,4]; "
                     "arg 1: plain tensor shape=[2,3]): scale_grad_by_freq with the index rows split "
                     "across ranks"), std::string::npos) << m;
    const at::Tensor w = make(global_a({5, 4}), mesh, {Shard(0)}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::embedding(w, I, -1, false, true); });
    EXPECT_NE(m.find("aten::embedding(arg 0: mesh=[2] placements=[S(0)] shape=[5,4]; arg 1: plain "
                     "tensor shape=[2,3]): sparse=true (a sparse gradient) is not implemented"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::embedding(w, I + 3); });
    EXPECT_NE(m.find("an index outside [0, 5)"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::embedding(w, make(I, mesh, {Partial()}).as_tensor()); });
    EXPECT_NE(m.find("Partial indices"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] {
      (void)at::embedding(make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor(), I);
    });
    EXPECT_NE(m.find("the weight is a RaggedShard DTensor (fail-closed"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] {
      (void)at::embedding(global_a({5, 4}), make(I, mesh, {Shard(0)}).as_tensor());
    });
    EXPECT_NE(m.find("the weight is a plain tensor beside a DTensor"), std::string::npos) << m;
  });
}

// ---- a transformer block ----------------------------------------------------------------

/// Pre-norm block of unmodified torch::nn modules: LayerNorm, Linear q/k/v/o, softmax
/// attention over 4 heads, LayerNorm, GELU MLP; residuals.
struct Block {
  torch::nn::LayerNorm ln1{torch::nn::LayerNormOptions({8})}, ln2{torch::nn::LayerNormOptions({8})};
  torch::nn::Linear q{8, 8}, k{8, 8}, v{8, 8}, o{8, 8}, fc1{8, 16}, fc2{16, 8};
  std::vector<std::pair<std::string, at::Tensor*>> params() {
    std::vector<std::pair<std::string, at::Tensor*>> p = {
        {"ln1.weight", &ln1->weight}, {"ln1.bias", &ln1->bias},
        {"ln2.weight", &ln2->weight}, {"ln2.bias", &ln2->bias}};
    for (auto& [n, l] : std::vector<std::pair<std::string, torch::nn::Linear*>>{
             {"q", &q}, {"k", &k}, {"v", &v}, {"o", &o}, {"fc1", &fc1}, {"fc2", &fc2}}) {
      p.push_back({n + ".weight", &(*l)->weight});
      p.push_back({n + ".bias", &(*l)->bias});
    }
    return p;
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t B = x.size(0), T = x.size(1), H = 4, D = 2;
    const at::Tensor h = ln1(x);
    auto heads = [&](torch::nn::Linear& l) { return l(h).view({B, T, H, D}).transpose(1, 2); };
    const at::Tensor qh = heads(q), kh = heads(k), vh = heads(v);
    const at::Tensor att = at::softmax(at::matmul(qh, kh.transpose(-2, -1)) / std::sqrt(2.0), -1);
    const at::Tensor ctx = at::matmul(att, vh).transpose(1, 2).reshape({B, T, H * D});
    const at::Tensor x1 = x + o(ctx);
    return x1 + fc2(at::gelu(fc1(ln2(x1))));
  }
};

/// The block on one device vs the block with DTensor parameters (placements from `layout_of`,
/// by parameter name) and input `px`: loss and every parameter gradient.
void block_case(const std::vector<int64_t>& mesh_shape, const Placements& px,
                const std::function<Placements(const std::string&)>& layout_of) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    Block ref, dist;
    for (auto* b : {&ref, &dist})
      for (auto& [name, p] : b->params()) {
        const int64_t n = p->numel();
        *p = (at::cos(at::arange(n, at::kDouble) * 0.7 + static_cast<double>(name.size())) * 0.5)
                 .view(p->sizes()).requires_grad_();
      }
    const at::Tensor X = global_a({4, 3, 8}) * at::cos(at::arange(96, at::kDouble)).view({4, 3, 8});
    const at::Tensor Wl = global_b({4, 3, 8});
    const at::Tensor loss_ref = (ref.forward(X) * Wl).sum();
    loss_ref.backward();
    for (auto& [name, p] : dist.params())
      *p = make(p->detach(), mesh, layout_of(name)).as_tensor().requires_grad_();
    const at::Tensor x = make(X, mesh, px).as_tensor();
    const at::Tensor loss = (dist.forward(x) * make(Wl, mesh, px).as_tensor()).sum();
    expect_close(full(loss), loss_ref.detach(), "loss");
    loss.backward();
    auto rp = ref.params();
    auto dp = dist.params();
    for (size_t i = 0; i < rp.size(); ++i) {
      ASSERT_TRUE(dp[i].second->grad().defined()) << dp[i].first;
      expect_close(full(dp[i].second->grad()), rp[i].second->grad(), "grad " + dp[i].first);
    }
  });
}

TEST(NnOps, TransformerBlockDataParallelEqualsOneDevice) {
  auto replicate = [](const std::string&) { return Placements{Replicate()}; };
  block_case({2}, {Shard(0)}, replicate);
  block_case({4}, {Shard(0)}, replicate);
  block_case({4}, {Shard(1)}, replicate);  // the sequence dim (3 over 4 ranks: uneven, empty)
}

TEST(NnOps, TransformerBlockTensorParallelEqualsOneDevice) {
  // Megatron layout: q/k/v/fc1 column-wise (weight S(0), bias S(0)), o/fc2 row-wise (weight
  // S(1), bias R), layer norms Replicate, input Replicate.
  auto tp = [](const std::string& n) {
    for (const char* col : {"q.", "k.", "v.", "fc1."})
      if (n.rfind(col, 0) == 0) return Placements{Shard(0)};
    if (n == "o.weight" || n == "fc2.weight") return Placements{Shard(1)};
    return Placements{Replicate()};
  };
  block_case({2}, {Replicate()}, tp);
  block_case({4}, {Replicate()}, tp);
}

// cat and stack: every operand laid out like the first one (a Shard of the cat dim gathered,
// a Shard of another dim kept, a common Partial kept), plain operands Replicate; values and
// gradients equal one device, output placements asserted; bad sizes and ragged operands
// refused.
TEST(NnOps, CatAndStackValuesGradientsAndLayouts) {
  for (const std::vector<int64_t>& mesh_shape :
       {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const size_t nd = static_cast<size_t>(mesh.ndim());
      const at::Tensor A = global_a({5, 3}), B = global_b({2, 3}), C = global_b({5, 4});
      std::vector<std::pair<Placements, Placements>> cases = {
          {Placements(nd, Replicate()), Placements(nd, Replicate())},
          {Placements(nd, Shard(0)), Placements(nd, Shard(0))},
          {Placements(nd, Shard(1)), Placements(nd, Replicate())},
          {Placements(nd, Partial()), Placements(nd, Partial())},
          {Placements(nd, Partial()), Placements(nd, Shard(1))},
          {Placements(nd, Replicate()), Placements(nd, Partial("avg"))}};
      for (const auto& [pa, pb] : cases) {
        const std::string what = "cat " + to_string(pa) + " " + to_string(pb) + " on " +
                                 std::to_string(mesh.size());
        const at::Tensor a = make(A, mesh, pa).as_tensor().requires_grad_();
        const at::Tensor b = make(B, mesh, pb).as_tensor().requires_grad_();
        const at::Tensor y = at::cat({a, b}, 0);
        const at::Tensor Ar = A.clone().requires_grad_(), Br = B.clone().requires_grad_();
        const at::Tensor yr = at::cat({Ar, Br}, 0);
        expect_close(full(y), yr.detach(), what);
        // The first operand's placements, a Shard of dim 0 gathered, a Partial kept only when
        // both have it.
        for (size_t m = 0; m < nd; ++m) {
          Placement want = pa[m];
          if (want.is_shard() && want.dim() == 0) want = Replicate();
          if (want.is_partial() && pb[m] != want) want = Replicate();
          EXPECT_EQ(as_dtensor(y).layout().placements()[m], want) << what;
        }
        const at::Tensor W = global_a({7, 3}) + 0.25;
        (y * W).sum().backward();
        (yr * W).sum().backward();
        expect_close(full(a.grad()), Ar.grad(), what + " grad a");
        expect_close(full(b.grad()), Br.grad(), what + " grad b");
      }
      // Along dim 1 (-1) with a plain operand; stack of 2-D and of 0-dim tensors.
      const at::Tensor a = make(A, mesh, Placements(nd, Shard(0))).as_tensor();
      expect_close(full(at::cat({a, C}, -1)), at::cat({A, C}, -1), "cat dim -1 with a plain operand");
      const at::Tensor d = make(global_b({5, 3}), mesh, Placements(nd, Shard(1))).as_tensor();
      expect_close(full(at::stack({a, d}, 1)), at::stack({A, global_b({5, 3})}, 1), "stack dim 1");
      expect_close(full(at::stack({a, d}, -1)), at::stack({A, global_b({5, 3})}, -1), "stack dim -1");
      const at::Tensor s0 = at::sum(a), s1 = at::sum(d * d);  // 0-dim P(sum) (R on a 1-D mesh's)
      const at::Tensor st = at::stack({s0, s1});
      expect_close(full(st), at::stack({A.sum(), (global_b({5, 3}) * global_b({5, 3})).sum()}),
                   "stack of 0-dim");
      if (nd == 1) {
        EXPECT_EQ(as_dtensor(st).layout().placements(), Placements{Partial()});
      }
      // Refusals.
      std::string m = error_of<ValueError>([&] { (void)at::cat({a, make(B, mesh, Placements(nd, Replicate())).as_tensor()}, 1); });
      EXPECT_NE(m.find("aten::cat("), std::string::npos) << m;
      EXPECT_NE(m.find("sizes differ off the cat dim ([2,3] beside [5,3])"), std::string::npos) << m;
      m = error_of<ValueError>([&] { (void)at::cat({a, a}, 2); });
      EXPECT_NE(m.find("dim 2 out of range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
      if (nd == 1) {
        const at::Tensor r = make(global_a({8, 4}), mesh, {RaggedShard({0}, std::vector<int64_t>(mesh.size(0), 1))}).as_tensor();
        m = error_of<NotImplementedError>([&] { (void)at::cat({r, r}, 0); });
        EXPECT_NE(m.find("RaggedShard"), std::string::npos) << m;
      }
    });
}

}  // namespace
}  // namespace hyper
