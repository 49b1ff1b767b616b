#pragma once
/// \file chrome_trace.h
/// Recorded regions as a Chrome trace (JSON; open it in https://ui.perfetto.dev or
/// chrome://tracing): one process per rank ("rank N"), one thread per row (compute rows
/// before comm rows), "X" (complete) events with ts/dur in microseconds, cat = kind,
/// args {kind, thread}.

#include <string>
#include <vector>

#include "hyper/trace/event.h"

namespace hyper::trace {

/// The trace's JSON text.
std::string to_chrome_trace(const std::vector<TimelineEvent>& events);

/// Writes to_chrome_trace(events) to `path`; throws std::runtime_error naming the path on
/// I/O failure.
void write_chrome_trace(const std::string& path, const std::vector<TimelineEvent>& events);

}  // namespace hyper::trace
