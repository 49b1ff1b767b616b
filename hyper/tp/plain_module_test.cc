// distribute_module and parallelize_module on plain torch::nn modules: parameters
// become DTensor tensors, the unmodified forward runs through hyper's sharding rules. Oracle:
// the same module on full tensors on one device (values, parameter gradients, SGD steps), on
// 2 and 4 ranks (threads), even and uneven shards; every refusal with its type and message,
// and the parameters unchanged after it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/rnn.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/optim/sgd.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/nn/modules.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/random.h"
#include "hyper/tp/distribute_module.h"
#include "hyper/tp/parallelize.h"

namespace hyper::tp {
namespace {

void on_mesh(int n, const std::function<void(const DeviceMesh&)>& fn) {
  comm::testing::run_on_mesh(
      {n}, fn, comm::testing::with_timeouts(std::chrono::seconds(30), std::chrono::seconds(300)));
}

/// Deterministic values without the global RNG (ranks are threads of one process).
at::Tensor det(at::IntArrayRef shape, int seed) {
  int64_t n = 1;
  for (auto v : shape) n *= v;
  return at::sin(at::arange(n, at::kFloat) * 0.73 + seed * 1.37).reshape(shape);
}

void init_params(torch::nn::Module& m, int seed) {
  at::NoGradGuard g;
  int i = 0;
  for (auto& p : m.named_parameters()) p.value().copy_(det(p.value().sizes(), seed + 10 * i++) * 0.5);
}

using dispatch_testing::error_of;

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

void expect_close(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  EXPECT_TRUE(at::allclose(got, want, 1e-5, 1e-5)) << what << "\ngot\n" << got << "\nwant\n" << want;
}

/// The global value of a parameter (or gradient) that is a DTensor tensor.
at::Tensor full(const at::Tensor& t) {
  EXPECT_TRUE(is_dtensor(t));
  return DTensor::from_tensor(t).full_tensor();
}

Placements placements_of(const at::Tensor& t) { return DTensor::from_tensor(t).placements(); }

/// fc1 -> relu -> fc2 of plain torch::nn::Linear modules.
struct Mlp : torch::nn::Module {
  Mlp(int64_t d, int64_t h, bool bias) {
    fc1 = register_module("fc1", torch::nn::Linear(torch::nn::LinearOptions(d, h).bias(bias)));
    fc2 = register_module("fc2", torch::nn::Linear(torch::nn::LinearOptions(h, d).bias(bias)));
  }
  at::Tensor forward(const at::Tensor& x) { return fc2->forward(at::relu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

std::shared_ptr<Mlp> make_mlp(int64_t d, int64_t h, bool bias, int seed = 1) {
  auto m = std::make_shared<Mlp>(d, h, bias);
  init_params(*m, seed);
  return m;
}

/// A DTensor tensor replicated on `mesh` (the model's input, the loss weights).
at::Tensor replicated(const at::Tensor& t, const DeviceMesh& mesh) {
  return distribute_tensor(t, mesh, {Replicate()}).as_tensor();
}

/// sum(model(x) * w): a loss whose gradient is not all ones.
template <class Model>
at::Tensor loss_of(Model& model, const at::Tensor& x, const at::Tensor& w) {
  return (model.forward(x) * w).sum();
}

/// Runs `model` (parameters DTensor tensors) and `ref` (single device) on `x`: outputs,
/// parameter gradients, then 3 SGD steps: parameters.
/// `plain_input`: the model gets `x` itself (a plain tensor acts as Replicate), else `x` as a
/// replicated DTensor tensor.
template <class Model>
void expect_same_training(Model& model, Model& ref, const at::Tensor& x, const DeviceMesh& mesh,
                          const std::string& what, bool plain_input = false) {
  const at::Tensor y_ref = ref.forward(x);
  const at::Tensor w = det(y_ref.sizes(), 5);
  auto input = [&] { return plain_input ? x : replicated(x, mesh); };
  const at::Tensor y = model.forward(input());
  ASSERT_TRUE(is_dtensor(y)) << what;
  expect_close(full(y), y_ref, what + " output");
  loss_of(ref, x, w).backward();
  loss_of(model, input(), replicated(w, mesh)).backward();
  const auto params = model.named_parameters();
  const auto ref_params = ref.named_parameters();
  ASSERT_EQ(params.size(), ref_params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = params[i].key();
    ASSERT_TRUE(params[i].value().grad().defined()) << what << " " << name;
    expect_close(full(params[i].value().grad()), ref_params[i].value().grad(),
                 what + " grad " + name);
    // The gradient has the parameter's layout (the optimizer updates shards in place).
    EXPECT_EQ(placements_of(params[i].value().grad()), placements_of(params[i].value()))
        << what << " " << name;
  }
  torch::optim::SGD opt(model.parameters(), torch::optim::SGDOptions(0.1));
  torch::optim::SGD opt_ref(ref.parameters(), torch::optim::SGDOptions(0.1));
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    opt_ref.zero_grad();
    loss_of(ref, x, w).backward();
    loss_of(model, input(), replicated(w, mesh)).backward();
    opt.step();
    opt_ref.step();
  }
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(is_dtensor(params[i].value())) << what << " " << params[i].key();
    expect_close(full(params[i].value()), ref_params[i].value(),
                 what + " after 3 SGD steps: " + params[i].key());
  }
}

TEST(TpPlain, MlpColwiseRowwiseMatchesSingleDevice) {
  for (int n : {2, 4}) {
    // h = 12: even shards; h = 10: uneven on 4 ranks (3, 3, 3, 1).
    for (int64_t h : {12, 10}) {
      on_mesh(n, [&](const DeviceMesh& mesh) {
        for (bool bias : {true, false}) {
          for (const std::vector<int64_t>& shape :
               {std::vector<int64_t>{5, 8}, std::vector<int64_t>{2, 3, 8}}) {
            const std::string what = "n=" + std::to_string(n) + " h=" + std::to_string(h) +
                                     " bias=" + std::to_string(bias) + " x" +
                                     std::to_string(shape.size()) + "-D";
            auto ref = make_mlp(8, h, bias);
            auto model = make_mlp(8, h, bias);
            const auto done = parallelize_module(
                model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
            EXPECT_EQ(done, (std::vector<std::string>{"fc1", "fc2"}));
            EXPECT_EQ(placements_of(model->fc1->weight), Placements{Shard(0)});
            EXPECT_EQ(placements_of(model->fc2->weight), Placements{Shard(1)});
            if (bias) {
              EXPECT_EQ(placements_of(model->fc1->bias), Placements{Shard(0)});
              EXPECT_EQ(placements_of(model->fc2->bias), Placements{Replicate()});
            }
            // The typed members are the registered parameters.
            EXPECT_TRUE(model->fc1->weight.is_same(*model->fc1->named_parameters().find("weight")));
            EXPECT_TRUE(model->fc1->weight.requires_grad());
            // The activation after the Rowwise fc2 is Partial until something reduces it.
            const at::Tensor y = model->forward(replicated(det(shape, 3), mesh));
            EXPECT_EQ(placements_of(y), Placements{Partial()}) << what;
            expect_same_training(*model, *ref, det(shape, 3), mesh, what);
            // The same from a plain input (Replicate; the matmul rule uses it as it is).
            auto ref2 = make_mlp(8, h, bias);
            auto model2 = make_mlp(8, h, bias);
            parallelize_module(model2, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
            expect_same_training(*model2, *ref2, det(shape, 3), mesh, what + " plain input",
                                 /*plain_input=*/true);
            // state_dict: the DTensors themselves.
            const ParamDict sd = state_dict(*model);
            EXPECT_EQ(sd.at("fc1.weight").placements(), Placements{Shard(0)});
            expect_close(sd.at("fc1.weight").full_tensor(), ref->fc1->weight, what + " state_dict");
          }
        }
      });
    }
  }
}

// A DTensor parameter's gradient keeps a row-major local (distribute_module.cc's gradient
// hook): the weight gradient of a Linear on a 3-D input is computed for `weight.t()` and
// arrived transposed, so every optimizer op walked a transposed shard. Values equal one
// device's (the ops' results are unchanged, only their memory order).
TEST(TpPlain, ParameterGradientsHaveRowMajorLocals) {
  on_mesh(2, [](const DeviceMesh& mesh) {
    auto ref = make_mlp(8, 12, true);
    auto model = make_mlp(8, 12, true);
    parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
    const at::Tensor x = det({2, 3, 8}, 3);
    model->forward(replicated(x, mesh)).sum().backward();
    ref->forward(x).sum().backward();
    for (const auto& p : model->named_parameters()) {
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      const DTensor g = as_dtensor(p.value().grad());
      EXPECT_TRUE(g.to_local().is_contiguous()) << p.key() << " strides " << g.to_local().strides();
      EXPECT_EQ(g.layout(), as_dtensor(p.value()).layout()) << p.key();
      expect_close(g.full_tensor(), ref->named_parameters()[p.key()].grad(), p.key());
    }
  });
}

// The handle of a parallelized plain module's output continues its graph: a loss computed
// through DTensor::from_tensor(out).full_tensor(), through to_local() of a redistributed handle,
// or mixing such a term with one on the at::Tensor form gives the parameters the single-device
// gradients (2 and 4 ranks; h = 10 is uneven on 4).
TEST(TpPlain, HandleOfTheOutputBackpropagatesIntoTheParameters) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      const at::Tensor x = det({2, 3, 8}, 3);
      enum Route { kFullTensor, kToLocal, kMixed };
      for (Route route : {kFullTensor, kToLocal, kMixed}) {
        const std::string what = "n=" + std::to_string(n) + " route " + std::to_string(route);
        auto ref = make_mlp(8, 10, true);
        auto model = make_mlp(8, 10, true);
        parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
        const at::Tensor y_ref = ref->forward(x);
        const at::Tensor out = model->forward(replicated(x, mesh));
        const DTensor h = DTensor::from_tensor(out);
        ASSERT_TRUE(h.requires_grad()) << what;
        if (route == kFullTensor) {
          y_ref.pow(2).sum().backward();
          h.full_tensor().pow(2).sum().backward();
        } else if (route == kToLocal) {
          // Each rank's loss is its own rows' part; the parts add up to the whole loss.
          y_ref.pow(2).sum().backward();
          h.redistribute(mesh, {Shard(1)}).to_local().pow(2).sum().backward();
        } else {
          (y_ref.sum() + y_ref.pow(2).sum()).backward();
          (out.sum() + h.full_tensor().pow(2).sum()).backward();
        }
        for (const auto& p : model->named_parameters()) {
          ASSERT_TRUE(p.value().grad().defined()) << what << " " << p.key();
          expect_close(full(p.value().grad()), ref->named_parameters()[p.key()].grad(),
                       what + " grad " + p.key());
        }
      }
    });
  }
}

TEST(TpPlain, SequentialMatchesSingleDevice) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      auto make = [] {
        torch::nn::Sequential s(torch::nn::Linear(6, 10), torch::nn::ReLU(), torch::nn::Linear(10, 6));
        init_params(*s, 2);
        return s;
      };
      torch::nn::Sequential model = make(), ref = make();
      parallelize_module(model.ptr(), mesh, {{"0", ColwiseParallel()}, {"2", RowwiseParallel()}});
      expect_same_training(*model, *ref, det({2, 3, 6}, 4), mesh, "Sequential n=" + std::to_string(n));
    });
  }
}

