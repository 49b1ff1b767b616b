#pragma once
/// \file internal/dtensor_access.h
/// What the tensor layer reads and builds of a DTensor without copying its Layout or waiting
/// (DTensor's friend DTensorAccess): the shared immutable layout, the stored local tensor, and
/// DTensors made from a local tensor the caller already validated.

#include <memory>

#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/redistribute.h"

namespace hyper {

struct DTensorAccess {
  /// The DTensor's layout object (immutable, shared by copies of the DTensor).
  static const std::shared_ptr<const Layout>& layout_ptr(const DTensor& dt) { return dt.layout_; }
  /// A DTensor of `local` under `layout`, unchecked: the caller guarantees that `local` is on
  /// the mesh's device and has `layout`'s local shape for this rank (non-ragged layouts).
  static DTensor make_unchecked(at::Tensor local, const DeviceMesh& mesh,
                                std::shared_ptr<const Layout> layout,
                                std::shared_ptr<PlanCache> plans) {
    return DTensor(std::move(local), mesh, std::move(layout), std::move(plans));
  }
  /// The DTensor's local tensor as stored, without waiting for a pending redistribute.
  static const at::Tensor& raw_local(const DTensor& dt) { return dt.local_; }
  /// The local tensor of a defined DTensor, once a pending redistribute has filled it (to_local()
  /// without its checks: the dispatcher's fast path).
  static const at::Tensor& ready_local(const DTensor& dt) {
    if (dt.pending_) dt.pending_->wait();
    return dt.local_;
  }
  /// This rank's index in the mesh of a defined DTensor (mesh_index() without its check).
  static int64_t mesh_index(const DTensor& dt) { return mesh_index_of(dt.mesh_); }
  /// `dt` with its local tensor replaced by `local` (same storage, another autograd identity):
  /// same mesh, layout, plan cache and pending completion.
  static DTensor with_local(const DTensor& dt, at::Tensor local) {
    return DTensor(std::move(local), dt.mesh_, dt.layout_, dt.plans_, dt.pending_);
  }
};

}  // namespace hyper
