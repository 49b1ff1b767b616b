// at::linear of a sequence-sharded DTensor input (linear_kernels.h, linear_rules.h): the input
// is gathered before LibTorch folds it, where the view and matmul rules would have gathered it,
// and the gather is remembered on the input (DTensorImpl::local_as), so three projections of
// one input (attention's q, k, v) gather it once. Values and gradients against the
// single-device computation on the full tensors; collectives counted per rank.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <map>
#include <string>
#include <vector>

#include "hyper/comm/stats.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/linear_kernels.h"
#include "hyper/tensor/dispatch/linear_rules.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch::ArgLayout;
using dispatch::linear_input_layout;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

/// Collective calls this rank makes while f runs.
template <class F>
int64_t calls_of(const DeviceMesh& mesh, F&& f) {
  const auto before = comm::stats(mesh);
  f();
  return comm::stats(mesh).calls() - before.calls();
}

Layout layout_of(const DeviceMesh& mesh, const Placements& ps, const std::vector<int64_t>& shape) {
  return make(at::zeros(shape), mesh, ps).layout();
}

TEST(LinearGather, InputLayoutIsWhereTheFoldOrTheMatmulWouldGather) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    auto L = [&](Placement p, std::vector<int64_t> shape) { return layout_of(mesh, {p}, shape); };
    auto rule = [&](const Layout& in, const Layout& w, std::optional<Layout> b) {
      return linear_input_layout(ArgLayout::of(in), ArgLayout::of(w),
                                 b ? std::optional<ArgLayout>(ArgLayout::of(*b)) : std::nullopt)
          .to_string();
    };
    const Layout w_col = L(Shard(0), {16, 6}), b_col = L(Shard(0), {16});
    // batch 2, seq sharded: the fold [2,8,6] -> [16,6] cannot keep S(1) (a strided shard).
    EXPECT_EQ(rule(L(Shard(1), {2, 8, 6}), w_col, b_col), "mesh=[2] placements=[R] shape=[2,8,6]");
    EXPECT_EQ(rule(L(Shard(1), {2, 8, 6}), w_col, std::nullopt),
              "mesh=[2] placements=[R] shape=[2,8,6]");
    // batch 1: the fold keeps S(0) of [8,6]; addmm gathers the rows (48 elements) rather than
    // the Colwise weight (96): gathered before the fold.
    EXPECT_EQ(rule(L(Shard(1), {1, 8, 6}), w_col, b_col), "mesh=[2] placements=[R] shape=[1,8,6]");
    // Equal bytes (rows 8x6, weight 8x6): the matmul rule's tie-break would gather the weight;
    // the weight is the parameter, so the rows are gathered (before the fold).
    EXPECT_EQ(rule(L(Shard(1), {1, 8, 6}), L(Shard(0), {8, 6}), std::nullopt),
              "mesh=[2] placements=[R] shape=[1,8,6]");
    // ... but a weight smaller than the rows is gathered by addmm: input unchanged.
    EXPECT_EQ(rule(L(Shard(1), {1, 8, 6}), L(Shard(0), {4, 6}), L(Shard(0), {4})),
              "mesh=[2] placements=[S(1)] shape=[1,8,6]");
    // Rowwise (features sharded, weight S(1)) and data parallel (batch sharded, weight R):
    // nothing gathered.
    EXPECT_EQ(rule(L(Shard(2), {2, 8, 6}), L(Shard(1), {16, 6}), L(Replicate(), {16})),
              "mesh=[2] placements=[S(2)] shape=[2,8,6]");
    EXPECT_EQ(rule(L(Shard(0), {2, 8, 6}), L(Replicate(), {16, 6}), std::nullopt),
              "mesh=[2] placements=[S(0)] shape=[2,8,6]");
    // A plain input never reaches the rule.
    const std::string e = error_of<InternalError>([&] {
      linear_input_layout(ArgLayout::plain({2, 8, 6}), ArgLayout::of(w_col), std::nullopt);
    });
    EXPECT_NE(e.find("linear_input_layout: a plain input"), std::string::npos) << e;
    const std::string e2 = error_of<InternalError>([&] {
      dispatch::matmul_input_layout(ArgLayout::plain({2, 8, 6}), ArgLayout::of(w_col));
    });
    EXPECT_NE(e2.find("matmul_input_layout: a plain input"), std::string::npos) << e2;
  });
}

