// Tests of hyper/core/redistribute_plan.h (and the reference executor in plan_executor.h).
//
// The heart is an exhaustive check of every ordered pair of layouts in a catalogue
// (internal/test_catalogue.h) on meshes (1), (2), (3), (4), (2,2), (1,3), (2,3): source
// local arrays come from a known global array through a brute-force oracle (plus
// per-rank partial contributions for Partial sources), the plan is executed, and the
// result is compared with the oracle; the plan's pieces are then checked element by
// element, independently of the executor, against the rules the planner promises.

#include "hyper/core/redistribute_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_catalogue.h"
#include "hyper/core/plan_executor.h"
#include "hyper/core/plan_steps.h"

namespace hyper {
namespace {

using testutil::box_flat_indices;
using testutil::mesh_coord;
using testutil::owned_flat;
using testutil::throws_with;

using Locals = std::vector<std::vector<double>>;

using testutil::arange;
constexpr auto* L = &testutil::layout_from_text;

bool near(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(1.0, std::fabs(b)); }

bool all_near(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!near(a[i], b[i])) return false;
  return true;
}

std::string str(const std::vector<double>& v) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? "," : "") << v[i];
  return os.str() + "]";
}

/// The (single) reduce op of a layout's Partial dims, "" if none.
std::string partial_op(const Layout& l) {
  std::string op;
  for (const auto& p : l.placements())
    if (p.is_partial()) op = p.reduce_op();
  return op;
}

/// Row-major linear index of `coord` restricted to mesh dims `dims`.
int64_t linear_over(const std::vector<int64_t>& coord, const std::vector<int64_t>& mesh_shape,
                    const std::vector<int64_t>& dims) {
  int64_t q = 0;
  for (auto m : dims) q = q * mesh_shape[m] + coord[m];
  return q;
}

/// The pairs the planner is documented to refuse: a Partial changing op on one mesh
/// dim, or Partial dims of different ops reduced at once.
bool expect_not_implemented(const Layout& src, const Layout& dst) {
  std::set<std::string> reduced;
  for (std::size_t m = 0; m < src.placements().size(); ++m) {
    const auto& s = src.placements()[m];
    const auto& d = dst.placements()[m];
    if (s.is_partial() && d.is_partial() && s.reduce_op() != d.reduce_op()) return true;
    if (s.is_partial() && !d.is_partial()) reduced.insert(s.reduce_op());
  }
  return reduced.size() > 1;
}

/// Source local storages: the oracle's owned elements of `global`; for Partial layouts
/// per-rank contributions whose reduction over the Partial mesh dims is `global`
/// exactly (sum/avg: integer offsets summing to zero; max/min: one owner per element,
/// varying with the element, holds the value, the others a smaller/larger one).
Locals make_source(const Layout& src, const std::vector<double>& global) {
  const auto& ms = src.mesh().shape();
  std::vector<int64_t> pdims;
  int64_t q_count = 1;
  for (std::size_t m = 0; m < ms.size(); ++m)
    if (src.placements()[m].is_partial()) {
      pdims.push_back(static_cast<int64_t>(m));
      q_count *= ms[m];
    }
  const std::string op = partial_op(src);
  Locals out;
  for (int64_t r = 0; r < src.mesh().size(); ++r) {
    const auto own = owned_flat(src, r);
    const int64_t q = linear_over(mesh_coord(r, ms), ms, pdims);
    std::vector<double> local;
    for (std::size_t j = 0; j < own.size(); ++j) {
      double v = global[own[j]];
      const int64_t jj = static_cast<int64_t>(j);
      if (op == "sum" || op == "avg") {
        // sum: coordinate 0 holds v - (the others), the others hold off(q): total v.
        // avg: everyone holds v + an offset, offsets summing to zero: mean v.
        auto off = [&](int64_t qq) { return static_cast<double>(jj % 7 + qq + 1); };
        if (q > 0) {
          v = (op == "sum" ? 0.0 : v) + off(q);
        } else {
          for (int64_t qq = 1; qq < q_count; ++qq) v -= off(qq);
        }
      } else if (op == "max" || op == "min") {
        const int64_t owner = jj % q_count;
        const double delta = static_cast<double>(1 + q % 3 + jj % 2);
        if (q != owner) v += op == "max" ? -delta : delta;
      }
      local.push_back(v);
    }
    out.push_back(std::move(local));
  }
  return out;
}

