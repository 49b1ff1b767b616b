// Report plots: a two-panel log-log figure as PNG (read back by cairo: size, not blank, the
// palette's series colours) and SVG; the texts drawn (title, panel titles, legend, axis
// labels, tick labels in the axis's unit) inside the picture, readable and apart; tick
// choices; every validation error naming the figure, panel and series.
#include "hyper/trace/plot.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include <unistd.h>

#include "hyper/core/errors.h"
#include "hyper/trace/internal/axis.h"
#include "hyper/trace/internal/render.h"
#include "hyper/trace/testing_util.h"

namespace hyper::trace {
namespace {

using testing::expect_error;

Figure sample() {
  Figure f;
  f.title = "all_gather_v vs c10d allgather by tensor size, 4 ranks";
  Panel time;
  time.title = "Time (slowest rank, median)";
  time.x = {"tensor size (MiB)", AxisScale::kLog, AxisUnit::kNumber, {1, 4, 16, 64}};
  time.y = {"time per call", AxisScale::kLog, AxisUnit::kSeconds, {}};
  time.series = {{"hyper all_gather_v", {{1, 2e-3}, {4, 7e-3}, {16, 3e-2}, {64, 0.11}}, {}, false},
                 {"c10d allgather", {{1, 3e-3}, {4, 9e-3}, {16, 4e-2}, {64, 0.15}}, {}, false}};
  Panel bytes;
  bytes.title = "Bytes on the wire (all ranks)";
  bytes.x = time.x;
  bytes.y = {"bytes", AxisScale::kLog, AxisUnit::kBytes, {}};
  bytes.series = {{"hyper", {{1, 3 << 20}, {4, 12 << 20}, {16, 48 << 20}, {64, 192 << 20}}, {}, false},
                  {"lower bound", {{1, 3 << 20}, {4, 12 << 20}, {16, 48 << 20}, {64, 192 << 20}},
                   palette::kGrey, true}};
  f.panels = {time, bytes};
  return f;
}

TEST(TracePlot, PngReadsBack) {
  const testing::Image img = testing::decode_png(render_figure(sample(), ImageFormat::kPng));
  ASSERT_EQ(img.width, 1200);
  ASSERT_EQ(img.height, 480);
  EXPECT_GT(testing::count_not_white(img), img.width * img.height / 50);
  // Marker interiors are the series' exact colours: palette order, then the given grey.
  EXPECT_GT(testing::count(img, palette::kSeries[0]), 50);
  EXPECT_GT(testing::count(img, palette::kSeries[1]), 50);
  EXPECT_GT(testing::count(img, palette::kGrey), 20);
}

TEST(TracePlot, TextsAreReadableAndApart) {
  auto canvas = internal::draw_figure(sample(), ImageFormat::kPng);
  const auto& t = canvas->texts();
  for (const char* s : {"all_gather_v vs c10d allgather by tensor size, 4 ranks",
                        "Time (slowest rank, median)", "Bytes on the wire (all ranks)",
                        "hyper all_gather_v", "c10d allgather", "lower bound",
                        "tensor size (MiB)", "time per call", "bytes", "1", "4", "16", "64",
                        "10 ms", "100 ms", "4 MiB", "16 MiB", "64 MiB"}) {
    EXPECT_TRUE(testing::drew(t, s)) << s;
  }
  testing::expect_readable(*canvas, 11);
  testing::expect_no_overlap(*canvas);
}

TEST(TracePlot, Svg) {
  const std::string svg = render_figure(sample(), ImageFormat::kSvg);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("width=\"1200"), std::string::npos);
  EXPECT_NE(svg.find("height=\"480"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  const auto path = std::filesystem::temp_directory_path() /
                    ("hyper_plot_" + std::to_string(::getpid()) + ".svg");
  write_figure(path.string(), sample());
  EXPECT_EQ(std::filesystem::file_size(path), svg.size());
  std::filesystem::remove(path);
}

TEST(TracePlot, LinearAxesAndManyPoints) {
  Figure f;
  Panel p;
  p.title = "Overlap";
  p.x = {"ranks", AxisScale::kLinear, AxisUnit::kNumber, {}};
  p.y = {"fraction hidden", AxisScale::kLinear, AxisUnit::kNumber, {}};
  Series s{"async", {}, {}, false};
  for (int i = 1; i <= 200; ++i) s.points.push_back({i, std::sin(i / 20.0)});
  p.series = {s, {"one point", {{50, 0.5}}, {}, true}};
  f.panels = {p};
  f.width = 600, f.height = 400;
  auto canvas = internal::draw_figure(f, ImageFormat::kPng);
  testing::expect_readable(*canvas, 11);
  testing::expect_no_overlap(*canvas);
  EXPECT_TRUE(testing::drew(canvas->texts(), "100"));
  EXPECT_EQ(testing::decode_png(canvas->finish()).width, 600);
}

TEST(TracePlot, Ticks) {
  using V = std::vector<double>;
  EXPECT_EQ(internal::linear_ticks(0, 12, 8), (V{0, 2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(internal::linear_ticks(-1, 1, 4), (V{-1, -0.5, 0, 0.5, 1}));
  EXPECT_EQ(internal::log_ticks(0.9e-3, 0.2, false, 8), (V{1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 0.1, 0.2}));
  EXPECT_EQ(internal::log_ticks(1e-6, 10, false, 4), (V{1e-6, 1e-4, 1e-2, 1}));
  EXPECT_EQ(internal::log_ticks(1000, 5000, true, 8), (V{1024, 2048, 4096}));
  // Too short a range for 1-2-5: linear steps inside it.
  const V short_range = internal::log_ticks(0.089, 0.163, false, 8);
  ASSERT_EQ(short_range.size(), 4u);
  EXPECT_DOUBLE_EQ(short_range.front(), 0.1);
  EXPECT_DOUBLE_EQ(short_range.back(), 0.16);
  EXPECT_EQ(internal::seconds_label(0.25), "250 ms");
  EXPECT_EQ(internal::seconds_label(1.5), "1.5 s");
  EXPECT_EQ(internal::seconds_label(4e-5), "40 \xC2\xB5s");
  EXPECT_EQ(internal::bytes_label(64.0 * 1024 * 1024), "64 MiB");
  EXPECT_EQ(internal::bytes_label(3), "3 B");
}

TEST(TracePlot, Errors) {
  const std::string where = "plot 'all_gather_v vs c10d allgather by tensor size, 4 ranks'";
  Figure f = sample();
  f.panels.clear();
  expect_error<ValueError>([&] { render_figure(f); }, where + ": no panels");
  f = sample();
  f.panels[1].series.clear();
  expect_error<ValueError>([&] { render_figure(f); },
                           where + ": panel 2 ('Bytes on the wire (all ranks)') has no series");
  f = sample();
  f.panels[0].series[1].points.clear();
  expect_error<ValueError>([&] { render_figure(f); },
                           "panel 1 ('Time (slowest rank, median)'): series 'c10d allgather' has "
                           "no points");
  f = sample();
  f.panels[0].series[0].label.clear();
  expect_error<ValueError>([&] { render_figure(f); }, "panel 1 ('Time (slowest rank, median)'): a "
                                                      "series has no label");
  f = sample();
  f.panels[0].series[0].points[2].second = 0;
  expect_error<ValueError>([&] { render_figure(f); },
                           "series 'hyper all_gather_v' has y = 0 on a log axis (needs y > 0)");
  f = sample();
  f.panels[1].series[0].points[0].first = -1;
  expect_error<ValueError>([&] { render_figure(f); },
                           "series 'hyper' has x = -1 on a log axis (needs x > 0)");
  f = sample();
  f.panels[0].series[0].points[0].second = std::numeric_limits<double>::quiet_NaN();
  expect_error<ValueError>([&] { render_figure(f); }, "which is not finite");
  f = sample();
  f.width = 100;
  expect_error<ValueError>([&] { render_figure(f); }, where + ": width 100 is outside [300, 20000]");
  f.width = 400;
  expect_error<ValueError>([&] { render_figure(f); },
                           where + ": width 400 leaves less than 250 points for each of 2 panels");
  f = sample();
  f.height = 50000;
  expect_error<ValueError>([&] { render_figure(f); }, where + ": height 50000 is outside [200, 20000]");
  expect_error<std::runtime_error>([&] { write_figure("/nonexistent-dir/p.png", sample()); },
                                   "cannot write the plot to '/nonexistent-dir/p.png'");
  expect_error<ValueError>([&] { write_figure("/tmp/p.pdf", sample()); },
                           "picture path '/tmp/p.pdf' ends in '.pdf'; expected .png or .svg");
}

}  // namespace
}  // namespace hyper::trace
