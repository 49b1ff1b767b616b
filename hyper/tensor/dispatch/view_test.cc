// View ops on DTensor tensors (view_rules.h): the rule's layouts on the global shape (torch-free
// cases with hand-worked chunks), then at:: view ops on DTensor tensors against the same op on
// the full tensor (the oracle) for Replicate / Shard / uneven Shard / Partial on 2 and 4 ranks
// and a 2x2 mesh, the result layouts, gradients through a small program of views against the
// single-device gradients, and the refused cases.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <c10/core/AutogradState.h>
#include <c10/core/InferenceMode.h>
#include <torch/autograd.h>

#include <chrono>
#include <cstdio>
#include <cstdint>
#include <functional>
#include <tuple>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dispatch/view_rules.h"
#include "hyper/tensor/copied_view.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::global_a;
using dispatch_testing::make;
using dispatch_testing::full;
using dispatch_testing::expect_close;
using dispatch_testing::error_of;
using dispatch::ArgLayout;

/// `f` reads or writes a copied view whose base was written since the view was taken: it must
/// be refused (NotImplementedError saying the copy is stale), before it computes anything.
void expect_stale(const std::function<void()>& f, const std::string& context = "") {
  const std::string m = error_of<NotImplementedError>(f);
  EXPECT_NE(m.find("its base was written since the view was taken, so the copy is stale"),
            std::string::npos) << context << (context.empty() ? "" : ": ") << m;
}

// ---- torch-free rule cases -------------------------------------------------------------

Layout lay(const std::string& text) { return Layout::from_string(text); }

/// "input target -> output" of a view of `in_text` to `size`.
std::string view_of(const std::string& in_text, const std::vector<int64_t>& size) {
  const auto p = dispatch::propagate_view_groups("aten::view", ArgLayout::of(lay(in_text)), size);
  return p.inputs[0]->to_string() + " -> " + p.output.to_string();
}

TEST(ViewRule, EvenShardOfTheOutermostDimOfAGroupIsKept) {
  // [4,6] S(0) on 2: merge -> [24] S(0) (rows 0-1 = elements 0-11 on rank 0).
  EXPECT_EQ(view_of("mesh=[2] placements=[S(0)] shape=[4,6]", {24}),
            "mesh=[2] placements=[S(0)] shape=[4,6] -> mesh=[2] placements=[S(0)] shape=[24]");
  // Split: [24] S(0) on 4 -> [4,6]: 6 elements each = one row each.
  EXPECT_EQ(view_of("mesh=[4] placements=[S(0)] shape=[24]", {4, -1}),
            "mesh=[4] placements=[S(0)] shape=[24] -> mesh=[4] placements=[S(0)] shape=[4,6]");
  // Regroup [6,4] -> [4,6] on 2: 12 elements each side.
  EXPECT_EQ(view_of("mesh=[2] placements=[S(0)] shape=[6,4]", {4, 6}),
            "mesh=[2] placements=[S(0)] shape=[6,4] -> mesh=[2] placements=[S(0)] shape=[4,6]");
  // Shard of a later group renumbered: [3,4,6] S(1) -> [3,4,2,3] S(1); S(2) -> [12,6] S(1).
  EXPECT_EQ(view_of("mesh=[2] placements=[S(1)] shape=[3,4,6]", {3, 4, 2, 3}),
            "mesh=[2] placements=[S(1)] shape=[3,4,6] -> mesh=[2] placements=[S(1)] "
            "shape=[3,4,2,3]");
  EXPECT_EQ(view_of("mesh=[2] placements=[S(2)] shape=[3,4,6]", {12, 6}),
            "mesh=[2] placements=[S(2)] shape=[3,4,6] -> mesh=[2] placements=[S(1)] shape=[12,6]");
  // Partial and Replicate pass through; a 2x2 mesh keeps both shards.
  EXPECT_EQ(view_of("mesh=[2,2] placements=[P(sum),S(1)] shape=[3,4,6]", {12, 6}),
            "mesh=[2,2] placements=[P(sum),R] shape=[3,4,6] -> mesh=[2,2] placements=[P(sum),R] "
            "shape=[12,6]");
  EXPECT_EQ(view_of("mesh=[2,2] placements=[S(0),S(2)] shape=[4,3,6]", {12, 2, 3}),
            "mesh=[2,2] placements=[S(0),S(2)] shape=[4,3,6] -> mesh=[2,2] "
            "placements=[S(0),S(1)] shape=[12,2,3]");
  // Nested S(0),S(0) on 2x2: [8,3] -> [24], 6 elements per rank in order.
  EXPECT_EQ(view_of("mesh=[2,2] placements=[S(0),S(0)] shape=[8,3]", {24}),
            "mesh=[2,2] placements=[S(0),S(0)] shape=[8,3] -> mesh=[2,2] "
            "placements=[S(0),S(0)] shape=[24]");
}

TEST(ViewRule, InnerDimsOfAMergeAndInexactUnevenShardsAreReplicatedFirst) {
  // Inner dim of a merge: [4,6] S(1) -> [24]: rank 0's columns are not a contiguous range.
  EXPECT_EQ(view_of("mesh=[2] placements=[S(1)] shape=[4,6]", {24}),
            "mesh=[2] placements=[R] shape=[4,6] -> mesh=[2] placements=[R] shape=[24]");
  // Uneven: [5,6] S(0) on 2 holds rows 3+2 = 18+12 elements; [30] S(0) would be 15+15.
  EXPECT_EQ(view_of("mesh=[2] placements=[S(0)] shape=[5,6]", {30}),
            "mesh=[2] placements=[R] shape=[5,6] -> mesh=[2] placements=[R] shape=[30]");
  // Uneven but exact: the sharded dim's group is unchanged ([5] -> [5]).
  EXPECT_EQ(view_of("mesh=[2] placements=[S(0)] shape=[5,6]", {5, 2, 3}),
            "mesh=[2] placements=[S(0)] shape=[5,6] -> mesh=[2] placements=[S(0)] shape=[5,2,3]");
  // Uneven split that is exact: [10] on 4 is 3,3,3,1 elements; [5,2] S(0) would be 2,2,1,0 rows.
  EXPECT_EQ(view_of("mesh=[4] placements=[S(0)] shape=[10]", {5, 2}),
            "mesh=[4] placements=[R] shape=[10] -> mesh=[4] placements=[R] shape=[5,2]");
  // [12] on 4 -> [6,2]: 3 elements each, not whole rows of 2.
  EXPECT_EQ(view_of("mesh=[4] placements=[S(0)] shape=[12]", {6, 2}),
            "mesh=[4] placements=[R] shape=[12] -> mesh=[4] placements=[R] shape=[6,2]");
  // A sharded size-1 dim (removed by the view) and an empty tensor: Replicate.
  EXPECT_EQ(view_of("mesh=[2] placements=[S(1)] shape=[5,1,6]", {5, 6}),
            "mesh=[2] placements=[R] shape=[5,1,6] -> mesh=[2] placements=[R] shape=[5,6]");
  EXPECT_EQ(view_of("mesh=[2] placements=[S(0)] shape=[4,0]", {0, 4}),
            "mesh=[2] placements=[R] shape=[4,0] -> mesh=[2] placements=[R] shape=[0,4]");
  // 2x2 with the second shard inner in the group: only the first is kept.
  EXPECT_EQ(view_of("mesh=[2,2] placements=[S(0),S(1)] shape=[4,6]", {24}),
            "mesh=[2,2] placements=[S(0),R] shape=[4,6] -> mesh=[2,2] placements=[S(0),R] "
            "shape=[24]");
}

