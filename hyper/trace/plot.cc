#include "hyper/trace/plot.h"

#include <algorithm>
#include <cmath>

#include "hyper/core/errors.h"
#include "hyper/trace/internal/axis.h"
#include "hyper/trace/internal/render.h"

namespace hyper::trace {
namespace internal {
namespace {

/// "plot 'T': panel 2 ('time')" for messages.
std::string where(const Figure& f, size_t panel) {
  return ::hyper::internal::str_cat("plot '", f.title, "': panel ", panel + 1, " ('",
                                    f.panels[panel].title, "')");
}

void validate(const Figure& f) {
  HYPER_CHECK_VALUE(f.width >= 300 && f.width <= 20000, "plot '", f.title, "': width ", f.width,
                    " is outside [300, 20000]");
  HYPER_CHECK_VALUE(f.height >= 200 && f.height <= 20000, "plot '", f.title, "': height ",
                    f.height, " is outside [200, 20000]");
  HYPER_CHECK_VALUE(!f.panels.empty(), "plot '", f.title, "': no panels");
  HYPER_CHECK_VALUE(f.width / static_cast<double>(f.panels.size()) >= 250, "plot '", f.title,
                    "': width ", f.width, " leaves less than 250 points for each of ",
                    f.panels.size(), " panels");
  for (size_t p = 0; p < f.panels.size(); ++p) {
    const Panel& panel = f.panels[p];
    HYPER_CHECK_VALUE(!panel.series.empty(), where(f, p), " has no series");
    for (const Series& s : panel.series) {
      HYPER_CHECK_VALUE(!s.label.empty(), where(f, p), ": a series has no label");
      HYPER_CHECK_VALUE(!s.points.empty(), where(f, p), ": series '", s.label, "' has no points");
      for (const auto& [x, y] : s.points) {
        HYPER_CHECK_VALUE(std::isfinite(x) && std::isfinite(y), where(f, p), ": series '",
                          s.label, "' has the point (", x, ", ", y, "), which is not finite");
        HYPER_CHECK_VALUE(panel.x.scale != AxisScale::kLog || x > 0, where(f, p), ": series '",
                          s.label, "' has x = ", x, " on a log axis (needs x > 0)");
        HYPER_CHECK_VALUE(panel.y.scale != AxisScale::kLog || y > 0, where(f, p), ": series '",
                          s.label, "' has y = ", y, " on a log axis (needs y > 0)");
      }
    }
  }
}

/// Maps data to points along one axis.
struct Scale {
  bool log = false;
  double lo = 0, hi = 1;  // data range shown
  double a = 0, b = 1;    // points
  double operator()(double v) const {
    const double f = log ? (std::log(v) - std::log(lo)) / (std::log(hi) - std::log(lo))
                         : (v - lo) / (hi - lo);
    return a + f * (b - a);
  }
};

/// Data range of an axis, padded so that markers stay inside.
std::pair<double, double> range(std::vector<double> v, AxisScale scale) {
  const auto [mn, mx] = std::minmax_element(v.begin(), v.end());
  double lo = *mn, hi = *mx;
  if (scale == AxisScale::kLog) {
    if (hi / lo < 1.5) lo /= 1.5, hi *= 1.5;
    const double pad = std::pow(hi / lo, 0.06);
    return {lo / pad, hi * pad};
  }
  if (!(hi > lo)) {
    const double d = lo == 0 ? 1 : std::abs(lo) * 0.1;
    lo -= d, hi += d;
  }
  const double pad = (hi - lo) * 0.05;
  return {lo - pad, hi + pad};
}

std::string tick_label(double v, AxisUnit unit) {
  switch (unit) {
    case AxisUnit::kSeconds: return seconds_label(v);
    case AxisUnit::kBytes: return bytes_label(v);
    default: return number_label(v);
  }
}

std::vector<double> ticks(const Axis& axis, double lo, double hi, int max_ticks) {
  std::vector<double> t;
  if (!axis.ticks.empty()) {
    for (double v : axis.ticks) {
      if (v >= lo && v <= hi) t.push_back(v);
    }
    return t;
  }
  if (axis.scale == AxisScale::kLog) {
    return log_ticks(lo, hi, axis.unit == AxisUnit::kBytes, max_ticks);
  }
  return linear_ticks(lo, hi, max_ticks);
}

void draw_panel(Canvas& c, const Panel& panel, double x0, double y0, double w, double h) {
  // Title and legend (wrapped to the panel's width).
  c.text(x0 + 16, y0 + 16, panel.title, kLabelSize, palette::kText, Align::kLeft, true);
  double lx = x0 + 16, ly = y0 + 40;
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const Series& s = panel.series[i];
    const Rgb color = s.color.value_or(palette::kSeries[i % palette::kSeries.size()]);
    const double entry = 30 + text_width(s.label, kTickSize) + 18;
    if (lx > x0 + 16 && lx + entry > x0 + w - 8) lx = x0 + 16, ly += 20;
    c.line(lx, ly - 4, lx + 24, ly - 4, color, 2.2, s.dashed);
    c.dot(lx + 12, ly - 4, 3.5, color);
    c.text(lx + 30, ly, s.label, kTickSize, palette::kText);
    lx += entry;
  }

