// Random fills and random factories on DTensor tensors (random_kernels.h): every layout (R,
// S(0), S(1), uneven, an empty shard, P(sum/avg/max), RaggedShard; 2 and 4 ranks, a 2x2 mesh)
// holds the values of the documented formula of the GLOBAL element index, computed here with
// a plain loop on unsigned 64-bit words and std:: math (the oracle: the same draw of the full
// tensor on one device); the tracker's offsets; torch::nn::init on DTensor parameters
// (reset_parameters() of a parallelized module: tp/plain_module_test.cc); statistics; every refusal, with nothing written
// and the tracker unmoved.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/init.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dispatch/testing_rng.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/random.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::make;

// ---- the oracle: random.h's uniform and random_kernels.h's formulas, element by element ----

using dispatch_testing::rng_u;

enum class D { kUniform, kNormal, kLogNormal, kExponential, kCauchy, kGeometric, kBernoulli, kRandom };

/// Element i of a draw of `d` (parameters a, b) at (seed, offset).
double value_at(D d, double a, double b, uint64_t seed, int64_t offset, int64_t i) {
  const uint64_t o = static_cast<uint64_t>(offset);
  const uint64_t n = static_cast<uint64_t>(i);
  if (d == D::kNormal || d == D::kLogNormal) {
    const double u1 = rng_u(seed, o + 2 * n), u2 = rng_u(seed, o + 2 * n + 1);
    const double z = a + b * std::sqrt(-2.0 * std::log1p(-u1)) * std::cos(2.0 * M_PI * u2);
    return d == D::kLogNormal ? std::exp(z) : z;
  }
  const double u = rng_u(seed, o + n);
  switch (d) {
    case D::kUniform: return a + (b - a) * u;
    case D::kExponential: return -std::log1p(-u) / a;
    case D::kCauchy: return a + b * std::tan(M_PI * (u - 0.5));
    case D::kGeometric: return std::floor(std::log1p(-u) / std::log1p(-a)) + 1.0;
    case D::kBernoulli: return u < a ? 1.0 : 0.0;
    case D::kRandom: return a + std::floor(u * (b - a));
    default: return 0.0;
  }
}

at::Tensor oracle(D d, double a, double b, uint64_t seed, int64_t offset,
                  const std::vector<int64_t>& shape) {
  at::Tensor t = at::empty(shape, at::kDouble);
  at::Tensor flat = t.view({-1});
  auto acc = flat.accessor<double, 1>();
  for (int64_t i = 0; i < t.numel(); ++i) acc[i] = value_at(d, a, b, seed, offset, i);
  return t;
}

struct Fill {
  const char* name;
  D d;
  double a, b;
  std::function<void(at::Tensor&)> apply;
  int64_t per_element = 1;
};

std::vector<Fill> fills() {
  return {
      {"uniform_", D::kUniform, -1.0, 2.0, [](at::Tensor& t) { t.uniform_(-1.0, 2.0); }},
      {"normal_", D::kNormal, 0.5, 2.0, [](at::Tensor& t) { t.normal_(0.5, 2.0); }, 2},
      {"log_normal_", D::kLogNormal, 0.1, 0.5, [](at::Tensor& t) { t.log_normal_(0.1, 0.5); }, 2},
      {"exponential_", D::kExponential, 1.5, 0, [](at::Tensor& t) { t.exponential_(1.5); }},
      {"cauchy_", D::kCauchy, 0.25, 0.5, [](at::Tensor& t) { t.cauchy_(0.25, 0.5); }},
      {"geometric_", D::kGeometric, 0.3, 0, [](at::Tensor& t) { t.geometric_(0.3); }},
      {"bernoulli_", D::kBernoulli, 0.3, 0, [](at::Tensor& t) { t.bernoulli_(0.3); }},
      {"random_(3,10)", D::kRandom, 3, 10, [](at::Tensor& t) { t.random_(3, 10); }},
      {"random_(7)", D::kRandom, 0, 7, [](at::Tensor& t) { t.random_(7); }},
  };
}

/// Every fill on a tensor of `shape` in each of `cat`: the global value is the oracle's at
/// offset 0 (close: libm and ATen's vectorized math may differ in the last bits), every rank's
/// local equals its piece (Replicate regions alike on every rank), a Partial(sum) share off
/// coordinate 0 holds zeros, the layout is kept, the tracker advances by the draws.
void fill_cases(const DeviceMesh& mesh, const std::vector<Placements>& cat,
                const std::vector<int64_t>& shape) {
  const uint64_t seed = 99;
  for (const Fill& f : fills()) {
    const at::Tensor want = oracle(f.d, f.a, f.b, seed, 0, shape);
    for (const Placements& ps : cat) {
      const std::string what = std::string(f.name) + " " + to_string(ps) + " on " + mesh.to_string();
      manual_seed(mesh, seed);
      at::Tensor x = make(global_a(shape), mesh, ps).as_tensor();
      const Layout before = as_dtensor(x).layout();
      f.apply(x);
      EXPECT_EQ(as_dtensor(x).layout(), before) << what;
      EXPECT_TRUE(at::allclose(full(x), want, 1e-12, 1e-12)) << what << "\n" << full(x) << "\n" << want;
      EXPECT_EQ(rng_state(mesh).offset, f.per_element * want.numel()) << what;
      const DTensor dx = as_dtensor(x);
      if (before.holds_partial_zeros(dx.mesh_index())) {
        EXPECT_EQ(dx.to_local().abs().sum().item<double>(), 0.0) << what;
      }
    }
  }
}

