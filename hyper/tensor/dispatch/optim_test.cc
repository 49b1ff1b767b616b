// torch::optim on DTensor tensors: SGD (momentum, dampening, nesterov,
// weight_decay), Adam and AdamW (weight_decay, amsgrad) step unmodified on DTensor parameters;
// after each of 3 steps the parameters and the optimizer state (momentum_buffer, exp_avg,
// exp_avg_sq, max_exp_avg_sq, step) equal the same optimizer on the full tensors on one device,
// for Shard(0) (even and uneven), Shard(1), Replicate and RaggedShard parameters, gradients of
// the parameter's layout or another (Partial included), fixed or from a real backward, on 2 and
// 4 ranks (threads) and a 2x2 mesh. Also: gradient accumulation over two backward passes,
// zero_grad, the optimizer's pointwise ops (sqrt, addcmul, addcdiv, maximum, max.out) on every
// layout combination, and plain tensors beside DTensors taken as Replicate.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/copied_view.h"
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

namespace optim = torch::optim;

// ---------------------------------------------------------------------------------------------
// The optimizer's pointwise ops on every layout combination.

std::vector<Placements> catalogue() {
  return {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("avg")}, {Partial("max")}};
}

using Ternary = std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

void ternary_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat) {
  const std::vector<std::pair<std::string, Ternary>> ops = {
      {"addcmul", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
         return at::addcmul(a, b, c, 0.5);
       }},
      {"addcdiv", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
         return at::addcdiv(a, b, c, -2);
       }},
      {"addcmul_", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
         at::Tensor x = a.clone();
         x.addcmul_(b, c, 0.5);
         return x;
       }},
      {"addcdiv_", [](const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
         at::Tensor x = a.clone();
         x.addcdiv_(b, c, -2);
         return x;
       }},
  };
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6}), B = global_b({5, 6}) - 1, C = global_b({5, 6});
    for (const auto& pa : cat)
      for (const auto& pb : cat)
        for (const auto& pc : cat) {
          const at::Tensor a = make(A, mesh, pa).as_tensor(), b = make(B, mesh, pb).as_tensor(),
                           c = make(C, mesh, pc).as_tensor();
          for (const auto& [name, f] : ops) {
            const std::string what = name + " " + to_string(pa) + " " + to_string(pb) + " " +
                                     to_string(pc);
            at::Tensor y;
            const bool inplace = name.back() == '_';
            // An in-place op keeps self's layout; a Partial(sum) self whose linear operand is
            // another Partial (P(avg), P(max)) cannot keep it: refused (ErrorPaths below).
            const bool refused = inplace && pa[0] == Partial() && pb[0].is_partial() &&
                                 pb[0] != Partial() &&
                                 (name == "addcdiv_" || (pc[0].is_partial() && pc[0] != Partial()));
            if (refused) continue;
            if (inplace && pa[0].is_partial() && pa[0] != Partial()) continue;  // below
            try {
              y = f(a, b, c);
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
              continue;
            }
            ASSERT_TRUE(is_dtensor(y)) << what;
            expect_close(full(y), f(A, B, C), what);
            if (inplace) {
              EXPECT_EQ(as_dtensor(y).placements(), as_dtensor(a).placements()) << what;
            }
          }
        }
  });
}

TEST(DTensorOptimOps, AddcmulAddcdivEveryTripleOn2Ranks) { ternary_cases({2}, catalogue()); }
TEST(DTensorOptimOps, AddcmulAddcdivEveryTripleOn4RanksUneven) { ternary_cases({4}, catalogue()); }

// Where the result stays Partial and where a Partial operand is reduced first.
TEST(DTensorOptimOps, AddcmulAddcdivPartialPlacements) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6}), B = global_b({4, 6}) - 1, C = global_b({4, 6});
    auto t = [&](const at::Tensor& g, const Placement& p) { return make(g, mesh, {p}).as_tensor(); };
    auto placement = [](const at::Tensor& y) { return as_dtensor(y).placements()[0]; };
    const Placement P = Partial(), R = Replicate();
    // self + P*R: Partial kept (self made Partial locally); P*P: one factor reduced.
    EXPECT_EQ(placement(at::addcmul(t(A, R), t(B, P), t(C, R))), P);
    EXPECT_EQ(placement(at::addcmul(t(A, P), t(B, P), t(C, P))), P);
    EXPECT_EQ(placement(at::addcmul(t(A, P), t(B, R), t(C, R))), P);
    EXPECT_EQ(placement(at::addcmul(t(A, R), t(B, R), t(C, P))), P);
    // addcdiv is linear in tensor1 only: a Partial divisor is reduced.
    EXPECT_EQ(placement(at::addcdiv(t(A, R), t(B, R), t(C, P))), R);
    EXPECT_EQ(placement(at::addcdiv(t(A, P), t(B, R), t(C, P))), P);
    // A P(max) self is reduced first, so is everything else.
    EXPECT_EQ(placement(at::addcmul(t(A, Partial("max")), t(B, P), t(C, R))), R);
    // Factors of different sizes: the smaller Partial is reduced (sharding_rule_test.cc), the
    // result stays Partial.
    const at::Tensor S = global_b({6});
    for (bool swap : {false, true}) {
      const at::Tensor y = swap ? at::addcmul(t(A, R), t(B, P), t(S, P), 0.5)
                                : at::addcmul(t(A, R), t(S, P), t(B, P), 0.5);
      EXPECT_EQ(placement(y), P);
      expect_close(full(y), at::addcmul(A, S, B, 0.5), swap ? "R P[4,6] P[6]" : "R P[6] P[4,6]");
    }
    // Values of the kept-Partial cases.
    expect_close(full(at::addcmul(t(A, P), t(B, P), t(C, P), 3)), at::addcmul(A, B, C, 3), "P P P");
    expect_close(full(at::addcdiv(t(A, P), t(B, P), t(C, P), 3)), at::addcdiv(A, B, C, 3), "P P P /");
  });
}

