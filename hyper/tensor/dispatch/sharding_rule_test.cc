// The torch-free sharding rules (dispatch/sharding_rule.h): layouts in, layouts out, as text.
#include "hyper/tensor/dispatch/sharding_rule.h"

#include <gtest/gtest.h>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/advanced_index_rules.h"
#include "hyper/tensor/dispatch/decomposition_rules.h"
#include "hyper/tensor/dispatch/linear_rules.h"
#include "hyper/tensor/dispatch/matmul_rules.h"
#include "hyper/tensor/dispatch/maxdim_rules.h"

namespace hyper::dispatch {
namespace {

ArgLayout L(const std::string& s) { return ArgLayout::of(Layout::from_string(s)); }

std::string prop(const std::string& op, const std::vector<ArgLayout>& args) {
  const OpRule* r = find_rule(op);
  EXPECT_NE(r, nullptr) << op;
  Propagation p = propagate_elementwise(op, *r, args);
  std::string s;
  for (const auto& i : p.inputs) s += (i ? i->to_string() : std::string("-")) + " | ";
  return s + "-> " + p.output.to_string();
}

TEST(ShardingRule, ElementwiseShardReplicatePartial) {
  // S + R -> S: the Replicate operand is sliced locally.
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[S(0)] shape=[5,6]"),
                                      L("mesh=[2] placements=[R] shape=[5,6]")}),
            "mesh=[2] placements=[S(0)] shape=[5,6] | mesh=[2] placements=[S(0)] shape=[5,6] | "
            "-> mesh=[2] placements=[S(0)] shape=[5,6]");
  // P + P -> P; P + R -> P (R made Partial locally); P * R -> P; P * P -> P * R.
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                      L("mesh=[2] placements=[R] shape=[3]")}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[P(sum)] shape=[3] | "
            "-> mesh=[2] placements=[P(sum)] shape=[3]");
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                      L("mesh=[2] placements=[P(sum)] shape=[3]")}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[R] shape=[3] | "
            "-> mesh=[2] placements=[P(sum)] shape=[3]");
  // div is linear in the numerator only.
  EXPECT_EQ(prop("aten::div.Tensor", {L("mesh=[2] placements=[R] shape=[3]"),
                                      L("mesh=[2] placements=[P(sum)] shape=[3]")}),
            "mesh=[2] placements=[R] shape=[3] | mesh=[2] placements=[R] shape=[3] | "
            "-> mesh=[2] placements=[R] shape=[3]");
  // relu(P) reduces first.
  EXPECT_EQ(prop("aten::relu", {L("mesh=[2] placements=[P(sum)] shape=[3]")}),
            "mesh=[2] placements=[R] shape=[3] | -> mesh=[2] placements=[R] shape=[3]");
  // P(max) is never kept.
  EXPECT_EQ(prop("aten::neg", {L("mesh=[2] placements=[P(max)] shape=[3]")}),
            "mesh=[2] placements=[R] shape=[3] | -> mesh=[2] placements=[R] shape=[3]");
  // Shard wins over Partial: P -> S(1) (reduce-scatter); S(0) vs S(1): the first wins.
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[S(1)] shape=[4,4]"),
                                      L("mesh=[2] placements=[P(sum)] shape=[4,4]")}),
            "mesh=[2] placements=[S(1)] shape=[4,4] | mesh=[2] placements=[S(1)] shape=[4,4] | "
            "-> mesh=[2] placements=[S(1)] shape=[4,4]");
  EXPECT_EQ(prop("aten::sub.Tensor", {L("mesh=[2] placements=[S(0)] shape=[4,4]"),
                                      L("mesh=[2] placements=[S(1)] shape=[4,4]")}),
            "mesh=[2] placements=[S(0)] shape=[4,4] | mesh=[2] placements=[S(0)] shape=[4,4] | "
            "-> mesh=[2] placements=[S(0)] shape=[4,4]");
}

