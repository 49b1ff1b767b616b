// loss_parallel (loss_rules.h, loss_kernels.h): cross_entropy / nll_loss on logits whose class
// dim is sharded, against torch::nn::functional::cross_entropy on the full tensors on one
// device (the oracle): loss values and logits gradients on 2 and 4 ranks and a 2x2 mesh, even
// and uneven class shards (a rank with no class too), reductions none / sum / mean, class
// weights, ignore_index, 2-D and 3-D input, a Colwise-style lm-head whose weight gradient
// flows; the bytes moved against gathering the logits; every refusal.
#include <ATen/ATen.h>
#include <ATen/ops/cross_entropy_loss_native.h>
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>

#include <cmath>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/loss_rules.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

namespace F = torch::nn::functional;
using comm::testing::run_on_mesh;
using dispatch::ArgLayout;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

Placements placements_of(const at::Tensor& t) { return as_dtensor(t).placements(); }

/// Targets for input shape [N,C,...]: (7i+1) mod C; with `ignore`, every third entry is
/// `ignore_index` (all of them with `all_ignored`).
at::Tensor targets(const std::vector<int64_t>& shape, bool ignore, int64_t ignore_index,
                   bool all_ignored = false) {
  std::vector<int64_t> ts = shape;
  ts.erase(ts.begin() + (shape.size() == 1 ? 0 : 1));
  int64_t n = 1;
  for (auto s : ts) n *= s;
  at::Tensor t = (at::arange(n, at::kLong) * 7 + 1).remainder(shape.size() == 1 ? shape[0] : shape[1]);
  if (ignore) t.masked_fill_(at::arange(n, at::kLong).remainder(3) == 0, ignore_index);
  if (all_ignored) t.fill_(ignore_index);
  return t.reshape(ts);
}

struct Case {
  std::vector<int64_t> shape;
  Placements x;
  int64_t reduction = 1;  // 0 none, 1 mean, 2 sum
  bool weight = false;
  bool ignore = false;
  bool all_ignored = false;
  bool dtensor_target = false;  // the target a DTensor (Replicate) instead of a plain tensor
  bool dtensor_weight = false;  // the weight a DTensor: Replicate, or Shard(0) with `weight_s0`
  bool weight_s0 = false;
  double label_smoothing = 0.0;
};

std::string text(const Case& c) {
  return "shape " + shape_to_string(c.shape) + " x " + to_string(c.x) + " reduction " +
         std::to_string(c.reduction) + (c.weight ? " weight" : "") + (c.ignore ? " ignore" : "") +
         (c.all_ignored ? " all-ignored" : "") + (c.dtensor_target ? " dtensor-target" : "") +
         (c.dtensor_weight ? (c.weight_s0 ? " dtensor-weight S(0)" : " dtensor-weight") : "") +
         (c.label_smoothing > 0 ? " label_smoothing " + std::to_string(c.label_smoothing) : "");
}

F::CrossEntropyFuncOptions options(const Case& c, const at::Tensor& w) {
  F::CrossEntropyFuncOptions o;
  if (c.reduction == 0) o.reduction(torch::kNone);
  if (c.reduction == 1) o.reduction(torch::kMean);
  if (c.reduction == 2) o.reduction(torch::kSum);
  if (w.defined()) o.weight(w);
  o.ignore_index(c.ignore ? 2 : -100);
  o.label_smoothing(c.label_smoothing);
  return o;
}

