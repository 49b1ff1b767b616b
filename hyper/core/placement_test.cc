// Tests of hyper::Placement: the four kinds, their text form, value semantics and
// every construction / parse / accessor error (seed 000 §3.1, §9.3).

#include "hyper/core/placement.h"

#include <gtest/gtest.h>

#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_util.h"


namespace hyper {
namespace {

using I = std::vector<int64_t>;

TEST(PlacementTest, ShardKindAndAccessors) {
  Placement s = Shard(0);
  EXPECT_EQ(s.kind(), Placement::Kind::kShard);
  EXPECT_TRUE(s.is_shard());
  EXPECT_TRUE(s.is_shard(0));
  EXPECT_FALSE(s.is_shard(1));
  EXPECT_FALSE(s.is_replicate());
  EXPECT_FALSE(s.is_partial());
  EXPECT_FALSE(s.is_ragged_shard());
  EXPECT_EQ(s.dim(), 0);

  Placement neg = Shard(-1);
  EXPECT_TRUE(neg.is_shard());
  EXPECT_TRUE(neg.is_shard(-1));  // no normalisation at the placement level
  EXPECT_FALSE(neg.is_shard(0));
  EXPECT_EQ(neg.dim(), -1);
  EXPECT_EQ(Shard(7).dim(), 7);
}

TEST(PlacementTest, ReplicateKindIsDefault) {
  Placement r = Replicate();
  Placement d;
  EXPECT_EQ(r.kind(), Placement::Kind::kReplicate);
  EXPECT_EQ(d.kind(), Placement::Kind::kReplicate);
  EXPECT_TRUE(r.is_replicate());
  EXPECT_FALSE(r.is_shard());
  EXPECT_FALSE(r.is_shard(0));
  EXPECT_FALSE(r.is_partial());
  EXPECT_FALSE(r.is_ragged_shard());
  EXPECT_EQ(r, d);
}

TEST(PlacementTest, PartialKindAndOps) {
  Placement p = Partial();
  EXPECT_EQ(p.kind(), Placement::Kind::kPartial);
  EXPECT_TRUE(p.is_partial());
  EXPECT_FALSE(p.is_shard());
  EXPECT_FALSE(p.is_replicate());
  EXPECT_FALSE(p.is_ragged_shard());
  EXPECT_EQ(p.reduce_op(), "sum");
  for (const char* op : {"sum", "avg", "max", "min"}) {
    EXPECT_EQ(Partial(op).reduce_op(), op);
    EXPECT_EQ(Partial(op).to_string(), std::string("P(") + op + ")");
  }
  EXPECT_EQ(Partial("sum"), Partial());
  EXPECT_NE(Partial("sum"), Partial("avg"));
}

TEST(PlacementTest, PartialRejectsUnknownOps) {
  EXPECT_THROW_MSG(Partial("mul"), ValueError, "'mul'");
  EXPECT_THROW_MSG(Partial("mul"), ValueError, "sum, avg, max, min");
  EXPECT_THROW_MSG(Partial(""), ValueError, "''");
  EXPECT_THROW_MSG(Partial("SUM"), ValueError, "'SUM'");
  EXPECT_THROW_MSG(Partial("product"), std::invalid_argument, "product");
}

TEST(PlacementTest, RaggedShardKindAndAccessors) {
  Placement g = RaggedShard({0, 1}, {1, 2});
  EXPECT_EQ(g.kind(), Placement::Kind::kRaggedShard);
  EXPECT_TRUE(g.is_ragged_shard());
  EXPECT_FALSE(g.is_shard());
  EXPECT_FALSE(g.is_shard(0));
  EXPECT_FALSE(g.is_replicate());
  EXPECT_FALSE(g.is_partial());
  EXPECT_EQ(g.dims(), (I{0, 1}));
  EXPECT_EQ(g.local_units(), (I{1, 2}));
  EXPECT_EQ(g.total_units(), 3);
  EXPECT_EQ(RaggedShard({0}, {2, 3, 0, 5}).total_units(), 10);
}

TEST(PlacementTest, RaggedShardZeroUnitsForSomeRanksAreLegal) {
  Placement g = RaggedShard({0}, {0, 3});
  EXPECT_EQ(g.local_units(), (I{0, 3}));
  EXPECT_EQ(g.total_units(), 3);
  EXPECT_NO_THROW(RaggedShard({0, 1}, {2, 3, 0, 5}));
  EXPECT_NO_THROW(RaggedShard({0, 1, 2}, {0, 0, 0, 1}));
  EXPECT_NO_THROW(RaggedShard({0}, {7}));
}

// Every construction error of ragged_cases.json "errors" that needs no shape or mesh.
TEST(PlacementTest, RaggedShardConstructionErrors) {
  struct Case {
    I dims, units;
    const char* substr;
  };
  const std::vector<Case> cases = {
      {{}, {1, 2}, "dims must not be empty"},
      {{1}, {1, 2}, "(1,)"},
      {{0, 2}, {1, 2}, "(0, 2)"},
      {{0}, {}, "local_units must not be empty"},
      {{0}, {-1, 2}, "-1"},
      {{0}, {0, 0}, "(0, 0)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.substr);
    EXPECT_THROW_MSG(RaggedShard(c.dims, c.units), ValueError, c.substr);
    // The API contract: std::invalid_argument (ValueError derives from it).
    EXPECT_THROW_MSG(RaggedShard(c.dims, c.units), std::invalid_argument, c.substr);
  }
  // More precise messages.
  EXPECT_THROW_MSG(RaggedShard({1}, {1, 2}), ValueError, "prefix (0, ..., 0)");
  EXPECT_THROW_MSG(RaggedShard({0, 2}, {1, 2}), ValueError, "prefix (0, ..., 1)");
  EXPECT_THROW_MSG(RaggedShard({1, 0}, {1, 2}), ValueError, "(1, 0)");
  EXPECT_THROW_MSG(RaggedShard({0, 1, 1}, {1, 2}), ValueError, "(0, 1, 1)");
  EXPECT_THROW_MSG(RaggedShard({-1}, {1, 2}), ValueError, "(-1,)");
  EXPECT_THROW_MSG(RaggedShard({0}, {-1, 2}), ValueError, "non-negative");
  EXPECT_THROW_MSG(RaggedShard({0}, {3, -2}), ValueError, "unit 1 is -2 in (3, -2)");
  EXPECT_THROW_MSG(RaggedShard({0}, {0, 0}), ValueError, "must not all be zero");
  EXPECT_THROW_MSG(RaggedShard({0}, {0}), ValueError, "(0,)");
  EXPECT_THROW_MSG(RaggedShard({0}, {1, int64_t{1} << 50}), ValueError, "absurdly large");
}

TEST(PlacementTest, AccessorsOnTheWrongKindThrow) {
  EXPECT_THROW_MSG(Replicate().dim(), ValueError, "dim() called on R (Replicate)");
  EXPECT_THROW_MSG(Partial().dim(), ValueError, "P(sum) (Partial)");
  EXPECT_THROW_MSG(RaggedShard({0}, {1, 2}).dim(), ValueError, "(RaggedShard)");
  EXPECT_THROW_MSG(Shard(0).reduce_op(), ValueError, "reduce_op() called on S(0)");
  EXPECT_THROW_MSG(Replicate().reduce_op(), ValueError, "not a Partial");
  EXPECT_THROW_MSG(Shard(1).dims(), ValueError, "dims() called on S(1)");
  EXPECT_THROW_MSG(Partial("max").dims(), ValueError, "not a RaggedShard");
  EXPECT_THROW_MSG(Replicate().local_units(), ValueError, "local_units() called on R");
  EXPECT_THROW_MSG(Shard(0).total_units(), ValueError, "not a RaggedShard");
}

TEST(PlacementTest, ToStringExactForms) {
  EXPECT_EQ(Shard(0).to_string(), "S(0)");
  EXPECT_EQ(Shard(-1).to_string(), "S(-1)");
  EXPECT_EQ(Shard(12).to_string(), "S(12)");
  EXPECT_EQ(Replicate().to_string(), "R");
  EXPECT_EQ(Partial().to_string(), "P(sum)");
  EXPECT_EQ(Partial("avg").to_string(), "P(avg)");
  EXPECT_EQ(RaggedShard({0, 1}, {1, 2}).to_string(), "RS((0, 1), (1, 2))");
  EXPECT_EQ(RaggedShard({0}, {1, 2}).to_string(), "RS((0,), (1, 2))");
  EXPECT_EQ(RaggedShard({0}, {4}).to_string(), "RS((0,), (4,))");
  EXPECT_EQ(RaggedShard({0, 1, 2}, {2, 3, 0, 5}).to_string(), "RS((0, 1, 2), (2, 3, 0, 5))");
}

TEST(PlacementTest, StreamOperatorPrintsToString) {
  std::ostringstream os;
  os << Shard(1) << "|" << Replicate() << "|" << Partial("min") << "|"
     << RaggedShard({0}, {1, 2});
  EXPECT_EQ(os.str(), "S(1)|R|P(min)|RS((0,), (1, 2))");
}

std::vector<Placement> sample_placements() {
  return {Shard(0),
          Shard(1),
          Shard(-1),
          Shard(-3),
          Shard(17),
          Replicate(),
          Partial(),
          Partial("avg"),
          Partial("max"),
          Partial("min"),
          RaggedShard({0}, {1, 2}),
          RaggedShard({0}, {2, 1}),
          RaggedShard({0}, {1, 1}),
          RaggedShard({0}, {3}),
          RaggedShard({0, 1}, {1, 2}),
          RaggedShard({0, 1}, {1, 3}),
          RaggedShard({0, 1}, {2, 3, 0, 5}),
          RaggedShard({0, 1}, {5, 0, 3, 2}),
          RaggedShard({0, 1, 2}, {0, 1}),
          RaggedShard({0, 1, 2, 3}, {1, 0, 0, 0, 0, 0, 0, 9})};
}

TEST(PlacementTest, FromStringRoundTrips) {
  for (const auto& p : sample_placements()) {
    SCOPED_TRACE(p.to_string());
    Placement q = Placement::from_string(p.to_string());
    EXPECT_EQ(q, p);
    EXPECT_EQ(q.to_string(), p.to_string());
    EXPECT_EQ(q.hash(), p.hash());
  }
}

TEST(PlacementTest, FromStringIsLenientAboutSpacing) {
  EXPECT_EQ(Placement::from_string("RS((0,1),(1,2))"), RaggedShard({0, 1}, {1, 2}));
  EXPECT_EQ(Placement::from_string("RS((0,),(1,2))"), RaggedShard({0}, {1, 2}));
  EXPECT_EQ(Placement::from_string("  RS ( ( 0 , ) , ( 1 , 2 ) )  "), RaggedShard({0}, {1, 2}));
  EXPECT_EQ(Placement::from_string("RS((0),(1,2))"), RaggedShard({0}, {1, 2}));
  EXPECT_EQ(Placement::from_string("RS((0, 1), (1, 2),)"), RaggedShard({0, 1}, {1, 2}));
  EXPECT_EQ(Placement::from_string(" S( 2 ) "), Shard(2));
  EXPECT_EQ(Placement::from_string("S(-2)"), Shard(-2));
  EXPECT_EQ(Placement::from_string(" R "), Replicate());
  EXPECT_EQ(Placement::from_string("P( avg )"), Partial("avg"));
}

TEST(PlacementTest, FromStringErrorsNameTheText) {
  EXPECT_THROW_MSG(Placement::from_string("garbage"), ValueError, "'garbage'");
  EXPECT_THROW_MSG(Placement::from_string("garbage"), ValueError, "unknown placement");
  EXPECT_THROW_MSG(Placement::from_string(""), ValueError, "cannot parse ''");
  EXPECT_THROW_MSG(Placement::from_string("S()"), ValueError, "cannot parse 'S()'");
  EXPECT_THROW_MSG(Placement::from_string("S()"), ValueError, "expected an integer");
  EXPECT_THROW_MSG(Placement::from_string("S(x)"), ValueError, "'S(x)'");
  EXPECT_THROW_MSG(Placement::from_string("S(0"), ValueError, "expected ')'");
  EXPECT_THROW_MSG(Placement::from_string("S0"), ValueError, "'S0'");
  EXPECT_THROW_MSG(Placement::from_string("S(0)R"), ValueError, "trailing");
  EXPECT_THROW_MSG(Placement::from_string("S(1234567890123456789012)"), ValueError, "too large");
  EXPECT_THROW_MSG(Placement::from_string("P(mul)"), ValueError, "'mul'");
  EXPECT_THROW_MSG(Placement::from_string("P()"), ValueError, "expected a name");
  EXPECT_THROW_MSG(Placement::from_string("RS((1,),(1,2))"), ValueError, "prefix");
  EXPECT_THROW_MSG(Placement::from_string("RS((0,),())"), ValueError, "must not be empty");
  EXPECT_THROW_MSG(Placement::from_string("RS((0,))"), ValueError, "expected ','");
  EXPECT_THROW_MSG(Placement::from_string("RS(0,(1,2))"), ValueError, "expected '('");
  EXPECT_THROW_MSG(Placement::from_string("r"), ValueError, "'r'");
  // All parse errors are std::invalid_argument too.
  EXPECT_THROW_MSG(Placement::from_string("X"), std::invalid_argument, "'X'");
}

TEST(PlacementTest, EqualityDistinguishesKindsAndParameters) {
  const auto all = sample_placements();
  for (std::size_t i = 0; i < all.size(); ++i) {
    for (std::size_t j = 0; j < all.size(); ++j) {
      SCOPED_TRACE(all[i].to_string() + " vs " + all[j].to_string());
      EXPECT_EQ(all[i] == all[j], i == j);
      EXPECT_EQ(all[i] != all[j], i != j);
    }
  }
  // Copies are equal and hash equal.
  for (const auto& p : all) {
    Placement c = p;
    EXPECT_EQ(c, p);
    EXPECT_EQ(std::hash<Placement>()(c), std::hash<Placement>()(p));
  }
  // Rebuilt from scratch.
  EXPECT_EQ(RaggedShard({0, 1}, {1, 2}), RaggedShard({0, 1}, {1, 2}));
  EXPECT_EQ(Shard(3), Shard(3));
  EXPECT_NE(Shard(-1), Shard(1));  // normalisation happens in Layout, not here
  EXPECT_NE(RaggedShard({0}, {1, 2}), RaggedShard({0, 1}, {1, 2}));
  EXPECT_NE(RaggedShard({0}, {1, 2}), RaggedShard({0}, {1, 2, 0}));
  EXPECT_NE(Shard(0), Replicate());
}

TEST(PlacementTest, HashesDistinguishPlacementsInASet) {
  std::unordered_set<Placement> set;
  for (const auto& p : sample_placements()) set.insert(p);
  for (const auto& p : sample_placements()) set.insert(Placement::from_string(p.to_string()));
  EXPECT_EQ(set.size(), sample_placements().size());

  // RaggedShards that differ only in units are distinct keys with distinct hashes.
  std::unordered_set<Placement> ragged;
  std::unordered_set<std::size_t> hashes;
  const std::vector<I> unit_lists = {{1, 2}, {2, 1}, {1, 1}, {0, 3}, {3, 0}, {2, 4}, {1, 2, 3}};
  for (const auto& u : unit_lists) {
    ragged.insert(RaggedShard({0}, u));
    ragged.insert(RaggedShard({0}, u));  // duplicate: no new entry
    hashes.insert(std::hash<Placement>()(RaggedShard({0}, u)));
  }
  EXPECT_EQ(ragged.size(), unit_lists.size());
  EXPECT_EQ(hashes.size(), unit_lists.size());
  EXPECT_NE(RaggedShard({0, 1}, {1, 2}).hash(), RaggedShard({0, 1}, {2, 1}).hash());
  EXPECT_NE(RaggedShard({0}, {1, 2}).hash(), RaggedShard({0, 1}, {1, 2}).hash());
  EXPECT_EQ(ragged.count(RaggedShard({0}, {2, 4})), 1u);
  EXPECT_EQ(ragged.count(RaggedShard({0}, {4, 2})), 0u);
}

TEST(PlacementTest, VectorsToAndFromString) {
  EXPECT_EQ(to_string(Placements{}), "[]");
  EXPECT_EQ(to_string(Placements{Shard(0), Replicate()}), "[S(0),R]");
  EXPECT_EQ(to_string(Placements{RaggedShard({0}, {1, 2}), Replicate()}),
            "[RS((0,), (1, 2)),R]");
  EXPECT_EQ(to_string(Placements{Partial("avg"), Shard(-1), Replicate()}), "[P(avg),S(-1),R]");

  EXPECT_EQ(placements_from_string("[S(0),R]"), (Placements{Shard(0), Replicate()}));
  EXPECT_EQ(placements_from_string(" [ S(0) , R ] "), (Placements{Shard(0), Replicate()}));
  EXPECT_EQ(placements_from_string("[]"), Placements{});
  EXPECT_EQ(placements_from_string("[RS((0,),(1,2)),R]"),
            (Placements{RaggedShard({0}, {1, 2}), Replicate()}));
  EXPECT_EQ(placements_from_string("[R, RS((0, 1), (2, 3, 0, 5))]"),
            (Placements{Replicate(), RaggedShard({0, 1}, {2, 3, 0, 5})}));

  // Round trip of several vectors.
  const auto all = sample_placements();
  for (std::size_t n = 1; n <= 3; ++n) {
    for (std::size_t start = 0; start + n <= all.size(); ++start) {
      Placements ps(all.begin() + start, all.begin() + start + n);
      SCOPED_TRACE(to_string(ps));
      EXPECT_EQ(placements_from_string(to_string(ps)), ps);
    }
  }
}

TEST(PlacementTest, VectorParseErrorsNameTheText) {
  EXPECT_THROW_MSG(placements_from_string("S(0),R"), ValueError, "'S(0),R'");
  EXPECT_THROW_MSG(placements_from_string("S(0),R"), ValueError, "expected '['");
  EXPECT_THROW_MSG(placements_from_string("[S(0),R"), ValueError, "'[S(0),R'");
  EXPECT_THROW_MSG(placements_from_string("[S(0) R]"), ValueError, "expected ','");
  EXPECT_THROW_MSG(placements_from_string("[S(0),]"), ValueError, "expected a name");
  EXPECT_THROW_MSG(placements_from_string("[S(0)] x"), ValueError, "trailing");
  EXPECT_THROW_MSG(placements_from_string("[Q]"), ValueError, "unknown placement 'Q'");
  EXPECT_THROW_MSG(placements_from_string("[P(mul)]"), ValueError, "'mul'");
  EXPECT_THROW_MSG(placements_from_string("[RS((0,),(0,0))]"), ValueError, "all be zero");
}

}  // namespace
}  // namespace hyper