// Operands sharded on different dims: the cheapest combination of the offered Shards.
TEST(ShardingRule, DifferentShardsChooseTheFewestBytesMoved) {
  // b [8] S(0) is a Shard of the output's dim 1; a [8,8] S(0) of its dim 0. Keeping b's S(1)
  // moves a (48 elements on 4 ranks); keeping a's S(0) gathers b (24): a's wins, whichever
  // operand comes first.
  const std::string a = "mesh=[4] placements=[S(0)] shape=[8,8]", b = "mesh=[4] placements=[S(0)] shape=[8]";
  const std::string kept = "mesh=[4] placements=[R] shape=[8] | " + a + " | -> " + a;
  EXPECT_EQ(prop("aten::add.Tensor", {L(b), L(a)}), kept);
  EXPECT_EQ(prop("aten::add.Tensor", {L(a), L(b)}),
            a + " | mesh=[4] placements=[R] shape=[8] | -> " + a);
  // Equal costs keep argument order (the tie in ElementwiseShardReplicatePartial).
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[S(1)] shape=[4,4]"),
                                      L("mesh=[2] placements=[S(0)] shape=[4,4]")}),
            "mesh=[2] placements=[S(1)] shape=[4,4] | mesh=[2] placements=[S(1)] shape=[4,4] | "
            "-> mesh=[2] placements=[S(1)] shape=[4,4]");
  // 2 ranks, [6] S(0) + [4,6] S(0): gathering the [6] (6 elements) beats moving the [4,6] (12).
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[S(0)] shape=[6]"),
                                      L("mesh=[2] placements=[S(0)] shape=[4,6]")}),
            "mesh=[2] placements=[R] shape=[6] | mesh=[2] placements=[S(0)] shape=[4,6] | "
            "-> mesh=[2] placements=[S(0)] shape=[4,6]");
  // 2x2: each mesh dim chooses; [S(0),S(1)] [8,8] against [S(0),R] [8] (dim 1 of the
  // output on mesh dim 0): mesh dim 0 keeps the big operand's S(0).
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2,2] placements=[S(0),R] shape=[8]"),
                                      L("mesh=[2,2] placements=[S(0),S(1)] shape=[8,8]")}),
            "mesh=[2,2] placements=[R,S(0)] shape=[8] | mesh=[2,2] placements=[S(0),S(1)] shape=[8,8] | "
            "-> mesh=[2,2] placements=[S(0),S(1)] shape=[8,8]");
  // Bytes, not elements: masked_fill of a float [3,5,5] S(0) by a bool [5,5] S(0) mask on 4
  // ranks. Keeping self's S(0) gathers the mask (95 elements, 95 bytes); the mask's S(1)
  // would move self (50 elements, 200 bytes).
  const Layout self = Layout::from_string("mesh=[4] placements=[S(0)] shape=[3,5,5]");
  const Layout mask = Layout::from_string("mesh=[4] placements=[S(0)] shape=[5,5]");
  EXPECT_EQ(prop("aten::masked_fill.Scalar", {ArgLayout::of(self, 4), ArgLayout::of(mask, 1)}),
            self.to_string() + " | mesh=[4] placements=[R] shape=[5,5] | -> " + self.to_string());
  EXPECT_EQ(prop("aten::masked_fill.Scalar", {ArgLayout::of(self, 1), ArgLayout::of(mask, 1)}),
            "mesh=[4] placements=[S(1)] shape=[3,5,5] | " + mask.to_string() +
                " | -> mesh=[4] placements=[S(1)] shape=[3,5,5]");
}

// Several Partial operands of a product: the one whose reduction costs most stays Partial.
TEST(ShardingRule, APartialProductReducesTheCheaperOperand) {
  const std::string s = "mesh=[2] placements=[P(sum)] shape=[6]", x = "mesh=[2] placements=[P(sum)] shape=[4,6]";
  const std::string kept = "mesh=[2] placements=[R] shape=[6] | " + x + " | -> " + x;
  EXPECT_EQ(prop("aten::mul.Tensor", {L(s), L(x)}), kept);  // was: x all-reduced, s kept
  EXPECT_EQ(prop("aten::mul.Tensor", {L(x), L(s)}), x + " | mesh=[2] placements=[R] shape=[6] | -> " + x);
  // div is linear in its numerator only: a Partial denominator is reduced whatever its size.
  EXPECT_EQ(prop("aten::div.Tensor", {L(s), L(x)}),
            s + " | mesh=[2] placements=[R] shape=[4,6] | -> mesh=[2] placements=[P(sum)] shape=[4,6]");
  // Equal sizes: argument order (ElementwiseShardReplicatePartial's P * P).
  EXPECT_EQ(prop("aten::mul.Tensor", {L(x), L(x)}), x + " | mesh=[2] placements=[R] shape=[4,6] | -> " + x);
}