/// cross_entropy on the case's DTensor logits vs on the full tensors: the loss, its layout
/// (none: Partial(sum) on the class mesh dims) and the logits gradient.
void check(const DeviceMesh& mesh, const Case& c) {
  const std::string what = text(c) + " on mesh " + std::to_string(mesh.size());
  const at::Tensor X = global_a(c.shape) * 1.7, T = targets(c.shape, c.ignore, 2, c.all_ignored);
  const at::Tensor W = c.weight ? global_b({c.shape.size() == 1 ? c.shape[0] : c.shape[1]}) : at::Tensor();
  const at::Tensor xr = X.clone().requires_grad_();
  const at::Tensor lr = F::cross_entropy(xr, T, options(c, W));
  const at::Tensor H = global_b(lr.sizes().vec());  // weighs a `none` loss before the sum
  (lr * H).sum().backward();

  const Placements rep(c.x.size(), Replicate());
  const at::Tensor x = make(X, mesh, c.x).as_tensor().requires_grad_();
  const at::Tensor t = c.dtensor_target ? make(T, mesh, rep).as_tensor() : T;
  Placements wp = rep;
  if (c.weight_s0) wp[0] = Shard(0);
  const at::Tensor w = c.weight && c.dtensor_weight ? make(W, mesh, wp).as_tensor() : W;
  const at::Tensor loss = F::cross_entropy(x, t, options(c, w));
  const at::Tensor got = full(loss);
  ASSERT_EQ(got.sizes(), lr.sizes()) << what;
  if (c.all_ignored && c.reduction == 1) {
    EXPECT_TRUE(std::isnan(lr.item<double>())) << what;
  }
  if (c.reduction == 1 && std::isnan(lr.item<double>())) {  // every target ignored: 0 / 0
    EXPECT_TRUE(std::isnan(got.item<double>())) << what;
  } else {
    expect_close(got, lr.detach(), what);
  }
  // sum / mean: Replicate (nll_loss all_reduces); with label smoothing the smoothing term's
  // class sum keeps the loss P(sum) on every mesh dim that shards the input (no bytes).
  const int64_t cd = c.shape.size() == 1 ? 0 : 1;  // the class dim
  for (size_t m = 0; m < c.x.size(); ++m) {
    const Placement want = c.reduction != 0
                               ? (c.label_smoothing > 0 && c.x[m].is_shard() ? Partial() : Replicate())
                           : c.x[m] == Shard(cd) ? Partial()
                           : c.x[m].is_shard() ? Shard(c.x[m].dim() < cd ? c.x[m].dim() : c.x[m].dim() - 1)
                                                 : Replicate();
    EXPECT_EQ(placements_of(loss)[m], want) << what << " mesh dim " << m;
  }
  (loss * H).sum().backward();
  expect_close(full(x.grad()), xr.grad(), "grad " + what);
}

std::vector<Case> cases(const std::vector<int64_t>& shape, const std::vector<Placements>& ps,
                        double label_smoothing = 0.0) {
  std::vector<Case> out;
  for (const auto& p : ps)
    for (int64_t r : {0, 1, 2})
      for (bool w : {false, true})
        for (bool ig : {false, true}) {
          Case c;
          c.shape = shape;
          c.x = p;
          c.reduction = r;
          c.weight = w;
          c.ignore = ig;
          c.label_smoothing = label_smoothing;
          out.push_back(c);
        }
  return out;
}

// ---- torch-free rules ---------------------------------------------------------------------

