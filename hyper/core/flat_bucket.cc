#include "hyper/core/flat_bucket.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/internal/text.h"

namespace hyper {

int64_t FlatBucketPlan::offset(int64_t p) const {
  HYPER_CHECK_VALUE(p >= 0 && p < params(), "flat bucket: parameter ", p, " of ", params());
  return offsets_[static_cast<size_t>(p)];
}

int64_t FlatBucketPlan::param_numel(int64_t p) const {
  HYPER_CHECK_VALUE(p >= 0 && p < params(), "flat bucket: parameter ", p, " of ", params());
  return numels_[static_cast<size_t>(p)];
}

int64_t FlatBucketPlan::bound(int64_t r) const {
  HYPER_CHECK_VALUE(r >= 0 && r <= ranks(), "flat bucket: bound ", r, " of ranks 0..", ranks());
  return bounds_[static_cast<size_t>(r)];
}

std::vector<int64_t> FlatBucketPlan::rank_units() const {
  std::vector<int64_t> u;
  for (size_t r = 0; r + 1 < bounds_.size(); ++r) u.push_back(bounds_[r + 1] - bounds_[r]);
  return u;
}

Placement FlatBucketPlan::placement() const {
  HYPER_CHECK_VALUE(numel() > 0, "flat bucket of ", params(),
                    " parameters has no elements: nothing to shard");
  return RaggedShard({0}, rank_units());
}

std::pair<int64_t, int64_t> FlatBucketPlan::param_range(int64_t p, int64_t r) const {
  const int64_t o = offset(p), n = param_numel(p);
  const int64_t lo = std::clamp(bound(r) - o, int64_t{0}, n);
  const int64_t hi = std::clamp(bound(r + 1) - o, int64_t{0}, n);
  return {lo, std::max(lo, hi)};
}

std::vector<int64_t> FlatBucketPlan::param_units(int64_t p) const {
  std::vector<int64_t> u;
  for (int64_t r = 0; r < ranks(); ++r) {
    const auto [lo, hi] = param_range(p, r);
    u.push_back(hi - lo);
  }
  return u;
}

double FlatBucketPlan::max_imbalance() const {
  const double ideal = static_cast<double>(numel()) / static_cast<double>(std::max<int64_t>(1, ranks()));
  double worst = 0;
  for (const int64_t u : rank_units()) worst = std::max(worst, std::abs(static_cast<double>(u) - ideal));
  return worst;
}

std::string FlatBucketPlan::to_string() const {
  std::ostringstream os;
  os << "flat bucket: " << params() << " params, " << numel() << " elements, block " << block_
     << ", " << ranks() << " ranks, units (";
  const auto u = rank_units();
  for (size_t r = 0; r < u.size(); ++r) os << (r ? "," : "") << u[r];
  os << ")";
  for (int64_t r = 0; r < ranks(); ++r) {
    os << "\n  rank " << r << ": [" << bound(r) << ", " << bound(r + 1) << ")";
    for (int64_t p = 0; p < params(); ++p) {
      const auto [lo, hi] = param_range(p, r);
      if (hi > lo) os << " p" << p << "[" << lo << ", " << hi << ")";
    }
  }
  return os.str();
}

FlatBucketPlan FlatBucketPlan::from_string(const std::string& text) {
  internal::TextReader r(text);
  std::vector<int64_t> numels;
  int64_t ranks = 0, block = 1;
  bool seen[3] = {false, false, false};
  while (!r.at_end()) {
    r.skip_space();
    const std::size_t at = r.pos();
    const std::string key = r.read_word();
    const char* const keys[] = {"numels", "ranks", "block"};
    int k = 0;
    while (k < 3 && key != keys[k]) ++k;
    if (k == 3 || seen[k]) {
      r.set_pos(at);  // the error points at the key
      r.fail(k == 3 ? "unknown key '" + key + "' (expected numels, ranks, block)"
                    : "'" + key + "' appears twice");
    }
    seen[k] = true;
    r.expect("=");
    if (k == 0)
      numels = r.read_int_list();
    else
      (k == 1 ? ranks : block) = r.read_int();
  }
  if (!seen[0]) r.fail("missing 'numels=[...]'");
  if (!seen[1]) r.fail("missing 'ranks=N'");
  return plan_flat_bucket(numels, ranks, block);
}

FlatBucketPlan plan_flat_bucket(const std::vector<int64_t>& numels, int64_t ranks, int64_t block) {
  HYPER_CHECK_VALUE(ranks >= 1, "plan_flat_bucket: ranks must be at least 1, got ", ranks);
  HYPER_CHECK_VALUE(block >= 1, "plan_flat_bucket: block must be at least 1 element, got ", block);
  FlatBucketPlan plan;
  plan.block_ = block;
  plan.numels_ = numels;
  plan.offsets_.push_back(0);
  constexpr int64_t kMax = int64_t{1} << 62;
  for (size_t p = 0; p < numels.size(); ++p) {
    HYPER_CHECK_VALUE(numels[p] >= 0, "plan_flat_bucket: parameter ", p, " has ", numels[p],
                      " elements");
    HYPER_CHECK_VALUE(numels[p] <= kMax - plan.offsets_.back(), "plan_flat_bucket: ",
                      numels.size(), " parameters total more than 2^62 elements");
    plan.offsets_.push_back(plan.offsets_.back() + numels[p]);
  }
  const int64_t n = plan.offsets_.back();
  const auto& off = plan.offsets_;
  // The candidate nearest to `t` (ties to the lower one): inside the parameter holding t,
  // its block boundaries counted from the parameter's start, and its start and end.
  auto nearest = [&](long double t) -> int64_t {
    if (t <= 0) return 0;
    if (t >= static_cast<long double>(n)) return n;
    // The last parameter starting at or before t with elements (skips empty ones).
    auto it = std::upper_bound(off.begin(), off.end() - 1, static_cast<int64_t>(std::floor(t)));
    const int64_t o = *(it - 1);
    const int64_t end = off[static_cast<size_t>(it - off.begin())];
    const int64_t k = static_cast<int64_t>(std::floor((t - o) / block));
    const int64_t lo = std::min(o + k * block, end);
    const int64_t hi = std::min(lo + block, end);
    return (t - lo) <= (hi - t) ? lo : hi;
  };
  plan.bounds_.push_back(0);
  for (int64_t r = 1; r < ranks; ++r) {
    const long double t = static_cast<long double>(n) * r / ranks;
    plan.bounds_.push_back(std::max(plan.bounds_.back(), nearest(t)));
  }
  plan.bounds_.push_back(n);
  return plan;
}

}  // namespace hyper
