#pragma once
/// \file plot.h
/// Line plots for reports (the benchmark plots of bench/bench_report.cc), drawn with cairo:
/// one or more panels side by side, each with a title, a legend, labelled axes (linear or
/// log), tick labels in the axis's unit, grid lines, and one line with point markers per
/// series. Colours come from palette.h.
///
///   hyper::trace::Figure fig;
///   fig.title = "all_gather_v by tensor size";
///   hyper::trace::Panel time;
///   time.title = "Time (slowest rank, median)";
///   time.x = {"tensor size (MiB)", hyper::trace::AxisScale::kLog};
///   time.y = {"time per call", hyper::trace::AxisScale::kLog, hyper::trace::AxisUnit::kSeconds};
///   time.series = {{"hyper", {{1, 2e-3}, {4, 7e-3}}}, {"c10d", {{1, 3e-3}, {4, 9e-3}}}};
///   fig.panels = {time};
///   hyper::trace::write_figure("all_gather.png", fig);

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyper/trace/image.h"
#include "hyper/trace/palette.h"

namespace hyper::trace {

enum class AxisScale { kLinear, kLog };
/// How tick labels are written: "%g"; seconds as ns/µs/ms/s; bytes as B/KiB/MiB/GiB (a log
/// axis of bytes gets powers of two).
enum class AxisUnit { kNumber, kSeconds, kBytes };

struct Axis {
  std::string label;  ///< under the x axis / along the y axis; name the unit for kNumber
  AxisScale scale = AxisScale::kLinear;
  AxisUnit unit = AxisUnit::kNumber;
  /// Tick positions (e.g. the x values measured); empty: chosen from the data range.
  std::vector<double> ticks;
};

struct Series {
  std::string label;                             ///< legend entry, non-empty
  std::vector<std::pair<double, double>> points; ///< (x, y), drawn in the given order
  std::optional<Rgb> color;                      ///< default palette::kSeries[index]
  bool dashed = false;
};

struct Panel {
  std::string title;
  Axis x, y;
  std::vector<Series> series;
};

struct Figure {
  std::string title;           ///< top line (may be empty)
  std::vector<Panel> panels;   ///< side by side, equal widths
  int width = 1200;            ///< points (= PNG pixels), in [300, 20000]
  int height = 480;            ///< points, in [200, 20000]
};

/// The figure as PNG or SVG bytes. Throws hyper::ValueError naming the figure, panel and
/// series for: no panel, a panel without series, a series without points or label, a
/// non-finite value, a value <= 0 on a log axis, a size out of range.
std::string render_figure(const Figure& figure, ImageFormat format = ImageFormat::kPng);

/// Writes the figure to `path`, PNG or SVG by its extension (image_format_of). Throws as
/// render_figure and image_format_of, and std::runtime_error naming the path when it cannot
/// be written.
void write_figure(const std::string& path, const Figure& figure);

}  // namespace hyper::trace