TEST(DTensorOptimOps, SqrtMaximumAndMaxOut) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor A = global_b({5, 6}), B = global_b({5, 6}).flip(1);
      for (const auto& pa : catalogue()) {
        const std::string w = to_string(pa);
        const at::Tensor a = make(A, mesh, pa).as_tensor();
        expect_close(full(a.sqrt()), A.sqrt(), "sqrt " + w);
        if (!pa[0].is_partial()) {
          at::Tensor c = make(A, mesh, pa).as_tensor();
          c.sqrt_();
          expect_close(full(c), A.sqrt(), "sqrt_ " + w);
        }
        for (const auto& pb : catalogue()) {
          const std::string what = w + " " + to_string(pb);
          const at::Tensor b = make(B, mesh, pb).as_tensor();
          expect_close(full(at::maximum(a, b)), at::maximum(A, B), "maximum " + what);
          expect_close(full(at::max(a, b)), at::max(A, B), "max.other " + what);
          if (pa[0].is_partial()) continue;  // out keeps its layout: not a Partial one here
          // max_out into one of its inputs (what Adam's amsgrad does): out's layout kept.
          at::Tensor out = make(A, mesh, pa).as_tensor();
          at::max_out(out, out, b);
          expect_close(full(out), at::max(A, B), "max_out " + what);
          EXPECT_EQ(as_dtensor(out).placements(), pa) << what;
          at::Tensor out2 = make(B, mesh, pa).as_tensor();
          at::maximum_out(out2, a, b);
          expect_close(full(out2), at::maximum(A, B), "maximum_out " + what);
        }
      }
    });
}

// The _foreach_* ops (torch.optim's foreach paths, clip_grad_norm_'s foreach norm): ATen's
// per-tensor loops, each element's op through its rule, on a list mixing layouts; an element
// whose op is refused raises that op's refusal.
TEST(DTensorOptimOps, ForeachOpsRunEachElementsRule) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const std::vector<Placements> lays = {{Shard(0)}, {Replicate()}, {Shard(1)}};
      std::vector<at::Tensor> xs, ys, Xs, Ys;
      for (size_t i = 0; i < lays.size(); ++i) {
        Xs.push_back(global_b({5, 6}) + static_cast<double>(i));
        Ys.push_back(global_a({5, 6}).flip(0));
        xs.push_back(make(Xs[i], mesh, lays[i]).as_tensor());
        ys.push_back(make(Ys[i], mesh, lays[(i + 1) % lays.size()]).as_tensor());
      }
      const std::vector<at::Tensor> sums = at::_foreach_add(xs, ys, 0.5);
      const std::vector<at::Tensor> norms = at::_foreach_norm(xs, 2);
      at::_foreach_addcmul_(xs, ys, ys, 0.25);
      at::_foreach_mul_(xs, at::scalar_tensor(2.0, at::kDouble));
      const std::vector<at::Tensor> roots = at::_foreach_sqrt(xs);
      for (size_t i = 0; i < lays.size(); ++i) {
        const std::string w = to_string(lays[i]) + " element " + std::to_string(i);
        expect_close(full(sums[i]), Xs[i] + 0.5 * Ys[i], "_foreach_add " + w);
        expect_close(full(norms[i]), at::linalg_vector_norm(Xs[i], 2), "_foreach_norm " + w);
        const at::Tensor want = (Xs[i] + 0.25 * Ys[i] * Ys[i]) * 2.0;
        expect_close(full(xs[i]), want, "_foreach_addcmul_ then _foreach_mul_ " + w);
        EXPECT_EQ(as_dtensor(xs[i]).placements(), lays[i]) << w;
        expect_close(full(roots[i]), want.sqrt(), "_foreach_sqrt " + w);
      }
      // An in-place sqrt of a Partial element is refused by sqrt_'s rule.
      std::vector<at::Tensor> partial = {make(Xs[0], mesh, {Partial()}).as_tensor()};
      const std::string m = error_of<NotImplementedError>([&] { at::_foreach_sqrt_(partial); });
      EXPECT_NE(m.find("aten::sqrt_(arg 0: mesh=[" + std::to_string(mesh.size()) +
                       "] placements=[P(sum)] shape=[5,6]): in-place op would change argument "
                       "0's P(sum)"), std::string::npos) << m;
    });
}

TEST(DTensorOptimOps, ErrorPaths) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6}), B = global_b({4, 6});
    at::Tensor p = make(A, mesh, {Partial()}).as_tensor();
    const at::Tensor avg = make(B, mesh, {Partial("avg")}).as_tensor();
    const at::Tensor r = make(B, mesh, {Replicate()}).as_tensor();
    // self P(sum) += v * t1 / t2 with t1 P(avg): no operand can carry the P(sum) term.
    std::string m = error_of<NotImplementedError>([&] { p.addcdiv_(avg, r); });
    EXPECT_NE(m.find("aten::addcdiv_(arg 0: mesh=[2] placements=[P(sum)] shape=[4,6]; arg 1: "
                     "mesh=[2] placements=[P(avg)] shape=[4,6]; arg 2: mesh=[2] placements=[R] "
                     "shape=[4,6]): in-place op would change argument 0's P(sum) on mesh dim 0"),
              std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { p.sqrt_(); });
    EXPECT_NE(m.find("aten::sqrt_(arg 0: mesh=[2] placements=[P(sum)] shape=[4,6]): in-place op "
                     "would change argument 0's P(sum)"),
              std::string::npos) << m;
    // max_out into a plain tensor from DTensor inputs: refused by copy_.
    at::Tensor plain = at::zeros({4, 6}, at::kDouble);
    m = error_of<NotImplementedError>([&] { at::max_out(plain, r, r); });
    EXPECT_NE(m.find("aten::copy_(arg 0: plain tensor shape=[4,6]; arg 1: mesh=[2] "
                     "placements=[R] shape=[4,6]): in-place op on a plain tensor with a DTensor "
                     "operand"),
              std::string::npos) << m;
    expect_close(full(p), A, "unchanged after the refusals");
  });
}