/// Brute-force logical value of a layout's storages: for every element, the values of
/// the ranks holding it (one replica per Replicate mesh dim: coordinate 0), reduced.
/// Also checks that every element has exactly one value per Partial combination.
std::vector<double> brute_assemble(const Layout& l, const Locals& locals, std::string* problem) {
  const auto& ms = l.mesh().shape();
  const auto& ps = l.placements();
  const int64_t n = testutil::prod(l.shape());
  const std::string op = partial_op(l);
  int64_t parts = 1;
  for (std::size_t m = 0; m < ms.size(); ++m)
    if (ps[m].is_partial()) parts *= ms[m];
  std::vector<std::vector<double>> vals(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < l.mesh().size(); ++r) {
    const auto c = mesh_coord(r, ms);
    bool skip = false;
    for (std::size_t m = 0; m < ms.size(); ++m) skip = skip || (ps[m].is_replicate() && c[m] != 0);
    if (skip) continue;
    const auto own = owned_flat(l, r);
    if (own.size() != locals[r].size()) {
      *problem = "rank " + std::to_string(r) + " storage has the wrong size";
      return {};
    }
    for (std::size_t j = 0; j < own.size(); ++j) vals[own[j]].push_back(locals[r][j]);
  }
  std::vector<double> out(static_cast<std::size_t>(n));
  for (int64_t f = 0; f < n; ++f) {
    const auto& v = vals[f];
    if (static_cast<int64_t>(v.size()) != parts) {
      *problem = "element " + std::to_string(f) + " has " + std::to_string(v.size()) +
                 " values, expected " + std::to_string(parts);
      return {};
    }
    double acc = v[0];
    for (std::size_t i = 1; i < v.size(); ++i) {
      if (op == "max")
        acc = std::max(acc, v[i]);
      else if (op == "min")
        acc = std::min(acc, v[i]);
      else
        acc += v[i];
    }
    if (op == "avg") acc /= static_cast<double>(parts);
    out[f] = acc;
  }
  return out;
}

bool inside(const Box& inner, const Box& outer) {
  if (inner.sizes.size() != outer.sizes.size() || inner.offsets.size() != inner.sizes.size())
    return false;
  for (std::size_t d = 0; d < inner.sizes.size(); ++d)
    if (inner.offsets[d] < outer.offsets[d] ||
        inner.offsets[d] + inner.sizes[d] > outer.offsets[d] + outer.sizes[d])
      return false;
  return true;
}

struct PairResult {
  bool skipped = false;
  int64_t pieces = 0;
};

