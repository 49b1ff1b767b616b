// The layouts of general advanced indexing (see advanced_index_rules.h).
#include "hyper/tensor/dispatch/advanced_index_rules.h"

#include "hyper/core/errors.h"

namespace hyper::dispatch {

std::vector<int64_t> local_index_shards(const Layout& self, const std::vector<ArgLayout>& indices,
                                        bool integer_dtensors) {
  const size_t nm = self.placements().size();
  std::vector<int64_t> shards(nm, -1);
  bool alike = integer_dtensors && !indices.empty();
  for (const ArgLayout& t : indices)
    alike = alike && t.layout && !t.layout->is_ragged() && t.shape == indices[0].shape;
  for (size_t m = 0; alike && m < nm; ++m) {
    const Placement& p0 = indices[0].layout->placements()[m];
    bool same = p0.is_shard() && self.placements()[m].is_replicate();
    for (const ArgLayout& t : indices) same = same && t.layout->placements()[m] == p0;
    if (same) shards[m] = p0.dim();
  }
  return shards;
}

AdvancedIndexLayouts advanced_index_layouts(const std::string& where, const Layout& self,
                                            const std::vector<bool>& indexed,
                                            const std::vector<int64_t>& index_shards, bool numeric,
                                            const Shape& out_shape) {
  HYPER_CHECK_IMPLEMENTED(!self.is_ragged(), where, ": advanced indexing of a RaggedShard DTensor (fail-closed)");
  const int64_t rank = static_cast<int64_t>(self.shape().size());
  const int64_t listed = static_cast<int64_t>(indexed.size());
  std::vector<int64_t> dims;
  for (int64_t k = 0; k < listed; ++k)
    if (indexed[static_cast<size_t>(k)]) dims.push_back(k);
  HYPER_CHECK_VALUE(!dims.empty(), where, ": no index tensor");
  const int64_t n = static_cast<int64_t>(dims.size());
  const bool adjacent = dims.back() - dims.front() + 1 == n;
  const int64_t bpos = adjacent ? dims.front() : 0;
  const int64_t bdims = static_cast<int64_t>(out_shape.size()) - (rank - n);
  auto is_indexed = [&](int64_t e) { return e < listed && indexed[static_cast<size_t>(e)]; };
  auto out_dim = [&](int64_t e) {  // a non-indexed self dim's position in the output
    if (adjacent) return e < dims.front() ? e : e - n + bdims;
    int64_t before = 0;
    for (int64_t k = 0; k < e; ++k)
      if (!is_indexed(k)) ++before;
    return bdims + before;
  };
  Placements in_ps = self.placements(), out_ps = in_ps;
  bool any_masked = false;
  for (size_t m = 0; m < in_ps.size(); ++m) {
    const Placement& p = in_ps[m];
    if (p.is_shard() && is_indexed(p.dim())) {
      if (numeric) {
        any_masked = true;
        out_ps[m] = Partial();
      } else {
        in_ps[m] = out_ps[m] = Replicate();  // gathered
      }
    } else if (p.is_shard()) {
      out_ps[m] = Shard(out_dim(p.dim()));
    } else if (index_shards[m] >= 0) {
      out_ps[m] = Shard(bpos + index_shards[m]);
    }
  }
  for (size_t m = 0; m < in_ps.size(); ++m)  // a max / min Partial beside a masked sum
    if (any_masked && in_ps[m].is_partial() && !linear_partial(in_ps[m]))
      in_ps[m] = out_ps[m] = Replicate();
  return {with_placements(self, in_ps), Layout(self.mesh(), out_ps, out_shape), bpos};
}

}  // namespace hyper::dispatch