TEST(ViewRule, PermuteSqueezeUnsqueezeSliceSelectLayouts) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2,2] placements=[S(0),S(2)] shape=[5,1,6]"));
  EXPECT_EQ(dispatch::propagate_permute("aten::permute", a, {2, 0, 1}).output.to_string(),
            "mesh=[2,2] placements=[S(1),S(0)] shape=[6,5,1]");
  EXPECT_EQ(dispatch::propagate_unsqueeze("aten::unsqueeze", a, -1).output.to_string(),
            "mesh=[2,2] placements=[S(0),S(2)] shape=[5,1,6,1]");
  EXPECT_EQ(dispatch::propagate_unsqueeze("aten::unsqueeze", a, 1).output.to_string(),
            "mesh=[2,2] placements=[S(0),S(3)] shape=[5,1,1,6]");
  std::vector<int64_t> sq;
  EXPECT_EQ(dispatch::propagate_squeeze("aten::squeeze.dims", a, std::vector<int64_t>{0, 1}, &sq)
                .output.to_string(),
            "mesh=[2,2] placements=[S(0),S(1)] shape=[5,6]");
  EXPECT_EQ(sq, (std::vector<int64_t>{1}));  // dim 0 (size 5) is left, as PyTorch does
  const auto s = dispatch::propagate_slice("aten::slice.Tensor", a, 2, 1, -1, 2);
  EXPECT_EQ(s.inputs[0]->to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1,6]");
  EXPECT_EQ(s.output.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1,2]");
  // A step near INT64_MAX: one element, no overflow (hi - lo + step - 1 would overflow).
  EXPECT_EQ(dispatch::propagate_slice("aten::slice.Tensor", a, 2, 1, 6, INT64_MAX)
                .output.to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[5,1,1]");
  EXPECT_EQ(dispatch::propagate_slice("aten::slice.Tensor", a, 0, std::nullopt, 100, 1)
                .output.to_string(),
            "mesh=[2,2] placements=[R,S(2)] shape=[5,1,6]");
  const auto t = dispatch::propagate_select("aten::select.int", a, 1, 0);
  EXPECT_EQ(t.output.to_string(), "mesh=[2,2] placements=[S(0),S(1)] shape=[5,6]");
  EXPECT_EQ(dispatch::propagate_select("aten::select.int", a, 0, -1).output.to_string(),
            "mesh=[2,2] placements=[R,S(1)] shape=[1,6]");
}

// diagonal keeps the Shards of the other dims (renumbered) and gathers a sharded dim1 / dim2;
// its gradient puts them back; diag_embed gathers self's last dim (the diagonal).
TEST(ViewRule, DiagonalAndDiagEmbedLayouts) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2,2] placements=[S(0),S(2)] shape=[5,1,6]"));
  auto d = dispatch::propagate_diagonal("aten::diagonal", a, 0, 1, 2);
  EXPECT_EQ(d.inputs[0]->to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1,6]");
  EXPECT_EQ(d.output.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1]");
  d = dispatch::propagate_diagonal("aten::diagonal", a, -1, 2, 0);  // rows: dim 2, columns: dim 0
  EXPECT_EQ(d.inputs[0]->to_string(), "mesh=[2,2] placements=[R,R] shape=[5,1,6]");
  EXPECT_EQ(d.output.to_string(), "mesh=[2,2] placements=[R,R] shape=[1,5]");
  EXPECT_EQ(dispatch::propagate_diagonal("aten::diagonal", a, 3, -2, -1).output.shape(),
            (Shape{5, 1}));  // sizes 1 x 6 at offset 3: one element
  EXPECT_EQ(dispatch::propagate_diagonal("aten::diagonal", a, -1, 1, 2).output.shape(),
            (Shape{5, 0}));  // past the edge: empty
  EXPECT_EQ(dispatch::propagate_diagonal("aten::diagonal", a, 9, 1, 2).output.shape(),
            (Shape{5, 0}));
  const ArgLayout pp = ArgLayout::of(lay("mesh=[2] placements=[P(sum)] shape=[4,6]"));
  EXPECT_EQ(dispatch::propagate_diagonal("aten::diagonal", pp, 1, 0, 1).output.to_string(),
            "mesh=[2] placements=[P(sum)] shape=[4]");
  // The gradient: [5,1] S(0) back to [5,1,6]; a Shard of the diagonal made Replicate first.
  const ArgLayout g = ArgLayout::of(lay("mesh=[2,2] placements=[S(0),S(1)] shape=[5,1]"));
  const auto b = dispatch::propagate_diagonal_backward("aten::diagonal_backward", g, {5, 1, 6}, 0,
                                                       1, 2);
  EXPECT_EQ(b.inputs[0]->to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1]");
  EXPECT_EQ(b.output.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,1,6]");
  const ArgLayout g2 = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[6,4]"));
  EXPECT_EQ(dispatch::propagate_diagonal_backward("aten::diagonal_backward", g2, {4, 6, 5}, 0, 0, 2)
                .output.to_string(),
            "mesh=[2] placements=[S(1)] shape=[4,6,5]");
  // diag_embed: [5,6] -> [7,5,7] at offset 1 with dims 0 and 2; self's dim 0 becomes dim 1.
  const ArgLayout e = ArgLayout::of(lay("mesh=[2,2] placements=[S(0),S(1)] shape=[5,6]"));
  const auto m = dispatch::propagate_diag_embed("aten::diag_embed", e, 1, 0, 2);
  EXPECT_EQ(m.inputs[0]->to_string(), "mesh=[2,2] placements=[S(0),R] shape=[5,6]");
  EXPECT_EQ(m.output.to_string(), "mesh=[2,2] placements=[S(1),R] shape=[7,5,7]");
  EXPECT_EQ(dispatch::propagate_diag_embed("aten::diag_embed", e, -2, -2, -1).output.to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[5,8,8]");
  // Through propagate_view_op, with diagonal_backward's local shape rewrite.
  dispatch::ViewRewrite rw;
  EXPECT_EQ(dispatch::propagate_view_op("aten::diagonal_backward", g, {{{5, 1, 6}}, {{0}}, {{1}},
                                                                       {{2}}}, &rw)
                .output.to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[5,1,6]");
  EXPECT_EQ(rw.local_shape_arg, 1);
  EXPECT_EQ(dispatch::propagate_view_op("aten::diag_embed", e, {{{0}}, {{-2}}, {{-1}}})
                .output.to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[5,6,6]");
  // Errors name the op, the layout and the values.
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ValueError& e) {
      return e.what();
    }
    return "<no ValueError>";
  };
  std::string v = msg([&] { dispatch::propagate_diagonal("aten::diagonal", a, 0, 1, -2); });
  EXPECT_NE(v.find("aten::diagonal(arg 0: mesh=[2,2] placements=[S(0),S(2)] shape=[5,1,6]) "
                   "offset 0 dim1 1 dim2 -2: diagonal dimensions cannot be identical 1, -2"),
            std::string::npos) << v;
  v = msg([&] { dispatch::propagate_diagonal("aten::diagonal", a, 0, 0, 3); });
  EXPECT_NE(v.find("dim 3 out of range [-3, 2] for a tensor of 3 dims"), std::string::npos) << v;
  const ArgLayout vec = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[6]"));
  v = msg([&] { dispatch::propagate_diagonal("aten::diagonal", vec, 0, 0, 1); });
  EXPECT_NE(v.find("diagonal of a tensor of 1 dims (expects >= 2)"), std::string::npos) << v;
  const ArgLayout scalar = ArgLayout::of(lay("mesh=[2] placements=[R] shape=[]"));
  v = msg([&] { dispatch::propagate_diag_embed("aten::diag_embed", scalar, 0, 0, 1); });
  EXPECT_NE(v.find("aten::diag_embed(arg 0: mesh=[2] placements=[R] shape=[]) offset 0 dim1 0 "
                   "dim2 1: diag_embed of a 0-dim tensor"),
            std::string::npos) << v;
  v = msg([&] { dispatch::propagate_diag_embed("aten::diag_embed", vec, 0, 1, -1); });
  EXPECT_NE(v.find("diagonal dimensions cannot be identical 1, -1"), std::string::npos) << v;
  v = msg([&] {
    dispatch::propagate_diagonal_backward("aten::diagonal_backward", g, {5, 2, 6}, 0, 1, 2);
  });
  EXPECT_NE(v.find("input_sizes [5,2,6]: the gradient's shape [5,1] is not the diagonal's [5,2]"),
            std::string::npos) << v;
}

