#pragma once
// Test-only (never installed, never included by library code): a catalogue of layouts
// on small meshes, and brute-force oracles that know nothing of the code under test
// beyond the public value types. Used by redistribute_plan_test.cc and read_plan_test.cc.
//
// Oracles here enumerate elements one by one: which flat indices a rank owns under a
// layout is decided per element (torch.chunk membership for nested Shard, the seed's
// interval formula for RaggedShard), never through Layout::local_region or geometry.cc.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hyper/core/layout.h"
#include "hyper/core/mesh_topology.h"
#include "hyper/core/placement.h"

namespace hyper::testutil {

/// Product of sizes, no checks (1 for rank 0).
inline int64_t prod(const std::vector<int64_t>& v) {
  int64_t n = 1;
  for (auto x : v) n *= x;
  return n;
}

/// Row-major multi-index of `flat` in `shape`.
inline std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

/// Row-major flat index of a multi-index.
inline int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t f = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

/// Flat indices (in `shape`) of every element of `box`, in the box's row-major order,
/// by an odometer over the box. A rank-0 box is the single element 0.
inline std::vector<int64_t> box_flat_indices(const std::vector<int64_t>& shape,
                                             const std::vector<int64_t>& offsets,
                                             const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out;
  for (auto s : sizes)
    if (s <= 0) return out;
  const int64_t n = static_cast<int64_t>(sizes.size());
  std::vector<int64_t> idx(sizes.size(), 0);
  while (true) {
    int64_t f = 0;
    for (int64_t d = 0; d < n; ++d) f = f * shape[d] + offsets[d] + idx[d];
    out.push_back(f);
    int64_t d = n - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < sizes[d]) break;
      idx[d] = 0;
    }
    if (d < 0) break;
  }
  return out;
}

template <typename BoxT>
std::vector<int64_t> box_flat_indices(const std::vector<int64_t>& shape, const BoxT& box) {
  return box_flat_indices(shape, box.offsets, box.sizes);
}

/// Row-major coordinate of linear index `index` on a mesh of `mesh_shape`.
inline std::vector<int64_t> mesh_coord(int64_t index, const std::vector<int64_t>& mesh_shape) {
  return unravel(index, mesh_shape);
}

/// Sorted flat indices of the elements the rank at mesh index `r` holds under `l`,
/// decided element by element. For a box (non-ragged) and for an interval (ragged) the
/// local storage is exactly these elements in increasing flat order. A RaggedShard takes
/// its interval of the elements the Shard placements leave the rank (all of them when
/// there are none), counted in that order.
inline std::vector<int64_t> owned_flat(const Layout& l, int64_t r) {
  const auto& shape = l.shape();
  const auto& mshape = l.mesh().shape();
  const auto& ps = l.placements();
  const auto coord = mesh_coord(r, mshape);
  const int64_t total = prod(shape);
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> out;
  std::vector<int64_t> box = shape;  // the Shard box's sizes
  for (int64_t f = 0; f < total; ++f) {
    const auto idx = unravel(f, shape);
    std::vector<int64_t> lo(shape.size(), 0), size = shape;
    bool own = true;
    for (std::size_t m = 0; m < ps.size() && own; ++m) {
      if (!ps[m].is_shard()) continue;
      int64_t d = ps[m].dim();
      if (d < 0) d += rank;
      // torch.chunk: pieces of `chunk` = smallest c with c * k >= size.
      int64_t chunk = 0;
      while (chunk * mshape[m] < size[d]) ++chunk;
      const int64_t rel = idx[d] - lo[d];
      if (chunk == 0 || rel / chunk != coord[m]) {
        own = false;
        break;
      }
      const int64_t begin = coord[m] * chunk;
      const int64_t stop = std::min(size[d], begin + chunk);
      lo[d] += begin;
      size[d] = stop - begin;
    }
    if (own) {
      out.push_back(f);
      box = size;
    }
  }
  if (out.empty()) return out;
  for (std::size_t m = 0; m < ps.size(); ++m) {
    if (!ps[m].is_ragged_shard()) continue;
    const auto& units = ps[m].local_units();
    const std::size_t k = ps[m].dims().size();
    int64_t prefix = 1, suffix = 1, sum = 0, before = 0;
    for (std::size_t d = 0; d < box.size(); ++d) (d < k ? prefix : suffix) *= box[d];
    for (std::size_t i = 0; i < units.size(); ++i) {
      sum += units[i];
      if (static_cast<int64_t>(i) < coord[m]) before += units[i];
    }
    const int64_t cells = prefix / sum;  // seed §3.2 cells_per_unit
    const int64_t start = before * cells * suffix;
    const int64_t end = start + units[coord[m]] * cells * suffix;
    return std::vector<int64_t>(out.begin() + start, out.begin() + end);
  }
  return out;
}