// ---------------------------------------------------------------------------------------------
// Plain tensors beside DTensors are Replicate (API.md).

TEST(DTensorPlainOperand, ElementwiseTreatsPlainAsReplicate) {
  using Binary = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  const std::vector<std::pair<std::string, Binary>> ops = {
      {"add", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b, 0.5); }},
      {"sub", [](const at::Tensor& a, const at::Tensor& b) { return a - b; }},
      {"mul", [](const at::Tensor& a, const at::Tensor& b) { return a * b; }},
      {"div", [](const at::Tensor& a, const at::Tensor& b) { return a / b; }},
      {"rdiv", [](const at::Tensor& a, const at::Tensor& b) { return b / (a * a + 1); }},
      {"maximum", [](const at::Tensor& a, const at::Tensor& b) { return at::maximum(a, b); }},
      {"addcmul", [](const at::Tensor& a, const at::Tensor& b) { return at::addcmul(a, b, b, 2); }},
      {"addcmul plain self", [](const at::Tensor& a, const at::Tensor& b) {
         return at::addcmul(b, a, b, 2);
       }},
      {"addcdiv", [](const at::Tensor& a, const at::Tensor& b) { return at::addcdiv(b, a, b); }},
  };
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      // Plain shapes: the global shape, broadcast ones, and one that broadcasts the DTensor up.
      for (const std::vector<int64_t>& sb :
           {std::vector<int64_t>{5, 6}, {1, 6}, {5, 1}, {6}, {3, 5, 6}}) {
        const at::Tensor B = global_b(sb);
        for (const auto& pa : catalogue()) {
          const at::Tensor a = make(A, mesh, pa).as_tensor();
          for (const auto& [name, f] : ops) {
            const std::string what = name + " " + to_string(pa) + " plain " + shape_to_string(sb);
            at::Tensor y;
            try {
              y = f(a, B);
            } catch (const std::exception& e) {
              ADD_FAILURE() << what << ": " << e.what();
              continue;
            }
            ASSERT_TRUE(is_dtensor(y)) << what;
            expect_close(full(y), f(A, B), what);
            expect_close(full(f(B, a)), f(B, A), what + " (swapped)");
          }
          // In-place on the DTensor with a plain operand: the DTensor's layout is kept.
          if (sb.size() <= 2 && !(pa[0].is_partial() && pa[0].reduce_op() == "max")) {
            at::Tensor c = make(A, mesh, pa).as_tensor();
            c.add_(B).mul_(B);
            expect_close(full(c), (A + B) * B, "add_ mul_ plain " + to_string(pa));
            EXPECT_EQ(as_dtensor(c).placements(), pa);
          }
        }
      }
      // On a Shard target the plain operand is sliced locally (no communication): the output
      // keeps the Shard, and a uneven/empty shard (4 ranks: rows 2,2,1,0) is fine.
      const at::Tensor s = make(A, mesh, {Shard(0)}).as_tensor() * global_b({5, 6});
      EXPECT_EQ(as_dtensor(s).placements()[0], Shard(0));
      EXPECT_EQ(as_dtensor(s).to_local().sizes(), make(A, mesh, {Shard(0)}).to_local().sizes());
    });
}

// On a 2x2 mesh: a Shard on one mesh dim and a Partial on the other (the plain operand is
// sliced and zeroed off coordinate 0 of the Partial dim at once).
TEST(DTensorPlainOperand, ElementwiseOn2x2Mesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    for (const Placements& pa : std::vector<Placements>{{Shard(0), Partial()}, {Partial(), Shard(1)},
                                                         {Replicate(), Partial()}, {Shard(1), Shard(0)}})
      for (const std::vector<int64_t>& sb : {std::vector<int64_t>{5, 6}, {1, 6}, {6}}) {
        const std::string what = to_string(pa) + " plain " + shape_to_string(sb);
        const at::Tensor B = global_b(sb);
        const at::Tensor a = make(A, mesh, pa).as_tensor();
        expect_close(full(a + B), A + B, "add " + what);
        expect_close(full(B - a * B), B - A * B, "sub mul " + what);
        expect_close(full(at::addcmul(B, a, B, 2)), at::addcmul(B, A, B, 2), "addcmul " + what);
        at::Tensor c = make(A, mesh, pa).as_tensor();
        c.add_(B);
        expect_close(full(c), A + B, "add_ " + what);
        EXPECT_EQ(as_dtensor(c).placements(), pa) << what;
      }
  });
}