TEST(ViewRule, BadArgumentsAndRefusalsNameTheOpAndLayout) {
  const ArgLayout a = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[4,6]"));
  auto msg = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "<no error>";
  };
  EXPECT_THROW(dispatch::propagate_view_groups("aten::view", a, {25}), ValueError);
  EXPECT_THROW(dispatch::propagate_view_groups("aten::view", a, {-1, -1}), ValueError);
  EXPECT_THROW(dispatch::propagate_permute("aten::permute", a, {0, 0}), ValueError);
  EXPECT_THROW(dispatch::propagate_permute("aten::permute", a, {0}), ValueError);
  EXPECT_THROW(dispatch::propagate_unsqueeze("aten::unsqueeze", a, 3), ValueError);
  EXPECT_THROW(dispatch::propagate_slice("aten::slice.Tensor", a, 0, 0, 2, 0), ValueError);
  EXPECT_THROW(dispatch::propagate_select("aten::select.int", a, 1, 6), ValueError);
  // Each ValueError names the op, the layout and the bad value.
  std::string v = msg([&] { dispatch::propagate_view_groups("aten::view", a, {-1, 0}); });
  EXPECT_NE(v.find("aten::view(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) to size [-1,0]: "
                   "-1 is ambiguous with a size-0 dim"), std::string::npos) << v;
  v = msg([&] { dispatch::propagate_view_groups("aten::view", a, {-2, -12}); });
  EXPECT_NE(v.find("to size [-2,-12]: negative size -2"), std::string::npos) << v;
  v = msg([&] { dispatch::propagate_view_groups("aten::view", a, {25}); });
  EXPECT_NE(v.find("to size [25]: 25 elements, the tensor has 24"), std::string::npos) << v;
  v = msg([&] { dispatch::propagate_unsqueeze("aten::unsqueeze", a, -4); });
  EXPECT_NE(v.find("aten::unsqueeze(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim -4: dim -4 "
                   "out of range [-3, 2] for a tensor of 2 dims"), std::string::npos) << v;
  v = msg([&] { dispatch::propagate_select("aten::select.int", a, 1, -7); });
  EXPECT_NE(v.find("dim 1 index -7: index out of range for size 6"), std::string::npos) << v;
  const ArgLayout scalar = ArgLayout::of(lay("mesh=[2] placements=[R] shape=[]"));
  EXPECT_THROW(dispatch::propagate_slice("aten::slice.Tensor", scalar, 0, 0, 1, 1), ValueError);
  EXPECT_THROW(dispatch::propagate_select("aten::select.int", scalar, 0, 0), ValueError);
  const ArgLayout three = ArgLayout::of(lay("mesh=[2] placements=[S(0)] shape=[2,3,4]"));
  v = msg([&] { dispatch::propagate_view_op("aten::t", three, {}); });
  EXPECT_NE(v.find("aten::t(arg 0: mesh=[2] placements=[S(0)] shape=[2,3,4]): t() of a tensor of "
                   "3 dims (expects <= 2)"), std::string::npos) << v;
  EXPECT_THROW(dispatch::propagate_view_op("aten::sin", a, {}), InternalError);
  EXPECT_THROW(dispatch::propagate_view_op("aten::unsqueeze", a, {std::nullopt}), InternalError);
  EXPECT_THROW(dispatch::propagate_view_backward("aten::select_backward", a, {4, 6}, 0, true),
               ValueError);  // the gradient of a select has one dim less
  EXPECT_THROW(dispatch::propagate_view_backward("aten::slice_backward", scalar, {}, 0, false),
               ValueError);
  // t() of 0 and 1 dims is the identity.
  EXPECT_EQ(dispatch::propagate_view_op("aten::t", ArgLayout::of(lay("mesh=[2] placements=[S(0)] "
                                                                     "shape=[5]")), {})
                .output.to_string(),
            "mesh=[2] placements=[S(0)] shape=[5]");
  const ArgLayout one = ArgLayout::of(lay("mesh=[2] placements=[S(1)] shape=[4,1]"));
  std::string m = msg([&] {
    dispatch::propagate_squeeze("aten::squeeze.dims", one, std::nullopt, nullptr);
  });
  EXPECT_NE(m.find("aten::squeeze.dims(arg 0: mesh=[2] placements=[S(1)] shape=[4,1]): squeeze "
                   "of the sharded size-1 dim 1 is not implemented"),
            std::string::npos) << m;
  const ArgLayout rs = ArgLayout::of(lay("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]"));
  m = msg([&] { dispatch::propagate_permute("aten::permute", rs, {1, 0}); });
  EXPECT_NE(m.find("aten::permute(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]): "
                   "view ops of a RaggedShard DTensor are not implemented (fail-closed)"),
            std::string::npos) << m;
}

// ---- at:: view ops on DTensor tensors ---------------------------------------------------





using Op = std::function<at::Tensor(const at::Tensor&)>;

/// View ops of a [4,6] / [5,6] tensor (each also followed by `* 2`, an op that reads the local
/// tensor of the view, and `contiguous()`).
std::vector<std::pair<std::string, Op>> view_ops() {
  return {
      {"view [24]", [](const at::Tensor& x) { return x.view({-1}); }},
      {"_unsafe_view [2,r*3]", [](const at::Tensor& x) { return at::_unsafe_view(x, {2, -1}); }},
      {"view [r,2,3]", [](const at::Tensor& x) { return x.view({x.size(0), 2, 3}); }},
      {"view [1,r,6,1]", [](const at::Tensor& x) { return x.view({1, x.size(0), 6, 1}); }},
      {"reshape [6,r]", [](const at::Tensor& x) { return x.reshape({6, -1}); }},
      {"reshape [r*3,2]", [](const at::Tensor& x) { return x.reshape({-1, 2}); }},
      {"flatten", [](const at::Tensor& x) { return x.flatten(); }},
      {"unflatten 1", [](const at::Tensor& x) { return x.unflatten(1, {3, 2}); }},
      {"transpose", [](const at::Tensor& x) { return x.transpose(0, 1); }},
      {"t", [](const at::Tensor& x) { return x.t(); }},
      {"permute", [](const at::Tensor& x) { return x.unsqueeze(0).permute({2, 0, 1}); }},
      {"transpose reshape", [](const at::Tensor& x) { return x.transpose(0, 1).reshape({-1}); }},
      {"transpose contiguous view",
       [](const at::Tensor& x) { return x.t().contiguous().view({3, -1}); }},
      {"unsqueeze 1", [](const at::Tensor& x) { return x.unsqueeze(1); }},
      {"unsqueeze -1", [](const at::Tensor& x) { return x.unsqueeze(-1); }},
      {"squeeze", [](const at::Tensor& x) { return x.unsqueeze(0).unsqueeze(2).squeeze(); }},
      {"squeeze dim", [](const at::Tensor& x) { return x.unsqueeze(1).squeeze(1); }},
      {"squeeze non-1 dim", [](const at::Tensor& x) { return x.squeeze(0); }},
      {"squeeze dims", [](const at::Tensor& x) { return x.unsqueeze(0).squeeze({0, 1}); }},
      {"slice dim 1", [](const at::Tensor& x) { return x.slice(1, 1, 5, 2); }},
      {"slice dim 0", [](const at::Tensor& x) { return x.slice(0, 1); }},
      {"narrow", [](const at::Tensor& x) { return x.narrow(1, 2, 3); }},
      {"index [:, 1:]", [](const at::Tensor& x) {
         return x.index({at::indexing::Slice(), at::indexing::Slice(1, at::indexing::None)});
       }},
      {"select dim 1", [](const at::Tensor& x) { return x.select(1, -2); }},
      {"select dim 0", [](const at::Tensor& x) { return x.select(0, 1); }},
      {"diagonal", [](const at::Tensor& x) { return x.diagonal(); }},
      {"diagonal offset 2", [](const at::Tensor& x) { return x.diagonal(2); }},
      {"diagonal offset -3 of the transpose",
       [](const at::Tensor& x) { return x.diagonal(-3, 1, 0); }},
      {"diagonal of dims 1, 2 of [r,3,2]",
       [](const at::Tensor& x) { return x.unflatten(1, {3, 2}).diagonal(1, 2, 1); }},
      {"diag of the matrix", [](const at::Tensor& x) { return at::diag(x, -1); }},
      {"diag of a row", [](const at::Tensor& x) { return at::diag(x.select(0, 1), 1); }},
      {"diag_embed", [](const at::Tensor& x) { return at::diag_embed(x); }},
      {"diag_embed dims 0, 2", [](const at::Tensor& x) { return at::diag_embed(x, -1, 0, 2); }},
      {"contiguous", [](const at::Tensor& x) { return x.contiguous(); }},
      {"clone", [](const at::Tensor& x) { return x.clone(); }},
  };
}

void view_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat,
                const std::vector<int64_t>& shape) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a(shape);
    for (const auto& p : cat)
      for (const auto& [name, f] : view_ops()) {
        const std::string what = name + " " + to_string(p);
        const at::Tensor a = make(A, mesh, p).as_tensor();
        const at::Tensor y = f(a), want = f(A);
        ASSERT_TRUE(is_dtensor(y)) << what;
        EXPECT_EQ(y.sizes(), want.sizes()) << what;
        expect_close(full(y), want, what);
        expect_close(full(y * 2 + 1), want * 2 + 1, what + " then *2+1");
      }
  });
}

TEST(DTensorViews, ValuesOn2RanksEven) {
  view_cases({2}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}}, {4, 6});
}
TEST(DTensorViews, ValuesOn4RanksUneven) {
  view_cases({4}, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}}, {5, 6});
}
TEST(DTensorViews, ValuesOn2x2Mesh) {
  view_cases({2, 2},
             {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Shard(0), Shard(0)},
              {Partial(), Shard(1)}, {Replicate(), Partial()}},
             {4, 6});
}

