// Tensor-parallel styles against the single-device module (ranks as threads, Gloo over
// loopback, 2 and 4 ranks): outputs, parameter and input gradients; async on/off
// identical; state_dict; errors; what the styles report to an observer; fnmatch.
#include "hyper/tp/parallelize.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/nn/modules/container/modulelist.h>

#include <functional>
#include <string>
#include <variant>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"
#include "hyper/nn/modules.h"
#include "hyper/trace/chrome_trace.h"
#include "hyper/trace/step_picture.h"
#include "hyper/trace/timeline.h"

namespace hyper::tp {
namespace {

using comm::testing::HarnessOptions;
using hyper::testing::error_of;
using comm::testing::run_threads;

HarnessOptions opts() {
  return comm::testing::with_timeouts(std::chrono::seconds(30), std::chrono::seconds(300));
}

void on_mesh(int n, const std::function<void(const DeviceMesh&)>& fn) {
  comm::testing::run_on_mesh({n}, fn, opts());
}

/// Deterministic values without the global RNG (ranks are threads of one process and
/// would race on it).
at::Tensor det(at::IntArrayRef shape, int seed) {
  int64_t n = 1;
  for (auto v : shape) n *= v;
  return at::sin(at::arange(n, at::kFloat) * 0.73 + seed * 1.37).reshape(shape);
}

at::Tensor det_ids(at::IntArrayRef shape, int64_t vocab, int seed) {
  int64_t n = 1;
  for (auto v : shape) n *= v;
  return ((at::arange(n, at::kLong) * 7 + seed) % vocab).reshape(shape);
}

/// Overwrites every parameter with deterministic values.
void init_params(torch::nn::Module& m, int seed) {
  at::NoGradGuard g;
  int i = 0;
  for (auto& p : m.named_parameters()) {
    p.value().copy_(det(p.value().sizes(), seed + 10 * i++) * 0.5);
  }
}

/// norm -> w1 -> gelu -> w2 (+ residual): the Megatron MLP.
struct Mlp : torch::nn::Module {
  Mlp(int64_t d, int64_t h, bool bias) {
    norm = register_module("norm", nn::LayerNorm(torch::nn::LayerNormOptions({d})));
    w1 = register_module("w1", nn::Linear(torch::nn::LinearOptions(d, h).bias(bias)));
    w2 = register_module("w2", nn::Linear(torch::nn::LinearOptions(h, d).bias(bias)));
  }
  at::Tensor forward(const at::Tensor& x) {
    auto h = norm->forward(x);
    return w2->forward(at::gelu(w1->forward(h))) + x;
  }
  nn::LayerNorm norm{nullptr};
  nn::Linear w1{nullptr}, w2{nullptr};
};

std::shared_ptr<Mlp> make_mlp(int64_t d, int64_t h, bool bias) {
  auto m = std::make_shared<Mlp>(d, h, bias);
  init_params(*m, 7);  // non-trivial LayerNorm parameters too, so their gradients are tested
  return m;
}

/// A deep copy (separate parameters) of an unparallelized Mlp.
std::shared_ptr<Mlp> copy_mlp(const Mlp& m, int64_t d, int64_t h, bool bias) {
  auto c = std::make_shared<Mlp>(d, h, bias);
  at::NoGradGuard g;
  auto src = m.named_parameters();
  for (auto& p : c->named_parameters()) p.value().copy_(src[p.key()]);
  return c;
}

/// Expects every parameter's local value and gradient to be the reference's under the
/// parameter's sharding (from state_dict).
void expect_params_match(const torch::nn::Module& model, const torch::nn::Module& ref,
                         const DeviceMesh& mesh, double tol) {
  auto sd = state_dict(model);
  auto ref_params = ref.named_parameters();
  auto params = model.named_parameters();
  ASSERT_EQ(sd.size(), ref_params.size());
  for (const auto& item : ref_params) {
    const std::string& name = item.key();
    ASSERT_TRUE(sd.count(name)) << name;
    const DTensor& dt = sd.at(name);
    EXPECT_EQ(dt.shape(), item.value().sizes().vec()) << name;
    const auto expect_val = distribute_tensor(item.value().detach(), mesh, dt.placements()).to_local();
    EXPECT_TRUE(at::equal(params[name], expect_val)) << name;
    ASSERT_TRUE(params[name].grad().defined()) << name << " has no grad";
    const auto expect_grad = distribute_tensor(item.value().grad(), mesh, dt.placements()).to_local();
    EXPECT_TRUE(at::allclose(params[name].grad(), expect_grad, tol, tol))
        << name << " grad on rank " << mesh.get_rank() << "\n"
        << params[name].grad() << "\nexpected\n"
        << expect_grad;
  }
}

ParallelizePlan mlp_plan(bool async) {
  return {{"w1", ColwiseParallel().async_op(async)}, {"w2", RowwiseParallel().async_op(async)}};
}

void check_colrow_mlp(int n, bool bias) {
  const int64_t d = 8, h = n == 4 ? 10 : 12;  // 10 on 4 ranks: uneven shards 3,3,3,1
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto model = make_mlp(d, h, bias);
    auto ref = copy_mlp(*model, d, h, bias);
    auto names = parallelize_module(model, mesh, mlp_plan(true));
    EXPECT_EQ(names, (std::vector<std::string>{"w1", "w2"}));
    auto x = det({3, 5, d}, 11);
    auto g = det({3, 5, d}, 12);
    auto xr = x.clone().requires_grad_(true);
    auto yr = ref->forward(xr);
    (yr * g).sum().backward();
    auto xp = x.clone().requires_grad_(true);
    auto y = model->forward(xp);
    EXPECT_TRUE(at::allclose(y, yr, 1e-5, 1e-5)) << "rank " << mesh.get_rank();
    (y * g).sum().backward();
    EXPECT_TRUE(at::allclose(xp.grad(), xr.grad(), 1e-5, 1e-5));
    expect_params_match(*model, *ref, mesh, 1e-5);
  });
}

