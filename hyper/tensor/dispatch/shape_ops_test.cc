// split / chunk / unbind / tensor_split, to(dtype), fill_ and the *_like / new_* factories on
// DTensor tensors (shape_rules.h, shape_kernels.h): the rules' layouts torch-free, then values
// and gradients against the same ops on the full tensors on one device (the oracle) for
// Replicate / Shard / uneven Shard / Partial (sum, avg, max) on 2 and 4 ranks and a 2x2 mesh,
// the output placements, aliasing of pieces, and every refusal's type and message.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/shape_rules.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/random.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch::ArgLayout;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;

Layout lay(const std::string& text) { return Layout::from_string(text); }
std::string pl(const at::Tensor& t) { return to_string(as_dtensor(t).placements()); }
std::string pl(const Placements& p) { return to_string(p); }

// ---- torch-free rule cases -------------------------------------------------------------

std::string split_of(const std::string& in, const std::vector<int64_t>& sizes, int64_t dim,
                     bool unbind = false) {
  const auto p = dispatch::propagate_split("aten::split_with_sizes", ArgLayout::of(lay(in)), sizes,
                                           dim, unbind);
  std::string s = p.input.to_string() + " ->";
  for (const auto& o : p.outputs) s += " " + to_string(o.placements()) + shape_to_string(o.shape());
  return s;
}

TEST(ShapeRule, SplitKeepsLayoutsOffTheSplitDimAndReplicatesIt) {
  // Unsharded split dim: every piece keeps S(0) (no bytes); Partial of any op passes.
  EXPECT_EQ(split_of("mesh=[2] placements=[S(0)] shape=[4,6]", {2, 2, 2}, 1),
            "mesh=[2] placements=[S(0)] shape=[4,6] -> [S(0)][4,2] [S(0)][4,2] [S(0)][4,2]");
  EXPECT_EQ(split_of("mesh=[2] placements=[P(max)] shape=[4,6]", {1, 5}, -1),
            "mesh=[2] placements=[P(max)] shape=[4,6] -> [P(max)][4,1] [P(max)][4,5]");
  // Sharded split dim: that mesh dim made Replicate first (uneven [5,6] on 4: exact).
  EXPECT_EQ(split_of("mesh=[4] placements=[S(0)] shape=[5,6]", {3, 2}, 0),
            "mesh=[4] placements=[R] shape=[5,6] -> [R][3,6] [R][2,6]");
  EXPECT_EQ(split_of("mesh=[2,2] placements=[S(1),S(0)] shape=[5,6]", {4, 2}, 1),
            "mesh=[2,2] placements=[R,S(0)] shape=[5,6] -> [R,S(0)][5,4] [R,S(0)][5,2]");
  EXPECT_EQ(split_of("mesh=[2,2] placements=[S(1),S(1)] shape=[5,6]", {6}, 1),
            "mesh=[2,2] placements=[R,R] shape=[5,6] -> [R,R][5,6]");
  // unbind: the dim removed, later Shard dims renumbered.
  EXPECT_EQ(split_of("mesh=[2,2] placements=[S(2),P(sum)] shape=[2,3,4]", {}, 0, true),
            "mesh=[2,2] placements=[S(2),P(sum)] shape=[2,3,4] -> [S(1),P(sum)][3,4] "
            "[S(1),P(sum)][3,4]");
  EXPECT_EQ(split_of("mesh=[2] placements=[S(1)] shape=[2,3]", {}, 1, true),
            "mesh=[2] placements=[R] shape=[2,3] -> [R][2] [R][2] [R][2]");
  // split_pieces: PyTorch's piece sizes.
  EXPECT_EQ(dispatch::split_pieces(6, 4, "w"), (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(dispatch::split_pieces(6, 2, "w"), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(dispatch::split_pieces(3, 7, "w"), (std::vector<int64_t>{3}));
  EXPECT_EQ(dispatch::split_pieces(0, 0, "w"), (std::vector<int64_t>{0}));
  EXPECT_EQ(dispatch::split_pieces(0, 3, "w"), (std::vector<int64_t>{0}));
}

TEST(ShapeRule, SplitErrorsNameTheOpLayoutAndValues) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[4,6]"));
  auto split = [&](const ArgLayout& in, std::vector<int64_t> sizes, int64_t dim) {
    return [=] { dispatch::propagate_split("aten::split_with_sizes", in, sizes, dim, false); };
  };
  std::string m = error_of<ValueError>(split(a, {2, 3}, 1));
  EXPECT_NE(m.find("aten::split_with_sizes(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim 1: "
                   "split sizes [2,3] sum to 5, the dim has size 6"), std::string::npos) << m;
  m = error_of<ValueError>(split(a, {-1, 7}, 1));
  EXPECT_NE(m.find("dim 1: negative split size -1 in [-1,7]"), std::string::npos) << m;
  m = error_of<ValueError>(split(a, {4}, 2));
  EXPECT_NE(m.find("dim 2: dim 2 out of range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
  m = error_of<ValueError>(split(ArgLayout::of(lay("mesh=[2] placements=[R] shape=[]")), {}, 0));
  EXPECT_NE(m.find("a 0-dim tensor cannot be split"), std::string::npos) << m;
  m = error_of<NotImplementedError>(
      split(ArgLayout::of(lay("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]")), {2, 2}, 1));
  EXPECT_NE(m.find("aten::split_with_sizes(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                   "shape=[6,4]) dim 1: split / chunk / unbind of a RaggedShard DTensor is not "
                   "implemented (fail-closed: elementwise ops only)"), std::string::npos) << m;
  m = error_of<ValueError>([] { dispatch::split_pieces(6, -2, "aten::split.Tensor(x)"); });
  EXPECT_NE(m.find("aten::split.Tensor(x): split_size must be non-negative, got -2"),
            std::string::npos) << m;
  m = error_of<ValueError>([] { dispatch::split_pieces(6, 0, "aten::split.Tensor(x)"); });
  EXPECT_NE(m.find("split_size 0 for a dim of size 6"), std::string::npos) << m;
}

TEST(ShapeRule, CastKeepsThePartialsItPreserves) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2,2] placements=[P(sum),P(max)] shape=[3]"));
  auto cast = [&](bool linear, bool monotone) {
    return dispatch::propagate_cast("aten::_to_copy", a, {linear, monotone}).output.to_string();
  };
  EXPECT_EQ(cast(true, true), "mesh=[2,2] placements=[P(sum),P(max)] shape=[3]");
  EXPECT_EQ(cast(false, true), "mesh=[2,2] placements=[R,P(max)] shape=[3]");
  EXPECT_EQ(cast(true, false), "mesh=[2,2] placements=[P(sum),R] shape=[3]");
  EXPECT_EQ(cast(false, false), "mesh=[2,2] placements=[R,R] shape=[3]");
  const ArgLayout s = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[3]"));
  EXPECT_EQ(dispatch::propagate_cast("aten::_to_copy", s, {}).output.to_string(),
            "mesh=[2] placements=[S(0)] shape=[3]");
}

TEST(ShapeRule, NewFactoryKeepsTheLayoutOfTheGlobalSizeElseReplicate) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2,2] placements=[S(1),P(avg)] shape=[4,6]"));
  EXPECT_EQ(dispatch::propagate_new_factory("aten::new_zeros", a, {4, 6}).output.to_string(),
            "mesh=[2,2] placements=[S(1),R] shape=[4,6]");
  EXPECT_EQ(dispatch::propagate_new_factory("aten::new_zeros", a, {6, 4}).output.to_string(),
            "mesh=[2,2] placements=[R,R] shape=[6,4]");
  EXPECT_EQ(dispatch::propagate_new_factory("aten::new_zeros", a, {}).output.to_string(),
            "mesh=[2,2] placements=[R,R] shape=[]");
  const std::string m = error_of<ValueError>(
      [&] { dispatch::propagate_new_factory("aten::new_ones", a, {2, -1}); });
  EXPECT_NE(m.find("aten::new_ones(arg 0: mesh=[2,2] placements=[S(1),P(avg)] shape=[4,6]) size "
                   "[2,-1]: negative size -1"), std::string::npos) << m;
}

