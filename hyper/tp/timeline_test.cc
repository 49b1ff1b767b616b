// Step timeline: interval arithmetic, overlap fraction on hand-made timelines, Chrome trace
// JSON (parsed back), PNG structure (signature, IHDR, chunk CRCs, zlib stream), recording
// from several threads.
#include "hyper/tp/timeline.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <unistd.h>

namespace {

using hyper::tp::compute_overlap;
using hyper::tp::Interval;
using hyper::tp::RegionKind;
using hyper::tp::Timeline;
using hyper::tp::TimelineEvent;

TimelineEvent ev(const std::string& name, RegionKind kind, int rank, double s, double e,
                 const std::string& stream = "") {
  TimelineEvent t;
  t.name = name, t.kind = kind, t.rank = rank, t.start_us = s, t.end_us = e, t.stream = stream;
  return t;
}
constexpr auto kComm = RegionKind::kComm;
constexpr auto kCompute = RegionKind::kCompute;

TEST(TpTimeline, IntervalArithmetic) {
  using V = std::vector<Interval>;
  EXPECT_EQ(hyper::tp::interval_union({{5, 7}, {0, 2}, {1, 3}, {3, 4}, {9, 9}, {8, 6}}),
            (V{{0, 4}, {5, 7}}));
  EXPECT_EQ(hyper::tp::interval_union({}), V{});
  EXPECT_EQ(hyper::tp::interval_intersection({{0, 4}, {5, 7}}, {{2, 6}, {6.5, 10}}),
            (V{{2, 4}, {5, 6}, {6.5, 7}}));
  EXPECT_EQ(hyper::tp::interval_intersection({{0, 1}}, {{1, 2}}), V{});  // half-open
  EXPECT_DOUBLE_EQ(hyper::tp::interval_measure({{2, 4}, {5, 6}, {6.5, 7}}), 3.5);
}

TEST(TpTimeline, OverlapNone) {
  auto s = compute_overlap({ev("mm", kCompute, 0, 0, 10), ev("ag", kComm, 0, 10, 15),
                            ev("mm2", kCompute, 0, 15, 20)});
  EXPECT_DOUBLE_EQ(s.comm_us, 5);
  EXPECT_DOUBLE_EQ(s.hidden_us, 0);
  EXPECT_DOUBLE_EQ(s.compute_us, 15);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.0);
  EXPECT_DOUBLE_EQ(compute_overlap({}).fraction(), 0.0);  // no communication at all
  EXPECT_DOUBLE_EQ(compute_overlap({ev("mm", kCompute, 0, 0, 1)}).fraction(), 0.0);
}

TEST(TpTimeline, OverlapFull) {
  auto s = compute_overlap({ev("ag", kComm, 0, 2, 8), ev("mm", kCompute, 0, 0, 10)});
  EXPECT_DOUBLE_EQ(s.fraction(), 1.0);
  // Covered by two adjacent compute regions on different rows.
  s = compute_overlap({ev("ag", kComm, 1, 2, 8), ev("a", kCompute, 1, 0, 5, "main"),
                       ev("b", kCompute, 1, 5, 10, "side")});
  EXPECT_DOUBLE_EQ(s.fraction(), 1.0);
}

TEST(TpTimeline, OverlapPartialWorkedExample) {
  // The header's example: C = [0,20), hidden = [2,4) + [8,12) = 6 -> 0.3.
  auto s = compute_overlap({ev("ag", kComm, 0, 0, 10), ev("rs", kComm, 0, 5, 20),
                            ev("x", kCompute, 0, 2, 4), ev("y", kCompute, 0, 8, 12)});
  EXPECT_DOUBLE_EQ(s.comm_us, 20);
  EXPECT_DOUBLE_EQ(s.hidden_us, 6);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.3);
}

TEST(TpTimeline, OverlapIsPerRank) {
  // Rank 1's compute does not hide rank 0's communication.
  std::vector<TimelineEvent> events = {ev("ag", kComm, 0, 0, 10), ev("mm", kCompute, 1, 0, 10),
                                       ev("ag", kComm, 1, 0, 10)};
  auto s = compute_overlap(events);
  EXPECT_DOUBLE_EQ(s.comm_us, 20);
  EXPECT_DOUBLE_EQ(s.hidden_us, 10);
  EXPECT_DOUBLE_EQ(s.fraction(), 0.5);
  EXPECT_DOUBLE_EQ(compute_overlap(events, 0).fraction(), 0.0);
  EXPECT_DOUBLE_EQ(compute_overlap(events, 1).fraction(), 1.0);
}

