// Gradients into RaggedShard inputs: elementwise ops take Replicate operands (DTensor
// R, plain tensors, 0-dim scalars, operands that broadcast to the ragged shape) beside a ragged
// DTensor, cut locally to each rank's flat interval with no bytes moved; Shard and Partial
// operands are moved onto the ragged layout. So the common losses' backward chains reach ragged
// parameters, and torch::optim steps on them: values and gradients equal the single-device
// computation on the full tensors, on 2 and 4 ranks (threads), uneven intervals with an empty
// rank, [6,4] and 1-D shapes.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
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
using dispatch_testing::global_b;
using dispatch_testing::bytes_of;
using dispatch_testing::make;

/// Uneven ragged layouts of `shape` for a mesh of `n` ranks (4 ranks: rank 1 holds nothing).
Placements ragged_of(const std::vector<int64_t>& shape, int64_t n) {
  if (shape.size() == 1) return {n == 2 ? RaggedShard({0}, {1, 2}) : RaggedShard({0}, {1, 0, 2, 3})};
  return {n == 2 ? RaggedShard({0}, {1, 2}) : RaggedShard({0}, {2, 0, 3, 1})};
}

const std::vector<std::vector<int64_t>>& shapes() {
  static const std::vector<std::vector<int64_t>> s = {{6, 4}, {12}};
  return s;
}

/// "<no error>", or what f threw.
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(RaggedGrad, ReplicateOperandsAreCutLocally) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [n](const DeviceMesh& mesh) {
      for (const auto& shape : shapes()) {
        const Placements rs = ragged_of(shape, n);
        const std::string what = to_string(rs) + " on " + std::to_string(n);
        const at::Tensor X = global_a(shape), B = global_b(shape);
        const std::vector<int64_t> last = {shape.back()};
        const at::Tensor V = global_b(last) + 0.25;
        const at::Tensor x = make(X, mesh, rs).as_tensor();
        const at::Tensor r = make(B, mesh, {Replicate()}).as_tensor();
        const at::Tensor rv = make(V, mesh, {Replicate()}).as_tensor();
        const at::Tensor r0 = make(at::scalar_tensor(1.5, at::kDouble), mesh, {Replicate()}).as_tensor();
        struct Case {
          std::string name;
          std::function<at::Tensor()> got;
          at::Tensor want;
        };
        const std::vector<Case> cases = {
            {"x + R", [&] { return x + r; }, X + B},
            {"R * x", [&] { return r * x; }, B * X},
            {"x - plain", [&] { return x - B; }, X - B},
            {"plain / x", [&] { return B / (x * x + 1); }, B / (X * X + 1)},
            {"x * R[last] (broadcast)", [&] { return x * rv; }, X * V},
            {"plain[last] - x (broadcast)", [&] { return V - x; }, V - X},
            {"x * 0-dim R", [&] { return x * r0; }, X * 1.5},
            {"x * 0-dim plain", [&] { return x * at::scalar_tensor(-2.0, at::kDouble); }, X * -2.0},
            {"addcmul(x, R, plain)", [&] { return at::addcmul(x, r, B, 0.5); }, at::addcmul(X, B, B, 0.5)},
        };
        for (const auto& c : cases) {
          at::Tensor y;
          const int64_t moved = bytes_of(mesh, [&] { y = c.got(); });
          EXPECT_EQ(moved, 0) << c.name << " " << what;
          ASSERT_TRUE(is_dtensor(y)) << c.name << " " << what;
          EXPECT_EQ(as_dtensor(y).layout(), as_dtensor(x).layout()) << c.name << " " << what;
          expect_close(full(y), c.want, c.name + " " + what);
        }
        // In-place on the ragged tensor with R and broadcast operands: no bytes, layout kept.
        at::Tensor z = make(X, mesh, rs).as_tensor();
        const int64_t moved = bytes_of(mesh, [&] {
          z.add_(r, 2.0);
          z.mul_(rv);
          z.sub_(V);
        });
        EXPECT_EQ(moved, 0) << what;
        EXPECT_EQ(as_dtensor(z).layout(), as_dtensor(x).layout()) << what;
        expect_close(full(z), (X + 2.0 * B) * V - V, "in-place " + what);
      }
    });
}

