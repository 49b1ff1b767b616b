// The step picture: a PNG cairo reads back at the expected size, not blank, with the palette's
// compute / comm / hidden colours where the bars are; an SVG of the same picture; the texts
// drawn (title, legend, row labels, axis label, ticks) inside the picture, readable and apart;
// errors naming the values.
#include "hyper/trace/step_picture.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "hyper/core/errors.h"
#include "hyper/trace/internal/render.h"
#include "hyper/trace/testing_util.h"
#include "hyper/trace/timeline.h"

namespace hyper::trace {
namespace {

using testing::ev;
using testing::expect_error;

std::vector<TimelineEvent> two_ranks() {
  std::vector<TimelineEvent> events;
  for (int rank = 0; rank < 2; ++rank) {
    events.push_back(ev("forward", RegionKind::kCompute, rank, 0, 6000));
    events.push_back(ev("all_gather", RegionKind::kComm, rank, 1000, 9000));
    events.push_back(ev("all_reduce", RegionKind::kComm, rank, 9500, 12000, "reduce"));
  }
  return events;
}

TEST(TraceStepPicture, PngReadsBack) {
  StepPictureOptions opts;
  opts.width = 900;
  opts.row_height = 24;
  opts.title = "TP step, 2 ranks";
  const std::string png = render_step_picture(two_ranks(), opts, ImageFormat::kPng);
  const testing::Image img = testing::decode_png(png);
  ASSERT_EQ(img.width, 900);
  // Title block (104) + 2 ranks x (3 rows of 24 + strip 5 + gap 8) + axis block (64).
  EXPECT_EQ(img.height, 104 + 2 * (3 * 24 + 5 + 8) + 64);
  EXPECT_GT(testing::count_not_white(img), img.width * img.height / 20);
  // Bars and strips in the palette's colours (their interiors are not anti-aliased).
  EXPECT_GT(testing::count(img, palette::kCompute), 1000);
  EXPECT_GT(testing::count(img, palette::kComm), 1000);
  EXPECT_GT(testing::count(img, palette::kHiddenComm), 200);
}

TEST(TraceStepPicture, TextsAreReadableAndApart) {
  StepPictureOptions opts;
  opts.width = 900;
  auto canvas = internal::draw_step_picture(two_ranks(), opts, ImageFormat::kPng);
  const auto& texts = canvas->texts();
  EXPECT_TRUE(testing::drew(texts, "Step timeline"));
  // forward [0, 6000) hides [1000, 6000) of comm [1000, 12000) minus the gap [9000, 9500):
  // 5000 of 10500 µs per rank.
  EXPECT_TRUE(testing::drew(texts, "47.6 % of communication hidden by computation (comm 21 ms, "
                                   "hidden 10 ms, compute 12 ms; sums over ranks)"));
  EXPECT_TRUE(testing::drew(texts, "compute"));
  EXPECT_TRUE(testing::drew(texts, "communication hidden by computation"));
  EXPECT_TRUE(testing::drew(texts, "rank 0 \xC2\xB7 compute"));
  EXPECT_TRUE(testing::drew(texts, "rank 1 \xC2\xB7 reduce"));
  EXPECT_TRUE(testing::drew(texts, "time (ms)"));
  EXPECT_TRUE(testing::drew(texts, "0"));
  EXPECT_TRUE(testing::drew(texts, "12"));
  EXPECT_TRUE(testing::drew(texts, "all_gather"));  // wide enough for its name
  testing::expect_readable(*canvas, 11);
  testing::expect_no_overlap(*canvas);
}

TEST(TraceStepPicture, NestedRegionsKeepTheirNamesApart) {
  // "w1: forward" contains "w1: own rows" at its start (same row): the inner bar is drawn on
  // top and named; the outer name would be covered, so it is left out; a later sibling is named.
  std::vector<TimelineEvent> events = {ev("w1: forward", RegionKind::kCompute, 0, 0, 8000),
                                       ev("w1: own rows", RegionKind::kCompute, 0, 100, 4000),
                                       ev("w2: forward", RegionKind::kCompute, 0, 9000, 16000)};
  auto canvas = internal::draw_step_picture(events, {}, ImageFormat::kPng);
  EXPECT_FALSE(testing::drew(canvas->texts(), "w1: forward"));
  EXPECT_TRUE(testing::drew(canvas->texts(), "w1: own rows"));
  EXPECT_TRUE(testing::drew(canvas->texts(), "w2: forward"));
  testing::expect_no_overlap(*canvas);
  // 3 significant digits in the subtitle: hidden = compute = [0, 8000) + [9000, 16000) = 15 ms
  // of 95.2068 ms.
  events.push_back(ev("ag", RegionKind::kComm, 0, 0, 95206.8));
  canvas = internal::draw_step_picture(events, {}, ImageFormat::kPng);
  EXPECT_TRUE(testing::drew(canvas->texts(), "15.8 % of communication hidden by computation (comm "
                                             "95.2 ms, hidden 15 ms, compute 15 ms; sums over "
                                             "ranks)"));
}

TEST(TraceStepPicture, SvgAndFiles) {
  const std::string svg = render_step_picture(two_ranks(), {}, ImageFormat::kSvg);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("width=\"1400"), std::string::npos);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
  EXPECT_NE(svg.find("<symbol overflow=\"visible\" id=\"glyph"), std::string::npos) << "text drawn";

  const auto dir = std::filesystem::temp_directory_path() /
                   ("hyper_step_picture_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  Timeline tl;
  for (const auto& e : two_ranks()) tl.record(e);
  tl.write_picture((dir / "step.png").string());
  tl.write_picture((dir / "step.SVG").string());
  std::ifstream f(dir / "step.png", std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_EQ(testing::decode_png(ss.str()).width, 1400);
  EXPECT_GT(std::filesystem::file_size(dir / "step.SVG"), 1000u);
  std::filesystem::remove_all(dir);

  // An empty timeline still renders (frame and a note).
  auto empty = internal::draw_step_picture({}, {}, ImageFormat::kPng);
  EXPECT_TRUE(testing::drew(empty->texts(), "no regions recorded"));
  EXPECT_TRUE(testing::drew(empty->texts(), "no communication recorded"));
  EXPECT_EQ(testing::decode_png(empty->finish()).width, 1400);
}

TEST(TraceStepPicture, Errors) {
  StepPictureOptions opts;
  opts.width = 10;
  expect_error<ValueError>([&] { render_step_picture({}, opts); },
                           "step picture: width 10 is outside [400, 20000]");
  opts.width = 800;
  opts.row_height = 1;
  expect_error<ValueError>([&] { render_step_picture({}, opts); },
                           "step picture: row_height 1 is outside [12, 400]");
  opts.row_height = 400;
  std::vector<TimelineEvent> many;
  for (int rank = 0; rank < 100; ++rank) many.push_back(ev("x", RegionKind::kCompute, rank, 0, 1));
  expect_error<ValueError>([&] { render_step_picture(many, opts); },
                           "step picture: 100 rows of 400 points make it");
  const auto events = two_ranks();
  expect_error<std::runtime_error>(
      [&] { write_step_picture("/nonexistent-dir/x.png", events); },
      "cannot write the step picture to '/nonexistent-dir/x.png'");
  expect_error<ValueError>([&] { write_step_picture("/tmp/step.jpg", events); },
                           "picture path '/tmp/step.jpg' ends in '.jpg'; expected .png or .svg");
  expect_error<ValueError>([&] { write_step_picture("/tmp.d/step", events); },
                           "ends in '(no extension)'");
}

}  // namespace
}  // namespace hyper::trace