// ---- split / chunk / unbind / tensor_split on DTensor tensors ----------------------------

using ListOp = std::function<std::vector<at::Tensor>(const at::Tensor&)>;

std::vector<std::pair<std::string, ListOp>> split_ops() {
  return {
      {"split 4 dim 1", [](const at::Tensor& x) { return x.split(4, 1); }},
      {"split 2 dim 0", [](const at::Tensor& x) { return x.split(2, 0); }},
      {"split_with_sizes dim -1", [](const at::Tensor& x) { return x.split_with_sizes({1, 0, 5}, -1); }},
      {"split sizes dim 0", [](const at::Tensor& x) {
         return x.split(std::vector<int64_t>{1, x.size(0) - 1}, 0);
       }},
      {"chunk 3 dim 1", [](const at::Tensor& x) { return x.chunk(3, 1); }},
      {"chunk 2 dim 0", [](const at::Tensor& x) { return x.chunk(2, 0); }},
      {"unsafe_chunk 2 dim 1", [](const at::Tensor& x) { return x.unsafe_chunk(2, 1); }},
      {"unbind 0", [](const at::Tensor& x) { return x.unbind(0); }},
      {"unbind 1", [](const at::Tensor& x) { return x.unbind(1); }},
      {"tensor_split 4 dim 1", [](const at::Tensor& x) { return x.tensor_split(4, 1); }},
      {"tensor_split [1,3] dim 0",
       [](const at::Tensor& x) { return x.tensor_split(std::vector<int64_t>{1, 3}, 0); }},
  };
}

/// Every split op on every layout: each piece's values (and `piece * 2 + 1`, an op reading its
/// local) equal the piece of the full tensor; pieces of an unsharded dim keep the input's
/// placements and alias its local (no bytes moved).
void split_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat,
                 const std::vector<int64_t>& shape) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a(shape);
    for (const auto& p : cat)
      for (const auto& [name, f] : split_ops()) {
        const std::string what = name + " " + pl(p);
        const at::Tensor a = make(A, mesh, p).as_tensor();
        const std::vector<at::Tensor> got = f(a), want = f(A);
        ASSERT_EQ(got.size(), want.size()) << what;
        for (size_t i = 0; i < got.size(); ++i) {
          const std::string w = what + " piece " + std::to_string(i);
          ASSERT_TRUE(is_dtensor(got[i])) << w;
          EXPECT_EQ(got[i].sizes(), want[i].sizes()) << w;
          expect_close(full(got[i]), want[i], w);
          expect_close(full(got[i] * 2 + 1), want[i] * 2 + 1, w + " then *2+1");
        }
      }
  });
}