// addcmul (self + v * t1 * t2) with both factors Partial: the cheaper one is reduced (was: the
// first factor kept, so a [4,6] t2 was all-reduced where the [6] t1 sufficed); addcdiv is
// linear in t1 only; in place, and on equal sizes, argument order.
TEST(ShardingRule, AddcmulReducesTheCheaperPartialFactor) {
  const std::string r = "mesh=[2] placements=[R] shape=[4,6]";
  const std::string s = "mesh=[2] placements=[P(sum)] shape=[6]", x = "mesh=[2] placements=[P(sum)] shape=[4,6]";
  EXPECT_EQ(prop("aten::addcmul", {L(r), L(s), L(x)}),
            x + " | mesh=[2] placements=[R] shape=[6] | " + x + " | -> " + x);
  EXPECT_EQ(prop("aten::addcmul", {L(r), L(x), L(s)}),
            x + " | " + x + " | mesh=[2] placements=[R] shape=[6] | -> " + x);
  EXPECT_EQ(prop("aten::addcmul", {L(r), L(x), L(x)}), x + " | " + x + " | " + r + " | -> " + x);
  EXPECT_EQ(prop("aten::addcdiv", {L(r), L(s), L(x)}),
            x + " | " + s + " | " + r + " | -> " + x);
  // A Partial self: the factor holding its Partial is kept.
  EXPECT_EQ(prop("aten::addcmul", {L(x), L(s), L(x)}),
            x + " | mesh=[2] placements=[R] shape=[6] | " + x + " | -> " + x);
  EXPECT_EQ(prop("aten::addcmul_", {L(x), L(s), L(x)}),
            x + " | " + s + " | " + r + " | -> " + x);
}

