#pragma once
/// \file fully_shard.h
/// hyper::fsdp::fully_shard — fully sharded data parallel for LibTorch C++ modules on flat
/// RaggedShard buckets (docs/fsdp.md), with FSDP2's names and meaning:
///
///   for (auto& block : model->blocks) hyper::fsdp::fully_shard(block, dp_mesh);
///   hyper::fsdp::FsdpOptions opt;
///   opt.mp_policy = {at::kBFloat16, at::kFloat};   // param dtype, reduce dtype
///   hyper::fsdp::fully_shard(model, dp_mesh, opt);  // the root: what is left
///   torch::optim::SGD sgd(model->parameters(), 0.1); // DTensors: steps on the shards
///   loss = ...model->forward(x)...; loss.backward(); sgd.step();
///
/// LibTorch modules have no forward hooks, so each module given to fully_shard must be
/// hookable (hyper/nn/hookable.h: hyper::nn::Hooked<Impl> around any module, or hyper::nn's
/// Linear / Embedding / LayerNorm); its submodules may be plain torch::nn modules. Each call
/// makes one bucket of the module's parameters not yet in one, in parameter order, in one flat
/// buffer sharded as a RaggedShard (`shard_block` elements per block) over a 1-D mesh, or over
/// dim 1 of a 2-D mesh whose dim 0 holds replicas (FSDP2's HSDP: gradients reduce-scattered
/// within a replica, then all-reduced across the replicas). Data parallel x tensor parallel:
/// when the parameters are DTensor tensors on the 1-D sub-mesh of the 2-D mesh's dim 1
/// (hyper::tp::parallelize_module on plain torch::nn modules makes them; every other
/// parameter distributed Replicate there), the bucket holds their local tensors sharded over
/// dim 0 (FlatBucket), and forward sees DTensor tensors on the tp mesh viewing the gathered
/// buffer. Outside
/// forward and backward every parameter is a DTensor tensor on this rank's piece (a view of
/// the flat shard; RaggedShard over all its dims) and gradients arrive as DTensors of the same
/// layout. In forward (pre-hook) the bucket's all-gather writes every shard into one buffer
/// and the parameters are swapped for leaves viewing it (no copy-out); in backward (a hook on
/// the module's output) it is gathered again if it was freed, and once every leaf has its
/// gradient they are reduce-scattered from where autograd left them (no copy-in). The next
/// bucket's gather starts when one begins (the order of the root's first forward, reversed in
/// backward); one reduction is in flight while backward goes on.
///
/// Parameters are swapped in the module's registry and in the typed members of LibTorch's
/// modules (Linear::weight, ...); a user module must read its own parameters through its
/// registry (named_parameters()), not through a member copy: fully_shard refuses a parameter
/// with another holder, before anything changes (build optimizers after fully_shard).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "hyper/comm/device_mesh.h"

namespace hyper::fsdp {

/// FSDP2's mixed precision: the dtype parameters are gathered and used in (none: theirs), the
/// dtype gradients are reduced in (none: the param dtype; a wider one accumulates the sum
/// while the gradients travel in the param dtype), and whether floating inputs of the
/// module's forward are cast to the param dtype. The sharded parameters, their gradients and
/// the optimizer keep the parameters' own dtype.
struct MixedPrecisionPolicy {
  std::optional<at::ScalarType> param_dtype;
  std::optional<at::ScalarType> reduce_dtype;
  bool cast_forward_inputs = true;
};

struct FsdpOptions {
  /// Free the gathered parameters after forward and gather them again in backward (true), or
  /// keep them until backward ends. The root's stay gathered (backward needs them first).
  bool reshard_after_forward = true;
  MixedPrecisionPolicy mp_policy;
  /// Elements per block: each rank's piece of each parameter starts on a block boundary.
  int64_t shard_block = 1;
};

namespace internal {
class Bucket;
}

/// What fully_shard returns: the module's bucket, FSDP2's methods.
class FsdpModule {
 public:
  explicit FsdpModule(std::shared_ptr<internal::Bucket> bucket) : bucket_(std::move(bucket)) {}
  /// Gathers the parameters now (`async_op`: starts the all-gather; forward waits for it).
  void unshard(bool async_op = false);
  /// Frees the gathered parameters.
  void reshard();
  /// False: backward keeps the gradients unreduced (gradient accumulation); the next backward
  /// with true reduces the sum. `recurse`: the FSDP modules inside too (FSDP2's default).
  void set_requires_gradient_sync(bool requires_gradient_sync, bool recurse = true);
  void set_reshard_after_forward(bool reshard_after_forward, bool recurse = true);
  /// The bucket's layout (hyper-plan --bucket's text).
  std::string plan() const;
  /// Bytes copied outside the collectives so far (mixed-precision casts, gradients that
  /// were not contiguous); 0 otherwise.
  int64_t copied_bytes() const;
  /// "sharded", "gathering" or "unsharded".
  std::string state() const;
  /// The module's gathered flat buffer (undefined before the first gather; its storage is
  /// empty while resharded).
  at::Tensor gathered() const;

 private:
  std::shared_ptr<internal::Bucket> bucket_;
};

/// Shards `module`'s parameters not yet in a bucket (collective over the mesh only in that
/// every rank must call it alike: each rank keeps its pieces of the full values, which must
/// be the same on every rank). ValueError: a module that is not hookable or already given to
/// fully_shard, a mesh that is neither 1-D nor 2-D, a 0-dim or empty parameter, parameters of several
/// dtypes, a parameter that has another holder, `shard_block < 1`, mixed-precision dtypes that
/// are not floating, and FlatBucket's refusals of tensor-parallel parameters (beside plain
/// ones, on another mesh than the 2-D mesh's dim 1, Partial, uneven shards).
FsdpModule fully_shard(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                       const FsdpOptions& options = {});

template <class Impl>
FsdpModule fully_shard(const torch::nn::ModuleHolder<Impl>& module, const DeviceMesh& mesh,
                       const FsdpOptions& options = {}) {
  return fully_shard(std::static_pointer_cast<torch::nn::Module>(module.ptr()), mesh, options);
}

/// The FsdpModule of a module given to fully_shard. ValueError for another module.
FsdpModule fsdp_module(const std::shared_ptr<torch::nn::Module>& module);

template <class Impl>
FsdpModule fsdp_module(const torch::nn::ModuleHolder<Impl>& module) {
  return fsdp_module(std::static_pointer_cast<torch::nn::Module>(module.ptr()));
}

}  // namespace hyper::fsdp