std::vector<Placements> layouts_1d(int64_t n) {
  return {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("avg")}, {Partial("max")},
          {n == 2 ? RaggedShard({0}, {3, 4}) : RaggedShard({0}, {2, 0, 4, 1})}};
}

TEST(RandomOps, EveryFillEqualsTheFormulaInEveryLayoutOnTwoAndFourRanks) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      fill_cases(mesh, layouts_1d(n), {7, 5});
      fill_cases(mesh, {{Shard(0)}}, {3, 4});  // rank 3 of 4: an empty shard
    });
}

TEST(RandomOps, EveryFillEqualsTheFormulaOnATwoByTwoMeshAndOneRank) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    fill_cases(mesh,
               {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Replicate(), Shard(0)},
                {Shard(0), Shard(0)}, {Partial(), Shard(1)}, {Replicate(), Replicate()}},
               {7, 5});
  });
  run_on_mesh({1}, [](const DeviceMesh& mesh) { fill_cases(mesh, {{Shard(0)}}, {7, 5}); });
}

TEST(RandomOps, FactoriesTakeTheLayoutWithPartialsReplicate) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const uint64_t seed = 5;
    for (const Placements& ps : std::vector<Placements>{{Shard(1)}, {Partial()}, {Replicate()}}) {
      const std::string what = to_string(ps);
      const at::Tensor x = make(global_a({6, 5}), mesh, ps).as_tensor();
      const Placements out_ps = ps[0].is_partial() ? Placements{Replicate()} : ps;
      manual_seed(mesh, seed);
      int64_t offset = 0;
      auto check = [&](const at::Tensor& y, D d, double a, double b, at::ScalarType dtype,
                       int64_t per) {
        EXPECT_EQ(as_dtensor(y).placements(), out_ps) << what;
        EXPECT_EQ(y.scalar_type(), dtype) << what;
        EXPECT_TRUE(at::allclose(full(y).to(at::kDouble), oracle(d, a, b, seed, offset, {6, 5}),
                                 1e-6, 1e-6)) << what;
        offset += per * 30;
        EXPECT_EQ(rng_state(mesh).offset, offset) << what;
      };
      check(at::rand_like(x), D::kUniform, 0, 1, at::kDouble, 1);
      check(at::randn_like(x, at::kFloat), D::kNormal, 0, 1, at::kFloat, 2);
      check(at::randint_like(x, 9), D::kRandom, 0, 9, at::kDouble, 1);
      check(at::randint_like(x, -4, 4, at::kLong), D::kRandom, -4, 4, at::kLong, 1);
      check(at::randint_like(x, at::scalar_tensor(6, at::kLong)), D::kRandom, 0, 6, at::kDouble, 1);
      check(at::bernoulli(x, 0.25), D::kBernoulli, 0.25, 0, at::kDouble, 1);
    }
  });
}

TEST(RandomOps, BernoulliOfProbabilityTensors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const uint64_t seed = 17;
    const at::Tensor P = at::linspace(0.0, 1.0, 30, at::kDouble).reshape({6, 5});
    at::Tensor want = at::empty({6, 5}, at::kDouble);
    for (int64_t i = 0; i < 30; ++i)
      want.view({-1})[i] = rng_u(seed, static_cast<uint64_t>(i)) < P.view({-1})[i].item<double>() ? 1.0 : 0.0;
    for (const Placements& ps : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Partial()}, {Replicate()}}) {
      const std::string what = to_string(ps);
      const at::Tensor p = make(P, mesh, ps).as_tensor();
      manual_seed(mesh, seed);
      const at::Tensor y = at::bernoulli(p);  // self's values are the probabilities
      EXPECT_TRUE(at::equal(full(y), want)) << what;
      EXPECT_EQ(as_dtensor(y).placements(), ps[0].is_partial() ? Placements{Replicate()} : ps) << what;
      // In place with a DTensor p, and with a plain p broadcast along the rows.
      manual_seed(mesh, seed);
      at::Tensor z = make(at::zeros({6, 5}, at::kDouble), mesh, {Shard(0)}).as_tensor();
      z.bernoulli_(p);
      EXPECT_TRUE(at::equal(full(z), want)) << what;
      EXPECT_EQ(as_dtensor(z).placements(), Placements{Shard(0)}) << what;
    }
    const at::Tensor row = at::linspace(0.1, 0.9, 5, at::kDouble);
    manual_seed(mesh, seed);
    at::Tensor z = make(at::zeros({6, 5}, at::kDouble), mesh, {Shard(1)}).as_tensor();
    z.bernoulli_(row);
    at::Tensor want_row = at::empty({6, 5}, at::kDouble);
    for (int64_t i = 0; i < 30; ++i)
      want_row.view({-1})[i] = rng_u(seed, static_cast<uint64_t>(i)) < row[i % 5].item<double>() ? 1.0 : 0.0;
    EXPECT_TRUE(at::equal(full(z), want_row));
  });
}