  std::vector<double> xs, ys;
  for (const auto& s : panel.series) {
    for (const auto& [x, y] : s.points) xs.push_back(x), ys.push_back(y);
  }
  const auto [xlo, xhi] = range(xs, panel.x.scale);
  const auto [ylo, yhi] = range(ys, panel.y.scale);
  const double top = ly + 16, bottom = y0 + h - 62;
  const auto y_ticks =
      ticks(panel.y, ylo, yhi, std::max(2, static_cast<int>((bottom - top) / 36)));
  double tick_w = 0;
  for (double t : y_ticks) tick_w = std::max(tick_w, text_width(tick_label(t, panel.y.unit), kTickSize));
  const double left = x0 + 30 + tick_w + 10, right = x0 + w - 18;
  const Scale sx{panel.x.scale == AxisScale::kLog, xlo, xhi, left, right};
  const Scale sy{panel.y.scale == AxisScale::kLog, ylo, yhi, bottom, top};

  // Grid, ticks, axes, labels.
  for (double t : y_ticks) {
    const double y = sy(t);
    c.line(left, y, right, y, palette::kGrid, 1);
    c.text(left - 8, y + kTickSize * 0.35, tick_label(t, panel.y.unit), kTickSize, palette::kText,
           Align::kRight);
  }
  double last_label_end = -1e30;
  for (double t : ticks(panel.x, xlo, xhi, std::max(2, static_cast<int>((right - left) / 80)))) {
    const double x = sx(t);
    c.line(x, top, x, bottom, palette::kGrid, 1);
    c.line(x, bottom, x, bottom + 5, palette::kAxis, 1);
    const std::string l = tick_label(t, panel.x.unit);
    const double lw = text_width(l, kTickSize);
    if (x - lw / 2 < last_label_end + 8) continue;  // keep labels apart; the grid line stays
    c.text(x, bottom + 21, l, kTickSize, palette::kText, Align::kCenter);
    last_label_end = x + lw / 2;
  }
  c.line(left, top, left, bottom, palette::kAxis, 1.2);
  c.line(left, bottom, right, bottom, palette::kAxis, 1.2);
  c.text((left + right) / 2, bottom + 48, panel.x.label, kLabelSize, palette::kText, Align::kCenter);
  c.text(x0 + 22, (top + bottom) / 2, panel.y.label, kLabelSize, palette::kText, Align::kCenter,
         false, /*vertical=*/true);

  // Series, clipped to the plot area.
  cairo_save(c.cr());
  cairo_rectangle(c.cr(), left, top - 6, right - left + 6, bottom - top + 12);
  cairo_clip(c.cr());
  for (size_t i = 0; i < panel.series.size(); ++i) {
    const Series& s = panel.series[i];
    const Rgb color = s.color.value_or(palette::kSeries[i % palette::kSeries.size()]);
    std::vector<std::pair<double, double>> pts;
    for (const auto& [x, y] : s.points) pts.emplace_back(sx(x), sy(y));
    c.polyline(pts, color, 2.2, s.dashed);
    for (const auto& [x, y] : pts) c.dot(x, y, 3.5, color);
  }
  cairo_restore(c.cr());
}

}  // namespace

std::unique_ptr<Canvas> draw_figure(const Figure& figure, ImageFormat format) {
  validate(figure);
  auto canvas = std::make_unique<Canvas>(format, figure.width, figure.height);
  double top = 8;
  if (!figure.title.empty()) {
    canvas->text(16, 30, figure.title, kTitleSize, palette::kText, Align::kLeft, true);
    top = 44;
  }
  const double w = figure.width / static_cast<double>(figure.panels.size());
  for (size_t p = 0; p < figure.panels.size(); ++p) {
    draw_panel(*canvas, figure.panels[p], p * w, top, w, figure.height - top);
  }
  return canvas;
}

}  // namespace internal

std::string render_figure(const Figure& figure, ImageFormat format) {
  return internal::draw_figure(figure, format)->finish();
}

void write_figure(const std::string& path, const Figure& figure) {
  const ImageFormat format = image_format_of(path);
  write_file(path, render_figure(figure, format), "plot");
}

}  // namespace hyper::trace