// q, k, v = linear(x, w*, b*) (or matmul) with x S(1) [b, s, 6] and Colwise weights: one gather forward;
// values and every gradient (x's, the weights', the biases') equal one device's.
// mode 0: at::linear(x, w, b); 1: at::linear(x, w); 2: x.matmul(w.t()) + b (what
// torch::nn::Linear's forward does).
at::Tensor project(int mode, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (mode == 0) return at::linear(x, w, b);
  if (mode == 1) return at::linear(x, w);
  return x.matmul(w.t()) + b;
}

void check_three_projections(const std::vector<int64_t>& ms, int64_t batch, int64_t seq,
                             int mode) {
  const bool bias = mode != 1;
  run_on_mesh(ms, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({batch, seq, 6});
    std::vector<at::Tensor> W, B, w, b;
    for (int i = 0; i < 3; ++i) {
      W.push_back((global_b({16, 6}) * (0.3 + 0.2 * i)).requires_grad_());
      B.push_back((global_a({16}) * (0.1 * (i + 1))).requires_grad_());
      w.push_back(make(W[i].detach(), mesh, {Shard(0)}).as_tensor().requires_grad_());
      b.push_back(make(B[i].detach(), mesh, {Shard(0)}).as_tensor().requires_grad_());
    }
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor().requires_grad_();
    const at::Tensor Xr = X.clone().requires_grad_();
    std::vector<at::Tensor> y(3), Y(3);
    const int64_t fwd = calls_of(mesh, [&] {
      for (int i = 0; i < 3; ++i)
        y[i] = project(mode, x, w[i], b[i]);
    });
    EXPECT_EQ(fwd, 1) << "the input is gathered once for the three projections (mesh "
                      << mesh.size() << ", batch " << batch << ", seq " << seq << ", mode " << mode
                      << ")";
    for (int i = 0; i < 3; ++i) Y[i] = project(mode, Xr, W[i], B[i]);
    const at::Tensor loss = (y[0] * y[1] + y[2].pow(2)).sum();
    const at::Tensor ref = (Y[0] * Y[1] + Y[2].pow(2)).sum();
    loss.backward();
    ref.backward();
    for (int i = 0; i < 3; ++i) {
      expect_close(full(y[i]), Y[i].detach(), "y" + std::to_string(i));
      expect_close(full(w[i].grad()), W[i].grad(), "w" + std::to_string(i) + ".grad");
      if (bias) expect_close(full(b[i].grad()), B[i].grad(), "b" + std::to_string(i) + ".grad");
    }
    expect_close(full(x.grad()), Xr.grad(), "x.grad");
  });
}

TEST(LinearGather, ThreeProjectionsOfOneInputGatherItOnce) {
  for (const std::vector<int64_t>& ms : {std::vector<int64_t>{2}, {4}})
    for (int64_t batch : {1, 2})
      for (int64_t seq : {8, 7})  // 7: uneven shards
        for (int mode : {0, 1, 2}) {
          SCOPED_TRACE("mesh " + std::to_string(ms[0]) + " batch " + std::to_string(batch) +
                       " seq " + std::to_string(seq) + " mode " + std::to_string(mode));
          check_three_projections(ms, batch, seq, mode);
        }
}

TEST(LinearGather, AWriteToTheInputGathersAgain) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({2, 8, 6}), W = global_b({16, 6});
    at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    const at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor();
    at::Tensor y1, y2, y3;
    EXPECT_EQ(calls_of(mesh, [&] { y1 = at::linear(x, w); }), 1);
    EXPECT_EQ(calls_of(mesh, [&] { y2 = at::linear(x, w); }), 0);  // remembered
    x.mul_(2);  // the wrapper's version moves on every rank
    EXPECT_EQ(calls_of(mesh, [&] { y3 = at::linear(x, w); }), 1);
    expect_close(full(y1), at::linear(X, W), "before");
    expect_close(full(y2), at::linear(X, W), "remembered");
    expect_close(full(y3), at::linear(2 * X, W), "after mul_");
    // A write to the local through the DTensor API gathers again too.
    as_dtensor(x).to_local().add_(1);
    at::Tensor y4;
    EXPECT_EQ(calls_of(mesh, [&] { y4 = at::linear(x, w); }), 1);
    expect_close(full(y4), at::linear(2 * X + 1, W), "after to_local().add_");
  });
}