TEST(RandomOps, NnInitIsLayoutIndependent) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      const uint64_t seed = 3;
      // kaiming_uniform_(a = sqrt(5)) of a [out, in] weight: U(-1/sqrt(in), 1/sqrt(in)), fan_in
      // from the GLOBAL sizes; xavier_normal_: N(0, sqrt(2 / (in + out))).
      const double bound = 1.0 / std::sqrt(6.0);
      const at::Tensor want_k = oracle(D::kUniform, -bound, bound, seed, 0, {10, 6});
      const at::Tensor want_x = oracle(D::kNormal, 0, std::sqrt(2.0 / 16.0), seed, 60, {10, 6});
      for (const Placements& ps : std::vector<Placements>{{Shard(0)}, {Shard(1)}, {Replicate()}}) {
        manual_seed(mesh, seed);
        at::Tensor w = make(at::zeros({10, 6}, at::kDouble), mesh, ps).as_tensor();
        {
          at::NoGradGuard no_grad;
          torch::nn::init::kaiming_uniform_(w, std::sqrt(5.0));
        }
        expect_close(full(w), want_k, "kaiming " + to_string(ps));
        {
          at::NoGradGuard no_grad;
          torch::nn::init::xavier_normal_(w);
        }
        expect_close(full(w), want_x, "xavier " + to_string(ps));
      }
    });
}

TEST(RandomOps, ViewsWriteThroughAndManualSeedReproduces) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    at::Tensor x = make(at::zeros({6, 5}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    manual_seed(mesh, 11);
    x.narrow(1, 1, 2).uniform_();  // an alias of the local: written through to x
    at::Tensor want = at::zeros({6, 5}, at::kDouble);
    want.narrow(1, 1, 2).copy_(oracle(D::kUniform, 0, 1, 11, 0, {6, 2}));
    expect_close(full(x), want, "view");
    // The same seed reproduces; another seed differs.
    manual_seed(mesh, 11);
    const at::Tensor again = at::rand_like(x);
    manual_seed(mesh, 12);
    const at::Tensor other = at::rand_like(x);
    manual_seed(mesh, 11);
    EXPECT_TRUE(at::equal(full(at::rand_like(x)), full(again)));
    EXPECT_FALSE(at::equal(full(other), full(again)));
    // A view whose local is a copy (a slice across the shard boundary) draws into the copy,
    // which is written through to x's shards (each rank its own rows).
    const at::Tensor x_before = full(x);
    at::Tensor rows = x.narrow(0, 1, 4);
    rows.normal_();
    at::Tensor drawn = full(rows * 1);
    at::Tensor want_rows = x_before.clone();
    want_rows.narrow(0, 1, 4).copy_(drawn);
    expect_close(full(x), want_rows, "a draw through a copied view");
    EXPECT_FALSE(at::equal(drawn, x_before.narrow(0, 1, 4)));
    // A view whose local is a copy that cannot write back (a merge with the sharded dim) is
    // refused, the tracker unmoved.
    const RngState before = rng_state(mesh);
    const std::string m = error_of<NotImplementedError>([&] { x.t().reshape({30}).normal_(); });
    EXPECT_NE(m.find("in-place op on a view of a DTensor whose local tensor is a copy"),
              std::string::npos) << m;
    EXPECT_EQ(rng_state(mesh), before);
  });
}

