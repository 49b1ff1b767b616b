// The Chrome trace: parsed back with nlohmann json and checked value by value; written to
// disk; an unwritable path names itself.
#include "hyper/trace/chrome_trace.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <unistd.h>

#include "hyper/trace/timeline.h"
#include "hyper/trace/testing_util.h"

namespace hyper::trace {
namespace {

using testing::ev;

TEST(TraceChromeTrace, ParsesBack) {
  std::vector<TimelineEvent> events = {
      ev("mm \"q\"\n\\", RegionKind::kCompute, 0, 0, 10.5),
      ev("all_gather", RegionKind::kComm, 0, 1.25, 8),
      ev("mm", RegionKind::kCompute, 1, 0, 9, "main"),
      ev("all_reduce \xC2\xB5", RegionKind::kComm, 1, 2, 12, "nccl")};
  events[1].thread = 3;
  const auto json = nlohmann::json::parse(to_chrome_trace(events));
  EXPECT_EQ(json["displayTimeUnit"], "ms");
  ASSERT_TRUE(json["traceEvents"].is_array());
  std::map<std::string, nlohmann::json> complete;
  std::map<std::pair<int, int>, std::string> thread_names;
  std::map<int, std::string> process_names;
  for (const auto& e : json["traceEvents"]) {
    if (e["ph"] == "M") {
      if (e["name"] == "thread_name") {
        thread_names[{e["pid"].get<int>(), e["tid"].get<int>()}] = e["args"]["name"];
      }
      if (e["name"] == "process_name") process_names[e["pid"].get<int>()] = e["args"]["name"];
      continue;
    }
    ASSERT_EQ(e["ph"], "X");
    complete[e["name"].get<std::string>()] = e;
  }
  ASSERT_EQ(complete.size(), 4u);
  const auto& mm = complete.at("mm \"q\"\n\\");  // escapes round-trip
  EXPECT_EQ(mm["pid"], 0);
  EXPECT_EQ(mm["tid"], 1);  // compute row first
  EXPECT_DOUBLE_EQ(mm["ts"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(mm["dur"].get<double>(), 10.5);
  EXPECT_EQ(mm["cat"], "compute");
  const auto& ag = complete.at("all_gather");
  EXPECT_EQ(ag["tid"], 2);
  EXPECT_DOUBLE_EQ(ag["ts"].get<double>(), 1.25);
  EXPECT_DOUBLE_EQ(ag["dur"].get<double>(), 6.75);
  EXPECT_EQ(ag["cat"], "comm");
  EXPECT_EQ(ag["args"]["kind"], "comm");
  EXPECT_EQ(ag["args"]["thread"], 3);
  EXPECT_EQ(complete.at("all_reduce \xC2\xB5")["pid"], 1);
  EXPECT_EQ((thread_names[{0, 1}]), "compute");
  EXPECT_EQ((thread_names[{0, 2}]), "comm");
  EXPECT_EQ((thread_names[{1, 1}]), "main");
  EXPECT_EQ((thread_names[{1, 2}]), "nccl");
  EXPECT_EQ(process_names, (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  // Empty timeline: still valid JSON.
  EXPECT_TRUE(nlohmann::json::parse(to_chrome_trace({}))["traceEvents"].empty());
}

TEST(TraceChromeTrace, WritesAndNamesAnUnwritablePath) {
  Timeline tl;
  tl.record(ev("mm", RegionKind::kCompute, 0, 0, 5));
  const auto path = std::filesystem::temp_directory_path() /
                    ("hyper_trace_" + std::to_string(::getpid()) + ".json");
  tl.write_chrome_trace(path.string());
  std::ifstream f(path);
  const auto back = nlohmann::json::parse(f);
  EXPECT_EQ(back, nlohmann::json::parse(tl.chrome_trace()));
  std::filesystem::remove(path);
  try {
    tl.write_chrome_trace("/nonexistent-dir/x.json");
    ADD_FAILURE() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot write the Chrome trace to '/nonexistent-dir/x.json'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace hyper::trace