/// x + fc2(gelu(fc1(x))): a user module made of plain Linears with a residual add.
struct ResMlp : torch::nn::Module {
  ResMlp(int64_t d, int64_t h) {
    fc1 = register_module("fc1", torch::nn::Linear(d, h));
    fc2 = register_module("fc2", torch::nn::Linear(h, d));
  }
  at::Tensor forward(const at::Tensor& x) { return x + fc2->forward(at::gelu(fc1->forward(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

TEST(TpPlain, ResidualKeepsRowwisePartial) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      auto make = [] {
        auto m = std::make_shared<ResMlp>(6, 10);
        init_params(*m, 4);
        return m;
      };
      auto model = make(), ref = make();
      parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
      const at::Tensor x = det({2, 3, 6}, 8);
      // R + P stays P: the add needs no reduction (the R operand is zeroed off coordinate 0).
      EXPECT_EQ(placements_of(model->forward(replicated(x, mesh))), Placements{Partial()});
      expect_same_training(*model, *ref, x, mesh, "residual n=" + std::to_string(n));
    });
  }
}

TEST(TpPlain, DistributeModuleDefaultReplicatesRankZeroValues) {
  on_mesh(4, [&](const DeviceMesh& mesh) {
    const int rank = static_cast<int>(mesh.get_rank());
    auto ref = make_mlp(6, 8, true, /*seed=*/1);
    auto model = make_mlp(6, 8, true, /*seed=*/1 + rank);  // every rank different values
    distribute_module(model, mesh);
    for (const auto& p : model->named_parameters()) {
      EXPECT_EQ(placements_of(p.value()), Placements{Replicate()}) << p.key();
      // Rank 0's values on every rank (as PyTorch's src_data_rank=0).
      expect_close(DTensor::from_tensor(p.value()).to_local(),
                   *ref->named_parameters().find(p.key()), "local " + p.key());
    }
    expect_same_training(*model, *ref, det({5, 6}, 3), mesh, "distribute_module default");
  });
  on_mesh(2, [&](const DeviceMesh& mesh) {
    const int rank = static_cast<int>(mesh.get_rank());
    auto model = make_mlp(6, 8, true, 1 + rank);
    distribute_module(model, mesh, nullptr, /*src_data_rank=*/std::nullopt);  // own values
    expect_close(DTensor::from_tensor(model->fc1->weight).to_local(),
                 make_mlp(6, 8, true, 1 + rank)->fc1->weight, "own values");
  });
}

TEST(TpPlain, ResetParametersDrawsTheSameWeightsInEveryLayout) {
  // torch::nn::init on DTensor parameters draws from the mesh's RNG tracker by global index
  // (dispatch/random_kernels.h): a parallelized module re-initialized holds the weights a
  // replicated one gets from the same seed, within kaiming's bound 1/sqrt(fan_in).
  for (int n : {2, 4})
    on_mesh(n, [&](const DeviceMesh& mesh) {
      auto reset = [&](bool parallel) {
        auto model = make_mlp(8, 10, true);
        if (parallel)
          parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
        else
          distribute_module(model, mesh);
        manual_seed(mesh, 77);
        model->fc1->reset_parameters();
        model->fc2->reset_parameters();
        std::vector<at::Tensor> v;
        for (const auto& p : model->named_parameters()) v.push_back(full(p.value()));
        return v;
      };
      const auto sharded = reset(true), replicated = reset(false);
      ASSERT_EQ(sharded.size(), 4u);
      for (size_t i = 0; i < sharded.size(); ++i)
        EXPECT_TRUE(at::equal(sharded[i], replicated[i])) << i;
      const double bound1 = 1.0 / std::sqrt(8.0), bound2 = 1.0 / std::sqrt(10.0);
      EXPECT_LE(sharded[0].abs().max().item<double>(), bound1);
      EXPECT_LE(sharded[2].abs().max().item<double>(), bound2);
      EXPECT_GT(sharded[0].std().item<double>(), bound1 / 4);  // drawn, not constant
    });
}

TEST(TpPlain, DistributeModuleWithPartitionFn) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      auto ref = make_mlp(8, 10, true);
      auto model = make_mlp(8, 10, true);
      std::vector<std::string> seen;
      distribute_module(model, mesh, [&](const std::string& name, torch::nn::Module& m,
                                         const DeviceMesh& mesh_) {
        seen.push_back(name);
        if (name == "fc1") {
          distribute_parameter(m, "weight", mesh_, {Shard(0)});
          distribute_parameter(m, "bias", mesh_, {Shard(0)});
        } else if (name == "fc2") {
          distribute_parameter(m, "weight", mesh_, {Shard(1)});  // bias left: Replicate
        }
      });
      EXPECT_EQ(seen, (std::vector<std::string>{"", "fc1", "fc2"}));
      EXPECT_EQ(placements_of(model->fc1->weight), Placements{Shard(0)});
      EXPECT_EQ(placements_of(model->fc1->bias), Placements{Shard(0)});
      EXPECT_EQ(placements_of(model->fc2->weight), Placements{Shard(1)});
      EXPECT_EQ(placements_of(model->fc2->bias), Placements{Replicate()});
      expect_same_training(*model, *ref, det({2, 3, 8}, 6), mesh,
                           "partition_fn n=" + std::to_string(n));
    });
  }
}