TEST(TpParallelize, ColRowMlpTwoRanks) { check_colrow_mlp(2, true); }
TEST(TpParallelize, ColRowMlpFourRanksUneven) { check_colrow_mlp(4, true); }
TEST(TpParallelize, ColRowMlpNoBias) { check_colrow_mlp(2, false); }

void check_sequence_parallel(int n) {
  const int64_t d = 8, h = 16, seq = 8;
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto model = make_mlp(d, h, true);
    auto ref = copy_mlp(*model, d, h, true);
    parallelize_module(model, mesh,
                       {{"norm", SequenceParallel()},
                        {"w1", ColwiseParallel().input_layouts(Shard(1))},
                        {"w2", RowwiseParallel().output_layouts(Shard(1))}});
    auto x = det({2, seq, d}, 11);
    auto g = det({2, seq, d}, 12);
    auto xr = x.clone().requires_grad_(true);
    auto yr = ref->forward(xr);
    (yr * g).sum().backward();
    // Each rank feeds its sequence shard and gets its sequence shard back.
    const auto r = mesh.get_local_rank(0);
    auto xs = x.chunk(n, 1)[r].clone().requires_grad_(true);
    auto y = model->forward(xs);
    EXPECT_TRUE(at::allclose(y, yr.chunk(n, 1)[r], 1e-5, 1e-5)) << "rank " << r;
    (y * g.chunk(n, 1)[r]).sum().backward();
    EXPECT_TRUE(at::allclose(xs.grad(), xr.grad().chunk(n, 1)[r], 1e-5, 1e-5));
    expect_params_match(*model, *ref, mesh, 1e-5);
    auto sd = state_dict(*model);
    EXPECT_TRUE(sd.at("norm.weight").placements()[0].is_replicate());
    EXPECT_TRUE(sd.at("w1.weight").placements()[0] == Shard(0));
    EXPECT_TRUE(sd.at("w2.weight").placements()[0] == Shard(1));
    EXPECT_TRUE(sd.at("w2.bias").placements()[0].is_replicate());
    // Converts to a checkpoint-style map of variants (what hyper::dcp::StateDict is).
    using VariantDict = std::map<std::string, std::variant<DTensor, at::Tensor, int64_t>>;
    VariantDict vd = state_dict(*model);
    ASSERT_EQ(vd.size(), sd.size());
    EXPECT_EQ(std::get<DTensor>(vd.at("w1.weight")).shape(), (std::vector<int64_t>{16, 8}));
    // The DTensors share the parameters' storage (a checkpoint load writes in place).
    EXPECT_EQ(sd.at("w1.weight").to_local().data_ptr(), model->w1->weight.data_ptr());
    EXPECT_TRUE(at::allclose(sd.at("w1.weight").full_tensor(), ref->w1->weight));
  });
}