TEST(RaggedGrad, ShardPartialAndOtherRaggedOperandsMoveOntoTheRaggedLayout) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [n](const DeviceMesh& mesh) {
      const std::vector<int64_t> shape = {6, 4};
      const Placements rs = ragged_of(shape, n);
      const Placements other = {n == 2 ? RaggedShard({0}, {1, 1}) : RaggedShard({0}, {1, 2, 0, 3})};
      const at::Tensor X = global_a(shape), B = global_b(shape);
      const at::Tensor x = make(X, mesh, rs).as_tensor();
      for (const Placements& pb : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Partial()},
                                                         {Partial("avg")}, {Partial("max")}, other}) {
        const std::string what = to_string(rs) + " with " + to_string(pb) + " on " + std::to_string(n);
        const at::Tensor b = make(B, mesh, pb).as_tensor();
        // Bytes: P(sum) is a reduce-scatter onto the intervals (each rank sends the elements
        // outside its own); S(0) an all_to_all (each rank sends its rows outside its interval).
        const Interval own = as_dtensor(x).layout().ragged_interval(mesh.get_rank());
        int64_t want_bytes = -1;
        if (pb == Placements{Partial()}) want_bytes = (24 - own.size()) * 8;
        if (pb == Placements{Shard(0)}) {
          const Box box = as_dtensor(b).layout().local_box(mesh.get_rank());
          const int64_t lo = box.offsets[0] * 4, hi = lo + box.sizes[0] * 4;
          want_bytes = (hi - lo - std::max<int64_t>(0, std::min(hi, own.end) - std::max(lo, own.start))) * 8;
        }
        const int64_t moved = bytes_of(mesh, [&] { (void)(x * b); });
        if (want_bytes >= 0) {
          EXPECT_EQ(moved, want_bytes) << what;
        }
        const at::Tensor y = x * b + b;
        EXPECT_EQ(as_dtensor(y).layout(), as_dtensor(x).layout()) << what;
        expect_close(full(y), X * B + B, what);
        // Argument 0 not ragged: its layout is the output's (the ragged operand moves).
        // (b ragged: b's layout, argument 0's.)
        const at::Tensor u = b - x;
        EXPECT_EQ(as_dtensor(u).layout(), as_dtensor(pb == other ? b : x).layout()) << what;
        expect_close(full(u), B - X, "b - x " + what);
        // In-place on the non-ragged operand keeps its layout (a Partial one: refused
        // for ops that would change it; add_ keeps P(sum)).
        if (!pb[0].is_partial() || pb[0] == Partial()) {
          at::Tensor c = make(B, mesh, pb).as_tensor();
          c.add_(x);
          EXPECT_EQ(as_dtensor(c).placements(), pb) << what;
          expect_close(full(c), B + X, "in-place " + what);
        }
      }
      // A ragged operand of a smaller shape (broadcast): Replicate first, then cut.
      const at::Tensor V = global_b({4});
      const at::Tensor v =
          make(V, mesh, {n == 2 ? RaggedShard({0}, {1, 1}) : RaggedShard({0}, {1, 0, 1, 2})}).as_tensor();
      const at::Tensor y = x * v;
      EXPECT_EQ(as_dtensor(y).layout(), as_dtensor(x).layout());
      expect_close(full(y), X * V, "ragged [4] beside ragged [6,4]");
      // Only ragged operands smaller than the output: they are Replicate values (gathered).
      const at::Tensor w = v * make(B, mesh, {Shard(0)}).as_tensor();
      EXPECT_EQ(as_dtensor(w).placements(), Placements{Shard(0)});
      expect_close(full(w), V * B, "ragged [4] beside S(0) [6,4]");
    });
}

