// The two forms of one DTensor (dtensor_tensor.h): hyper::as_tensor and hyper::as_dtensor are
// differentiable both ways. Oracle: the same program on the global tensor on one device; each
// rank's gradient is its part of the single-device gradient (sliced by distribute_tensor).
// 2 and 4 ranks (uneven shards on 4), a 2x2 mesh, every placement kind including RaggedShard and
// Partial(sum/avg), async redistribute, create_graph, no_grad, and the Partial(max) refusal.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

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
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;

/// The placements every bridge test runs over on a 1-D mesh of 2 or 4 ranks, for a tensor of
/// `rows` rows (5 or 6): a RaggedShard of rows with uneven units (an empty rank on 4).
std::vector<Placements> one_dim_layouts(int64_t n, int64_t rows) {
  const std::vector<int64_t> units = n == 2 ? std::vector<int64_t>{rows - 3, 3}
                                            : std::vector<int64_t>{1, 2, 0, rows - 3};
  return {{Replicate()}, {Shard(0)}, {Shard(1)}, {RaggedShard({0}, units)}};
}

/// This rank's part, under `ps`, of a global value (a gradient): distribute_tensor's local.
at::Tensor part_of(const at::Tensor& global, const DeviceMesh& mesh, const Placements& ps) {
  return distribute_tensor(global, mesh, ps).to_local();
}

// from_local(x) with x.requires_grad(): an op graph on the at::Tensor form sends x its part of
// the single-device gradient; the wrapper continues x's history (not a leaf).
TEST(DTensorBridge, FromLocalGetsItsGradientFromAnOpGraphOnTheWrapper) {
  for (int64_t n : {2, 4}) {
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({6, 4}), B = global_b({6, 4});
      // Single device: d/dX sum(sin(X) * X * B) = (cos(X) * X + sin(X)) * B.
      const at::Tensor want = (at::cos(X) * X + at::sin(X)) * B;
      for (const Placements& ps : one_dim_layouts(n, 6)) {
        const std::string what = to_string(ps) + " on " + std::to_string(n);
        const at::Tensor x = part_of(X, mesh, ps).clone().requires_grad_();
        const DTensor h = DTensor::from_local(x, mesh, ps, X.sizes().vec());
        const at::Tensor w = as_tensor(h);
        EXPECT_TRUE(w.requires_grad()) << what;
        EXPECT_FALSE(w.is_leaf()) << what;
        const at::Tensor b = distribute_tensor(B, mesh, ps).as_tensor();
        const at::Tensor loss = (at::sin(w) * w * b).sum();
        loss.backward();
        ASSERT_TRUE(x.grad().defined()) << what;
        expect_close(x.grad(), part_of(want, mesh, ps), "grad of the local " + what);
        EXPECT_FALSE(w.grad().defined()) << what;  // not a leaf: nothing accumulates there
      }
    });
  }
}

// A Partial handle's local gradient follows the handle convention: the whole logical gradient
// on every rank (sum), divided by the mesh dim size (avg).
TEST(DTensorBridge, FromLocalOfPartialFollowsTheGradientConvention) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({3, 4});
    for (const char* op : {"sum", "avg"}) {
      const at::Tensor x = (X * 0.5).clone().requires_grad_();  // either rank's share
      const DTensor h = DTensor::from_local(x, mesh, {Partial(op)});
      const at::Tensor w = as_tensor(h);
      (w * w).sum().backward();
      // The logical value: X (sum of two halves) or X / 2 (their mean).
      const at::Tensor value = std::string(op) == "sum" ? X : X * 0.5;
      const at::Tensor want = 2 * value * (std::string(op) == "sum" ? 1.0 : 0.5);
      expect_close(x.grad(), want, std::string("Partial(") + op + ")");
    }
  });
}