/// A user module that keeps its own member copy of a parameter.
struct HiddenCopy : torch::nn::Module {
  HiddenCopy() {
    fc = register_module("fc", torch::nn::Linear(4, 4));
    w = register_parameter("w", det({4}, 1));
  }
  at::Tensor forward(const at::Tensor& x) { return fc->forward(x) * w; }
  torch::nn::Linear fc{nullptr};
  at::Tensor w;
};

/// No parameter of `m` is a DTensor and the values are `before`'s.
void expect_unchanged(torch::nn::Module& m, const std::vector<at::Tensor>& before) {
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), before.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_FALSE(is_dtensor(params[i])) << i;
    EXPECT_TRUE(at::equal(params[i], before[i])) << i;
  }
}

std::vector<at::Tensor> values_of(torch::nn::Module& m) {
  std::vector<at::Tensor> v;
  for (const auto& p : m.parameters()) v.push_back(p.detach().clone());
  return v;
}

TEST(TpPlain, OtherHoldersAreRefusedAndNothingChanges) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    // A member copy in a user module.
    auto hidden = std::make_shared<HiddenCopy>();
    const auto before = values_of(*hidden);
    std::string m = error_of<ValueError>([&] { distribute_module(hidden, mesh); });
    EXPECT_HAS(m, "parameter 'w' of module (");
    EXPECT_HAS(m, "HiddenCopy) has 1 holder(s) besides the module's registry");
    EXPECT_HAS(m, "Build optimizers after distribute_module / parallelize_module");
    EXPECT_HAS(m, "No parameter was changed");
    expect_unchanged(*hidden, before);  // fc's parameters were not replaced either

    // An optimizer built before.
    auto model = make_mlp(4, 6, true);
    const auto before2 = values_of(*model);
    {
      torch::optim::SGD opt(model->parameters(), torch::optim::SGDOptions(0.1));
      m = error_of<ValueError>([&] {
        parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel()}});
      });
      EXPECT_HAS(m, "parameter 'fc1.weight' of module 'fc1' (torch::nn::LinearImpl) has 1 "
                    "holder(s) besides the module's registry and its typed member");
      expect_unchanged(*model, before2);
      m = error_of<ValueError>([&] { distribute_module(model, mesh); });
      EXPECT_HAS(m, "parameter 'fc1.weight' of module 'fc1'");
      m = error_of<ValueError>([&] {
        distribute_parameter(*model->fc2, "weight", mesh, {Shard(0)});
      });
      EXPECT_HAS(m, "parameter 'weight' of module (torch::nn::LinearImpl) has 1 holder(s)");
      expect_unchanged(*model, before2);
    }
    // A LibTorch module that keeps its own copies (LSTM's flat weights).
    torch::nn::LSTM lstm(4, 4);
    const auto before3 = values_of(*lstm);
    m = error_of<ValueError>([&] { distribute_module(lstm.ptr(), mesh); });
    EXPECT_HAS(m, "parameter 'weight_ih_l0' of module (torch::nn::LSTMImpl) has 1 holder(s)");
    expect_unchanged(*lstm, before3);
    // Once the optimizer is gone, it works.
    parallelize_module(model, mesh, {{"fc1", ColwiseParallel()}});
    EXPECT_TRUE(is_dtensor(model->fc1->weight));
  });
}

