// The elementwise losses (pointwise_losses.h), the decompositions (decompositions.h: norm,
// dist, var_mean, aminmax, count_nonzero, nansum, equal, allclose, mv, repeat, constant_pad_nd,
// glu),
// tril / triu (dim_local_kernels.h) and the special functions of nn_rules.cc on DTensor tensors: values and every operand's gradient
// against the same op on the full tensors on one device (the oracle), on 2 and 4 ranks (even,
// uneven, an empty shard) and a 2x2 mesh, for R, S(0), S(1), P(sum) operands and plain ones;
// the layouts (tril keeps every layout, no bytes) and the refusals.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/normalization.h>
#include <torch/nn/functional/distance.h>
#include <torch/nn/functional/embedding.h>
#include <torch/nn/functional/padding.h>
#include <torch/nn/modules/loss.h>

#include <cmath>
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


TEST(Decompositions, ValuesAndGradientsOn2And4RanksAnd2x2) {
  namespace F = torch::nn::functional;
  const std::vector<std::pair<std::string, Op>> ops = {
      {"norm(2, dim 1)", [](auto& in) { return in[0].norm(2, {1}); }},
      {"norm(1, dim 0, keepdim)", [](auto& in) { return at::norm(in[0], 1, {0}, true); }},
      {"norm(3)", [](auto& in) { return at::norm(in[0], 3); }},
      {"norm(2, dtype)", [](auto& in) { return at::norm(in[0], 2, {0, 1}, false, at::kDouble); }},
      {"normalize", [](auto& in) { return F::normalize(in[0], F::NormalizeFuncOptions().dim(1)); }},
      {"dist", [](auto& in) { return at::dist(in[0], in[1], 2); }},
      {"pairwise_distance", [](auto& in) { return F::pairwise_distance(in[0], in[1]); }},
      {"var_mean", [](auto& in) { auto r = at::var_mean(in[0], {1}, 1, false); return std::get<0>(r) + std::get<1>(r) * 3; }},
      {"std_mean(all)", [](auto& in) { auto r = at::std_mean(in[0]); return std::get<0>(r) - std::get<1>(r); }},
      {"aminmax(dim 0)", [](auto& in) { auto r = at::aminmax(in[0], 0); return std::get<0>(r) * 2 + std::get<1>(r); }},
      {"aminmax", [](auto& in) { auto r = at::aminmax(in[0]); return std::get<0>(r) - std::get<1>(r); }},
      // NaN where the second operand is above 0.5 (a fill: its gradient is 0 there, not NaN).
      {"nansum", [](auto& in) { return at::nansum(in[0].masked_fill(in[1].detach() > 0.5, NAN)); }},
      {"nansum(dim 1, keepdim)",
       [](auto& in) { return at::nansum(in[0].masked_fill(in[1].detach() > 0.5, NAN), {1}, true); }},
      {"mv", [](auto& in) { return at::mv(in[0], in[1].select(0, 1)); }},
      {"repeat(2,1)", [](auto& in) { return in[0].repeat({2, 1}); }},
      {"repeat(1,3)", [](auto& in) { return in[0].repeat({1, 3}); }},
      {"repeat(2,1,2)", [](auto& in) { return in[0].repeat({2, 1, 2}); }},
      {"tile", [](auto& in) { return in[0].tile({2}); }},
      {"pad(1,2)", [](auto& in) { return at::constant_pad_nd(in[0], {1, 2}, 0.5); }},
      {"pad(1,1,-1,2)", [](auto& in) { return F::pad(in[0], F::PadFuncOptions({1, 1, -1, 2}).value(-2.0)); }},
      {"glu(1)", [](auto& in) { return at::glu(in[0].narrow(1, 0, 4), 1); }},
      {"glu(0)", [](auto& in) { return at::glu(in[0], 0); }},
      {"median()", [](auto& in) { return in[0].median(); }},
      {"nanmedian()", [](auto& in) { return (in[0] * in[1]).nanmedian(); }},
      {"masked_select", [](auto& in) { return at::masked_select(in[0], in[1].gt(0.2)); }},
      {"masked_select(row mask)", [](auto& in) { return at::masked_select(in[0], in[1].select(0, 1).gt(0)); }},
      {"clamp(min, max)", [](auto& in) { return at::clamp(in[0], in[1] - 1.0, in[1] + 0.5); }},
      {"clamp(max)", [](auto& in) { return at::clamp(in[0], std::nullopt, in[1]); }},
      // In place (a Partial self would be refused, as every non-linear in-place op: relu first).
      {"clamp_(min)", [](auto& in) { return (at::relu(in[0] - 0.5) * 2.0).clamp_(in[1], std::nullopt); }},
  };
  auto cases = [&](const DeviceMesh& mesh, const std::vector<int64_t>& shape,
                   const std::vector<std::pair<Placements, Placements>>& cat) {
    for (const auto& [name, op] : ops)
      for (const auto& [a, b] : cat)
        check(mesh, name + " " + to_string(a) + " x " + to_string(b) + " on " + mesh.to_string(), op,
              {values(shape, 0), values(shape, 1)}, {a, b});
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {4, 6}, {{{Replicate()}, {Replicate()}}, {{Shard(0)}, {Shard(0)}}, {{Shard(1)}, {Shard(0)}},
                         {{Partial()}, {Shard(1)}}, {{Shard(0)}, {}}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    cases(mesh, {6, 6}, {{{Shard(0)}, {Shard(1)}}, {{Shard(1)}, {Partial()}}});  // 2,2,2,0: an empty shard
  });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {6, 6}, {{{Shard(0), Shard(1)}, {Replicate(), Shard(0)}}, {{Partial(), Shard(0)}, {Shard(1), Replicate()}}});
  });
}