TEST(TpParallelize, SequenceParallelTwoRanks) { check_sequence_parallel(2); }
TEST(TpParallelize, SequenceParallelFourRanks) { check_sequence_parallel(4); }

TEST(TpParallelize, AsyncOnAndOffAreIdentical) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    std::vector<at::Tensor> outs, grads;
    for (bool async : {false, true}) {
      auto model = make_mlp(8, 12, true);
      parallelize_module(model, mesh, mlp_plan(async));
      auto x = det({4, 8}, 3).requires_grad_(true);
      auto y = model->forward(x);
      y.pow(2).sum().backward();
      outs.push_back(y);
      grads.push_back(x.grad());
      for (auto& p : model->parameters()) grads.push_back(p.grad());
    }
    EXPECT_TRUE(at::equal(outs[0], outs[1]));
    const size_t k = grads.size() / 2;
    for (size_t i = 0; i < k; ++i) EXPECT_TRUE(at::equal(grads[i], grads[i + k])) << i;
  });
}

// Sequence parallel with an uneven sequence (7 over 2 and 4 ranks): Colwise with a Shard(1)
// input computes its own rows while the gather is in flight when async; values and
// gradients are bit-identical to async off and match the single-device module.
void check_sequence_parallel_async_identity(int n) {
  const int64_t d = 8, h = 12, seq = 7;
  on_mesh(n, [&](const DeviceMesh& mesh) {
    const auto r = mesh.get_local_rank(0);
    auto x = det({2, seq, d}, 21);
    auto g = det({2, seq, d}, 22);
    auto ref = make_mlp(d, h, true);
    auto xr = x.clone().requires_grad_(true);
    (ref->forward(xr) * g).sum().backward();
    std::vector<at::Tensor> outs, grads;
    for (bool async : {false, true}) {
      auto model = copy_mlp(*ref, d, h, true);
      parallelize_module(model, mesh,
                         {{"norm", SequenceParallel().async_op(async)},
                          {"w1", ColwiseParallel().input_layouts(Shard(1)).async_op(async)},
                          {"w2", RowwiseParallel().output_layouts(Shard(1)).async_op(async)}});
      auto xs = x.chunk(n, 1)[r].clone().requires_grad_(true);
      auto y = model->forward(xs);
      (y * g.chunk(n, 1)[r]).sum().backward();
      EXPECT_TRUE(at::allclose(y, ref->forward(x).chunk(n, 1)[r], 1e-5, 1e-5)) << "rank " << r;
      EXPECT_TRUE(at::allclose(xs.grad(), xr.grad().chunk(n, 1)[r], 1e-5, 1e-5));
      outs.push_back(y);
      grads.push_back(xs.grad());
      for (auto& p : model->parameters()) grads.push_back(p.grad());
    }
    EXPECT_TRUE(at::equal(outs[0], outs[1]));
    const size_t k = grads.size() / 2;
    for (size_t i = 0; i < k; ++i) EXPECT_TRUE(at::equal(grads[i], grads[i + k])) << i;
  });
}

TEST(TpParallelize, SequenceParallelAsyncIdenticalUnevenTwoRanks) {
  check_sequence_parallel_async_identity(2);
}
TEST(TpParallelize, SequenceParallelAsyncIdenticalUnevenFourRanks) {
  check_sequence_parallel_async_identity(4);
}

struct EmbModel : torch::nn::Module {
  EmbModel(int64_t vocab, int64_t dim) {
    emb = register_module("emb", nn::Embedding(torch::nn::EmbeddingOptions(vocab, dim)));
    proj = register_module("proj", nn::Linear(dim, 4));
  }
  at::Tensor forward(const at::Tensor& ids) { return proj->forward(emb->forward(ids)); }
  nn::Embedding emb{nullptr};
  nn::Linear proj{nullptr};
};

void check_embedding(int n, bool rowwise) {
  const int64_t vocab = 11, dim = 10;  // 4 ranks: rows/cols 3,3,3,2 and 3,3,3,1
  on_mesh(n, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<EmbModel>(vocab, dim);
    init_params(*model, 5);
    auto ref = std::make_shared<EmbModel>(vocab, dim);
    init_params(*ref, 5);
    if (rowwise) {
      parallelize_module(model, mesh, {{"emb", RowwiseParallel()}});
    } else {
      parallelize_module(model, mesh, {{"emb", ColwiseParallel().output_layouts(Replicate())}});
    }
    auto ids = det_ids({3, 7}, vocab, 9);
    auto g = det({3, 7, 4}, 9);
    (ref->forward(ids) * g).sum().backward();
    auto y = model->forward(ids);
    EXPECT_TRUE(at::allclose(y, ref->forward(ids), 1e-5, 1e-5));
    (y * g).sum().backward();
    expect_params_match(*model, *ref, mesh, 1e-5);
  });
}