/// The single-device gradients of `loss_of` at the full tensors against hyper's at the ragged
/// `x` (and the DTensor or plain `others`, whose gradients are compared where they require one).
void expect_grads(const std::string& what, const std::vector<at::Tensor>& ins,
                  const std::vector<at::Tensor>& refs,
                  const std::function<at::Tensor(const std::vector<at::Tensor>&)>& loss_of) {
  at::Tensor loss, want;
  const std::string err = message_of([&] {
    loss = loss_of(ins);
    loss.backward();
  });
  ASSERT_EQ(err, "<no error>") << what;
  want = loss_of(refs);
  want.backward();
  expect_close(full(loss), want.detach(), what + " loss");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!refs[i].requires_grad()) continue;
    ASSERT_TRUE(ins[i].grad().defined() && is_dtensor(ins[i].grad())) << what << " input " << i;
    expect_close(full(ins[i].grad()), refs[i].grad(), what + " grad " + std::to_string(i));
  }
}

TEST(RaggedGrad, LossesBackwardIntoRaggedInputs) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [n](const DeviceMesh& mesh) {
      for (const auto& shape : shapes()) {
        const Placements rs = ragged_of(shape, n);
        const std::string what = to_string(rs) + " " + std::to_string(shape.size()) + "-D on " +
                                 std::to_string(n);
        const at::Tensor X = global_a(shape), W = global_b(shape), T = global_b(shape) * 0.5 - 1;
        auto ragged_x = [&] { return make(X, mesh, rs).as_tensor().requires_grad_(); };
        auto ref = [](const at::Tensor& t) { return t.clone().requires_grad_(); };
        // The gradient's layout: ragged where the backward meets a ragged operand, Replicate
        // where only Replicate values reach it (sum's expand times R).
        const Placements R = {Replicate()};
        // (x * w).sum(), w Replicate (a gradient for both).
        const at::Tensor x1 = ragged_x(), w1 = make(W, mesh, R).as_tensor().requires_grad_();
        expect_grads("(x*w).sum() " + what, {x1, w1}, {ref(X), ref(W)},
                     [](const std::vector<at::Tensor>& t) { return (t[0] * t[1]).sum(); });
        EXPECT_EQ(as_dtensor(x1.grad()).placements(), R) << what;
        EXPECT_EQ(as_dtensor(w1.grad()).placements(), rs) << what;
        // ((x - t)^2).mean(), t plain.
        const at::Tensor x2 = ragged_x();
        expect_grads("((x-t)^2).mean() " + what, {x2, T}, {ref(X), T},
                     [](const std::vector<at::Tensor>& t) { return (t[0] - t[1]).pow(2).mean(); });
        EXPECT_EQ(as_dtensor(x2.grad()).placements(), rs) << what;
        // x.pow(2).sum() + (x * 3).sum(): an R and a ragged gradient accumulated.
        expect_grads("x.pow(2).sum() + (x*3).sum() " + what, {ragged_x()}, {ref(X)},
                     [](const std::vector<at::Tensor>& t) { return t[0].pow(2).sum() + (t[0] * 3).sum(); });
        // (x * x).sum() and sum() alone (an expand of the 0-dim gradient, Replicate).
        expect_grads("(x*x).sum() " + what, {ragged_x()}, {ref(X)},
                     [](const std::vector<at::Tensor>& t) { return (t[0] * t[0]).sum(); });
        const at::Tensor x3 = ragged_x();
        expect_grads("x.sum() " + what, {x3}, {ref(X)},
                     [](const std::vector<at::Tensor>& t) { return t[0].sum(); });
        EXPECT_EQ(as_dtensor(x3.grad()).placements(), R) << what;
        // Two ragged inputs of the same layout: both gradients ragged.
        const at::Tensor a = ragged_x(), b = make(W, mesh, rs).as_tensor().requires_grad_();
        expect_grads("(a*b).sum() " + what, {a, b}, {ref(X), ref(W)},
                     [](const std::vector<at::Tensor>& t) { return (t[0] * t[1]).sum(); });
        EXPECT_EQ(as_dtensor(a.grad()).layout(), as_dtensor(a).layout()) << what;
        EXPECT_EQ(as_dtensor(b.grad()).layout(), as_dtensor(b).layout()) << what;
      }
    });
}

