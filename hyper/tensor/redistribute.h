#pragma once
/// \file redistribute.h
/// Executing a redistribution on a plain local storage, without autograd: the loop over the
/// core's steps (hyper/core/plan_steps.h) that DTensor::redistribute runs, public for layers
/// that drive their own collectives (hyper::tp overlaps them with matmuls).
///
///   hyper::comm::Work w = hyper::redistribute_local_async(x, mesh, src, dst);
///   at::Tensor y_own = compute_on_what_we_have(x);   // overlaps when w is one collective
///   at::Tensor xr = w.wait();                        // dst's local storage on this rank

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/work.h"
#include "hyper/core/layout.h"
#include "hyper/core/plan_steps.h"

namespace hyper {

/// This rank's linear index in `mesh` (its position in mesh.topology().ranks()).
int64_t mesh_index_of(const DeviceMesh& mesh);

/// The element type of `t` as the planner sees it (size, floating or complex).
ElementType element_type_of(const at::Tensor& t);

/// Runs the steps of plan(src -> dst) for this rank on `local` (its storage under `src`;
/// no autograd is recorded) and returns the target local storage, shaped
/// dst.local_shape(index) (1-D for a ragged `dst`). Identical layouts return `local`.
/// Errors carry the context `redistribute <src> -> <dst>: <step>` and keep their type
/// (CommError for a failed collective, ValueError for a storage of the wrong size).
at::Tensor redistribute_local(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst);

/// redistribute_local, left in flight: when the program is one collective, it is issued
/// and the returned Work's wait() finishes it (unpacking on the waiting thread); otherwise
/// the steps run before returning and the Work is complete. `local` is never aliased by an
/// in-flight send (the caller may write to it at once).
comm::Work redistribute_local_async(const at::Tensor& local, const DeviceMesh& mesh,
                                    const Layout& src, const Layout& dst);

/// Gradient collectives issued in a backward pass and not yet waited for, on this thread
/// (CPU backward runs on the thread that called backward(); thread-mode tests run one rank
/// per thread). Instrumentation for tests proving that a backward collective is in flight
/// while other gradients are computed.
int64_t backward_collectives_in_flight();
/// Counts `work` in backward_collectives_in_flight() until it finishes; returns it.
comm::Work track_backward_collective(comm::Work work);

}  // namespace hyper
