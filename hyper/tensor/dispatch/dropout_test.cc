// Dropout on DTensor tensors with the mesh's RNG tracker (dropout_kernels.h, random.h): the mask
// depends only on (seed, offset, global element index), so every layout of the same global
// tensor (R, S(0), S(1), uneven S, Partial, RaggedShard; 1, 2 and 4 ranks, a 2x2 mesh) gives
// the same result, checked against the documented formula computed here with a plain loop on
// unsigned 64-bit words (the oracle: the same dropout of the full tensor on one device), values
// and gradients; the tracker's offsets, reproduction by manual_seed, statistics, the
// torch::nn::Dropout module, and every refusal.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/nn/functional/dropout.h>
#include <torch/nn/modules/dropout.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/mesh_attachment.h"
#include "hyper/comm/stats.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/dropout_rules.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
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
using dispatch_testing::global_b;
using dispatch_testing::make;

// ---- the oracle: random.h's formula, written out on uint64_t ----------------------------

using dispatch_testing::rng_u;
/// The keep mask of a draw of `shape` at (seed, offset), element by element.
at::Tensor keep_of(uint64_t seed, int64_t offset, const std::vector<int64_t>& shape, double p) {
  at::Tensor k = at::empty(shape, at::kBool);
  auto flat = k.view({-1});
  auto acc = flat.accessor<bool, 1>();
  for (int64_t i = 0; i < flat.numel(); ++i)
    acc[i] = rng_u(seed, static_cast<uint64_t>(offset + i)) >= p;
  return k;
}
/// The single-device dropout of `x` (ATen's order: x * mask, then * scale).
at::Tensor dropout_of(const at::Tensor& x, uint64_t seed, int64_t offset, double p) {
  return x.mul(keep_of(seed, offset, x.sizes().vec(), p)).mul_(p == 1.0 ? 0.0 : 1.0 / (1.0 - p));
}

/// Rank `idx`'s piece of a global tensor in a non-Partial layout (its box; ragged: its interval).
at::Tensor piece(const at::Tensor& global, const Layout& l, int64_t idx) {
  if (l.is_ragged()) {
    const Interval iv = l.ragged_interval(idx);
    return global.reshape({-1}).slice(0, iv.start, iv.end);
  }
  const Box b = l.local_box(idx);
  at::Tensor r = global;
  for (int64_t d = 0; d < b.rank(); ++d) r = r.narrow(d, b.offsets[d], b.sizes[d]);
  return r;
}

bool has_partial(const Placements& ps) {
  for (const auto& q : ps)
    if (q.is_partial()) return true;
  return false;
}

std::vector<Placements> layouts_1d(int64_t n) {
  std::vector<Placements> v = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()},
                               {Partial("avg")}, {Partial("max")}};
  // 7 rows: uneven units, an empty rank on 4 ranks.
  v.push_back({n == 2 ? RaggedShard({0}, {3, 4}) : RaggedShard({0}, {2, 0, 4, 1})});
  return v;
}

/// Values and gradients of dropout(x, p) for `x` in each of `cat` against the oracle at
/// (seed, offset 0): every rank's local equals its piece of the oracle (so Replicate regions
/// agree across ranks), Partial(sum/avg) stays Partial, the gradient is G * mask * scale.
void layout_cases(const DeviceMesh& mesh, const std::vector<Placements>& cat,
                  const std::vector<int64_t>& shape, double p) {
  const uint64_t seed = 1234;
  const at::Tensor X = global_a(shape), G = global_b(shape);
  const at::Tensor want = dropout_of(X, seed, 0, p);
  const at::Tensor want_grad = dropout_of(G, seed, 0, p);
  for (const Placements& ps : cat) {
    const std::string what = to_string(ps) + " on " + mesh.to_string() + " p=" + std::to_string(p);
    manual_seed(mesh, seed);
    at::Tensor x = make(X, mesh, ps).as_tensor().requires_grad_();
    const at::Tensor y = at::dropout(x, p, true);
    expect_close(full(y), want, what);
    const DTensor dy = as_dtensor(y);
    if (!has_partial(ps)) {
      EXPECT_EQ(dy.layout(), as_dtensor(x).layout()) << what;
      // Bit for bit, this rank's piece: Replicate regions equal on every rank.
      EXPECT_TRUE(at::equal(dy.to_local(), piece(want, dy.layout(), dy.mesh_index()))) << what;
    }
    for (size_t m = 0; m < ps.size(); ++m)
      if (ps[m].is_partial())  // sum / avg stay Partial (no communication), max / min reduce
        EXPECT_EQ(dy.placements()[m], dispatch::linear_partial(ps[m]) ? ps[m] : Replicate()) << what;
    EXPECT_EQ(rng_state(mesh).offset, X.numel()) << what;
    (y * make(G, mesh, ps).as_tensor()).sum().backward();
    expect_close(full(x.grad()), want_grad, "grad " + what);
  }
}