TEST(TpPlain, NonDefaultLayoutsAndBoundaryStylesAreRefused) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto model = make_mlp(4, 6, true);
    const auto before = values_of(*model);
    auto refused = [&](const ParallelizePlan& plan) {
      return error_of<NotImplementedError>([&] { parallelize_module(model, mesh, plan); });
    };
    std::string m = refused({{"fc1", ColwiseParallel().input_layouts(Shard(0))}});
    EXPECT_HAS(m, "parallelize_module: ColwiseParallel(input_layouts=S(0)");
    EXPECT_HAS(m, "on plain module 'fc1' (torch::nn::LinearImpl): input_layouts=S(0) is not the "
                  "default; a plain torch::nn module has no forward hooks");
    EXPECT_HAS(m, "declare it as hyper::nn::Linear");
    m = refused({{"fc1", ColwiseParallel().output_layouts(Replicate())}});
    EXPECT_HAS(m, "'fc1' (torch::nn::LinearImpl): output_layouts=R is not the default");
    m = refused({{"fc2", RowwiseParallel().output_layouts(Shard(0))}});
    EXPECT_HAS(m, "'fc2' (torch::nn::LinearImpl): output_layouts=S(0) is not the default");
    m = refused({{"fc2", RowwiseParallel().input_layouts(Replicate())}});
    EXPECT_HAS(m, "'fc2' (torch::nn::LinearImpl): input_layouts=R is not the default");
    m = refused({{"fc1", PrepareModuleInput({Shard(0)}, {Replicate()})}});
    EXPECT_HAS(m, "PrepareModuleInput(input_layouts=(S(0)), desired_input_layouts=(R)");
    EXPECT_HAS(m, "on plain module 'fc1' (torch::nn::LinearImpl): only ColwiseParallel, "
                  "RowwiseParallel and SequenceParallel apply to a plain torch::nn module");
    m = refused({{"fc2", PrepareModuleOutput(Partial(), Replicate())}});
    EXPECT_HAS(m, "PrepareModuleOutput(output_layouts=P(sum)");
    // A refusal in a later entry leaves the earlier entries' modules unchanged.
    m = refused({{"fc1", ColwiseParallel()}, {"fc2", RowwiseParallel().output_layouts(Shard(0))}});
    EXPECT_HAS(m, "'fc2' (torch::nn::LinearImpl): output_layouts=S(0)");
    expect_unchanged(*model, before);
    // Default layouts given explicitly are accepted.
    parallelize_module(model, mesh, {{"fc1", ColwiseParallel().input_layouts(Replicate())},
                                     {"fc2", RowwiseParallel().input_layouts(Shard(-1))}});
    EXPECT_EQ(placements_of(model->fc2->weight), Placements{Shard(1)});
  });
}

