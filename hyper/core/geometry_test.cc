// Tests of hyper/core/geometry.h. Every expected value is computed here by brute force
// (element-by-element enumeration) or copied from /work/shared/cases/ragged_cases.json;
// nothing is computed by calling the function under test in another form.

#include "hyper/core/geometry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/internal/test_catalogue.h"
#include "hyper/core/placement.h"

namespace hyper {
namespace {

using testutil::box_flat_indices;
using testutil::shapes_of_rank;
using testutil::throws_with;

// Checks every property decompose_interval promises; returns "" or the first problem.
std::string check_decomposition(const Shape& shape, int64_t s, int64_t e,
                                 const std::vector<FlatBox>& boxes) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::ostringstream why;
  const int64_t max_boxes = rank == 0 ? 1 : 2 * (rank - 1) + 1;
  if (static_cast<int64_t>(boxes.size()) > max_boxes)
    return "too many boxes: " + std::to_string(boxes.size());
  if (s == e && !boxes.empty()) return "empty interval gave boxes";
  int64_t local = 0;
  std::vector<int64_t> contents;
  for (const auto& fb : boxes) {
    const Box& b = fb.box;
    if (b.rank() != rank || static_cast<int64_t>(b.offsets.size()) != rank)
      return "box of wrong rank " + b.to_string();
    for (int64_t d = 0; d < rank; ++d) {
      if (b.sizes[d] < 1) return "empty or negative box " + b.to_string();
      if (b.offsets[d] < 0 || b.offsets[d] + b.sizes[d] > shape[d])
        return "box outside shape " + b.to_string();
    }
    if (fb.local_start != local) return "local range not contiguous at " + fb.to_string();
    int64_t n = 1;
    for (auto x : b.sizes) n *= x;
    if (fb.local_end() != local + n) return "local_end wrong at " + fb.to_string();
    local += n;
    const auto idx = box_flat_indices(shape, b);
    contents.insert(contents.end(), idx.begin(), idx.end());
  }
  std::vector<int64_t> want;
  for (int64_t f = s; f < e; ++f) want.push_back(f);
  if (contents != want) return "row-major contents differ from the interval";
  return "";
}

// ---------------------------------------------------------------------------------
// decompose_interval

TEST(DecomposeInterval, ExhaustiveEveryIntervalOfEveryShapeUpToRank4Numel24) {
  int64_t shapes = 0, intervals = 0;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (const auto& shape : shapes_of_rank(rank, 24)) {
      ++shapes;
      const int64_t n = testutil::prod(shape);
      for (int64_t s = 0; s <= n; ++s) {
        for (int64_t e = s; e <= n; ++e) {
          ++intervals;
          const auto boxes = decompose_interval(shape, Interval{s, e});
          const std::string problem = check_decomposition(shape, s, e, boxes);
          ASSERT_EQ(problem, "") << "shape " << shape_to_string(shape) << " interval [" << s << ", "
                                 << e << ")";
        }
      }
    }
  }
  // 24 + 59 + 99 + 128 shapes (all sizes >= 1, numel <= 24); sanity on the enumeration.
  EXPECT_GT(shapes, 250);
  EXPECT_GT(intervals, 30000);
}

TEST(DecomposeInterval, ZeroSizeDimsOnlyAllowTheEmptyInterval) {
  for (const Shape& shape : std::vector<Shape>{{0}, {3, 0}, {0, 2, 2}, {2, 0, 3}, {1, 1, 1, 0}}) {
    EXPECT_TRUE(decompose_interval(shape, Interval{0, 0}).empty()) << shape_to_string(shape);
    EXPECT_THROW(decompose_interval(shape, Interval{0, 1}), ValueError) << shape_to_string(shape);
  }
}