TEST(TpParallelize, EmbeddingRowwise) {
  check_embedding(2, true);
  check_embedding(4, true);
}
TEST(TpParallelize, EmbeddingColwise) {
  check_embedding(2, false);
  check_embedding(4, false);
}

TEST(TpParallelize, PrepareModuleInputAndOutput) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto model = make_mlp(6, 8, true);
    auto ref = copy_mlp(*model, 6, 8, true);
    // The norm receives a batch shard, needs the whole batch, and hands out a batch shard.
    parallelize_module(model, mesh,
                       {{"norm", PrepareModuleInput({Shard(0)}, {Replicate()})},
                        {"norm", PrepareModuleOutput(Replicate(), Shard(0))}});
    auto x = det({4, 6}, 2);
    const auto r = mesh.get_local_rank(0);
    auto out = model->norm->forward(x.chunk(2, 0)[r]);
    EXPECT_TRUE(at::allclose(out, ref->norm->forward(x).chunk(2, 0)[r], 1e-5, 1e-5));
    EXPECT_THROW(PrepareModuleInput({Shard(0)}, {}), ValueError);
    EXPECT_THROW(PrepareModuleInput({Shard(0)}, {std::nullopt}), ValueError);
  });
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << haystack

struct Mixed : torch::nn::Module {
  Mixed() {
    a = register_module("a", nn::Linear(4, 4));
    plain = register_module("plain", torch::nn::Linear(4, 4));
    norm = register_module("norm", nn::LayerNorm(torch::nn::LayerNormOptions({4})));
  }
  nn::Linear a{nullptr};
  torch::nn::Linear plain{nullptr};
  nn::LayerNorm norm{nullptr};
};

TEST(TpParallelize, Errors) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto m = std::make_shared<Mixed>();
    // A plain torch::nn::Linear takes Colwise/Rowwise (plain_module_test.cc), not a style it
    // cannot support without hooks.
    EXPECT_HAS(error_of([&] { parallelize_module(m, mesh, {{"plain", SequenceParallel()}}); }),
               "declare it as hyper::nn::Linear");
    EXPECT_HAS(error_of([&] { parallelize_module(m, mesh, {{"mlp.*", ColwiseParallel()}}); }),
               "plan entry 'mlp.*' (ColwiseParallel(input_layouts=R, output_layouts=S(-1)");
    EXPECT_HAS(error_of([&] { parallelize_module(m, mesh, {{"norm", ColwiseParallel()}}); }),
               "supports hyper::nn::Linear and hyper::nn::Embedding, got hyper::nn::LayerNorm");
    EXPECT_THROW(parallelize_module(m, mesh, {{"a", ColwiseParallel().use_local_output(false)}}),
                 NotImplementedError);
    parallelize_module(m, mesh, {{"a", ColwiseParallel()}});
    EXPECT_HAS(error_of([&] { parallelize_module(m, mesh, {{"a", RowwiseParallel()}}); }),
               "'a' is already parallelized by ColwiseParallel");
    EXPECT_THROW(parallelize_module(m, mesh, {{"a", ColwiseParallel()}}), ValueError);
    EXPECT_THROW(parallelize_module(m, DeviceMesh(), ColwiseParallel()), ValueError);
    // A style applied directly twice (bypassing parallelize_module's bookkeeping).
    nn::Linear lone(4, 4);
    StyleContext sc{"lone", mesh};
    ColwiseParallel().apply(*lone, sc);
    EXPECT_HAS(error_of([&] { ColwiseParallel().apply(*lone, sc); }),
               "'lone': the Linear is already parallelized");
    // state_dict: nothing parallelized and no mesh.
    auto fresh = std::make_shared<Mixed>();
    EXPECT_HAS(error_of([&] { state_dict(*fresh); }), "no module is parallelized");
    EXPECT_EQ(state_dict(*fresh, mesh).size(), 6u);
    // Rowwise on an Embedding with padding_idx.
    auto e = std::make_shared<EmbModel>(10, 4);
    e->emb->options.padding_idx(0);
    EXPECT_THROW(parallelize_module(e, mesh, {{"emb", RowwiseParallel()}}), NotImplementedError);
  });
  run_threads(
      4,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2, 2}, {"dp", "tp"});
        auto m = std::make_shared<Mixed>();
        EXPECT_HAS(error_of([&] { parallelize_module(m, mesh, {{"a", ColwiseParallel()}}); }),
                   "needs a 1-D mesh");
        parallelize_module(m, mesh["tp"], {{"a", ColwiseParallel()}});  // a sub-mesh is fine
      },
      opts());
}