// A write through another wrapper of the same local, with its own version counter (.data(),
// as LibTorch's optimizers update parameters): the remembered gather is forgotten too. Before
// the fallback bumped the local's version, an SGD step left a parameter's gather stale
// (DTensorOptim.BackwardThenStepOn2Ranks failed).
TEST(LinearGather, AWriteThroughDataGathersAgain) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({2, 8, 6}), W = global_b({16, 6});
    const at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    const at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor();
    EXPECT_EQ(calls_of(mesh, [&] { (void)at::linear(x, w); }), 1);
    {
      at::NoGradGuard no_grad;
      x.data().mul_(3);
      x.data().masked_fill_(make(X > 2.5, mesh, {Shard(1)}).as_tensor(), 0.5);
    }
    at::Tensor y;
    EXPECT_EQ(calls_of(mesh, [&] { y = at::linear(x, w); }), 1);
    expect_close(full(y), at::linear((3 * X).masked_fill(X > 2.5, 0.5), W), "after .data() writes");
    // Through a view of .data() that aliases the local (an unsharded dim): its local shares the
    // local's counter (dtensor_tensor.cc track_copied_view), so the memo is forgotten too (a
    // stale memo would skip the gather and give the old values).
    {
      at::NoGradGuard no_grad;
      x.data().narrow(0, 1, 1).mul_(2);
      x.data().select(2, 4).add_(1);
    }
    at::Tensor want = (3 * X).masked_fill(X > 2.5, 0.5);
    want.narrow(0, 1, 1).mul_(2);
    want.select(2, 4).add_(1);
    EXPECT_EQ(calls_of(mesh, [&] { y = at::linear(x, w); }), 1);
    expect_close(full(y), at::linear(want, W), "after writes through views of .data()");
  });
}

/// Whether t was computed by the overlapped gather: its autograd node, or the one below a
/// bias add, is OverlapMatmulFn.
bool overlapped(const at::Tensor& t) {
  auto is = [](const torch::autograd::Node* n) {
    return n && n->name().find("OverlapMatmulFn") != std::string::npos;
  };
  const auto* n = t.grad_fn().get();
  if (is(n)) return true;
  if (!n) return false;
  for (const auto& e : n->next_edges())
    if (is(e.function.get())) return true;
  return false;
}

/// Sets the overlap switch (per thread: each rank's) and restores it at scope end (also on failure).
struct OverlapSwitch {
  explicit OverlapSwitch(bool on) : was(overlap_linear_gather()) {
    set_overlap_linear_gather(on);
  }
  ~OverlapSwitch() { set_overlap_linear_gather(was); }
  bool was;
};

/// Both paths' results (overlap on / off -> values in `want`'s order) equal one device's.
void expect_both_close(std::map<bool, std::vector<at::Tensor>>& got,
                       const std::vector<at::Tensor>& want, const std::vector<std::string>& names) {
  for (const bool overlap : {true, false})
    for (size_t i = 0; i < want.size(); ++i)
      expect_close(got[overlap][i], want[i],
                   names[i] + (overlap ? " (overlapped)" : " (synchronous)"));
}