TEST(DTensorSplit, ValuesOn2RanksEven) {
  split_cases({2}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("avg")},
                    {Partial("max")}}, {4, 6});
}
TEST(DTensorSplit, ValuesOn4RanksUneven) {
  split_cases({4}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("min")}}, {5, 6});
}
TEST(DTensorSplit, ValuesOn2x2Mesh) {
  split_cases({2, 2}, {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Shard(0), Shard(0)},
                       {Partial(), Shard(1)}, {Replicate(), Partial()}}, {5, 6});
}

TEST(DTensorSplit, PlacementsAndAliasingOfThePieces) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    const at::Tensor s0 = make(A, mesh, {Shard(0)}).as_tensor();
    const at::Tensor s1 = make(A, mesh, {Shard(1)}).as_tensor();
    const at::Tensor pp = make(A, mesh, {Partial()}).as_tensor();
    const at::Tensor l0 = as_dtensor(s0).to_local();
    // Along an unsharded dim: S(0) kept (uneven rows 2,2,1,0), the local sliced (aliases).
    for (const at::Tensor& t : s0.split(4, 1)) {
      EXPECT_EQ(pl(t), pl({Shard(0)}));
      EXPECT_TRUE(as_dtensor(t).to_local().is_alias_of(l0));
    }
    for (const at::Tensor& t : s0.unbind(1)) {
      EXPECT_EQ(pl(t), pl({Shard(0)}));
      EXPECT_EQ(t.sizes(), (std::vector<int64_t>{5}));
      EXPECT_TRUE(as_dtensor(t).to_local().is_alias_of(l0));
    }
    for (const at::Tensor& t : pp.chunk(2, 0)) EXPECT_EQ(pl(t), pl({Partial()}));
    for (const at::Tensor& t : s1.unbind(0)) EXPECT_EQ(pl(t), pl({Shard(0)}));  // renumbered
    // Along the sharded dim: Replicate (gathered once), a copy.
    for (const at::Tensor& t : s0.chunk(2, 0)) {
      EXPECT_EQ(pl(t), pl({Replicate()}));
      EXPECT_FALSE(as_dtensor(t).to_local().is_alias_of(l0));
    }
    for (const at::Tensor& t : s1.split(3, 1)) EXPECT_EQ(pl(t), pl({Replicate()}));
  });
}

// The bytes a split moves: none along an unsharded dim; along a sharded dim one gather for all
// pieces (the same as one slice of it); tensor_split too (tensor_split_kernels.h: split_with_sizes,
// not ATen's composite, which slices each piece and would gather once per piece).
TEST(DTensorSplit, ASplitGathersOnceForAllPieces) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({5, 6}), mesh, {Shard(0)}).as_tensor();
    auto moved = [&](const std::function<void()>& f) { return dispatch_testing::bytes_of(mesh, f); };
    EXPECT_EQ(moved([&] { (void)x.split(2, 1); }), 0);
    EXPECT_EQ(moved([&] { (void)x.unbind(1); }), 0);
    const auto one_slice = moved([&] { (void)x.narrow(0, 0, 1); });
    if (as_dtensor(x).to_local().numel() > 0) EXPECT_GT(one_slice, 0);  // rank 3: an empty shard
    EXPECT_EQ(moved([&] { (void)x.unbind(0); }), one_slice);  // 5 pieces
    EXPECT_EQ(moved([&] { (void)x.chunk(3, 0); }), one_slice);
    EXPECT_EQ(moved([&] { (void)x.tensor_split(3, 0); }), one_slice);  // tensor_split_kernels.h: one gather
  });
}