/// Checks one ordered pair end to end with gtest assertions; `res` says what happened.
void check_pair(const Layout& src, const Layout& dst, PairResult& res) {
  const std::string ctx = src.to_string() + "  ->  " + dst.to_string();
  SCOPED_TRACE(ctx);
  const bool want_ni = expect_not_implemented(src, dst);
  std::optional<RedistributePlan> planned;
  try {
    planned = plan_redistribute(src, dst);
  } catch (const NotImplementedError& e) {
    EXPECT_TRUE(want_ni) << "unexpected NotImplementedError: " << e.what();
    res.skipped = true;
    return;
  }
  EXPECT_FALSE(want_ni) << "expected NotImplementedError";
  if (want_ni) return;
  const RedistributePlan& plan = *planned;
  res.pieces = static_cast<int64_t>(plan.pieces.size());
  EXPECT_EQ(plan.src, src);
  EXPECT_EQ(plan.dst, dst);

  const auto& ms = src.mesh().shape();
  const int64_t nr = src.mesh().size();
  const int64_t total = testutil::prod(src.shape());
  const auto& ps = src.placements();
  const auto& pt = dst.placements();
  const bool src_partial = src.has_partial(), dst_partial = dst.has_partial();

  std::vector<double> global(static_cast<std::size_t>(total));
  for (int64_t i = 0; i < total; ++i) global[i] = static_cast<double>(i) + 1.0;

  // ---- oracle views of both layouts
  std::vector<std::vector<int64_t>> own_src(nr), own_dst(nr);
  std::vector<std::vector<char>> in_src(nr, std::vector<char>(total, 0)),
      in_dst(nr, std::vector<char>(total, 0));
  std::vector<std::vector<FlatBox>> reg_src(nr), reg_dst(nr);
  std::vector<char> zero_expected(nr, 0);
  for (int64_t r = 0; r < nr; ++r) {
    own_src[r] = owned_flat(src, r);
    own_dst[r] = owned_flat(dst, r);
    for (auto f : own_src[r]) in_src[r][f] = 1;
    for (auto f : own_dst[r]) in_dst[r][f] = 1;
    reg_src[r] = src.local_region(r);
    reg_dst[r] = dst.local_region(r);
    const auto c = mesh_coord(r, ms);
    for (std::size_t m = 0; m < ms.size(); ++m)
      if (pt[m].is_partial() && pt[m].reduce_op() == "sum" && !ps[m].is_partial() && c[m] != 0)
        zero_expected[r] = 1;
  }
  std::vector<int64_t> reduce_dims;
  int64_t q_reduce = 1;
  for (std::size_t m = 0; m < ms.size(); ++m)
    if (ps[m].is_partial() && !pt[m].is_partial()) {
      reduce_dims.push_back(static_cast<int64_t>(m));
      q_reduce *= ms[m];
    }
  EXPECT_EQ(plan.reduce_count, q_reduce);
  EXPECT_EQ(plan.reduce_op, reduce_dims.empty() ? std::string() : partial_op(src));
  {
    std::vector<int64_t> want_zero, got_zero = plan.zero_fill;
    for (int64_t r = 0; r < nr; ++r)
      if (zero_expected[r]) want_zero.push_back(r);
    std::sort(got_zero.begin(), got_zero.end());
    EXPECT_EQ(got_zero, want_zero);
    for (int64_t r = 0; r < nr; ++r) EXPECT_EQ(plan.is_zero_fill(r), zero_expected[r] != 0);
  }

  {
    // all_reduce_dims: only for Partial -> Replicate on some dims, all else equal.
    bool pure = !reduce_dims.empty();
    for (std::size_t m = 0; m < ms.size(); ++m) {
      const bool reduced =
          std::find(reduce_dims.begin(), reduce_dims.end(), static_cast<int64_t>(m)) !=
          reduce_dims.end();
      pure = pure && (reduced ? pt[m].is_replicate() : ps[m] == pt[m]);
    }
    EXPECT_EQ(plan.all_reduce_dims, pure ? reduce_dims : std::vector<int64_t>{});
  }

  // ---- (a) execute and compare values
  const Locals locals = make_source(src, global);
  {
    std::string problem;
    EXPECT_TRUE(all_near(brute_assemble(src, locals, &problem), global)) << problem;
    EXPECT_TRUE(all_near(assemble_global(src, locals), global));
    if (!src_partial) {
      for (int64_t r = 0; r < nr; ++r) EXPECT_EQ(slice_local(src, r, global), locals[r]) << r;
    }
  }
  const Locals out = execute_plan(plan, locals);
  EXPECT_EQ(static_cast<int64_t>(out.size()), nr);
  if (static_cast<int64_t>(out.size()) != nr) return;
  for (int64_t r = 0; r < nr; ++r) {
    std::vector<double> want;
    for (auto f : own_dst[r]) want.push_back(global[f]);
    if (!dst_partial) {
      EXPECT_TRUE(all_near(out[r], want)) << "rank " << r << " got " << str(out[r]) << " want "
                                          << str(want);
      EXPECT_EQ(slice_local(dst, r, global), want);
    } else if (zero_expected[r]) {
      EXPECT_EQ(out[r], std::vector<double>(want.size(), 0.0)) << "rank " << r;
    } else if (!src_partial) {
      // Replicate/Shard -> Partial: the value stays on coordinate 0 (sum) or on every
      // coordinate (avg, max, min).
      EXPECT_TRUE(all_near(out[r], want)) << "rank " << r << " got " << str(out[r]);
    }
  }
  if (dst_partial) {
    std::string problem;
    EXPECT_TRUE(all_near(brute_assemble(dst, out, &problem), global)) << problem;
    EXPECT_TRUE(all_near(assemble_global(dst, out), global));
  }

  // ---- (b), (c), replica rule: the pieces, element by element
  std::vector<std::vector<int>> assign(nr, std::vector<int>(total, 0)),
      reduce(nr, std::vector<int>(total, 0)), local_cover(nr, std::vector<int>(total, 0));
  std::vector<std::set<std::pair<int64_t, int64_t>>> contribution(nr);
  std::vector<RankTraffic> recount(nr);
  int64_t last_dst = -1;
  bool seen_reduce = false;
  for (const auto& p : plan.pieces) {
    ASSERT_TRUE(p.src >= 0 && p.src < nr && p.dst >= 0 && p.dst < nr) << p.to_string();
    ASSERT_TRUE(p.src_region >= 0 && p.src_region < static_cast<int64_t>(reg_src[p.src].size()))
        << p.to_string();
    ASSERT_TRUE(p.dst_region >= 0 && p.dst_region < static_cast<int64_t>(reg_dst[p.dst].size()))
        << p.to_string();
    EXPECT_GT(p.numel(), 0) << p.to_string();
    EXPECT_TRUE(inside(p.box, reg_src[p.src][p.src_region].box)) << p.to_string();
    EXPECT_TRUE(inside(p.box, reg_dst[p.dst][p.dst_region].box)) << p.to_string();
    EXPECT_FALSE(zero_expected[p.dst]) << "piece into a zero-filled rank: " << p.to_string();
    // order: by dst, assign before reduce
    EXPECT_GE(p.dst, last_dst) << p.to_string();
    if (p.dst != last_dst) seen_reduce = false;
    if (p.reduce) seen_reduce = true;
    EXPECT_FALSE(seen_reduce && !p.reduce) << "assign after reduce: " << p.to_string();
    last_dst = p.dst;
    // The sender shares the receiver's coordinate on Replicate mesh dims (spreads senders)
    // and on Partial dims kept Partial (else a contribution would be mixed up).
    const auto cs = mesh_coord(p.src, ms), cd = mesh_coord(p.dst, ms);
    for (std::size_t m = 0; m < ms.size(); ++m)
      if (ps[m].is_replicate() || (ps[m].is_partial() && pt[m].is_partial())) {
        EXPECT_EQ(cs[m], cd[m]) << "mesh dim " << m << " " << p.to_string();
      }
    const int64_t q = linear_over(cs, ms, reduce_dims);
    for (auto f : box_flat_indices(src.shape(), p.box)) {
      EXPECT_TRUE(in_src[p.src][f]) << "sender does not hold " << f << ": " << p.to_string();
      EXPECT_TRUE(in_dst[p.dst][f]) << "receiver does not need " << f << ": " << p.to_string();
      (p.reduce ? reduce : assign)[p.dst][f]++;
      EXPECT_TRUE(contribution[p.dst].insert({f, q}).second)
          << "contribution " << q << " of element " << f << " twice: " << p.to_string();
      if (p.is_local()) local_cover[p.dst][f] = 1;
      // (c) without Partial, nothing a rank holds comes from elsewhere
      if (!src_partial && !p.is_local()) {
        EXPECT_FALSE(in_src[p.dst][f]) << "rank " << p.dst << " already held " << f << ": "
                                       << p.to_string();
      }
    }
    if (p.is_local()) {
      recount[p.src].local += p.numel();
    } else {
      recount[p.src].sent += p.numel();
      recount[p.dst].received += p.numel();
    }
  }
  ASSERT_EQ(static_cast<int64_t>(plan.traffic.size()), nr);
  int64_t lower_total = 0;
  for (int64_t r = 0; r < nr; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    int64_t need = 0, held = 0;
    for (int64_t f = 0; f < total; ++f) {
      if (zero_expected[r] || !in_dst[r][f]) {
        EXPECT_EQ(assign[r][f], 0) << f;
        EXPECT_EQ(reduce[r][f], 0) << f;
        continue;
      }
      ++need;
      EXPECT_EQ(assign[r][f], 1) << "element " << f;
      EXPECT_EQ(reduce[r][f], q_reduce - 1) << "element " << f;
      if (in_src[r][f]) {
        ++held;
        EXPECT_TRUE(local_cover[r][f]) << "held element " << f << " not taken locally";
      }
    }
    const int64_t lower = need * q_reduce - held;
    lower_total += lower;
    const auto& t = plan.traffic[r];
    EXPECT_EQ(t.sent, recount[r].sent);
    EXPECT_EQ(t.received, recount[r].received);
    EXPECT_EQ(t.local, recount[r].local);
    EXPECT_EQ(t.lower_bound, lower);
    EXPECT_EQ(t.received, lower);  // (d) every received element is needed, none twice
    // (e) no detour: nobody receives more than its target region (times contributions)
    EXPECT_LE(t.received, need * q_reduce);
    if (!src_partial) {
      EXPECT_LE(t.received, static_cast<int64_t>(own_dst[r].size()));
    }
  }
  if (!src_partial && !dst_partial) {
    EXPECT_EQ(plan.total_sent(), plan.total_lower_bound());
  }
  EXPECT_EQ(plan.total_lower_bound(), lower_total);
  EXPECT_EQ(plan.total_sent(), lower_total);

  // ---- accessors agree with the piece list
  bool all_local = true;
  for (const auto& p : plan.pieces) all_local = all_local && p.is_local();
  EXPECT_EQ(plan.is_local_only(), all_local && plan.zero_fill.empty() && q_reduce == 1);
  for (int64_t i = 0; i < nr; ++i) {
    const auto sc = plan.send_counts(i), rc = plan.recv_counts(i);
    ASSERT_EQ(static_cast<int64_t>(sc.size()), nr);
    ASSERT_EQ(static_cast<int64_t>(rc.size()), nr);
    EXPECT_EQ(sc[i], 0);
    EXPECT_EQ(rc[i], 0);
    int64_t s_sum = 0, r_sum = 0, l_sum = 0;
    for (int64_t j = 0; j < nr; ++j) {
      s_sum += sc[j];
      r_sum += rc[j];
      EXPECT_EQ(sc[j], plan.recv_counts(j)[i]);
      if (j == i) continue;
      const auto sends = plan.sends(i, j), recvs = plan.receives(j, i);
      ASSERT_EQ(sends.size(), recvs.size());
      int64_t n = 0;
      for (std::size_t k = 0; k < sends.size(); ++k) {
        EXPECT_EQ(sends[k].to_string(), recvs[k].to_string());
        EXPECT_TRUE(sends[k].src == i && sends[k].dst == j);
        n += sends[k].numel();
      }
      EXPECT_EQ(n, sc[j]);
    }
    for (const auto& p : plan.local(i)) {
      EXPECT_TRUE(p.src == i && p.dst == i);
      l_sum += p.numel();
    }
    EXPECT_TRUE(plan.sends(i, i).empty());
    EXPECT_EQ(s_sum, plan.traffic[i].sent);
    EXPECT_EQ(r_sum, plan.traffic[i].received);
    EXPECT_EQ(l_sum, plan.traffic[i].local);
  }
  if (src == dst) {
    EXPECT_TRUE(plan.is_local_only());
    EXPECT_EQ(plan.total_sent(), 0);
  }
  return;
}

