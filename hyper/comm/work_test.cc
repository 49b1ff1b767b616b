// hyper::comm::Work, the one completion object: errors keep their type (mapped only at the
// LibTorch boundary), wait with a timeout, completion callbacks, deferred/then; and the
// World's dedicated groups and background-job serialisation built with it.
#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "hyper/comm/blocked_time.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/internal/state.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/comm/work.h"
#include "hyper/comm/world.h"
#include "hyper/core/errors.h"

namespace hyper {
namespace {

using comm::Work;
using namespace std::chrono_literals;

template <typename E>
std::string thrown_by(const Work& w) {
  try {
    w.wait();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("wrong type: ") + e.what();
  }
  return "no exception";
}

TEST(Work, ErrorsOfDeferredWorkKeepTheirType) {
  const Work v = Work::deferred("v", []() -> at::Tensor { throw ValueError("bad size 7"); });
  EXPECT_EQ(thrown_by<ValueError>(v), "bad size 7");
  EXPECT_EQ(thrown_by<ValueError>(v), "bad size 7");  // the same exception again
  const Work io = Work::deferred("io", []() -> at::Tensor { throw IOError("disk full: /x"); });
  EXPECT_EQ(thrown_by<IOError>(io), "disk full: /x");
  const Work save = Work::deferred("s", []() -> at::Tensor { throw SaveError("rank 1: no"); });
  EXPECT_EQ(thrown_by<SaveError>(save), "rank 1: no");
  ASSERT_TRUE(save.exception() != nullptr);
  // then(): an error of either part reaches the caller unchanged.
  const Work t = Work::completed(at::ones({2})).then("t", [](const at::Tensor&) -> at::Tensor {
    throw NotImplementedError("Partial(max) gradient");
  });
  EXPECT_EQ(thrown_by<NotImplementedError>(t), "Partial(max) gradient");
  const Work chained = v.then("c", [](const at::Tensor& x) { return x; });
  EXPECT_EQ(thrown_by<ValueError>(chained), "bad size 7");
}

TEST(Work, ForeignErrorsOfACollectiveAreMappedAtTheBoundary) {
  // A collective's Work (internal::make_work) maps what LibTorch or Gloo throws.
  const Work gloo = comm::internal::make_work(
      "all_gather_v on group [0,1] (rank 0)", {},
      []() -> at::Tensor { throw std::runtime_error("Connection reset by peer"); });
  EXPECT_EQ(thrown_by<CommError>(gloo),
            "all_gather_v on group [0,1] (rank 0): Connection reset by peer");
  const Work c10 = comm::internal::make_work("all_reduce on group [0,1] (rank 1)", {},
                                             []() -> at::Tensor { TORCH_CHECK(false, "timed out"); });
  EXPECT_EQ(thrown_by<CommError>(c10), "all_reduce on group [0,1] (rank 1): timed out");
  const Work c10v = comm::internal::make_work("x", {}, []() -> at::Tensor {
    TORCH_CHECK_VALUE(false, "dtype mismatch");
  });
  EXPECT_EQ(thrown_by<ValueError>(c10v), "x: dtype mismatch");
  // hyper's own types pass unchanged (no second prefix).
  const Work own = comm::internal::make_work("y", {}, []() -> at::Tensor {
    throw ValueError("local numel 3 does not match 4");
  });
  EXPECT_EQ(thrown_by<ValueError>(own), "local numel 3 does not match 4");
}

TEST(Work, RethrowWithContextKeepsTheType) {
  auto with_context = [](auto thrower) -> std::string {
    try {
      try {
        thrower();
      } catch (...) {
        comm::rethrow_with_context("redistribute step 1");
      }
    } catch (const ValueError& e) {
      return std::string("ValueError: ") + e.what();
    } catch (const CommError& e) {
      return std::string("CommError: ") + e.what();
    } catch (const IOError& e) {
      return std::string("IOError: ") + e.what();
    }
    return "?";
  };
  EXPECT_EQ(with_context([] { throw ValueError("v"); }), "ValueError: redistribute step 1: v");
  EXPECT_EQ(with_context([] { throw IOError("f"); }), "IOError: redistribute step 1: f");
  EXPECT_EQ(with_context([] { throw std::runtime_error("r"); }), "CommError: redistribute step 1: r");
  EXPECT_EQ(with_context([] { TORCH_CHECK(false, "c"); }), "CommError: redistribute step 1: c");
}

TEST(Work, WaitWithATimeout) {
  std::atomic<bool> ready{false};
  std::atomic<int> runs{0};
  const Work w = Work::deferred(
      "slow",
      [&] {
        ++runs;
        return at::full({1}, 5.0);
      },
      [&] { return ready.load(); });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(w.wait(20ms));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 20ms);
  EXPECT_FALSE(w.is_completed());
  EXPECT_FALSE(w.is_finished());
  EXPECT_EQ(runs.load(), 0);  // the epilogue did not run
  std::thread later([&] {
    std::this_thread::sleep_for(30ms);
    ready = true;
  });
  EXPECT_TRUE(w.wait(5000ms));
  later.join();
  EXPECT_TRUE(w.is_finished());
  EXPECT_EQ(w.wait().item<double>(), 5.0);
  EXPECT_EQ(runs.load(), 1);
  // A failed work rethrows from the timed wait too.
  const Work bad = Work::deferred("bad", []() -> at::Tensor { throw ValueError("no"); });
  EXPECT_THROW(bad.wait(1ms), ValueError);
}

TEST(Work, CallbacksRunOnceAfterTheEpilogueInOrder) {
  std::vector<std::string> log;
  const Work w = Work::deferred("w", [&] {
    log.push_back("finish");
    return at::ones({1});
  });
  w.add_callback([&](const Work& x) { log.push_back("cb1 " + std::to_string(x.is_finished())); });
  w.add_callback([&](const Work&) { throw std::runtime_error("ignored"); });
  w.add_callback([&](const Work&) { log.push_back("cb3"); });
  EXPECT_TRUE(log.empty());
  w.wait();
  w.wait();
  EXPECT_EQ(log, (std::vector<std::string>{"finish", "cb1 1", "cb3"}));
  w.add_callback([&](const Work&) { log.push_back("late"); });  // already finished: at once
  EXPECT_EQ(log.back(), "late");
  // A failed work calls its callbacks too; they can read the exception.
  std::string seen;
  const Work bad = Work::deferred("bad", []() -> at::Tensor { throw IOError("gone"); });
  bad.add_callback([&](const Work& x) {
    try {
      std::rethrow_exception(x.exception());
    } catch (const IOError& e) {
      seen = e.what();
    }
  });
  EXPECT_THROW(bad.wait(), IOError);
  EXPECT_EQ(seen, "gone");
}

TEST(Work, RealCollectiveWithATimedWait) {
  // A real collective left in flight, waited for with a timeout; bad sizes are refused
  // before anything is issued.
  auto out = comm::testing::run_threads_collect(2, [](int rank, int, const World& world) {
    const comm::Group g = world.group();
    const at::Tensor x = at::ones({4});
    Work w = comm::all_gather_v_async(x, g, std::vector<int64_t>{4, 4});
    EXPECT_TRUE(w.wait(10000ms));
    EXPECT_EQ(w.wait().numel(), 8);
    if (rank == 1) {
      EXPECT_THROW(comm::all_gather_v_async(x, g, std::vector<int64_t>{4}), ValueError);
    }
  });
  for (const auto& o : out) EXPECT_TRUE(o.ok) << o.error;
}

TEST(BlockedTime, CountsTheWaitForALatePeerAndNotAHiddenTransfer) {
  // Rank 1 reaches the first all_reduce 300 ms late: rank 0, already there, is blocked
  // for at least most of it. Then rank 0 issues the second one async and computes (sleeps)
  // 500 ms while rank 1 joins at once: the transfer is over by the wait, which blocks for
  // little. Each rank thread has its own counter; reset zeroes the calling thread's.
  auto out = comm::testing::run_threads_collect(2, [](int rank, int, const World& world) {
    const comm::Group g = world.group();
    comm::reset_blocked_time();
    EXPECT_EQ(comm::blocked_seconds(), 0.0);
    if (rank == 1) std::this_thread::sleep_for(300ms);
    comm::all_reduce(at::ones({4}), comm::ReduceOp::kSum, g);
    const double late = comm::blocked_seconds();
    if (rank == 0) {
      EXPECT_GE(late, 0.2) << "rank 0 waited for rank 1";
    } else {
      EXPECT_LT(late, 0.2) << "rank 1 arrived last";
    }
    comm::reset_blocked_time();
    if (rank == 0) {
      const Work w = comm::all_reduce_async(at::ones({4}), comm::ReduceOp::kSum, g);
      std::this_thread::sleep_for(500ms);
      EXPECT_EQ(w.wait().sum().item<double>(), 8.0);
      EXPECT_LT(comm::blocked_seconds(), 0.25) << "the transfer ran during the sleep";
    } else {
      comm::all_reduce(at::ones({4}), comm::ReduceOp::kSum, g);
    }
    // A timed wait's polling counts as well.
    comm::reset_blocked_time();
    const Work never = Work::deferred("never", [] { return at::ones({1}); }, [] { return false; });
    EXPECT_FALSE(never.wait(50ms));
    EXPECT_GE(comm::blocked_seconds(), 0.04);
  });
  for (const auto& o : out) EXPECT_TRUE(o.ok) << o.error;
}

TEST(QuiesceGlooWorkers, WaitsForTheWorkersToLetGoAndGivesUpAtTheBound) {
  // Rank 0's all_reduce runs on its Gloo worker until rank 1 joins, 1 s later: a 50 ms
  // quiesce gives up (false) and leaves it running; once both finished, quiesce is true and
  // the workers hold no reference to the work's tensor.
  auto out = comm::testing::run_threads_collect(2, [](int rank, int, const World& world) {
    const comm::Group g = world.group();
    if (rank == 1) std::this_thread::sleep_for(1000ms);
    at::Tensor r;
    {
      const Work w = comm::all_reduce_async(at::ones({1024}), comm::ReduceOp::kSum, g);
      if (rank == 0) {
        const auto t0 = std::chrono::steady_clock::now();
        EXPECT_FALSE(comm::quiesce_gloo_workers(50ms));
        EXPECT_LT(std::chrono::steady_clock::now() - t0, 900ms) << "gave up at the bound";
        EXPECT_FALSE(w.is_completed());
      }
      r = w.wait();
    }
    EXPECT_EQ(r.sum().item<double>(), 2048.0);
    comm::all_reduce(at::ones({1}), comm::ReduceOp::kSum, g);  // both ranks are past it
    EXPECT_TRUE(comm::quiesce_gloo_workers(5000ms));
    EXPECT_EQ(r.use_count(), 1) << "the result is held elsewhere";
  });
  for (const auto& o : out) EXPECT_TRUE(o.ok) << o.error;
}

TEST(WorldBackground, DedicatedGroupsAndSerialisedJobs) {
  comm::testing::run_threads(2, [](int rank, int, const World& world) {
    const comm::Group a = world.dedicated_group("test/a");
    EXPECT_EQ(a.size(), 2);
    EXPECT_EQ(a.rank(), rank);
    EXPECT_TRUE(world.dedicated_group("test/a") == a);
    const at::Tensor r = comm::all_reduce(at::ones({2}), comm::ReduceOp::kSum, a);
    EXPECT_TRUE(at::equal(r, at::full({2}, 2.0)));
    // exchange_background returns the previous job of the key (a completed one at first).
    const Work first = Work::completed(at::full({1}, 1.0), "first");
    const Work none = world.exchange_background("test/jobs", first);
    EXPECT_TRUE(none.is_finished());
    const Work second = Work::completed(at::full({1}, 2.0), "second");
    EXPECT_EQ(world.exchange_background("test/jobs", second).description(), "first");
    EXPECT_EQ(world.exchange_background("test/other", first).description(), "completed work");
  });
}

}  // namespace
}  // namespace hyper
