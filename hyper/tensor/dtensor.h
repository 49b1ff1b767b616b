#pragma once
/// \file dtensor.h
/// hyper::DTensor — a local tensor plus the DeviceMesh and Layout (placements + global
/// shape) that say which part of a global tensor it is. It is the handle of one DTensor whose
/// other form is an at::Tensor (as_tensor / from_tensor, dtensor_tensor.h); autograd crosses
/// between the two. Redistribution executes the
/// core's RedistributePlan with one all_to_all_v; gradients flow through from_local,
/// to_local, distribute_tensor, full_tensor and redistribute.
///
///   auto mesh = hyper::init_device_mesh(world, "cpu", {2});
///   auto dt = hyper::distribute_tensor(global, mesh, {hyper::RaggedShard({0, 1}, {1, 2})});
///   auto moved = dt.redistribute(mesh, {hyper::RaggedShard({0, 1}, {2, 1})});
///   at::Tensor full = moved.full_tensor();   // == global on every rank
///
/// Local storage (hyper/core/layout.h): without RaggedShard, a tensor of
/// `local_shape()` (the rank's box); with RaggedShard, a contiguous 1-D tensor holding
/// the rank's flat interval. `shape()` is always the global shape.
///
/// Gradient convention (docs/dtensor.md): the local gradient of a DTensor of layout L is
/// the local storage of the logical gradient under L with every Partial replaced by
/// Replicate (divided by the mesh dim size for Partial(avg)); so the gradient of a DTensor
/// program equals the single-device gradient, as in PyTorch DTensor.
///
/// Errors: hyper::ValueError (a std::invalid_argument) for bad input,
/// hyper::NotImplementedError (a std::logic_error) for valid but unsupported requests.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/work.h"
#include "hyper/core/layout.h"
#include "hyper/core/placement.h"
#include "hyper/core/plan_steps.h"

namespace hyper {

class DTensor {
 public:
  /// An undefined DTensor (defined() is false; most accessors throw ValueError).
  DTensor() = default;

  /// Wraps this rank's local tensor. Collective-free.
  ///
  /// - RaggedShard: `shape` (the global shape) is required; `local` must be contiguous,
  ///   1-D, with numel equal to this rank's flat interval. It is stored as a 1-D view
  ///   (no copy). Throws ValueError: missing global shape; negative sizes; not 1-D; not
  ///   contiguous; `local numel 63 does not match rank 0's RaggedShard interval [0, 64)
  ///   (expected 64)`.
  /// - Other placements: `shape` may be given (uneven shards) or is inferred assuming even
  ///   shards (local size times the number of shards of each dim). Throws ValueError if
  ///   the local shape is not this rank's box of the (given or inferred) global shape.
  /// Every layout check of Layout (more than one RaggedShard, RaggedShard beside a
  /// non-Replicate, units count != mesh dim size, prefix cells not divisible, ...) throws
  /// ValueError. Autograd: the DTensor's local tensor is `local` (or its 1-D view), so
  /// gradients flow back to `local` unchanged.
  ///
  ///
  /// `run_check` (PyTorch's name; off by default: it costs two small all-gathers over the
  /// mesh): a collective check that every rank of the mesh passed the same mesh, placements,
  /// global shape (given or inferred), dtype and device type, and that every rank's local
  /// checks passed. On any mismatch every rank throws the same ValueError naming each rank
  /// that differs and both values (`rank 1 passed placements [Shard(1)] but rank 0 passed
  /// [Shard(0)]`) or each rank's local error, instead of a hang or a wrong result later.
  /// Ranks whose meshes have different members cannot meet in one collective: they get a
  /// CommError after the group timeout.
  ///
  ///   auto dt = DTensor::from_local(local_flat, mesh, {RaggedShard({0, 1}, {1, 2})},
  ///                                 std::vector<int64_t>{6, 4, 8});
  static DTensor from_local(const at::Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            std::optional<std::vector<int64_t>> shape = std::nullopt,
                            bool run_check = false);