// A 2x2 mesh: RaggedShard on one mesh dim, Replicate on the other (the ranks of a ragged
// coordinate share its interval): Replicate and plain operands cut locally, gradients exact.
TEST(RaggedGrad, TwoByTwoMesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    for (const Placements& rs : std::vector<Placements>{{RaggedShard({0}, {1, 2}), Replicate()},
                                                        {Replicate(), RaggedShard({0}, {2, 1})}}) {
      const std::string what = to_string(rs);
      const at::Tensor X = global_a({6, 4}), B = global_b({6, 4}), V = global_b({4});
      const at::Tensor x = make(X, mesh, rs).as_tensor().requires_grad_();
      const at::Tensor r = make(B, mesh, {Replicate(), Replicate()}).as_tensor();
      at::Tensor y;
      EXPECT_EQ(bytes_of(mesh, [&] { y = (x + r) * V; }), 0) << what;
      EXPECT_EQ(as_dtensor(y).layout(), as_dtensor(x).layout()) << what;
      expect_close(full(y), (X + B) * V, what);
      (y * x).sum().backward();
      const at::Tensor q = X.clone().requires_grad_();
      (((q + B) * V) * q).sum().backward();
      expect_close(full(x.grad()), q.grad(), "grad " + what);
    }
  });
}

// The gradient of a Replicate operand that broadcasts to the ragged shape ([4] beside a ragged
// [6,4]) is a sum over the broadcast dims of a ragged tensor: refused with the reduction's
// message (reductions over some dims of a ragged tensor stay fail-closed); its forward works.
TEST(RaggedGrad, BroadcastOperandGradientIsRefused) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    const at::Tensor w = make(global_b({4}), mesh, {Replicate()}).as_tensor().requires_grad_();
    const std::string m = error_of<NotImplementedError>([&] { (x * w).sum().backward(); });
    EXPECT_NE(m.find("aten::sum.dim_IntList(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                     "shape=[6,4]): a RaggedShard DTensor reduces only over all dims (fail-closed)"),
              std::string::npos) << m;
  });
}

/// 3 steps of `make_opt` on loss ((p * X).sum(1) - y)^2 .mean() with a ragged p [6] and plain
/// X [5,6], y [5], against the single-device run; `clip` clips the gradient norm first.
void train(int64_t n, const std::string& name,
           const std::function<std::unique_ptr<torch::optim::Optimizer>(at::Tensor)>& make_opt,
           bool clip) {
  run_on_mesh({n}, [&](const DeviceMesh& mesh) {
    const at::Tensor P = global_a({6}) * 0.3, X = global_b({5, 6}) - 1.0, Y = global_a({5});
    const Placements rs = ragged_of({6}, n);
    at::Tensor p = make(P, mesh, rs).as_tensor().requires_grad_();
    const Layout layout = as_dtensor(p).layout();
    at::Tensor q = P.clone().requires_grad_();
    auto og = make_opt(p);
    auto ow = make_opt(q);
    auto loss_of = [&](const at::Tensor& w) { return ((w * X).sum(1) - Y).pow(2).mean(); };
    for (int s = 0; s < 3; ++s) {
      const std::string what = name + " step " + std::to_string(s + 1) + " on " + std::to_string(n);
      og->zero_grad();
      ow->zero_grad();
      at::Tensor loss;
      double got_norm = 0, want_norm = 0;
      const std::string err = message_of([&] {
        loss = loss_of(p);
        loss.backward();
        if (clip) got_norm = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{p}, 0.5);
        og->step();
      });
      ASSERT_EQ(err, "<no error>") << what;
      const at::Tensor want = loss_of(q);
      want.backward();
      if (clip) want_norm = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{q}, 0.5);
      ow->step();
      expect_close(full(loss), want.detach(), what + " loss");
      expect_close(full(p.grad()), q.grad(), what + " grad");
      EXPECT_NEAR(got_norm, want_norm, 1e-9) << what;
      EXPECT_EQ(as_dtensor(p).layout(), layout) << what;
      expect_close(full(p), q.detach(), what + " param");
    }
  });
}

