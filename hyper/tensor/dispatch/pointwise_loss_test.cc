// The elementwise losses (pointwise_losses.h), tril / triu (dim_local_kernels.h) and the
// special functions of nn_rules.cc on DTensor tensors: values and every operand's gradient
// against the same op on the full tensors on one device (the oracle), on 2 and 4 ranks (even,
// uneven, an empty shard) and a 2x2 mesh, for R, S(0), S(1), P(sum) operands and plain ones;
// the layouts (tril keeps every layout, no bytes) and the refusals.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/loss.h>

#include <functional>
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
using dispatch_testing::bytes_of;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::make;

using Op = std::function<at::Tensor(const std::vector<at::Tensor>&)>;

/// `op` on one device (globals) and on DTensors of them in `ps` (an empty Placements: the
/// plain global): values, and the gradients of sum(out * W) for every operand.
void check(const DeviceMesh& mesh, const std::string& what, const Op& op,
           const std::vector<at::Tensor>& globals, const std::vector<Placements>& ps) {
  std::vector<at::Tensor> want_in, got_in;
  for (size_t i = 0; i < globals.size(); ++i) {
    want_in.push_back(globals[i].clone().requires_grad_());
    got_in.push_back((ps[i].empty() ? globals[i].clone() : make(globals[i], mesh, ps[i]).as_tensor())
                         .requires_grad_());
  }
  const at::Tensor want = op(want_in);
  const at::Tensor got = op(got_in);
  ASSERT_TRUE(is_dtensor(got)) << what;
  expect_close(full(got), want, what);
  const at::Tensor w = at::cos(at::arange(want.numel(), at::kDouble)).reshape(want.sizes()) + 0.5;
  (want * w).sum().backward();
  (got * (want.dim() == 0 ? w : make(w, mesh, Placements(mesh.ndim(), Replicate())).as_tensor()))
      .sum()
      .backward();
  for (size_t i = 0; i < globals.size(); ++i) {
    const at::Tensor g = got_in[i].grad();
    if (!want_in[i].grad().defined()) {  // an operand the op detaches (bce's target, weights)
      EXPECT_FALSE(g.defined()) << what << " grad " << i;
      continue;
    }
    ASSERT_TRUE(g.defined()) << what << " grad " << i;
    expect_close(is_dtensor(g) ? full(g) : g, want_in[i].grad(), what + " grad " + std::to_string(i));
  }
}

/// Values in (0.05, 0.95) (probabilities), in (-2, 3) (logits, regression values) and a target
/// in {-1, 1} (soft margin), of `shape`.
at::Tensor probs(const std::vector<int64_t>& shape) {
  return at::sigmoid(dispatch_testing::global_a(shape) * 1.1).clamp(0.05, 0.95);
}
at::Tensor values(const std::vector<int64_t>& shape, int k) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return (at::sin(at::arange(n, at::kDouble) * (0.7 + 0.3 * k) + k) * 2.5).reshape(shape);
}

struct Loss {
  std::string name;
  Op op;
  int inputs;  // 2 or 3 (a weight) or 4 (weight, pos_weight)
  bool prob_input = false;
};

std::vector<Loss> losses(int64_t reduction) {
  namespace F = torch::nn::functional;
  auto red = [reduction]() -> at::Reduction::Reduction {
    return static_cast<at::Reduction::Reduction>(reduction);
  };
  return {
      {"mse", [=](auto& in) { return at::mse_loss(in[0], in[1], red()); }, 2},
      {"smooth_l1(0.7)", [=](auto& in) { return at::smooth_l1_loss(in[0], in[1], red(), 0.7); }, 2},
      {"smooth_l1(0)", [=](auto& in) { return at::smooth_l1_loss(in[0], in[1], red(), 0.0); }, 2},
      {"huber(1.3)", [=](auto& in) { return at::huber_loss(in[0], in[1], red(), 1.3); }, 2},
      {"soft_margin", [=](auto& in) { return at::soft_margin_loss(in[0], at::sign(in[1]).detach(), red()); }, 2},
      {"bce_logits", [=](auto& in) {
         return at::binary_cross_entropy_with_logits(in[0], at::sigmoid(in[1]), {}, {}, red()); }, 2},
      {"bce_logits_w", [=](auto& in) {
         return at::binary_cross_entropy_with_logits(in[0], at::sigmoid(in[1]), in[2].detach(),
                                                    in[3].detach(), red()); }, 4},
      {"bce", [=](auto& in) { return at::binary_cross_entropy(in[0], at::sigmoid(in[1]).detach(), {}, red()); }, 2, true},
      {"bce_w", [=](auto& in) { return at::binary_cross_entropy(in[0], at::sigmoid(in[1]).detach(), in[2].detach(), red()); }, 3, true},
  };
}