TEST(DTensorPlainOperand, MatmulTreatsPlainAsReplicate) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6}), B = global_b({6, 3}), bias = global_b({3});
    for (const auto& pa : catalogue()) {
      const std::string what = to_string(pa);
      const at::Tensor a = make(A, mesh, pa).as_tensor();
      expect_close(full(at::mm(a, B)), at::mm(A, B), "mm(dt, plain) " + what);
      expect_close(full(at::addmm(bias, a, B)), at::addmm(bias, A, B), "addmm plain bias " + what);
      const at::Tensor bt = make(B, mesh, pa[0].is_shard() ? Placements{Shard(1 - pa[0].dim())} : pa)
                                .as_tensor();
      expect_close(full(at::mm(A, bt)), at::mm(A, B), "mm(plain, dt) " + what);
      expect_close(full(at::addmm(bias, A, bt)), at::addmm(bias, A, B), "addmm(plain, plain, dt) " + what);
    }
    // A S(1) x plain: the plain operand is sliced to S(0) and the result is P(sum), no gather.
    const at::Tensor y = at::mm(make(A, mesh, {Shard(1)}).as_tensor(), B);
    EXPECT_EQ(as_dtensor(y).placements()[0], Partial());
  });
}

// A plain operand that requires grad gets a DTensor gradient (autograd's formulas run on the
// DTensor outputs): its full tensor is the single-device gradient (x S(0): P(sum)).
TEST(DTensorPlainOperand, PlainLeafGetsADTensorGradient) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6}), Wt = global_b({6, 3});
    for (const auto& px : catalogue()) {
      const std::string what = to_string(px);
      const at::Tensor x = make(X, mesh, px).as_tensor();
      at::Tensor b = global_b({6}).requires_grad_(), w = Wt.clone().requires_grad_();
      (at::mm(x * b, w) * 2).sum().backward();
      at::Tensor qb = global_b({6}).requires_grad_(), qw = Wt.clone().requires_grad_();
      (at::mm(X * qb, qw) * 2).sum().backward();
      ASSERT_TRUE(is_dtensor(b.grad()) && is_dtensor(w.grad())) << what;
      expect_close(full(b.grad()), qb.grad(), "plain b grad " + what);
      expect_close(full(w.grad()), qw.grad(), "plain w grad " + what);
    }
  });
}

TEST(DTensorPlainOperand, RefusedCases) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    // In-place on a plain tensor with a DTensor operand stays refused (plain with dims too).
    at::Tensor plain = at::zeros({4, 6}, at::kDouble);
    std::string m = error_of<NotImplementedError>([&] { plain.add_(a); });
    EXPECT_NE(m.find("aten::add_.Tensor(arg 0: plain tensor shape=[4,6]; arg 1: mesh=[2] "
                     "placements=[S(0)] shape=[4,6]): in-place op on a plain tensor with a "
                     "DTensor operand"),
              std::string::npos) << m;
    EXPECT_TRUE(at::equal(plain, at::zeros({4, 6}, at::kDouble)));
    // A plain tensor beside a RaggedShard DTensor is cut to its flat interval (ragged_grad_test.cc);
    // a 0-dim one is a scalar.
    const at::Tensor rg = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    expect_close(full(rg * global_b({6, 4})), global_a({6, 4}) * global_b({6, 4}), "ragged * plain");
    expect_close(full(rg * at::scalar_tensor(3.0, at::kDouble)), global_a({6, 4}) * 3, "ragged * 0-dim");
    // Shapes that do not broadcast are a ValueError naming both.
    m = error_of<ValueError>([&] { (void)(a + global_b({4, 5})); });
    EXPECT_NE(m.find("shapes do not broadcast (size 5 against 6 at dim 1)"), std::string::npos) << m;
  });
}

// ---------------------------------------------------------------------------------------------
// Optimizers.

using OptFactory = std::function<std::unique_ptr<optim::Optimizer>(const std::vector<at::Tensor>&)>;

std::vector<std::pair<std::string, OptFactory>> optimizers() {
  return {
      {"SGD", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::SGD>(ps, optim::SGDOptions(0.1));
       }},
      {"SGD momentum dampening weight_decay", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::SGD>(
             ps, optim::SGDOptions(0.1).momentum(0.9).dampening(0.2).weight_decay(0.05));
       }},
      {"SGD nesterov weight_decay", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::SGD>(
             ps, optim::SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(0.05));
       }},
      {"Adam", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::Adam>(ps, optim::AdamOptions(0.05));
       }},
      {"Adam weight_decay amsgrad", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::Adam>(
             ps, optim::AdamOptions(0.05).weight_decay(0.1).amsgrad(true));
       }},
      {"AdamW", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions(0.05));
       }},
      {"AdamW weight_decay amsgrad", [](const std::vector<at::Tensor>& ps) {
         return std::make_unique<optim::AdamW>(
             ps, optim::AdamWOptions(0.05).weight_decay(0.1).amsgrad(true));
       }},
  };
}

void expect_tensor_state(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.defined(), want.defined()) << what;
  if (!want.defined()) return;
  expect_close(is_dtensor(got) ? full(got) : got, want, what);  // plain: a plain gradient's clone
}

/// Adam's or AdamW's state (the same fields) of a DTensor parameter against a plain one's.
template <class State>
void expect_adam_state(const State* g, const State& w, const std::string& what) {
  ASSERT_NE(g, nullptr) << what;
  EXPECT_EQ(g->step(), w.step()) << what;
  EXPECT_TRUE(is_dtensor(g->exp_avg()) && is_dtensor(g->exp_avg_sq())) << what;  // zeros_like(p)
  expect_tensor_state(g->exp_avg(), w.exp_avg(), what + " exp_avg");
  expect_tensor_state(g->exp_avg_sq(), w.exp_avg_sq(), what + " exp_avg_sq");
  expect_tensor_state(g->max_exp_avg_sq(), w.max_exp_avg_sq(), what + " max_exp_avg_sq");
}