TEST(Decompositions, BoolAnswersCountsAndErrors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor g = values({4, 6}, 0);
    for (const Placements& ps : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Partial()}, {Replicate()}}) {
      const std::string what = to_string(ps);
      // A Partial(sum) whose shares sum exactly (g on coordinate 0, zeros elsewhere).
      const at::Tensor x = ps[0].is_partial()
          ? DTensor::from_local_with_layout(mesh.get_rank() == 0 ? g.clone() : at::zeros_like(g), mesh,
                                            Layout(mesh.topology(), ps, {4, 6})).as_tensor()
          : make(g, mesh, ps).as_tensor();
      const at::Tensor y = make(g, mesh, {Shard(0)}).as_tensor();
      // The global answer on every rank, also where only one rank's shard differs.
      EXPECT_TRUE(at::equal(x, y)) << what;
      EXPECT_TRUE(at::allclose(x, y)) << what;
      at::Tensor g2 = g.clone();
      g2[3][5] = 100.0;  // on rank 1's rows (S(0)) / columns (S(1))
      const at::Tensor z = make(g2, mesh, {Shard(0)}).as_tensor();
      EXPECT_FALSE(at::equal(x, z)) << what;
      EXPECT_FALSE(at::allclose(x, z)) << what;
      EXPECT_TRUE(at::allclose(x, z + 0.0, 1e-5, 200.0)) << what;
      EXPECT_FALSE(at::equal(x, make(g.narrow(0, 0, 2), mesh, ps).as_tensor())) << what;  // sizes
      EXPECT_EQ(full(at::count_nonzero(x.gt(0.5), at::IntArrayRef{1})).equal(at::count_nonzero(g.gt(0.5), at::IntArrayRef{1})), true) << what;
      EXPECT_EQ(full(at::count_nonzero(x.gt(0.5))).item<int64_t>(), at::count_nonzero(g.gt(0.5)).item<int64_t>()) << what;
    }
    const at::Tensor x = make(g, mesh, {Shard(0)}).as_tensor();
    // Padding an unsharded dim keeps the Shard (the value blocks laid out as x), no bytes; a
    // P(sum) stays P(sum), the value counted once.
    at::Tensor padded;
    EXPECT_EQ(bytes_of(mesh, [&] { padded = at::constant_pad_nd(x, {1, 2}, 0.5); }), 0);
    EXPECT_EQ(as_dtensor(padded).placements(), Placements{Shard(0)});
    expect_close(full(padded), at::constant_pad_nd(g, {1, 2}, 0.5), "pad S(0)");
    const at::Tensor p = make(g, mesh, {Partial()}).as_tensor();
    EXPECT_EQ(bytes_of(mesh, [&] { padded = at::constant_pad_nd(p, {0, 0, 1, 1}, 0.5); }), 0);
    EXPECT_EQ(as_dtensor(padded).placements(), Placements{Partial()});
    expect_close(full(padded), at::constant_pad_nd(g, {0, 0, 1, 1}, 0.5), "pad P(sum)");
    // nonzero: the input gathered, the indices Replicate on every rank.
    for (const Placements& ps : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Partial()}}) {
      const at::Tensor nz = at::nonzero(make(g, mesh, ps).as_tensor().gt(0.4));
      EXPECT_EQ(as_dtensor(nz).placements(), Placements{Replicate()}) << to_string(ps);
      EXPECT_TRUE(at::equal(full(nz), at::nonzero(g.gt(0.4)))) << to_string(ps);
      EXPECT_TRUE(at::equal(full(at::argwhere(make(g, mesh, ps).as_tensor())), at::argwhere(g))) << to_string(ps);
    }
    EXPECT_TRUE(std::isnan(full(make(g, mesh, {Shard(0)}).as_tensor().narrow(1, 0, 0).median()).item<double>()));
    const std::string where = "(arg 0: mesh=[2] placements=[S(0)] shape=[4,6])";
    auto says = [&](const std::function<void()>& f, const std::string& op, const std::string& text) {
      const std::string m = error_of<ValueError>(f);
      EXPECT_NE(m.find(op + where), std::string::npos) << m;
      EXPECT_NE(m.find(text), std::string::npos) << m;
    };
    says([&] { (void)at::clamp(x, std::optional<at::Tensor>(), std::optional<at::Tensor>()); },
         "aten::clamp.Tensor", "at least one of 'min' or 'max' must not be None");
    says([&] { (void)x.repeat({2}); }, "aten::repeat", "can not be smaller than number of dimensions of tensor (1 < 2)");
    says([&] { (void)x.repeat({2, -1}); }, "aten::repeat", "negative repeat -1");
    says([&] { (void)at::constant_pad_nd(x, {1}); }, "aten::constant_pad_nd", "Length of pad must be even but instead it equals 1");
    says([&] { (void)at::constant_pad_nd(x, {1, 1, 1, 1, 1, 1}); }, "aten::constant_pad_nd",
         "Pad length is 6 while the input has 2 dimensions");
    says([&] { (void)at::constant_pad_nd(x, {-4, -3}); }, "aten::constant_pad_nd",
         "the padded size of dim 1 is -1 (size 6, pad -4, -3); it must be >= 0");
    const std::string m = error_of<ValueError>([&] { (void)at::glu(x.narrow(1, 0, 5), 1); });
    EXPECT_NE(m.find("aten::glu(arg 0: mesh=[2] placements=[S(0)] shape=[4,5]): Halving dimension "
                     "must be even, but dimension 1 is size 5"), std::string::npos) << m;
  });
}