void loss_cases(const DeviceMesh& mesh, const std::vector<int64_t>& shape,
                const std::vector<std::pair<Placements, Placements>>& cat) {
  for (int64_t reduction : {0, 1, 2})
    for (const Loss& l : losses(reduction))
      for (const auto& [a, b] : cat) {
        const std::string what = l.name + " reduction=" + std::to_string(reduction) + " " +
                                 to_string(a) + " x " + to_string(b) + " on " + mesh.to_string();
        std::vector<at::Tensor> g = {l.prob_input ? probs(shape) : values(shape, 0), values(shape, 1)};
        std::vector<Placements> ps = {a, b};
        if (l.inputs >= 3) {  // a weight broadcast along the rows (plain), a pos_weight (R)
          g.push_back(values({shape.back()}, 2).abs() + 0.1);
          ps.push_back({});
        }
        if (l.inputs == 4) {
          g.push_back(values({shape.back()}, 3).abs() + 0.5);
          ps.push_back(Placements(mesh.ndim(), Replicate()));
        }
        check(mesh, what, l.op, g, ps);
      }
}

TEST(PointwiseLosses, ValuesAndGradientsOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    loss_cases(mesh, {4, 6},
               {{{Replicate()}, {Replicate()}}, {{Shard(0)}, {Shard(0)}}, {{Shard(1)}, {Replicate()}},
                {{Shard(0)}, {Shard(1)}}, {{Partial()}, {Shard(0)}}, {{Shard(1)}, {}}});
  });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    loss_cases(mesh, {5, 6}, {{{Shard(0)}, {Shard(0)}}, {{Shard(1)}, {Partial()}}});
    loss_cases(mesh, {3, 2}, {{{Shard(0)}, {Replicate()}}});  // rank 3: an empty shard
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    loss_cases(mesh, {5, 7}, {{{Shard(0), Shard(1)}, {Shard(0), Shard(1)}}, {{Partial(), Shard(0)}, {Replicate(), Replicate()}}});
  });
}

TEST(PointwiseLosses, NnModulesAndKlDivAndErrors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = values({4, 6}, 0), y = values({4, 6}, 1);
    const at::Tensor dx = make(x, mesh, {Shard(0)}).as_tensor(), dy = make(y, mesh, {Shard(0)}).as_tensor();
    expect_close(full(torch::nn::MSELoss()(dx, dy)), torch::nn::MSELoss()(x, y), "MSELoss");
    expect_close(full(torch::nn::HuberLoss(torch::nn::HuberLossOptions().delta(0.5))(dx, dy)),
                 torch::nn::HuberLoss(torch::nn::HuberLossOptions().delta(0.5))(x, y), "HuberLoss");
    expect_close(full(torch::nn::BCEWithLogitsLoss()(dx, at::sigmoid(dy))),
                 torch::nn::BCEWithLogitsLoss()(x, at::sigmoid(y)), "BCEWithLogitsLoss");
    // kl_div: LibTorch's composite on xlogy (nn_rules.cc), values and gradient.
    check(mesh, "kl_div batchmean",
          [](auto& in) {
            return torch::nn::functional::kl_div(
                at::log_softmax(in[0], 1), at::softmax(in[1], 1),
                torch::nn::functional::KLDivFuncOptions().reduction(torch::kBatchMean));
          },
          {x, y}, {{Shard(0)}, {Shard(0)}});
    check(mesh, "kl_div log_target sum",
          [](auto& in) {
            return torch::nn::functional::kl_div(
                at::log_softmax(in[0], 1), at::log_softmax(in[1], 1),
                torch::nn::functional::KLDivFuncOptions().reduction(torch::kSum).log_target(true));
          },
          {x, y}, {{Shard(1)}, {Replicate()}});
    // Errors: ValueError naming op, layouts and values.
    const std::string where = "(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: mesh=[2] placements=[S(0)] shape=[4,6])";
    auto says = [&](const std::function<void()>& f, const std::string& op, const std::string& text) {
      const std::string m = error_of<ValueError>(f);
      EXPECT_NE(m.find(op + where), std::string::npos) << m;
      EXPECT_NE(m.find(text), std::string::npos) << m;
    };
    says([&] { (void)at::mse_loss(dx, dy, 3); }, "aten::mse_loss", ": reduction 3 is not one of 0 (none), 1 (mean), 2 (sum)");
    says([&] { (void)at::smooth_l1_loss(dx, dy, 1, -0.5); }, "aten::smooth_l1_loss",
         "does not support negative values for beta, got -0.5");
    says([&] { (void)at::huber_loss(dx, dy, 1, 0.0); }, "aten::huber_loss",
         "does not support non-positive values for delta, got 0");
    says([&] { (void)at::binary_cross_entropy(dx, at::sigmoid(dy)); }, "aten::binary_cross_entropy",
         "all elements of input should be between 0 and 1, found min -");
  });
}