TEST(ShardingRule, BroadcastingAndScalars) {
  // [5,6] S(1) with [6] R: the [6] operand is sliced along its dim 0.
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[S(1)] shape=[5,6]"),
                                      L("mesh=[2] placements=[R] shape=[6]")}),
            "mesh=[2] placements=[S(1)] shape=[5,6] | mesh=[2] placements=[S(0)] shape=[6] | "
            "-> mesh=[2] placements=[S(1)] shape=[5,6]");
  // A sharded broadcast dim ([1,6] S(0) against [5,6]) is gathered.
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[R] shape=[5,6]"),
                                      L("mesh=[2] placements=[S(0)] shape=[1,6]")}),
            "mesh=[2] placements=[R] shape=[5,6] | mesh=[2] placements=[R] shape=[1,6] | "
            "-> mesh=[2] placements=[R] shape=[5,6]");
  // A [1,6] operand keeps its S(1) (dim 1 is not broadcast).
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[R] shape=[5,6]"),
                                      L("mesh=[2] placements=[S(1)] shape=[1,6]")}),
            "mesh=[2] placements=[S(1)] shape=[5,6] | mesh=[2] placements=[S(1)] shape=[1,6] | "
            "-> mesh=[2] placements=[S(1)] shape=[5,6]");
  // A 0-dim plain tensor beside P(sum) under add: zeroed off coordinate 0 (target P(sum)).
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                      ArgLayout::plain({})}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[P(sum)] shape=[] | "
            "-> mesh=[2] placements=[P(sum)] shape=[3]");
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                      ArgLayout::plain({})}),
            "mesh=[2] placements=[P(sum)] shape=[3] | - | -> mesh=[2] placements=[P(sum)] shape=[3]");
  const OpRule* add = find_rule("aten::add.Tensor");
  // A plain tensor with dims is Replicate: sliced for a Shard, zeroed off coordinate 0 for P(sum).
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[R] shape=[3]"), ArgLayout::plain({3})}),
            "mesh=[2] placements=[R] shape=[3] | - | -> mesh=[2] placements=[R] shape=[3]");
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[S(1)] shape=[5,6]"),
                                      ArgLayout::plain({6})}),
            "mesh=[2] placements=[S(1)] shape=[5,6] | mesh=[2] placements=[S(0)] shape=[6] | "
            "-> mesh=[2] placements=[S(1)] shape=[5,6]");
  EXPECT_EQ(prop("aten::add.Tensor", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                      ArgLayout::plain({3})}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[P(sum)] shape=[3] | "
            "-> mesh=[2] placements=[P(sum)] shape=[3]");
  // addcmul (self + v*t1*t2): self and one factor carry the Partial, the other is reduced.
  EXPECT_EQ(prop("aten::addcmul", {L("mesh=[2] placements=[R] shape=[3]"),
                                   L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                   L("mesh=[2] placements=[P(sum)] shape=[3]")}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[P(sum)] shape=[3] | "
            "mesh=[2] placements=[R] shape=[3] | -> mesh=[2] placements=[P(sum)] shape=[3]");
  // addcdiv (self + v*t1/t2) is linear in t1 only: a Partial self makes t1 Partial locally.
  EXPECT_EQ(prop("aten::addcdiv", {L("mesh=[2] placements=[P(sum)] shape=[3]"),
                                   L("mesh=[2] placements=[R] shape=[3]"),
                                   L("mesh=[2] placements=[P(sum)] shape=[3]")}),
            "mesh=[2] placements=[P(sum)] shape=[3] | mesh=[2] placements=[P(sum)] shape=[3] | "
            "mesh=[2] placements=[R] shape=[3] | -> mesh=[2] placements=[P(sum)] shape=[3]");
  try {
    propagate_elementwise("aten::add.Tensor", *add,
                          {L("mesh=[2] placements=[R] shape=[3]"), L("mesh=[2] placements=[R] shape=[4]")});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("shapes do not broadcast (size 4 against 3 at dim 0)"),
              std::string::npos) << e.what();
  }
}

TEST(ShardingRule, OperandsOnDifferentMeshesAreAValueError) {
  const OpRule* mul = find_rule("aten::mul.Tensor");
  try {
    propagate_elementwise("aten::mul.Tensor", *mul, {L("mesh=[2] placements=[R] shape=[3]"),
                                                     L("mesh=[4] placements=[R] shape=[3]")});
    ADD_FAILURE() << "no error";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("DTensor operands on different meshes"), std::string::npos)
        << e.what();
  }
}

TEST(ShardingRule, InPlaceKeepsArgumentZero) {
  EXPECT_EQ(prop("aten::add_.Tensor", {L("mesh=[2] placements=[R] shape=[4]"),
                                       L("mesh=[2] placements=[S(0)] shape=[4]")}),
            "mesh=[2] placements=[R] shape=[4] | mesh=[2] placements=[R] shape=[4] | "
            "-> mesh=[2] placements=[R] shape=[4]");
  const OpRule* relu_ = find_rule("aten::relu_");
  try {
    propagate_elementwise("aten::relu_", *relu_, {L("mesh=[2] placements=[P(sum)] shape=[4]")});
    ADD_FAILURE() << "no error";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("aten::relu_(arg 0: mesh=[2] placements=[P(sum)] "
                                         "shape=[4]): in-place op would change argument 0's "
                                         "P(sum) on mesh dim 0"),
              std::string::npos) << e.what();
  }
}

