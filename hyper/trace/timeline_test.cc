// The Timeline recorder and the Observer interface: recording from several threads, regions
// reported through Region guards (null observer, move, end once, end on another thread),
// errors with the values in the message.
#include "hyper/trace/timeline.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "hyper/core/errors.h"

namespace hyper::trace {
namespace {

constexpr auto kComm = RegionKind::kComm;
constexpr auto kCompute = RegionKind::kCompute;

TEST(TraceTimeline, RecordsFromThreads) {
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
  double comm_sum = 0, compute_sum = 0;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_GE(events[i].end_us, events[i].start_us);
    thread_ids.insert(events[i].thread);
    if (i > 0 && events[i].rank == events[i - 1].rank) {
      EXPECT_GE(events[i].start_us, events[i - 1].start_us);
    }
    (events[i].kind == kComm ? comm_sum : compute_sum) += events[i].duration_us();
  }
  EXPECT_EQ(thread_ids.size(), 4u);
  // Independent oracle: each rank's collectives follow one another on one thread (disjoint)
  // and each compute region lies inside its collective, so the hidden time is the plain sum of
  // the compute durations and the communication time the plain sum of the comm durations.
  const auto stats = tl.overlap();
  EXPECT_NEAR(stats.comm_us, comm_sum, 1e-6 * comm_sum);
  EXPECT_NEAR(stats.hidden_us, compute_sum, 1e-6 * comm_sum);
  EXPECT_NEAR(stats.fraction(), compute_sum / comm_sum, 1e-9);

  // end() from another thread than begin() (a collective completed elsewhere).
  const int64_t id = tl.begin("reduce_scatter", kComm, 0, "comm");
  std::thread([&] { tl.end(id); }).join();
  EXPECT_EQ(tl.events().size(), 401u);
  tl.clear();
  EXPECT_TRUE(tl.events().empty());
}

TEST(TraceTimeline, Errors) {
  Timeline tl;
  const int64_t id = tl.begin("x", kComm, 0);
  tl.end(id);
  try {
    tl.end(id);
    ADD_FAILURE() << "expected hyper::ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("region id " + std::to_string(id) + " is not open"),
              std::string::npos)
        << e.what();
  }
  TimelineEvent bad;
  bad.name = "bad", bad.start_us = 5, bad.end_us = 4;
  try {
    tl.record(bad);
    ADD_FAILURE() << "expected hyper::ValueError";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("region 'bad' ends at 4 us before it starts at 5 us"),
              std::string::npos)
        << e.what();
  }
}

TEST(TraceObserver, NullObserverReportsNothing) {
  auto r = Region::collective(nullptr, "all_gather", 0);
  EXPECT_FALSE(r.active());
  r.end();
  auto c = Region::compute(nullptr, "mm", 0);
  EXPECT_FALSE(c.active());
}

/// Counts the calls (an observer other than the Timeline).
struct Counting : Observer {
  std::vector<std::string> calls;
  int64_t collective_issued(const std::string& name, int rank) override {
    calls.push_back("issued " + name + " r" + std::to_string(rank));
    return 7;
  }
  void collective_done(int64_t token) override { calls.push_back("done " + std::to_string(token)); }
  int64_t compute_begin(const std::string& name, int rank) override {
    calls.push_back("begin " + name + " r" + std::to_string(rank));
    return 9;
  }
  void compute_end(int64_t token) override { calls.push_back("end " + std::to_string(token)); }
};

TEST(TraceObserver, RegionReportsOnceAndMoves) {
  Counting obs;
  {
    auto a = Region::collective(&obs, "ag", 1);
    EXPECT_TRUE(a.active());
    Region moved = std::move(a);
    EXPECT_FALSE(a.active());  // NOLINT(bugprone-use-after-move): moved-from is inactive
    auto b = Region::compute(&obs, "mm", 1);
    b.end();
    b.end();  // once
    moved = Region::compute(&obs, "mm2", 1);  // ends the collective first
  }
  EXPECT_EQ(obs.calls, (std::vector<std::string>{"issued ag r1", "begin mm r1", "end 9",
                                                 "begin mm2 r1", "done 7", "end 9"}));
}

TEST(TraceObserver, TimelineRecordsRegions) {
  Timeline tl;
  Observer* obs = &tl;
  auto comm = Region::collective(obs, "input S(1)->R", 1);
  {
    auto mm = Region::compute(obs, "own rows", 1);
  }
  std::thread([&] { comm.end(); }).join();  // done on another thread
  const auto events = tl.events();
  ASSERT_EQ(events.size(), 2u);
  const TimelineEvent& c = events[0].kind == kComm ? events[0] : events[1];
  const TimelineEvent& p = events[0].kind == kComm ? events[1] : events[0];
  EXPECT_EQ(c.name, "input S(1)->R");
  EXPECT_EQ(c.rank, 1);
  EXPECT_EQ(p.name, "own rows");
  EXPECT_EQ(p.kind, kCompute);
  EXPECT_LE(c.start_us, p.start_us);
  EXPECT_GE(c.end_us, p.end_us);
  EXPECT_EQ(tl.num_open(), 0u);
}

}  // namespace
}  // namespace hyper::trace