// ---------------------------------------------------------------------------------
// The catalogue, every ordered pair

const std::vector<testutil::Group>& groups() {
  static const std::vector<testutil::Group> g = testutil::catalogue();
  return g;
}

TEST(RedistributeCatalogue, CoversWhatTheBriefAsks) {
  int64_t layouts = 0, pairs = 0;
  std::set<std::vector<int64_t>> meshes;
  bool ragged_2d_dim0 = false, ragged_2d_dim1 = false, partial_one_dim = false, nested = false,
       empty_rank = false, zero_unit = false;
  std::set<std::string> ops;
  std::set<std::size_t> ragged_dims;
  for (const auto& g : groups()) {
    meshes.insert(g.mesh);
    layouts += static_cast<int64_t>(g.layouts.size());
    pairs += static_cast<int64_t>(g.layouts.size() * g.layouts.size());
    for (const auto& l : g.layouts) {
      const auto& ps = l.placements();
      int partial_dims = 0;
      for (std::size_t m = 0; m < ps.size(); ++m) {
        if (ps[m].is_partial()) {
          ops.insert(ps[m].reduce_op());
          ++partial_dims;
        }
        if (ps[m].is_ragged_shard()) {
          ragged_dims.insert(ps[m].dims().size());
          for (auto u : ps[m].local_units()) zero_unit = zero_unit || u == 0;
          if (ps.size() == 2) (m == 0 ? ragged_2d_dim0 : ragged_2d_dim1) = true;
        }
        for (std::size_t k = 0; k < m; ++k)
          nested = nested || (ps[m].is_shard() && ps[k].is_shard() && ps[k].dim() == ps[m].dim());
      }
      partial_one_dim = partial_one_dim || (ps.size() == 2 && partial_dims == 1);
      for (int64_t r = 0; r < l.mesh().size(); ++r)
        empty_rank = empty_rank || (l.local_numel(r) == 0 && l.numel() > 0);
    }
  }
  EXPECT_GE(layouts, 40);
  EXPECT_EQ(meshes, (std::set<std::vector<int64_t>>{{1}, {2}, {3}, {4}, {2, 2}, {1, 3}, {2, 3}}));
  EXPECT_EQ(ops, (std::set<std::string>{"sum", "avg", "max", "min"}));
  EXPECT_EQ(ragged_dims, (std::set<std::size_t>{1, 2, 3}));
  EXPECT_TRUE(ragged_2d_dim0 && ragged_2d_dim1 && partial_one_dim && nested && empty_rank &&
              zero_unit);
  std::cout << "[ catalogue ] " << layouts << " layouts in " << groups().size() << " groups, "
            << pairs << " ordered pairs\n";
}