TEST(ShardingRule, RaggedElementwiseAndFullReductionsOnly) {
  const auto rs = L("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]");
  EXPECT_EQ(prop("aten::mul.Tensor", {rs, rs}),
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  // Beside another layout: every operand with dims is moved to
  // the ragged layout of the output's shape (a broadcast [4]: that layout too, cut locally
  // after it is made Replicate); a 0-dim DTensor is Replicate, a plain 0-dim one unchanged.
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[R] shape=[6,4]"), rs}),
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  EXPECT_EQ(prop("aten::add.Tensor", {rs, L("mesh=[2] placements=[P(sum)] shape=[4]")}),
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  EXPECT_EQ(prop("aten::mul.Tensor", {rs, L("mesh=[2] placements=[P(sum)] shape=[]")}),
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "mesh=[2] placements=[R] shape=[] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  EXPECT_EQ(prop("aten::mul.Tensor", {ArgLayout::plain({}), rs}),
            "- | mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  // Another ragged layout of the same shape: moved to argument 0's.
  EXPECT_EQ(prop("aten::sub.Tensor", {rs, L("mesh=[2] placements=[RS((0,),(1,1))] shape=[6,4]")}),
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4] | "
            "-> mesh=[2] placements=[RS((0,), (1, 2))] shape=[6,4]");
  // In-place on a non-ragged argument 0, or a ragged operand smaller than the output: the
  // ragged operand is a Replicate value for the other rules (moved to the target directly).
  EXPECT_EQ(prop("aten::add_.Tensor", {L("mesh=[2] placements=[S(0)] shape=[6,4]"), rs}),
            "mesh=[2] placements=[S(0)] shape=[6,4] | mesh=[2] placements=[S(0)] shape=[6,4] | "
            "-> mesh=[2] placements=[S(0)] shape=[6,4]");
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[RS((0,),(1,1))] shape=[4]"),
                                      L("mesh=[2] placements=[S(1)] shape=[6,4]")}),
            "mesh=[2] placements=[S(0)] shape=[4] | mesh=[2] placements=[S(1)] shape=[6,4] | "
            "-> mesh=[2] placements=[S(1)] shape=[6,4]");
  EXPECT_EQ(prop("aten::mul.Tensor", {L("mesh=[2] placements=[RS((0,),(1,1))] shape=[4]"),
                                      ArgLayout::plain({6, 4})}),
            "mesh=[2] placements=[R] shape=[4] | - | -> mesh=[2] placements=[R] shape=[6,4]");
  EXPECT_EQ(propagate_reduction("aten::sum", rs, {}, false).output.to_string(),
            "mesh=[2] placements=[P(sum)] shape=[]");
  EXPECT_THROW(propagate_reduction("aten::sum.dim_IntList", rs, {0}, false), NotImplementedError);
}

TEST(ShardingRule, Reductions) {
  const auto a = L("mesh=[2,2] placements=[S(0),S(1)] shape=[5,6]");
  EXPECT_EQ(propagate_reduction("aten::sum", a, {}, false).output.to_string(),
            "mesh=[2,2] placements=[P(sum),P(sum)] shape=[]");
  EXPECT_EQ(propagate_reduction("s", a, {0}, false).output.to_string(),
            "mesh=[2,2] placements=[P(sum),S(0)] shape=[6]");
  EXPECT_EQ(propagate_reduction("s", a, {-1}, true).output.to_string(),
            "mesh=[2,2] placements=[S(0),P(sum)] shape=[5,1]");
  // P(max) is reduced before summing.
  const auto p = propagate_reduction("s", L("mesh=[2] placements=[P(max)] shape=[3]"), {}, false);
  EXPECT_EQ(p.inputs[0]->to_string(), "mesh=[2] placements=[R] shape=[3]");
  EXPECT_EQ(p.output.to_string(), "mesh=[2] placements=[R] shape=[]");
  EXPECT_THROW(propagate_reduction("s", a, {2}, false), ValueError);
}