TEST(TrilTriu, EveryLayoutKeptNoBytesValuesAndGradients) {
  auto cases = [](const DeviceMesh& mesh, const std::vector<int64_t>& shape,
                  const std::vector<Placements>& cat) {
    const at::Tensor g = values(shape, 0);
    for (const Placements& ps : cat)
      for (int64_t k : {-2, 0, 1, 3}) {
        const std::string what = to_string(ps) + " k=" + std::to_string(k) + " on " + mesh.to_string();
        check(mesh, "tril " + what, [k](auto& in) { return at::tril(in[0], k); }, {g}, {ps});
        check(mesh, "triu " + what, [k](auto& in) { return at::triu(in[0], k); }, {g}, {ps});
        const at::Tensor x = make(g, mesh, ps).as_tensor();
        at::Tensor y;
        EXPECT_EQ(bytes_of(mesh, [&] { y = at::tril(x, k); }), 0) << what;
        EXPECT_EQ(as_dtensor(y).layout(), as_dtensor(x).layout()) << what;
        at::Tensor z = make(g, mesh, ps).as_tensor();
        z.triu_(k);  // in place: the layout kept, the values of triu
        EXPECT_EQ(as_dtensor(z).layout(), as_dtensor(x).layout()) << what;
        expect_close(full(z), at::triu(g, k), "triu_ " + what);
      }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {6, 5}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("max")}});
    cases(mesh, {2, 5, 4}, {{Shard(0)}, {Shard(2)}});  // batched; the batch dim sharded
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    cases(mesh, {7, 6}, {{Shard(0)}, {Shard(1)}});  // uneven
    cases(mesh, {3, 5}, {{Shard(0)}});              // rank 3: an empty shard
  });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {7, 5}, {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Shard(0), Shard(0)}, {Partial(), Shard(1)}});
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor v = make(values({6}, 0), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)at::tril(v); });
    EXPECT_NE(m.find("aten::tril(arg 0: mesh=[2] placements=[S(0)] shape=[6]): tril needs a tensor "
                     "of at least 2 dimensions, got 1"), std::string::npos) << m;
    const at::Tensor r = make(values({6, 5}, 0), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::triu(r); });
    EXPECT_NE(m.find("tril / triu of a RaggedShard DTensor is not implemented"), std::string::npos) << m;
  });
}

TEST(SpecialFunctions, ValuesAndGradientsOn2And4Ranks) {
  const std::vector<std::pair<std::string, Op>> unary = {
      {"lgamma", [](auto& in) { return at::lgamma(in[0]); }},
      {"digamma", [](auto& in) { return at::digamma(in[0]); }},
      {"polygamma(2)", [](auto& in) { return at::polygamma(2, in[0]); }},
      {"erfinv", [](auto& in) { return at::erfinv(in[0] * 0.3); }},
      {"sinc", [](auto& in) { return at::sinc(in[0]); }},
      {"frac", [](auto& in) { return at::frac(in[0] * 1.7); }},
      {"logit(eps)", [](auto& in) { return at::logit(in[0], 0.1); }},
      {"logit", [](auto& in) { return at::logit(in[0] * 0.3); }},
      {"xlogy", [](auto& in) { return at::xlogy(in[0], in[0] * 0.5); }},
      {"fmax", [](auto& in) { return at::fmax(in[0], in[0].flip(0)); }},
      {"fmin", [](auto& in) { return at::fmin(in[0], in[0].flip(0)); }},
  };
  const at::Tensor pos = dispatch_testing::global_b({6, 5});  // in [0.5, 2.5]: every domain
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      for (const auto& [name, op] : unary)
        for (const Placements& ps : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}})
          check(mesh, name + " " + to_string(ps) + " on " + mesh.to_string(), op, {pos}, {ps});
    });
}

}  // namespace
}  // namespace hyper