TEST(TpTimeline, RecordsFromThreads) {
  Timeline tl;
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 4; ++rank) {
    threads.emplace_back([&tl, rank] {
      for (int i = 0; i < 50; ++i) {
        const int64_t comm = tl.begin("all_gather", kComm, rank);
        {
          auto mm = tl.scope("mm " + std::to_string(i), kCompute, rank);
        }
        tl.end(comm);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto events = tl.events();
  EXPECT_EQ(events.size(), 400u);
  EXPECT_EQ(tl.num_open(), 0u);
  std::set<int> thread_ids;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_GE(events[i].end_us, events[i].start_us);
    thread_ids.insert(events[i].thread);
    if (i > 0 && events[i].rank == events[i - 1].rank) {
      EXPECT_GE(events[i].start_us, events[i - 1].start_us);
    }
  }
  EXPECT_EQ(thread_ids.size(), 4u);
  // Each compute region sits inside its collective's [issue, completion): fully hidden.
  EXPECT_DOUBLE_EQ(tl.overlap().fraction(), tl.overlap().hidden_us / tl.overlap().comm_us);
  EXPECT_GT(tl.overlap().fraction(), 0.0);

  // end() from another thread than begin() (a collective completed elsewhere).
  const int64_t id = tl.begin("reduce_scatter", kComm, 0, "comm");
  std::thread([&] { tl.end(id); }).join();
  EXPECT_EQ(tl.events().size(), 401u);
  try {
    tl.end(id);
    ADD_FAILURE() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("region id " + std::to_string(id) + " is not open"),
              std::string::npos);
  }
  EXPECT_THROW(tl.record(ev("bad", kCompute, 0, 5, 4)), std::invalid_argument);
  tl.clear();
  EXPECT_TRUE(tl.events().empty());
}

TEST(TpTimeline, ChromeTraceParses) {
  std::vector<TimelineEvent> events = {
      ev("mm \"q\"\n", kCompute, 0, 0, 10.5), ev("all_gather", kComm, 0, 1.25, 8),
      ev("mm", kCompute, 1, 0, 9, "main"),     ev("all_reduce", kComm, 1, 2, 12, "nccl")};
  const auto json = nlohmann::json::parse(hyper::tp::to_chrome_trace(events));
  ASSERT_TRUE(json.contains("traceEvents"));
  int complete = 0;
  std::set<std::pair<int, int>> rows;
  std::map<std::pair<int, int>, std::string> thread_names;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") {
        thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"].get<std::string>();
      }
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    ++complete;
    rows.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (e["name"] == "mm \"q\"\n") {
      EXPECT_EQ(e["pid"], 0);
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 0.0);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 10.5);
      EXPECT_EQ(e["cat"], "compute");
    }
    if (e["name"] == "all_gather") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.25);
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 6.75);
      EXPECT_EQ(e["args"]["kind"], "comm");
    }
  }
  EXPECT_EQ(complete, 4);
  EXPECT_EQ(rows.size(), 4u);  // compute and comm on separate rows per rank
  EXPECT_EQ((thread_names[{1, 2}]), "nccl");
  EXPECT_EQ((thread_names[{0, 1}]), "compute");
  // Empty timeline: still valid JSON.
  EXPECT_TRUE(nlohmann::json::parse(hyper::tp::to_chrome_trace({}))["traceEvents"].empty());
}

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t{b[at]} << 24) | (uint32_t{b[at + 1]} << 16) | (uint32_t{b[at + 2]} << 8) |
         uint32_t{b[at + 3]};
}