TEST(ShardingRule, LikeAndExpand) {
  EXPECT_EQ(propagate_like("aten::ones_like", L("mesh=[2] placements=[P(sum)] shape=[]"))
                .output.to_string(),
            "mesh=[2] placements=[R] shape=[]");
  EXPECT_EQ(propagate_expand("aten::expand", L("mesh=[2] placements=[P(sum)] shape=[]"), {5, 6})
                .output.to_string(),
            "mesh=[2] placements=[P(sum)] shape=[5,6]");
  EXPECT_EQ(propagate_expand("aten::expand", L("mesh=[2] placements=[S(1)] shape=[1,6]"), {3, -1, 6})
                .output.to_string(),
            "mesh=[2] placements=[S(2)] shape=[3,1,6]");
  EXPECT_THROW(propagate_expand("aten::expand", L("mesh=[2] placements=[S(0)] shape=[1,6]"), {4, 6}),
               NotImplementedError);
  EXPECT_THROW(propagate_expand("aten::expand", L("mesh=[2] placements=[RS((0,),(1,1))] shape=[2]"), {2}),
               NotImplementedError);
  const auto r = L("mesh=[2] placements=[R] shape=[3,1]");
  EXPECT_THROW(propagate_expand("aten::expand", r, {3}), ValueError);         // fewer sizes
  EXPECT_THROW(propagate_expand("aten::expand", r, {-2, 3, 1}), ValueError);  // bad new dim
  EXPECT_THROW(propagate_expand("aten::expand", r, {4, 1}), ValueError);      // 3 -> 4
  EXPECT_EQ(propagate_expand("aten::expand", r, {2, -1, 5}).output.to_string(),
            "mesh=[2] placements=[R] shape=[2,3,5]");
}

TEST(ShardingRule, RegistryNamesTheStepOneOps) {
  for (const char* op : {"aten::add.Tensor", "aten::add_.Tensor", "aten::sub.Tensor",
                         "aten::mul.Tensor", "aten::mul_.Tensor", "aten::div.Tensor", "aten::neg",
                         "aten::relu", "aten::exp", "aten::tanh", "aten::gelu", "aten::sum",
                         "aten::ones_like", "aten::expand", "aten::threshold_backward"})
    EXPECT_NE(find_rule(op), nullptr) << op;
  EXPECT_EQ(find_rule("aten::dot"), nullptr);
}


// The decisions of the kernel families, made in their rules files: layouts in, layouts out.
TEST(FamilyRules, MaxDimPicks) {
  const Layout x = Layout::from_string("mesh=[2,2] placements=[S(1),P(sum)] shape=[4,6]");
  const PickLayouts p = pick_layouts("max.dim", x, 1, false);
  EXPECT_EQ(p.in.to_string(), "mesh=[2,2] placements=[S(1),R] shape=[4,6]");
  EXPECT_EQ(p.out.to_string(), "mesh=[2,2] placements=[R,R] shape=[4]");
  EXPECT_EQ(p.mesh_dims, std::vector<int64_t>{0});
  EXPECT_EQ(p.gathered, (Placements{Replicate(), Replicate()}));
  const PickLayouts q = pick_layouts("max.dim", Layout::from_string("mesh=[2] placements=[S(1)] shape=[4,6]"), 0, true);
  EXPECT_EQ(q.out.to_string(), "mesh=[2] placements=[S(1)] shape=[1,6]");
  EXPECT_TRUE(q.mesh_dims.empty());
  // A Partial(sum) gradient stays Partial where self is Replicate.
  const PickGradLayouts g = pick_grad_layouts(p, Placements{Replicate(), Partial()});
  EXPECT_EQ(g.grad.to_string(), "mesh=[2,2] placements=[R,P(sum)] shape=[4]");
  EXPECT_EQ(g.input_grad.to_string(), "mesh=[2,2] placements=[S(1),P(sum)] shape=[4,6]");
  EXPECT_EQ(pick_grad_layouts(p, std::nullopt).input_grad.to_string(), "mesh=[2,2] placements=[S(1),R] shape=[4,6]");
  EXPECT_THROW(pick_layouts("max.dim", x, 2, false), ValueError);
  EXPECT_THROW(pick_layouts("max.dim", Layout::from_string("mesh=[2] placements=[S(0)] shape=[0,6]"), 0, false),
               ValueError);
  EXPECT_THROW(pick_layouts("max.dim", Layout::from_string("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]"), 1,
                            false),
               NotImplementedError);
}