TEST(LossParallel, NllRuleLayouts) {
  const auto x = ArgLayout::of(Layout::from_string("mesh=[2,2] placements=[S(0),S(1)] shape=[6,10]"));
  const auto t = ArgLayout::plain({6});
  const auto w = ArgLayout::plain({10});
  auto p = dispatch::propagate_nll_loss("aten::nll_loss_forward", x, t, w, 0);
  EXPECT_EQ(p.input.to_string(), "mesh=[2,2] placements=[S(0),S(1)] shape=[6,10]");
  EXPECT_EQ(p.target.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[6]");
  EXPECT_EQ(p.weight->to_string(), "mesh=[2,2] placements=[R,S(0)] shape=[10]");
  EXPECT_EQ(p.output.to_string(), "mesh=[2,2] placements=[S(0),P(sum)] shape=[6]");
  EXPECT_EQ(p.class_mesh_dims, (std::vector<int64_t>{1}));
  EXPECT_EQ(p.reduce_mesh_dims, (std::vector<int64_t>{0, 1}));
  p = dispatch::propagate_nll_loss("aten::nll_loss_forward", x, t, std::nullopt, 1);
  EXPECT_EQ(p.output.to_string(), "mesh=[2,2] placements=[R,R] shape=[]");
  EXPECT_EQ(p.total_weight.to_string(), "mesh=[2,2] placements=[R,R] shape=[]");
  // 4-D (nll_loss2d): a Shard of dim 3 slices the target's dim 2; a Partial input is reduced.
  const auto x4 = ArgLayout::of(Layout::from_string("mesh=[2,2] placements=[P(sum),S(3)] shape=[2,5,1,4]"));
  p = dispatch::propagate_nll_loss("aten::nll_loss2d_forward", x4, ArgLayout::plain({2, 1, 4}),
                                   std::nullopt, 0);
  EXPECT_EQ(p.input.to_string(), "mesh=[2,2] placements=[R,S(3)] shape=[2,5,1,4]");
  EXPECT_EQ(p.target.to_string(), "mesh=[2,2] placements=[R,S(2)] shape=[2,1,4]");
  EXPECT_EQ(p.output.to_string(), "mesh=[2,2] placements=[R,S(2)] shape=[2,1,4]");
  // 1-D input: the class dim is 0.
  const auto x1 = ArgLayout::of(Layout::from_string("mesh=[2] placements=[S(0)] shape=[5]"));
  p = dispatch::propagate_nll_loss("aten::nll_loss_forward", x1, ArgLayout::plain({}), std::nullopt, 0);
  EXPECT_EQ(p.class_dim, 0);
  EXPECT_EQ(p.output.to_string(), "mesh=[2] placements=[P(sum)] shape=[]");
  // Backward: grad_output of a `none` loss without the Partial.
  const auto g = ArgLayout::of(Layout::from_string("mesh=[2,2] placements=[S(0),P(sum)] shape=[6]"));
  const auto b = dispatch::propagate_nll_loss_backward("aten::nll_loss_backward", g, x, t, w, 0,
                                                       ArgLayout::plain({}));
  EXPECT_EQ(b.grad_output.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[6]");
  EXPECT_EQ(b.forward.input.to_string(), "mesh=[2,2] placements=[S(0),S(1)] shape=[6,10]");
}

TEST(LossParallel, NllRuleRefusals) {
  const auto x = ArgLayout::of(Layout::from_string("mesh=[2] placements=[S(1)] shape=[6,10]"));
  auto value = [&](const ArgLayout& in, const ArgLayout& t, const std::optional<ArgLayout>& w,
                   int64_t r) {
    return error_of<ValueError>([&] { (void)dispatch::propagate_nll_loss("aten::nll_loss_forward", in, t, w, r); });
  };
  auto not_impl = [&](const ArgLayout& in, const ArgLayout& t) {
    return error_of<NotImplementedError>([&] { (void)dispatch::propagate_nll_loss("aten::nll_loss_forward", in, t, std::nullopt, 1); });
  };
  EXPECT_EQ(value(x, ArgLayout::plain({5}), std::nullopt, 1),
            "aten::nll_loss_forward(arg 0: mesh=[2] placements=[S(1)] shape=[6,10]; arg 1: plain "
            "tensor shape=[5]) reduction=1: target shape [5] does not match the input's [6,10] "
            "(expected [6])");
  EXPECT_EQ(value(x, ArgLayout::plain({6}), ArgLayout::plain({9}), 1),
            "aten::nll_loss_forward(arg 0: mesh=[2] placements=[S(1)] shape=[6,10]; arg 1: plain "
            "tensor shape=[6]; arg 2: plain tensor shape=[9]) reduction=1: weight shape [9] is not "
            "[10] (the classes)");
  EXPECT_NE(value(x, ArgLayout::plain({6}), std::nullopt, 3).find(
                "reduction=3: reduction 3 is not 0 (none), 1 (mean) or 2 (sum)"), std::string::npos);
  const auto s = ArgLayout::of(Layout::from_string("mesh=[2] placements=[R] shape=[]"));
  EXPECT_NE(value(ArgLayout::of(Layout::from_string("mesh=[2] placements=[R] shape=[]")),
                  ArgLayout::plain({}), std::nullopt, 1).find(": the input has no class dim (0 dims)"),
            std::string::npos);
  EXPECT_EQ(not_impl(ArgLayout::plain({6, 10}), ArgLayout::of(Layout::from_string("mesh=[2] placements=[S(0)] shape=[6]"))),
            "aten::nll_loss_forward(arg 0: plain tensor shape=[6,10]; arg 1: mesh=[2] "
            "placements=[S(0)] shape=[6]) reduction=1: the input is a plain tensor beside a "
            "DTensor target or weight (make the input a DTensor)");
  EXPECT_NE(not_impl(x, ArgLayout::of(Layout::from_string("mesh=[2] placements=[RS((0,), (2, 4))] shape=[6]")))
                .find(": the target is a RaggedShard DTensor (fail-closed"), std::string::npos);
  EXPECT_NE(value(x, ArgLayout::of(Layout::from_string("mesh=[4] placements=[R] shape=[6]")), std::nullopt, 1)
                .find(": DTensor operands on different meshes"), std::string::npos);
  auto bwd = [&](const ArgLayout& g, const ArgLayout& tw) {
    return error_of<ValueError>([&] {
      (void)dispatch::propagate_nll_loss_backward("aten::nll_loss_backward", g, x,
                                                  ArgLayout::plain({6}), std::nullopt, 1, tw);
    });
  };
  EXPECT_NE(bwd(ArgLayout::plain({6}), s).find(": grad_output shape [6] is not the loss's []"),
            std::string::npos);
  EXPECT_NE(bwd(s, ArgLayout::plain({1})).find(": total_weight shape [1] is not []"),
            std::string::npos);
}

// ---- log_softmax / softmax over a sharded dim ----------------------------------------------

TEST(LossParallel, SoftmaxOverShardedDimKeepsTheShard) {
  // [5,7] on 2 (4+3) and 4 ranks (2,2,2,1); [5,3] on 4 ranks: rank 3 holds no class.
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      for (const std::vector<int64_t>& shape : {std::vector<int64_t>{5, 7}, std::vector<int64_t>{5, 3}})
        for (bool log : {true, false}) {
          const at::Tensor A = global_a(shape) * 3.0, G = global_b(shape);
          auto f = [&](const at::Tensor& v) { return log ? at::log_softmax(v, 1) : at::softmax(v, 1); };
          const std::string what = std::string(log ? "log_softmax " : "softmax ") +
                                   shape_to_string(shape) + " on " + std::to_string(mesh.size());
          const at::Tensor xr = A.clone().requires_grad_();
          (f(xr) * G).sum().backward();
          const at::Tensor x = make(A, mesh, {Shard(1)}).as_tensor().requires_grad_();
          const at::Tensor y = f(x);
          EXPECT_EQ(placements_of(y), Placements{Shard(1)}) << what;
          expect_close(full(y), f(A), what);
          (y * make(G, mesh, {Shard(1)}).as_tensor()).sum().backward();
          EXPECT_EQ(placements_of(x.grad()), Placements{Shard(1)}) << what;
          expect_close(full(x.grad()), xr.grad(), "grad " + what);
        }
    });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 7}), G = global_b({5, 7});
    for (const Placements& p : std::vector<Placements>{{Shard(0), Shard(1)}, {Shard(1), Shard(1)},
                                                        {Shard(1), Partial()}}) {
      const at::Tensor xr = A.clone().requires_grad_();
      (at::log_softmax(xr, 1) * G).sum().backward();
      const at::Tensor x = make(A, mesh, p).as_tensor().requires_grad_();
      const at::Tensor y = at::log_softmax(x, 1);
      expect_close(full(y), at::log_softmax(A, 1), "2x2 " + to_string(p));
      EXPECT_EQ(placements_of(y)[0], p[0]) << to_string(p);
      (y * make(G, mesh, {Partial(), Replicate()}).as_tensor()).sum().backward();
      expect_close(full(x.grad()), xr.grad(), "2x2 grad " + to_string(p));
    }
  });
}