TEST(Decompositions, HistcAndBincountCountLocally) {
  // Each rank counts its own elements: Partial(sum) over the sharding mesh dims, no gather (the
  // bytes: the all_reduces of the global min / max, and full_tensor's reduction here); values
  // equal the single-device op on 2 and 4 ranks (uneven, an empty shard), 2x2, RaggedShard.
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const at::Tensor g = values({7, 6}, 0);
    const at::Tensor ids = at::remainder(at::arange(42, at::kLong) * 7, 11);
    const at::Tensor wts = values({42}, 1);
    for (const Placements& ps : cat) {
      const std::string what = to_string(ps) + " on " + mesh.to_string();
      const at::Tensor x = make(g, mesh, ps).as_tensor();
      const at::Tensor h = at::histc(x, 8, -2.0, 2.0);
      EXPECT_TRUE(at::allclose(full(h), at::histc(g, 8, -2.0, 2.0))) << what;
      EXPECT_TRUE(at::allclose(full(at::histc(x, 5)), at::histc(g, 5))) << what;  // data range
      bool partial_in = false, sharded = false;
      for (const auto& q : ps) {
        partial_in = partial_in || q.is_partial();
        sharded = sharded || q.is_shard() || q.is_ragged_shard();
      }
      if (!partial_in) {  // counted where the elements are, no bytes
        EXPECT_EQ(bytes_of(mesh, [&] { (void)at::histc(x, 8, -2.0, 2.0); }), 0) << what;
        EXPECT_EQ(as_dtensor(h).placements()[0].is_partial(), ps[0].is_shard() || ps[0].is_ragged_shard()) << what;
      }
      if (ps.size() == 1 && !partial_in) {  // 1-D ids and weights laid out alike
        const Placements ips = ps[0].is_shard() ? Placements{Shard(0)} : ps;
        const at::Tensor di = make(ids, mesh, ips).as_tensor();
        EXPECT_TRUE(at::equal(full(at::bincount(di)), at::bincount(ids))) << what;
        EXPECT_TRUE(at::equal(full(at::bincount(di, {}, 15)), at::bincount(ids, {}, 15))) << what;
        EXPECT_TRUE(at::allclose(full(at::bincount(di, make(wts, mesh, {Replicate()}).as_tensor())),
                                 at::bincount(ids, wts))) << what;
        EXPECT_TRUE(at::allclose(full(at::bincount(di, wts)), at::bincount(ids, wts))) << what;  // plain weights
      }
    }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {RaggedShard({0}, {3, 4})}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}}); });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(values({4, 6}, 0), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)at::histc(x, 0); });
    EXPECT_NE(m.find("aten::histc(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): bins must be > 0, got 0"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::histc(x, 4, 2.0, 1.0); });
    EXPECT_NE(m.find("must be finite with min <= max, got min=2 max=1"), std::string::npos) << m;
    const at::Tensor neg = make(at::arange(-1, 7, at::kLong), mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::bincount(neg); });
    EXPECT_NE(m.find("bincount only supports non-negative inputs, found -1"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::bincount(x); });
    EXPECT_NE(m.find("bincount only supports 1-d non-negative integral inputs, got 2 dims of Double"),
              std::string::npos) << m;
  });
}