TEST(FamilyRules, BatchedMatmul) {
  const ArgLayout a = L("mesh=[2,2] placements=[S(0),S(1)] shape=[2,4,3,5]");
  const ArgLayout b = L("mesh=[2,2] placements=[S(0),R] shape=[2,4,5,6]");
  EXPECT_EQ(sharded_batch_dims(a, b), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(batched_matmul_order(a, b), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_TRUE(batched_matmul_order(L("mesh=[2] placements=[S(0)] shape=[2,4,3,5]"), b).empty());  // the fold keeps S(0)
  EXPECT_TRUE(batched_matmul_order(a, L("mesh=[2,2] placements=[S(0),R] shape=[2,5,5,6]")).empty());  // broadcast
  const ArgLayout heads = L("mesh=[2] placements=[S(1)] shape=[2,4,3,5]");
  EXPECT_EQ(batched_matmul_order(heads, ArgLayout::plain({2, 4, 5, 6})), (std::vector<int64_t>{1, 0, 2, 3}));
  EXPECT_EQ(batch_local_placements(a, b), (Placements{Shard(0), Shard(1)}));
  EXPECT_EQ(batch_local_placements(heads, ArgLayout::plain({2, 4, 5, 6})), (Placements{Shard(1)}));
  EXPECT_FALSE(batch_local_placements(a, L("mesh=[2,2] placements=[S(0),S(2)] shape=[2,4,5,6]")));  // k
  EXPECT_FALSE(batch_local_placements(a, L("mesh=[2,2] placements=[S(1),R] shape=[2,4,5,6]")));     // two dims
  EXPECT_FALSE(batch_local_placements(a, L("mesh=[2,2] placements=[P(sum),R] shape=[2,4,5,6]")));
  EXPECT_FALSE(batch_local_placements(ArgLayout::plain({2, 4, 3, 5}), ArgLayout::plain({2, 4, 5, 6})));
}

TEST(FamilyRules, LinearOverlaps) {
  const Layout seq = Layout::from_string("mesh=[2] placements=[S(0)] shape=[8,4]");
  const Layout rep = Layout::from_string("mesh=[2] placements=[R] shape=[8,4]");
  EXPECT_EQ(overlapped_gather_output(seq, rep, L("mesh=[2] placements=[R] shape=[4,6]"))->to_string(),
            "mesh=[2] placements=[R] shape=[8,6]");
  EXPECT_EQ(overlapped_gather_output(seq, rep, L("mesh=[2] placements=[S(1)] shape=[4,6]"))->to_string(),
            "mesh=[2] placements=[S(1)] shape=[8,6]");
  EXPECT_FALSE(overlapped_gather_output(seq, rep, L("mesh=[2] placements=[S(0)] shape=[4,6]")));
  EXPECT_FALSE(overlapped_gather_output(seq, rep, ArgLayout::plain({4, 6})));
  EXPECT_FALSE(overlapped_gather_output(Layout::from_string("mesh=[2] placements=[S(1)] shape=[8,4]"), rep,
                                        L("mesh=[2] placements=[R] shape=[4,6]")));
  const Layout rows = Layout::from_string("mesh=[2] placements=[S(1)] shape=[8,4]");
  EXPECT_EQ(contracted_rowwise_output(rows, rows, L("mesh=[2] placements=[S(0)] shape=[4,6]"))->to_string(),
            "mesh=[2] placements=[P(sum)] shape=[8,6]");
  EXPECT_FALSE(contracted_rowwise_output(rows, rep, L("mesh=[2] placements=[S(0)] shape=[4,6]")));
  EXPECT_FALSE(contracted_rowwise_output(rows, rows, L("mesh=[2] placements=[R] shape=[4,6]")));
  const ArgLayout w = L("mesh=[2] placements=[S(0)] shape=[6,4]");
  EXPECT_TRUE(bias_add_local(std::nullopt, w));
  EXPECT_TRUE(bias_add_local(ArgLayout::plain({6}), w));
  EXPECT_TRUE(bias_add_local(L("mesh=[2] placements=[S(0)] shape=[6]"), w));
  EXPECT_TRUE(bias_add_local(L("mesh=[2] placements=[R] shape=[6]"), w));
  EXPECT_FALSE(bias_add_local(L("mesh=[2] placements=[P(sum)] shape=[6]"), w));
}

TEST(FamilyRules, AdvancedIndex) {
  const Layout rep = Layout::from_string("mesh=[2] placements=[R] shape=[6,4]");
  const ArgLayout i = L("mesh=[2] placements=[S(0)] shape=[8]");
  EXPECT_EQ(local_index_shards(rep, {i, i}, true), std::vector<int64_t>{0});
  EXPECT_EQ(local_index_shards(rep, {i, L("mesh=[2] placements=[R] shape=[8]")}, true), std::vector<int64_t>{-1});
  EXPECT_EQ(local_index_shards(rep, {i, i}, false), std::vector<int64_t>{-1});
  // x[i, j] with the indices sharded alike: the output keeps their Shard.
  EXPECT_EQ(advanced_index_layouts("x[i, j]", rep, {true, true}, {0}, true, {8}).out.to_string(),
            "mesh=[2] placements=[S(0)] shape=[8]");
  // self sharded along an indexed dim: a masked Partial(sum); along another: a Shard moved.
  const Layout rows = Layout::from_string("mesh=[2,2] placements=[S(0),S(1)] shape=[6,4,5]");
  const AdvancedIndexLayouts a = advanced_index_layouts("x[i]", rows, {true}, {-1, -1}, true, {3, 4, 5});
  EXPECT_EQ(a.in.to_string(), "mesh=[2,2] placements=[S(0),S(1)] shape=[6,4,5]");
  EXPECT_EQ(a.out.to_string(), "mesh=[2,2] placements=[P(sum),S(1)] shape=[3,4,5]");
  EXPECT_EQ(a.broadcast_pos, 0);
  // x[:, i, j] with the indices sharded alike: adjacent dims, the broadcast dims in their place.
  const AdvancedIndexLayouts adj = advanced_index_layouts(
      "x[:, i, j]", Layout::from_string("mesh=[2] placements=[R] shape=[6,4,5]"), {false, true, true}, {0}, true, {6, 8});
  EXPECT_EQ(adj.broadcast_pos, 1);
  EXPECT_EQ(adj.out.to_string(), "mesh=[2] placements=[S(1)] shape=[6,8]");
  // Indexed dims apart: the broadcast dims go first.
  const AdvancedIndexLayouts apart = advanced_index_layouts(
      "x[i,:,j]", Layout::from_string("mesh=[2] placements=[S(1)] shape=[6,4,5]"), {true, false, true}, {-1}, true, {3, 4});
  EXPECT_EQ(apart.out.to_string(), "mesh=[2] placements=[S(1)] shape=[3,4]");
  EXPECT_EQ(apart.broadcast_pos, 0);
  // A bool self gathers instead; a P(max) beside a masked dim is reduced.
  EXPECT_EQ(advanced_index_layouts("x[i]", rows, {true}, {-1, -1}, false, {3, 4, 5}).in.to_string(),
            "mesh=[2,2] placements=[R,S(1)] shape=[6,4,5]");
  const AdvancedIndexLayouts m = advanced_index_layouts(
      "x[i]", Layout::from_string("mesh=[2,2] placements=[S(0),P(max)] shape=[6,4]"), {true}, {-1, -1}, true, {3, 4});
  EXPECT_EQ(m.out.to_string(), "mesh=[2,2] placements=[P(sum),R] shape=[3,4]");
  EXPECT_THROW(advanced_index_layouts("x[i]", Layout::from_string("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]"),
                                      {true}, {-1}, true, {3, 4}),
               NotImplementedError);
  EXPECT_THROW(advanced_index_layouts("x[]", rep, {false}, {-1}, true, {6, 4}), ValueError);
}

TEST(FamilyRules, Decompositions) {
  EXPECT_EQ(counts_layout(Layout::from_string("mesh=[2,2] placements=[S(0),R] shape=[6,4]"), {10}).to_string(),
            "mesh=[2,2] placements=[P(sum),R] shape=[10]");
  EXPECT_EQ(pad_block_placements(Layout::from_string("mesh=[2,2] placements=[S(0),S(1)] shape=[6,4]"), 1),
            (Placements{Shard(0), Replicate()}));
  EXPECT_FALSE(pad_block_placements(Layout::from_string("mesh=[2] placements=[RS((0,),(1,2))] shape=[6,4]"), 1));
}

}  // namespace
}  // namespace hyper::dispatch