// ---- cross_entropy ------------------------------------------------------------------------

TEST(LossParallel, CrossEntropy2dOn2And4Ranks) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      // [6,7]: uneven classes on 2 (4,3) and 4 ranks (2,2,2,1); [5,3] on 4: a rank with none.
      for (const auto& c : cases({6, 7}, {{Shard(1)}, {Shard(0)}, {Replicate()}, {Partial()}}))
        check(mesh, c);
      for (const auto& c : cases({5, 3}, {{Shard(1)}})) check(mesh, c);
      for (const auto& c : cases({6, 8}, {{Shard(1)}})) check(mesh, c);  // even
    });
}

TEST(LossParallel, CrossEntropy3dInput) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      for (const auto& c : cases({3, 5, 4}, {{Shard(1)}, {Shard(2)}, {Shard(0)}})) check(mesh, c);
    });
}

TEST(LossParallel, CrossEntropy1dAnd4dInput) {
  // [C] with a 0-dim target (class dim 0: nll_loss_forward); [N,C,H,W] (nll_loss2d_forward
  // directly), classes and a spatial dim sharded.
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      for (const auto& c : cases({7}, {{Shard(0)}})) check(mesh, c);
      for (const auto& c : cases({2, 5, 2, 3}, {{Shard(1)}, {Shard(3)}})) check(mesh, c);
    });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    for (const auto& c : cases({2, 5, 2, 3}, {{Shard(2), Shard(1)}})) check(mesh, c);
  });
}