/// Every shape of rank `rank` with all sizes >= 1 and numel <= max_numel.
inline std::vector<Shape> shapes_of_rank(int64_t rank, int64_t max_numel) {
  std::vector<Shape> out;
  Shape cur;
  std::function<void(int64_t)> rec = [&](int64_t left) {
    if (static_cast<int64_t>(cur.size()) == rank) {
      out.push_back(cur);
      return;
    }
    for (int64_t s = 1; s <= left; ++s) {
      cur.push_back(s);
      rec(left / s);
      cur.pop_back();
    }
  };
  rec(max_numel);
  return out;
}

/// Runs `fn` and reports a gtest-independent verdict: "" when it threw E and the
/// message holds every one of `parts`, else a description of what happened.
template <typename E, typename F>
std::string throws_with(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return "message '" + msg + "' lacks '" + p + "'";
    return "";
  } catch (const std::exception& e) {
    return std::string("threw another exception type: ") + e.what();
  }
  return "did not throw";
}

/// One group of the catalogue: layouts of one global shape on one mesh.
struct Group {
  std::string name;
  std::vector<int64_t> mesh;
  Shape shape;
  std::vector<Layout> layouts;
};

inline Placements parse_placements(const std::string& text) { return placements_from_string(text); }

/// A layout written as text: layout_from_text({2, 2}, "S(0),R", {4, 6}).
inline Layout layout_from_text(std::vector<int64_t> mesh, const std::string& placements,
                               Shape shape) {
  return Layout(MeshTopology(std::move(mesh)), placements_from_string(placements),
                std::move(shape));
}

/// begin, begin + 1, ..., end - 1: a global tensor whose values are their flat indices.
inline std::vector<double> arange(int64_t begin, int64_t end) {
  std::vector<double> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(static_cast<double>(i));
  return v;
}

