#pragma once
/// \file redistribute_plan.h
/// The redistribution plan between two layouts of one tensor on one mesh, as plain
/// data: for every rank, which global boxes it keeps, sends to and receives from
/// every other rank. Computed identically on every rank; upper layers execute it.
///
/// Rules the planner guarantees (tested exhaustively over a catalogue of layouts):
/// - every target element is written by exactly one "assign" piece (no gaps, no
///   double writes), plus, for Partial sources, one "reduce" piece per other partial
///   contribution;
/// - what a rank already holds is never sent to it (its own pieces are local copies);
/// - when several replicas hold an element, the sender is the replica that shares the
///   receiver's coordinates on the replicated mesh dims, which spreads senders;
/// - nothing goes through a full Replicate unless the target is Replicate; every
///   element moves at most once. Without Partial, received elements == lower bound.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/core/layout.h"

namespace hyper {

/// One rectangular piece of the tensor moving from `src` to `dst` (mesh linear
/// indices). It lies inside box `src_region` of the source rank's local region and
/// inside box `dst_region` of the destination rank's local region.
struct Piece {
  int64_t src = 0;
  int64_t dst = 0;
  Box box;                 ///< global coordinates
  int64_t src_region = 0;  ///< index into src_layout.local_region(src)
  int64_t dst_region = 0;  ///< index into dst_layout.local_region(dst)
  bool reduce = false;     ///< false: overwrite the destination; true: combine with the plan's op
  int64_t numel() const { return box.numel(); }
  bool is_local() const { return src == dst; }
  std::string to_string() const;
};

/// Element counts of one rank's side of a plan (multiply by the element size for bytes).
struct RankTraffic {
  int64_t sent = 0;          ///< elements sent to other ranks
  int64_t received = 0;      ///< elements received from other ranks
  int64_t local = 0;         ///< elements copied locally (not on the wire)
  int64_t lower_bound = 0;   ///< target elements this rank needs and does not hold
};

struct RedistributePlan {
  Layout src;
  Layout dst;
  /// Pieces ordered by (dst, assign before reduce, contribution, source key, boxes).
  /// Senders and receivers both see the pieces of a (src, dst) pair in this order, so
  /// a packed buffer needs no further header.
  std::vector<Piece> pieces;
  /// Reduce op for `reduce` pieces ("sum", "avg", "max", "min"); empty if none.
  std::string reduce_op;
  /// Number of partial contributions combined into each reduced element (avg divides by it).
  int64_t reduce_count = 1;
  /// Mesh indices whose target local storage is all zeros (a Partial(sum) target on a
  /// coordinate other than 0 of a mesh dim the source did not have as Partial).
  std::vector<int64_t> zero_fill;
  /// Per mesh index.
  std::vector<RankTraffic> traffic;
  /// Non-empty when the transition only turns Partial into Replicate on these mesh dims
  /// (every other placement equal). An executor may then run an all-reduce over each
  /// group along these dims instead of the pieces: a ring all-reduce moves
  /// 2(k-1)/k of the tensor per rank where the direct pieces move (k-1) tensors.
  std::vector<int64_t> all_reduce_dims;

  /// True when every piece is local and nothing is reduced or zero-filled.
  bool is_local_only() const;
  /// Pieces rank `index` sends to `peer` (peer != index), in plan order.
  std::vector<Piece> sends(int64_t index, int64_t peer) const;
  /// Pieces rank `index` receives from `peer`, in plan order (the same list as sends(peer, index)).
  std::vector<Piece> receives(int64_t index, int64_t peer) const;
  /// Pieces local to `index` (src == dst == index).
  std::vector<Piece> local(int64_t index) const;
  /// all-to-all split sizes in elements: out[peer] = elements index sends to peer (0 for itself).
  std::vector<int64_t> send_counts(int64_t index) const;
  std::vector<int64_t> recv_counts(int64_t index) const;
  int64_t total_sent() const;
  int64_t total_lower_bound() const;
  bool is_zero_fill(int64_t index) const;
  /// Human-readable summary: one block per rank with sends, receives, local copies and
  /// element counts vs the lower bound.
  std::string to_string(int64_t element_size = 1) const;
};

/// Plans src -> dst. Throws ValueError when the meshes (shape or ranks; dim names may
/// differ) or the global shapes differ, and
/// NotImplementedError for: Partial of one op to Partial of another on the same mesh
/// dim; reducing several source Partial dims of different ops at once.
RedistributePlan plan_redistribute(const Layout& src, const Layout& dst);

}  // namespace hyper

// PlanCache moved to plan_steps.h (it caches steps too); kept reachable from here for
// programs that include this header for it.
#include "hyper/core/plan_steps.h"  // IWYU pragma: export