TEST(DTensorViews, ResultLayoutsTrackTheShardDim) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6});
    const at::Tensor s0 = make(A, mesh, {Shard(0)}).as_tensor();
    const at::Tensor s1 = make(A, mesh, {Shard(1)}).as_tensor();
    const at::Tensor pp = make(A, mesh, {Partial()}).as_tensor();
    auto pl = [](const at::Tensor& t) { return to_string(as_dtensor(t).placements()); };
    EXPECT_EQ(pl(s0.transpose(0, 1)), to_string(Placements{Shard(1)}));
    EXPECT_EQ(pl(s1.t()), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(s0.flatten()), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(s1.flatten()), to_string(Placements{Replicate()}));  // inner dim of a merge
    EXPECT_EQ(pl(s1.unflatten(1, {2, 3})), to_string(Placements{Shard(1)}));
    EXPECT_EQ(pl(s1.unflatten(1, {3, 2})), to_string(Placements{Replicate()}));  // 3 cols vs 2x2
    EXPECT_EQ(pl(s1.unsqueeze(0)), to_string(Placements{Shard(2)}));
    EXPECT_EQ(pl(s1.select(0, 1)), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(s0.select(0, 1)), to_string(Placements{Replicate()}));
    EXPECT_EQ(pl(s0.slice(1, 2)), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(pp.view({2, 12})), to_string(Placements{Partial()}));
    EXPECT_EQ(pl(pp.t()), to_string(Placements{Partial()}));
    EXPECT_EQ(pl(s0.contiguous()), to_string(Placements{Shard(0)}));
    // diagonal: the Shards of the other dims kept, a sharded dim1 / dim2 gathered.
    EXPECT_EQ(pl(s0.unsqueeze(2).diagonal(0, 1, 2)), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(s0.diagonal()), to_string(Placements{Replicate()}));
    EXPECT_EQ(pl(pp.diagonal(1)), to_string(Placements{Partial()}));
    EXPECT_EQ(pl(at::diag_embed(s0)), to_string(Placements{Shard(0)}));
    EXPECT_EQ(pl(at::diag_embed(s1)), to_string(Placements{Replicate()}));
    EXPECT_EQ(as_dtensor(s0.unsqueeze(2).diagonal(0, 1, 2)).to_local().data_ptr(),
              as_dtensor(s0).to_local().data_ptr());  // exact: a view of the local
    // An exact view aliases the local tensor (no copy).
    EXPECT_EQ(as_dtensor(s0.view({2, 12})).to_local().data_ptr(),
              as_dtensor(s0).to_local().data_ptr());
    EXPECT_EQ(as_dtensor(s0.t()).to_local().data_ptr(), as_dtensor(s0).to_local().data_ptr());
    // The local shape is the output layout's: [2,6] rows -> [12] per rank.
    EXPECT_EQ(as_dtensor(s0.flatten()).to_local().sizes(), (std::vector<int64_t>{12}));
  });
}

void gradient_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& xs,
                    const std::vector<Placements>& ws) {
    run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
      const at::Tensor X = global_a({4, 6}), W = global_a({1, 6, 4}).cos();
      auto program = [](const at::Tensor& x, const at::Tensor& w) {
        const at::Tensor y = x.transpose(0, 1).reshape({6, 2, 2}).flatten(1).unsqueeze(0) +
                             x.reshape({24}).view({6, 4}).unsqueeze(0);
        return (y * w).squeeze(0).select(1, 1).sum() + (x.unsqueeze(2) * 3).sum() +
               (x.narrow(1, 1, 3) * x.narrow(1, 2, 3)).sum() + x.t().select(0, 2).sum() +
               x.diagonal(1).pow(2).sum() + at::diag_embed(x.select(0, 1), -1).pow(2).sum() +
               (at::diag(x).narrow(0, 0, 3) *
                x.unflatten(1, {3, 2}).diagonal(0, 0, 1).sum(0)).sum();
      };
      const at::Tensor Xg = X.clone().requires_grad_(), Wg = W.clone().requires_grad_();
      program(Xg, Wg).backward();
      for (const Placements& px : xs)
        for (const Placements& pw : ws) {
          const std::string what = to_string(px) + " " + to_string(pw);
          at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
          at::Tensor w = make(W, mesh, pw).as_tensor().requires_grad_();
          const at::Tensor loss = program(x, w);
          expect_close(full(loss), program(X, W), "loss " + what);
          loss.backward();
          ASSERT_TRUE(x.grad().defined()) << what;
          expect_close(full(x.grad()), Xg.grad(), "grad x " + what);
          expect_close(full(w.grad()), Wg.grad(), "grad w " + what);
          // A second backward accumulates into the gradients in place (the gradients of
          // copying views must still accept it).
          program(x, w).backward();
          expect_close(full(x.grad()), Xg.grad() * 2, "accumulated grad x " + what);
          expect_close(full(w.grad()), Wg.grad() * 2, "accumulated grad w " + what);
        }
    });
}

// Per-op cost of a view on a small tensor (a report, not a limit: docs/dtensor.md quotes it).
// Whether a view copies its local must be the same on every rank (a rank-dependent refusal of
// a later in-place op would leave the other ranks in its collectives). [3,2,5] S(2) on 4 ranks
// holds 2,2,1,0 columns; permuted to [5,2,3] S(0) and reshaped to [5,6] (exact: the shard's
// group is unchanged), the local [n,2,3] merges dims whose strides involve n, so it cannot be
// viewed for n >= 1 -- but an empty local (n = 0) can.
TEST(DTensorViews, CopyingAViewIsTheSameDecisionOnEveryRank) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({3, 2, 5});
    const at::Tensor x = make(X, mesh, {Shard(2)}).as_tensor();
    at::Tensor z = x.permute({2, 1, 0}).reshape({5, 6});
    EXPECT_EQ(as_dtensor(z).placements()[0], Shard(0));
    expect_close(full(z), X.permute({2, 1, 0}).reshape({5, 6}), "permute reshape");
    const std::string m = error_of<NotImplementedError>([&] { z.add_(1); });
    EXPECT_NE(m.find("in-place op on a view of a DTensor whose local tensor is a copy"),
              std::string::npos) << "rank " << mesh.get_coordinate()[0] << ": " << m;
  });
}

// A view whose local is a copy (slicing a sharded dim replicates first) does not see later
// writes to its base, where plain torch's view would: reading it after such a write is refused
// (NotImplementedError naming the op), on every rank; a view taken after the write, and views
// that alias, read the written values. (Fails before the fix: the stale copy was read silently.)
TEST(DTensorViews, StaleCopiedViewsAreRefusedAfterTheBaseIsWritten) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 8});
    at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    at::Tensor copied = x.narrow(1, 2, 3);        // a sharded dim: replicated, a copy
    at::Tensor copied_view = copied.narrow(0, 1, 2);  // a view of the copy: stale with it
    at::Tensor aliasing = x.narrow(0, 1, 2);      // an unsharded dim: aliases x's local
    expect_close(full(copied * 1), X.narrow(1, 2, 3), "copied view before the write");
    x.add_(1);
    for (const at::Tensor* t : {&copied, &copied_view}) {
      const std::string m = error_of<NotImplementedError>([&] { (void)(*t * 2); });
      EXPECT_NE(m.find("aten::mul.Tensor(arg 0: mesh=[2] placements=[R]"), std::string::npos) << m;
      EXPECT_NE(m.find("its base was written since the view was taken, so the copy is stale"),
                std::string::npos) << m;
    }
    expect_close(full(aliasing * 1), X.narrow(0, 1, 2) + 1, "aliasing view sees the write");
    expect_close(full(x.narrow(1, 2, 3) * 1), X.narrow(1, 2, 3) + 1, "view taken after the write");
  });
}

