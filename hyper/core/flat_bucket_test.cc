// Tests of hyper/core/flat_bucket.h against a brute-force oracle: every candidate boundary
// (each parameter's block boundaries counted from its start, and every parameter start and
// end) enumerated, the nearest to r * numel / ranks taken (ties to the lower one).

#include "hyper/core/flat_bucket.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/layout.h"
#include "hyper/core/testing_errors.h"

namespace hyper {
namespace {

using hyper::testing::error_of;
using ::testing::HasSubstr;

/// The oracle's boundaries.
std::vector<int64_t> oracle_bounds(const std::vector<int64_t>& numels, int64_t ranks,
                                   int64_t block) {
  std::set<int64_t> cand;
  int64_t o = 0;
  for (const int64_t n : numels) {
    for (int64_t k = 0; k * block < n; ++k) cand.insert(o + k * block);
    cand.insert(o);
    o += n;
    cand.insert(o);
  }
  cand.insert(0);
  const int64_t total = o;
  std::vector<int64_t> b = {0};
  for (int64_t r = 1; r < ranks; ++r) {
    const long double t = static_cast<long double>(total) * r / ranks;
    int64_t best = 0;
    long double best_d = INFINITY;
    for (const int64_t c : cand) {
      const long double d = std::fabs(static_cast<long double>(c) - t);
      if (d < best_d) {  // ascending: a tie keeps the lower candidate
        best = c;
        best_d = d;
      }
    }
    b.push_back(best);
  }
  b.push_back(total);
  return b;
}

/// Properties every plan has: units sum to numel, boundaries at candidates, each parameter's
/// pieces cover it once in rank order, each rank within `block` of the mean.
void expect_valid(const FlatBucketPlan& p, const std::vector<int64_t>& numels, int64_t ranks,
                  int64_t block) {
  ASSERT_EQ(p.ranks(), ranks);
  ASSERT_EQ(p.params(), static_cast<int64_t>(numels.size()));
  int64_t sum = 0;
  for (const int64_t u : p.rank_units()) {
    EXPECT_GE(u, 0);
    sum += u;
  }
  EXPECT_EQ(sum, p.numel());
  EXPECT_LE(p.max_imbalance(), static_cast<double>(block));
  for (int64_t q = 0; q < p.params(); ++q) {
    int64_t next = 0;
    for (int64_t r = 0; r < ranks; ++r) {
      const auto [lo, hi] = p.param_range(q, r);
      if (hi == lo) continue;
      EXPECT_EQ(lo, next) << "param " << q << " rank " << r;
      // A piece starts at a block boundary of the parameter (or its start) and ends at one
      // (or its end): no block straddles two ranks.
      EXPECT_EQ(lo % block, 0) << "param " << q << " rank " << r;
      EXPECT_TRUE(hi % block == 0 || hi == numels[q]) << "param " << q << " rank " << r;
      next = hi;
    }
    EXPECT_EQ(next, numels[q]) << "param " << q;
    int64_t units = 0;
    for (const int64_t u : p.param_units(q)) units += u;
    EXPECT_EQ(units, numels[q]);
  }
}

TEST(FlatBucket, ThreeParamsOnThreeRanks) {
  const FlatBucketPlan p = plan_flat_bucket({4096, 64, 4096}, 3, 128);
  EXPECT_EQ(p.numel(), 8256);
  EXPECT_EQ(p.offset(2), 4160);
  // Targets 2752 and 5504 fall midway between block boundaries: the lower one is taken.
  EXPECT_EQ(p.rank_units(), (std::vector<int64_t>{2688, 2752, 2816}));
  EXPECT_EQ(p.placement(), RaggedShard({0}, {2688, 2752, 2816}));
  EXPECT_EQ(p.param_range(0, 0), (std::pair<int64_t, int64_t>{0, 2688}));
  EXPECT_EQ(p.param_range(0, 1), (std::pair<int64_t, int64_t>{2688, 4096}));
  EXPECT_EQ(p.param_range(1, 1), (std::pair<int64_t, int64_t>{0, 64}));
  EXPECT_EQ(p.param_range(2, 1), (std::pair<int64_t, int64_t>{0, 1280}));
  EXPECT_EQ(p.param_range(2, 0), (std::pair<int64_t, int64_t>{0, 0}));
  EXPECT_EQ(p.param_units(2), (std::vector<int64_t>{0, 1280, 2816}));
  EXPECT_EQ(p.to_string(),
            "flat bucket: 3 params, 8256 elements, block 128, 3 ranks, units (2688,2752,2816)\n"
            "  rank 0: [0, 2688) p0[0, 2688)\n"
            "  rank 1: [2688, 5440) p0[2688, 4096) p1[0, 64) p2[0, 1280)\n"
            "  rank 2: [5440, 8256) p2[1280, 4096)");
  expect_valid(p, {4096, 64, 4096}, 3, 128);
  // The flat buffer's layout is a valid RaggedShard layout whose local sizes are the units.
  const Layout l(MeshTopology({3}), {p.placement()}, Shape{p.numel()});
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(l.local_numel(r), p.rank_units()[r]);
}

TEST(FlatBucket, SmallBucketOnManyRanksGivesZeroUnitRanks) {
  const FlatBucketPlan p = plan_flat_bucket({100}, 8, 64);
  // Candidates 0, 64, 100 only.
  EXPECT_EQ(p.rank_units(), (std::vector<int64_t>{0, 0, 64, 0, 0, 0, 36, 0}));
  EXPECT_EQ(p.placement(), RaggedShard({0}, {0, 0, 64, 0, 0, 0, 36, 0}));
  expect_valid(p, {100}, 8, 64);
}

TEST(FlatBucket, EmptyParametersAndEmptyBucket) {
  const FlatBucketPlan p = plan_flat_bucket({0, 300, 0, 0, 200, 0}, 2, 16);
  expect_valid(p, {0, 300, 0, 0, 200, 0}, 2, 16);
  EXPECT_EQ(p.rank_units(), (std::vector<int64_t>{256, 244}));  // target 250: 256 is nearest
  EXPECT_EQ(p.param_units(0), (std::vector<int64_t>{0, 0}));
  const FlatBucketPlan e = plan_flat_bucket({0, 0}, 4, 8);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.rank_units(), (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_THAT(error_of([&] { e.placement(); }),
              HasSubstr("flat bucket of 2 parameters has no elements: nothing to shard"));
  EXPECT_EQ(plan_flat_bucket({}, 3, 1).numel(), 0);
}

TEST(FlatBucket, MatchesTheBruteForceOracle) {
  std::mt19937_64 rng(40);
  for (int it = 0; it < 3000; ++it) {
    const int64_t ranks = 1 + static_cast<int64_t>(rng() % 9);
    const int64_t block = std::vector<int64_t>{1, 2, 7, 16, 128}[rng() % 5];
    std::vector<int64_t> numels(rng() % 6);
    for (auto& n : numels) n = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 700);
    const FlatBucketPlan p = plan_flat_bucket(numels, ranks, block);
    const auto want = oracle_bounds(numels, ranks, block);
    for (int64_t r = 0; r <= ranks; ++r)
      ASSERT_EQ(p.bound(r), want[static_cast<size_t>(r)])
          << p.to_string() << "\nranks " << ranks << " block " << block << " r " << r;
    expect_valid(p, numels, ranks, block);
  }
}

TEST(FlatBucket, HugeBucketsStayExact) {
  // 2^40 + 3 elements over 7 ranks, block 2^20: boundaries are exact integers near the mean.
  const int64_t n = (int64_t{1} << 40) + 3;
  const FlatBucketPlan p = plan_flat_bucket({n}, 7, int64_t{1} << 20);
  for (int64_t r = 1; r < 7; ++r) EXPECT_EQ(p.bound(r) % (int64_t{1} << 20), 0);
  EXPECT_LE(p.max_imbalance(), static_cast<double>(int64_t{1} << 20));
}

TEST(FlatBucket, FromString) {
  EXPECT_EQ(FlatBucketPlan::from_string("numels=[4096,64,4096] ranks=3 block=128").to_string(),
            plan_flat_bucket({4096, 64, 4096}, 3, 128).to_string());
  EXPECT_EQ(FlatBucketPlan::from_string(" ranks=2  numels=[ 5 , 7 ] ").rank_units(),
            (std::vector<int64_t>{6, 6}));
  EXPECT_THAT(error_of([] { FlatBucketPlan::from_string("numels=[4] ranks=2 ranks=3"); }),
              HasSubstr("'ranks' appears twice"));
  EXPECT_THAT(error_of([] { FlatBucketPlan::from_string("numels=[4]"); }),
              HasSubstr("missing 'ranks=N'"));
  EXPECT_THAT(error_of([] { FlatBucketPlan::from_string("numels=4 ranks=2"); }),
              HasSubstr("cannot parse 'numels=4 ranks=2'"));
  EXPECT_THAT(error_of([] { FlatBucketPlan::from_string("numels=[4] ranks=-1"); }),
              HasSubstr("ranks must be at least 1, got -1"));
}

TEST(FlatBucket, Errors) {
  EXPECT_THAT(error_of([] { plan_flat_bucket({4}, 0, 1); }),
              HasSubstr("plan_flat_bucket: ranks must be at least 1, got 0"));
  EXPECT_THAT(error_of([] { plan_flat_bucket({4}, 2, 0); }),
              HasSubstr("plan_flat_bucket: block must be at least 1 element, got 0"));
  EXPECT_THAT(error_of([] { plan_flat_bucket({4, -1}, 2, 1); }),
              HasSubstr("plan_flat_bucket: parameter 1 has -1 elements"));
  EXPECT_THAT(error_of([] { plan_flat_bucket({int64_t{1} << 62, 1}, 2, 1); }),
              HasSubstr("plan_flat_bucket: 2 parameters total more than 2^62 elements"));
  const FlatBucketPlan p = plan_flat_bucket({10}, 2, 1);
  EXPECT_THAT(error_of([&] { p.param_range(1, 0); }), HasSubstr("flat bucket: parameter 1 of 1"));
  EXPECT_THAT(error_of([&] { p.bound(3); }), HasSubstr("flat bucket: bound 3 of ranks 0..2"));
  EXPECT_THROW(p.param_units(-1), ValueError);
}

}  // namespace
}  // namespace hyper