class RedistributeAllPairs : public ::testing::TestWithParam<std::size_t> {
 public:
  static void TearDownTestSuite() {
    std::cout << "[ catalogue ] all groups: " << checked_ << " pairs checked, " << skipped_
              << " NotImplemented pairs skipped, " << pieces_ << " pieces verified\n";
  }

 protected:
  static inline std::atomic<int64_t> checked_{0}, skipped_{0}, pieces_{0};
};

TEST_P(RedistributeAllPairs, EveryOrderedPair) {
  const auto& g = groups()[GetParam()];
  int64_t checked = 0, skipped = 0;
  for (const auto& src : g.layouts) {
    for (const auto& dst : g.layouts) {
      PairResult r;
      check_pair(src, dst, r);
      if (r.skipped)
        ++skipped;
      else
        ++checked;
      pieces_ += r.pieces;
      if (HasFailure()) {
        // Stop at the first bad pair of a group so one bug does not print a thousand times.
        ADD_FAILURE() << "stopping group " << g.name << " after the first failing pair";
        return;
      }
    }
  }
  checked_ += checked;
  skipped_ += skipped;
  std::cout << "[ catalogue ] " << g.name << ": " << checked << " pairs checked, " << skipped
            << " NotImplemented\n";
  // Only Partial op changes are refused, and only where the catalogue has them.
  EXPECT_GT(checked, 0);
}

INSTANTIATE_TEST_SUITE_P(Groups, RedistributeAllPairs,
                         ::testing::Range<std::size_t>(0, testutil::catalogue().size()),
                         [](const ::testing::TestParamInfo<std::size_t>& info) {
                           return testutil::catalogue()[info.param].name;
                         });

// ---------------------------------------------------------------------------------
// Seed cases (ragged_cases.json "all_to_all_splits")

void check_splits(const RedistributePlan& plan,
                  const std::vector<std::vector<int64_t>>& input_splits,
                  const std::vector<std::vector<int64_t>>& output_splits) {
  const int64_t n = static_cast<int64_t>(input_splits.size());
  for (int64_t r = 0; r < n; ++r) {
    const auto sc = plan.send_counts(r), rc = plan.recv_counts(r);
    for (int64_t peer = 0; peer < n; ++peer) {
      if (peer == r) {
        // The json's diagonal is what a rank keeps for itself.
        EXPECT_EQ(plan.traffic[r].local, input_splits[r][r]) << "rank " << r;
        EXPECT_EQ(plan.traffic[r].local, output_splits[r][r]) << "rank " << r;
        EXPECT_EQ(sc[peer], 0);
        EXPECT_EQ(rc[peer], 0);
      } else {
        EXPECT_EQ(sc[peer], input_splits[r][peer]) << "rank " << r << " to " << peer;
        EXPECT_EQ(rc[peer], output_splits[r][peer]) << "rank " << r << " from " << peer;
      }
    }
  }
}

TEST(RedistributeSeed, RaggedToRagged6x4x8) {
  const Layout src = L({2}, "[RS((0,1),(1,2))]", {6, 4, 8});
  const Layout dst = L({2}, "[RS((0,1),(2,1))]", {6, 4, 8});
  const auto plan = plan_redistribute(src, dst);
  check_splits(plan, {{64, 0}, {64, 64}}, {{64, 64}, {0, 64}});
  const auto global = arange(0, 192);
  const auto out = execute_plan(plan, Locals{slice_local(src, 0, global), slice_local(src, 1, global)});
  EXPECT_EQ(out[0], arange(0, 128));
  EXPECT_EQ(out[1], arange(128, 192));
  EXPECT_EQ(plan.total_sent(), 64);
  EXPECT_EQ(plan.total_lower_bound(), 64);
}