// A write that reaches the base's local through another wrapper, whose version counter is not
// the base's (`x.data()`, as optimizers and clip_grad_norm_ write parameters; an out= op into
// `x.data()`; a plain op on the local itself), makes the copies stale as a write through `x`
// does. The
// copy's own write-back does not make it stale, and one taken after the write reads it.
TEST(DTensorViews, CopiesGoStaleOnWritesThroughAnyWrapperOfTheBase) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 8});
    using Write = std::function<void(at::Tensor&)>;
    // (the write on x; the same write on the full plain tensor)
    const std::vector<std::tuple<std::string, Write, Write>> writes = {
        {"x.data().add_(1)", [](at::Tensor& x) { x.data().add_(1); },
         [](at::Tensor& p) { p.add_(1); }},
        {"x.data().fill_(2)", [](at::Tensor& x) { x.data().fill_(2); },
         [](at::Tensor& p) { p.fill_(2); }},
        {"at::add_out(x.data(), x, x)", [](at::Tensor& x) {
           at::Tensor d = x.data();
           at::add_out(d, x, x);
         },
         [](at::Tensor& p) { p.mul_(2); }},
        {"x.detach().zero_()", [](at::Tensor& x) { x.detach().zero_(); },
         [](at::Tensor& p) { p.zero_(); }},
        {"as_dtensor(x).to_local().add_(1)", [](at::Tensor& x) { as_dtensor(x).to_local().add_(1); },
         [](at::Tensor& p) { p.add_(1); }},
        {"x.data().narrow(0, 1, 2).sub_(1) (an aliasing view of .data())",
         [](at::Tensor& x) { x.data().narrow(0, 1, 2).sub_(1); },
         [](at::Tensor& p) { p.narrow(0, 1, 2).sub_(1); }},
        {"x.expand_as(x).add_(1)", [](at::Tensor& x) { x.expand_as(x).add_(1); },
         [](at::Tensor& p) { p.add_(1); }},
        {"x.data().expand_as(x).add_(1)", [](at::Tensor& x) { x.data().expand_as(x).add_(1); },
         [](at::Tensor& p) { p.add_(1); }},
        {"x.unsafe_chunk(2, 0)[1].fill_(7) (a piece aliasing the local)",
         [](at::Tensor& x) { x.unsafe_chunk(2, 0)[1].fill_(7); },
         [](at::Tensor& p) { p.narrow(0, 2, 2).fill_(7); }},
    };
    for (const auto& [what, write, write_plain] : writes) {
      SCOPED_TRACE(what);
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor want = X.clone();
      at::Tensor written = x.narrow(1, 0, 2);  // a copy written through: current after it
      written.mul_(2);
      want.narrow(1, 0, 2).mul_(2);
      expect_close(full(written * 1), want.narrow(1, 0, 2), "a copy after its own write-back");
      at::Tensor copied = x.narrow(1, 2, 3);  // a sharded dim: a copy
      at::Tensor selected = x.select(1, 5);   // another copy
      expect_close(full(copied * 1), want.narrow(1, 2, 3), "a copy before the write");
      write(x);
      write_plain(want);
      expect_close(full(x * 1), want, "the base after the write");
      for (const at::Tensor* t : {&copied, &selected, &written}) {
        expect_stale([&] { (void)(*t * 2); });
      }
      expect_close(full(x.narrow(1, 2, 3) * 1), want.narrow(1, 2, 3), "a copy taken after the write");
    }
    // A write through a copy's .data() (no bump of x's counter) followed by one that moves x's
    // counter (or x's local's) and is no write-back: the copy is stale.
    for (int variant : {0, 1}) {
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor a = x.narrow(1, 0, 2), b = x.narrow(1, 4, 2);
      a.data().mul_(2);  // a's own write-back; b (other columns) stays current
      b.data().add_(1);
      at::Tensor want = X.clone();
      want.narrow(1, 0, 2).mul_(2);
      want.narrow(1, 4, 2).add_(1);
      expect_close(full(b * 1), want.narrow(1, 4, 2), "b after the writes through .data()");
      if (variant == 0) x.expand_as(x).add_(100);
      else x.data().expand_as(x).add_(100);
      for (const at::Tensor* t : {&a, &b}) {
        expect_stale([&] { (void)(*t * 1); }, "variant " + std::to_string(variant));
      }
      expect_close(full(x), want + 100, "x after the expand's write");
    }
  });
}

// Views of a copied view that ATen makes without a rule's view tracking still write through
// it and go stale with it: an expand, the pieces of unsafe_chunk along an unsharded dim,
// `_unsafe_view`; and masked_fill_ of a Partial copy through `.detach()`.
TEST(DTensorViewsWriteThrough, ExpandsUnsafePiecesAndUnsafeViewsOfCopies) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 8});
    {
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor want = X.clone();
      at::Tensor c = x.narrow(1, 0, 2);
      c.detach().expand_as(c).add_(1);  // writes through c to x
      want.narrow(1, 0, 2).add_(1);
      expect_close(full(x), want, "x after a write through an expand of c.detach()");
      at::Tensor e = c.expand({4, 2});
      expect_close(full(e * 1), want.narrow(1, 0, 2), "the expand before a write of x");
      x.mul_(2);
      expect_stale([&] { (void)(e * 1); });
    }
    {
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor want = X.clone();
      at::Tensor c = x.narrow(1, 2, 4);
      std::vector<at::Tensor> p = c.unsafe_chunk(2, 0);  // rows: alias c's local
      p[0].fill_(7);
      want.narrow(1, 2, 4).narrow(0, 0, 2).fill_(7);
      expect_close(full(x), want, "x after a write through an unsafe piece of c");
      x.mul_(2);
      expect_stale([&] { (void)(p[1] * 1); });
    }
    {
      at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
      at::Tensor a = x.narrow(0, 0, 2);
      at::Tensor y = at::_unsafe_view(x, {32});
      y.add_(1);
      expect_close(full(x), X + 1, "x after a write through its _unsafe_view");
      expect_stale([&] { (void)(a * 1); });
    }
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 3});
    at::Tensor x = make(X, mesh, {Shard(0), Partial()}).as_tensor();
    at::Tensor c = x.narrow(0, 1, 2);  // rows gathered: [R, P], a writable copy
    const at::Tensor M = global_a({2, 3}) > 0.5;
    const at::Tensor m = make(M, mesh, {Replicate(), Replicate()}).as_tensor();
    c.detach().masked_fill_(m, -1.0);
    at::Tensor want = X.clone();
    want.narrow(0, 1, 2).masked_fill_(M, -1.0);
    expect_close(full(x), want, "x after masked_fill_ of a Partial copy through detach()");
    expect_close(full(c * 1), want.narrow(0, 1, 2), "the copy after it");
  });
}

// On a 2x2 mesh a copy of a copy (rows of x, then columns of those) stays current when a
// sibling of its parent writes x's other rows, and writes through afterwards.
TEST(DTensorViewsWriteThrough, ACopyOfACopyStaysCurrentBesideItsParentsSibling) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6});
    at::Tensor x = make(X, mesh, {Shard(0), Shard(1)}).as_tensor();
    at::Tensor want = X.clone();
    at::Tensor top = x.narrow(0, 0, 2), corner = top.narrow(1, 1, 3);
    ASSERT_TRUE(is_copied_view(top) && is_copied_view(corner));
    x.narrow(0, 2, 2).mul_(2);  // the other rows, through another copy
    want.narrow(0, 2, 2).mul_(2);
    expect_close(full(corner * 1), want.narrow(0, 0, 2).narrow(1, 1, 3), "the copy of a copy");
    corner.add_(1);
    want.narrow(0, 0, 2).narrow(1, 1, 3).add_(1);
    expect_close(full(x), want, "x after a write through the copy of a copy");
    x.narrow(0, 1, 2).zero_();  // rows 1-2: top's row 1
    expect_stale([&] { (void)(corner * 1); });
  });
}

// In-place writes through views that slice or select a sharded dim (their local is a gathered
// copy, dtensor_impl.h CopiedView): each rank writes its rows of the copy back into the base
// (no communication), so the base equals the same writes on the full tensor; nested views,
// views of such a copy, and copies of copies (2x2 mesh) included.
using Write = std::function<void(at::Tensor&)>;
std::vector<std::pair<std::string, Write>> slice_writes() {
  using at::indexing::None;
  using at::indexing::Slice;
  return {
      {"narrow(1).fill_", [](at::Tensor& x) { x.narrow(1, 1, 3).fill_(7); }},
      {"x[:, ::2] = 5", [](at::Tensor& x) { x.index_put_({Slice(), Slice(None, None, 2)}, 5.0); }},
      {"x[1:, 1:5:3] += 1",
       [](at::Tensor& x) { x.index({Slice(1, None), Slice(1, 5, 3)}).add_(1); }},
      {"select(0).mul_", [](at::Tensor& x) { x.select(0, 3).mul_(2); }},
      {"select(1, -1).zero_", [](at::Tensor& x) { x.select(1, -1).zero_(); }},
      {"narrow(0).narrow(1).add_", [](at::Tensor& x) { x.narrow(0, 1, 3).narrow(1, 2, 3).add_(1); }},
      {"narrow(1).narrow(0).sub_ (a view of the copy)",
       [](at::Tensor& x) { x.narrow(1, 1, 4).narrow(0, 0, 2).sub_(3); }},
      {"narrow(0).select(1).neg_", [](at::Tensor& x) { x.narrow(0, 1, 3).select(1, 4).neg_(); }},
      {"chunk(2, 0)[1].copy_", [](at::Tensor& x) {
         at::Tensor c = x.chunk(2, 0)[1];
         c.copy_(at::arange(c.numel(), at::kDouble).view(c.sizes()));
       }},
      {"unbind(1)[2].add_(x[:, 0])",  // the value read from x itself
       [](at::Tensor& x) { x.unbind(1)[2].add_(x.select(1, 0)); }},
      {"narrow(1).tril_", [](at::Tensor& x) { x.narrow(1, 0, 5).tril_(); }},
      {"narrow(0).scatter_", [](at::Tensor& x) {
         const at::Tensor i = at::tensor({0, 5, 2, 2, 1, 3}, at::kLong).view({2, 3});
         x.narrow(0, 2, 2).scatter_(1, i, 9.0);
       }},
      {"written twice, then read", [](at::Tensor& x) {
         at::Tensor v = x.narrow(1, 2, 3);
         v.mul_(2);
         v.add_(v.select(1, 0).unsqueeze(1) * 1);  // (ATen refuses a self-overlapping operand)
         x.narrow(0, 0, 2).narrow(1, 0, 3).add_(v.narrow(0, 0, 2));
       }},
  };
}

