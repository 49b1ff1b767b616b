#include "hyper/trace/internal/axis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace hyper::trace::internal {
namespace {

/// m * 10^e, correctly rounded (so 2 * 10^-3 is the literal 2e-3).
double decade(double m, int e) {
  double p = 1;
  for (int i = 0; i < (e < 0 ? -e : e); ++i) p *= 10;
  return e < 0 ? m / p : m * p;
}

/// "<v> <unit>" with at most `digits` significant digits.
std::string fmt(double v, const char* unit, int digits = 6) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g %s", digits, v, unit);
  return buf;
}

}  // namespace

double nice_step(double span, int max_ticks) {
  const double raw = span / std::max(1, max_ticks);
  const double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * p >= raw * (1 - 1e-9)) return m * p;
  }
  return 10 * p;
}

std::vector<double> linear_ticks(double lo, double hi, int max_ticks) {
  const double step = nice_step(hi - lo, max_ticks);
  std::vector<double> t;
  for (double k = std::ceil(lo / step - 1e-9); k * step <= hi + 1e-9 * step; k += 1) {
    t.push_back(std::abs(k * step) < 1e-12 * step ? 0.0 : k * step);
  }
  return t;
}

std::vector<double> log_ticks(double lo, double hi, bool binary, int max_ticks) {
  std::vector<double> t;
  const double eps = 1e-9;
  if (binary) {
    const int a = static_cast<int>(std::ceil(std::log2(lo) - eps));
    const int b = static_cast<int>(std::floor(std::log2(hi) + eps));
    const int gaps = std::max(1, max_ticks - 1);
    const int step = std::max(1, (b - a + gaps - 1) / gaps);
    for (int e = a; e <= b; e += step) t.push_back(std::ldexp(1.0, e));
  } else {
    const int a = static_cast<int>(std::floor(std::log10(lo) + eps));
    const int b = static_cast<int>(std::ceil(std::log10(hi) - eps));
    auto in_range = [&](double v) { return v >= lo * (1 - eps) && v <= hi * (1 + eps); };
    for (int e = a; e <= b; ++e) {  // 1, 2, 5 per decade when they are few enough
      for (double m : {1.0, 2.0, 5.0}) {
        if (in_range(decade(m, e))) t.push_back(decade(m, e));
      }
    }
    if (static_cast<int>(t.size()) > max_ticks) {  // else every k-th decade
      t.clear();
      const int step = std::max(1, (b - a + max_ticks) / std::max(1, max_ticks));
      for (int e = a; e <= b; e += step) {
        if (in_range(decade(1, e))) t.push_back(decade(1, e));
      }
    }
  }
  // A range too short for the above: nice linear steps inside it.
  if (t.size() < 3) t = linear_ticks(lo, hi, std::min(max_ticks, 6));
  return t;
}

std::string seconds_label(double s, int digits) {
  const double a = std::abs(s);
  if (a == 0) return "0";
  if (a >= 1) return fmt(s, "s", digits);
  if (a >= 1e-3) return fmt(s * 1e3, "ms", digits);
  if (a >= 1e-6) return fmt(s * 1e6, "\xC2\xB5s", digits);
  return fmt(s * 1e9, "ns", digits);
}

std::string bytes_label(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(b) >= 1024 && u < 4) b /= 1024, ++u;
  return fmt(b, units[u]);
}

std::string number_label(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace hyper::trace::internal