/// The state of DTensor parameter `p` in `got` equals that of plain `q` in `want`.
void expect_state(optim::Optimizer& got, const at::Tensor& p, optim::Optimizer& want,
                  const at::Tensor& q, const std::string& what) {
  auto gi = got.state().find(p.unsafeGetTensorImpl());
  auto wi = want.state().find(q.unsafeGetTensorImpl());
  ASSERT_EQ(gi == got.state().end(), wi == want.state().end()) << what;
  if (wi == want.state().end()) return;
  if (auto* w = dynamic_cast<optim::SGDParamState*>(wi->second.get())) {
    auto* g = dynamic_cast<optim::SGDParamState*>(gi->second.get());
    ASSERT_NE(g, nullptr) << what;
    expect_tensor_state(g->momentum_buffer(), w->momentum_buffer(), what + " momentum_buffer");
  } else if (auto* w = dynamic_cast<optim::AdamParamState*>(wi->second.get())) {
    expect_adam_state(dynamic_cast<optim::AdamParamState*>(gi->second.get()), *w, what);
  } else if (auto* w = dynamic_cast<optim::AdamWParamState*>(wi->second.get())) {
    expect_adam_state(dynamic_cast<optim::AdamWParamState*>(gi->second.get()), *w, what);
  } else {
    ADD_FAILURE() << what << ": unknown state type";
  }
}

/// The gradient of step s (varied, with zeros and sign changes).
at::Tensor grad_of_step(const std::vector<int64_t>& shape, int s) {
  return global_b(shape) * (s + 1) - global_a(shape) * (0.5 * s) - 1.0;
}

/// 3 steps with fixed gradients of layout `grad_ps` (empty: a plain gradient) on a parameter of
/// layout `param_ps`.
void fixed_gradient_steps(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& shape,
                          const Placements& param_ps, const Placements& grad_ps) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor W = global_a(shape);
    for (const auto& [name, make_opt] : optimizers()) {
      const std::string what = name + " param " + to_string(param_ps) + " grad " + to_string(grad_ps);
      at::Tensor p = make(W, mesh, param_ps).as_tensor();
      p.set_requires_grad(true);
      const Layout layout = as_dtensor(p).layout();
      at::Tensor q = W.clone().requires_grad_();
      auto og = make_opt({p});
      auto ow = make_opt({q});
      for (int s = 0; s < 3; ++s) {
        const std::string w = what + " step " + std::to_string(s + 1);
        const at::Tensor G = grad_of_step(shape, s);
        p.mutable_grad() = grad_ps.empty() ? G.clone() : make(G, mesh, grad_ps).as_tensor();
        q.mutable_grad() = G.clone();
        try {
          og->step();
        } catch (const std::exception& e) {
          FAIL() << w << ": " << e.what();
        }
        ow->step();
        ASSERT_TRUE(is_dtensor(p)) << w;
        EXPECT_EQ(as_dtensor(p).layout(), layout) << w;
        expect_close(full(p), q.detach(), w + " param");
        expect_state(*og, p, *ow, q, w);
        // SGD's momentum buffer is a clone of the (weight-decayed) gradient: it keeps the
        // gradient's Partial (reduced in every update of the parameter, values exact).
        auto it = og->state().find(p.unsafeGetTensorImpl());
        if (it != og->state().end() && grad_ps == Placements{Partial()} &&
            param_ps == Placements{Replicate()})
          if (auto* st = dynamic_cast<optim::SGDParamState*>(it->second.get())) {
            EXPECT_EQ(as_dtensor(st->momentum_buffer()).placements(), grad_ps) << w;
          }
      }
    }
  });
}

TEST(DTensorOptim, FixedGradientsSameLayoutOn2Ranks) {
  fixed_gradient_steps({2}, {5, 6}, {Shard(0)}, {Shard(0)});  // uneven: rows 3, 2
  fixed_gradient_steps({2}, {4, 6}, {Shard(0)}, {Shard(0)});  // even
  fixed_gradient_steps({2}, {5, 6}, {Shard(1)}, {Shard(1)});
  fixed_gradient_steps({2}, {5, 6}, {Replicate()}, {Replicate()});
  fixed_gradient_steps({2}, {6, 4}, {RaggedShard({0}, {1, 2})}, {RaggedShard({0}, {1, 2})});
}
TEST(DTensorOptim, FixedGradientsSameLayoutOn4Ranks) {
  fixed_gradient_steps({4}, {5, 6}, {Shard(0)}, {Shard(0)});  // rows 2, 2, 1, 0
  fixed_gradient_steps({4}, {5, 8}, {Shard(1)}, {Shard(1)});
  fixed_gradient_steps({4}, {5, 6}, {Replicate()}, {Replicate()});
  fixed_gradient_steps({4}, {6, 4}, {RaggedShard({0}, {1, 2, 2, 1})}, {RaggedShard({0}, {1, 2, 2, 1})});
}
// A gradient of another layout: the in-place update redistributes it to the parameter's
// (a Partial gradient is reduced, never used per rank).
TEST(DTensorOptim, FixedGradientsOfAnotherLayout) {
  fixed_gradient_steps({2}, {5, 6}, {Replicate()}, {Partial()});
  fixed_gradient_steps({4}, {5, 6}, {Replicate()}, {Partial()});
  fixed_gradient_steps({4}, {5, 6}, {Replicate()}, {Partial("avg")});
  fixed_gradient_steps({4}, {5, 6}, {Shard(0)}, {Partial()});
  fixed_gradient_steps({4}, {5, 6}, {Shard(0)}, {Replicate()});
  fixed_gradient_steps({4}, {5, 6}, {Shard(1)}, {Shard(0)});
  fixed_gradient_steps({2}, {5, 6}, {Replicate()}, {Shard(1)});
}
// A plain gradient on a DTensor parameter is Replicate (sliced locally by the in-place
// updates); SGD's momentum buffer, its clone, stays plain.
TEST(DTensorOptim, FixedPlainGradients) {
  fixed_gradient_steps({4}, {5, 6}, {Shard(0)}, {});
  fixed_gradient_steps({2}, {5, 6}, {Replicate()}, {});
  fixed_gradient_steps({2, 2}, {5, 6}, {Shard(1), Shard(0)}, {});
}
TEST(DTensorOptim, FixedGradients2x2Mesh) {
  fixed_gradient_steps({2, 2}, {5, 6}, {Shard(0), Shard(1)}, {Shard(0), Shard(1)});
  fixed_gradient_steps({2, 2}, {5, 6}, {Shard(0), Replicate()}, {Shard(0), Partial()});
  fixed_gradient_steps({2, 2}, {5, 6}, {Replicate(), Replicate()}, {Partial(), Shard(1)});
}