void write_through_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& ps) {
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6});
    for (const Placements& p : ps)
      for (const auto& [name, f] : slice_writes()) {
        const std::string what = name + " " + to_string(p);
        at::Tensor want = X.clone();
        f(want);
        at::Tensor x = make(X, mesh, p).as_tensor();
        try {
          f(x);
        } catch (const std::exception& e) {
          ADD_FAILURE() << what << ": " << e.what();
          continue;
        }
        EXPECT_EQ(as_dtensor(x).placements(), p) << what;
        expect_close(full(x), want, what);
        expect_close(full(x * 1), want, what + " read by an op");
      }
  });
}

TEST(DTensorViewsWriteThrough, ValuesOn2RanksEven) {
  write_through_cases({2}, {{Shard(0)}, {Shard(1)}, {Replicate()}});
}
TEST(DTensorViewsWriteThrough, ValuesOn4RanksUnevenAndEmpty) {
  write_through_cases({4}, {{Shard(0)}, {Shard(1)}});  // [5,6]: 2,2,1,0 rows / 2,2,2,0 cols
}
TEST(DTensorViewsWriteThrough, ValuesOn2x2MeshCopiesOfCopies) {
  write_through_cases({2, 2}, {{Shard(0), Shard(1)}, {Shard(1), Shard(0)}, {Shard(0), Shard(0)},
                               {Partial(), Shard(1)}, {Shard(1), Partial()}});
}

TEST(DTensorViewsWriteThrough, TheViewStaysCurrentAndSiblingsGoStale) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 8});
    at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    at::Tensor want = X.clone();
    at::Tensor v = x.narrow(1, 2, 4), sibling = x.narrow(1, 0, 3), inner = v.narrow(0, 1, 2);
    at::Tensor apart = x.narrow(1, 6, 2), odd = x.index({at::indexing::Slice(),
                                                          at::indexing::Slice(1, 8, 2)});
    at::Tensor even = x.index({at::indexing::Slice(), at::indexing::Slice(0, 8, 2)});
    comm::reset_stats(mesh);
    v.fill_(1);
    // The write moved no bytes (each rank copies its own columns of the copy).
    EXPECT_EQ(comm::stats(mesh).calls(), 0);
    want.narrow(1, 2, 4).fill_(1);
    expect_close(full(x), want, "base after the write");
    expect_close(full(v * 1), want.narrow(1, 2, 4), "the written view");
    expect_close(full(inner * 1), want.narrow(1, 2, 4).narrow(0, 1, 2), "a view of it");
    inner.add_(2);  // through a view of the copy
    want.narrow(1, 2, 4).narrow(0, 1, 2).add_(2);
    expect_close(full(x), want, "base after a write through a view of the copy");
    expect_close(full(v * 1), want.narrow(1, 2, 4), "the copy after a write through its view");
    // A sibling copy holding some of the written columns is stale; one holding none of them
    // stays current (as a disjoint view of a plain tensor), until a write it cannot account for.
    expect_stale([&] { (void)(sibling * 1); });
    expect_close(full(apart * 1), want.narrow(1, 6, 2), "a sibling of other columns");
    for (const at::Tensor* t : {&odd, &even}) {  // each holds some of columns 2-5
      expect_stale([&] { (void)(*t * 1); });
    }
    {  // interleaved columns of one step are disjoint
      at::Tensor y = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor ys = y.index({at::indexing::Slice(), at::indexing::Slice(1, 8, 2)});
      at::Tensor yo = y.index({at::indexing::Slice(), at::indexing::Slice(0, 8, 2)});
      ys.mul_(-1);
      at::Tensor yw = X.clone();
      yw.index({at::indexing::Slice(), at::indexing::Slice(1, 8, 2)}).mul_(-1);
      expect_close(full(y), yw, "y after writing its odd columns");
      expect_close(full(yo * 1), yw.index({at::indexing::Slice(), at::indexing::Slice(0, 8, 2)}),
                   "its even columns, taken before");
      yo.add_(1);  // and the odd ones stay current in turn
      yw.index({at::indexing::Slice(), at::indexing::Slice(0, 8, 2)}).add_(1);
      expect_close(full(ys * 1), yw.index({at::indexing::Slice(), at::indexing::Slice(1, 8, 2)}),
                   "the odd columns after a write of the even ones");
      expect_close(full(y), yw, "y after both");
    }
    // A write to the base makes the view stale: reading and writing it are refused, nothing
    // written.
    x.mul_(2);
    want.mul_(2);
    for (const Write& f : std::vector<Write>{[](at::Tensor& t) { (void)(t * 1); },
                                             [](at::Tensor& t) { t.fill_(0); }}) {
      expect_stale([&] { f(v); });
    }
    expect_close(full(x), want, "base unchanged by the refused write");
    // Random fills through a copied view draw into the view; the base holds the draw.
    at::Tensor r = make(X, mesh, {Shard(1)}).as_tensor();
    at::Tensor rv = r.narrow(1, 3, 4);
    rv.uniform_(10, 11);
    at::Tensor drawn = full(rv * 1);
    EXPECT_TRUE(drawn.ge(10).all().item<bool>() && drawn.lt(11).all().item<bool>());
    at::Tensor wr = X.clone();
    wr.narrow(1, 3, 4).copy_(drawn);
    expect_close(full(r), wr, "uniform_ through a copied view");
  });
}

// hyper::is_copied_view (copied_view.h): which views' locals are copies; a tensor of its own
// made from one (as_tensor(as_dtensor(v))) is not tied to the base.
TEST(DTensorViewsWriteThrough, IsCopiedViewAndATensorOfItsOwn) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6});
    at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    EXPECT_FALSE(is_copied_view(x));
    EXPECT_FALSE(is_copied_view(X));
    EXPECT_FALSE(is_copied_view(at::Tensor()));
    EXPECT_FALSE(is_copied_view(x.narrow(1, 1, 3)));  // an unsharded dim: aliases the local
    const at::Tensor v = x.narrow(0, 1, 2);           // the sharded dim: gathered
    EXPECT_TRUE(is_copied_view(v));
    EXPECT_TRUE(is_copied_view(v.detach()));
    EXPECT_TRUE(is_copied_view(v.narrow(1, 0, 2)));
    EXPECT_TRUE(is_copied_view(x.unbind(0)[3]));
    at::Tensor own = as_tensor(as_dtensor(v));
    EXPECT_FALSE(is_copied_view(own));
    own.fill_(5);             // nothing written back
    x.mul_(2);                // nothing marks it stale
    expect_close(full(x), X * 2, "the base, untouched by the tensor of its own");
    expect_close(full(own * 1), at::full({2, 6}, 5.0, X.options()), "the tensor of its own");
  });
}