TEST(Dropout, EveryLayoutEqualsTheOneDeviceDropoutOnTwoAndFourRanks) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      layout_cases(mesh, layouts_1d(n), {7, 5}, 0.3);
      layout_cases(mesh, {{Shard(0)}, {Replicate()}}, {3, 4}, 0.5);  // rank 3 of 4: empty
    });
}

TEST(Dropout, TwoByTwoMeshAndOneRankMesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    layout_cases(mesh,
                 {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Replicate(), Shard(0)},
                  {Shard(0), Replicate()}, {Shard(0), Shard(0)}, {Partial(), Shard(1)},
                  {Replicate(), Replicate()}},
                 {7, 5}, 0.3);
  });
  run_on_mesh({1}, [](const DeviceMesh& mesh) {
    layout_cases(mesh, {{Replicate()}, {Shard(0)}}, {7, 5}, 0.3);
  });
}

// Partial(sum) with p = 0.5: the shares times the mask times 2 sum to the dropout of the sum
// exactly (scaling by 2 and by 0/1 does not round), with no communication before the reduce.
TEST(Dropout, PartialSumStaysPartialAndIsExactForAPowerOfTwoScale) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({6, 3});
    manual_seed(mesh, 7);
    const at::Tensor x = make(X, mesh, {Partial()}).as_tensor();
    comm::reset_stats(mesh);
    const at::Tensor y = at::dropout(x, 0.5, true);
    EXPECT_EQ(comm::stats(mesh).calls(), 0);
    EXPECT_EQ(as_dtensor(y).placements(), Placements{Partial()});
    EXPECT_TRUE(at::equal(full(y), full(x).mul(keep_of(7, 0, {6, 3}, 0.5)).mul_(2.0)));
  });
}

TEST(Dropout, StatisticsOfAHundredThousandElements) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_b({400, 250});  // > 0: a zero output is a dropped element
    for (double p : {0.1, 0.3, 0.5, 0.9}) {
      manual_seed(mesh, 99);
      const at::Tensor y = full(at::dropout(make(X, mesh, {Shard(0)}).as_tensor(), p, true));
      const at::Tensor kept = y.ne(0);
      const double frac = kept.to(at::kDouble).mean().item<double>();
      EXPECT_NEAR(frac, 1.0 - p, 0.01) << "p=" << p;
      EXPECT_TRUE(at::allclose(y.masked_select(kept), X.masked_select(kept) / (1.0 - p))) << p;
    }
  });
}

