// The layouts the decompositions choose themselves (see decomposition_rules.h).
#include "hyper/tensor/dispatch/decomposition_rules.h"

namespace hyper::dispatch {

Layout counts_layout(const Layout& l, const std::vector<int64_t>& shape) {
  Placements ps = l.placements();
  for (auto& q : ps) q = q.is_shard() || q.is_ragged_shard() ? Placement(Partial()) : Placement(Replicate());
  return Layout(l.mesh(), ps, shape);
}

std::optional<Placements> pad_block_placements(const Layout& x, int64_t d) {
  Placements ps = x.placements();
  for (auto& q : ps) {
    if (q.is_ragged_shard()) return std::nullopt;
    if (q.is_shard() && q.dim() == d) q = Replicate();
  }
  return ps;
}

}  // namespace hyper::dispatch