// to_local and full_tensor of a wrapper's handle backpropagate into the wrapper's graph:
// parameters that are leaf wrappers get the single-device gradient.
TEST(DTensorBridge, ToLocalAndFullTensorOfAHandleBackpropagateIntoTheWrapper) {
  for (int64_t n : {2, 4}) {
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({5, 4}), B = global_b({5, 4});
      for (const Placements& ps : one_dim_layouts(n, 5)) {
        const std::string what = to_string(ps) + " on " + std::to_string(n);
        // full_tensor: loss = sum((X * B)^2); d/dX = 2 X B^2.
        {
          const at::Tensor x = distribute_tensor(X, mesh, ps).as_tensor().requires_grad_();
          const at::Tensor y = x * distribute_tensor(B, mesh, ps).as_tensor();
          const DTensor h = as_dtensor(y);
          EXPECT_TRUE(h.requires_grad()) << what;
          h.full_tensor().pow(2).sum().backward();
          ASSERT_TRUE(x.grad().defined()) << what;
          expect_close(full(x.grad()), 2 * X * B * B, "full_tensor " + what);
        }
        // to_local: each rank's loss is the sum of its own elements (of a Replicate, rank 0's
        // only, the others multiply by 0), so the ranks' losses add up to sum(exp(X)).
        {
          const at::Tensor x = distribute_tensor(X, mesh, ps).as_tensor().requires_grad_();
          const DTensor h = as_dtensor(at::exp(x));
          const bool replicated = ps[0].is_replicate();
          const double share = replicated && mesh.get_rank() != 0 ? 0.0 : 1.0;
          (h.to_local().sum() * share).backward();
          // A Replicate handle's local gradient is the whole gradient on every rank, so rank 0's
          // exp(X) is what each rank's x receives: its local gradient is its own rank's.
          const at::Tensor got = as_dtensor(x.grad()).to_local();
          expect_close(got, replicated ? at::exp(X) * share : part_of(at::exp(X), mesh, ps),
                       "to_local " + what);
        }
      }
    });
  }
}

// The silent failure this bridge closes: a loss adding a term computed through a handle to one
// computed on the wrapper gave the parameters only the wrapper term's gradient.
TEST(DTensorBridge, ALossMixingBothFormsGetsBothTermsGradients) {
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6}), B = global_b({4, 6});
    const Placements ps = {Shard(0), Shard(1)};
    const at::Tensor x = distribute_tensor(X, mesh, ps).as_tensor().requires_grad_();
    const at::Tensor y = x * distribute_tensor(B, mesh, ps).as_tensor();
    const at::Tensor loss = y.sum() + as_dtensor(y).full_tensor().pow(2).sum();
    loss.backward();
    expect_close(full(x.grad()), B + 2 * X * B * B, "both terms");
  });
}

// redistribute (sync and async) of a wrapper's handle, then back to the at::Tensor form: one
// graph from the parameter to the loss, and the async result is not waited for by the bridge.
TEST(DTensorBridge, RedistributeOfAHandleSyncAndAsyncStaysInTheGraph) {
  for (int64_t n : {2, 4}) {
    run_on_mesh({n}, [&](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({6, 5});
      for (bool async_op : {false, true}) {
        const std::string what = std::string(async_op ? "async" : "sync") + " on " + std::to_string(n);
        const at::Tensor x = distribute_tensor(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
        const DTensor moved = as_dtensor(x * 3).redistribute(mesh, {Shard(1)}, async_op);
        const at::Tensor back = as_tensor(moved);  // continues the handle's history
        EXPECT_FALSE(back.is_leaf()) << what;
        EXPECT_EQ(as_dtensor(back).placements(), Placements{Shard(1)}) << what;
        (back * back).sum().backward();  // d/dX sum((3X)^2) = 18 X
        expect_close(full(x.grad()), 18 * X, what);
        EXPECT_EQ(as_dtensor(x.grad()).placements(), Placements{Shard(0)}) << what;
      }
      // An async redistribute of a wrapper's handle: the handle's local is a bridge over the
      // pending result, waited for on first read only.
      const at::Tensor x = distribute_tensor(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
      const DTensor pending = as_dtensor(as_tensor(as_dtensor(x).redistribute(mesh, {Replicate()}, true)));
      const at::Tensor got = pending.to_local();
      expect_close(got.detach(), X, "async values");
      got.pow(2).sum().backward();  // each rank holds the whole: gradient 2X from every rank
      expect_close(full(x.grad()), 2 * X, "async gradient");
    });
  }
}

// from_local -> at::Tensor -> ops -> handle -> full_tensor: one graph from the local leaf.
TEST(DTensorBridge, RoundTripFromTheLocalLeafThroughBothForms) {
  run_on_mesh({4}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({7, 3});  // 2,2,2,1 rows
    const at::Tensor x = part_of(X, mesh, {Shard(0)}).clone().requires_grad_();
    const DTensor h = DTensor::from_local(x, mesh, {Shard(0)}, X.sizes().vec());
    const DTensor h2 = as_dtensor(at::tanh(as_tensor(h)) * 2);
    const at::Tensor loss = h2.full_tensor().sum();
    loss.backward();
    // d/dX sum(2 tanh(X)) = 2 (1 - tanh(X)^2).
    expect_close(x.grad(), part_of(2 * (1 - at::tanh(X).pow(2)), mesh, {Shard(0)}), "round trip");
  });
}

// create_graph: the bridges' backwards are differentiable (a gradient of a gradient).
TEST(DTensorBridge, DoubleBackwardThroughBothBridges) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 3});
    const at::Tensor x = distribute_tensor(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor y = as_dtensor(x).full_tensor().pow(3).sum();
    const at::Tensor g = torch::autograd::grad({y}, {x}, {}, /*retain_graph=*/true,
                                               /*create_graph=*/true)[0];
    ASSERT_TRUE(is_dtensor(g));
    expect_close(full(g).detach(), 3 * X * X, "first gradient");
    as_dtensor(g).full_tensor().sum().backward();  // d/dX sum(3 X^2) = 6 X
    expect_close(full(x.grad()), 6 * X, "second gradient");
  });
}