// Two calls draw different masks; the offset advances by the global numel on every rank
// (uneven and empty shards included); manual_seed with the same seed reproduces both.
TEST(Dropout, OffsetsAdvanceByGlobalNumelAndManualSeedReproduces) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_b({3, 4});  // S(0) on 4 ranks: rank 3 empty
    manual_seed(mesh, 5);
    EXPECT_EQ(rng_state(mesh), (RngState{5, 0, true}));
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    const at::Tensor y1 = full(at::dropout(x, 0.5, true));
    EXPECT_EQ(rng_state(mesh).offset, 12);
    const at::Tensor y2 = full(at::dropout(make(X, mesh, {Shard(1)}).as_tensor(), 0.5, true));
    EXPECT_EQ(rng_state(mesh).offset, 24);
    EXPECT_FALSE(at::equal(y1, y2));
    EXPECT_TRUE(at::equal(y1, dropout_of(X, 5, 0, 0.5)));
    EXPECT_TRUE(at::equal(y2, dropout_of(X, 5, 12, 0.5)));
    // No draw: eval, p == 0, p == 1 (ATen's at::dropout does not draw for them either).
    (void)at::dropout(x, 0.5, false);
    (void)at::dropout(x, 0.0, true);
    EXPECT_TRUE(at::equal(full(at::dropout(x, 1.0, true)), at::zeros_like(X)));
    EXPECT_EQ(rng_state(mesh).offset, 24);
    manual_seed(mesh, 5);
    EXPECT_TRUE(at::equal(full(at::dropout(x, 0.5, true)), y1));
    EXPECT_TRUE(at::equal(full(at::dropout(x, 0.5, true)), y2));
    manual_seed(mesh, 6);
    EXPECT_FALSE(at::equal(full(at::dropout(x, 0.5, true)), y1));
    // A sub-mesh and another mesh object of the same topology: `mesh[0]` taken twice shares
    // one tracker (the same topology as `mesh` here, a 1-D mesh).
    EXPECT_EQ(rng_state(mesh[0]), rng_state(mesh));
  });
}

// An unseeded tracker takes the seed of rank 0's torch default generator (broadcast), so the
// ranks agree on it at the first draw; manual_seed refuses differing seeds on every rank.
TEST(Dropout, RanksAgreeOnTheSeedByConstruction) {
  const uint64_t torch_seed = at::detail::getDefaultCPUGenerator().current_seed();
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    EXPECT_FALSE(rng_state(mesh).seeded);
    const at::Tensor X = global_b({4, 6});
    const at::Tensor y = at::dropout(make(X, mesh, {Replicate()}).as_tensor(), 0.5, true);
    EXPECT_EQ(rng_state(mesh), (RngState{torch_seed, 24, true}));
    EXPECT_TRUE(at::equal(as_dtensor(y).to_local(), dropout_of(X, torch_seed, 0, 0.5)));

    manual_seed(mesh, 11);
    const uint64_t mine = 100 + static_cast<uint64_t>(mesh.get_rank());
    const std::string m = error_of<ValueError>([&] { manual_seed(mesh, mine); });
    EXPECT_NE(m.find("hyper::manual_seed: the ranks of DeviceMesh(cpu, [2], rank="),
              std::string::npos) << m;
    EXPECT_NE(m.find("passed different seeds [100, 101] (in mesh-group order; this rank passed " +
                     std::to_string(mine) + "): every rank of the mesh must pass the same seed"),
              std::string::npos) << m;
    EXPECT_EQ(rng_state(mesh), (RngState{11, 0, true}));  // unchanged
  });
}

// Processes (each its own torch default generator) seeded 100 + rank: an unseeded mesh's first
// dropout takes rank 0's seed on every rank (one broadcast), so a Replicate region draws one
// mask everywhere, and the mask is the formula's for seed 100.
TEST(Dropout, ProcessesWithDifferentTorchSeedsTakeRankZerosSeed) {
  comm::testing::run_processes(2, [](int rank, int n, const World& world) {
    at::manual_seed(100 + static_cast<uint64_t>(rank));
    const DeviceMesh mesh = init_device_mesh(world, "cpu", {n});
    const at::Tensor X = global_b({4, 6});
    const at::Tensor x = make(X, mesh, {Replicate()}).as_tensor();
    comm::reset_stats(mesh);
    const at::Tensor y = at::dropout(x, 0.5, true);
    if (comm::stats(mesh).calls() != 1) throw std::runtime_error("expected one broadcast");
    if (!(rng_state(mesh) == RngState{100, 24, true}))
      throw std::runtime_error("rank " + std::to_string(rank) + " has seed " +
                               std::to_string(rng_state(mesh).seed));
    if (!at::equal(as_dtensor(y).to_local(), dropout_of(X, 100, 0, 0.5)))
      throw std::runtime_error("rank " + std::to_string(rank) + ": not seed 100's mask");
    (void)at::dropout(x, 0.5, true);
    if (comm::stats(mesh).calls() != 1) throw std::runtime_error("a second broadcast");
    comm::all_reduce(at::ones({1}), comm::ReduceOp::kSum, mesh.get_group(0));  // then tear down
  });
}