TEST(DTensorSplit, InPlaceOnAPieceWritesTheBaseUnlessThePieceIsACopy) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    at::Tensor x = make(A, mesh, {Shard(0)}).as_tensor();
    // A piece along the unsharded dim aliases: in-place ops on it write x.
    std::vector<at::Tensor> cols = x.split(2, 1);
    cols[1].mul_(10);
    x.unbind(1)[0].add_(1);
    at::Tensor want = A.clone();
    want.split(2, 1)[1].mul_(10);
    want.unbind(1)[0].add_(1);
    expect_close(full(x), want, "in-place through aliasing pieces");
    // Pieces read after the write see it (views of the same local).
    expect_close(full(cols[0] * 1), want.split(2, 1)[0], "aliasing piece after the write");
    // A piece along the sharded dim is a copy (gathered): an in-place op on it writes each
    // rank's rows of it back into x (no communication), as a plain piece's would; the written
    // piece stays current, so does a sibling piece holding none of the written rows, and one
    // holding some of them is stale (reading it is refused).
    std::vector<at::Tensor> rows = x.chunk(2, 0);
    expect_close(full(rows[1] * 1), want.chunk(2, 0)[1], "copied piece before the write");
    rows[0].add_(1);
    want.chunk(2, 0)[0].add_(1);
    expect_close(full(x), want, "in-place through a copied piece");
    expect_close(full(rows[0] * 1), want.chunk(2, 0)[0], "the written piece after its write");
    expect_close(full(rows[1] * 1), want.chunk(2, 0)[1], "its sibling (other rows) after it");
    x.unbind(0)[3].mul_(3);  // a row of unbind (a select of the sharded dim): row 3 of rows[1]
    want.unbind(0)[3].mul_(3);
    expect_close(full(x), want, "in-place through a copied row of unbind");
    std::string m = error_of<NotImplementedError>([&] { (void)(rows[1] * 2); });
    EXPECT_NE(m.find("aten::mul.Tensor(arg 0: mesh=[2] placements=[R] shape=[2,6]"),
              std::string::npos) << m;
    EXPECT_NE(m.find("its base was written since the view was taken, so the copy is stale"),
              std::string::npos) << m;
    // A split of a stale copy is refused by the split kernel itself.
    m = error_of<NotImplementedError>([&] { (void)rows[1].split(3, 1); });
    EXPECT_NE(m.find("aten::split.Tensor(arg 0: mesh=[2] placements=[R] shape=[2,6]): argument 0 "
                     "is a view of a DTensor whose local tensor is a copy (the view redistributed "
                     "its input or copied a non-row-major local), and its base was written since "
                     "the view was taken"), std::string::npos) << m;
    // So is a write through it (it would write stale rows back).
    m = error_of<NotImplementedError>([&] { rows[1].fill_(0); });
    EXPECT_NE(m.find("so the copy is stale"), std::string::npos) << m;
    expect_close(full(x), want, "x unchanged by the refused write");
    x.add_(1);
    want.add_(1);
    // Taken again after the write: fine.
    expect_close(full(x.chunk(2, 0)[1] * 1), want.chunk(2, 0)[1], "piece taken after the write");
  });
}

void split_gradient_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& xs) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6}), W = global_b({5, 2});
    auto program = [](const at::Tensor& x, const at::Tensor& w) {
      const std::vector<at::Tensor> c = x.split(2, 1);   // [5,2] x3
      const std::vector<at::Tensor> r = x.chunk(3, 0);   // [2,6] [2,6] [1,6]
      const std::vector<at::Tensor> u = x.unbind(1);     // [5] x6
      return (c[0] * w + c[2] * c[1]).sum() + (r[1] * 3).sum() + (u[4] * u[1]).sum() +
             x.split_with_sizes({5, 1}, 1)[1].sum() + x.tensor_split(2, 0)[1].sum();
    };
    const at::Tensor Xg = X.clone().requires_grad_(), Wg = W.clone().requires_grad_();
    program(Xg, Wg).backward();
    for (const Placements& px : xs) {
      const std::string what = pl(px);
      at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
      at::Tensor w = make(W, mesh, px).as_tensor().requires_grad_();
      const at::Tensor loss = program(x, w);
      expect_close(full(loss), program(X, W), "loss " + what);
      loss.backward();
      ASSERT_TRUE(x.grad().defined()) << what;
      expect_close(full(x.grad()), Xg.grad(), "grad x " + what);
      expect_close(full(w.grad()), Wg.grad(), "grad w " + what);
      // One piece used: the others' gradients are zeros (split_backward's plain zeros).
      at::Tensor y = make(X, mesh, px).as_tensor().requires_grad_();
      y.split(4, 1)[1].sum().backward();
      at::Tensor want = at::zeros_like(X);
      want.narrow(1, 4, 2).fill_(1);
      expect_close(full(y.grad()), want, "split(4,1)[1].sum() grad " + what);
      at::Tensor z = make(X, mesh, px).as_tensor().requires_grad_();
      (z.unbind(0)[3] * 2).sum().backward();
      want = at::zeros_like(X);
      want.select(0, 3).fill_(2);
      expect_close(full(z.grad()), want, "unbind(0)[3] grad " + what);
    }
  });
}

TEST(DTensorSplitAutograd, GradientsEqualSingleDevice) {
  const std::vector<Placements> xs = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
  split_gradient_cases({2}, xs);
  split_gradient_cases({4}, xs);
  split_gradient_cases({2, 2}, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}});
}

TEST(DTensorSplit, RaggedAndBadArgumentsAreRefused) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor rs = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"aten::split.Tensor", [&] { (void)rs.split(2, 1); }},
             {"aten::split.Tensor", [&] { (void)rs.chunk(2, 0); }},
             {"aten::split_with_sizes", [&] { (void)rs.split_with_sizes({1, 3}, 1); }},
             {"aten::unbind.int", [&] { (void)rs.unbind(0); }}}) {
      const std::string m = error_of<NotImplementedError>(f);
      EXPECT_NE(m.find(op + "(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4])"),
                std::string::npos) << m;
      EXPECT_NE(m.find("split / chunk / unbind of a RaggedShard DTensor is not implemented"),
                std::string::npos) << m;
    }
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { (void)a.split_with_sizes({2, 3}, 1); });
    EXPECT_NE(m.find("aten::split_with_sizes(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim 1: "
                     "split sizes [2,3] sum to 5, the dim has size 6"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)a.split(-1, 1); });
    EXPECT_NE(m.find("aten::split.Tensor(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim 1: "
                     "split_size must be non-negative, got -1"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)a.split(2, 3); });
    EXPECT_NE(m.find("aten::split.Tensor(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim 3: "
                     "dim 3 out of range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)a.sum().split(1, 0); });
    EXPECT_NE(m.find("a 0-dim tensor cannot be split"), std::string::npos) << m;
  });
}

