#pragma once
/// \file axis.h
/// Tick positions and tick labels for the trace module's pictures. Internal.

#include <string>
#include <vector>

namespace hyper::trace::internal {

/// A "nice" step (1, 2 or 5 times a power of ten) giving at most `max_ticks` ticks over
/// `span` (> 0).
double nice_step(double span, int max_ticks);

/// The multiples of nice_step(hi - lo, max_ticks) in [lo, hi].
std::vector<double> linear_ticks(double lo, double hi, int max_ticks);

/// Ticks in [lo, hi] (0 < lo < hi) for a log axis: 1, 2, 5 per decade when that gives at
/// most `max_ticks`, else every k-th decade; with `binary`, every k-th power of two. When
/// fewer than three fall inside, linear_ticks (at most 6).
std::vector<double> log_ticks(double lo, double hi, bool binary, int max_ticks);

/// "250 ms", "1.5 s", "40 µs" for a time in seconds, with at most `digits` significant digits.
std::string seconds_label(double s, int digits = 6);
/// "64 MiB", "512 KiB", "3 B" for a byte count (binary units).
std::string bytes_label(double b);
/// "%g".
std::string number_label(double v);

}  // namespace hyper::trace::internal