// The overlapped gather (a collective matmul): the first projection issues the gather async and
// multiplies its own rows meanwhile; values, gradients, collectives and the output layout are
// those of the synchronous path, for the sequence dim (d = 1), the rows of a 2-D input (d = 0),
// uneven shards, a Colwise and a Replicate weight, with and without bias.
TEST(LinearGather, TheOverlappedGatherEqualsTheSynchronousOne) {
  struct Case {
    std::vector<int64_t> mesh, shape;
    Placement in, weight;
    bool bias;
  };
  const std::vector<Case> cases = {
      {{2}, {2, 8, 6}, Shard(1), Shard(0), true},   {{2}, {1, 7, 6}, Shard(1), Shard(0), false},
      {{4}, {2, 7, 6}, Shard(1), Shard(0), true},   {{4}, {9, 6}, Shard(0), Shard(0), true},
      {{2}, {2, 8, 6}, Shard(1), Replicate(), true}, {{4}, {3, 5, 6}, Shard(1), Replicate(), false},
  };
  for (const Case& c : cases)
    run_on_mesh(c.mesh, [&](const DeviceMesh& mesh) {
      SCOPED_TRACE("mesh " + std::to_string(c.mesh[0]) + " input " + c.in.to_string() +
                   " weight " + c.weight.to_string() + (c.bias ? " bias" : ""));
      const at::Tensor X = global_a(c.shape), W = global_b({16, 6}), B = global_a({16}) * 0.3;
      std::map<bool, std::vector<at::Tensor>> got;  // overlap -> {y, x.grad, w.grad, b.grad}
      for (const bool overlap : {true, false}) {
        OverlapSwitch on(overlap);
        const at::Tensor x = make(X, mesh, {c.in}).as_tensor().requires_grad_();
        const at::Tensor w = make(W, mesh, {c.weight}).as_tensor().requires_grad_();
        const at::Tensor b = make(B, mesh, {c.weight}).as_tensor().requires_grad_();
        at::Tensor y, y2;
        EXPECT_EQ(calls_of(mesh, [&] { y = c.bias ? at::linear(x, w, b) : at::linear(x, w); }), 1);
        // The second projection reads the remembered gather (no collective), synchronously.
        EXPECT_EQ(calls_of(mesh, [&] { y2 = at::linear(x, w); }), 0);
        EXPECT_EQ(overlapped(y), overlap);
        EXPECT_FALSE(overlapped(y2));
        EXPECT_EQ(as_dtensor(y).layout().placements()[0],
                  c.weight.is_shard() ? Placement(Shard(static_cast<int64_t>(c.shape.size()) - 1))
                                      : Placement(Replicate()));
        (y * y2).sum().backward();
        got[overlap] = {full(y), full(x.grad()), full(w.grad()),
                        c.bias ? full(b.grad()) : at::zeros({16})};
      }
      // The single-device computation.
      const at::Tensor Xr = X.clone().requires_grad_(), Wr = W.clone().requires_grad_(),
                       Br = B.clone().requires_grad_();
      const at::Tensor Y = c.bias ? at::linear(Xr, Wr, Br) : at::linear(Xr, Wr);
      (Y * at::linear(Xr, Wr)).sum().backward();
      const std::vector<at::Tensor> want = {Y.detach(), Xr.grad(), Wr.grad(),
                                            c.bias ? Br.grad() : at::zeros({16})};
      expect_both_close(got, want, {"y", "x.grad", "w.grad", "b.grad"});
    });
}

// Where the product after the gather would communicate too (a 2-D mesh, a weight sharded by
// the contracted dim, a bias laid out unlike the weight's rows, a plain weight), or nothing
// is gathered, the ordinary path runs.
TEST(LinearGather, TheOverlapIsOnlyForAGatherFollowedByALocalProduct) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    OverlapSwitch on(true);  // per thread: this rank's
    const at::Tensor X = global_a({2, 8, 6}), W = global_b({16, 6}), B = global_a({16});
    auto overlaps = [&](const at::Tensor& w, const at::Tensor& b) {
      const at::Tensor in = make(X, mesh, {Shard(1)}).as_tensor();
      const at::Tensor win = w.detach().requires_grad_();
      return overlapped(b.defined() ? at::linear(in, win, b) : at::linear(in, win));
    };
    const at::Tensor w_col = make(W, mesh, {Shard(0)}).as_tensor();
    const at::Tensor w_rep = make(W, mesh, {Replicate()}).as_tensor();
    // A Replicate or plain bias beside a Colwise weight: cut locally, overlapped.
    EXPECT_TRUE(overlaps(w_col, make(B, mesh, {Replicate()}).as_tensor()));
    EXPECT_TRUE(overlaps(w_col, B));
    // A sharded bias beside a Replicate weight: its add would gather it; the ordinary path.
    EXPECT_FALSE(overlaps(w_rep, make(B, mesh, {Shard(0)}).as_tensor()));
    // A plain weight.
    EXPECT_FALSE(overlaps(W, at::Tensor()));
    // A weight sharded by the contracted dim (Rowwise) beside a sequence-sharded input.
    EXPECT_FALSE(overlaps(make(W, mesh, {Shard(1)}).as_tensor(), at::Tensor()));
    // Features sharded (Rowwise input): nothing gathered.
    EXPECT_FALSE(overlapped(at::linear(make(X, mesh, {Shard(2)}).as_tensor(),
                                       make(W, mesh, {Shard(1)}).as_tensor().requires_grad_())));
    // Off: never.
    {
      OverlapSwitch off(false);
      EXPECT_FALSE(overlaps(w_col, at::Tensor()));
    }
    // matmul of a 3-D input with a transposed Colwise weight (torch::nn::Linear): overlapped.
    EXPECT_TRUE(overlapped(make(X, mesh, {Shard(1)}).as_tensor().matmul(
        w_col.detach().requires_grad_().t())));
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    OverlapSwitch on(true);
    const at::Tensor X = global_a({2, 8, 6}), W = global_b({16, 6});
    const at::Tensor x = make(X, mesh, {Shard(1), Replicate()}).as_tensor();
    const at::Tensor w = make(W, mesh, {Shard(0), Replicate()}).as_tensor().requires_grad_();
    const at::Tensor y = at::linear(x, w);
    EXPECT_FALSE(overlapped(y));
    expect_close(full(y), at::linear(X, W), "2x2 mesh");
  });
}

