#pragma once
/// \file testing_locals.h
/// Source local storages for tests (not installed): every rank's slice of a global
/// tensor; under Partial, each partial contribution is scaled by 1 + (its linear index
/// over the Partial mesh dims), so replicas agree and contributions differ.

#include <ATen/ATen.h>

#include <vector>

#include "hyper/core/layout.h"
#include "hyper/tensor/local_exec.h"

namespace hyper::testing {

inline std::vector<at::Tensor> partial_locals(const Layout& layout, const at::Tensor& global) {
  std::vector<at::Tensor> out;
  const auto& ps = layout.placements();
  for (int64_t r = 0; r < layout.mesh().size(); ++r) {
    at::Tensor l = slice_local(global, layout, r);
    if (layout.has_partial()) {
      const auto c = layout.mesh().coordinate_at(r);
      int64_t k = 0;
      for (std::size_t m = 0; m < ps.size(); ++m)
        if (ps[m].is_partial()) k = k * layout.mesh().shape()[m] + c[m];
      l = l * static_cast<double>(1 + k);
    }
    out.push_back(l);
  }
  return out;
}

}  // namespace hyper::testing