// A sub-mesh has its own tracker: seeding the 2x2 mesh leaves mesh[1] unseeded, and each
// mesh[1] group (a DP replica's TP group) may take its own seed (the collective check runs
// over that group only), so the replicas draw different masks for the same global index.
TEST(Dropout, SubMeshesHaveTheirOwnTrackers) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    manual_seed(mesh, 1);
    const DeviceMesh tp = mesh[1];
    EXPECT_FALSE(rng_state(tp).seeded);
    const int64_t dp = mesh.get_coordinate()[0];
    manual_seed(tp, 10 + static_cast<uint64_t>(dp));
    const at::Tensor X = global_b({4, 6});
    const at::Tensor y = at::dropout(make(X, tp, {Shard(1)}).as_tensor(), 0.5, true);
    EXPECT_TRUE(at::equal(full(y), dropout_of(X, 10 + static_cast<uint64_t>(dp), 0, 0.5)));
    EXPECT_FALSE(at::equal(dropout_of(X, 10, 0, 0.5), dropout_of(X, 11, 0, 0.5)));
    EXPECT_EQ(rng_state(mesh[1]), (RngState{10 + static_cast<uint64_t>(dp), 24, true}));
    EXPECT_EQ(rng_state(mesh), (RngState{1, 0, true}));  // the 2x2 mesh's tracker did not move
  });
}

TEST(Dropout, NnDropoutModuleInTrainAndEvalMode) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6});
    for (bool inplace : {false, true}) {
      torch::nn::Dropout drop(torch::nn::DropoutOptions(0.25).inplace(inplace));
      manual_seed(mesh, 3);
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor().requires_grad_();
      at::Tensor y = drop(x * 1.0);  // a non-leaf: the in-place form may write it
      expect_close(full(y), dropout_of(X, 3, 0, 0.25), "train inplace=" + std::to_string(inplace));
      y.sum().backward();
      expect_close(full(x.grad()), dropout_of(at::ones_like(X), 3, 0, 0.25), "module grad");
      drop->eval();
      expect_close(full(drop(x * 1.0)), X, "eval");
      EXPECT_EQ(rng_state(mesh).offset, 30);
    }
  });
}

TEST(Dropout, NativeDropoutAndItsMask) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({7, 5});
    manual_seed(mesh, 21);
    const at::Tensor x = make(X, mesh, {Partial()}).as_tensor();
    auto [y, mask] = at::native_dropout(x, 0.3, true);
    EXPECT_EQ(as_dtensor(mask).placements(), Placements{Replicate()});  // one mask, every share
    EXPECT_EQ(mask.scalar_type(), at::kBool);
    EXPECT_TRUE(at::equal(full(mask), keep_of(21, 0, {7, 5}, 0.3)));
    expect_close(full(y), dropout_of(X, 21, 0, 0.3), "native_dropout P");
    auto [e, emask] = at::native_dropout(x, 0.3, false);  // eval: a copy, no draw
    expect_close(full(e), X, "eval");
    EXPECT_TRUE(full(emask).all().item<bool>());
    EXPECT_EQ(rng_state(mesh).offset, 35);
    // The backward's rule: linear in grad (Partial grad stays Partial).
    const at::Tensor g = at::native_dropout_backward(make(X, mesh, {Partial()}).as_tensor(), mask,
                                                     1.0 / 0.7);
    EXPECT_EQ(as_dtensor(g).placements(), Placements{Partial()});
    expect_close(full(g), dropout_of(X, 21, 0, 0.3), "native_dropout_backward");
    // RaggedShard: the mask of the flat interval, the backward on the same layout.
    const Placements rs = {RaggedShard({0}, {3, 4})};
    auto [yr, mr] = at::native_dropout(make(X, mesh, rs).as_tensor(), 0.3, true);
    EXPECT_EQ(as_dtensor(mr).placements(), rs);
    EXPECT_TRUE(at::equal(full(mr), keep_of(21, 35, {7, 5}, 0.3)));
    const at::Tensor gr = at::native_dropout_backward(make(X, mesh, rs).as_tensor(), mr, 1.0 / 0.7);
    EXPECT_EQ(as_dtensor(gr).placements(), rs);
    expect_close(full(gr), dropout_of(X, 21, 35, 0.3), "native_dropout_backward ragged");
  });
}

