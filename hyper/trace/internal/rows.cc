#include "hyper/trace/internal/rows.h"

#include <algorithm>
#include <set>

namespace hyper::trace::internal {

std::vector<Row> make_rows(const std::vector<TimelineEvent>& events,
                           std::map<std::pair<int, std::string>, size_t>* index) {
  std::map<int, std::vector<std::pair<int, std::string>>> per_rank;  // (kind order, label)
  std::set<std::pair<int, std::string>> seen;
  for (const auto& e : events) {
    if (!seen.insert({e.rank, e.row()}).second) continue;
    per_rank[e.rank].push_back({e.kind == RegionKind::kComm ? 1 : 0, e.row()});
  }
  std::vector<Row> rows;
  for (auto& [rank, labels] : per_rank) {
    std::stable_sort(labels.begin(), labels.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    int tid = 1;
    for (const auto& [order, label] : labels) {
      (*index)[{rank, label}] = rows.size();
      rows.push_back({rank, label, tid++});
    }
  }
  return rows;
}

}  // namespace hyper::trace::internal