struct Norms : torch::nn::Module {
  Norms() {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({4})));
    fc = register_module("fc", torch::nn::Linear(4, 4));
    emb = register_module("emb", torch::nn::Embedding(10, 4));
    relu = register_module("relu", torch::nn::ReLU());
  }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc{nullptr};
  torch::nn::Embedding emb{nullptr};
  torch::nn::ReLU relu{nullptr};
};

TEST(TpPlain, ModuleTypesAndRepeats) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    auto model = std::make_shared<Norms>();
    init_params(*model, 3);
    const auto before = values_of(*model);
    auto value_error = [&](const ParallelizePlan& plan) {
      return error_of<ValueError>([&] { parallelize_module(model, mesh, plan); });
    };
    std::string m = value_error({{"norm", ColwiseParallel()}});
    EXPECT_HAS(m, "on plain module 'norm' (torch::nn::LayerNormImpl): on a plain torch::nn "
                  "module the style supports torch::nn::Linear and torch::nn::Embedding; for "
                  "forward hooks declare it as hyper::nn::LayerNorm");
    m = value_error({{"fc", SequenceParallel()}});
    EXPECT_HAS(m, "'fc' (torch::nn::LinearImpl): on a plain torch::nn module the style supports "
                  "torch::nn::LayerNorm");
    m = value_error({{"relu", RowwiseParallel()}});
    EXPECT_HAS(m, "'relu' (torch::nn::ReLUImpl)");
    EXPECT_HAS(m, "declare it as hyper::nn::Hooked<torch::nn::ReLUImpl>");
    m = value_error({{"fc", ColwiseParallel()}, {"f?", RowwiseParallel()}});
    EXPECT_HAS(m, "plain module 'fc' is given ColwiseParallel(");
    EXPECT_HAS(m, "a module takes one parameter-sharding style");
    expect_unchanged(*model, before);

    // Embedding: Colwise shards the table's columns (S(1)); the lookup of plain ids equals
    // the single-device one. Rowwise: rows (S(0)), a masked lookup summed over ranks.
    parallelize_module(model, mesh, {{"emb", ColwiseParallel()}});
    EXPECT_EQ(placements_of(model->emb->weight), Placements{Shard(1)});
    const at::Tensor ids = at::tensor({3, 0, 9, 3, 7}, at::kLong).reshape({5});
    expect_close(full(model->emb->forward(ids)), at::embedding(before[4], ids), "Colwise Embedding");
    {
      auto other = std::make_shared<Norms>();
      init_params(*other, 3);
      parallelize_module(other, mesh, {{"emb", RowwiseParallel()}});
      EXPECT_EQ(placements_of(other->emb->weight), Placements{Shard(0)});
      expect_close(full(other->emb->forward(ids)), at::embedding(before[4], ids), "Rowwise Embedding");
    }

    // SequenceParallel on a plain LayerNorm: parameters replicated.
    parallelize_module(model, mesh, {{"norm", SequenceParallel()}});
    EXPECT_EQ(placements_of(model->norm->weight), Placements{Replicate()});
    EXPECT_EQ(placements_of(model->norm->bias), Placements{Replicate()});
    expect_close(full(model->norm->weight), before[0], "norm weight");
    // Its forward on a sequence shard equals the single-device LayerNorm's.
    {
      torch::nn::LayerNorm ref_norm(torch::nn::LayerNormOptions({4}));
      {
        at::NoGradGuard g;
        ref_norm->weight.copy_(before[0]);
        ref_norm->bias.copy_(before[1]);
      }
      const at::Tensor xs = det({2, 3, 4}, 7);
      const at::Tensor y = model->norm->forward(distribute_tensor(xs, mesh, {Shard(1)}).as_tensor());
      expect_close(full(y), ref_norm->forward(xs), "plain LayerNorm on S(1)");
    }
    m = error_of<NotImplementedError>([&] {
      parallelize_module(model, mesh, {{"norm", SequenceParallel().input_layouts(Replicate())}});
    });
    EXPECT_HAS(m, "input_layouts=R is not the default");
    // Already parallelized.
    m = value_error({{"norm", SequenceParallel()}});
    EXPECT_HAS(m, "the module is already parallelized or distributed (its parameter 'weight' is "
                  "a DTensor, mesh=[2] placements=[R]");
    parallelize_module(model, mesh, {{"fc", ColwiseParallel()}});
    m = value_error({{"fc", RowwiseParallel()}});
    EXPECT_HAS(m, "'fc' (torch::nn::LinearImpl): the module is already parallelized");
  });
}