TEST(DecomposeInterval, RankZeroScalar) {
  const auto one = decompose_interval({}, Interval{0, 1});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].box, Box());
  EXPECT_EQ(one[0].local_start, 0);
  EXPECT_EQ(one[0].local_end(), 1);
  EXPECT_TRUE(decompose_interval({}, Interval{0, 0}).empty());
  EXPECT_TRUE(decompose_interval({}, Interval{1, 1}).empty());
  EXPECT_THROW(decompose_interval({}, Interval{0, 2}), ValueError);
}

TEST(DecomposeInterval, WorkedValuesFromRaggedCases) {
  {
    const auto b = decompose_interval({3, 4}, Interval{2, 8});
    const std::vector<FlatBox> want = {{Box({0, 2}, {1, 2}), 0}, {Box({1, 0}, {1, 4}), 2}};
    EXPECT_EQ(b, want);
  }
  {
    const auto b = decompose_interval({2, 3, 4}, Interval{5, 19});
    const std::vector<FlatBox> want = {{Box({0, 1, 1}, {1, 1, 3}), 0},
                                       {Box({0, 2, 0}, {1, 1, 4}), 3},
                                       {Box({1, 0, 0}, {1, 1, 4}), 7},
                                       {Box({1, 1, 0}, {1, 1, 3}), 11}};
    EXPECT_EQ(b, want);
  }
  {
    const auto b = decompose_interval({6, 4, 8}, Interval{0, 48});
    const std::vector<FlatBox> want = {{Box({0, 0, 0}, {1, 4, 8}), 0},
                                       {Box({1, 0, 0}, {1, 2, 8}), 32}};
    EXPECT_EQ(b, want);
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[0].local_end(), 32);
    EXPECT_EQ(b[1].local_end(), 48);
  }
  {
    const auto b = decompose_interval({6, 4, 8}, Interval{48, 192});
    const std::vector<FlatBox> want = {{Box({1, 2, 0}, {1, 2, 8}), 0},
                                       {Box({2, 0, 0}, {4, 4, 8}), 16}};
    EXPECT_EQ(b, want);
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[1].local_end(), 144);
  }
}

