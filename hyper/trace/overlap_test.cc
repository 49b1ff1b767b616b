// Overlap arithmetic: interval unions and intersections by hand, hand-made timelines, and
// every small timeline on an integer grid against a brute-force oracle that counts unit
// cells (no unions, no intersections).
#include "hyper/trace/overlap.h"
#include "hyper/trace/testing_util.h"

#include <gtest/gtest.h>

#include <random>

namespace hyper::trace {
namespace {

using testing::ev;
constexpr auto kComm = RegionKind::kComm;
constexpr auto kCompute = RegionKind::kCompute;

TEST(TraceOverlap, IntervalArithmetic) {
  using V = std::vector<Interval>;
  EXPECT_EQ(interval_union({{5, 7}, {0, 2}, {1, 3}, {3, 4}, {9, 9}, {8, 6}}), (V{{0, 4}, {5, 7}}));
  EXPECT_EQ(interval_union({}), V{});
  EXPECT_EQ(interval_intersection({{0, 4}, {5, 7}}, {{2, 6}, {6.5, 10}}),
            (V{{2, 4}, {5, 6}, {6.5, 7}}));
  EXPECT_EQ(interval_intersection({{0, 1}}, {{1, 2}}), V{});  // half-open
  EXPECT_DOUBLE_EQ(interval_measure({{2, 4}, {5, 6}, {6.5, 7}}), 3.5);
}

TEST(TraceOverlap, None) {
  auto s = compute_overlap({ev("mm", kCompute, 0, 0, 10), ev("ag", kComm, 0, 10, 15),
                            ev("mm2", kCompute, 0, 15, 20)});
  EXPECT_DOUBLE_EQ(s.comm_us, 5);
  EXPECT_DOUBLE_EQ(s.hidden_us, 0);
  EXPECT_DOUBLE_EQ(s.compute_us, 15);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.0);
  EXPECT_DOUBLE_EQ(compute_overlap({}).fraction(), 0.0);  // no communication at all
  EXPECT_DOUBLE_EQ(compute_overlap({ev("mm", kCompute, 0, 0, 1)}).fraction(), 0.0);
}

TEST(TraceOverlap, Full) {
  auto s = compute_overlap({ev("ag", kComm, 0, 2, 8), ev("mm", kCompute, 0, 0, 10)});
  EXPECT_DOUBLE_EQ(s.fraction(), 1.0);
  // Covered by two adjacent compute regions on different rows.
  auto a = ev("a", kCompute, 1, 0, 5), b = ev("b", kCompute, 1, 5, 10);
  a.stream = "main", b.stream = "side";
  s = compute_overlap({ev("ag", kComm, 1, 2, 8), a, b});
  EXPECT_DOUBLE_EQ(s.fraction(), 1.0);
}

TEST(TraceOverlap, PartialWorkedExample) {
  // The header's example: C = [0,20), hidden = [2,4) + [8,12) = 6 -> 0.3.
  auto s = compute_overlap({ev("ag", kComm, 0, 0, 10), ev("rs", kComm, 0, 5, 20),
                            ev("x", kCompute, 0, 2, 4), ev("y", kCompute, 0, 8, 12)});
  EXPECT_DOUBLE_EQ(s.comm_us, 20);
  EXPECT_DOUBLE_EQ(s.hidden_us, 6);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.3);
}

TEST(TraceOverlap, IsPerRank) {
  // Rank 1's compute does not hide rank 0's communication.
  std::vector<TimelineEvent> events = {ev("ag", kComm, 0, 0, 10), ev("mm", kCompute, 1, 0, 10),
                                       ev("ag", kComm, 1, 0, 10)};
  auto s = compute_overlap(events);
  EXPECT_DOUBLE_EQ(s.comm_us, 20);
  EXPECT_DOUBLE_EQ(s.hidden_us, 10);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.5);
  EXPECT_DOUBLE_EQ(compute_overlap(events, 0).fraction(), 0.0);
  EXPECT_DOUBLE_EQ(compute_overlap(events, 1).fraction(), 1.0);
}

TEST(TraceOverlap, MatchesUnitCellCountOnRandomGrids) {
  // Oracle: on an integer grid of 24 µs, a unit cell [t, t+1) of a rank is "comm" when some
  // comm event of that rank covers it, "compute" likewise; comm_us counts comm cells, hidden_us
  // cells that are both.
  std::mt19937 rng(12);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<TimelineEvent> events;
    const int n = std::uniform_int_distribution<int>(0, 7)(rng);
    for (int i = 0; i < n; ++i) {
      const int a = std::uniform_int_distribution<int>(0, 23)(rng);
      const int b = std::uniform_int_distribution<int>(a, 24)(rng);
      events.push_back(ev("e", rng() % 2 ? kComm : kCompute, static_cast<int>(rng() % 3), a, b));
    }
    double comm = 0, hidden = 0, compute = 0;
    for (int rank = 0; rank < 3; ++rank) {
      for (int t = 0; t < 24; ++t) {
        bool c = false, p = false;
        for (const auto& e : events) {
          const bool covers = e.rank == rank && e.start_us <= t && t + 1 <= e.end_us;
          (e.kind == kComm ? c : p) |= covers;
        }
        comm += c, compute += p, hidden += c && p;
      }
    }
    const auto s = compute_overlap(events);
    ASSERT_DOUBLE_EQ(s.comm_us, comm) << "trial " << trial;
    ASSERT_DOUBLE_EQ(s.compute_us, compute) << "trial " << trial;
    ASSERT_DOUBLE_EQ(s.hidden_us, hidden) << "trial " << trial;
  }
}

}  // namespace
}  // namespace hyper::trace