// searchsorted / bucketize: elementwise in the values given the boundaries, which are made
// whole; the values' layout kept (a Partial reduced first), no bytes for a plain or Replicate
// sequence; N-D boundaries cut to each rank's rows; the scalar forms; errors.
TEST(Decompositions, SearchsortedAndBucketize) {
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const at::Tensor g = values({7, 6}, 0);
    const at::Tensor bounds = at::linspace(-1.5, 1.5, 9, at::kDouble);  // sorted
    const at::Tensor rows = std::get<0>(at::sort(values({7, 5}, 1), 1));  // one sorted row per row of g
    const at::Tensor perm = at::argsort(values({9}, 2));
    const at::Tensor shuffled = bounds.index_select(0, perm), sorter = at::argsort(shuffled);
    const Placements rep(static_cast<size_t>(mesh.ndim()), Replicate());
    const Placements s0 = mesh.ndim() == 1 ? Placements{Shard(0)} : Placements{Replicate(), Shard(0)};
    for (const Placements& ps : cat) {
      const std::string what = to_string(ps) + " on " + mesh.to_string();
      bool partial_in = false, ragged = false;
      for (const auto& q : ps) {
        partial_in = partial_in || q.is_partial();
        ragged = ragged || q.is_ragged_shard();
      }
      const at::Tensor x = make(g, mesh, ps).as_tensor();
      Placements out = ps;
      for (auto& q : out)
        if (q.is_partial()) q = Replicate();
      for (bool right : {false, true}) {
        const at::Tensor want = at::bucketize(g, bounds, false, right);
        at::Tensor got;
        const int64_t sent = bytes_of(mesh, [&] { got = at::bucketize(x, bounds, false, right); });
        EXPECT_EQ(as_dtensor(got).placements(), out) << what;
        EXPECT_TRUE(at::equal(full(got), want)) << what;
        if (!partial_in) EXPECT_EQ(sent, 0) << what;  // counted where the values are
        const at::Tensor bd = make(bounds, mesh, rep).as_tensor();
        EXPECT_TRUE(at::equal(full(at::searchsorted(bd, x, false, right)), want)) << what;
        // A sharded sequence is gathered (9 values); out_int32; side; a sorter.
        const at::Tensor bs = make(bounds, mesh, s0).as_tensor();
        const at::Tensor i32 = at::searchsorted(bs, x, true, right);
        EXPECT_EQ(i32.scalar_type(), at::kInt) << what;
        EXPECT_TRUE(at::equal(full(i32), want.to(at::kInt))) << what;
        EXPECT_TRUE(at::equal(full(at::searchsorted(bounds, x, false, false, right ? "right" : "left")),
                              want)) << what;
        EXPECT_TRUE(at::equal(full(at::searchsorted(shuffled, x, false, right, std::nullopt,
                                                    make(sorter, mesh, s0).as_tensor())),
                              at::searchsorted(shuffled, g, false, right, std::nullopt, sorter)))
            << what;
      }
      if (!ragged) {  // one sorted row per row of the values, cut to each rank's rows
        const at::Tensor want = at::searchsorted(rows, g);
        EXPECT_TRUE(at::equal(full(at::searchsorted(rows, x)), want)) << what;
        EXPECT_TRUE(at::equal(full(at::searchsorted(make(rows, mesh, s0).as_tensor(), x)), want)) << what;
      } else {
        const std::string m = error_of<NotImplementedError>([&] { (void)at::searchsorted(rows, x); });
        EXPECT_NE(m.find("N-D boundaries beside a RaggedShard values tensor"), std::string::npos) << m;
      }
    }
    // Plain values beside a DTensor sequence, and the scalar forms: the global answer, Replicate.
    const at::Tensor bs = make(bounds, mesh, s0).as_tensor();
    const at::Tensor pv = at::searchsorted(bs, g);
    EXPECT_TRUE(as_dtensor(pv).layout().is_replicated());
    EXPECT_TRUE(at::equal(full(pv), at::searchsorted(bounds, g)));
    const at::Tensor b1 = at::bucketize(at::Scalar(0.3), bs, false, true);
    EXPECT_TRUE(is_dtensor(b1));
    EXPECT_TRUE(at::equal(full(b1), at::bucketize(at::Scalar(0.3), bounds, false, true)));
    EXPECT_TRUE(at::equal(full(at::searchsorted(bs, at::Scalar(-0.4))),
                          at::searchsorted(bounds, at::Scalar(-0.4))));
    // A float Scalar among int64 boundaries is promoted, as ATen's wrapped number (2.5 -> 3).
    const at::Tensor ib = at::arange(4, at::kLong);
    const at::Tensor ibd = make(ib, mesh, s0).as_tensor();
    EXPECT_TRUE(at::equal(full(at::searchsorted(ibd, at::Scalar(2.5))), at::searchsorted(ib, at::Scalar(2.5))));
    EXPECT_TRUE(at::equal(full(at::bucketize(at::Scalar(2.5), ibd)), at::bucketize(at::Scalar(2.5), ib)));
    EXPECT_EQ(full(at::searchsorted(ibd, at::Scalar(2.5))).item<int64_t>(), 3);
    // N-D boundaries with an N-D sorter (each row shuffled), values row-sharded.
    const at::Tensor rperm = at::argsort(values({7, 5}, 3), /*dim=*/int64_t{1});
    const at::Tensor rshuf = rows.gather(1, rperm), rsorter = at::argsort(rshuf, int64_t{1});
    const at::Tensor xs = make(g, mesh, s0).as_tensor();
    EXPECT_TRUE(at::equal(full(at::searchsorted(rshuf, xs, false, false, std::nullopt,
                                                make(rsorter, mesh, s0).as_tensor())),
                          at::searchsorted(rshuf, g, false, false, std::nullopt, rsorter)));
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {RaggedShard({0}, {3, 4})}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}});
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(values({4, 6}, 0), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)at::searchsorted(values({3, 5}, 1), x); });
    EXPECT_NE(m.find("aten::searchsorted.Tensor(arg 0: plain tensor shape=[3,5]; arg 1: mesh=[2] "
                     "placements=[S(0)] shape=[4,6]): the boundaries should be 1-D, or their first "
                     "N-1 dims must match the values' (got boundaries [3, 5] and values [4, 6])"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::bucketize(x, values({2, 3}, 1)); });
    EXPECT_NE(m.find("aten::bucketize.Tensor"), std::string::npos) << m;
    EXPECT_NE(m.find("the boundaries must be 1-D, got 2 dims"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)at::searchsorted(at::linspace(0, 1, 5, at::kDouble), x, false, false, std::nullopt,
                             at::arange(4, at::kLong));
    });
    EXPECT_NE(m.find("the sorter's shape [4] must be the boundaries' [5]"), std::string::npos) << m;
    // The sorter's range is checked on the whole sorter (a bad entry in one rank's rows would
    // otherwise fail on that rank only).
    at::Tensor bad = at::argsort(values({4, 5}, 1), int64_t{1});
    bad.index_put_({3, 2}, 7);
    m = error_of<ValueError>([&] {
      (void)at::searchsorted(std::get<0>(at::sort(values({4, 5}, 1), 1)), x, false, false,
                             std::nullopt, bad);
    });
    EXPECT_NE(m.find("the sorter's indices must be in [0, 5), got 7"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)at::searchsorted(at::linspace(0, 1, 5, at::kDouble), x, false, false, std::nullopt,
                             at::arange(5, at::kInt));
    });
    EXPECT_NE(m.find("the sorter must be int64, got Int"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::searchsorted(at::scalar_tensor(1.0, at::kDouble), x); });
    EXPECT_NE(m.find("the boundaries should have a positive number of dims, got a 0-dim tensor"),
              std::string::npos) << m;
  });
}