// The tracker's own errors, and the float32 path (the same mask as double).
TEST(Dropout, TrackerErrorsAndFloat32) {
  std::string m = error_of<ValueError>([] { (void)rng_state(DeviceMesh()); });
  EXPECT_EQ(m, "hyper RNG tracker: the mesh is undefined");
  m = error_of<ValueError>([] {
    (void)comm::mesh_attachment(DeviceMesh(), "k", [] { return std::shared_ptr<void>(); });
  });
  EXPECT_EQ(m, "mesh_attachment(k): the mesh is undefined");
  m = error_of<ValueError>([] { (void)uniform_at(at::zeros({2}), 1, 0); });
  EXPECT_EQ(m, "hyper::uniform_at: the index tensor must be int64, not Float");
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const std::string e = error_of<ValueError>([&] { (void)draw_rng(mesh, -3); });
    EXPECT_EQ(e, "hyper RNG tracker: a draw of -3 elements (negative)");
    EXPECT_FALSE(rng_state(mesh).seeded);  // a refused draw seeds nothing
    manual_seed(mesh, 8);
    const at::Tensor X = global_a({5, 4}).to(at::kFloat);
    const at::Tensor y = at::dropout(make(X, mesh, {Shard(0)}).as_tensor(), 0.2, true);
    EXPECT_EQ(y.scalar_type(), at::kFloat);
    EXPECT_TRUE(at::equal(full(y), dropout_of(X, 8, 0, 0.2)));
    // uniform_at of explicit indices: the formula, element by element.
    const at::Tensor idx = at::arange(1000, at::kLong) * 977 - 5000;
    const at::Tensor u = uniform_at(idx, 42, 17);
    for (int64_t i = 0; i < idx.numel(); i += 97)
      EXPECT_EQ(u[i].item<double>(), rng_u(42, static_cast<uint64_t>(idx[i].item<int64_t>() + 17)));
  });
}

// ---- feature_dropout / alpha_dropout / feature_alpha_dropout ------------------------------

const char* const kNoiseOps[] = {"feature_dropout", "alpha_dropout", "feature_alpha_dropout"};

at::Tensor noise_call(int op, const at::Tensor& x, double p, bool train) {
  if (op == 0) return at::feature_dropout(x, p, train);
  if (op == 1) return at::alpha_dropout(x, p, train);
  return at::feature_alpha_dropout(x, p, train);
}
void noise_call_(int op, at::Tensor& x, double p) {
  if (op == 0) at::feature_dropout_(x, p, true);
  else if (op == 1) at::alpha_dropout_(x, p, true);
  else at::feature_alpha_dropout_(x, p, true);
}

/// The noise's shape: the input's (alpha), or [N, C, 1, ...] (feature).
std::vector<int64_t> noise_shape(int op, std::vector<int64_t> shape) {
  if (op != 1)
    for (size_t k = 2; k < shape.size(); ++k) shape[k] = 1;
  return shape;
}

/// The single-device op on `x` (ATen's _dropout_impl, Dropout.cpp) with the documented mask at
/// (seed, offset) in place of bernoulli_: feature ops one draw per (sample, channel).
at::Tensor noise_dropout_of(int op, const at::Tensor& x, uint64_t seed, int64_t offset, double p) {
  at::Tensor noise = keep_of(seed, offset, noise_shape(op, x.sizes().vec()), p).to(x.scalar_type());
  if (op == 0) return x.mul(noise.div_(1 - p));
  const double alpha = 1.7580993408473766;
  const double a = 1. / std::sqrt((alpha * alpha * p + 1) * (1 - p));
  const at::Tensor b = noise.add(-1).mul_(alpha * a).add_(alpha * a * p);
  noise.mul_(a);
  return x.mul(noise).add(b);
}

