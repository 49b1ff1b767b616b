#pragma once
/// \file internal/autograd.h
/// The tensor layer's autograd functions around redistribution (hyper/tensor/autograd.cc).
/// Not public: use DTensor::redistribute / to_local / full_tensor / distribute_tensor.

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/work.h"
#include "hyper/core/layout.h"
#include "hyper/core/plan_steps.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::tensor_internal {

/// `layout` with every Partial replaced by Replicate: the layout a DTensor's gradient
/// is stored in.
Layout grad_layout(const Layout& layout);
/// Factor between a DTensor's local gradient and the logical gradient's storage under
/// grad_layout(): 1 / (mesh dim size) per Partial(avg) dim. Throws NotImplementedError
/// (prefixed with `what`) for Partial(max/min).
double grad_scale(const Layout& layout, const char* what);

/// Differentiable redistribution of a local storage from `src` to `dst`.
at::Tensor redistribute_autograd(const at::Tensor& local, const DeviceMesh& mesh,
                                 const Layout& src, const Layout& dst,
                                 const std::shared_ptr<PlanCache>& plans);
/// redistribute_autograd with the collective left in flight where the program is one
/// collective: returns the preallocated output and sets `*pending` to the Work whose wait()
/// fills it. Otherwise runs synchronously and leaves `*pending` empty. The backward issues
/// the gradient's redistribution and returns at once; a node the engine runs as late as it
/// can (lowest priority: after every other ready node) waits for it, so independent
/// gradient computation overlaps the collective. With create_graph the backward is
/// synchronous.
at::Tensor redistribute_autograd_async(const at::Tensor& local, const DeviceMesh& mesh,
                                       const Layout& src, const Layout& dst,
                                       const std::shared_ptr<PlanCache>& plans,
                                       std::optional<comm::Work>* pending);
/// Identity whose backward converts a gradient stored under `grad_layout_in` into the
/// gradient convention of `layout`.
at::Tensor to_local_with_grad(const at::Tensor& local, const DeviceMesh& mesh,
                              const Layout& layout, const Layout& grad_layout_in,
                              const std::shared_ptr<PlanCache>& plans);
/// The bridges between the two forms of a DTensor (hyper::as_tensor / hyper::as_dtensor when
/// grad mode is on). wrap_with_history: the DTensor tensor of `dt`, whose local tensor
/// requires grad, holding dt with its local detached; its node's backward turns the wrapper's
/// gradient (a DTensor tensor of any layout, or a plain global tensor) into dt's local gradient
/// (dt's gradient convention: grad_layout, times grad_scale). unwrap_with_history: the DTensor
/// of the DTensor tensor `t`, which requires grad, with its local tensor an alias of the stored
/// one (not waited for when pending) whose node's backward wraps the local gradient as `t`'s
/// gradient (a DTensor tensor of grad_layout); `dt` is the DTensor `t` holds. Both are
/// differentiable again under create_graph.
/// Partial(max/min) layouts throw NotImplementedError in the backward (grad_scale).
at::Tensor wrap_with_history(const DTensor& dt);
DTensor unwrap_with_history(const at::Tensor& t, DTensor dt);

/// Differentiable local slicing of a replicated global tensor (distribute_tensor).
at::Tensor distribute_local(const at::Tensor& global, const DeviceMesh& mesh, const Layout& layout,
                            const std::shared_ptr<PlanCache>& plans);

}  // namespace hyper::tensor_internal
