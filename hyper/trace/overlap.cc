#include "hyper/trace/overlap.h"

#include <algorithm>
#include <map>
#include <utility>

namespace hyper::trace {

std::vector<Interval> interval_union(std::vector<Interval> intervals) {
  intervals.erase(std::remove_if(intervals.begin(), intervals.end(),
                                 [](const Interval& i) { return !(i.end > i.begin); }),
                  intervals.end());
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const auto& i : intervals) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::vector<Interval> interval_intersection(const std::vector<Interval>& a,
                                            const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].begin, b[j].begin);
    const double hi = std::min(a[i].end, b[j].end);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

double interval_measure(const std::vector<Interval>& intervals) {
  double total = 0;
  for (const auto& i : intervals) total += i.length();
  return total;
}

std::vector<std::pair<int, RankIntervals>> intervals_by_rank(
    const std::vector<TimelineEvent>& events) {
  std::map<int, RankIntervals> ranks;
  for (const auto& e : events) {
    auto& r = ranks[e.rank];
    (e.kind == RegionKind::kComm ? r.comm : r.compute).push_back({e.start_us, e.end_us});
  }
  std::vector<std::pair<int, RankIntervals>> out;
  for (auto& [rank, r] : ranks) {
    r.comm = interval_union(std::move(r.comm));
    r.compute = interval_union(std::move(r.compute));
    out.emplace_back(rank, std::move(r));
  }
  return out;
}

OverlapStats compute_overlap(const std::vector<TimelineEvent>& events, std::optional<int> rank) {
  OverlapStats stats;
  for (const auto& [r, iv] : intervals_by_rank(events)) {
    if (rank && *rank != r) continue;
    stats.comm_us += interval_measure(iv.comm);
    stats.compute_us += interval_measure(iv.compute);
    stats.hidden_us += interval_measure(iv.hidden());
  }
  return stats;
}

}  // namespace hyper::trace
