#pragma once
/// \file testing_catalogue.h
/// A catalogue of layouts for the tensor layer's tests (not installed): 1-D meshes of
/// 2, 3, 4 ranks and a (2,2) mesh, with even/uneven/nested shards, Partial of several
/// ops, RaggedShard with zero units, and replicated layouts. Torch-free.

#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/layout.h"

namespace hyper::testing {

/// Every valid layout of the candidate list for `mesh_shape` and `shape` (candidates
/// that a Layout refuses, e.g. units that do not divide the prefix, are skipped).
inline std::vector<Layout> layout_catalogue(const std::vector<int64_t>& mesh_shape,
                                            const std::vector<int64_t>& shape) {
  MeshTopology mesh(mesh_shape);
  std::vector<Placements> cands;
  const auto R = Replicate();
  if (mesh_shape.size() == 1) {
    const int64_t n = mesh_shape[0];
    std::vector<Placement> singles = {R,           Shard(0),         Shard(1),
                                      Shard(-1),   Partial("sum"),   Partial("avg"),
                                      Partial("max"), Partial("min")};
    for (const auto& p : singles) cands.push_back({p});
    // Ragged: units chosen per mesh size (zero units included).
    std::vector<std::vector<int64_t>> units;
    if (n == 2) units = {{1, 2}, {2, 1}, {0, 1}, {3, 4}, {1, 1}};
    if (n == 3) units = {{1, 0, 2}, {1, 1, 1}, {2, 3, 2}, {0, 0, 1}, {3, 4, 0}};
    if (n == 4) units = {{2, 1, 0, 3}, {1, 1, 1, 1}, {1, 2, 0, 4}, {0, 3, 0, 0}, {1, 0, 1, 0}};
    for (const auto& u : units) {
      cands.push_back({RaggedShard({0}, u)});
      cands.push_back({RaggedShard({0, 1}, u)});
    }
  } else {
    std::vector<Placement> basic = {R, Shard(0), Shard(1), Partial("sum")};
    for (const auto& a : basic)
      for (const auto& b : basic) cands.push_back({a, b});
    cands.push_back({Partial("max"), Shard(0)});
    cands.push_back({Partial("avg"), R});
    cands.push_back({R, Partial("avg")});
    cands.push_back({RaggedShard({0}, {1, 2}), R});
    cands.push_back({R, RaggedShard({0, 1}, {2, 1})});
    cands.push_back({RaggedShard({0, 1}, {0, 1}), R});
    cands.push_back({R, RaggedShard({0}, {1, 1})});
  }
  std::vector<Layout> out;
  for (const auto& ps : cands) {
    try {
      out.emplace_back(mesh, ps, shape);
    } catch (const ValueError&) {
    }
  }
  return out;
}

}  // namespace hyper::testing
