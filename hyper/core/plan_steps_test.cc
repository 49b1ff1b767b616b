// Tests of hyper/core/plan_steps.h.
//
// The exhaustive test runs every rank's steps for every ordered pair of layouts of the
// catalogue (internal/test_catalogue.h), all ranks at once on std::vectors: the send
// buffers come from the steps' zero-copy runs where set (else from an element-by-element
// pack oracle built from owned_flat), are exchanged as the step says, land in the
// receive run where set, and the final storages are compared with the reference
// executor (plan_executor.h), itself checked against slicing a known global array in
// redistribute_plan_test.cc. Hand-written cases pin the kinds and the printed form.

#include "hyper/core/plan_steps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_catalogue.h"
#include "hyper/core/plan_executor.h"

namespace hyper {
namespace {

using testutil::box_flat_indices;
using testutil::mesh_coord;
using testutil::owned_flat;

using Locals = std::vector<std::vector<double>>;

Layout L(std::vector<int64_t> mesh, const std::string& placements, Shape shape) {
  return Layout(MeshTopology(std::move(mesh)), placements_from_string(placements),
                std::move(shape));
}

/// Position of global flat index `f` in the local storage `owned` (sorted flat indices).
int64_t position(const std::vector<int64_t>& owned, int64_t f) {
  auto it = std::lower_bound(owned.begin(), owned.end(), f);
  EXPECT_TRUE(it != owned.end() && *it == f) << "flat index " << f << " is not held";
  return it - owned.begin();
}

/// Values of `piece` read element by element from the source storage of its sender.
std::vector<double> piece_values(const RedistributePlan& plan, const Piece& p,
                                 const Locals& locals) {
  const auto owned = owned_flat(plan.src, p.src);
  std::vector<double> out;
  for (int64_t f : box_flat_indices(plan.src.shape(), p.box)) out.push_back(locals[p.src][position(owned, f)]);
  return out;
}

/// Source storages: the global value plus, for Partial sources, a per-rank offset.
Locals make_locals(const Layout& src) {
  Locals locals;
  for (int64_t r = 0; r < src.mesh().size(); ++r) {
    std::vector<double> v;
    for (int64_t f : owned_flat(src, r)) v.push_back(f + 0.25 + (src.has_partial() ? 100.0 * r : 0.0));
    locals.push_back(std::move(v));
  }
  return locals;
}

double reduce(const std::vector<double>& xs, const std::string& op) {
  double acc = xs[0];
  for (std::size_t i = 1; i < xs.size(); ++i) {
    if (op == "max") acc = std::max(acc, xs[i]);
    else if (op == "min") acc = std::min(acc, xs[i]);
    else acc += xs[i];
  }
  return op == "avg" ? acc / static_cast<double>(xs.size()) : acc;
}

bool near(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::fabs(a[i] - b[i]) > 1e-9 * std::max(1.0, std::fabs(b[i]))) return false;
  return true;
}

std::string str(const std::vector<double>& v) {
  std::ostringstream os;
  for (double x : v) os << x << " ";
  return os.str();
}

/// Runs every rank's steps at once; returns "" or what went wrong.
std::string simulate(const RedistributePlan& plan, const ElementType& type) {
  const int64_t n = plan.src.mesh().size();
  const auto& mshape = plan.src.mesh().shape();
  std::vector<std::vector<PlanStep>> steps;
  for (int64_t r = 0; r < n; ++r) steps.push_back(plan_steps(plan, r, type));
  for (int64_t r = 1; r < n; ++r) {
    if (steps[r].size() != steps[0].size()) return "ranks run different numbers of steps";
    for (std::size_t k = 0; k < steps[r].size(); ++k)
      if (steps[r][k].kind != steps[0][k].kind || steps[r][k].mesh_dim != steps[0][k].mesh_dim)
        return "ranks disagree on step " + std::to_string(k);
  }
  if (plan.src == plan.dst) return steps[0].empty() ? "" : "steps for identical layouts";
  if (steps[0].empty()) return "no steps";
  Locals cur = make_locals(plan.src);
  const Locals expected = execute_plan(plan, cur);
  for (std::size_t k = 0; k < steps[0].size(); ++k) {
    Locals next(static_cast<std::size_t>(n));
    for (int64_t r = 0; r < n; ++r) {
      const PlanStep& s = steps[r][k];
      // The group: members by mesh index, this rank among them, all sharing this rank's
      // coordinates off the group's dim.
      if (s.kind != StepKind::kLocalCopy) {
        if (std::find(s.group.begin(), s.group.end(), r) == s.group.end())
          return "rank " + std::to_string(r) + " is not in its group";
        for (std::size_t g = 0; g < s.group.size(); ++g) {
          const auto a = mesh_coord(r, mshape), b = mesh_coord(s.group[g], mshape);
          for (std::size_t d = 0; d < a.size(); ++d)
            if (s.mesh_dim >= 0 && static_cast<int64_t>(d) != s.mesh_dim && a[d] != b[d])
              return "group member off the mesh dim";
          if (s.mesh_dim >= 0 && b[s.mesh_dim] != static_cast<int64_t>(g))
            return "group not in coordinate order";
        }
      }
      switch (s.kind) {
        case StepKind::kLocalCopy:
          if (plan.total_sent() != 0) return "local_copy for a plan that sends";
          next[r] = expected[r];  // the step is unpack with nothing received
          break;
        case StepKind::kAllReduce: {
          if (s.reduce_op != plan.reduce_op) return "all_reduce op differs";
          std::vector<double> out(cur[r].size());
          for (std::size_t i = 0; i < out.size(); ++i) {
            std::vector<double> xs;
            for (int64_t j : s.group) xs.push_back(cur[j][i]);
            out[i] = reduce(xs, s.reduce_op);
          }
          next[r] = out;
          break;
        }
        case StepKind::kAllGatherV: {
          std::vector<double> out;
          for (std::size_t g = 0; g < s.group.size(); ++g) {
            const auto& in = cur[s.group[g]];
            if (static_cast<int64_t>(in.size()) != s.send_counts[g]) return "gather size differs";
            out.insert(out.end(), in.begin(), in.end());
          }
          next[r] = out;
          break;
        }
        case StepKind::kAllToAllV: {
          // What r sends to / receives from each member: the pieces in plan order.
          std::vector<double> recv;
          for (std::size_t g = 0; g < s.group.size(); ++g) {
            const int64_t j = s.group[g];
            std::vector<double> to_j, from_j;
            for (const auto& p : plan.pieces) {
              if (p.is_local()) continue;
              if (p.src == r && p.dst == j) {
                const auto v = piece_values(plan, p, cur);
                to_j.insert(to_j.end(), v.begin(), v.end());
              }
              if (p.src == j && p.dst == r) {
                const auto v = piece_values(plan, p, cur);
                from_j.insert(from_j.end(), v.begin(), v.end());
              }
            }
            if (static_cast<int64_t>(to_j.size()) != s.send_counts[g] ||
                static_cast<int64_t>(from_j.size()) != s.recv_counts[g])
              return "all_to_all_v counts differ from the pieces";
            recv.insert(recv.end(), from_j.begin(), from_j.end());
          }
          if (s.send_run) {
            // The run of the input must hold exactly the pack oracle's buffer.
            std::vector<double> packed;
            for (int64_t j : s.group)
              for (const auto& p : plan.pieces)
                if (!p.is_local() && p.src == r && p.dst == j) {
                  const auto v = piece_values(plan, p, cur);
                  packed.insert(packed.end(), v.begin(), v.end());
                }
            if (s.send_run->end > static_cast<int64_t>(cur[r].size()) || s.send_run->begin < 0)
              return "send run outside the input";
            const std::vector<double> run(cur[r].begin() + s.send_run->begin,
                                          cur[r].begin() + s.send_run->end);
            if (run != packed) return "rank " + std::to_string(r) + " send run " + str(run) +
                                      "!= packed " + str(packed);
          }
          if (s.recv_run) {
            std::vector<double> out(static_cast<std::size_t>(plan.dst.local_numel(r)), -1.0);
            if (s.recv_run->size() != static_cast<int64_t>(recv.size()) || s.recv_run->begin < 0 ||
                s.recv_run->end > static_cast<int64_t>(out.size()))
              return "recv run does not fit";
            std::copy(recv.begin(), recv.end(), out.begin() + s.recv_run->begin);
            const auto src_owned = owned_flat(plan.src, r), dst_owned = owned_flat(plan.dst, r);
            for (const auto& p : plan.pieces) {
              if (!(p.is_local() && p.dst == r)) continue;
              for (int64_t f : box_flat_indices(plan.src.shape(), p.box))
                out[position(dst_owned, f)] = cur[r][position(src_owned, f)];
            }
            next[r] = out;
          } else {
            next[r] = expected[r];  // unpack: the reference executor's semantics
          }
          break;
        }
      }
    }
    cur = std::move(next);
  }
  for (int64_t r = 0; r < n; ++r)
    if (!near(cur[r], expected[r]))
      return "rank " + std::to_string(r) + " got " + str(cur[r]) + " expected " + str(expected[r]);
  return "";
}

TEST(PlanSteps, CatalogueRunsToTheReferenceResult) {
  std::map<StepKind, int64_t> kinds;
  int64_t send_runs = 0, recv_runs = 0, pairs = 0;
  for (const auto& group : testutil::catalogue()) {
    for (const auto& a : group.layouts) {
      for (const auto& b : group.layouts) {
        std::optional<RedistributePlan> planned;
        try {
          planned = plan_redistribute(a, b);
        } catch (const NotImplementedError&) {
          continue;
        }
        const RedistributePlan& plan = *planned;
        // Small elements (gathers below the ring threshold) and huge ones (above it).
        for (const ElementType type : {ElementType{4, true}, ElementType{4, false},
                                       ElementType{int64_t{1} << 20, true}}) {
          ++pairs;
          EXPECT_EQ(simulate(plan, type), "")
              << group.name << ": " << a.to_string() << " -> " << b.to_string() << " size "
              << type.size << (type.floating ? " float" : " int");
          for (int64_t r = 0; r < a.mesh().size(); ++r) {
            for (const auto& s : plan_steps(plan, r, type)) {
              ++kinds[s.kind];
              send_runs += s.send_run.has_value();
              recv_runs += s.recv_run.has_value();
            }
          }
        }
      }
    }
  }
  EXPECT_GT(pairs, 1000);
  for (StepKind k : {StepKind::kLocalCopy, StepKind::kAllReduce, StepKind::kAllGatherV,
                     StepKind::kAllToAllV})
    EXPECT_GT(kinds[k], 0) << to_string(k);
  EXPECT_GT(send_runs, 0);
  EXPECT_GT(recv_runs, 0);
}

std::string steps_of(const std::string& src, const std::string& dst, int64_t index,
                     ElementType type = {4, true}) {
  return steps_to_string(
      plan_steps(plan_redistribute(Layout::from_string(src), Layout::from_string(dst)), index,
                 type));
}

TEST(PlanSteps, GatherAboveTheRingThresholdIsOneAllGatherV) {
  // 64x64 floats = 16 KiB; doubles of 8x8x512 = 256 KiB.
  EXPECT_EQ(steps_of("mesh=[4] placements=[S(0)] shape=[128,256]",
                     "mesh=[4] placements=[R] shape=[128,256]", 1),
            "all_gather_v on mesh dim 0 group [0,1,2,3] sizes [8192,8192,8192,8192]\n");
  // Uneven rows: sizes are each rank's storage.
  EXPECT_EQ(steps_of("mesh=[3] placements=[S(0)] shape=[10,4096]",
                     "mesh=[3] placements=[R] shape=[10,4096]", 0),
            "all_gather_v on mesh dim 0 group [0,1,2] sizes [16384,16384,8192]\n");
  // At or below the threshold the same transition is an all_to_all_v (no ring).
  EXPECT_EQ(steps_of("mesh=[2] placements=[S(0)] shape=[4,4]", "mesh=[2] placements=[R] shape=[4,4]",
                     0),
            "all_to_all_v on mesh dim 0 group [0,1] send [0,8] recv [0,8] send=input[0,8) "
            "recv=output[8,16)\n");
  EXPECT_EQ(kAllGatherRingMaxBytes, 64 * 1024);
  const auto at = [](int64_t elements) {
    return steps_of("mesh=[2] placements=[S(0)] shape=[" + std::to_string(elements) + "]",
                    "mesh=[2] placements=[R] shape=[" + std::to_string(elements) + "]", 0);
  };
  EXPECT_EQ(at(16384).substr(0, 12), "all_to_all_v");  // exactly 64 KiB of floats
  EXPECT_EQ(at(16386).substr(0, 12), "all_gather_v");
}

TEST(PlanSteps, PartialToReplicateIsAnAllReducePerDim) {
  EXPECT_EQ(steps_of("mesh=[2,3] placements=[P(sum),P(sum)] shape=[6]",
                     "mesh=[2,3] placements=[R,R] shape=[6]", 4),
            "all_reduce on mesh dim 0 group [1,4] op sum\n"
            "all_reduce on mesh dim 1 group [3,4,5] op sum\n");
  // avg on integers: the pieces' truncating average, not an all_reduce.
  const std::string s = steps_of("mesh=[2] placements=[P(avg)] shape=[6]",
                                 "mesh=[2] placements=[R] shape=[6]", 0, {8, false});
  EXPECT_EQ(s, "all_to_all_v on mesh dim 0 group [0,1] send [0,6] recv [0,6] send=input[0,6) "
               "recv=unpack\n");
}

TEST(PlanSteps, ZeroCopyRunsAndThePackFallback) {
  // Ragged -> ragged: what moves is one run on both sides.
  EXPECT_EQ(steps_of("mesh=[2] placements=[RS((0,),(1,3))] shape=[8,2]",
                     "mesh=[2] placements=[RS((0,),(3,1))] shape=[8,2]", 0),
            "all_to_all_v on mesh dim 0 group [0,1] send [0,0] recv [0,8] send=input[0,0) "
            "recv=output[4,12)\n");
  // Row shards -> column shards: the sent columns are strided (pack, unpack).
  EXPECT_EQ(steps_of("mesh=[2] placements=[S(0)] shape=[4,4]", "mesh=[2] placements=[S(1)] shape=[4,4]",
                     1),
            "all_to_all_v on mesh dim 0 group [0,1] send [4,0] recv [4,0] send=pack "
            "recv=output[0,4)\n");
  // Partial sources combine on arrival: always unpacked.
  EXPECT_EQ(steps_of("mesh=[2] placements=[P(sum)] shape=[4]", "mesh=[2] placements=[S(0)] shape=[4]",
                     0),
            "all_to_all_v on mesh dim 0 group [0,1] send [0,2] recv [0,2] send=input[2,4) "
            "recv=unpack\n");
}

TEST(PlanSteps, CrossingBothMeshDimsUsesTheMeshGroup) {
  // The mesh group orders members by mesh index, whatever their global ranks.
  const Layout a(MeshTopology({2, 2}, {}, {3, 2, 1, 0}), placements_from_string("[S(0),S(1)]"), {4, 4});
  const Layout b(MeshTopology({2, 2}, {}, {3, 2, 1, 0}), placements_from_string("[S(1),S(0)]"), {4, 4});
  const auto steps = plan_steps(plan_redistribute(a, b), 0, {4, true});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].kind, StepKind::kAllToAllV);
  EXPECT_EQ(steps[0].mesh_dim, -1);
  EXPECT_EQ(steps[0].group, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(steps[0].to_string().rfind("all_to_all_v on the mesh group [0,1,2,3] send", 0), 0u)
      << steps[0].to_string();
}