TEST(LossParallel, CrossEntropy2x2Mesh) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    for (const auto& c : cases({6, 7}, {{Shard(0), Shard(1)}, {Shard(1), Shard(0)},
                                        {Shard(1), Shard(1)}, {Shard(1), Replicate()}}))
      check(mesh, c);
    for (const auto& c : cases({3, 5, 4}, {{Shard(0), Shard(1)}, {Shard(2), Shard(1)}}))
      check(mesh, c);
  });
}

TEST(LossParallel, CrossEntropyDTensorTargetWeightAndAllIgnored) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    for (int64_t r : {0, 1, 2}) {
      Case c;
      c.shape = {6, 7};
      c.x = {Shard(1)};
      c.reduction = r;
      c.weight = c.ignore = c.dtensor_target = c.dtensor_weight = true;
      check(mesh, c);
      c.weight_s0 = true;  // sharded like the classes: no bytes to slice it
      check(mesh, c);
      c.dtensor_target = c.dtensor_weight = c.weight_s0 = false;
      c.all_ignored = true;
      check(mesh, c);  // mean: nan, as ATen; the gradient is 0
    }
    // A target DTensor sharded like the batch (S(0)) beside logits S(0).
    const at::Tensor X = global_a({6, 7}), T = targets({6, 7}, false, -100);
    const at::Tensor xr = X.clone().requires_grad_();
    F::cross_entropy(xr, T).backward();
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor loss = F::cross_entropy(x, make(T, mesh, {Shard(0)}).as_tensor());
    expect_close(full(loss), F::cross_entropy(X, T), "S(0) target");
    loss.backward();
    expect_close(full(x.grad()), xr.grad(), "S(0) target grad");
  });
}

TEST(LossParallel, CrossEntropyLabelSmoothing) {
  // LibTorch's composite would masked_fill_ the Partial class sum in place (refused); the
  // kernel's decomposition multiplies by the kept-target mask instead.
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [](const DeviceMesh& mesh) {
      for (const auto& c : cases({6, 7}, {{Shard(1)}, {Shard(0)}}, 0.2)) check(mesh, c);
      for (const auto& c : cases({5, 3}, {{Shard(1)}}, 0.1)) check(mesh, c);
      for (const auto& c : cases({3, 5, 4}, {{Shard(1)}}, 0.1)) check(mesh, c);
    });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    // LibTorch's composite, run on the wrapper, masked_fill_s the Partial class sum in place:
    // refused before; now filled share by share (partial_fill_kernels.h), so it computes the
    // one-device value too (the kernel's decomposition stays: it moves no extra bytes).
    const at::Tensor x = make(global_a({6, 7}), mesh, {Shard(1)}).as_tensor();
    const at::Tensor r = at::native::cross_entropy_loss_symint(x, targets({6, 7}, true, 2), {}, 1, 2, 0.1);
    expect_close(full(r), at::native::cross_entropy_loss_symint(global_a({6, 7}), targets({6, 7}, true, 2),
                                                                {}, 1, 2, 0.1),
                 "LibTorch's composite on the wrapper");
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    for (const auto& c : cases({6, 7}, {{Shard(0), Shard(1)}}, 0.3)) check(mesh, c);
    Case c;
    c.shape = {6, 7};
    c.x = {Shard(1), Shard(0)};
    c.weight = c.ignore = c.dtensor_target = c.dtensor_weight = true;
    c.label_smoothing = 0.1;
    check(mesh, c);
  });
}