/// Validates a PNG's structure; returns (width, height) and the decoded pixels.
void check_png(const std::vector<uint8_t>& png, uint32_t* w, uint32_t* h,
               std::vector<uint8_t>* rgb) {
  const std::vector<uint8_t> sig = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  ASSERT_GE(png.size(), 8u);
  ASSERT_TRUE(std::equal(sig.begin(), sig.end(), png.begin())) << "bad signature";
  size_t at = 8;
  std::vector<std::string> types;
  std::vector<uint8_t> idat;
  while (at < png.size()) {
    ASSERT_LE(at + 12, png.size());
    const uint32_t len = be32(png, at);
    ASSERT_LE(at + 12 + len, png.size());
    const std::string type(png.begin() + at + 4, png.begin() + at + 8);
    uLong crc = crc32(crc32(0L, Z_NULL, 0), png.data() + at + 4, 4 + len);
    EXPECT_EQ(be32(png, at + 8 + len), static_cast<uint32_t>(crc)) << "CRC of " << type;
    if (type == "IHDR") {
      ASSERT_EQ(len, 13u);
      *w = be32(png, at + 8);
      *h = be32(png, at + 12);
      EXPECT_EQ(png[at + 16], 8);  // bit depth
      EXPECT_EQ(png[at + 17], 2);  // RGB
    }
    if (type == "IDAT") idat.insert(idat.end(), png.begin() + at + 8, png.begin() + at + 8 + len);
    types.push_back(type);
    at += 12 + len;
  }
  ASSERT_EQ(types.front(), "IHDR");
  ASSERT_EQ(types.back(), "IEND");
  uLongf raw_len = static_cast<uLongf>(*h) * (1 + *w * 3);
  std::vector<uint8_t> raw(raw_len);
  ASSERT_EQ(uncompress(raw.data(), &raw_len, idat.data(), idat.size()), Z_OK);
  ASSERT_EQ(raw_len, static_cast<uLongf>(*h) * (1 + *w * 3));
  rgb->clear();
  for (uint32_t y = 0; y < *h; ++y) {
    EXPECT_EQ(raw[y * (1 + *w * 3)], 0) << "filter byte of row " << y;
    rgb->insert(rgb->end(), raw.begin() + y * (1 + *w * 3) + 1, raw.begin() + (y + 1) * (1 + *w * 3));
  }
}

bool has_color(const std::vector<uint8_t>& rgb, uint8_t r, uint8_t g, uint8_t b) {
  for (size_t i = 0; i + 2 < rgb.size(); i += 3) {
    if (rgb[i] == r && rgb[i + 1] == g && rgb[i + 2] == b) return true;
  }
  return false;
}

TEST(TpTimeline, PngIsValid) {
  Timeline tl;
  for (int rank = 0; rank < 2; ++rank) {
    tl.record(ev("mm", kCompute, rank, 0, 600));
    tl.record(ev("all_gather", kComm, rank, 100, 900));
    tl.record(ev("all_reduce", kComm, rank, 950, 1200, "reduce"));
  }
  hyper::tp::PngOptions opts;
  opts.width = 640;
  opts.row_height = 20;
  opts.title = "tp step";
  const auto png = hyper::tp::to_png(tl.events(), opts);
  uint32_t w = 0, h = 0;
  std::vector<uint8_t> rgb;
  check_png(png, &w, &h, &rgb);
  EXPECT_EQ(w, 640u);
  EXPECT_GT(h, 6u * 20u);  // 6 rows + title + axis
  EXPECT_TRUE(has_color(rgb, 66, 120, 220));  // compute
  EXPECT_TRUE(has_color(rgb, 240, 150, 20));  // comm
  EXPECT_TRUE(has_color(rgb, 40, 170, 80));   // hidden comm strip

  // Written to disk; `file` agrees when available.
  const auto dir = std::filesystem::temp_directory_path() /
                   ("hyper_timeline_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "step.png").string();
  tl.write_png(path, opts);
  std::ifstream f(path, std::ios::binary);
  std::vector<uint8_t> back((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, png);
  if (std::system("command -v file > /dev/null 2>&1") == 0) {
    const std::string cmd = "file -b '" + path + "' | grep -q 'PNG image data, 640 x'";
    EXPECT_EQ(std::system(cmd.c_str()), 0);
  }
  tl.write_chrome_trace((dir / "step.json").string());
  std::ifstream j((dir / "step.json").string());
  EXPECT_NO_THROW(nlohmann::json::parse(j));
  std::filesystem::remove_all(dir);

  // Empty timeline still renders; bad options and paths throw.
  check_png(hyper::tp::to_png({}), &w, &h, &rgb);
  opts.width = 10;
  EXPECT_THROW(hyper::tp::to_png({}, opts), std::invalid_argument);
  opts.width = 640;
  opts.row_height = 1;
  EXPECT_THROW(hyper::tp::to_png({}, opts), std::invalid_argument);
  EXPECT_THROW(tl.write_png("/nonexistent-dir/x.png"), std::runtime_error);
  EXPECT_THROW(tl.write_chrome_trace("/nonexistent-dir/x.json"), std::runtime_error);
}

}  // namespace