// unique (_unique2 / _unique): the global sorted values Replicate (each rank's distinct values
// gathered, never the tensor), the inverse in self's layout, the counts Partial(sum) over the
// sharding mesh dims; every layout on 2, 4 (an empty shard) and 2x2, RaggedShard, int64 and
// bool; NaN refused.
TEST(Decompositions, Unique) {
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const at::Tensor g = at::remainder(at::arange(42, at::kDouble).reshape({7, 6}) * 7, 5) - 2;
    const at::Tensor gi = g.to(at::kLong), gb = g.gt(0);
    for (const Placements& ps : cat) {
      const std::string what = to_string(ps) + " on " + mesh.to_string();
      bool partial_in = false;
      for (const auto& q : ps) partial_in = partial_in || q.is_partial();
      for (const at::Tensor& G : {g, gi, gb}) {
        if (partial_in && G.scalar_type() == at::kBool) continue;  // no Partial of bools here
        const std::string w = what + " " + std::string(c10::toString(G.scalar_type()));
        const at::Tensor x = make(G, mesh, ps).as_tensor();
        const auto [wv, wi, wc] = at::_unique2(G, true, true, true);
        const auto [v, i, c] = at::_unique2(x, true, true, true);
        EXPECT_TRUE(as_dtensor(v).layout().is_replicated()) << w;
        EXPECT_TRUE(at::equal(full(v), wv)) << w;
        EXPECT_TRUE(at::equal(full(i), wi)) << w;
        EXPECT_TRUE(at::equal(full(c), wc)) << w;
        Placements ip = ps;
        for (auto& q : ip)
          if (q.is_partial()) q = Replicate();
        EXPECT_EQ(as_dtensor(i).placements(), ip) << w;
        const auto [v1, i1] = at::_unique(x, false, true);  // sorted=false: sorted too
        EXPECT_TRUE(at::equal(full(v1), wv)) << w;
        EXPECT_TRUE(at::equal(full(i1), wi)) << w;
        const auto [v0, i0, c0] = at::_unique2(x);  // no inverse, no counts: empty
        EXPECT_EQ(v0.sizes(), wv.sizes()) << w;
        EXPECT_EQ(i0.numel(), 0) << w;
        EXPECT_EQ(c0.numel(), 0) << w;
      }
    }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {RaggedShard({0}, {3, 4})}});
    // The distinct values move, never the tensor: 5 values of a [64,64] tensor.
    const at::Tensor big = at::remainder(at::arange(4096, at::kDouble).reshape({64, 64}), 5);
    const at::Tensor x = make(big, mesh, {Shard(0)}).as_tensor();
    const int64_t sent = bytes_of(mesh, [&] { (void)at::_unique2(x); });
    EXPECT_GT(sent, 0);
    EXPECT_LT(sent, 64 * 8 * 2);  // a few values per rank, far below the 16 KiB shard
    // NaN: refused, naming the op and layout.
    const at::Tensor nan = make(at::tensor({1.0, NAN, 2.0, NAN}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    const std::string m = error_of<NotImplementedError>([&] { (void)at::_unique2(nan); });
    EXPECT_NE(m.find("aten::_unique2(arg 0: mesh=[2] placements=[S(0)] shape=[4]): unique of values "
                     "with NaN"), std::string::npos) << m;
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}, {Shard(1), Shard(1)}});
  });
}

