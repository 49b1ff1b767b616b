#pragma once
// Placements as the Python package passes them, shared by hyper._C and hyper._core:
// ("S", dim), ("R",), ("P", op), ("RS", dims, units). Needs pybind11 (either the torch wheel's
// or any other copy) and the torch-free core only.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/placement.h"

namespace hyper::python {

/// A placement tuple of the Python side as a hyper::Placement. Throws ValueError naming it.
inline Placement placement_of(const pybind11::handle& h) {
  const auto t = pybind11::reinterpret_borrow<pybind11::tuple>(h);
  const std::string kind = t[0].cast<std::string>();
  if (kind == "S") return Shard(t[1].cast<int64_t>());
  if (kind == "R") return Replicate();
  if (kind == "P") return Partial(t[1].cast<std::string>());
  if (kind == "RS")
    return RaggedShard(t[1].cast<std::vector<int64_t>>(), t[2].cast<std::vector<int64_t>>());
  throw ValueError("hyper: unknown placement kind '" + kind + "'");
}

inline Placements placements_of(const pybind11::sequence& s) {
  Placements ps;
  for (const pybind11::handle h : s) ps.push_back(placement_of(h));
  return ps;
}

inline pybind11::tuple tuple_of(const Placement& p) {
  if (p.is_shard()) return pybind11::make_tuple("S", p.dim());
  if (p.is_partial()) return pybind11::make_tuple("P", p.reduce_op());
  if (p.is_ragged_shard()) return pybind11::make_tuple("RS", p.dims(), p.local_units());
  return pybind11::make_tuple("R");
}

}  // namespace hyper::python