TEST(RedistributeSeed, RaggedToRaggedWithZeroUnits10x4) {
  const Layout src = L({4}, "[RS((0,1),(2,3,0,5))]", {10, 4});
  const Layout dst = L({4}, "[RS((0,1),(5,0,3,2))]", {10, 4});
  const auto plan = plan_redistribute(src, dst);
  check_splits(plan, {{8, 0, 0, 0}, {12, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 12, 8}},
               {{8, 12, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 12}, {0, 0, 0, 8}});
  const auto global = arange(0, 40);
  Locals in;
  for (int r = 0; r < 4; ++r) in.push_back(slice_local(src, r, global));
  EXPECT_TRUE(in[2].empty());
  const auto out = execute_plan(plan, in);
  EXPECT_EQ(out[0], arange(0, 20));
  EXPECT_TRUE(out[1].empty());
  EXPECT_EQ(out[2], arange(20, 32));
  EXPECT_EQ(out[3], arange(32, 40));
  // Zero-unit ranks receive nothing (target rank 1) and send nothing (source rank 2).
  EXPECT_EQ(plan.traffic[1].received, 0);
  EXPECT_EQ(plan.traffic[1].local, 0);
  EXPECT_EQ(plan.traffic[2].sent, 0);
  EXPECT_EQ(plan.traffic[2].local, 0);
  for (const auto& p : plan.pieces) {
    EXPECT_NE(p.dst, 1) << p.to_string();
    EXPECT_NE(p.src, 2) << p.to_string();
  }
}

TEST(RedistributeSeed, RaggedDimsChangeMovesOnlyNeededElements) {
  // RS((0,),(1,2)): rank 0 [0,64), rank 1 [64,192). RS((0,1),(2,1)): [0,128), [128,192).
  const Layout src = L({2}, "[RS((0,),(1,2))]", {6, 4, 8});
  const Layout dst = L({2}, "[RS((0,1),(2,1))]", {6, 4, 8});
  const auto plan = plan_redistribute(src, dst);
  EXPECT_EQ(plan.total_sent(), 64);
  EXPECT_EQ(plan.traffic[0].received, 64);
  EXPECT_EQ(plan.traffic[1].received, 0);
  EXPECT_EQ(plan.traffic[0].sent, 0);
  std::vector<int64_t> moved;
  for (const auto& p : plan.receives(0, 1))
    for (auto f : box_flat_indices(src.shape(), p.box)) moved.push_back(f);
  std::vector<int64_t> want;
  for (int64_t f = 64; f < 128; ++f) want.push_back(f);
  EXPECT_EQ(moved, want);
  const auto global = arange(0, 192);
  const auto out = execute_plan(plan, Locals{slice_local(src, 0, global), slice_local(src, 1, global)});
  EXPECT_EQ(out[0], arange(0, 128));
  EXPECT_EQ(out[1], arange(128, 192));
}

TEST(RedistributeSeed, ReplicateToPartialKeepsValueOnCoordinateZero) {
  const Layout src = L({2, 2}, "[R,S(0)]", {4, 2});
  const auto global = arange(1, 9);
  for (const std::string op : {"sum", "avg", "max", "min"}) {
    const Layout dst = L({2, 2}, "[P(" + op + "),S(0)]", {4, 2});
    const auto plan = plan_redistribute(src, dst);
    EXPECT_TRUE(plan.reduce_op.empty());
    Locals in;
    for (int r = 0; r < 4; ++r) in.push_back(slice_local(src, r, global));
    const auto out = execute_plan(plan, in);
    // mesh [[0,1],[2,3]]: row 0 keeps its shard; row 1 is zero for sum, a copy otherwise.
    EXPECT_EQ(out[0], arange(1, 5)) << op;
    EXPECT_EQ(out[1], arange(5, 9)) << op;
    if (op == "sum") {
      EXPECT_EQ(out[2], std::vector<double>(4, 0.0));
      EXPECT_EQ(out[3], std::vector<double>(4, 0.0));
      EXPECT_EQ(plan.zero_fill, (std::vector<int64_t>{2, 3}));
    } else {
      EXPECT_EQ(out[2], arange(1, 5)) << op;
      EXPECT_EQ(out[3], arange(5, 9)) << op;
      EXPECT_TRUE(plan.zero_fill.empty());
    }
    EXPECT_EQ(assemble_global(dst, out), global) << op;
    EXPECT_EQ(plan.total_sent(), 0) << op;  // nothing moves: every rank already holds it
  }
}