// An out= op with two outs that are views of one base, one or both copies (slices of a sharded
// dim): its ADInplaceOrView kernel bumps the base's counter once per out, and both copies stay
// current; the next write to the base makes them stale.
TEST(DTensorViewsWriteThrough, TwoOutsThatAreViewsOfOneBase) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor Y = global_a({4, 2, 3});
    const at::Tensor y = make(Y, mesh, {Shard(0)}).as_tensor();
    const auto [mn, mx] = at::aminmax(Y, 2);  // [4, 2]: the oracle
    {  // both outs copied: rows 0-1 and 2-3 of x ([4, 2] sharded on dim 0), transposed
      const at::Tensor X = global_a({4, 4});
      at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
      at::Tensor lo = x.narrow(0, 0, 2).t(), hi = x.narrow(0, 2, 2).t();
      ASSERT_TRUE(is_copied_view(lo) && is_copied_view(hi));
      at::aminmax_out(lo, hi, y, 2);
      at::Tensor want = X.clone();
      want.narrow(0, 0, 2).t().copy_(mn);
      want.narrow(0, 2, 2).t().copy_(mx);
      expect_close(full(x), want, "base after aminmax into two copied views");
      expect_close(full(lo * 1), mn, "the min out, current");
      expect_close(full(hi * 1), mx, "the max out, current");
      lo.add_(1);  // still writable: the write reaches the base
      want.narrow(0, 0, 2).t().add_(1);
      expect_close(full(x), want, "base after a write through the min out");
      expect_close(full(lo * 1), mn + 1, "the min out after its write");
      // (rows 2-3: the write of rows 0-1 does not make it stale; one of the base does)
      expect_close(full(hi * 1), mx, "the max out after a write of the min out");
      x.narrow(1, 0, 1).zero_();  // an aliasing view: every copy of x is stale after it
      expect_stale([&] { (void)(hi * 1); });
    }
    {  // one plain view (aliases the local) and one copy of one base [2, 4, 4] sharded on dim
       // 1: the plain write is not in the base's write-back log, so nothing could tell whether
       // it overwrote the copy's indices: refused before anything is written
      const at::Tensor X = global_a({2, 4, 4});
      at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
      at::Tensor plain = x.select(0, 0).narrow(1, 0, 2), copy = x.select(0, 1).narrow(0, 0, 2).t();
      ASSERT_FALSE(is_copied_view(plain));
      ASSERT_TRUE(is_copied_view(copy));
      ASSERT_EQ(copy.sizes(), plain.sizes());
      const std::string e = error_of<NotImplementedError>([&] { at::aminmax_out(plain, copy, y, 2); });
      EXPECT_NE(e.find("out 1 is a view of a DTensor whose local tensor is a copy (a slice of a "
                       "sharded dim) and out 0 a view of the same base that aliases its local"),
                std::string::npos) << e;
      expect_close(full(x), X, "base unchanged by the refused aminmax");
      expect_close(full(copy * 1), X.select(0, 1).narrow(0, 0, 2).t(), "the copy, current");
    }
    {  // two copies of overlapping rows: refused as ATen refuses overlapping outs
      const at::Tensor X = global_a({4, 4});
      at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
      at::Tensor a = x.narrow(0, 1, 2).t(), b = x.narrow(0, 0, 2).t();
      const std::string e = error_of<ValueError>([&] { at::aminmax_out(a, b, y, 2); });
      EXPECT_NE(e.find("outs 0 and 1 are views of overlapping indices of one tensor (dim 0)"),
                std::string::npos) << e;
      expect_close(full(x), X, "base unchanged by the refused aminmax");
    }
  });
}

// unsafe_chunk's pieces are not autograd views (no shared version counter): gathered along the
// sharded dim, each is a tensor of its own; writing it leaves the base (docs/dtensor.md).
// Along an unsharded dim the pieces alias the local, as ATen's do.
TEST(DTensorViewsWriteThrough, UnsafeChunkPiecesOfTheShardedDimAreTensorsOfTheirOwn) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6});
    at::Tensor x = make(X, mesh, {Shard(1)}).as_tensor();
    std::vector<at::Tensor> gates = x.unsafe_chunk(3, 1);  // [4, 2] each, gathered
    EXPECT_FALSE(is_copied_view(gates[0]));
    gates[0].sigmoid_();
    gates[1].mul_(2);  // a sibling: not stale
    expect_close(full(gates[0] * 1), X.narrow(1, 0, 2).sigmoid(), "the written piece");
    expect_close(full(gates[1] * 1), X.narrow(1, 2, 2) * 2, "its sibling, written too");
    expect_close(full(x), X, "the base, unchanged");
    std::vector<at::Tensor> rows = x.unsafe_chunk(2, 0);  // along the unsharded dim: aliases
    rows[1].fill_(7);
    at::Tensor want = X.clone();
    want.narrow(0, 2, 2).fill_(7);
    expect_close(full(x), want, "the base after writing a piece of an unsharded dim");
  });
}

TEST(DTensorViewsWriteThrough, DetachDataInferenceModeAndCorners) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({6, 5});
    auto fresh = [&] { return make(X, mesh, {Shard(0)}).as_tensor(); };
    // detach() of a copied view aliases it: the write reaches x.
    at::Tensor x = fresh(), want = X.clone();
    x.narrow(0, 1, 4).detach().fill_(0);
    want.narrow(0, 1, 4).fill_(0);
    expect_close(full(x), want, "detach().fill_");
    // A huge step selects row `start` only (ATen's own strides limit it to INT64_MAX / stride).
    x.slice(0, 4, std::nullopt, INT64_MAX / 8).fill_(7);
    want.slice(0, 4, std::nullopt, INT64_MAX / 8).fill_(7);
    expect_close(full(x), want, "a huge step");
    // Two writes inside one op (clamp_ with tensor bounds: clamp_min_ then clamp_max_), plain and
    // in inference mode.
    const at::Tensor lo = at::full({5}, 2.0, at::kDouble), hi = at::full({5}, 9.0, at::kDouble);
    x = fresh();
    want = X.clone();
    x.narrow(0, 1, 3).clamp_(lo, hi);
    want.narrow(0, 1, 3).clamp_(lo, hi);
    expect_close(full(x), want, "clamp_ through a copied view");
    at::Tensor v = x.narrow(0, 2, 3);
    {
      c10::InferenceMode guard;
      v.clamp_(lo * 3, hi * 2);
    }
    want.narrow(0, 2, 3).clamp_(lo * 3, hi * 2);
    expect_close(full(x), want, "clamp_ in inference mode");
    expect_close(full(v * 1), want.narrow(0, 2, 3), "the view after it");
    // Inference tensors (a KV cache written at a position of its sharded dim).
    {
      c10::InferenceMode guard;
      at::Tensor cache = make(at::zeros({6, 5}, at::kDouble), mesh, {Shard(0)}).as_tensor();
      at::Tensor plain = at::zeros({6, 5}, at::kDouble);
      for (int64_t pos : {0, 2, 3, 5}) {
        const at::Tensor kv = at::full({1, 5}, double(pos + 1), at::kDouble);
        cache.narrow(0, pos, 1).copy_(kv);
        plain.narrow(0, pos, 1).copy_(kv);
      }
      cache.select(0, 1).fill_(-1);
      plain.select(0, 1).fill_(-1);
      expect_close(full(cache), plain, "inference-mode writes through copied views");
      // A copy that cannot write back is refused there too.
      const std::string m = error_of<NotImplementedError>([&] { cache.t().reshape({30}).fill_(0); });
      EXPECT_NE(m.find("in-place op on a view of a DTensor whose local tensor is a copy"),
                std::string::npos) << m;
      expect_close(full(cache), plain, "cache unchanged by the refused write");
    }
    // .data() of a copied view has its own version counter; an in-place op on it (or on a view
    // of it) writes through to the base as one on the view does (clip_grad_norm_'s
    // `grad.data().mul_()`); it moves the base's local counter, so a sibling copy taken before
    // goes stale, and the written view and its .data() stay current.
    x = fresh();
    want = X.clone();
    at::Tensor rows = x.narrow(0, 1, 4);
    at::Tensor sibling = x.narrow(0, 0, 2);  // holds row 1
    at::Tensor apart = x.select(0, 5);       // holds none of rows 1-4
    rows.data().mul_(2);
    want.narrow(0, 1, 4).mul_(2);
    expect_close(full(x), want, "x after rows.data().mul_(2)");
    expect_close(full(rows * 1), want.narrow(0, 1, 4), "the written view");
    expect_stale([&] { (void)(sibling * 1); });
    expect_close(full(apart * 1), want.select(0, 5), "a sibling of another row, current");
    at::Tensor d = rows.data();
    d.narrow(1, 0, 2).add_(1);  // a view of .data(): writes through too
    want.narrow(0, 1, 4).narrow(1, 0, 2).add_(1);
    expect_close(full(x), want, "x after a write through a view of .data()");
    expect_close(full(d * 1), want.narrow(0, 1, 4), ".data() after its own write");
    expect_close(full(rows * 1), want.narrow(0, 1, 4), "the view after a write through its .data()");
    expect_close(full(apart * 1), want.select(0, 5), "the sibling of another row, still current");
    // Reads are judged on the base's counters: stale after a later write to the base, and a
    // write through a stale .data() is refused before it could write old rows back.
    x.mul_(2);
    want.mul_(2);
    expect_stale([&] { d.narrow(1, 0, 2).mul_(3); });
    expect_stale([&] { (void)(d * 1); });
    expect_stale([&] { d.fill_(0); });
    expect_close(full(x), want, "x unchanged by the refused writes");
    // A copied view keeps only its own rows, not the gathered input.
    const at::Tensor row = x.select(0, 4);
    EXPECT_EQ(static_cast<int64_t>(as_dtensor(row).to_local().storage().nbytes()),
              5 * static_cast<int64_t>(sizeof(double)));
    expect_close(full(row * 1), want.select(0, 4), "a selected row");
  });
}

