#pragma once
/// \file rows.h
/// The rows of a step's pictures (Chrome trace threads, step picture rows). Internal.

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hyper/trace/event.h"

namespace hyper::trace::internal {

struct Row {
  int rank;
  std::string label;  ///< TimelineEvent::row()
  int tid;            ///< 1-based within the rank
};

/// Rows in order: ranks ascending; within a rank compute rows first, then comm rows, each in
/// order of first appearance. `index` maps (rank, label) to the row's position.
std::vector<Row> make_rows(const std::vector<TimelineEvent>& events,
                           std::map<std::pair<int, std::string>, size_t>* index);

}  // namespace hyper::trace::internal