TEST(DecomposeInterval, Errors) {
  EXPECT_EQ(throws_with<ValueError>([] { decompose_interval({3, 4}, Interval{-1, 2}); },
                                    {"[-1, 2)", "[3,4]"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([] { decompose_interval({3, 4}, Interval{5, 2}); },
                                    {"[5, 2)"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([] { decompose_interval({3, 4}, Interval{0, 13}); },
                                    {"[0, 13)", "12"}),
            "");
  EXPECT_THROW(decompose_interval({3, -4}, Interval{0, 0}), ValueError);
}

// ---------------------------------------------------------------------------------
// RaggedShard intervals

struct IntervalCase {
  Shape shape;
  std::vector<int64_t> dims, units;
  std::vector<Interval> want;
};

TEST(RaggedInterval, CasesFromRaggedCasesJson) {
  const std::vector<IntervalCase> cases = {
      {{6, 4, 8}, {0, 1}, {1, 2}, {{0, 64}, {64, 192}}},
      {{10, 4}, {0, 1}, {2, 3, 0, 5}, {{0, 8}, {8, 20}, {20, 20}, {20, 40}}},
      {{6, 4, 8}, {0, 1}, {1, 3}, {{0, 48}, {48, 192}}},
  };
  for (const auto& c : cases) {
    const Placement p = RaggedShard(c.dims, c.units);
    EXPECT_EQ(ragged_intervals(c.shape, p), c.want) << p;
    for (std::size_t i = 0; i < c.want.size(); ++i)
      EXPECT_EQ(ragged_interval(c.shape, p, static_cast<int64_t>(i)), c.want[i]) << p << " " << i;
    EXPECT_NO_THROW(check_ragged(c.shape, p, static_cast<int64_t>(c.units.size())));
  }
}

// Every units vector of length 1..4 with entries 0..2, or of length 1..2 with entries
// 0..5 (not all zero).
std::vector<std::vector<int64_t>> all_units() {
  std::vector<std::vector<int64_t>> out;
  for (int len = 1; len <= 4; ++len) {
    const int64_t top = len <= 2 ? 5 : 2;
    std::vector<int64_t> u(len, 0);
    while (true) {
      int64_t sum = 0;
      for (auto x : u) sum += x;
      if (sum > 0) out.push_back(u);
      int k = len - 1;
      for (; k >= 0; --k) {
        if (++u[k] <= top) break;
        u[k] = 0;
      }
      if (k < 0) break;
    }
  }
  return out;
}

TEST(RaggedInterval, BruteForceTilingAndProportionality) {
  const auto units_list = all_units();
  int64_t checked = 0, rejected = 0;
  for (int64_t rank = 1; rank <= 3; ++rank) {
    for (const auto& shape : shapes_of_rank(rank, 24)) {
      const int64_t n = testutil::prod(shape);
      for (int64_t k = 1; k <= rank; ++k) {
        std::vector<int64_t> dims;
        for (int64_t d = 0; d < k; ++d) dims.push_back(d);
        int64_t prefix = 1;
        for (int64_t d = 0; d < k; ++d) prefix *= shape[d];
        for (const auto& units : units_list) {
          int64_t total = 0;
          for (auto x : units) total += x;
          const Placement p = RaggedShard(dims, units);
          if (prefix % total != 0) {
            // Not divisible: must throw (sampled: exceptions are slow and 78k of them
            // would dominate the binary's run time).
            if (++rejected % 16 == 0) {
              EXPECT_THROW(ragged_intervals(shape, p), ValueError);
            }
            continue;
          }
          ++checked;
          const auto ivs = ragged_intervals(shape, p);
          ASSERT_EQ(ivs.size(), units.size());
          int64_t at = 0;
          const int64_t suffix = n / prefix;
          for (std::size_t i = 0; i < ivs.size(); ++i) {
            ASSERT_EQ(ivs[i].start, at) << shape_to_string(shape) << " " << p << " index " << i;
            ASSERT_EQ(ivs[i].size() * total, units[i] * n) << shape_to_string(shape) << " " << p;
            // Whole prefix cells only: boundaries fall on multiples of the suffix numel.
            ASSERT_EQ(ivs[i].start % suffix, 0);
            ASSERT_EQ(ivs[i], ragged_interval(shape, p, static_cast<int64_t>(i)));
            at = ivs[i].end;
          }
          ASSERT_EQ(at, n) << shape_to_string(shape) << " " << p;
        }
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(RaggedInterval, Errors) {
  // 5 prefix cells are not divisible by 3 units.
  EXPECT_EQ(throws_with<ValueError>([] { ragged_interval({5, 2}, RaggedShard({0}, {1, 2}), 0); },
                                    {"5 prefix cells", "3 total units"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([] { ragged_intervals({5, 2}, RaggedShard({0}, {1, 2})); },
                                    {"5 prefix cells", "3 total units"}),
            "");
  // dims beyond the tensor's rank
  EXPECT_EQ(throws_with<ValueError>(
                [] { ragged_interval({6}, RaggedShard({0, 1}, {1, 2}), 0); }, {"[6]"}),
            "");
  EXPECT_THROW(ragged_interval({}, RaggedShard({0}, {1}), 0), ValueError);
  // index out of range
  EXPECT_EQ(throws_with<ValueError>(
                [] { ragged_interval({6, 4, 8}, RaggedShard({0, 1}, {1, 2}), 2); },
                {"index 2"}),
            "");
  EXPECT_THROW(ragged_interval({6, 4, 8}, RaggedShard({0, 1}, {1, 2}), -1), ValueError);
  // not a RaggedShard
  EXPECT_EQ(throws_with<ValueError>([] { ragged_interval({6, 4}, Shard(0), 0); },
                                    {"S(0)", "not a RaggedShard"}),
            "");
  EXPECT_THROW(ragged_intervals({6, 4}, Replicate()), ValueError);
  EXPECT_THROW(ragged_intervals({6, 4}, Partial()), ValueError);
  EXPECT_THROW(check_ragged({6, 4}, Shard(1), 2), ValueError);
  // bad shape
  EXPECT_THROW(ragged_interval({6, -4}, RaggedShard({0}, {1, 2}), 0), ValueError);
  // mesh size mismatch: 3 local_units on a mesh dim of 2
  EXPECT_EQ(throws_with<ValueError>(
                [] { check_ragged({6, 4, 8}, RaggedShard({0}, {1, 1, 1}), 2); },
                {"3 local_units", "2 ranks"}),
            "");
  EXPECT_NO_THROW(check_ragged({6, 4, 8}, RaggedShard({0}, {1, 1, 1}), 3));
  EXPECT_NO_THROW(check_ragged({6, 4, 8}, RaggedShard({0}, {1, 1, 1}), -1));  // mesh unknown
  EXPECT_EQ(throws_with<ValueError>(
                [] { check_ragged({5, 2}, RaggedShard({0}, {1, 2}), 2); }, {"5 prefix cells"}),
            "");
}

// ---------------------------------------------------------------------------------
// chunk_range (torch.chunk semantics)

TEST(ChunkRange, MatchesTorchChunkForSmallSizes) {
  for (int64_t n = 0; n <= 12; ++n) {
    for (int64_t k = 1; k <= 6; ++k) {
      // torch.chunk: chunk = the smallest c with c*k >= n; pieces [0,c), [c,2c), ...
      // until n is reached; missing trailing pieces are empty at the end.
      int64_t chunk = 0;
      while (chunk * k < n) ++chunk;
      std::vector<Interval> pieces;
      for (int64_t s = 0; s < n; s += chunk) pieces.push_back({s, std::min(n, s + chunk)});
      while (static_cast<int64_t>(pieces.size()) < k) pieces.push_back({n, n});
      int64_t covered = 0;
      for (int64_t i = 0; i < k; ++i) {
        EXPECT_EQ(chunk_range(n, k, i), pieces[i]) << "n=" << n << " k=" << k << " i=" << i;
        covered += chunk_range(n, k, i).size();
      }
      EXPECT_EQ(covered, n);
    }
  }
  // The uneven example of the docs: 5 over 2 -> 3, 2; 2 over 3 -> 1, 1, 0; 6 over 4 -> 2,2,2,0.
  EXPECT_EQ(chunk_range(5, 2, 0), (Interval{0, 3}));
  EXPECT_EQ(chunk_range(5, 2, 1), (Interval{3, 5}));
  EXPECT_EQ(chunk_range(2, 3, 2), (Interval{2, 2}));
  EXPECT_EQ(chunk_range(6, 4, 3), (Interval{6, 6}));
}

TEST(ChunkRange, Errors) {
  EXPECT_EQ(throws_with<ValueError>([] { chunk_range(-1, 2, 0); }, {"-1"}), "");
  EXPECT_EQ(throws_with<ValueError>([] { chunk_range(4, 0, 0); }, {"0 pieces"}), "");
  EXPECT_EQ(throws_with<ValueError>([] { chunk_range(4, -3, 0); }, {"-3"}), "");
  EXPECT_EQ(throws_with<ValueError>([] { chunk_range(4, 2, 2); }, {"index 2", "[0, 2)"}), "");
  EXPECT_THROW(chunk_range(4, 2, -1), ValueError);
}

// ---------------------------------------------------------------------------------
// intersect, contains, relative_to

using Coord = std::vector<int64_t>;

std::set<Coord> elements(const Box& b) {
  std::set<Coord> out;
  for (auto s : b.sizes)
    if (s <= 0) return out;
  Coord idx(b.sizes.size(), 0);
  while (true) {
    Coord c(b.sizes.size());
    for (std::size_t d = 0; d < c.size(); ++d) c[d] = b.offsets[d] + idx[d];
    out.insert(c);
    int64_t d = static_cast<int64_t>(idx.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < b.sizes[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

Box random_box(std::mt19937& rng, int64_t rank) {
  std::uniform_int_distribution<int64_t> off(0, 5), size(0, 4);
  Box b;
  for (int64_t d = 0; d < rank; ++d) {
    b.offsets.push_back(off(rng));
    // mostly non-empty boxes
    int64_t s = size(rng);
    if (s == 0 && off(rng) != 0) s = 1;
    b.sizes.push_back(s);
  }
  return b;
}

TEST(BoxIntersect, BruteForceRandomBoxes) {
  std::mt19937 rng(20240601);
  int64_t overlapping = 0;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (int trial = 0; trial < 1500; ++trial) {
      const Box a = random_box(rng, rank), b = random_box(rng, rank);
      const auto ea = elements(a), eb = elements(b);
      std::set<Coord> both;
      for (const auto& c : ea)
        if (eb.count(c)) both.insert(c);
      const auto got = intersect(a, b);
      if (both.empty()) {
        EXPECT_FALSE(got.has_value()) << a << " & " << b << " gave " << *got;
      } else {
        ++overlapping;
        ASSERT_TRUE(got.has_value()) << a << " & " << b;
        EXPECT_EQ(elements(*got), both) << a << " & " << b;
        EXPECT_EQ(intersect(b, a), got);
      }
      // contains: inner inside outer iff every element of inner is in outer.
      bool inside = true;
      for (const auto& c : ea) inside = inside && eb.count(c) > 0;
      EXPECT_EQ(b.contains(a), inside) << b << " contains " << a;
      if (inside) {
        const Box rel = relative_to(a, b);
        EXPECT_EQ(rel.sizes, a.sizes);
        for (int64_t d = 0; d < rank; ++d) EXPECT_EQ(rel.offsets[d], a.offsets[d] - b.offsets[d]);
      } else {
        EXPECT_THROW(relative_to(a, b), ValueError) << a << " in " << b;
      }
    }
  }
  EXPECT_GT(overlapping, 500);
}

TEST(BoxIntersect, ExhaustiveOneDimensional) {
  for (int64_t ao = 0; ao <= 4; ++ao)
    for (int64_t as = 0; as <= 4; ++as)
      for (int64_t bo = 0; bo <= 4; ++bo)
        for (int64_t bs = 0; bs <= 4; ++bs) {
          const Box a({ao}, {as}), b({bo}, {bs});
          std::set<Coord> both;
          for (const auto& c : elements(a))
            if (elements(b).count(c)) both.insert(c);
          const auto got = intersect(a, b);
          ASSERT_EQ(got.has_value(), !both.empty()) << a << " & " << b;
          if (got) {
            EXPECT_EQ(elements(*got), both);
          }
        }
}

TEST(BoxIntersect, RankZeroAndErrors) {
  const auto s = intersect(Box(), Box());
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank(), 0);
  EXPECT_EQ(s->numel(), 1);
  EXPECT_EQ(throws_with<ValueError>([] { intersect(Box({0}, {2}), Box({0, 0}, {2, 2})); },
                                    {"rank 1", "rank 2"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([] { relative_to(Box({3}, {2}), Box({0}, {4})); },
                                    {"((3,), (2,))", "((0,), (4,))"}),
            "");
}

TEST(BoxContains, EdgeCases) {
  const Box outer({1, 1}, {2, 3});
  EXPECT_TRUE(outer.contains(outer));
  EXPECT_TRUE(outer.contains(Box({1, 2}, {2, 2})));
  EXPECT_FALSE(outer.contains(Box({0, 1}, {2, 2})));
  EXPECT_FALSE(outer.contains(Box({1, 1}, {2, 4})));
  // Empty boxes are inside everything, whatever their offsets or rank.
  EXPECT_TRUE(outer.contains(Box({9, 9}, {0, 5})));
  EXPECT_TRUE(outer.contains(Box({9}, {0})));
  // Rank mismatch of a non-empty box.
  EXPECT_FALSE(outer.contains(Box({1}, {1})));
  // An empty outer box holds only empty boxes.
  EXPECT_FALSE(Box({0}, {0}).contains(Box({0}, {1})));
  EXPECT_TRUE(Box().contains(Box()));
  const Box rel = relative_to(Box({2, 3}, {1, 1}), outer);
  EXPECT_EQ(rel, Box({1, 2}, {1, 1}));
}

// Found by read_plan_fuzz / chunk_reader_fuzz (hyper/dcp/fuzz): CheckpointReader::read checks a
// caller's target box with contains(); malformed boxes must be refused without overflow.
TEST(BoxContains, MalformedAndHugeBoxes) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  const Box whole = Box::full({4, 4});
  // A negative size is no box at all, whatever the product of the sizes.
  EXPECT_FALSE(whole.contains(Box({0, 0}, {-1, 2})));
  EXPECT_FALSE(whole.contains(Box({0, 0}, {-1, -1})));  // "numel" 1
  EXPECT_FALSE(whole.contains(Box({0, 0}, {kMin, kMin})));
  EXPECT_FALSE(whole.contains(Box({0}, {-3})));  // also of another rank
  // Ends past INT64_MAX must not wrap around to "inside".
  EXPECT_FALSE(whole.contains(Box({kMax, 0}, {kMax, 1})));
  EXPECT_FALSE(whole.contains(Box({2, 0}, {kMax, 1})));
  EXPECT_FALSE(whole.contains(Box({kMin, 0}, {1, 1})));
  // Offsets and sizes of different lengths.
  EXPECT_FALSE(whole.contains(Box({0}, {1, 1})));
  // A huge outer box (no wrap-around on its side either).
  EXPECT_TRUE(Box({kMax - 1}, {1}).contains(Box({kMax - 1}, {1})));
  EXPECT_FALSE(Box({kMax - 1}, {1}).contains(Box({kMax - 1}, {2})));
  // Empty boxes with non-negative sizes stay inside everything, even with huge extents.
  EXPECT_TRUE(whole.contains(Box({kMax, kMax}, {0, kMax})));
  EXPECT_TRUE(whole.contains(Box({0, 0, 0}, {kMax, kMax, 0})));
}

// Found by read_plan_fuzz (hyper/dcp/fuzz): check_chunks_tile asked a file's chunk box
// empty(), which multiplied its sizes (signed overflow, UB). Emptiness is a zero size; a
// product that does not fit int64_t is a ValueError naming the box.
TEST(BoxNumel, HugeBoxesNeverOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t k32 = int64_t{1} << 32;
  // 2^64 elements: the product wraps to 0, yet the box is not empty.
  EXPECT_FALSE(Box({0, 0}, {k32, k32}).empty());
  EXPECT_FALSE(Box({0, 0}, {kMax, kMax}).empty());
  EXPECT_TRUE(Box({0, 0, 0}, {kMax, kMax, 0}).empty());
  EXPECT_TRUE(Box({5}, {0}).empty());
  EXPECT_FALSE(Box().empty());  // a scalar holds one element
  EXPECT_EQ(Box().numel(), 1);
  EXPECT_EQ(Box({0}, {kMax}).numel(), kMax);
  EXPECT_EQ(Box({0, 0}, {k32 / 4, k32}).numel(), int64_t{1} << 62);
  EXPECT_EQ(Box({0, 0}, {-2, 3}).numel(), -6);  // (not a valid box; no overflow either)
  EXPECT_EQ(throws_with<ValueError>([&] { (void)Box({0, 0}, {k32, k32}).numel(); },
                                    {"box ((0, 0), (4294967296, 4294967296))", "int64_t"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { (void)Box({1, 2, 3}, {kMax, kMax, 0}).numel(); },
                                    {"(9223372036854775807, 9223372036854775807, 0)"}),
            "");
  const FlatBox huge{Box({0, 0}, {k32, k32}), 0};
  EXPECT_THROW((void)huge.local_end(), ValueError);
}

TEST(IntervalIntersect, BruteForce) {
  for (int64_t a0 = 0; a0 <= 6; ++a0)
    for (int64_t a1 = a0; a1 <= 6; ++a1)
      for (int64_t b0 = 0; b0 <= 6; ++b0)
        for (int64_t b1 = b0; b1 <= 6; ++b1) {
          std::vector<int64_t> both;
          for (int64_t x = 0; x < 6; ++x)
            if (x >= a0 && x < a1 && x >= b0 && x < b1) both.push_back(x);
          const Interval got = intersect(Interval{a0, a1}, Interval{b0, b1});
          std::vector<int64_t> g;
          for (int64_t x = got.start; x < got.end; ++x) g.push_back(x);
          EXPECT_EQ(g, both) << a0 << a1 << b0 << b1;
          EXPECT_LE(got.start, got.end);
          if (both.empty()) {
            EXPECT_TRUE(got.empty());
            EXPECT_EQ(got.start, std::max(a0, b0));  // [max, max) when disjoint
          }
        }
}

// ---------------------------------------------------------------------------------
// numel, check_shape, strides, text forms

TEST(Shape, NumelAndCheckShape) {
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({7}), 7);
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_EQ(numel({2, 0, 4}), 0);
  EXPECT_EQ(numel({int64_t{1} << 31, int64_t{1} << 30}), int64_t{1} << 61);
  EXPECT_EQ(throws_with<ValueError>([] { numel({2, -3}); }, {"negative size -3", "dim 1"}), "");
  EXPECT_EQ(throws_with<ValueError>([] { check_shape({4, -1}, "global shape"); },
                                    {"global shape", "[4,-1]"}),
            "");
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(throws_with<ValueError>([&] { numel({big, big, 2}); }, {"2^62"}), "");
  EXPECT_THROW(check_shape({big, big}), ValueError);                    // 2^64
  EXPECT_THROW(check_shape({(int64_t{1} << 31) + 1, int64_t{1} << 31}), ValueError);
  EXPECT_THROW(numel({INT64_MAX, 3}), ValueError);
  // A zero-size dim does not excuse an absurd extent elsewhere, in either order
  // (strides of such a shape would overflow).
  EXPECT_THROW(check_shape({big, big, 0}), ValueError);
  EXPECT_THROW(check_shape({0, big, big}), ValueError);
  EXPECT_NO_THROW(check_shape({0, 5, 7}));
}

TEST(Shape, ContiguousStrides) {
  EXPECT_EQ(contiguous_strides({}), std::vector<int64_t>{});
  EXPECT_EQ(contiguous_strides({5}), std::vector<int64_t>{1});
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (std::vector<int64_t>{3, 3, 1}));  // as torch
}

TEST(TextForms, IntervalBoxFlatBox) {
  EXPECT_EQ((Interval{2, 8}).to_string(), "[2, 8)");
  EXPECT_EQ(Box({0, 2}, {1, 2}).to_string(), "((0, 2), (1, 2))");
  EXPECT_EQ(Box({3}, {4}).to_string(), "((3,), (4,))");
  EXPECT_EQ((FlatBox{Box({1, 0}, {1, 4}), 2}).to_string(), "((1, 0), (1, 4))@[2, 6)");
  std::ostringstream os;
  os << Box({0, 2}, {1, 2}) << " " << Interval{2, 8};
  EXPECT_EQ(os.str(), "((0, 2), (1, 2)) [2, 8)");
  EXPECT_EQ(Box::full({3, 4}), Box({0, 0}, {3, 4}));
  EXPECT_TRUE(Box({0, 0}, {3, 0}).empty());
  EXPECT_EQ(Box().numel(), 1);
  EXPECT_TRUE((Interval{3, 3}).empty());
  EXPECT_NE((Interval{3, 3}), (Interval{3, 4}));
}

// ---------------------------------------------------------------------------------
// for_each_run

// Maximal runs of an increasing list of flat offsets.
std::vector<std::pair<int64_t, int64_t>> maximal_runs(const std::vector<int64_t>& flat) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (auto f : flat) {
    if (!out.empty() && out.back().first + out.back().second == f)
      ++out.back().second;
    else
      out.push_back({f, 1});
  }
  return out;
}

TEST(ForEachRun, ExhaustiveSubBoxesOfShapesUpToRank4) {
  int64_t boxes = 0;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (const auto& shape : shapes_of_rank(rank, rank <= 2 ? 24 : 16)) {
      // every non-empty sub-box: per dim, every [lo, hi) with lo < hi
      std::vector<std::vector<std::pair<int64_t, int64_t>>> per_dim(rank);
      for (int64_t d = 0; d < rank; ++d)
        for (int64_t lo = 0; lo < shape[d]; ++lo)
          for (int64_t hi = lo + 1; hi <= shape[d]; ++hi) per_dim[d].push_back({lo, hi - lo});
      std::vector<std::size_t> pick(rank, 0);
      while (true) {
        Box sub;
        for (int64_t d = 0; d < rank; ++d) {
          sub.offsets.push_back(per_dim[d][pick[d]].first);
          sub.sizes.push_back(per_dim[d][pick[d]].second);
        }
        ++boxes;
        std::vector<std::pair<int64_t, int64_t>> got;
        for_each_run(shape, sub, [&](int64_t off, int64_t len) { got.push_back({off, len}); });
        const auto want = maximal_runs(box_flat_indices(shape, sub));
        ASSERT_EQ(got, want) << "shape " << shape_to_string(shape) << " sub " << sub;
        int64_t d = rank - 1;
        for (; d >= 0; --d) {
          if (++pick[d] < per_dim[d].size()) break;
          pick[d] = 0;
        }
        if (d < 0) break;
      }
    }
  }
  EXPECT_GT(boxes, 20000);
}

TEST(ForEachRun, RandomSubBoxesOfLargerBuffers) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int64_t rank = 1 + trial % 4;
    Shape outer;
    Box sub;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t n = std::uniform_int_distribution<int64_t>(1, 7)(rng);
      const int64_t lo = std::uniform_int_distribution<int64_t>(0, n - 1)(rng);
      const int64_t size = std::uniform_int_distribution<int64_t>(1, n - lo)(rng);
      outer.push_back(n);
      sub.offsets.push_back(lo);
      sub.sizes.push_back(size);
    }
    std::vector<std::pair<int64_t, int64_t>> got;
    for_each_run(outer, sub, [&](int64_t off, int64_t len) { got.push_back({off, len}); });
    ASSERT_EQ(got, maximal_runs(box_flat_indices(outer, sub)))
        << "outer " << shape_to_string(outer) << " sub " << sub;
  }
}

TEST(ForEachRun, EmptyRankZeroAndErrors) {
  int calls = 0;
  for_each_run({3, 4}, Box({1, 1}, {0, 2}), [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  std::vector<std::pair<int64_t, int64_t>> got;
  for_each_run({}, Box(), [&](int64_t off, int64_t len) { got.push_back({off, len}); });
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 1}}));
  got.clear();
  for_each_run({3, 4}, Box({0, 0}, {3, 4}), [&](int64_t o, int64_t l) { got.push_back({o, l}); });
  EXPECT_EQ(got, (std::vector<std::pair<int64_t, int64_t>>{{0, 12}}));
  auto noop = [](int64_t, int64_t) {};
  EXPECT_EQ(throws_with<ValueError>([&] { for_each_run({3, 4}, Box({0}, {2}), noop); },
                                    {"rank 1", "[3,4]"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { for_each_run({3, 4}, Box({2, 1}, {2, 1}), noop); },
                                    {"outside", "[3,4]"}),
            "");
  EXPECT_THROW(for_each_run({3, 4}, Box({0, 3}, {1, 2}), noop), ValueError);
  EXPECT_THROW(for_each_run({3, 4}, Box({-1, 0}, {1, 2}), noop), ValueError);
}

}  // namespace
}  // namespace hyper