/// Values (bit for bit for non-Partial layouts, each rank's piece), placements, the tracker's
/// offset and gradients of the three ops (and the in-place forms' values) on `shape` in each
/// of `cat` against the single-device op of the full tensor at (seed, offset 0).
void noise_cases(const DeviceMesh& mesh, const std::vector<Placements>& cat,
                 const std::vector<int64_t>& shape, double p) {
  const uint64_t seed = 4321;
  const at::Tensor X = global_a(shape), G = global_b(shape);
  for (int op = 0; op < 3; ++op) {
    const at::Tensor xr = X.clone().requires_grad_();
    const at::Tensor want = noise_dropout_of(op, xr, seed, 0, p);
    (want * G).sum().backward();
    int64_t drawn = 1;
    for (int64_t s : noise_shape(op, shape)) drawn *= s;
    for (const Placements& ps : cat) {
      bool ragged = false;
      for (const auto& q : ps) ragged = ragged || q.is_ragged_shard();
      if (ragged && op != 1) continue;  // refused (Refusals)
      const std::string what = std::string(kNoiseOps[op]) + " " + to_string(ps) + " on " +
                               mesh.to_string() + " p=" + std::to_string(p);
      manual_seed(mesh, seed);
      const at::Tensor x = make(X, mesh, ps).as_tensor().requires_grad_();
      at::Tensor y;
      try {
        y = noise_call(op, x, p, true);
      } catch (const std::exception& e) {
        ADD_FAILURE() << what << ": " << e.what();
        continue;
      }
      expect_close(full(y), want.detach(), what);
      const DTensor dy = as_dtensor(y);
      if (!has_partial(ps)) {
        EXPECT_EQ(dy.layout(), as_dtensor(x).layout()) << what;
        EXPECT_TRUE(at::equal(dy.to_local(), piece(want.detach(), dy.layout(), dy.mesh_index()))) << what;
      }
      for (size_t m = 0; m < ps.size(); ++m) {
        if (ps[m].is_partial()) {
          EXPECT_EQ(dy.placements()[m], dispatch::linear_partial(ps[m]) ? ps[m] : Replicate()) << what;
        }
      }
      EXPECT_EQ(rng_state(mesh).offset, drawn) << what;
      (y * make(G, mesh, ps).as_tensor()).sum().backward();
      expect_close(full(x.grad()), xr.grad(), "grad " + what);
      // The in-place form: the same values from the same seed (refused for a P(max) input,
      // which the result cannot keep, as every in-place op refuses it).
      manual_seed(mesh, seed);
      at::Tensor xi = make(X, mesh, ps).as_tensor();
      bool pmax = false;
      for (const auto& q : ps) pmax = pmax || (q.is_partial() && !dispatch::linear_partial(q));
      if (pmax) {
        const std::string m = error_of<NotImplementedError>([&] { noise_call_(op, xi, p); });
        EXPECT_NE(m.find("): in-place op would change argument 0's P(max)"), std::string::npos) << m;
        continue;
      }
      noise_call_(op, xi, p);
      expect_close(full(xi), want.detach(), "in-place " + what);
    }
  }
}

TEST(Dropout, FeatureAndAlphaDropoutEqualOneDeviceOnTwoAndFourRanks) {
  for (int64_t n : {2, 4})
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      noise_cases(mesh, layouts_1d(n), {7, 5}, 0.3);  // R, S(0), S(1) (uneven), P, RaggedShard
      // [N, C, L] = [5, 3, 4]: S(1) on 4 ranks leaves rank 3 no channel; S(2): the feature
      // noise is Replicate there.
      noise_cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()},
                         {Partial("max")}}, {5, 3, 4}, 0.5);
    });
}

TEST(Dropout, FeatureAndAlphaDropoutTwoByTwoMesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    noise_cases(mesh, {{Shard(0), Shard(2)}, {Shard(2), Shard(1)}, {Partial(), Shard(1)},
                       {Replicate(), Shard(0)}, {Shard(0), Shard(0)}},
                {5, 3, 4}, 0.25);
  });
}

