#pragma once
/// \file internal/execute.h
/// The step executor behind hyper/tensor/redistribute.h, with an explicit plan cache (a
/// DTensor's). Not public.

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/work.h"
#include "hyper/core/plan_steps.h"

namespace hyper::tensor_internal {

/// Runs `steps` (this rank's program for `plan`) on `local`. With `async` and a program of
/// one collective, the collective is left in flight and the Work's wait() finishes it;
/// otherwise every step runs here and the Work is complete. A synchronous run may send
/// straight from `local`'s storage (the step's send run); an async one never does.
/// `into` (optional, async only): a contiguous buffer of the result's elements that the
/// collective left in flight writes straight into when its output is the result (an
/// all-gather, an all-reduce, an all-to-all whose received pieces land in place; the Work then
/// returns a view of `into`); otherwise it is not touched, and the caller compares data
/// pointers to tell.
comm::Work run_steps(const std::shared_ptr<const RedistributePlan>& plan,
                     const std::vector<PlanStep>& steps, const DeviceMesh& mesh,
                     const at::Tensor& local, bool async, const at::Tensor& into = {});

/// run_steps for plan(src -> dst) from `plans`; identical layouts give a completed Work
/// holding `local`.
comm::Work issue_redistribute(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst, PlanCache& plans, bool async,
                              const at::Tensor& into = {});

}  // namespace hyper::tensor_internal