// ---- to(dtype) ------------------------------------------------------------------------

TEST(DTensorCast, ValuesAndPlacementsOfCasts) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6}) * 3;  // -6..9: casts to int truncate
      struct Case {
        Placements in;
        at::ScalarType to;
        Placements out;
      };
      const std::vector<Case> cases = {
          {{Shard(0)}, at::kFloat, {Shard(0)}},    {{Shard(1)}, at::kLong, {Shard(1)}},
          {{Replicate()}, at::kInt, {Replicate()}}, {{Partial()}, at::kFloat, {Partial()}},
          {{Partial("avg")}, at::kHalf, {Partial("avg")}},
          {{Partial()}, at::kLong, {Replicate()}},  // not linear: reduced first
          {{Partial()}, at::kBool, {Replicate()}},
          {{Partial("max")}, at::kFloat, {Partial("max")}},  // monotone
          {{Partial("min")}, at::kFloat, {Partial("min")}},
          {{Partial("max")}, at::kLong, {Replicate()}},  // float -> int: reduced first
          {{Partial("max")}, at::kBool, {Replicate()}},  // not monotone (-1 -> true, 0 -> false)
      };
      for (const auto& c : cases) {
        const std::string what = pl(c.in) + " to " + c10::toString(c.to);
        const at::Tensor y = make(A, mesh, c.in).as_tensor().to(c.to);
        EXPECT_EQ(y.scalar_type(), c.to) << what;
        EXPECT_EQ(pl(y), pl(c.out)) << what;
        const at::Tensor got = full(y).to(at::kDouble), want = A.to(c.to).to(at::kDouble);
        EXPECT_TRUE(at::allclose(got, want, 1e-3, 1e-5)) << what << "\n" << got << "\n" << want;
      }
      // Integer sources (P(max): coordinate c holds value - c): kept to a wider integer type
      // and to floating, reduced first to a narrower integer type or bool.
      const at::Tensor L = A.to(at::kInt);
      const int64_t c = mesh.get_coordinate()[0];
      const at::Tensor x = DTensor::from_local_with_layout(
                               L - c, mesh, Layout(mesh.topology(), {Partial("max")}, {5, 6}))
                               .as_tensor();
      EXPECT_EQ(x.scalar_type(), at::kInt);
      for (const auto& [to, out] : std::vector<std::pair<at::ScalarType, Placements>>{
               {at::kDouble, {Partial("max")}}, {at::kLong, {Partial("max")}},
               {at::kChar, {Replicate()}}, {at::kBool, {Replicate()}}}) {
        const at::Tensor y = x.to(to);
        const std::string what = std::string("P(max) int to ") + c10::toString(to);
        EXPECT_EQ(pl(y), pl(out)) << what;
        EXPECT_TRUE(at::equal(full(y), L.to(to))) << what;
      }
    });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 7});
    const at::Tensor y = make(A, mesh, {Partial(), Shard(1)}).as_tensor().to(at::kFloat);
    EXPECT_EQ(pl(y), pl({Partial(), Shard(1)}));
    expect_close(full(y).to(at::kDouble), A.to(at::kFloat).to(at::kDouble), "2x2 P,S(1) to float");
    const at::Tensor z = make(A, mesh, {Shard(0), Partial("max")}).as_tensor().to(at::kInt);
    EXPECT_EQ(pl(z), pl({Shard(0), Replicate()}));
    EXPECT_TRUE(at::equal(full(z), A.to(at::kInt)));
  });
}

TEST(DTensorCastAutograd, FloatDoubleFloatChainGradientEqualsSingleDevice) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({5, 6}).to(at::kFloat), W = global_b({5, 6}).to(at::kFloat);
      auto program = [](const at::Tensor& x, const at::Tensor& w) {
        return ((x.to(at::kDouble) * w.to(at::kDouble)).to(at::kFloat) + x).sum();
      };
      const at::Tensor Xg = X.clone().requires_grad_(), Wg = W.clone().requires_grad_();
      program(Xg, Wg).backward();
      for (const Placements& p : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}}) {
        at::Tensor x = make(X, mesh, p).as_tensor().requires_grad_();
        at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor().requires_grad_();
        const at::Tensor loss = program(x, w);
        EXPECT_EQ(loss.scalar_type(), at::kFloat);
        EXPECT_TRUE(at::allclose(full(loss), program(X, W), 1e-5, 1e-5)) << pl(p);
        loss.backward();
        EXPECT_EQ(x.grad().scalar_type(), at::kFloat) << pl(p);
        EXPECT_TRUE(at::allclose(full(x.grad()), Xg.grad(), 1e-5, 1e-6)) << pl(p);
        EXPECT_TRUE(at::allclose(full(w.grad()), Wg.grad(), 1e-5, 1e-6)) << pl(p);
      }
    });
}