TEST(LossParallel, CrossEntropyProbabilityTargets) {
  // Class-probability targets (float, the input's shape): LibTorch's composite
  // (-(log_softmax * target [* weight]).sum(1), reduced) on ops that have rules.
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({6, 7}), P = at::softmax(global_b({6, 7}) * 2.0, 1);
    const at::Tensor W = global_b({7});
    for (double ls : {0.0, 0.2})
      for (bool weighted : {false, true})
        for (int64_t r : {0, 1, 2}) {
          auto o = F::CrossEntropyFuncOptions().label_smoothing(ls);
          if (weighted) o.weight(W);
          if (r == 0) o.reduction(torch::kNone);
          if (r == 2) o.reduction(torch::kSum);
          const std::string what = "prob targets ls " + std::to_string(ls) + " weight " +
                                   std::to_string(weighted) + " reduction " + std::to_string(r);
          const at::Tensor xr = X.clone().requires_grad_();
          const at::Tensor lr = F::cross_entropy(xr, P, o);
          const at::Tensor H = global_b(lr.sizes().vec());
          (lr * H).sum().backward();
          const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor().requires_grad_();
          const at::Tensor loss = F::cross_entropy(x, P, o);
          expect_close(full(loss), lr.detach(), what);
          (loss * H).sum().backward();
          expect_close(full(x.grad()), xr.grad(), "grad " + what);
        }
  });
}

TEST(LossParallel, ColwiseLmHeadGradientReachesTheWeight) {
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor Hd = global_a({6, 4}), Wh = global_b({4, 11}) - 1.0, T = targets({6, 11}, true, 2);
      const at::Tensor hr = Hd.clone().requires_grad_(), wr = Wh.clone().requires_grad_();
      const auto o = F::CrossEntropyFuncOptions().ignore_index(2);
      F::cross_entropy(at::matmul(hr, wr), T, o).backward();
      const Placements rep(ms.size(), Replicate());
      Placements col(ms.size(), Replicate());
      col.back() = Shard(1);  // 2x2: batch replicated on mesh dim 0, classes on mesh dim 1
      const at::Tensor h = make(Hd, mesh, rep).as_tensor().requires_grad_();
      const at::Tensor w = make(Wh, mesh, col).as_tensor().requires_grad_();
      const at::Tensor logits = at::matmul(h, w);
      EXPECT_EQ(placements_of(logits), col);
      const at::Tensor loss = F::cross_entropy(logits, T, o);
      expect_close(full(loss), F::cross_entropy(at::matmul(Hd, Wh), T, o), "lm-head loss");
      loss.backward();
      EXPECT_EQ(placements_of(w.grad()), col);
      expect_close(full(w.grad()), wr.grad(), "lm-head weight grad");
      expect_close(full(h.grad()), hr.grad(), "lm-head input grad");
    });
}

TEST(LossParallel, BytesFarBelowGatheringTheLogits) {
  // [N,C] = [16,512] doubles, classes Shard(1) on 4 ranks. Gathering the logits would have
  // each rank receive (n-1)/n * N*C*8 = 49152 bytes (forward) and the gradient as much again.
  // loss_parallel all_reduces [N,1] twice (max, exp-sum) and 3 numbers in the forward, [N,1]
  // once in the backward: at most n * 8 * (3N + 3) bytes sent per rank, whatever the
  // all_reduce algorithm (a rank sends each element at most once to each other rank).
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const int64_t N = 16, C = 512, n = 4;
    const at::Tensor X = global_a({N, C}), T = targets({N, C}, true, -100);
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor().requires_grad_();
    const auto before = comm::stats(mesh);
    const at::Tensor loss = F::cross_entropy(x, T);
    loss.backward();
    const auto after = comm::stats(mesh);
    const int64_t sent = after.bytes_sent() - before.bytes_sent();
    const int64_t received = after.bytes_received() - before.bytes_received();
    const int64_t bound = n * 8 * (3 * N + 3), gather = (n - 1) * N * (C / n) * 8;
    EXPECT_GT(sent, 0);
    EXPECT_LE(sent, bound) << after.to_string();
    EXPECT_LE(received, bound) << after.to_string();
    EXPECT_LT(bound * 10, gather);
    // What the gather that log_softmax did before moves, measured: S(1) -> R of the logits.
    const auto b2 = comm::stats(mesh);
    (void)as_dtensor(x).redistribute(mesh, {Replicate()});
    const int64_t gathered = comm::stats(mesh).bytes_received() - b2.bytes_received();
    EXPECT_EQ(gathered, gather);
    if (mesh.get_rank() == 0)
      std::printf("loss_parallel [%lld,%lld] S(1) on 4 ranks, forward+backward: sent %lld, received "
                  "%lld bytes per rank (gathering the logits once: %lld received)\n",
                  static_cast<long long>(N), static_cast<long long>(C), static_cast<long long>(sent),
                  static_cast<long long>(received), static_cast<long long>(gathered));
    expect_close(full(loss), F::cross_entropy(X, T), "loss");
  });
}

