#pragma once
/// \file plan_steps.h
/// The program one rank runs to execute a RedistributePlan: a list of steps, each one
/// collective (all_reduce over a mesh dim, all_gather_v along a mesh dim, all_to_all_v on
/// a group) or a local copy, with the zero-copy decisions made here. Torch-free data: the
/// tensor layer's executor is a loop over the steps, `hyper-plan --steps` prints them and
/// the core's exhaustive tests check them against the plan's pieces.
/// (PyTorch's `_redistribute.py` transform-step list; OneFlow's boxing check/run pairs.)
///
///   auto plan = plan_redistribute(Layout::from_string("mesh=[4] placements=[S(0)] shape=[64,64]"),
///                                 Layout::from_string("mesh=[4] placements=[R] shape=[64,64]"));
///   auto steps = plan_steps(plan, /*index=*/1, ElementType{4, true});
///   // steps_to_string(steps) ==
///   //   "all_gather_v on mesh dim 0 group [0,1,2,3] sizes [1024,1024,1024,1024]"

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "hyper/core/redistribute_plan.h"

namespace hyper {

/// At or below this many bytes of output the comm layer's all_gather_v on Gloo runs as a
/// ring (each element travels k-1 hops); above it, point to point (each element is sent
/// once to each rank that needs it). The planner uses all_gather_v for a gather only above
/// it, so a redistribution never moves an element twice.
constexpr int64_t kAllGatherRingMaxBytes = 64 * 1024;

/// What the steps depend on of the element type.
struct ElementType {
  int64_t size = 4;       ///< bytes per element
  bool floating = true;   ///< floating point or complex (false: integral or bool)
  bool operator==(const ElementType& o) const { return size == o.size && floating == o.floating; }
};

enum class StepKind {
  kLocalCopy,  ///< the plan moves nothing between ranks: copy (and zero-fill) locally
  kAllReduce,  ///< all_reduce with `reduce_op` over the group along `mesh_dim`
  kAllGatherV, ///< all_gather_v along `mesh_dim`: member g contributes `send_counts[g]` elements
  kAllToAllV,  ///< all_to_all_v on `mesh_dim`'s group (or the whole mesh's, mesh_dim -1)
};

/// "local_copy", "all_reduce", "all_gather_v", "all_to_all_v".
const char* to_string(StepKind kind);

/// A half-open range [begin, end) of elements of a rank's flat local storage.
struct FlatRun {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const FlatRun& o) const { return begin == o.begin && end == o.end; }
};

/// One step of one rank's program.
///
/// Inputs and outputs: the first step reads the rank's source local storage; each step's
/// output is the next one's input; the last step's output is the target local storage.
/// - kLocalCopy: unpack(plan, index, input, nothing received).
/// - kAllReduce: the element-wise reduction of the input over the group.
/// - kAllGatherV: the concatenation of the members' flat inputs, which is the target storage
///   (the source storages along `mesh_dim` are consecutive ranges of the global tensor).
/// - kAllToAllV: member g is sent `send_counts[g]` and receives `recv_counts[g]` elements:
///   the plan's pieces between this rank and member g, in plan order, row-major each. The
///   send buffer is `send_run` of the input when set (pieces already lie there in order:
///   no pack), else pack(). The receive buffer is `recv_run` of the output when set (no
///   unpack; local pieces are copied while the exchange is in flight), else unpack().
struct PlanStep {
  StepKind kind = StepKind::kLocalCopy;
  /// The group's mesh dim; -1: the whole mesh's group (all_to_all_v only).
  int64_t mesh_dim = -1;
  /// Mesh indices of the group's members in group-rank order. Along a mesh dim: by
  /// coordinate on that dim; the whole mesh: by mesh index (an executor whose mesh group
  /// orders members otherwise, e.g. the world's group by global rank, permutes the counts
  /// and packs, and cannot use the runs). Empty for kLocalCopy.
  std::vector<int64_t> group;
  /// kAllReduce: "sum", "avg", "max" or "min".
  std::string reduce_op;
  /// Per group member, in elements. kAllGatherV: each member's contribution (send_counts
  /// only); kAllToAllV: sent to / received from each member (0 for this rank itself).
  std::vector<int64_t> send_counts;
  std::vector<int64_t> recv_counts;
  /// kAllToAllV zero-copy runs (see above). `send_run` may be used only by an executor that
  /// finishes before its caller can write to the input (a synchronous one).
  std::optional<FlatRun> send_run;
  std::optional<FlatRun> recv_run;

  /// Whether the step communicates.
  bool is_collective() const { return kind != StepKind::kLocalCopy; }
  /// One line: `all_to_all_v on mesh dim 0 group [0,1,2] send [0,4,4] recv [4,0,4]
  /// send=input[4,12) recv=output[0,8)`.
  std::string to_string() const;
  bool operator==(const PlanStep& o) const;
};

/// The steps mesh index `index` runs for `plan` on elements of `type`:
/// - a pure Partial -> Replicate (plan.all_reduce_dims non-empty) is one kAllReduce per
///   reduced mesh dim, except avg on integral types (the pieces truncate; all_reduce
///   refuses it), which takes the rules below;
/// - a plan that sends nothing is one kLocalCopy;
/// - a gather (one mesh dim goes from Shard(0) or RaggedShard to Replicate, every other
///   mesh dim Replicate in both layouts, no zero-fill) whose output exceeds
///   kAllGatherRingMaxBytes is one kAllGatherV;
/// - anything else is one kAllToAllV, on the group along the only mesh dim pieces cross,
///   or on the whole mesh's group when they cross several.
/// Identical layouts (src == dst) give no steps. Throws ValueError for an index outside
/// the mesh or an element size < 1.
std::vector<PlanStep> plan_steps(const RedistributePlan& plan, int64_t index,
                                 const ElementType& type);

/// One step per line, each prefixed by `indent`.
std::string steps_to_string(const std::vector<PlanStep>& steps, const std::string& indent = "");

/// A thread-safe cache of plans and of their steps. Not global: owned by whoever needs it
/// (the tensor layer keeps one per device mesh).
class PlanCache {
 public:
  std::shared_ptr<const RedistributePlan> get(const Layout& src, const Layout& dst);
  /// plan_steps(get(src, dst), index, type), cached.
  std::shared_ptr<const std::vector<PlanStep>> steps(const Layout& src, const Layout& dst,
                                                     int64_t index, const ElementType& type);
  /// Plan lookups (get) that found / did not find a cached plan.
  int64_t hits() const;
  int64_t misses() const;
  void clear();

 private:
  struct KeyHash {
    std::size_t operator()(const std::pair<Layout, Layout>& k) const {
      return k.first.hash() * 31 + k.second.hash();
    }
  };
  using StepKey = std::tuple<int64_t, int64_t, bool>;  // index, element size, floating
  struct Entry {
    std::shared_ptr<const RedistributePlan> plan;
    std::map<StepKey, std::shared_ptr<const std::vector<PlanStep>>> steps;
  };
  mutable std::mutex mu_;
  std::unordered_map<std::pair<Layout, Layout>, Entry, KeyHash> plans_;
  int64_t hits_ = 0;
  int64_t misses_ = 0;
};

}  // namespace hyper