TEST(DTensorCast, AnotherDeviceOrLayoutIsRefusedTheSameDeviceIsANoOp) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    EXPECT_TRUE(a.to(a.device()).is_same(a));            // no copy, no _to_copy
    EXPECT_TRUE(a.to(at::kDouble).is_same(a));
    const at::Tensor c = a.to(a.device(), at::kDouble, false, /*copy=*/true);  // _to_copy
    EXPECT_FALSE(c.is_same(a));
    EXPECT_EQ(pl(c), pl({Shard(0)}));
    EXPECT_FALSE(as_dtensor(c).to_local().is_alias_of(as_dtensor(a).to_local()));
    expect_close(full(c), global_a({4, 6}), "copy=true");
    // Another device: refused before anything runs there (a CUDA device, even on a CPU-only
    // build: the DTensor's key outranks CUDA's).
    std::string m = error_of<NotImplementedError>([&] { (void)a.to(at::Device(at::kCUDA, 0)); });
    EXPECT_NE(m.find("aten::_to_copy(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): moving a "
                     "DTensor from device cpu to device cuda:0 is not implemented (its devices "
                     "are those of its mesh)"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)a.to(at::Device(at::kCUDA, 1), at::kFloat); });
    EXPECT_NE(m.find("from device cpu to device cuda:1"), std::string::npos) << m;
    // Known gaps, both outside the DTensor key: the meta device and a sparse layout outrank it
    // (BackendSelect picks their kernels): meta gives ATen's plain meta tensor (no values), a
    // sparse layout ATen's own error.
    EXPECT_FALSE(is_dtensor(a.to(at::Device(at::kMeta))));
    EXPECT_THROW((void)a.to(at::TensorOptions().layout(at::kSparse)), c10::Error);
    // A ragged DTensor casts elementwise (layout kept).
    const at::Tensor rs = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    const at::Tensor rf = rs.to(at::kFloat);
    EXPECT_EQ(as_dtensor(rf).layout(), as_dtensor(rs).layout());
    expect_close(full(rf).to(at::kDouble), global_a({6, 4}).to(at::kFloat).to(at::kDouble), "ragged");
  });
}

// ---- fill_ ----------------------------------------------------------------------------

TEST(DTensorFill, FillKeepsTheLayoutAndAPartialSumHoldsTheValueOnce) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      for (const Placements& p : std::vector<Placements>{
               {Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}, {Partial("avg")}}) {
        at::Tensor x = make(A, mesh, p).as_tensor();
        x.fill_(2.5);
        EXPECT_EQ(pl(x), pl(p));
        expect_close(full(x), at::full({5, 6}, 2.5, at::kDouble), "fill_ scalar " + pl(p));
        at::Tensor y = make(A, mesh, p).as_tensor();
        y.fill_(at::scalar_tensor(-1.0, at::kDouble));
        expect_close(full(y), at::full({5, 6}, -1.0, at::kDouble), "fill_ tensor " + pl(p));
        if (p[0] == Partial()) {  // the value on coordinate 0 only
          const double local = as_dtensor(x).to_local()[0][0].item<double>();
          EXPECT_EQ(local, mesh.get_coordinate()[0] == 0 ? 2.5 : 0.0);
        }
      }
      // A 0-dim DTensor value: Partial(sum) reduced as the rule says (onto S(0): all_reduce).
      at::Tensor x = make(A, mesh, {Shard(0)}).as_tensor();
      const at::Tensor v = make(at::scalar_tensor(1.5, at::kDouble), mesh, {Partial()}).as_tensor();
      x.fill_(v);
      EXPECT_EQ(pl(x), pl({Shard(0)}));
      expect_close(full(x), at::full({5, 6}, 1.5, at::kDouble), "fill_ with a P(sum) 0-dim value");
    });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    at::Tensor x = make(global_a({5, 7}), mesh, {Partial(), Shard(1)}).as_tensor();
    x.fill_(3);
    EXPECT_EQ(pl(x), pl({Partial(), Shard(1)}));
    expect_close(full(x), at::full({5, 7}, 3.0, at::kDouble), "2x2 fill_");
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    at::Tensor rs = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    rs.fill_(7);
    expect_close(full(rs), at::full({6, 4}, 7.0, at::kDouble), "ragged fill_");
    // Through an aliasing view: writes the base; through a copied view: refused.
    at::Tensor x = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    x.split(3, 1)[1].fill_(0);
    at::Tensor want = global_a({4, 6});
    want.narrow(1, 3, 3).fill_(0);
    expect_close(full(x), want, "fill_ of an aliasing piece");
    // Through a copied piece (the sharded dim): written back into x's shards.
    x.chunk(2, 0)[1].fill_(0);
    want.narrow(0, 2, 2).fill_(0);
    expect_close(full(x), want, "fill_ of a copied piece");
    // Through a view that merged the sharded dim into another: refused.
    std::string m = error_of<NotImplementedError>([&] { x.t().reshape({24}).fill_(0); });
    EXPECT_NE(m.find("aten::fill_.Tensor(arg 0: mesh=[2] placements=[R] shape=[24]; arg 1: plain "
                     "tensor shape=[]): in-place op on a view of a DTensor whose local tensor is "
                     "a copy"), std::string::npos) << m;
    // Partial(max): refused (filling every coordinate is not the additive rule's job).
    at::Tensor px = make(global_a({4, 6}), mesh, {Partial("max")}).as_tensor();
    m = error_of<NotImplementedError>([&] { px.fill_(1); });
    EXPECT_NE(m.find("aten::fill_.Tensor(arg 0: mesh=[2] placements=[P(max)] shape=[4,6]; arg 1: "
                     "plain tensor shape=[]): in-place op would change argument 0's P(max) on mesh "
                     "dim 0 (redistribute it to Replicate first)"), std::string::npos) << m;
  });
}