// trace (advanced indexing of the diagonal, summed: a masked Partial where sharded, no
// gather) and cdist (ATen's matrix-product form for p = 2 with more than 25 rows, the norm of
// every pairwise difference otherwise): values and gradients against one device.
TEST(Decompositions, TraceAndCdist) {
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& lays, int64_t rows) {
    for (const Placements& ps : lays) {
      const std::string on = " " + to_string(ps) + " on " + mesh.to_string();
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{rows, rows + 1}, {rows + 2, rows}})
        check(mesh, "trace " + shape_to_string(shape) + on, [](auto& in) { return at::trace(in[0]); },
              {values(shape, 0)}, {ps});
      for (double p : {2.0, 1.0, 3.0, static_cast<double>(INFINITY)})
        check(mesh, "cdist p=" + std::to_string(p) + on,
              [p](auto& in) { return at::cdist(in[0], in[1], p); },
              {values({rows, 3}, 0), values({rows + 1, 3}, 1)}, {ps, Placements(mesh.ndim(), Replicate())});
      // p = 2 with more than 25 rows: the matrix-product form (also forced by compute_mode 1).
      check(mesh, "cdist mm form" + on, [](auto& in) { return at::cdist(in[0], in[1], 2.0); },
            {values({27, 3}, 0), values({5, 3}, 1)}, {ps, {}});
      check(mesh, "cdist batched mode 1" + on,
            [](auto& in) { return at::cdist(in[0], in[1], 2.0, 1); },
            {values({2, rows, 3}, 0), values({2, 4, 3}, 1)}, {ps, Placements(mesh.ndim(), Replicate())});
    }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}}, 4);
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}, 3); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0), Shard(1)}}, 5); });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(values({4, 6}, 0), mesh, {Shard(0)}).as_tensor();
    // No gather: the diagonal's values travel (a masked Partial), never the matrix.
    EXPECT_LT(bytes_of(mesh, [&] { (void)full(at::trace(x)); }), 4 * 6 * 8 / 2);
    std::string m = error_of<ValueError>([&] { (void)at::trace(x.sum(0)); });
    EXPECT_NE(m.find("aten::trace(arg 0: mesh=[2] placements=[P(sum)] shape=[6]): expected a matrix, "
                     "but got tensor with dim 1"), std::string::npos) << m;
    const at::Tensor y = make(values({5, 4}, 1), mesh, {Replicate()}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::cdist(x, y); });
    EXPECT_NE(m.find("X1 and X2 must have the same number of columns. X1: 6 X2: 4"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::cdist(x, x, -1.0); });
    EXPECT_NE(m.find("cdist only supports non-negative p values, got -1"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::cdist(x, x, 0.0); });
    EXPECT_NE(m.find("cdist with p = 0"), std::string::npos) << m;
  });
}