/// loss = ((W x) * (W x)).sum() + (W * 0.5).sum(): W [5,4] a parameter of `pw`, x [4,3] of
/// `px`; 3 steps (zero_grad, forward, backward, step) against the single-device run.
void backward_steps(const std::vector<int64_t>& mesh_shape, const Placements& pw,
                    const Placements& px) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor W = global_a({5, 4}) * 0.3, X = global_b({4, 3});
    auto loss_of = [](const at::Tensor& w, const at::Tensor& x) {
      const at::Tensor y = at::mm(w, x);
      return (y * y).sum() + (w * 0.5).sum();
    };
    for (const auto& [name, make_opt] : optimizers()) {
      const std::string what = name + " W " + to_string(pw) + " x " + to_string(px);
      at::Tensor p = make(W, mesh, pw).as_tensor().requires_grad_();
      const Layout layout = as_dtensor(p).layout();
      const at::Tensor x = make(X, mesh, px).as_tensor();
      at::Tensor q = W.clone().requires_grad_();
      auto og = make_opt({p});
      auto ow = make_opt({q});
      for (int s = 0; s < 3; ++s) {
        const std::string w = what + " step " + std::to_string(s + 1);
        og->zero_grad();
        ow->zero_grad();
        at::Tensor loss;
        try {
          loss = loss_of(p, x);
          loss.backward();
        } catch (const std::exception& e) {
          FAIL() << w << ": " << e.what();
        }
        const at::Tensor want = loss_of(q, X);
        want.backward();
        expect_close(full(loss), want.detach(), w + " loss");
        ASSERT_TRUE(p.grad().defined() && is_dtensor(p.grad())) << w;
        expect_close(full(p.grad()), q.grad(), w + " grad");
        try {
          og->step();
        } catch (const std::exception& e) {
          FAIL() << w << ": " << e.what();
        }
        ow->step();
        EXPECT_EQ(as_dtensor(p).layout(), layout) << w;
        expect_close(full(p), q.detach(), w + " param");
        expect_state(*og, p, *ow, q, w);
      }
    }
  });
}

TEST(DTensorOptim, BackwardThenStepOn2Ranks) {
  for (const Placements& pw : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Replicate()}})
    for (const Placements& px : std::vector<Placements>{{Replicate()}, {Shard(1)}, {Shard(0)}})
      backward_steps({2}, pw, px);
}
// W Replicate with x S(1): the gradient of W arrives Partial(sum) (S(1) x S(0) contraction).
TEST(DTensorOptim, BackwardThenStepOn4RanksPartialGradient) {
  backward_steps({4}, {Replicate()}, {Shard(1)});
  backward_steps({4}, {Shard(0)}, {Shard(1)});  // uneven rows 2,2,1,0
  backward_steps({4}, {Shard(1)}, {Replicate()});
}

// A backward pass through a ragged parameter: sum's gradient arrives as a Replicate expand,
// which is cut to the ragged layout beside the ragged operand (ragged_grad_test.cc trains one).
TEST(DTensorOptim, BackwardThroughARaggedParameter) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const Placements rs = {RaggedShard({0}, {1, 2})};
    at::Tensor p = make(global_a({6, 4}), mesh, rs).as_tensor().requires_grad_();
    const at::Tensor c = make(global_b({6, 4}), mesh, rs).as_tensor();
    (p * c).sum().backward();
    EXPECT_EQ(as_dtensor(p.grad()).layout(), as_dtensor(p).layout());
    expect_close(full(p.grad()), global_b({6, 4}), "ragged grad");
  });
}

// Two parameters in one optimizer through at::linear (t + addmm): W [3,4] and bias [3] of the
// given layouts, x [5,4]; with x S(0) and W, bias Replicate (data parallel) both gradients
// arrive Partial(sum); with W S(0), bias S(0) (column parallel) they stay sharded.
TEST(DTensorOptim, LinearWeightAndBiasInOneOptimizer) {
  struct Case {
    Placements w, b, x;
  };
  const std::vector<Case> cases = {{{Replicate()}, {Replicate()}, {Shard(0)}},
                                   {{Shard(0)}, {Shard(0)}, {Replicate()}},
                                   {{Shard(1)}, {Replicate()}, {Shard(1)}}};
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor W = global_a({3, 4}) * 0.4, B = global_b({3}), X = global_b({5, 4}) - 1;
      for (const auto& c : cases)
        for (size_t k : {size_t{2}, size_t{4}, size_t{6}}) {  // SGD nesterov, Adam / AdamW amsgrad
          const auto& [name, make_opt] = optimizers()[k];
          const std::string what = name + " W " + to_string(c.w) + " b " + to_string(c.b) +
                                   " x " + to_string(c.x);
          at::Tensor w = make(W, mesh, c.w).as_tensor().requires_grad_();
          at::Tensor b = make(B, mesh, c.b).as_tensor().requires_grad_();
          const at::Tensor x = make(X, mesh, c.x).as_tensor();
          at::Tensor qw = W.clone().requires_grad_(), qb = B.clone().requires_grad_();
          auto og = make_opt({w, b});
          auto ow = make_opt({qw, qb});
          for (int s = 0; s < 3; ++s) {
            const std::string st = what + " step " + std::to_string(s + 1);
            og->zero_grad();
            ow->zero_grad();
            try {
              const at::Tensor y = at::linear(x, w, b);
              (y * y).sum().backward();
              og->step();
            } catch (const std::exception& e) {
              FAIL() << st << ": " << e.what();
            }
            const at::Tensor y = at::linear(X, qw, qb);
            (y * y).sum().backward();
            ow->step();
            expect_close(full(w), qw.detach(), st + " W");
            expect_close(full(b), qb.detach(), st + " bias");
            expect_state(*og, w, *ow, qw, st + " W");
            expect_state(*og, b, *ow, qb, st + " bias");
          }
        }
    });
}