// The graph keeps no activation alive that its backward does not need (as PyTorch frees a
// node's saved tensors): the to_local bridge keeps the layout, not the DTensor, so an output
// that nothing saved is freed with its last handle although the loss, and so the whole graph,
// is alive.
TEST(DTensorBridge, TheToLocalBridgeKeepsNoActivationAlive) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 3});
    const at::Tensor x = distribute_tensor(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    at::Tensor y = at::sin(x);                // its backward reads x, not y
    at::Tensor l = as_dtensor(y).to_local();  // the bridge: y's local storage
    c10::weak_intrusive_ptr<c10::StorageImpl> act(l.storage().getWeakStorageImpl());
    const at::Tensor loss = (l * 2).sum();    // saves neither l nor y
    y.reset();
    l.reset();
    EXPECT_TRUE(act.expired()) << "the graph holds an activation no backward reads";
    loss.backward();
    expect_close(full(x.grad()), 2 * at::cos(X), "gradient");
  });
}

// An op run on the locals with a local graph of its own (local_op.h: matmul with two sharded
// batch dims) frees that graph and its outputs when a backward that does not retain the graph
// has run; a second backward through it is refused, and with retain_graph it runs and
// accumulates.
TEST(DTensorBridge, ALocalOpFreesItsGraphInBackward) {
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({2, 2, 3, 4}), B = global_b({2, 2, 4, 5});
    const Placements ps = {Shard(0), Shard(1)};
    const auto leaf = [&](const at::Tensor& g) {
      return distribute_tensor(g, mesh, ps).as_tensor().requires_grad_();
    };
    const at::Tensor a = leaf(A), b = leaf(B);
    at::Tensor out = at::matmul(a, b);
    c10::weak_intrusive_ptr<c10::StorageImpl> act(
        as_dtensor(out.detach()).to_local().storage().getWeakStorageImpl());
    const at::Tensor loss = out.sum();
    out.reset();
    EXPECT_FALSE(act.expired()) << "the local graph holds its output until backward";
    loss.backward();
    EXPECT_TRUE(act.expired()) << "the backward did not free the local graph's output";
    const at::Tensor ones = at::ones({2, 2, 3, 5}, A.options());
    expect_close(full(a.grad()), at::matmul(ones, B.transpose(-1, -2)), "gradient of a");
    EXPECT_NE(error_of<ValueError>([&] { loss.backward(); })
                  .find("aten::matmul of a DTensor: trying to backward through the graph a "
                        "second time"),
              std::string::npos);
    const at::Tensor a2 = leaf(A), b2 = leaf(B);
    const at::Tensor loss2 = at::matmul(a2, b2).sum();
    loss2.backward({}, /*retain_graph=*/true);
    loss2.backward();
    expect_close(full(b2.grad()), 2 * at::matmul(A.transpose(-1, -2), ones), "two backwards");
  });
}