/// The layout catalogue: Shard (uneven, empty ranks, negative and nested dims),
/// Replicate, Partial of every op (also on one mesh dim of a 2-D mesh), RaggedShard
/// with zero units and dims (0,), (0,1), (0,1,2), beside Replicate on either mesh dim and
/// beside Shard (even and uneven Shard boxes: FSDP over tensor parallelism).
inline std::vector<Group> catalogue() {
  struct Spec {
    std::string name;
    std::vector<int64_t> mesh;
    Shape shape;
    std::vector<std::string> placements;
  };
  const std::vector<Spec> specs = {
      {"m1_s5x3", {1}, {5, 3},
       {"[S(0)]", "[S(-1)]", "[R]", "[P(sum)]", "[P(max)]", "[RS((0,),(1,))]",
        "[RS((0,1),(3,))]"}},
      {"m2_s5x3", {2}, {5, 3},
       {"[S(0)]", "[S(1)]", "[R]", "[P(sum)]", "[P(avg)]", "[P(min)]", "[RS((0,),(2,3))]",
        "[RS((0,),(0,5))]", "[RS((0,1),(1,2))]", "[RS((0,1),(4,1))]"}},
      {"m2_s6x4x2", {2}, {6, 4, 2},
       {"[S(0)]", "[S(1)]", "[S(-1)]", "[R]", "[P(sum)]", "[P(max)]", "[RS((0,),(1,2))]",
        "[RS((0,1),(1,2))]", "[RS((0,1),(2,1))]", "[RS((0,1,2),(3,1))]",
        "[RS((0,1,2),(0,1))]"}},
      {"m2_s0x3", {2}, {0, 3}, {"[S(0)]", "[S(1)]", "[R]", "[P(sum)]", "[RS((0,),(1,1))]"}},
      {"m3_s7", {3}, {7},
       {"[S(0)]", "[R]", "[P(sum)]", "[P(avg)]", "[P(min)]", "[RS((0,),(3,4,0))]",
        "[RS((0,),(1,1,5))]", "[RS((0,),(0,7,0))]"}},
      {"m4_s6x4", {4}, {6, 4},
       {"[S(0)]", "[S(1)]", "[S(-2)]", "[R]", "[P(sum)]", "[P(max)]", "[RS((0,),(1,2,0,3))]",
        "[RS((0,1),(2,3,0,7))]", "[RS((0,1),(0,0,1,0))]"}},
      {"m4_s5x3", {4}, {5, 3},
       {"[S(0)]", "[S(1)]", "[R]", "[P(min)]", "[RS((0,),(0,1,4,0))]",
        "[RS((0,1),(1,1,1,2))]"}},
      {"m2x2_s6x4", {2, 2}, {6, 4},
       {"[S(0),S(1)]", "[S(1),S(0)]", "[S(0),S(0)]", "[S(1),S(1)]", "[R,S(0)]", "[S(-1),R]",
        "[R,R]", "[P(sum),R]", "[R,P(sum)]", "[P(sum),P(sum)]", "[P(max),S(1)]",
        "[S(0),P(avg)]", "[P(min),R]", "[P(sum),S(0)]", "[RS((0,),(1,2)),R]",
        "[R,RS((0,1),(1,2))]", "[RS((0,1),(0,1)),R]", "[R,RS((0,),(3,0))]",
        "[RS((0,),(1,2)),S(1)]", "[S(0),RS((0,1),(1,2))]"}},
      {"m2x2_s5x3", {2, 2}, {5, 3},
       {"[S(0),S(0)]", "[S(1),S(1)]", "[S(1),S(0)]", "[R,R]", "[P(max),P(max)]",
        "[P(avg),S(0)]", "[R,RS((0,),(2,3))]", "[RS((0,1),(1,4)),R]"}},
      {"m1x3_s5x3", {1, 3}, {5, 3},
       {"[S(0),S(0)]", "[R,S(1)]", "[S(1),R]", "[P(sum),S(0)]", "[R,RS((0,),(2,0,3))]",
        "[RS((0,1),(5,)),R]", "[P(avg),R]", "[R,P(min)]", "[R,R]"}},
      {"m2x3_s6x4", {2, 3}, {6, 4},
       {"[S(0),S(1)]", "[S(1),S(0)]", "[S(0),S(0)]", "[S(1),S(1)]", "[R,S(1)]", "[S(0),R]",
        "[P(sum),S(1)]", "[S(0),P(max)]", "[R,R]", "[P(avg),P(avg)]", "[P(min),R]",
        "[R,P(sum)]", "[RS((0,),(1,2)),R]", "[R,RS((0,1),(1,0,2))]", "[RS((0,1),(5,1)),R]"}},
      {"m2x3_s6x4x2", {2, 3}, {6, 4, 2},
       {"[S(2),S(0)]", "[R,S(2)]", "[RS((0,1,2),(1,2)),R]", "[R,RS((0,1),(1,1,1))]",
        "[P(sum),S(1)]", "[S(0),S(1)]", "[RS((0,1,2),(1,2)),S(1)]", "[S(2),RS((0,),(1,0,2))]"}},
  };
  std::vector<Group> out;
  for (const auto& s : specs) {
    Group g{s.name, s.mesh, s.shape, {}};
    for (const auto& p : s.placements)
      g.layouts.emplace_back(MeshTopology(s.mesh), parse_placements(p), s.shape);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace hyper::testutil