// Gradient accumulation: two backward passes without zero_grad add up (AccumulateGrad), also
// when the passes give different layouts (Partial then Replicate and the other way round);
// zero_grad() drops the gradient, zero_grad(false) zeroes it in its layout.
TEST(DTensorOptim, GradientAccumulationAndZeroGrad) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor W = global_a({5, 4}) * 0.3, X = global_b({4, 3}), X2 = global_a({4, 3});
      auto loss_of = [](const at::Tensor& w, const at::Tensor& x) {
        const at::Tensor y = at::mm(w, x);
        return (y * y).sum();
      };
      const std::vector<std::pair<Placements, std::pair<Placements, Placements>>> cases = {
          {{Replicate()}, {{Shard(1)}, {Replicate()}}},  // P(sum) grad, then R grad
          {{Replicate()}, {{Replicate()}, {Shard(1)}}},  // R, then P(sum)
          {{Replicate()}, {{Shard(1)}, {Shard(1)}}},     // P, then P
          {{Shard(0)}, {{Replicate()}, {Shard(1)}}},
          {{Shard(1)}, {{Shard(0)}, {Replicate()}}},
      };
      for (const auto& [pw, pxs] : cases) {
        const std::string what = "W " + to_string(pw) + " x " + to_string(pxs.first) + " then " +
                                 to_string(pxs.second);
        at::Tensor p = make(W, mesh, pw).as_tensor().requires_grad_();
        at::Tensor q = W.clone().requires_grad_();
        auto og = optimizers()[4].second({p});  // Adam weight_decay amsgrad
        auto ow = optimizers()[4].second({q});
        for (int s = 0; s < 2; ++s) {
          const std::string w = what + " step " + std::to_string(s + 1);
          try {
            loss_of(p, make(X, mesh, pxs.first).as_tensor()).backward();
            loss_of(p, make(X2, mesh, pxs.second).as_tensor()).backward();
          } catch (const std::exception& e) {
            FAIL() << w << ": " << e.what();
          }
          loss_of(q, X).backward();
          loss_of(q, X2).backward();
          ASSERT_TRUE(is_dtensor(p.grad())) << w;
          expect_close(full(p.grad()), q.grad(), w + " accumulated grad");
          // The sum keeps the first pass's layout (the second is added in place): W R with
          // x S(1) gives a P(sum) gradient, with x R a Replicate one.
          if (pw[0].is_replicate() && s == 0) {
            EXPECT_EQ(as_dtensor(p.grad()).placements()[0],
                      pxs.first[0].is_shard() ? Placement(Partial()) : Placement(Replicate()))
                << w;
          }
          og->step();
          ow->step();
          expect_close(full(p), q.detach(), w + " param");
          expect_state(*og, p, *ow, q, w);
          if (s == 0) {
            // zero_grad(false): zeros in the gradient's own layout.
            const Layout gl = as_dtensor(p.grad()).layout();
            og->zero_grad(false);
            ow->zero_grad(false);
            ASSERT_TRUE(p.grad().defined()) << w;
            EXPECT_EQ(as_dtensor(p.grad()).layout(), gl) << w;
            expect_close(full(p.grad()), at::zeros_like(W), w + " zero_grad(false)");
          } else {
            og->zero_grad();
            EXPECT_FALSE(p.grad().defined()) << w;
          }
        }
      }
    });
}

// The same in real processes (2 ranks, gloo): Adam with amsgrad on a Replicate parameter whose
// gradient arrives Partial (x S(1)), 3 steps against the single-device optimizer.
TEST(DTensorOptim, ProcessesOn2Ranks) {
  comm::testing::run_processes(2, [](int, int n, const World& world) {
    const auto mesh = init_device_mesh(world, "cpu", {n});
    const at::Tensor W = global_a({5, 4}) * 0.3, X = global_b({4, 3});
    at::Tensor p = make(W, mesh, {Replicate()}).as_tensor().requires_grad_();
    at::Tensor q = W.clone().requires_grad_();
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    auto og = optimizers()[4].second({p});
    auto ow = optimizers()[4].second({q});
    for (int s = 0; s < 3; ++s) {
      og->zero_grad();
      ow->zero_grad();
      const at::Tensor y = at::mm(p, x);
      (y * y).sum().backward();
      if (!as_dtensor(p.grad()).placements()[0].is_partial())
        throw std::runtime_error("expected a Partial gradient");
      og->step();
      const at::Tensor z = at::mm(q, X);
      (z * z).sum().backward();
      ow->step();
      if (!at::allclose(full(p), q.detach(), 1e-6, 1e-9))
        throw std::runtime_error("parameter differs from the single-device Adam at step " +
                                 std::to_string(s + 1));
    }
  });
}