TEST(TpPlain, DistributeModuleRefusals) {
  on_mesh(2, [&](const DeviceMesh& mesh) {
    // distribute_parameter: unknown, undefined, already distributed.
    auto model = make_mlp(4, 6, false);
    std::string m = error_of<ValueError>([&] { distribute_parameter(*model->fc1, "w", mesh, {Shard(0)}); });
    EXPECT_HAS(m, "module torch::nn::LinearImpl has no parameter 'w' (its parameters: [weight, "
                  "bias])");
    m = error_of<ValueError>([&] { distribute_parameter(*model->fc1, "bias", mesh, {Shard(0)}); });
    EXPECT_HAS(m, "parameter 'bias' of torch::nn::LinearImpl is undefined");
    distribute_parameter(*model->fc1, "weight", mesh, {Shard(1)});
    EXPECT_EQ(placements_of(model->fc1->weight), Placements{Shard(1)});
    m = error_of<ValueError>([&] { distribute_parameter(*model->fc1, "weight", mesh, {Shard(0)}); });
    EXPECT_HAS(m, "parameter 'weight' of torch::nn::LinearImpl already is a DTensor (mesh=[2] "
                  "placements=[S(1)]");
    // An already distributed parameter is kept by distribute_module.
    distribute_module(model, mesh);
    EXPECT_EQ(placements_of(model->fc1->weight), Placements{Shard(1)});
    EXPECT_EQ(placements_of(model->fc2->weight), Placements{Replicate()});
    // A hookable module parallelized by a style holds local shards: refused.
    struct Hooked : torch::nn::Module {
      Hooked() { lin = register_module("lin", nn::Linear(4, 6)); }
      nn::Linear lin{nullptr};
    };
    auto hooked = std::make_shared<Hooked>();
    parallelize_module(hooked, mesh, {{"lin", ColwiseParallel()}});
    const auto before_h = values_of(*hooked);
    m = error_of<ValueError>([&] { distribute_module(hooked, mesh); });
    EXPECT_HAS(m, "hyper::distribute_module: module 'lin' (hyper::nn::LinearImpl) is "
                  "parallelized by ColwiseParallel(");
    EXPECT_HAS(m, "its parameters are local shards");
    expect_unchanged(*hooked, before_h);
    // from_tensor of a plain tensor.
    m = error_of<ValueError>([&] { DTensor::from_tensor(at::zeros({2, 3})); });
    EXPECT_HAS(m, "got a plain tensor (cpu, Float, sizes [2, 3])");
    const DTensor d = distribute_tensor(det({4}, 1), mesh, {Shard(0)});
    EXPECT_TRUE(DTensor::from_tensor(d.as_tensor()).to_local().is_same(d.to_local()));
  });
}


// An unmodified convolutional network (Conv2d, BatchNorm2d, MaxPool2d, a grouped Conv2d,
// GroupNorm, AdaptiveAvgPool2d, Linear) trained data-parallel: parameters Replicate, buffers
// plain, the batch sharded. BatchNorm's statistics are the global batch's (synchronised), so
// loss, parameters and running statistics equal the single-device run's; 2 and 4 ranks (6
// images on 4: 2, 2, 2 and an empty shard), then the evaluation forward.
struct ConvNet : torch::nn::Module {
  ConvNet() {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(3, 8, 3).padding(1)));
    bn = register_module("bn", torch::nn::BatchNorm2d(8));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(8, 8, 3).padding(1).groups(2)));
    gn = register_module("gn", torch::nn::GroupNorm(2, 8));
    pool = register_module("pool", torch::nn::MaxPool2d(2));
    gap = register_module("gap", torch::nn::AdaptiveAvgPool2d(1));
    fc = register_module("fc", torch::nn::Linear(8, 5));
  }
  at::Tensor forward(at::Tensor x) {
    x = pool->forward(at::relu(bn->forward(c1->forward(x))));
    x = at::relu(gn->forward(c2->forward(x)));
    return fc->forward(gap->forward(x).flatten(1));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::BatchNorm2d bn{nullptr};
  torch::nn::GroupNorm gn{nullptr};
  torch::nn::MaxPool2d pool{nullptr};
  torch::nn::AdaptiveAvgPool2d gap{nullptr};
  torch::nn::Linear fc{nullptr};
};

