// The layouts of max.dim / min.dim / argmax / argmin (see maxdim_rules.h).
#include "hyper/tensor/dispatch/maxdim_rules.h"

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/index_rules.h"

namespace hyper::dispatch {

PickLayouts pick_layouts(const std::string& where, const Layout& l, int64_t dim, bool keepdim) {
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where, ": not implemented for a RaggedShard DTensor "
                          "(a reduction over some dims of a ragged tensor; fail-closed)");
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  const int64_t d = normalized_dim(dim, rank, where);
  HYPER_CHECK_VALUE(rank == 0 || l.shape()[d] > 0, where, ": the reduced dim ", d,
                    " has size 0 (ATen: expected reduction dim to have non-zero size)");
  const Layout in = partials_replicated(l);
  const Placements& in_ps = in.placements();
  PickLayouts p{in, l, in_ps, {}, d};
  Placements out_ps = in_ps;
  for (size_t m = 0; m < in_ps.size(); ++m) {
    if (in_ps[m].is_shard() && in_ps[m].dim() == d) {
      p.mesh_dims.push_back(static_cast<int64_t>(m));
      p.gathered[m] = out_ps[m] = Replicate();
    }
  }
  const Layout whole(l.mesh(), out_ps, l.shape());
  p.out = rank > 0 ? reduced_along(whole, d, keepdim) : whole;
  return p;
}

PickGradLayouts pick_grad_layouts(const PickLayouts& p, const std::optional<Placements>& grad) {
  Placements gps = p.out.placements(), in_ps = p.in.placements();
  if (grad)
    for (size_t m = 0; m < gps.size(); ++m)
      if (in_ps[m].is_replicate() && linear_partial((*grad)[m])) gps[m] = in_ps[m] = (*grad)[m];
  return {with_placements(p.out, gps), with_placements(p.in, in_ps)};
}

}  // namespace hyper::dispatch