  /// Wraps a local storage already known to match `layout` on this rank (checked:
  /// local numel; ragged locals are viewed as 1-D). `plans` may be null (a new cache).
  static DTensor from_local_with_layout(const at::Tensor& local, const DeviceMesh& mesh,
                                        const Layout& layout,
                                        std::shared_ptr<PlanCache> plans = nullptr);

  bool defined() const { return layout_ != nullptr; }

  /// The local tensor (differentiable). With `grad_placements`, the gradient that
  /// reaches the returned tensor is declared to be the local storage of the logical
  /// gradient under those placements (e.g. {Partial()}: summed over the mesh dim) and is
  /// converted to this DTensor's gradient convention in the backward (communicates).
  at::Tensor to_local(std::optional<Placements> grad_placements = std::nullopt) const;
  /// The global tensor on every rank: redistribute to all-Replicate, then to_local.
  /// Collective. `grad_placements` as for to_local (default: Replicate, each rank's
  /// gradient is the full gradient).
  at::Tensor full_tensor(std::optional<Placements> grad_placements = std::nullopt) const;

  /// The same logical tensor in `placements` on `mesh` (which must be this DTensor's
  /// mesh; another mesh throws NotImplementedError). Collective over the mesh: one
  /// all_to_all_v carrying exactly the plan's pieces (none when the plan is local-only).
  /// Partial sources are reduced on the way. Differentiable: backward is the reverse
  /// redistribution of the gradient. With `async_op`, the call returns once the collective
  /// is issued and the result is pending (is_pending()): the first read of its values
  /// (to_local, full_tensor, redistribute, any hyper::ops op, wait()) waits for the
  /// collective and unpacks, exactly once; metadata queries (shape, placements, layout,
  /// local_shape, options, ...) do not wait. Results and gradients are identical with and
  /// without async. The backward of an async redistribute is asynchronous too: it issues
  /// the gradient's collective and the wait is deferred until autograd has no other ready
  /// work (independent gradient computation overlaps it). Plans that need no communication, or
  /// all_reduces over several mesh dims, complete before returning even with `async_op`.
  /// Pieces crossing several mesh dims travel on the mesh's whole-mesh group
  /// (DeviceMesh::get_mesh_group); a pure Partial -> Replicate runs one all_reduce per
  /// reduced mesh dim instead; a large Shard(0)/RaggedShard -> Replicate gather runs one
  /// all_gather_v (same bytes, no pack/unpack).
  /// Throws ValueError for an invalid target layout; NotImplementedError for Partial op
  /// changes on one mesh dim.
  DTensor redistribute(const DeviceMesh& mesh, const Placements& placements,
                       bool async_op = false) const;

  /// True while this DTensor is the result of an async redistribute whose values have not
  /// been waited for yet (shared with copies and detach()).
  bool is_pending() const;
  /// Waits for a pending async redistribute and unpacks its result (once; later calls
  /// return at once, or rethrow the collective's error). Returns *this.
  const DTensor& wait() const;
  /// Waits at most `timeout` for a pending result. Returns true when the values are
  /// available (then filled in, as by wait()), false when the collective is still in
  /// flight (wait again later). Rethrows the collective's error.
  bool wait(std::chrono::milliseconds timeout) const;
  /// The completion of this DTensor's values: a pending async redistribute's Work (its
  /// wait() fills the local tensor; add_callback, is_completed, wait with a timeout), or a
  /// completed Work holding the local tensor.
  comm::Work work() const;
  /// How many times the pending completion (wait + unpack) ran: 0 before the first read,
  /// then 1 (0 for DTensors that were never pending). For tests.
  int64_t wait_count() const;
  /// Runs `callback` once this DTensor's values are available: at once when it is not
  /// pending, else right after the wait that completes it (on the waiting thread, whether
  /// the collective succeeded or failed). For instrumentation: hyper::tp's styles report a
  /// collective done to their observer there. The callback must not throw.
  void on_ready(std::function<void()> callback) const;

