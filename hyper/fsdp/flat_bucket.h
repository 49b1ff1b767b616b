#pragma once
/// \file flat_bucket.h
/// One fully-sharded bucket's storage on this rank (docs/fsdp.md): the parameters packed in
/// order into one flat buffer sharded over one mesh dim as the core's FlatBucketPlan says. This
/// rank keeps its flat shard; each parameter is a DTensor whose local is a view of that shard
/// (RaggedShard over all its dims). Unsharding all-gathers every rank's shard straight into
/// one flat buffer whose views are the full parameters (no copy-out); the flat gradient is
/// reduce-scattered straight into this rank's gradient shard (no copy-in).
///
///   hyper::fsdp::FlatBucket b(mesh, {w1, b1, w2}, /*block=*/128);
///   at::Tensor full = b.unshard_async().wait();     // the flat buffer, every parameter
///   std::vector<at::Tensor> ps = b.views(full);      // shaped as the parameters, no copy
///   at::Tensor g = b.reduce_scatter_grad(flat_grad); // this rank's gradient shard

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/work.h"
#include "hyper/core/flat_bucket.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::fsdp {

class FlatBucket {
 public:
  /// Packs `params` (the full values, identical on every rank; one dtype, one device; any
  /// shapes, contiguous or not) over mesh dim `shard_dim` (default: the last; on a 2-D mesh
  /// the other dim holds replicas, FSDP2's HSDP) with blocks of `block` elements: this rank
  /// copies its pieces into a fresh flat shard. Not collective.
  ///
  /// Data parallel x tensor parallel: on a 2-D mesh the parameters may instead all be DTensor
  /// tensors (as_tensor) on the other dim's 1-D sub-mesh, Shard or Replicate there, with
  /// shards of one size on every tensor-parallel rank. Then the bucket packs their local
  /// tensors, param() is RaggedShard of that local on `shard_dim` beside the parameter's own
  /// placement (layout.h), and gradients are not reduced over the other dim (it is no
  /// replica: each tensor-parallel rank reduces its own shard's gradients).
  ///
  /// Throws ValueError: an undefined mesh or a shard_dim outside it, an undefined parameter,
  /// parameters of different dtypes or devices (naming both), DTensors beside plain tensors,
  /// a DTensor parameter on another mesh, Partial or RaggedShard, or with uneven shards, or
  /// plan_flat_bucket's errors.
  FlatBucket(const DeviceMesh& mesh, const std::vector<at::Tensor>& params, int64_t block = 1,
             int64_t shard_dim = -1);

  const FlatBucketPlan& plan() const { return plan_; }
  /// The mesh dim the bucket is sharded over (the others hold replicas, or the tensor-parallel
  /// shards when tensor_parallel()).
  int64_t shard_dim() const { return shard_dim_; }
  /// Whether the parameters were given as tensor-parallel DTensors.
  bool tensor_parallel() const { return !tp_placements_.empty(); }
  /// When tensor_parallel(): parameter p's placement on the tensor-parallel mesh dim (what a
  /// DTensor on the tp mesh over p's gathered view is made of); ValueError otherwise.
  const Placement& tp_placement(int64_t p) const;
  /// Parameter p's global shape: shape(p), or under tensor_parallel() the shape of the whole
  /// tensor-parallel parameter. Both ValueError for a parameter out of range.
  const std::vector<int64_t>& global_shape(int64_t p) const;
  const DeviceMesh& mesh() const { return mesh_; }
  /// This rank's flat elements (plan().rank_units()[rank] of them; possibly none).
  const at::Tensor& shard() const { return shard_; }
  /// Parameter p's full shape (its tensor-parallel local shape when tensor_parallel(): the
  /// shape of the views an unshard gives).
  const std::vector<int64_t>& shape(int64_t p) const;

