#include "hyper/trace/step_picture.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "hyper/core/errors.h"
#include "hyper/trace/internal/axis.h"
#include "hyper/trace/internal/render.h"
#include "hyper/trace/internal/rows.h"
#include "hyper/trace/overlap.h"
#include "hyper/trace/palette.h"

namespace hyper::trace {
namespace internal {
namespace {

constexpr int kMaxHeight = 32767;  // cairo's largest image side

std::string row_label(const Row& row) { return "rank " + std::to_string(row.rank) + " \xC2\xB7 " + row.label; }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

/// The time unit for a span ending at `t1` µs: divisor and name.
std::pair<double, const char*> time_unit(double t1) {
  if (t1 >= 2e6) return {1e6, "s"};
  if (t1 >= 2e3) return {1e3, "ms"};
  return {1.0, "\xC2\xB5s"};
}

}  // namespace

std::unique_ptr<Canvas> draw_step_picture(const std::vector<TimelineEvent>& events,
                                          const StepPictureOptions& options, ImageFormat format) {
  HYPER_CHECK_VALUE(options.width >= 400 && options.width <= 20000, "step picture: width ",
                    options.width, " is outside [400, 20000]");
  HYPER_CHECK_VALUE(options.row_height >= 12 && options.row_height <= 400,
                    "step picture: row_height ", options.row_height, " is outside [12, 400]");
  std::map<std::pair<int, std::string>, size_t> index;
  const auto rows = make_rows(events, &index);
  const auto by_rank = intervals_by_rank(events);
  const OverlapStats stats = compute_overlap(events);

  double t0 = 0, t1 = 1;
  if (!events.empty()) {
    t0 = events.front().start_us, t1 = events.front().end_us;
    for (const auto& e : events) t0 = std::min(t0, e.start_us), t1 = std::max(t1, e.end_us);
  }
  if (!(t1 > t0)) t1 = t0 + 1;

  const double rh = options.row_height;
  const double strip = std::max(4.0, std::round(rh / 5));
  double label_w = 0;
  for (const auto& row : rows) label_w = std::max(label_w, text_width(row_label(row), kTickSize));
  const double left = std::ceil(std::min(label_w, options.width / 3.0)) + 28, right = 28;
  const double top = 104;
  double rows_h = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    rows_h += rh;
    if (i + 1 == rows.size() || rows[i + 1].rank != rows[i].rank) rows_h += strip + 8;
  }
  rows_h = std::max(rows_h, rh);
  const double grid_bottom = top + rows_h;
  const double height_f = std::ceil(grid_bottom + 64);
  HYPER_CHECK_VALUE(height_f <= kMaxHeight, "step picture: ", rows.size(), " rows of ",
                    options.row_height, " points make it ", height_f,
                    " points high (at most ", kMaxHeight, ")");
  const int width = options.width, height = static_cast<int>(height_f);
  const double plot_w = width - left - right;
  HYPER_CHECK_VALUE(plot_w >= 100, "step picture: width ", width, " leaves ", plot_w,
                    " points for the bars beside the row labels (need 100)");
  auto canvas = std::make_unique<Canvas>(format, width, height);
  Canvas& c = *canvas;
  auto x_of = [&](double us) { return left + (us - t0) / (t1 - t0) * plot_w; };

  // Title, overlap, legend.
  c.text(16, 30, options.title.empty() ? std::string("Step timeline") : options.title,
         kTitleSize, palette::kText, Align::kLeft, /*bold=*/true);
  c.text(16, 54,
         stats.comm_us > 0
             ? fmt("%.1f %% of communication hidden by computation", 100.0 * stats.fraction()) +
                   " (comm " + seconds_label(stats.comm_us * 1e-6, 3) + ", hidden " +
                   seconds_label(stats.hidden_us * 1e-6, 3) + ", compute " +
                   seconds_label(stats.compute_us * 1e-6, 3) + "; sums over ranks)"
             : std::string("no communication recorded"),
         kLabelSize, palette::kText);
  double lx = 16;
  for (auto [color, name] : {std::pair<Rgb, const char*>{palette::kCompute, "compute"},
                             {palette::kComm, "communication (issue to completion)"},
                             {palette::kHiddenComm, "communication hidden by computation"}}) {
    c.rect(lx, 68, 16, 14, color);
    lx += 22 + c.text(lx + 22, 80, name, kTickSize, palette::kText) + 20;
  }