TEST(RaggedGrad, TrainingLoopEqualsOneDevice) {
  for (int64_t n : {2, 4}) {
    train(n, "SGD momentum", [](at::Tensor p) {
      return std::make_unique<torch::optim::SGD>(std::vector<at::Tensor>{p},
                                                 torch::optim::SGDOptions(0.1).momentum(0.9));
    }, false);
    train(n, "AdamW", [](at::Tensor p) {
      return std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{p},
                                                   torch::optim::AdamWOptions(0.05).weight_decay(0.1));
    }, false);
    train(n, "AdamW clip_grad_norm_", [](at::Tensor p) {
      return std::make_unique<torch::optim::AdamW>(std::vector<at::Tensor>{p},
                                                   torch::optim::AdamWOptions(0.05));
    }, true);
  }
}

// Full reductions of a ragged tensor with the dims given explicitly (what max() and
// clip_grad_norm_'s inf norm pass) and keepdim: the flat local is reduced over every dim.
TEST(RaggedGrad, FullReductionsWithExplicitDims) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [n](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({6, 4}) * at::cos(at::arange(24, at::kDouble)).view({6, 4});
      const at::Tensor x = make(X, mesh, ragged_of({6, 4}, n)).as_tensor();
      expect_close(full(x.max()), X.max(), "max()");
      expect_close(full(x.min()), X.min(), "min()");
      expect_close(full(x.amax({0, 1})), X.amax({0, 1}), "amax({0, 1})");
      expect_close(full(x.amin({-1, 0}, true)), X.amin({-1, 0}, true), "amin keepdim");
      expect_close(full(x.sum({0, 1})), X.sum({0, 1}), "sum({0, 1})");
      expect_close(full(x.sum({1, 0}, true)), X.sum({1, 0}, true), "sum keepdim");
    });
}

// clip_grad_norm_ of ragged gradients from a backward ((a * a * b).sum(), a and b ragged), ord 2
// and inf, clipping (max_norm 0.5) and not (1e3): the norm and the gradients equal one device's.
TEST(RaggedGrad, ClipGradNormOfRaggedGradients) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [n](const DeviceMesh& mesh) {
      const Placements rs = ragged_of({6, 4}, n);
      const at::Tensor X = global_a({6, 4}), B = global_b({6, 4});
      for (double ord : {2.0, std::numeric_limits<double>::infinity()})
        for (double max_norm : {0.5, 1e3}) {
          const std::string what = "ord " + std::to_string(ord) + " max_norm " + std::to_string(max_norm);
          at::Tensor a = make(X, mesh, rs).as_tensor().requires_grad_();
          at::Tensor b = make(B, mesh, rs).as_tensor().requires_grad_();
          (a * a * b).sum().backward();
          at::Tensor qa = X.clone().requires_grad_(), qb = B.clone().requires_grad_();
          (qa * qa * qb).sum().backward();
          EXPECT_EQ(as_dtensor(a.grad()).layout(), as_dtensor(a).layout()) << what;
          const double got = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{a, b}, max_norm, ord);
          const double want = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{qa, qb}, max_norm, ord);
          EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, want)) << what;
          expect_close(full(a.grad()), qa.grad(), what + " a");
          expect_close(full(b.grad()), qb.grad(), what + " b");
        }
    });
}

}  // namespace
}  // namespace hyper
