#pragma once
/// \file event.h
/// One recorded region of a step: a compute region or a collective (issue to completion).

#include <string>

namespace hyper::trace {

enum class RegionKind { kCompute, kComm };
/// "compute" / "comm".
const char* to_string(RegionKind kind);

/// One recorded region. Times are microseconds since the recorder's origin.
struct TimelineEvent {
  std::string name;
  RegionKind kind = RegionKind::kCompute;
  int rank = 0;
  /// Row within the rank (e.g. "main", "comm"); empty means to_string(kind).
  std::string stream;
  double start_us = 0;  ///< issue / start
  double end_us = 0;    ///< completion / end (>= start_us)
  int thread = 0;       ///< small ordinal of the recording thread (order of first use)

  double duration_us() const { return end_us - start_us; }
  /// The row label: stream, or to_string(kind) when stream is empty.
  std::string row() const;
};

}  // namespace hyper::trace