// torch::nn::utils::clip_grad_norm_, unmodified, on DTensor parameters whose gradients are
// sharded (even and uneven), Replicate and Partial: the returned total norm and the clipped
// gradients equal the single-device call on the full tensors, for ord 2, 1, inf and 3, with
// and without clipping (max_norm below and above the norm). What it calls: norm.Scalar (or
// abs + max for inf), stack of 0-dim norms, norm of the stack (or max), add/div by a scalar,
// clamp, mul_ of every gradient by the 0-dim coefficient, item().
TEST(DTensorOptim, ClipGradNormEqualsOneDevice) {
  struct Param {
    std::vector<int64_t> shape;
    Placements param, grad;
  };
  for (const std::vector<int64_t>& mesh_shape :
       {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const std::vector<Param> specs =
          mesh.ndim() == 1
              ? std::vector<Param>{{{7, 4}, {Shard(0)}, {Shard(0)}},
                                   {{3}, {Replicate()}, {Partial()}},
                                   {{4, 7}, {Shard(1)}, {Shard(1)}}}
              : std::vector<Param>{{{5, 4}, {Shard(0), Shard(1)}, {Shard(0), Shard(1)}},
                                   {{3}, {Replicate(), Replicate()}, {Partial(), Replicate()}}};
      for (double ord : {2.0, 1.0, std::numeric_limits<double>::infinity(), 3.0})
        for (double max_norm : {0.5, 1e3}) {
          const std::string what = "ord " + std::to_string(ord) + " max_norm " +
                                   std::to_string(max_norm) + " on " + std::to_string(mesh.size());
          std::vector<at::Tensor> params, refs;
          for (size_t i = 0; i < specs.size(); ++i) {
            const at::Tensor G = global_b(specs[i].shape) * (0.7 * (i + 1)) - 1.0;
            at::Tensor p = make(global_a(specs[i].shape), mesh, specs[i].param).as_tensor().requires_grad_();
            p.mutable_grad() = make(G, mesh, specs[i].grad).as_tensor();
            at::Tensor q = global_a(specs[i].shape).requires_grad_();
            q.mutable_grad() = G.clone();
            params.push_back(p);
            refs.push_back(q);
          }
          const double got = torch::nn::utils::clip_grad_norm_(params, max_norm, ord);
          const double want = torch::nn::utils::clip_grad_norm_(refs, max_norm, ord);
          EXPECT_NEAR(got, want, 1e-9 * std::max(1.0, std::abs(want))) << what;
          for (size_t i = 0; i < specs.size(); ++i)
            expect_close(full(params[i].grad()), refs[i].grad(), what + " grad " + std::to_string(i));
          // One parameter: the norm is not stacked.
          const at::Tensor G = global_b(specs[0].shape);
          at::Tensor p = make(global_a(specs[0].shape), mesh, specs[0].param).as_tensor().requires_grad_();
          p.mutable_grad() = make(G, mesh, specs[0].grad).as_tensor();
          at::Tensor q = global_a(specs[0].shape).requires_grad_();
          q.mutable_grad() = G.clone();
          EXPECT_NEAR(torch::nn::utils::clip_grad_norm_(p, max_norm, ord),
                      torch::nn::utils::clip_grad_norm_(q, max_norm, ord), 1e-9 * 10) << what;
          expect_close(full(p.grad()), q.grad(), what + " one parameter");
        }
    });
}

// Leaves made directly (`as_tensor(...).requires_grad_()`, no gradient hook) whose gradients
// are slices of a gradient sharded along the sliced dim (stack's backward unbinds it): each
// gradient is a copied view (a copy of its slice tied to autograd's temporary), and
// clip_grad_norm_'s `grad.data().mul_(coef)` writes through it. Norm, clipped gradients and
// an SGD step equal one device's, twice (the second backward accumulates into the clipped
// copied-view gradients), on 2 and 4 ranks.
TEST(DTensorOptim, ClipGradNormOnCopiedViewGradientsOfPlainLeaves) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({4, 6}), B = global_b({4, 6}), S = global_b({2, 4, 6}) + 0.5;
      at::Tensor a = make(A, mesh, {Replicate()}).as_tensor().requires_grad_();
      at::Tensor b = make(B, mesh, {Replicate()}).as_tensor().requires_grad_();
      const at::Tensor s = make(S, mesh, {Shard(0)}).as_tensor();
      at::Tensor ra = A.clone().requires_grad_(), rb = B.clone().requires_grad_();
      for (int step = 0; step < 2; ++step) {
        const std::string what = "n=" + std::to_string(mesh.size()) + " step " + std::to_string(step);
        (at::stack({a, b}) * s).pow(2).sum().backward();
        (at::stack({ra, rb}) * S).pow(2).sum().backward();
        if (step == 0) ASSERT_TRUE(is_copied_view(a.grad()) && is_copied_view(b.grad())) << what;
        const double got = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{a, b}, 0.5);
        const double want = torch::nn::utils::clip_grad_norm_(std::vector<at::Tensor>{ra, rb}, 0.5);
        EXPECT_NEAR(got, want, 1e-9 * want) << what;
        expect_close(full(a.grad() * 1), ra.grad(), what + " clipped gradient of a");
        expect_close(full(b.grad() * 1), rb.grad(), what + " clipped gradient of b");
        torch::optim::SGD(std::vector<at::Tensor>{a, b}, torch::optim::SGDOptions(0.1)).step();
        torch::optim::SGD(std::vector<at::Tensor>{ra, rb}, torch::optim::SGDOptions(0.1)).step();
        expect_close(full(a * 1), ra, what + " a after the step");
        expect_close(full(b * 1), rb, what + " b after the step");
      }
    });
}

}  // namespace
}  // namespace hyper