TEST(DTensorFillAutograd, GradientThroughFillEqualsSingleDevice) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6}), V = at::scalar_tensor(0.5, at::kDouble);
    auto program = [](const at::Tensor& x, const at::Tensor& v) {
      at::Tensor y = x * 2;
      y.fill_(v);
      y.narrow(1, 1, 3).fill_(v * 3);  // through a view (a copy where dim 1 is sharded)
      return (y * x).sum() + (y * y).sum();
    };
    const at::Tensor Xg = X.clone().requires_grad_(), Vg = V.clone().requires_grad_();
    program(Xg, Vg).backward();
    for (const Placements& p : std::vector<Placements>{{Replicate()}, {Shard(0)}, {Partial()}}) {
      at::Tensor x = make(X, mesh, p).as_tensor().requires_grad_();
      at::Tensor v = V.clone().requires_grad_();  // a plain 0-dim value
      const at::Tensor loss = program(x, v);
      expect_close(full(loss), program(X, V), "loss " + pl(p));
      loss.backward();
      expect_close(full(x.grad()), Xg.grad(), "grad x " + pl(p));
      expect_close(full(v.grad()), Vg.grad(), "grad v " + pl(p));
    }
  });
}

// ---- *_like and new_* factories --------------------------------------------------------

TEST(DTensorFactories, LikeFactoriesOfPartialAreReplicate) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      for (const auto& [p, out] : std::vector<std::pair<Placements, Placements>>{
               {{Replicate()}, {Replicate()}}, {{Shard(0)}, {Shard(0)}}, {{Shard(1)}, {Shard(1)}},
               {{Partial()}, {Replicate()}}, {{Partial("avg")}, {Replicate()}},
               {{Partial("max")}, {Replicate()}}}) {
        const at::Tensor x = make(A, mesh, p).as_tensor();
        const std::string w = pl(p);
        // ones_like(P(sum)) must not be a P(sum) of ones (which would sum to n).
        const at::Tensor o = at::ones_like(x), z = at::zeros_like(x), f = at::full_like(x, -2.0);
        const at::Tensor e = at::empty_like(x), i = at::ones_like(x, at::kLong);
        for (const at::Tensor* t : {&o, &z, &f, &e, &i}) EXPECT_EQ(pl(*t), pl(out)) << w;
        expect_close(full(o), at::ones({5, 6}, at::kDouble), "ones_like " + w);
        expect_close(full(z), at::zeros({5, 6}, at::kDouble), "zeros_like " + w);
        expect_close(full(f), at::full({5, 6}, -2.0, at::kDouble), "full_like " + w);
        EXPECT_EQ(e.sizes(), A.sizes());
        EXPECT_EQ(i.scalar_type(), at::kLong);
        EXPECT_TRUE(at::equal(full(i), at::ones({5, 6}, at::kLong))) << w;
      }
      const at::Tensor rs = make(global_a({6, 4}), mesh, mesh.size() == 2
                                                             ? Placements{RaggedShard({0}, {1, 2})}
                                                             : Placements{RaggedShard({0}, {1, 2, 0, 3})})
                                .as_tensor();
      const at::Tensor ro = at::ones_like(rs);
      EXPECT_EQ(as_dtensor(ro).layout(), as_dtensor(rs).layout());
      expect_close(full(ro), at::ones({6, 4}, at::kDouble), "ragged ones_like");
    });
}