  // Rows, bands and hidden strips.
  std::vector<double> row_y(rows.size());
  double y = top;
  for (size_t i = 0; i < rows.size(); ++i) {
    row_y[i] = y;
    if (i % 2 == 0) c.rect(0, y, width, rh, palette::kBand);
    c.text(left - 12, y + rh / 2 + kTickSize * 0.35, row_label(rows[i]), kTickSize,
           palette::kText, Align::kRight);
    y += rh;
    if (i + 1 == rows.size() || rows[i + 1].rank != rows[i].rank) {
      for (const auto& [rank, iv] : by_rank) {
        if (rank != rows[i].rank) continue;
        for (const auto& h : iv.hidden()) {
          c.rect(x_of(h.begin), y + 2, std::max(1.0, x_of(h.end) - x_of(h.begin)), strip,
                 palette::kHiddenComm);
        }
      }
      y += strip + 8;
    }
  }

  // Time grid and axis.
  const auto [unit, unit_name] = time_unit(t1);
  for (double t : linear_ticks(t0 / unit, t1 / unit, std::max(2, static_cast<int>(plot_w / 90)))) {
    const double gx = x_of(t * unit);
    c.line(gx, top - 4, gx, grid_bottom, palette::kGrid, 1);
    c.text(gx, grid_bottom + 22, number_label(t), kTickSize, palette::kText, Align::kCenter);
  }
  c.line(left, grid_bottom, left + plot_w, grid_bottom, palette::kAxis, 1.2);
  c.text(left + plot_w / 2, grid_bottom + 48, std::string("time (") + unit_name + ")", kLabelSize,
         palette::kText, Align::kCenter);
  if (events.empty()) {
    c.text(left + plot_w / 2, top + rh / 2 + 5, "no regions recorded", kLabelSize, palette::kAxis,
           Align::kCenter);
  }

  // Bars, longest first so that nested regions stay visible on top of their container.
  std::vector<const TimelineEvent*> order;
  for (const auto& e : events) order.push_back(&e);
  std::stable_sort(order.begin(), order.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
    return a->duration_us() > b->duration_us();
  });
  const double pad = std::max(2.0, std::round(rh / 6));
  for (const TimelineEvent* e : order) {
    const size_t r = index.at({e->rank, e->row()});
    const double x0 = x_of(e->start_us), w = std::max(1.0, x_of(e->end_us) - x0);
    const bool comm = e->kind == RegionKind::kComm;
    c.rect(x0, row_y[r] + pad, w, rh - 2 * pad, comm ? palette::kComm : palette::kCompute);
    if (w >= 3) c.line(x0 + 0.5, row_y[r] + pad, x0 + 0.5, row_y[r] + rh - pad, palette::kWhite, 1);
  }
  // Names inside their bars when they fit and no bar drawn later covers them.
  const double name_size = std::min(kSmallSize, rh - 2 * pad - 2);
  for (size_t i = 0; i < order.size() && name_size >= 8; ++i) {
    const TimelineEvent& e = *order[i];
    const double x0 = x_of(e.start_us), span = text_width(e.name, name_size) + 8;
    if (span > x_of(e.end_us) - x0) continue;
    const bool covered = std::any_of(order.begin() + i + 1, order.end(), [&](const TimelineEvent* o) {
      return o->rank == e.rank && o->row() == e.row() && x_of(o->start_us) < x0 + span &&
             x_of(o->end_us) > x0;
    });
    if (covered) continue;
    const size_t r = index.at({e.rank, e.row()});
    c.text(x0 + 4, row_y[r] + rh / 2 + name_size * 0.35, e.name, name_size,
           e.kind == RegionKind::kComm ? palette::kText : palette::kWhite);
  }
  return canvas;
}

}  // namespace internal

std::string render_step_picture(const std::vector<TimelineEvent>& events,
                                const StepPictureOptions& options, ImageFormat format) {
  return internal::draw_step_picture(events, options, format)->finish();
}

void write_step_picture(const std::string& path, const std::vector<TimelineEvent>& events,
                        const StepPictureOptions& options) {
  write_file(path, render_step_picture(events, options, image_format_of(path)), "step picture");
}

}  // namespace hyper::trace