TEST(RedistributeSeed, PartialSumToShardIsAReduceScatter) {
  const Layout src = L({2}, "[P(sum)]", {4});
  const Layout dst = L({2}, "[S(0)]", {4});
  const auto plan = plan_redistribute(src, dst);
  EXPECT_EQ(plan.reduce_op, "sum");
  EXPECT_EQ(plan.reduce_count, 2);
  // each rank receives the other's half of its own shard: 2 elements each
  EXPECT_EQ(plan.send_counts(0), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(plan.send_counts(1), (std::vector<int64_t>{2, 0}));
  const auto out = execute_plan(plan, Locals{{1, 2, 3, 4}, {10, 20, 30, 40}});
  EXPECT_EQ(out[0], (std::vector<double>{11, 22}));
  EXPECT_EQ(out[1], (std::vector<double>{33, 44}));
  const auto avg = execute_plan(plan_redistribute(L({2}, "[P(avg)]", {4}), L({2}, "[R]", {4})),
                                Locals{{1, 2, 3, 4}, {3, 4, 5, 6}});
  EXPECT_EQ(avg[0], (std::vector<double>{2, 3, 4, 5}));
  EXPECT_EQ(avg[1], avg[0]);
}

// ---------------------------------------------------------------------------------
// PlanCache

TEST(PlanCache, HitReturnsTheSamePlan) {
  PlanCache cache;
  const Layout a = L({2}, "[RS((0,1),(1,2))]", {6, 4, 8});
  const Layout b = L({2}, "[RS((0,1),(2,1))]", {6, 4, 8});
  const auto p1 = cache.get(a, b);
  EXPECT_EQ(cache.misses(), 1);
  EXPECT_EQ(cache.hits(), 0);
  const auto p2 = cache.get(a, b);
  EXPECT_EQ(p1.get(), p2.get());
  EXPECT_EQ(cache.hits(), 1);
  // Equal layouts built separately hit too.
  EXPECT_EQ(cache.get(L({2}, "[RS((0,1),(1,2))]", {6, 4, 8}), b).get(), p1.get());
  EXPECT_EQ(cache.hits(), 2);
  // Different units, or the reverse direction, miss.
  const auto p3 = cache.get(a, L({2}, "[RS((0,1),(1,1))]", {6, 4, 8}));
  EXPECT_NE(p3.get(), p1.get());
  const auto p4 = cache.get(b, a);
  EXPECT_NE(p4.get(), p1.get());
  EXPECT_EQ(cache.misses(), 3);
  EXPECT_EQ(p1->total_sent(), 64);
  cache.clear();
  EXPECT_EQ(cache.hits(), 0);
  EXPECT_EQ(cache.misses(), 0);
  EXPECT_NE(cache.get(a, b).get(), nullptr);
  EXPECT_EQ(cache.misses(), 1);
  // A plan handed out stays valid after clear().
  EXPECT_EQ(p1->src, a);
}

TEST(PlanCache, ErrorsAreNotCached) {
  PlanCache cache;
  const Layout a = L({2}, "[P(sum)]", {4});
  const Layout b = L({2}, "[P(max)]", {4});
  EXPECT_THROW(cache.get(a, b), NotImplementedError);
  EXPECT_THROW(cache.get(a, b), NotImplementedError);
  EXPECT_EQ(cache.hits(), 0);
}

TEST(PlanCache, ThreadSafetySmoke) {
  PlanCache cache;
  const auto& g = groups()[7];  // a 2x2 mesh group
  std::vector<std::pair<Layout, Layout>> pairs;
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 6; ++j) pairs.emplace_back(g.layouts[i], g.layouts[j]);
  constexpr int kThreads = 4, kRounds = 20;
  std::vector<std::vector<const RedistributePlan*>> seen(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round)
        for (std::size_t k = 0; k < pairs.size(); ++k) {
          const std::size_t i = (k + static_cast<std::size_t>(t) * 7) % pairs.size();
          auto p = cache.get(pairs[i].first, pairs[i].second);
          if (round == kRounds - 1) {
            seen[t].resize(pairs.size());
            seen[t][i] = p.get();
          }
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 1; t < kThreads; ++t) EXPECT_EQ(seen[t], seen[0]);
  EXPECT_EQ(cache.hits() + cache.misses(), int64_t{kThreads} * kRounds * 36);
  EXPECT_GE(cache.misses(), 36);
  for (std::size_t i = 0; i < pairs.size(); ++i) {
    EXPECT_EQ(seen[0][i]->src, pairs[i].first);
    EXPECT_EQ(seen[0][i]->dst, pairs[i].second);
  }
}

// ---------------------------------------------------------------------------------
// Errors

TEST(RedistributeErrors, DifferentMeshShape) {
  const Layout a = L({2}, "[S(0)]", {8});
  const Layout b = L({4}, "[S(0)]", {8});
  EXPECT_EQ(throws_with<ValueError>([&] { plan_redistribute(a, b); },
                                    {a.to_string(), b.to_string(), "mesh"}),
            "");
  EXPECT_THROW(plan_redistribute(L({2, 2}, "[S(0),R]", {8}), L({4, 1}, "[S(0),R]", {8})),
               ValueError);
}

TEST(RedistributeErrors, DifferentMeshRanks) {
  // Same shape but other processes: a plan indexed by mesh position would be wrong.
  const Layout a(MeshTopology({2}, {}, {0, 1}), {Shard(0)}, {8});
  const Layout b(MeshTopology({2}, {}, {2, 3}), {Replicate()}, {8});
  EXPECT_EQ(throws_with<ValueError>([&] { plan_redistribute(a, b); },
                                    {a.to_string(), b.to_string()}),
            "");
  // Names alone do not change which rank sits where.
  const Layout named(MeshTopology({2}, {"tp"}), {Replicate()}, {8});
  EXPECT_NO_THROW(plan_redistribute(L({2}, "[S(0)]", {8}), named));
}

