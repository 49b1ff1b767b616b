#pragma once
/// \file internal/redistribute.h
/// The tensor layer's executor of redistribution plans and its autograd functions.
/// Not public: use DTensor::redistribute / to_local / full_tensor / distribute_tensor.

#include <ATen/core/Tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/layout.h"
#include "hyper/core/redistribute_plan.h"

namespace hyper::tensor_internal {

/// `layout` with every Partial replaced by Replicate: the layout a DTensor's gradient
/// is stored in.
Layout grad_layout(const Layout& layout);
/// Factor between a DTensor's local gradient and the logical gradient's storage under
/// grad_layout(): 1 / (mesh dim size) per Partial(avg) dim. Throws NotImplementedError
/// (prefixed with `what`) for Partial(max/min).
double grad_scale(const Layout& layout, const char* what);
/// This rank's linear index in the mesh.
int64_t mesh_index_of(const DeviceMesh& mesh);

/// Executes `plan` for this rank (no autograd). A pure Partial -> Replicate (non-empty
/// plan.all_reduce_dims; not integer avg) is one all_reduce per reduced mesh dim. A gather
/// (one mesh dim Shard(0)/RaggedShard -> Replicate, others Replicate, output > 64 KiB) is
/// one all_gather_v. Otherwise: pack, one all_to_all_v (skipped when the plan sends
/// nothing; on the group along the only mesh dim pieces cross, else on the mesh's
/// whole-mesh group), unpack.
at::Tensor run_plan(const RedistributePlan& plan, const DeviceMesh& mesh, const at::Tensor& local);

/// The pending completion of an async redistribute, shared by the DTensors that hold its
/// output (copies, detach()). `finish` waits for the collective and unpacks into the
/// preallocated output; wait() runs it exactly once (a failure is rethrown by later waits).
struct PendingState {
  std::function<void()> finish;
  std::mutex mu;
  bool done = false;
  int64_t runs = 0;  ///< times `finish` ran (0 or 1)
  std::exception_ptr error;
  /// Run (in order, on the waiting thread) right after `finish`, whether it failed or not.
  std::vector<std::function<void()>> on_done;

  void wait();
  bool pending();
  int64_t run_count();
  /// Runs `callback` now when done, else queues it for wait().
  void add_on_done(std::function<void()> callback);
};

/// Issues the redistribution of `local` (a plain tensor, no autograd) from `src` to `dst`
/// and returns the function that waits for it and returns the result. When the plan is one
/// collective (run_plan's all_to_all_v, all_gather_v or one all_reduce) it is left in
/// flight until the returned function is called; otherwise the plan runs before returning
/// and the function just hands its result over. Call the function exactly once.
std::function<at::Tensor()> issue_redistribute(const at::Tensor& local, const DeviceMesh& mesh,
                                               const Layout& src, const Layout& dst,
                                               const std::shared_ptr<PlanCache>& plans);

/// Gradient collectives issued by the backward of an async redistribute (or by
/// issue_gradient users) that have not been waited for yet, on this thread (CPU backward
/// runs on the thread that called backward()). For tests
/// that prove a backward collective is in flight while other gradients are computed.
int64_t backward_collectives_in_flight();
/// Adjusts the counter above (+1 at issue, -1 at wait) for callers outside this file.
void note_backward_collective(int64_t delta);

/// Differentiable redistribution of a local storage from `src` to `dst`.
at::Tensor redistribute_local(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst, const std::shared_ptr<PlanCache>& plans);
/// redistribute_local with the collective left in flight where the plan is one collective
/// (all_to_all_v, all_gather_v, or an all_reduce over one mesh dim): returns the
/// preallocated output and sets `*pending` to the state whose wait() fills it. Otherwise
/// runs synchronously and leaves `*pending` null. The backward issues the gradient's
/// redistribution and returns at once; a node the engine runs as late as it can (lowest
/// priority: after every other ready node) waits for it, so independent gradient
/// computation overlaps the collective. With create_graph the backward is synchronous.
at::Tensor redistribute_local_async(const at::Tensor& local, const DeviceMesh& mesh,
                                    const Layout& src, const Layout& dst,
                                    const std::shared_ptr<PlanCache>& plans,
                                    std::shared_ptr<PendingState>* pending);
/// Identity whose backward converts a gradient stored under `grad_layout_in` into the
/// gradient convention of `layout`.
at::Tensor to_local_with_grad(const at::Tensor& local, const DeviceMesh& mesh,
                              const Layout& layout, const Layout& grad_layout_in,
                              const std::shared_ptr<PlanCache>& plans);
/// Differentiable local slicing of a replicated global tensor (distribute_tensor).
at::Tensor distribute_local(const at::Tensor& global, const DeviceMesh& mesh, const Layout& layout,
                            const std::shared_ptr<PlanCache>& plans);

}  // namespace hyper::tensor_internal