// ---- refusals and bad input ---------------------------------------------------------------

TEST(LossParallel, Refusals) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({6, 7}), T = targets({6, 7}, false, -100);
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    std::string m;
    // A target outside [0, C): plain (checked whole) and a DTensor S(0) (counted on all ranks).
    at::Tensor bad = T.clone();
    bad[3] = 7;
    m = error_of<ValueError>([&] { (void)F::cross_entropy(x, bad); });
    EXPECT_EQ(m, "aten::nll_loss_forward(arg 0: mesh=[2] placements=[S(1)] shape=[6,7]; arg 1: "
                 "plain tensor shape=[6]) reduction=1 ignore_index=-100: target 7 is out of bounds "
                 "(classes [0, 7))");
    const at::Tensor xs = make(X, mesh, {Shard(0)}).as_tensor();
    for (int64_t r : {0, 1}) {
      m = error_of<ValueError>([&] {
        (void)at::nll_loss(at::log_softmax(xs, 1), make(bad, mesh, {Shard(0)}).as_tensor(), {}, r);
      });
      EXPECT_EQ(m, "aten::nll_loss_forward(arg 0: mesh=[2] placements=[S(0)] shape=[6,7]; arg 1: "
                   "mesh=[2] placements=[S(0)] shape=[6]) reduction=" + std::to_string(r) +
                   " ignore_index=-100: 1 target(s) out of bounds (classes [0, 7))");
    }
    m = error_of<ValueError>([&] { (void)at::nll_loss_forward(x, T.to(at::kDouble), {}, 1, -100); });
    EXPECT_NE(m.find("ignore_index=-100: target dtype Double is not an integer type (class indices)"),
              std::string::npos) << m;
    m = error_of<NotImplementedError>([&] {
      (void)at::nll_loss_forward(X, make(T, mesh, {Replicate()}).as_tensor(), {}, 1, -100);
    });
    EXPECT_NE(m.find(": the input is a plain tensor beside a DTensor target or weight"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::nll_loss_forward(x, T.slice(0, 0, 5), {}, 1, -100); });
    EXPECT_NE(m.find(": target shape [5] does not match the input's [6,7] (expected [6])"),
              std::string::npos) << m;
    const at::Tensor xa = make(X, mesh, {RaggedShard({0}, {2, 4})}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::log_softmax(xa, 1); });
    EXPECT_NE(m.find("aten::_log_softmax(arg 0: mesh=[2] placements=[RS((0,), (2, 4))] "
                     "shape=[6,7]): argument 0 is a RaggedShard DTensor"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::nll_loss_forward(xa, T, {}, 1, -100); });
    EXPECT_NE(m.find(": the input is a RaggedShard DTensor (fail-closed"), std::string::npos) << m;
    // A stale copied view: a transposed view's reshape copies; the base is then written.
    const at::Tensor base = make(X.t().contiguous(), mesh, {Shard(0)}).as_tensor();
    const at::Tensor v = base.t().reshape({6, 7});
    base.add_(1.0);
    m = error_of<NotImplementedError>([&] { (void)at::log_softmax(v, 1); });
    EXPECT_NE(m.find("is a view of a DTensor whose local tensor is a copy"), std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