  /// Global shape.
  const std::vector<int64_t>& shape() const;
  /// Shape of this rank's local tensor ({interval size} for ragged layouts).
  std::vector<int64_t> local_shape() const;
  /// Global number of elements.
  int64_t numel() const;
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  const Placements& placements() const;
  const DeviceMesh& device_mesh() const;
  const Layout& layout() const;
  /// This rank's linear index in the mesh.
  int64_t mesh_index() const;
  bool is_ragged() const { return layout().is_ragged(); }

  at::ScalarType scalar_type() const;
  at::TensorOptions options() const;
  bool requires_grad() const;
  /// Sets requires_grad on the local tensor (which must be a leaf).
  DTensor& requires_grad_(bool requires_grad = true);
  /// The local tensor's accumulated gradient (undefined if none).
  at::Tensor grad() const;
  /// A DTensor sharing the local storage, cut from the autograd graph.
  DTensor detach() const;

  /// This DTensor as an at::Tensor that at:: ops accept (hyper/tensor/dtensor_tensor.h,
  /// same as hyper::as_tensor(*this)); differentiable: it continues this DTensor's history.
  /// Throws ValueError when undefined.
  at::Tensor as_tensor() const;
  /// The DTensor behind a tensor made by as_tensor (or by an op on one), differentiable into
  /// its graph when it requires grad: same as
  /// hyper::as_dtensor(t). Throws ValueError for a plain or undefined tensor.
  static DTensor from_tensor(const at::Tensor& t);

  /// The plan cache this DTensor uses: its mesh's (DeviceMesh::plan_cache), shared by
  /// every DTensor on that mesh.
  const std::shared_ptr<PlanCache>& plan_cache() const { return plans_; }

  /// `DTensor(local_shape=[64], mesh=[2] placements=[RS((0, 1), (1, 2))] shape=[6,4,8])`.
  std::string to_string() const;

 private:
  DTensor(at::Tensor local, DeviceMesh mesh, std::shared_ptr<const Layout> layout,
          std::shared_ptr<PlanCache> plans,
          std::optional<comm::Work> pending = std::nullopt);
  void check_defined(const char* what) const;
  static DTensor from_local_unchecked(const at::Tensor& local, const DeviceMesh& mesh,
                                      const Placements& placements,
                                      std::optional<std::vector<int64_t>> shape);

  at::Tensor local_;
  DeviceMesh mesh_;
  std::shared_ptr<const Layout> layout_;
  std::shared_ptr<PlanCache> plans_;
  std::optional<comm::Work> pending_;  ///< fills local_ (async redistribute)

  friend struct DTensorAccess;
};

std::ostream& operator<<(std::ostream& os, const DTensor& dt);

/// Distributes a global tensor over `mesh` with `placements`.
///
/// - `src_data_rank` absent: every rank holds the same `global` and slices its part
///   locally (no communication). Differentiable: the gradient of `global` is the full
///   logical gradient on every rank (its backward gathers).
/// - `src_data_rank = k`: only the data of the rank at coordinate k on every mesh dim is
///   read (other ranks' `global` supplies shape and dtype); shards are scattered
///   point-to-point (scatter_v) mesh dim by mesh dim, replicated dims broadcast. The
///   result is a leaf (requires_grad copied from `global`).
/// Partial placements: Partial(sum) keeps the value on coordinate 0 of the mesh dim and
/// zeros elsewhere; avg/max/min keep it everywhere.
/// Throws ValueError for an invalid layout or `k` outside every mesh dim.
DTensor distribute_tensor(const at::Tensor& global, const DeviceMesh& mesh,
                          const Placements& placements,
                          std::optional<int> src_data_rank = std::nullopt);

}  // namespace hyper
