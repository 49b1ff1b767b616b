#pragma once
/// \file overlap.h
/// The share of communication time hidden behind computation, from recorded regions.
///
/// Per rank, then summed over ranks: C = union of the rank's communication intervals
/// [issue, completion), P = union of its compute intervals; hidden = |C ∩ P|, total = |C|,
/// fraction = Σ hidden / Σ total (0 when there is no communication). Unions make concurrent
/// collectives count once. Worked example, one rank: comm [0,10) and [5,20) → C = [0,20),
/// |C| = 20; compute [2,4), [8,12) → P ∩ C = [2,4) ∪ [8,12), 6 µs hidden → fraction 0.3.

#include <optional>
#include <utility>
#include <vector>

#include "hyper/trace/event.h"

namespace hyper::trace {

/// A half-open interval [begin, end) of microseconds.
struct Interval {
  double begin = 0;
  double end = 0;
  double length() const { return end > begin ? end - begin : 0; }
  bool operator==(const Interval& o) const { return begin == o.begin && end == o.end; }
};

/// Sorted, disjoint, non-adjacent union of `intervals` (empty ones dropped).
std::vector<Interval> interval_union(std::vector<Interval> intervals);
/// Intersection of two unions (each sorted and disjoint, as interval_union returns).
std::vector<Interval> interval_intersection(const std::vector<Interval>& a,
                                            const std::vector<Interval>& b);
/// Total length of a sorted disjoint set.
double interval_measure(const std::vector<Interval>& intervals);

/// One rank's regions as unions: communication and computation.
struct RankIntervals {
  std::vector<Interval> comm, compute;
  /// comm ∩ compute: the communication hidden by computation.
  std::vector<Interval> hidden() const { return interval_intersection(comm, compute); }
};
/// Per rank (ascending), the unions of `events`' comm and compute intervals.
std::vector<std::pair<int, RankIntervals>> intervals_by_rank(
    const std::vector<TimelineEvent>& events);

/// Communication time hidden behind computation.
struct OverlapStats {
  double comm_us = 0;     ///< Σ over ranks of |union of comm intervals|
  double hidden_us = 0;   ///< Σ over ranks of |comm union ∩ compute union|
  double compute_us = 0;  ///< Σ over ranks of |union of compute intervals|
  /// hidden_us / comm_us, 0 when comm_us == 0.
  double fraction() const { return comm_us > 0 ? hidden_us / comm_us : 0.0; }
};

/// Overlap of `events` (all ranks, or only `rank`). See the file comment.
OverlapStats compute_overlap(const std::vector<TimelineEvent>& events,
                             std::optional<int> rank = std::nullopt);

}  // namespace hyper::trace