TEST(TpPlain, ConvNetTrainsDataParallel) {
  namespace F = torch::nn::functional;
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      auto model = std::make_shared<ConvNet>(), ref = std::make_shared<ConvNet>();
      init_params(*model, 3);
      init_params(*ref, 3);
      distribute_module(model, mesh);
      for (const auto& p : model->named_parameters())
        EXPECT_EQ(placements_of(p.value()), Placements{Replicate()}) << p.key();
      EXPECT_FALSE(is_dtensor(model->bn->running_mean));
      torch::optim::SGD opt(model->parameters(), 0.1), opt_ref(ref->parameters(), 0.1);
      const at::Tensor labels = at::remainder(at::arange(6, at::kLong) * 3, 5);
      for (int step = 0; step < 3; ++step) {
        const std::string what = "step " + std::to_string(step) + " on " + std::to_string(n) + " ranks";
        const at::Tensor x = det({6, 3, 8, 8}, step);
        const at::Tensor loss_ref = F::cross_entropy(ref->forward(x), labels);
        const at::Tensor loss = F::cross_entropy(
            model->forward(distribute_tensor(x, mesh, {Shard(0)}).as_tensor()),
            distribute_tensor(labels, mesh, {Shard(0)}).as_tensor());
        expect_close(full(loss), loss_ref.detach(), what + " loss");
        opt_ref.zero_grad();
        loss_ref.backward();
        opt_ref.step();
        opt.zero_grad();
        loss.backward();
        opt.step();
      }
      const auto params = model->named_parameters();
      const auto ref_params = ref->named_parameters();
      for (size_t i = 0; i < params.size(); ++i)
        expect_close(full(params[i].value()), ref_params[i].value(), "parameter " + params[i].key());
      for (const char* b : {"running_mean", "running_var"})
        expect_close(*model->bn->named_buffers().find(b), *ref->bn->named_buffers().find(b), b);
      EXPECT_EQ(model->bn->num_batches_tracked.item<int64_t>(), 3);
      // state_dict keeps the buffers (Replicate, sharing their storage: a load writes them).
      const ParamDict sd = state_dict(*model);
      ASSERT_EQ(sd.size(), params.size() + 3) << "parameters + bn's three buffers";
      expect_close(sd.at("bn.running_mean").full_tensor(), ref->bn->running_mean, "state_dict buffer");
      EXPECT_EQ(sd.at("bn.num_batches_tracked").placements(), Placements{Replicate()});
      sd.at("bn.running_var").to_local().fill_(2.0);
      EXPECT_TRUE(at::equal(model->bn->running_var, at::full({8}, 2.0)));
      model->bn->running_var.copy_(ref->bn->running_var);
      model->eval();
      ref->eval();
      const at::Tensor x = det({6, 3, 8, 8}, 9);
      expect_close(full(model->forward(distribute_tensor(x, mesh, {Shard(0)}).as_tensor())),
                   ref->forward(x).detach(), "eval");
    });
  }
}
}  // namespace
}  // namespace hyper::tp