TEST(RandomOps, Statistics) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    manual_seed(mesh, 2024);
    at::Tensor x = make(at::zeros({400, 250}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    auto stats = [&] {
      const at::Tensor g = full(x);
      return std::make_pair(g.mean().item<double>(), g.std().item<double>());
    };
    x.normal_(0.5, 2.0);
    auto [m, s] = stats();
    EXPECT_NEAR(m, 0.5, 0.03);
    EXPECT_NEAR(s, 2.0, 0.03);
    x.uniform_(-1.0, 3.0);
    std::tie(m, s) = stats();
    EXPECT_NEAR(m, 1.0, 0.02);
    EXPECT_NEAR(s, 4.0 / std::sqrt(12.0), 0.02);
    EXPECT_GE(full(x).min().item<double>(), -1.0);
    EXPECT_LT(full(x).max().item<double>(), 3.0);
    x.exponential_(2.0);
    std::tie(m, s) = stats();
    EXPECT_NEAR(m, 0.5, 0.01);
    x.geometric_(0.25);
    std::tie(m, s) = stats();
    EXPECT_NEAR(m, 4.0, 0.05);
    EXPECT_EQ(full(x).min().item<double>(), 1.0);
    x.bernoulli_(0.2);
    std::tie(m, s) = stats();
    EXPECT_NEAR(m, 0.2, 0.01);
    x.random_(-3, 5);
    const at::Tensor g = full(x);
    EXPECT_EQ(g.min().item<double>(), -3.0);
    EXPECT_EQ(g.max().item<double>(), 4.0);
    EXPECT_NEAR(g.mean().item<double>(), 0.5, 0.03);
    x.log_normal_(0.0, 0.25);
    std::tie(m, s) = stats();
    EXPECT_NEAR(m, std::exp(0.25 * 0.25 / 2), 0.01);
  });
}

TEST(RandomOps, RefusalsWriteNothingAndKeepTheTracker) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    manual_seed(mesh, 1);
    at::Tensor x = make(global_a({6, 5}), mesh, {Shard(0)}).as_tensor();
    at::Tensor i = make(at::zeros({6, 5}, at::kLong), mesh, {Shard(0)}).as_tensor();
    const at::Tensor before = full(x);
    const RngState state = rng_state(mesh);
    const std::string where = "(arg 0: mesh=[2] placements=[S(0)] shape=[6,5]";
    auto value_error = [&](const std::string& op, const std::function<void()>& f, const std::string& says) {
      const std::string m = error_of<ValueError>(f);
      EXPECT_NE(m.find(op + where), std::string::npos) << m;
      EXPECT_NE(m.find(says), std::string::npos) << m;
    };
    value_error("aten::uniform_", [&] { x.uniform_(2.0, 1.0); },
                "expects to return a [from, to) range, but found from=2 > to=1");
    value_error("aten::normal_", [&] { x.normal_(0.0, -1.0); }, "expects std >= 0.0, but found std=-1");
    value_error("aten::log_normal_", [&] { x.log_normal_(0.0, 0.0); }, "expects std > 0.0, but found std=0");
    value_error("aten::exponential_", [&] { x.exponential_(0.0); }, "expects lambd > 0.0, but found lambd=0");
    value_error("aten::cauchy_", [&] { x.cauchy_(0.0, -2.0); }, "expects sigma > 0.0, but found sigma=-2");
    value_error("aten::geometric_", [&] { x.geometric_(1.0); }, "expects p to be in (0, 1), but found p=1");
    value_error("aten::bernoulli_.float", [&] { x.bernoulli_(1.5); }, "expects p to be in [0, 1], but found p=1.5");
    value_error("aten::bernoulli_.Tensor", [&] { x.bernoulli_(x); },
                "expects all elements of p to be in [0, 1], but found min -2, max 3");
    value_error("aten::random_.from", [&] { x.random_(5, 5); },
                "expects 'from' to be less than 'to', but got from=5 >= to=5");
    value_error("aten::normal_", [&] { i.normal_(); }, "normal_ fills floating point tensors only, not Long");
    value_error("aten::rand_like", [&] { (void)at::rand_like(x, at::kLong); },
                "rand_like fills floating point tensors only, not Long");
    auto refused = [&](const std::string& op, const std::function<void()>& f, const std::string& says) {
      const std::string m = error_of<NotImplementedError>(f);
      EXPECT_NE(m.find(op + where), std::string::npos) << m;
      EXPECT_NE(m.find(says), std::string::npos) << m;
    };
    at::Generator gen = at::detail::createCPUGenerator(7);
    refused("aten::uniform_", [&] { x.uniform_(0.0, 1.0, gen); }, "an explicit generator is not used for a DTensor");
    refused("aten::rand_like.generator", [&] { (void)at::rand_like(x, gen); }, "an explicit generator");
    refused("aten::random_", [&] { i.random_(); }, "random_ without bounds");
    refused("aten::random_.from", [&] { i.random_(int64_t{0}, std::optional<int64_t>()); }, "random_(from, None)");
    EXPECT_TRUE(at::equal(full(x), before));
    EXPECT_EQ(rng_state(mesh), state);
    // A leaf that requires grad: autograd refuses the in-place draw, as for a plain tensor.
    at::Tensor p = make(global_a({6, 5}), mesh, {Shard(0)}).as_tensor().requires_grad_();
    EXPECT_NE(error_of<c10::Error>([&] { p.normal_(); }).find("leaf Variable that requires grad"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace hyper
