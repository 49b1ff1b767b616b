#pragma once
/// \file internal/dtensor_access.h
/// What the dispatch fallback reads and builds of a DTensor without copying its Layout
/// (DTensor's friend DTensorAccess): the shared immutable layout, and a DTensor made from a
/// local tensor and a layout the caller already validated against it.

#include <memory>

#include "hyper/tensor/dtensor.h"

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
};

}  // namespace hyper