namespace hyper::tp {
namespace {

// overlap_gradient_redistribution: data parallel (Replicate parameters, a batch-sharded
// input) gives P(sum) gradients. Without the hook they stay Partial and the optimizer reduces
// them; with it each is redistributed to Replicate by an async collective issued during the
// backward, and the optimizer's step moves nothing. Values: the single-device module.
TEST(TpPlain, GradientRedistributionStartsInTheBackward) {
  for (int n : {2, 4}) {
    for (int64_t batch : {8, 6}) {  // 6 rows on 4 ranks: uneven (2, 2, 1, 1)
      on_mesh(n, [&](const DeviceMesh& mesh) {
        const std::string what = "n=" + std::to_string(n) + " batch=" + std::to_string(batch);
        auto ref = make_mlp(8, 12, true);
        auto hooked = make_mlp(8, 12, true);
        auto plain = make_mlp(8, 12, true);
        distribute_module(hooked, mesh);
        distribute_module(plain, mesh);
        EXPECT_EQ(overlap_gradient_redistribution(hooked), 4) << what;
        const at::Tensor X = det({batch, 8}, 3), W = det({batch, 8}, 5);
        auto sharded = [&](const at::Tensor& t) {
          return distribute_tensor(t, mesh, {Shard(0)}).as_tensor();
        };
        auto backward = [&](Mlp& m) {  // the bytes sent until every gradient is there
          const at::Tensor loss = loss_of(m, sharded(X), sharded(W));
          return dispatch_testing::bytes_of(mesh, [&] {
            loss.backward();
            for (const auto& p : m.parameters()) DTensor::from_tensor(p.grad()).wait();
          });
        };
        loss_of(*ref, X, W).backward();
        // Without the hook: nothing moves in the backward, the gradients are P(sum).
        EXPECT_EQ(backward(*plain), 0) << what;
        EXPECT_EQ(placements_of(plain->fc1->weight.grad()), Placements{Partial()}) << what;
        // With it: the gradients were pending results of collectives issued in the backward.
        EXPECT_GT(backward(*hooked), 0) << what;
        const auto params = hooked->named_parameters();
        const auto ref_params = ref->named_parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          const at::Tensor g = params[i].value().grad();
          EXPECT_EQ(placements_of(g), Placements{Replicate()}) << what << " " << params[i].key();
          EXPECT_EQ(DTensor::from_tensor(g).wait_count(), 1) << what << " " << params[i].key();
          expect_close(full(g), ref_params[i].value().grad(), what + " grad " + params[i].key());
        }
        // The step reads gradients already in the parameters' layout: no bytes.
        torch::optim::SGD opt(hooked->parameters(), torch::optim::SGDOptions(0.1));
        torch::optim::SGD opt_ref(ref->parameters(), torch::optim::SGDOptions(0.1));
        EXPECT_EQ(dispatch_testing::bytes_of(mesh, [&] { opt.step(); }), 0) << what;
        opt_ref.step();
        for (int step = 0; step < 2; ++step) {
          opt.zero_grad();
          opt_ref.zero_grad();
          backward(*hooked);
          loss_of(*ref, X, W).backward();
          opt.step();
          opt_ref.step();
        }
        for (size_t i = 0; i < params.size(); ++i)
          expect_close(full(params[i].value()), ref_params[i].value(),
                       what + " after 3 SGD steps: " + params[i].key());
      });
    }
  }
}

/// Two [4, 6] parameters stacked (their gradients come from stack's backward, an unbind).
struct Stacked : torch::nn::Module {
  Stacked() {
    register_parameter("a", det({4, 6}, 1));
    register_parameter("b", det({4, 6}, 2));
  }
  at::Tensor forward(const at::Tensor& scale) { return at::stack({p("a"), p("b")}) * scale; }
  at::Tensor p(const std::string& name) const { return named_parameters()[name]; }
};

// torch::nn::utils::clip_grad_norm_ scales each gradient in place through `grad.data()`. A
// gradient made by slicing a sharded dim of a gradient (stack's and cat's backward: an unbind /
// narrow of the output's gradient, sharded along the stacked dim) is a copy of the slice that
// remembers its base. The gradient hook of
// distribute_module / parallelize_module parameters hands AccumulateGrad a gradient of its own
// (the base is autograd's temporary): clipping works and equals one device's.
TEST(TpPlain, ClipGradNormOnGradientsSlicedFromAShardedGradient) {
  for (int n : {2, 4}) {
    on_mesh(n, [&](const DeviceMesh& mesh) {
      const std::string what = "n=" + std::to_string(n);
      auto ref = std::make_shared<Stacked>();
      auto model = std::make_shared<Stacked>();
      distribute_module(model, mesh);
      const at::Tensor scale = det({2, 4, 6}, 7);
      // A Shard(0) scale: the product, hence the stacked tensor's gradient, is sharded along
      // the stacked dim; its unbind gathers it and each parameter's gradient is a copied slice.
      const at::Tensor s = distribute_tensor(scale, mesh, {Shard(0)}).as_tensor();
      for (int step = 0; step < 2; ++step) {
        model->zero_grad();
        ref->zero_grad();
        model->forward(s).pow(2).sum().backward();
        ref->forward(scale).pow(2).sum().backward();
        const double got = torch::nn::utils::clip_grad_norm_(model->parameters(), 0.5);
        const double want = torch::nn::utils::clip_grad_norm_(ref->parameters(), 0.5);
        EXPECT_NEAR(got, want, 1e-4 * want) << what;
        for (const char* name : {"a", "b"}) {
          EXPECT_EQ(placements_of(model->p(name).grad()), Placements{Replicate()}) << what;
          expect_close(full(model->p(name).grad()), ref->p(name).grad(),
                       what + " clipped gradient of " + name);
        }
        torch::optim::SGD(model->parameters(), torch::optim::SGDOptions(0.1)).step();
        torch::optim::SGD(ref->parameters(), torch::optim::SGDOptions(0.1)).step();
        for (const char* name : {"a", "b"})
          expect_close(full(model->p(name)), ref->p(name), what + " " + name + " after a step");
      }
    });
  }
}

TEST(TpPlain, GradientRedistributionRefusesAModuleWithoutDTensorParameters) {
  auto m = make_mlp(4, 6, true);
  const std::string e = error_of<ValueError>([&] { overlap_gradient_redistribution(m); });
  EXPECT_HAS(e, "no DTensor parameter that requires grad");
  EXPECT_HAS(e, "4 parameters");
  EXPECT_HAS(e, "distribute_module");
  const std::string null = error_of<ValueError>([] { overlap_gradient_redistribution(nullptr); });
  EXPECT_HAS(null, "null");
}

}  // namespace
}  // namespace hyper::tp