  /// Parameter p as a DTensor on this rank's piece of it: its local is a view of shard()
  /// (writes to one are writes to the other), placement RaggedShard(all dims,
  /// plan().param_units(p)) on the shard dim, Replicate on the others. ValueError for a
  /// parameter without elements (no RaggedShard can hold it).
  DTensor param(int64_t p) const;
  /// Parameter p as a DTensor over `flat`, a tensor laid out like shard() (1-D, as many
  /// elements; e.g. a gradient shard): its local is a view of `flat`. ValueError as param(p),
  /// and for a tensor of another size.
  DTensor param_over(int64_t p, const at::Tensor& flat) const;

  /// Starts the all-gather of every rank's shard into one new flat buffer of plan().numel()
  /// elements (collective over the mesh). The work's result is that buffer; `output`, when
  /// given, is where the elements land (contiguous, the source's dtype, the shard's device,
  /// numel() elements): the buffer a previous step gathered into can be reused. `source`,
  /// when given, is gathered instead of shard(): this rank's shard in another dtype (mixed
  /// precision), as many elements on the same device.
  comm::Work unshard_async(std::optional<at::Tensor> output = std::nullopt,
                           std::optional<at::Tensor> source = std::nullopt) const;

  /// Views of a gathered flat buffer shaped as the parameters (no copy). The buffer may be
  /// of any dtype (one gathered from a cast source). ValueError for a buffer of another size
  /// or device, or not contiguous.
  std::vector<at::Tensor> views(const at::Tensor& full) const;

  /// Reduces `flat_grad` (a full flat gradient on every rank, plan().numel() elements, the
  /// shard's dtype) over the mesh and returns this rank's part (rank_units()[rank] elements):
  /// reduce-scatter with `op` (sum or avg) over the shard dim, then all-reduce over each
  /// other dim (the replicas). Collective. ValueError for a gradient of another size or
  /// dtype, or another op.
  at::Tensor reduce_scatter_grad(const at::Tensor& flat_grad,
                                 comm::ReduceOp op = comm::ReduceOp::kAvg) const;

  /// Reduce-scatters per-parameter gradients read where they lie (no flat gradient is
  /// assembled: each rank's piece of each gradient travels as its own message) into this
  /// rank's gradient shard: `output` when given (1-D, rank_units()[rank] elements, the
  /// gradients' device and dtype or a wider floating one, which the sum is accumulated in
  /// while the gradients travel in theirs), else a new tensor; the work's result is it.
  /// `grads[p]` is parameter p's full gradient (its shape; contiguous, else copied, and the
  /// copy counted in copied_bytes()) or undefined for a parameter that got none (zeros are
  /// sent). All defined gradients share one dtype (a reduce dtype may differ from the
  /// parameters'). On a mesh with replica dims the shard is then all-reduced over them and
  /// the result is a new tensor. Collective. ValueError for another number of gradients,
  /// another shape, mixed dtypes or devices, or an op other than sum and avg.
  comm::Work reduce_scatter_grads_async(const std::vector<at::Tensor>& grads,
                                        comm::ReduceOp op = comm::ReduceOp::kAvg,
                                        std::optional<at::Tensor> output = std::nullopt) const;

  /// Bytes this bucket copied outside collectives so far (gradients that were not contiguous).
  int64_t copied_bytes() const { return copied_bytes_; }

 private:
  at::Tensor tensor_parallel_local(size_t p, const at::Tensor& param);
  comm::Work replicas_reduced(comm::Work shard, comm::ReduceOp op) const;
  void check_full(const at::Tensor& t, const char* what,
                  std::optional<at::ScalarType> dtype = std::nullopt) const;
  DeviceMesh mesh_;
  FlatBucketPlan plan_;
  std::vector<std::vector<int64_t>> shapes_;
  at::Tensor shard_;
  int64_t shard_dim_ = 0;
  int64_t rank_ = 0;
  mutable int64_t copied_bytes_ = 0;
  Placements tp_placements_;          ///< per parameter, when tensor parallel
  std::vector<Shape> global_shapes_;  ///< per parameter, when tensor parallel
};

}  // namespace hyper::fsdp