// LibTorch's functional wrappers reach these kernels: F::dropout2d of a 4-D input is
// feature_dropout, F::alpha_dropout / feature_alpha_dropout the ops of the same name.
TEST(Dropout, FunctionalDropout2dAndAlphaDropoutReachTheKernels) {
  namespace F = torch::nn::functional;
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({2, 3, 4, 2});
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    manual_seed(mesh, 11);
    const at::Tensor a = F::dropout2d(x, F::Dropout2dFuncOptions().p(0.5).training(true));
    EXPECT_TRUE(at::equal(full(a), noise_dropout_of(0, X, 11, 0, 0.5)));
    manual_seed(mesh, 11);
    const at::Tensor b = F::alpha_dropout(x, F::AlphaDropoutFuncOptions().p(0.5).training(true));
    EXPECT_TRUE(at::equal(full(b), noise_dropout_of(1, X, 11, 0, 0.5)));
    manual_seed(mesh, 11);
    const at::Tensor c =
        F::feature_alpha_dropout(x, F::FeatureAlphaDropoutFuncOptions().p(0.5).training(true));
    EXPECT_TRUE(at::equal(full(c), noise_dropout_of(2, X, 11, 0, 0.5)));
  });
}

// Over many elements the kept fraction is 1 - p; alpha dropout keeps mean 0 and variance 1 of
// a standard normal input (its purpose: SELU networks), feature dropout zeroes whole channels.
TEST(Dropout, FeatureAndAlphaDropoutStatistics) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    // The same values on every rank thread: a generator of their own, seeded alike.
    const at::Tensor X = at::randn({200, 50, 10}, at::detail::createCPUGenerator(17), at::kDouble);
    manual_seed(mesh, 5);
    const at::Tensor a = full(at::alpha_dropout(make(X, mesh, {Shard(0)}).as_tensor(), 0.2, true));
    EXPECT_NEAR(a.mean().item<double>(), X.mean().item<double>(), 0.02);
    EXPECT_NEAR(a.std().item<double>(), X.std().item<double>(), 0.03);
    const at::Tensor f = full(at::feature_dropout(make(X, mesh, {Shard(2)}).as_tensor(), 0.3, true));
    const at::Tensor zero_channels = f.eq(0).all(2);
    EXPECT_NEAR(zero_channels.to(at::kDouble).mean().item<double>(), 0.3, 0.02);
    EXPECT_TRUE(at::equal(zero_channels, f.eq(0).any(2)));  // all or nothing per channel
  });
}