/// Whether t's autograd node is ContractedMatmulFn (a Rowwise product whose backward overlaps
/// the output gradient's gather).
bool contracted(const at::Tensor& t) {
  return t.grad_fn() && t.grad_fn()->name().find("ContractedMatmulFn") != std::string::npos;
}

// A Rowwise projection of a feature-sharded input (o, w2 under sequence parallelism): forward
// P(sum), reduce-scattered to the sequence-sharded residual stream; backward gathers that
// S(1) gradient, overlapped with the product of this rank's own rows. Values, gradients and the
// backward's collectives equal the synchronous path's and one device's, on 2 and 4 ranks,
// batch 1 and 2, even and uneven sequences.
TEST(LinearGather, TheRowwiseBackwardOverlapsTheGradientGather) {
  struct Case {
    int64_t ranks, batch, seq;
  };
  for (const Case& c : {Case{2, 2, 8}, Case{2, 1, 7}, Case{4, 2, 6}, Case{4, 1, 9}})
    run_on_mesh({c.ranks}, [&](const DeviceMesh& mesh) {
      SCOPED_TRACE("ranks " + std::to_string(c.ranks) + " batch " + std::to_string(c.batch) +
                   " seq " + std::to_string(c.seq));
      const at::Tensor H = global_a({c.batch, c.seq, 8}), W = global_b({6, 8}),
                       R = global_b({c.batch, c.seq, 6}) * 0.5;
      std::map<bool, std::vector<at::Tensor>> got;
      for (const bool overlap : {true, false}) {
        OverlapSwitch on(overlap);
        const at::Tensor h = make(H, mesh, {Shard(2)}).as_tensor().requires_grad_();
        const at::Tensor w = make(W, mesh, {Shard(1)}).as_tensor().requires_grad_();
        const at::Tensor r = make(R, mesh, {Shard(1)}).as_tensor();
        const at::Tensor y = h.matmul(w.t());  // torch::nn::Linear's product
        EXPECT_EQ(contracted(y), overlap);
        EXPECT_EQ(as_dtensor(y).layout().placements()[0], Placement(Partial()));
        const at::Tensor z = y + r;  // the residual stream: reduce-scattered to S(1)
        EXPECT_EQ(as_dtensor(z).layout().placements()[0], Placement(Shard(1)));
        const at::Tensor loss = (z * z).sum();
        const int64_t calls = calls_of(mesh, [&] { loss.backward(); });
        got[overlap] = {full(z), full(h.grad()), full(w.grad()),
                        at::full({1}, static_cast<double>(calls))};
      }
      // One collective in the backward: the gradient's gather, read again by the weight's
      // gradient. (The rules' path gathers the same gradient 2 or 3 times: for the view before
      // each mm, a copy not remembered.)
      EXPECT_EQ(got[true][3].item<double>(), 1) << "the backward's collectives, overlapped";
      EXPECT_GE(got[false][3].item<double>(), 1) << "the backward's collectives, synchronous";
      const at::Tensor Hr = H.clone().requires_grad_(), Wr = W.clone().requires_grad_();
      const at::Tensor Z = Hr.matmul(Wr.t()) + R;
      (Z * Z).sum().backward();
      const std::vector<at::Tensor> want = {Z.detach(), Hr.grad(), Wr.grad()};
      expect_both_close(got, want, {"z", "h.grad", "w.grad"});
    });
}