TEST(DTensorFactories, NewFactoriesKeepTheLayoutOfTheGlobalSizeElseReplicate) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      for (const auto& [p, out] : std::vector<std::pair<Placements, Placements>>{
               {{Shard(0)}, {Shard(0)}}, {{Shard(1)}, {Shard(1)}}, {{Partial()}, {Replicate()}},
               {{Partial("max")}, {Replicate()}}}) {
        const at::Tensor x = make(A, mesh, p).as_tensor();
        const std::string w = pl(p);
        const at::Tensor z = x.new_zeros({5, 6}), o = x.new_ones({5, 6});
        const at::Tensor f = x.new_full({5, 6}, 4.0), e = x.new_empty({5, 6});
        for (const at::Tensor* t : {&z, &o, &f, &e}) {
          EXPECT_EQ(pl(*t), pl(out)) << w;
          EXPECT_EQ(t->scalar_type(), at::kDouble) << w;  // self's dtype
        }
        expect_close(full(z), at::zeros({5, 6}, at::kDouble), "new_zeros " + w);
        expect_close(full(o), at::ones({5, 6}, at::kDouble), "new_ones " + w);
        expect_close(full(f), at::full({5, 6}, 4.0, at::kDouble), "new_full " + w);
        EXPECT_EQ(e.sizes(), A.sizes());
        // Another size: Replicate, the same value on every rank.
        const at::Tensor r = x.new_ones({3}), q = x.new_full({2, 2}, 1.0, at::kFloat);
        EXPECT_EQ(pl(r), pl({Replicate()})) << w;
        EXPECT_EQ(q.scalar_type(), at::kFloat);
        expect_close(full(r), at::ones({3}, at::kDouble), "new_ones other size " + w);
        EXPECT_TRUE(at::equal(as_dtensor(q).to_local(), at::ones({2, 2}, at::kFloat))) << w;
        EXPECT_EQ(x.new_empty({0, 3}).sizes(), (std::vector<int64_t>{0, 3}));
      }
    });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    // RaggedShard: the global size keeps the ragged layout (local: the rank's flat interval).
    const at::Tensor rs = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    const at::Tensor z = rs.new_full({6, 4}, 3.0);
    EXPECT_EQ(as_dtensor(z).layout(), as_dtensor(rs).layout());
    expect_close(full(z), at::full({6, 4}, 3.0, at::kDouble), "ragged new_full");
    EXPECT_EQ(pl(rs.new_zeros({2})), pl({Replicate()}));
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({5, 7}), mesh, {Shard(1), Partial("avg")}).as_tensor();
    const at::Tensor z = x.new_zeros({5, 7});
    EXPECT_EQ(pl(z), pl({Shard(1), Replicate()}));
    expect_close(full(z), at::zeros({5, 7}, at::kDouble), "2x2 new_zeros");
    EXPECT_EQ(as_dtensor(z).to_local().sizes(), as_dtensor(x).to_local().sizes());
  });
}

TEST(DTensorFactories, OtherDevicesAreRefused) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor x = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    // The random factories (random_kernels.h; their values: random_test.cc) refuse another
    // device, with nothing drawn.
    const RngState before = rng_state(mesh);
    for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"aten::rand_like", [&] { (void)at::rand_like(x, at::TensorOptions().device(at::kCUDA, 0)); }},
             {"aten::randn_like", [&] { (void)at::randn_like(x, at::TensorOptions().device(at::kCUDA, 0)); }},
             {"aten::randint_like", [&] { (void)at::randint_like(x, 5, at::TensorOptions().device(at::kCUDA, 0)); }}}) {
      const std::string m = error_of<NotImplementedError>(f);
      EXPECT_NE(m.find(op + "(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): moving a DTensor "
                       "from device cpu to device cuda:0 is not implemented"), std::string::npos) << m;
    }
    EXPECT_EQ(rng_state(mesh), before);
    std::string m = error_of<NotImplementedError>(
        [&] { (void)x.new_zeros({4, 6}, at::TensorOptions().device(at::kCUDA, 0)); });
    EXPECT_NE(m.find("aten::new_zeros(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): moving a "
                     "DTensor from device cpu to device cuda:0 is not implemented"),
              std::string::npos) << m;
    // The *_like factories (the fallback's kLike rule) refuse another device too.
    for (const auto& [op, f] : std::vector<std::pair<std::string, std::function<void()>>>{
             {"aten::zeros_like", [&] { (void)at::zeros_like(x, at::TensorOptions().device(at::kCUDA, 0)); }},
             {"aten::ones_like", [&] { (void)at::ones_like(x, at::TensorOptions().device(at::kCUDA, 0)); }},
             {"aten::empty_like", [&] { (void)at::empty_like(x, at::TensorOptions().device(at::kCUDA, 0)); }},
             {"aten::full_like", [&] { (void)at::full_like(x, 2.0, at::TensorOptions().device(at::kCUDA, 0)); }}}) {
      m = error_of<NotImplementedError>(f);
      EXPECT_NE(m.find(op + "(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): moving a DTensor from "
                       "device cpu to device cuda:0 is not implemented"), std::string::npos) << m;
    }
    EXPECT_EQ(pl(at::zeros_like(x, at::TensorOptions().device(at::kCPU))), pl({Shard(0)}));
    EXPECT_EQ(pl(at::ones_like(x, at::TensorOptions().device(at::Device("cpu:0")))), pl({Shard(0)}));
    EXPECT_EQ(pl(x.new_zeros({4, 6}, at::TensorOptions().device(at::Device("cpu:0")))), pl({Shard(0)}));
    EXPECT_EQ(pl(x.to(at::Device("cpu:0"), at::kFloat)), pl({Shard(0)}));  // "cpu:0" is "cpu"
    m = error_of<NotImplementedError>(
        [&] { (void)x.new_full({2}, 1.0, at::TensorOptions().layout(at::kSparse)); });
    EXPECT_NE(m.find("aten::new_full(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): layout Sparse "
                     "is not implemented for a DTensor (strided only)"), std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