TEST(Dropout, Refusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    manual_seed(mesh, 1);
    const at::Tensor x = make(global_a({4, 3}), mesh, {Shard(0)}).as_tensor();
    const std::string layout = "(arg 0: mesh=[2] placements=[S(0)] shape=[4,3])";
    for (double p : {1.5, -0.25}) {
      const std::string ps = std::to_string(p);
      std::string m = error_of<ValueError>([&] { (void)at::dropout(x, p, true); });
      EXPECT_NE(m.find("aten::dropout" + layout + " p=" + ps + ": dropout probability has to be "
                       "between 0 and 1, but got " + ps.substr(0, ps.find_last_not_of('0') + 1)),
                std::string::npos) << m;
      m = error_of<ValueError>([&] { (void)at::native_dropout(x, p, true); });
      EXPECT_NE(m.find("aten::native_dropout" + layout + " p=" + ps + ": dropout probability"),
                std::string::npos) << m;
      m = error_of<ValueError>([&] { (void)at::dropout(x, p, false); });  // eval too, like ATen
      EXPECT_NE(m.find("dropout probability has to be between 0 and 1"), std::string::npos) << m;
    }
    const at::Tensor xi = make(at::arange(12).reshape({4, 3}), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)at::dropout(xi, 0.5, true); });
    EXPECT_NE(m.find("aten::dropout(arg 0: mesh=[2] placements=[S(0)] shape=[4,3]) p=0.500000: "
                     "dtype Long is not a floating point type"), std::string::npos) << m;
    for (int op = 0; op < 3; ++op) {
      // Eval, p == 0: the input itself (as ATen), no draw.
      EXPECT_TRUE(noise_call(op, x, 0.5, false).is_same(x)) << op;
      EXPECT_TRUE(noise_call(op, x, 0.0, true).is_same(x)) << op;
      m = error_of<ValueError>([&] { (void)noise_call(op, x, 1.25, true); });
      EXPECT_NE(m.find(std::string("aten::") + kNoiseOps[op] + layout + " p=1.250000: dropout "
                       "probability has to be between 0 and 1"), std::string::npos) << m;
    }
    EXPECT_EQ(rng_state(mesh).offset, 0);  // nothing drew
    // Feature dropout: at least 2 dims (ATen's check), not of a RaggedShard input.
    const at::Tensor x1 = make(global_a({6}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor xr = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    for (int op : {0, 2}) {
      m = error_of<ValueError>([&] { (void)noise_call(op, x1, 0.5, true); });
      EXPECT_NE(m.find(std::string("aten::") + kNoiseOps[op] + "(arg 0: mesh=[2] placements=[S(0)] "
                       "shape=[6]) p=0.500000: feature dropout requires at least 2 dimensions in "
                       "the input, got 1"), std::string::npos) << m;
      m = error_of<NotImplementedError>([&] { (void)noise_call(op, xr, 0.5, true); });
      EXPECT_NE(m.find(std::string("aten::") + kNoiseOps[op] + "(arg 0: mesh=[2] placements=[RS("),
                std::string::npos) << m;
      EXPECT_NE(m.find("shape=[6,4]) p=0.500000: feature dropout of a RaggedShard DTensor is not "
                       "implemented"), std::string::npos) << m;
    }
    EXPECT_EQ(rng_state(mesh).offset, 0);  // nothing drew
    // Double backward (create_graph): autograd's formula converts the mask with type_as
    // (_to_copy, which has a rule: shape_kernels.h): it runs, and the gradient equals
    // mask / (1 - p), the mask read off the forward's output (the input is nonzero).
    const at::Tensor Xg = global_b({4, 3});
    at::Tensor xg = make(Xg, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor yg = at::dropout(xg, 0.5, true);
    const auto gs = torch::autograd::grad({yg.sum()}, {xg}, {}, /*retain_graph=*/true,
                                          /*create_graph=*/true);
    expect_close(full(gs[0]), full(yg).ne(0).to(Xg.scalar_type()) * 2, "create_graph gradient");
    // A stale copied view (the kernels' shared prologue, op_registry.h: the op called names it).
    at::Tensor xs = make(global_a({4, 8}), mesh, {Shard(1)}).as_tensor();
    at::Tensor copied = xs.narrow(1, 2, 3);  // a sharded dim: replicated, a copy
    xs.add_(1);
    m = error_of<NotImplementedError>([&] { (void)at::dropout(copied, 0.5, true); });
    EXPECT_NE(m.find("aten::dropout(arg 0: mesh=[2] placements=[R] shape=[4,3]): "
                     "argument 0 is a view of a DTensor whose local tensor is a copy"),
              std::string::npos) << m;
  });
}

// The layouts, torch-free (dropout_rules.h): the output keeps a linear Partial and reduces
// max/min; the mask and the noise have every Partial Replicate; feature noise is one value per
// (sample, channel).
TEST(DropoutRules, Layouts) {
  const auto lay = [](const std::string& t) { return Layout::from_string(t); };
  const auto p = dispatch::propagate_dropout(lay("mesh=[2,2] placements=[P(sum),P(max)] shape=[4,6]"));
  EXPECT_EQ(p.out.to_string(), "mesh=[2,2] placements=[P(sum),R] shape=[4,6]");
  EXPECT_EQ(p.mask.to_string(), "mesh=[2,2] placements=[R,R] shape=[4,6]");
  EXPECT_EQ(dispatch::propagate_dropout(lay("mesh=[2] placements=[S(1)] shape=[4,6]")).out.to_string(),
            "mesh=[2] placements=[S(1)] shape=[4,6]");
  EXPECT_EQ(dispatch::propagate_noise(lay("mesh=[2,2] placements=[S(0),S(2)] shape=[4,3,8]"), true)
                .to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[4,3,1]");
  EXPECT_EQ(dispatch::propagate_noise(lay("mesh=[2,2] placements=[P(avg),S(2)] shape=[4,3,8]"), false)
                .to_string(),
            "mesh=[2,2] placements=[R,S(2)] shape=[4,3,8]");
}

}  // namespace

}  // namespace hyper