// Without autograd (no_grad, or nothing requires grad) and for other layouts the Rowwise
// product is the rules' path.
TEST(LinearGather, TheRowwiseFunctionOnlyWhereABackwardCanUseIt) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    OverlapSwitch on(true);
    const at::Tensor H = global_a({2, 8, 8}), W = global_b({6, 8});
    const at::Tensor h = make(H, mesh, {Shard(2)}).as_tensor();
    const at::Tensor w = make(W, mesh, {Shard(1)}).as_tensor();
    EXPECT_FALSE(contracted(h.matmul(w.t())));  // nothing requires grad
    {
      at::NoGradGuard no_grad;
      const at::Tensor wg = w.detach().requires_grad_();
      EXPECT_FALSE(contracted(h.matmul(wg.t())));
    }
    const at::Tensor wg = w.detach().requires_grad_();
    EXPECT_TRUE(contracted(h.matmul(wg.t())));
    // A Replicate weight beside a feature-sharded input: not a contraction of shards.
    EXPECT_FALSE(contracted(
        h.matmul(make(W, mesh, {Replicate()}).as_tensor().requires_grad_().t())));
    // A gradient that is not sequence-sharded (here Replicate: a plain loss of the Partial
    // output, reduced whole) still takes the rules' path in the backward.
    const at::Tensor y = h.matmul(wg.t());
    const at::Tensor g = make(global_b({2, 8, 6}), mesh, {Replicate()}).as_tensor();
    y.backward(g);
    const at::Tensor Wr = W.clone().requires_grad_();
    H.matmul(Wr.t()).backward(global_b({2, 8, 6}));
    expect_close(full(wg.grad()), Wr.grad(), "w.grad from a Replicate gradient");
  });
}

// torch::nn::Linear's product `x.matmul(weight.t())` of a 3-D input with a DTensor weight
// made by hand (no gradient hook): the weight's gradient has a row-major local (its product
// follows weight.t()'s column-major local, FoldedMatmulFn / ContractedMatmulFn), values equal
// one device; for Colwise (weight S(0), input Replicate), Rowwise (weight S(1), input S(2)),
// Replicate, and under sequence parallelism (input S(1)). A Partial output gradient keeps
// LibTorch's order (its reduction is shared with the input's gradient; a copy is cheaper
// than a second all_reduce).
TEST(LinearGather, AWeightsGradientIsRowMajorWithoutAHook) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({2, 6, 8}), W = global_b({4, 8}), C = global_b({2, 6, 4});
    struct Case {
      Placements x, w;
    };
    for (const Case& c : {Case{{Replicate()}, {Shard(0)}}, Case{{Shard(2)}, {Shard(1)}},
                          Case{{Replicate()}, {Replicate()}}, Case{{Shard(1)}, {Shard(0)}}}) {
      const std::string what = "x " + to_string(c.x) + " w " + to_string(c.w);
      const at::Tensor x = make(X, mesh, c.x).as_tensor();
      const at::Tensor w = make(W, mesh, c.w).as_tensor().requires_grad_();
      const at::Tensor y = x.matmul(w.t());
      (y * make(C, mesh, {Replicate()}).as_tensor()).sum().backward();  // a Replicate gradient
      const at::Tensor Wr = W.clone().requires_grad_();
      (X.matmul(Wr.t()) * C).sum().backward();
      EXPECT_TRUE(as_dtensor(w.grad()).to_local().is_contiguous()) << what;
      expect_close(full(w.grad()), Wr.grad(), "w.grad " + what);
    }
  });
}

// A view whose local is a copy, read after its base was written, is refused by linear and
// matmul as by every other op (their kernels relay the input out before the fallback sees
// it): the overlapped and the synchronous gather alike, never a silent read of the stale copy.
TEST(LinearGather, AStaleCopiedViewIsRefused) {
  for (const bool overlap : {true, false})
    run_on_mesh({2}, [&](const DeviceMesh& mesh) {
      OverlapSwitch on(overlap);
      const at::Tensor X = global_a({8, 6}), W = global_b({16, 4});
      at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
      // x.t() is [6, 8] S(1) with a transposed local; splitting its sharded dim copies it.
      const at::Tensor v = x.t().view({6, 2, 4});
      const at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor();
      expect_close(full(at::linear(v, w)), at::linear(X.t().reshape({6, 2, 4}), W), "before");
      x.mul_(2);
      for (int mode : {0, 1}) {
        const std::string m = error_of<NotImplementedError>([&] {
          (void)(mode == 0 ? at::linear(v, w) : v.matmul(w.t()));
        });
        EXPECT_NE(m.find("its base was written since the view was taken, so the copy is stale"),
                  std::string::npos) << m;
        EXPECT_NE(m.find(mode == 0 ? "aten::linear" : "aten::matmul"), std::string::npos) << m;
      }
    });
}

TEST(LinearGather, RelayoutOfAPlainTensorIsRefused) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const Layout l = layout_of(mesh, {Replicate()}, {4});
    const std::string e =
        error_of<ValueError>([&] { (void)dispatch::relayout(at::zeros({4}), l); });
    EXPECT_NE(e.find("hyper relayout: expected a DTensor tensor, got a plain one"),
              std::string::npos)
        << e;
  });
}

}  // namespace
}  // namespace hyper
