#include "hyper/trace/chrome_trace.h"

#include <nlohmann/json.hpp>

#include <map>

#include "hyper/trace/image.h"
#include "hyper/trace/internal/rows.h"

namespace hyper::trace {

std::string to_chrome_trace(const std::vector<TimelineEvent>& events) {
  using nlohmann::json;
  std::map<std::pair<int, std::string>, size_t> index;
  const auto rows = internal::make_rows(events, &index);
  json trace_events = json::array();
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto& row = rows[i];
    if (i == 0 || rows[i - 1].rank != row.rank) {
      trace_events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", row.rank},
                              {"tid", 0}, {"args", {{"name", "rank " + std::to_string(row.rank)}}}});
    }
    trace_events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", row.rank},
                            {"tid", row.tid}, {"args", {{"name", row.label}}}});
    trace_events.push_back({{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", row.rank},
                            {"tid", row.tid}, {"args", {{"sort_index", row.tid}}}});
  }
  for (const auto& e : events) {
    const auto& row = rows[index.at({e.rank, e.row()})];
    trace_events.push_back({{"name", e.name},
                            {"cat", to_string(e.kind)},
                            {"ph", "X"},
                            {"ts", e.start_us},
                            {"dur", e.duration_us()},
                            {"pid", e.rank},
                            {"tid", row.tid},
                            {"args", {{"kind", to_string(e.kind)}, {"thread", e.thread}}}});
  }
  const json trace = {{"displayTimeUnit", "ms"}, {"traceEvents", std::move(trace_events)}};
  // Invalid UTF-8 in a name is replaced, not thrown on: a trace is diagnostics.
  return trace.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events) {
  write_file(path, to_chrome_trace(events), "Chrome trace");
}

}  // namespace hyper::trace