TEST(TpParallelize, Fnmatch) {
  EXPECT_TRUE(fnmatch("w*", "w1"));
  EXPECT_TRUE(fnmatch("*", ""));
  EXPECT_TRUE(fnmatch("w?", "w1"));
  EXPECT_FALSE(fnmatch("w?", "w12"));
  EXPECT_TRUE(fnmatch("w[12]", "w2"));
  EXPECT_FALSE(fnmatch("w[!12]", "w2"));
  EXPECT_TRUE(fnmatch("w[0-9]", "w7"));
  EXPECT_TRUE(fnmatch("a*b*c", "axxbyyc"));
  EXPECT_FALSE(fnmatch("a*b*c", "axxbyy"));
  EXPECT_TRUE(module_name_matches("layers.*.mlp.w1", "layers.0.mlp.w1"));
  EXPECT_FALSE(module_name_matches("layers.*.w1", "layers.0.mlp.w1"));
  EXPECT_FALSE(module_name_matches("layers.*", "layers.0.mlp"));
  EXPECT_TRUE(module_name_matches("attn.q", "attn.q"));
}

struct Stack : torch::nn::Module {
  Stack() {
    layers = register_module("layers", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) layers->push_back(std::make_shared<Mlp>(8, 8, true));
  }
  at::Tensor forward(at::Tensor x) {
    for (const auto& l : *layers) x = l->as<Mlp>()->forward(x);
    return x;
  }
  torch::nn::ModuleList layers{nullptr};
};

TEST(TpParallelize, PatternsAndTimeline) {
  using trace::RegionKind;
  trace::Timeline timeline;
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<Stack>();
    init_params(*model, 4);
    ParallelizeOptions po;
    po.observer = &timeline;
    auto names = parallelize_module(
        model, mesh, {{"layers.*.w1", ColwiseParallel()}, {"layers.*.w2", RowwiseParallel()}}, po);
    EXPECT_EQ(names.size(), 6u);
    EXPECT_EQ(names.front(), "layers.0.w1");
    model->forward(det({4, 8}, 1)).sum().backward();
  });
  auto events = timeline.events();
  EXPECT_EQ(timeline.num_open(), 0u);  // every region reported began and ended
  int comm = 0, compute = 0;
  for (const auto& e : events) (e.kind == RegionKind::kComm ? comm : compute)++;
  // Every parallelized module's forward on both ranks, plus w1's weight gradient.
  EXPECT_EQ(compute, 2 * 6 + 2 * 3);
  // w2's all-reduce per layer (w1's forward: R->R, S(-1)->S(-1) no comm), plus w1's input
  // gradient all-reduce in backward.
  EXPECT_EQ(comm, 2 * 3 + 2 * 3);
  // In backward the input-gradient collective of each w1 is in flight while its weight
  // gradient is computed: the compute region lies inside the comm region.
  int nested = 0;
  for (const auto& wg : events) {
    if (wg.name.find("w1: weight grad") == std::string::npos) continue;
    for (const auto& c : events) {
      if (c.rank != wg.rank || c.kind != RegionKind::kComm ||
          c.name.rfind(wg.name.substr(0, wg.name.find(':')) + ": input grad", 0) != 0)
        continue;
      EXPECT_LE(c.start_us, wg.start_us) << c.name;
      EXPECT_GE(c.end_us, wg.end_us) << c.name;
      ++nested;
    }
  }
  EXPECT_EQ(nested, 2 * 3);
  EXPECT_NO_THROW(nlohmann::json::parse(trace::to_chrome_trace(events)));
  EXPECT_GT(trace::render_step_picture(events).size(), 100u);
}

}  // namespace
}  // namespace hyper::tp
