#pragma once
/// \file plan_executor.h
/// A reference executor of redistribution plans on plain arrays, one std::vector
/// per rank. It is the oracle-side twin of the tensor layer's executor: tests run
/// every plan here against slicing a known global array, and `hyper-plan --verify`
/// uses it to check a plan before showing it.

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/layout.h"
#include "hyper/core/redistribute_plan.h"

namespace hyper {

/// The local storage of mesh index `index` under `layout`, sliced from a row-major
/// `global` array (no Partial semantics: every rank gets the plain values).
template <typename T>
std::vector<T> slice_local(const Layout& layout, int64_t index, const std::vector<T>& global) {
  HYPER_CHECK_VALUE(static_cast<int64_t>(global.size()) == layout.numel(), "global array has ",
                    global.size(), " elements but ", layout.to_string(), " needs ",
                    layout.numel());
  std::vector<T> local(static_cast<std::size_t>(layout.local_numel(index)));
  for (const auto& fb : layout.local_region(index)) {
    int64_t at = fb.local_start;
    for_each_run(layout.shape(), fb.box, [&](int64_t off, int64_t len) {
      for (int64_t k = 0; k < len; ++k) local[at + k] = global[off + k];
      at += len;
    });
  }
  return local;
}

namespace internal {
template <typename T>
void combine(T& into, const T& v, const std::string& op) {
  if (op == "max") {
    if (v > into) into = v;
  } else if (op == "min") {
    if (v < into) into = v;
  } else {  // sum and avg (avg divides at the end)
    into = into + v;
  }
}
}  // namespace internal

/// Executes `plan` on the source local storages (indexed by mesh linear index) and
/// returns the target local storages. Every piece is copied (or reduced) from the
/// source rank's storage into the destination rank's storage, exactly as the
/// distributed executor does; zero-filled ranks get zeros.
template <typename T>
std::vector<std::vector<T>> execute_plan(const RedistributePlan& plan,
                                         const std::vector<std::vector<T>>& locals) {
  const int64_t n = plan.src.mesh().size();
  HYPER_CHECK_VALUE(static_cast<int64_t>(locals.size()) == n, "execute_plan got ", locals.size(),
                    " local arrays for a mesh of ", n, " ranks");
  std::vector<std::vector<T>> out(static_cast<std::size_t>(n));
  std::vector<std::vector<FlatBox>> src_regions(n), dst_regions(n);
  for (int64_t r = 0; r < n; ++r) {
    HYPER_CHECK_VALUE(static_cast<int64_t>(locals[r].size()) == plan.src.local_numel(r), "rank ",
                      r, " holds ", locals[r].size(), " elements but ", plan.src.to_string(),
                      " gives it ", plan.src.local_numel(r));
    out[r].assign(static_cast<std::size_t>(plan.dst.local_numel(r)), T{});
    src_regions[r] = plan.src.local_region(r);
    dst_regions[r] = plan.dst.local_region(r);
  }
  for (const auto& p : plan.pieces) {
    const FlatBox& sb = src_regions[p.src][p.src_region];
    const FlatBox& db = dst_regions[p.dst][p.dst_region];
    std::vector<T> packed;  // what goes on the wire: the piece in row-major order
    packed.reserve(static_cast<std::size_t>(p.numel()));
    for_each_run(sb.box.sizes, relative_to(p.box, sb.box), [&](int64_t off, int64_t len) {
      for (int64_t k = 0; k < len; ++k) packed.push_back(locals[p.src][sb.local_start + off + k]);
    });
    std::size_t at = 0;
    for_each_run(db.box.sizes, relative_to(p.box, db.box), [&](int64_t off, int64_t len) {
      for (int64_t k = 0; k < len; ++k, ++at) {
        T& slot = out[p.dst][db.local_start + off + k];
        if (p.reduce)
          internal::combine(slot, packed[at], plan.reduce_op);
        else
          slot = packed[at];
      }
    });
  }
  if (plan.reduce_op == "avg" && plan.reduce_count > 1) {
    for (int64_t r = 0; r < n; ++r) {
      if (plan.is_zero_fill(r)) continue;
      for (auto& v : out[r]) v = v / static_cast<T>(plan.reduce_count);
    }
  }
  return out;
}

/// The logical global array of a layout from its local storages: replicas are read
/// once, Partial mesh dims are reduced with their op. Throws NotImplementedError for
/// Partial dims of different ops.
template <typename T>
std::vector<T> assemble_global(const Layout& layout, const std::vector<std::vector<T>>& locals) {
  const auto& mesh = layout.mesh();
  const auto& ps = layout.placements();
  std::string op;
  for (const auto& p : ps) {
    if (!p.is_partial()) continue;
    HYPER_CHECK_IMPLEMENTED(op.empty() || op == p.reduce_op(),
                            "assemble_global with Partial dims of different ops: ",
                            to_string(ps));
    op = p.reduce_op();
  }
  std::vector<T> global(static_cast<std::size_t>(layout.numel()), T{});
  std::vector<int64_t> count(global.size(), 0);
  for (int64_t r = 0; r < mesh.size(); ++r) {
    const auto c = mesh.coordinate_at(r);
    bool skip = false;  // read each replica group once: coordinate 0 on replicated dims
    for (std::size_t m = 0; m < ps.size(); ++m)
      skip = skip || (ps[m].is_replicate() && c[m] != 0);
    if (skip) continue;
    for (const auto& fb : layout.local_region(r)) {
      int64_t at = fb.local_start;
      for_each_run(layout.shape(), fb.box, [&](int64_t off, int64_t len) {
        for (int64_t k = 0; k < len; ++k) {
          const T& v = locals[r][at + k];
          if (count[off + k]++ == 0)
            global[off + k] = v;
          else
            internal::combine(global[off + k], v, op);
        }
        at += len;
      });
    }
  }
  if (op == "avg") {
    int64_t parts = 1;
    for (std::size_t m = 0; m < ps.size(); ++m)
      if (ps[m].is_partial()) parts *= mesh.shape()[m];
    for (auto& v : global) v = v / static_cast<T>(parts);
  }
  return global;
}

}  // namespace hyper