TEST(PlanSteps, LocalOnlyAndIdentity) {
  EXPECT_EQ(steps_of("mesh=[2] placements=[R] shape=[4]", "mesh=[2] placements=[S(0)] shape=[4]", 1),
            "local_copy\n");
  EXPECT_EQ(steps_of("mesh=[2] placements=[R] shape=[4]", "mesh=[2] placements=[R] shape=[4]", 1),
            "(nothing: the layouts are identical)\n");
}

TEST(PlanSteps, Errors) {
  const auto plan = plan_redistribute(L({2}, "[S(0)]", {4}), L({2}, "[R]", {4}));
  EXPECT_EQ(testutil::throws_with<ValueError>([&] { plan_steps(plan, 2, {4, true}); },
                                              {"mesh index 2 is outside the mesh", "(2 ranks)"}),
            "");
  EXPECT_EQ(testutil::throws_with<ValueError>([&] { plan_steps(plan, 0, {0, true}); },
                                              {"element size 0 is not positive"}),
            "");
}

TEST(PlanCacheSteps, CachedPerIndexAndElementType) {
  PlanCache cache;
  const Layout a = L({2}, "[S(0)]", {100000}), b = L({2}, "[R]", {100000});
  const auto s1 = cache.steps(a, b, 0, {4, true});
  EXPECT_EQ(cache.steps(a, b, 0, {4, true}), s1);      // same object
  EXPECT_NE(cache.steps(a, b, 1, {4, true}), s1);      // other rank
  EXPECT_EQ((*s1)[0].kind, StepKind::kAllGatherV);  // 400 kB
  const Layout c = L({2}, "[S(0)]", {10000}), d = L({2}, "[R]", {10000});
  EXPECT_EQ((*cache.steps(c, d, 0, {4, true}))[0].kind, StepKind::kAllToAllV);   // 40 kB
  EXPECT_EQ((*cache.steps(c, d, 0, {8, true}))[0].kind, StepKind::kAllGatherV);  // 80 kB
  EXPECT_EQ(cache.misses(), 2);
}

}  // namespace
}  // namespace hyper
