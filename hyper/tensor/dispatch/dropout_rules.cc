// The layouts of the dropout family (see dropout_rules.h).
#include "hyper/tensor/dispatch/dropout_rules.h"

namespace hyper::dispatch {

DropoutPropagation propagate_dropout(const Layout& in) {
  Placements out_ps = in.placements(), mask_ps = in.placements();
  for (size_t m = 0; m < out_ps.size(); ++m) {
    if (out_ps[m].is_partial() && !linear_partial(out_ps[m])) out_ps[m] = Replicate();
    if (mask_ps[m].is_partial()) mask_ps[m] = Replicate();
  }
  return {with_placements(in, out_ps), with_placements(in, mask_ps)};
}

Layout propagate_noise(const Layout& in, bool feature) {
  Placements ps = in.placements();
  Shape shape = in.shape();
  for (auto& q : ps)
    if (q.is_partial() || (feature && q.is_shard() && q.dim() >= 2)) q = Replicate();
  if (feature)
    for (size_t k = 2; k < shape.size(); ++k) shape[k] = 1;
  return Layout(in.mesh(), ps, shape);
}

}  // namespace hyper::dispatch