TEST(RedistributeErrors, DifferentGlobalShape) {
  const Layout a = L({2}, "[S(0)]", {6, 4});
  const Layout b = L({2}, "[S(0)]", {4, 6});
  EXPECT_EQ(throws_with<ValueError>([&] { plan_redistribute(a, b); },
                                    {a.to_string(), b.to_string(), "global shape"}),
            "");
}

TEST(RedistributeErrors, PartialOpChangeIsNotImplemented) {
  for (const std::string s : {"sum", "avg", "max", "min"})
    for (const std::string d : {"sum", "avg", "max", "min"}) {
      if (s == d) continue;
      EXPECT_EQ(throws_with<NotImplementedError>(
                    [&] { plan_redistribute(L({2}, "[P(" + s + ")]", {4}),
                                            L({2}, "[P(" + d + ")]", {4})); },
                    {"P(" + s + ")", "P(" + d + ")", "mesh dim 0"}),
                "");
    }
  // On the second dim of a 2-D mesh too; NotImplementedError is a std::logic_error.
  EXPECT_THROW(plan_redistribute(L({2, 2}, "[R,P(sum)]", {4}), L({2, 2}, "[S(0),P(avg)]", {4})),
               std::logic_error);
}

TEST(RedistributeErrors, MixedPartialOpsReducedTogether) {
  const Layout a = L({2, 2}, "[P(sum),P(max)]", {4});
  EXPECT_EQ(throws_with<NotImplementedError>([&] { plan_redistribute(a, L({2, 2}, "[R,R]", {4})); },
                                             {"different ops", "[P(sum),P(max)]"}),
            "");
  EXPECT_THROW(plan_redistribute(a, L({2, 2}, "[S(0),S(0)]", {4})), NotImplementedError);
  // Reducing only one of them is fine (the other stays Partial).
  EXPECT_NO_THROW(plan_redistribute(a, L({2, 2}, "[P(sum),R]", {4})));
  // The reference executor's assemble_global refuses mixed ops too.
  EXPECT_EQ(throws_with<NotImplementedError>(
                [&] { assemble_global(a, Locals(4, std::vector<double>(4, 1.0))); },
                {"different ops"}),
            "");
}

TEST(PlanExecutorErrors, WrongInputs) {
  const Layout a = L({2}, "[S(0)]", {5});
  const Layout b = L({2}, "[R]", {5});
  const auto plan = plan_redistribute(a, b);
  EXPECT_EQ(throws_with<ValueError>([&] { execute_plan(plan, Locals(3)); }, {"3 local arrays"}),
            "");
  EXPECT_EQ(throws_with<ValueError>(
                [&] { execute_plan(plan, Locals{{1, 2, 3}, {4}}); }, {"rank 1 holds 1", "2"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { slice_local(a, 0, std::vector<double>(4)); },
                                    {"4 elements", "needs 5"}),
            "");
  const auto out = execute_plan(plan, Locals{{1, 2, 3}, {4, 5}});
  EXPECT_EQ(out[0], (std::vector<double>{1, 2, 3, 4, 5}));
  EXPECT_EQ(out[1], out[0]);
}

// ---------------------------------------------------------------------------------
// to_string

TEST(RedistributePlanText, PerRankLinesAndTotals) {
  const Layout src = L({2}, "[RS((0,1),(1,2))]", {6, 4, 8});
  const Layout dst = L({2}, "[RS((0,1),(2,1))]", {6, 4, 8});
  const auto plan = plan_redistribute(src, dst);
  const std::string text = plan.to_string(4);
  for (const std::string& part : std::vector<std::string>{
           src.to_string(), dst.to_string(),
        "rank 0: sends 0 B, receives 256 B (lower bound 256 B), keeps 256 B locally",
        "rank 1: sends 256 B, receives 0 B (lower bound 0 B), keeps 256 B locally",
        "recv from 1", "keep", "total: 256 B on the wire, lower bound 256 B"})
    EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in\n" << text;
  EXPECT_NE(plan.to_string().find("total: 64 B on the wire"), std::string::npos);

  const auto reduce = plan_redistribute(L({2, 2}, "[P(sum),R]", {4}), L({2, 2}, "[R,P(sum)]", {4}));
  const std::string rt = reduce.to_string();
  EXPECT_NE(rt.find("reduces 2 partial contributions per element with 'sum'"), std::string::npos)
      << rt;
  EXPECT_NE(rt.find("zero-filled"), std::string::npos) << rt;
  EXPECT_NE(rt.find("(sum)"), std::string::npos) << rt;
  for (int r = 0; r < 4; ++r)
    EXPECT_NE(rt.find("rank " + std::to_string(r) + ":"), std::string::npos) << rt;
  const Piece p{1, 0, Box({1}, {2}), 0, 0, true};
  EXPECT_EQ(p.to_string(), "1->0 ((1,), (2,)) src_region=0 dst_region=0 reduce");
}

}  // namespace
}  // namespace hyper
