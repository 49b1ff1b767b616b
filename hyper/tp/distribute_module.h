#pragma once
/// \file distribute_module.h
/// hyper::distribute_module — every parameter of a plain torch::nn module becomes a DTensor
/// tensor (hyper/tensor/dtensor_tensor.h), so the module's unmodified forward runs with
/// sharding propagation (PyTorch's torch.distributed.tensor.distribute_module, without the
/// input/output functions: C++ modules have no hooks).
///
///   auto mlp = std::make_shared<Mlp>();   // torch::nn::Linear fc1, fc2 inside
///   hyper::distribute_module(mlp, mesh, [](const std::string& name, torch::nn::Module& m,
///                                          const hyper::DeviceMesh& mesh) {
///     if (name == "fc1") hyper::distribute_parameter(m, "weight", mesh, {hyper::Shard(0)});
///   });
///   // every other parameter: Replicate (rank 0's values)
///   at::Tensor y = mlp->forward(x);        // a DTensor tensor; hyper::as_dtensor(y).full_tensor()
///   torch::optim::SGD opt(mlp->parameters(), 0.1);   // build optimizers AFTER distributing
///
/// Parameters are replaced in the module's registry and in the typed members of LibTorch's
/// modules (Linear, Bilinear, Embedding, EmbeddingBag, LayerNorm, GroupNorm, Conv1d/2d/3d,
/// ConvTranspose1d/2d/3d, BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d: `weight`, `bias`). A parameter that something else still holds (a user module's member
/// copy, an optimizer built before, a tensor kept by the caller) cannot be replaced from C++:
/// refused with hyper::ValueError before anything changes. requires_grad is kept; each new
/// parameter is a fresh autograd leaf. Buffers stay plain (see distribute_module).

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/placement.h"

namespace torch::nn {
class Module;
}

namespace hyper {

/// Called for every module of the tree (named_modules() order; `name` "" for the root) before
/// the remaining parameters are replicated; it may call distribute_parameter on `module`.
using PartitionFn =
    std::function<void(const std::string& name, torch::nn::Module& module, const DeviceMesh& mesh)>;

/// Replaces `module`'s own (non-recursive) parameter `name` by a DTensor tensor with
/// `placements` on `mesh`. Values: distribute_tensor's with `src_data_rank` (default 0: rank 0's
/// values scattered / broadcast, as PyTorch; std::nullopt: every rank slices its own values, no
/// communication). Collective when src_data_rank is set. Throws ValueError: no such parameter
/// (naming the module's parameters), an undefined one, one that already is a DTensor, another
/// holder of the parameter (see the file comment), an invalid layout (distribute_tensor's).
void distribute_parameter(torch::nn::Module& module, const std::string& name,
                          const DeviceMesh& mesh, const Placements& placements,
                          std::optional<int> src_data_rank = 0);

/// Makes every parameter of `module` (recursively) a DTensor tensor on `mesh`: first
/// `partition_fn` (if any) for each module, then Replicate for every parameter it left plain
/// (values as distribute_parameter with `src_data_rank`). Checks every parameter for other
/// holders first and changes nothing when one has (ValueError naming the module path, its type
/// and the parameter). Buffers (BatchNorm's running statistics) stay plain tensors, updated in
/// place (a plain operand acts as Replicate; batch_norm updates the running statistics from the
/// global batch statistics, the same on every rank); with `src_data_rank` every rank first takes
/// that rank's buffer values (a broadcast). Throws ValueError for a hookable module already
/// parallelized by a hyper::tp style (its parameters are local shards). A partition_fn that
/// throws leaves what it already distributed.
void distribute_module(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                       const PartitionFn& partition_fn = nullptr,
                       std::optional<int> src_data_rank = 0);

/// Starts the redistribution of each DTensor parameter's gradient as soon as autograd produces
/// it, instead of when the optimizer reads it. A hook on every DTensor parameter of `module`
/// (recursively) that requires grad: a gradient arriving in another layout than its parameter's
/// (the P(sum) gradient of a Replicate parameter used with batch-sharded activations, a Shard
/// gradient of a Replicate parameter) is redistributed to the parameter's layout with
/// `async_op = true`, so its collective runs while autograd computes the rest of the backward,
/// and the parameter's `grad()` holds the pending result (waited for at its first read, e.g.
/// by the optimizer's update, which then moves nothing). Values are identical; the gradient's
/// layout becomes the parameter's (without the hook a gradient keeps its own layout, as in
/// PyTorch). A gradient in the parameter's layout, or a plain one, is left as it is. Each
/// backward pass's gradient is redistributed on its own: accumulating k passes without
/// zero_grad reduces k times instead of once. Returns the number of parameters hooked. Throws
/// ValueError when `module` has no DTensor parameter that requires grad (call
/// distribute_module or parallelize_module first). Hooking a parameter twice is harmless (the
/// second hook finds the gradient in the parameter's layout).
int64_t overlap_gradient_redistribution(const std::shared_ptr<torch::nn::Module>& module);

}  // namespace hyper