TEST(DTensorViewsWriteThrough, ARememberedReductionOfTheBaseIsForgotten) {
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6});
    at::Tensor y = make(X, mesh, {Partial(), Shard(1)}).as_tensor();
    expect_close(full(at::relu(y)), at::relu(X), "before (y's P(sum) reduced, remembered)");
    y.narrow(1, 1, 4).fill_(-1);  // a copy along the S(1) mesh dim, P(sum) kept
    at::Tensor want = X.clone();
    want.narrow(1, 1, 4).fill_(-1);
    expect_close(full(y), want, "after the write");
    expect_close(full(at::relu(y)), at::relu(want), "relu of y after the write");
  });
}

// Autograd through in-place ops on views of a tensor that requires grad (CopySlices): the views
// of DTensors record how to replay them (fallback.cc request_view_replay), so autograd never
// calls as_strided on a wrapper; the gradients equal one device's.
TEST(DTensorViewsWriteThrough, GradientsThroughInPlaceOpsOnViewsEqualSingleDevice) {
  auto program = [](const at::Tensor& w, const at::Tensor& u) {
    at::Tensor x = w * 1;
    x.narrow(1, 1, 3).mul_(3);                          // a copy when dim 1 is sharded
    x.select(0, 2).add_(u.select(0, 1));                // a copy when dim 0 is sharded
    x.narrow(0, 1, 2).narrow(1, 0, 4).mul_(u.narrow(0, 1, 2).narrow(1, 2, 4));  // a chain
    x.t().narrow(0, 5, 1).sigmoid_();                   // through a transpose
    return (x * x).sum();
  };
  const at::Tensor W = global_a({4, 6}), U = global_a({4, 6}) * 0.5 - 1;
  const at::Tensor wp = W.clone().requires_grad_(true), up = U.clone().requires_grad_(true);
  const at::Tensor want = program(wp, up);
  want.backward();
  auto cases = [&](const std::vector<int64_t>& ms, const std::vector<Placements>& ps) {
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      for (const Placements& p : ps) {
        const std::string what = to_string(p);
        at::Tensor w = make(W, mesh, p).as_tensor().requires_grad_(true);
        at::Tensor u = make(U, mesh, p).as_tensor().requires_grad_(true);
        const at::Tensor loss = program(w, u);
        expect_close(full(loss), want.detach(), "loss " + what);
        loss.backward();
        expect_close(full(w.grad()), wp.grad(), "w grad " + what);
        expect_close(full(u.grad()), up.grad(), "u grad " + what);
      }
    });
  };
  cases({2}, {{Shard(0)}, {Shard(1)}, {Replicate()}});
  cases({4}, {{Shard(0)}, {Shard(1)}});
  cases({2, 2}, {{Shard(0), Shard(1)}, {Shard(1), Shard(1)}});
  // The thread's view-replay flag is set by a DTensor view op and cleared by the next DTensor op.
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor w = make(W, mesh, {Shard(0)}).as_tensor();
    EXPECT_FALSE(c10::AutogradState::get_tls_state().get_view_replay_enabled());
    const at::Tensor v = w.narrow(1, 0, 2);
    EXPECT_TRUE(c10::AutogradState::get_tls_state().get_view_replay_enabled());
    (void)(v * 2);
    EXPECT_FALSE(c10::AutogradState::get_tls_state().get_view_replay_enabled());
  });
}

TEST(DTensorViews, ViewOverheadReport) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({8, 8}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor la = as_dtensor(a).to_local();
    constexpr int kIters = 2000;
    auto time = [&](const std::function<void()>& f) {
      for (int i = 0; i < 100; ++i) f();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIters; ++i) f();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                 .count() / kIters;
    };
    const double plain = time([&] { (void)la.view({-1}); });
    const double view = time([&] { (void)a.view({-1}); });
    const double t = time([&] { (void)a.t(); });
    const double sq = time([&] { (void)a.unsqueeze(0).squeeze(0); });
    EXPECT_EQ(as_dtensor(a.view({-1})).placements()[0], Shard(0));
    if (mesh.get_coordinate()[0] == 0)
      std::printf("view overhead [8,8] S(0) on 2 ranks: plain local view %.2f us, DTensor view "
                  "%.2f us, t() %.2f us, unsqueeze+squeeze %.2f us\n", plain, view, t, sq);
  });
}

TEST(DTensorViewsAutograd, GradientsOfTransposeReshapeUnsqueezeEqualSingleDevice) {
  const std::vector<Placements> xs = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
  gradient_cases({2}, xs, {{Replicate()}, {Shard(1)}, {Shard(2)}});
  gradient_cases({4}, xs, {{Replicate()}, {Shard(1)}});  // [4,6] and [1,6,4]: S(1) uneven on 4
  gradient_cases({2, 2}, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}},
                 {{Replicate(), Shard(1)}, {Shard(2), Shard(1)}});
}

TEST(DTensorViews, RefusedCasesNameTheOpAndLayouts) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const auto error = error_of<NotImplementedError>;
    const at::Tensor rs =
        make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    std::string m = error([&] { (void)rs.transpose(0, 1); });
    EXPECT_NE(m.find("aten::transpose.int(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                     "shape=[6,4]): view ops of a RaggedShard DTensor are not implemented"),
              std::string::npos) << m;
    m = error([&] { (void)rs.view({24}); });
    EXPECT_NE(m.find("aten::view(arg 0: mesh=[2] placements=[RS((0,), (1, 2))]"), std::string::npos)
        << m;
    m = error([&] { (void)rs.diagonal(); });
    EXPECT_NE(m.find("aten::diagonal(arg 0: mesh=[2] placements=[RS((0,), (1, 2))]"),
              std::string::npos) << m;
    m = error([&] { (void)rs.select(0, 1); });
    EXPECT_NE(m.find("aten::select.int(arg 0: mesh=[2] placements=[RS((0,), (1, 2))]"),
              std::string::npos) << m;
    // Squeezing a sharded size-1 dim.
    const at::Tensor one = make(global_a({4, 1}), mesh, {Shard(1)}).as_tensor();
    m = error([&] { (void)one.squeeze(1); });
    EXPECT_NE(m.find("aten::squeeze.dims(arg 0: mesh=[2] placements=[S(1)] shape=[4,1]): "
                     "squeeze of the sharded size-1 dim 1 is not implemented"),
              std::string::npos) << m;
    m = error([&] { (void)one.squeeze(); });
    EXPECT_NE(m.find("squeeze of the sharded size-1 dim 1"), std::string::npos) << m;
    // In-place ops through a view write the base when the view aliases the local (exact);
    // a view that copied (here [5,6] S(0) -> [30], made Replicate first) refuses them.
    const at::Tensor A56 = global_a({5, 6});
    at::Tensor base = make(A56, mesh, {Shard(0)}).as_tensor();
    base.view({5, 2, 3}).mul_(2);
    base.t().select(0, 1).add_(1);
    at::Tensor want = A56 * 2;
    want.select(1, 1).add_(1);
    expect_close(full(base), want, "in-place through exact views");
    m = error([&] { base.view({30}).add_(1); });
    EXPECT_NE(m.find("aten::add_.Tensor(arg 0: mesh=[2] placements=[R] shape=[30]; arg 1: plain "
                     "tensor shape=[]): in-place op on a view of a DTensor whose local tensor is "
                     "a copy"),
              std::string::npos) << m;
    EXPECT_NE(m.find("would not reach the base mesh=[2] placements=[S(0)] shape=[5,6]"),
              std::string::npos) << m;
    m = error([&] { base.t().reshape({30}).fill_(0); });
    EXPECT_NE(m.find("in-place op on a view of a DTensor whose local tensor is a copy"),
              std::string::npos) << m;
    expect_close(full(base), want, "base unchanged by the refused writes");
    // In-place views have no rule.
    at::Tensor s0 = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    m = error([&] { s0.transpose_(0, 1); });
    EXPECT_NE(m.find("no sharding rule for aten::transpose_(arg 0: mesh=[2] placements=[S(0)] "
                     "shape=[4,6])"),
              std::string::npos) << m;
  });
}

}  // namespace
}  // namespace hyper
