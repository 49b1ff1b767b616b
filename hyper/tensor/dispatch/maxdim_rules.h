#pragma once
/// \file dispatch/maxdim_rules.h
/// The layouts of `max.dim` / `min.dim` / `argmax` / `argmin` (kernels: dispatch/maxdim_kernels.h),
/// torch-free.
///
///   // max.dim(x, 1): x [4,6] (S(1), P(sum)) on a 2x2 mesh
///   PickLayouts p = pick_layouts("aten::max.dim(...)", x, 1, false);
///   // p.in: (S(1), R) (the Partial reduced first); p.gathered: (R, R) (the candidates gathered
///   // over mesh dim 0, which shards dim 1); p.out: [4] (R, R); p.mesh_dims: {0}.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// What a pick along one dim decides.
struct PickLayouts {
  Layout in;                       ///< self's layout with every Partial made Replicate
  Layout out;                      ///< the values' and indices' layout
  Placements gathered;             ///< `in`'s placements with the mesh dims sharding `dim` Replicate
  std::vector<int64_t> mesh_dims;  ///< the mesh dims that shard `dim`
  int64_t dim = 0;                 ///< normalised
};

/// The layouts of a pick along `dim` of a tensor laid out as `l`: Partials reduced first (a max
/// of shares is not the max of the sum), the output Replicate on the mesh dims that shard `dim`
/// (their candidates are gathered), every other Shard kept (renumbered without keepdim).
/// Throws NotImplementedError for a RaggedShard layout, ValueError for `dim` out of range or a
/// reduced dim of size 0; `where` names the call in the message.
PickLayouts pick_layouts(const std::string& where, const Layout& l, int64_t dim, bool keepdim);

/// The backward's layouts of a pick decided as `p`.
struct PickGradLayouts {
  Layout grad;        ///< the incoming gradient's layout (the outputs')
  Layout input_grad;  ///< self's gradient
};

/// The gradient laid out as the outputs; a Partial(sum/avg) gradient (`grad`: its placements,
/// absent for a plain tensor) stays Partial on mesh dims where `p.in` is Replicate, in both
/// layouts (the scatter at the indices is linear in it).
PickGradLayouts pick_grad_layouts(const PickLayouts& p, const std::optional<Placements>& grad);

}  // namespace hyper::dispatch