// Without grad mode, or without requires_grad, nothing is recorded: as_dtensor gives the stored
// local tensor itself and as_tensor a wrapper without history.
TEST(DTensorBridge, NoGradAndNoRequiresGradRecordNothing) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 2});
    const DTensor d = distribute_tensor(X, mesh, {Shard(0)});
    const at::Tensor plain = d.as_tensor();
    EXPECT_FALSE(plain.requires_grad());
    EXPECT_TRUE(as_dtensor(plain).to_local().is_same(d.to_local()));
    const at::Tensor x = part_of(X, mesh, {Shard(0)}).clone().requires_grad_();
    const DTensor h = DTensor::from_local(x, mesh, {Shard(0)});
    at::NoGradGuard no_grad;
    const at::Tensor w = as_tensor(h);
    EXPECT_FALSE(w.requires_grad());
    EXPECT_TRUE(w.is_leaf());
    EXPECT_TRUE(as_dtensor(w).to_local().is_same(x));  // the handle's own local
  });
}

// The gradient through a Partial(max) bridge is not defined: the backward refuses, naming the
// bridge and the layout, instead of sending a wrong gradient.
TEST(DTensorBridge, PartialMaxRefusesItsGradient) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor x = global_a({2, 3}).clone().requires_grad_();
    const DTensor h = DTensor::from_local(x, mesh, {Partial("max")});
    const at::Tensor w = as_tensor(h);
    const std::string e = error_of<NotImplementedError>([&] { (w * 2).sum().backward(); });
    EXPECT_NE(e.find("as_tensor backward"), std::string::npos) << e;
    EXPECT_NE(e.find("P(max)"), std::string::npos) << e;
    EXPECT_FALSE(x.grad().defined());
    const at::Tensor leaf = as_tensor(DTensor::from_local(global_a({2, 3}), mesh, {Partial("max")}))
                                .requires_grad_();
    const std::string e2 =
        error_of<NotImplementedError>([&] { as_dtensor(leaf).to_local().sum().backward(); });
    EXPECT_NE(e2.find("to_local backward"), std::string::npos) << e2;
    EXPECT_FALSE(leaf.grad().defined());
  });
}

// A DTensor tensor given as a local tensor is refused (it would wrap a wrapper).
TEST(DTensorBridge, ADTensorTensorIsNotALocalTensor) {
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor w = distribute_tensor(global_a({4, 2}), mesh, {Shard(0)}).as_tensor();
    std::string e = error_of<ValueError>([&] { DTensor::from_local(w, mesh, {Replicate()}); });
    EXPECT_NE(e.find("DTensor::from_local: the local tensor is a DTensor tensor (mesh=[2] "
                     "placements=[S(0)] shape=[4,2])"), std::string::npos) << e;
    e = error_of<ValueError>([&] {
      DTensor::from_local_with_layout(w, mesh, Layout(mesh.topology(), {Replicate()}, {4, 2}));
    });
    EXPECT_NE(e.find("DTensor::from_local_with_layout: the local tensor is a DTensor tensor"),
              std::string::npos) << e;
  });
}

// The undefined / plain-tensor errors are unchanged by the bridge.
TEST(DTensorBridge, PlainAndUndefinedTensorsAreRefused) {
  const std::string e = error_of<ValueError>([] { as_dtensor(at::ones({2}).requires_grad_()); });
  EXPECT_NE(e.find("got a plain tensor"), std::string::npos) << e;
  const std::string e2 = error_of<ValueError>([] { as_dtensor(at::Tensor()); });
  EXPECT_NE(e2.find("undefined tensor"), std::string::npos) << e2;
  const std::string e3 = error_of<ValueError>([] { as_tensor(DTensor()); });
  EXPECT_NE(e3.find("undefined"), std::string::npos) << e3;
}

}  // namespace
}  // namespace hyper