// embedding_bag (F::embedding_bag, torch::nn::EmbeddingBag) on a DTensor table: sum / mean /
// max, padding_idx, per_sample_weights, include_last_offset, an empty bag, a 2-D input; values
// and gradients of the table (and of the sample weights) against one device; a row-sharded
// table moves the bags' values, not the table; ATen's auxiliary outputs; the errors.
TEST(Decompositions, EmbeddingBag) {
  namespace F = torch::nn::functional;
  const at::Tensor idx = at::tensor({1, 2, 4, 6, 4, 3, 2, 0, 5}, at::kLong);
  const at::Tensor off = at::tensor({0, 2, 2, 5}, at::kLong);  // bag 1 empty
  auto cases = [&](const DeviceMesh& mesh, const std::vector<Placements>& lays) {
    for (const Placements& ps : lays) {
      const std::string on = " " + to_string(ps) + " on " + mesh.to_string();
      for (auto mode : {torch::nn::EmbeddingBagMode(torch::kSum), torch::nn::EmbeddingBagMode(torch::kMean),
                        torch::nn::EmbeddingBagMode(torch::kMax)})
        for (bool pad : {false, true}) {
          const std::string what = "embedding_bag mode " + std::to_string(mode.index()) +
                                   (pad ? " padding 4" : "") + on;
          auto opts = F::EmbeddingBagFuncOptions().offsets(off).mode(mode);
          if (pad) opts.padding_idx(4);
          check(mesh, what, [&idx, opts](auto& in) { return F::embedding_bag(idx, in[0], opts); },
                {values({7, 4}, 0)}, {ps});
        }
      check(mesh, "embedding_bag per_sample_weights, include_last_offset" + on,
            [&](auto& in) {
              return F::embedding_bag(idx, in[0], F::EmbeddingBagFuncOptions()
                                                      .offsets(at::tensor({0, 2, 2, 5, 9}, at::kLong))
                                                      .include_last_offset(true)
                                                      .mode(torch::kSum)
                                                      .per_sample_weights(in[1]));
            },
            {values({7, 4}, 0), values({9}, 1)}, {ps, Placements(mesh.ndim(), Replicate())});
      // max over tied rows (the gradient goes to the first maximum, as ATen's).
      at::Tensor tied = values({7, 4}, 0);
      tied[4] = tied[2];
      check(mesh, "embedding_bag max with tied rows" + on,
            [&](auto& in) {
              return F::embedding_bag(idx, in[0], F::EmbeddingBagFuncOptions().offsets(off).mode(torch::kMax));
            },
            {tied}, {ps});
      check(mesh, "embedding_bag 2-D input mean" + on,
            [&](auto& in) {
              return F::embedding_bag(idx.slice(0, 0, 8).reshape({4, 2}), in[0],
                                      F::EmbeddingBagFuncOptions().mode(torch::kMean));
            },
            {values({7, 4}, 0)}, {ps});
    }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0), Shard(1)}}); });
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    // A row-sharded table of 64 rows: the 4 bags' values travel (a masked Partial), not the table.
    const at::Tensor big = values({64, 16}, 2);
    const at::Tensor t = make(big, mesh, {Shard(0)}).as_tensor();
    at::Tensor y;
    EXPECT_LT(bytes_of(mesh, [&] { y = full(F::embedding_bag(idx, t, F::EmbeddingBagFuncOptions().offsets(off))); }),
              64 * 16 * 8 / 4);
    expect_close(y, F::embedding_bag(idx, big, F::EmbeddingBagFuncOptions().offsets(off)), "big table");
    // ATen's auxiliary outputs for mean and max (offset2bag, bag_size, max_indices).
    const at::Tensor w7 = values({7, 4}, 0);
    for (int64_t mode : {1, 2}) {
      const auto got = at::embedding_bag(make(w7, mesh, {Shard(0)}).as_tensor(), idx, off, false, mode,
                                         false, std::nullopt, false, 4);
      const auto want = at::embedding_bag(w7, idx, off, false, mode, false, std::nullopt, false, 4);
      EXPECT_TRUE(at::equal(std::get<1>(got), std::get<1>(want))) << mode;
      EXPECT_TRUE(at::equal(std::get<2>(got), std::get<2>(want))) << mode;
      EXPECT_TRUE(at::equal(std::get<3>(got), std::get<3>(want))) << mode << std::get<3>(got) << std::get<3>(want);
    }
    // Errors.
    const at::Tensor d = make(w7, mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] {  // (F::embedding_bag checks this before ATen)
      (void)at::embedding_bag(d, idx, off, false, 1, false, values({9}, 1), false, std::nullopt);
    });
    EXPECT_NE(m.find("per_sample_weights is only supported for mode='sum' (got mode 1)"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)F::embedding_bag(idx, d, F::EmbeddingBagFuncOptions().offsets(at::tensor({1, 3}, at::kLong)));
    });
    EXPECT_NE(m.find("offsets[0] has to be 0"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)F::embedding_bag(idx, d, F::EmbeddingBagFuncOptions().offsets(at::tensor({0, 4, 2}, at::kLong)));
    });
    EXPECT_NE(m.find("offsets must be non-decreasing"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)F::embedding_bag(idx, d, F::EmbeddingBagFuncOptions().offsets(at::tensor({0, 12}, at::kLong)));
    });
    EXPECT_NE(m.find("an offset 12 is past the 9 indices"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)at::embedding_bag(d, idx, off, false, 0, false, std::nullopt, false, 9);
    });
    EXPECT_NE(m.find("padding_idx 9 must be within the 7 embeddings"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)at::embedding_bag(d, idx, at::tensor({0, 2, 7}, at::kLong), false, 0, false, std::nullopt,
                              true, std::nullopt);
    });
    EXPECT_NE(m.find("with include_last_offset the last offset must equal the number of indices "
                     "(CSR), got 7 of 9"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)F::embedding_bag(at::tensor({1, 9}, at::kLong), d, F::EmbeddingBagFuncOptions().offsets(off.slice(0, 0, 1)));
    });
    EXPECT_NE(m.find("an index is out of range [0, 7): 9"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] {
      (void)F::embedding_bag(idx, d, F::EmbeddingBagFuncOptions().offsets(off).sparse(true));
    });
    EXPECT_NE(m.find("sparse gradients of a DTensor weight are not implemented"), std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
