// Torch-free sharding rules of gather / index_select / scatter and the ops computed along an
// unsharded dim (see index_rules.h).
#include "hyper/tensor/dispatch/index_rules.h"

#include <algorithm>

#include "hyper/core/errors.h"
#include "hyper/core/geometry.h"

namespace hyper::dispatch {
namespace {

/// The operands' layouts with plain ones made Replicate on the DTensors' mesh. Throws
/// NotImplementedError for a RaggedShard operand, ValueError for two meshes.
std::vector<Layout> layouts_of(const std::string& where, const std::vector<const ArgLayout*>& args) {
  const Layout* first = nullptr;
  for (const ArgLayout* a : args)
    if (a->layout) {
      HYPER_CHECK_IMPLEMENTED(!a->layout->is_ragged(), where,
                              ": not implemented for a RaggedShard DTensor (fail-closed: "
                              "elementwise ops and full reductions only)");
      if (first == nullptr) first = &*a->layout;
      HYPER_CHECK_VALUE(a->layout->mesh() == first->mesh(), where,
                        ": DTensor operands on different meshes");
    }
  HYPER_CHECK_INTERNAL(first != nullptr, where, ": no DTensor operand");
  std::vector<Layout> out;
  for (const ArgLayout* a : args)
    out.push_back(a->layout ? *a->layout
                            : Layout(first->mesh(),
                                     Placements(static_cast<size_t>(first->mesh().ndim()), Replicate()),
                                     a->shape));
  return out;
}

Layout with(const Layout& l, Placements ps, Shape shape) {
  return Layout(l.mesh(), std::move(ps), std::move(shape));
}

/// Mesh dim m of gather / index_select with the index Replicate there: self's Shard(e),
/// e != d, kept when `keep_other` (the output Shard(e)); self's Shard(d) a masked Partial(sum)
/// when `allow_masked`, else gathered; self's Partial passes to the output.
void beside_replicate_index(size_t m, int64_t d, bool keep_other, bool allow_masked,
                            Placements& ps, Placements& po, std::vector<bool>& masked) {
  if (ps[m].is_shard()) {
    const int64_t e = ps[m].dim();
    if (e != d && keep_other) {
      po[m] = ps[m];
    } else if (e == d && allow_masked) {
      masked[m] = true;
      po[m] = Partial("sum");
    } else {
      ps[m] = Replicate();
    }
  } else if (ps[m].is_partial()) {
    po[m] = ps[m];
  }
}

}  // namespace

IndexPropagation propagate_gather(const std::string& op_name, const ArgLayout& self, int64_t dim,
                                  const ArgLayout& index, bool allow_masked) {
  auto where = [&] { return describe_args(op_name, {self, index}) + " dim " + std::to_string(dim); };
  const std::vector<Layout> ls = layouts_of(where(), {&self, &index});
  const Shape& S = self.shape;
  const Shape& I = index.shape;
  const int64_t d = normalized_dim(dim, static_cast<int64_t>(S.size()), where);
  HYPER_CHECK_VALUE(I.size() == S.size() || (S.empty() && I.size() <= 1) || (I.empty() && S.size() <= 1),
                    where(), ": index has ", I.size(), " dims and self ", S.size(),
                    " (gather needs the same number)");
  auto same_len = [&](int64_t e) { return I.size() == S.size() && S[e] == I[e]; };
  auto bytes = [](const ArgLayout& a) {
    int64_t n = a.element_size;
    for (int64_t s : a.shape) n *= s;
    return n;
  };
  // Self and index sharded on different dims by one mesh dim: the smaller one moves.
  const bool index_smaller = bytes(index) < bytes(self);
  Placements ps = ls[0].placements(), pi = ls[1].placements(), po(ps.size(), Replicate());
  std::vector<bool> masked(ps.size(), false);
  for (size_t m = 0; m < ps.size(); ++m) {
    if (pi[m].is_partial()) pi[m] = Replicate();
    if (pi[m].is_shard() && ps[m].is_shard() && ps[m].dim() != pi[m].dim() && index_smaller)
      pi[m] = Replicate();
    if (pi[m].is_shard()) {
      const int64_t e = pi[m].dim();
      if (e == d) {
        ps[m] = Replicate();
        po[m] = Shard(d);
        continue;
      }
      if (same_len(e)) {
        ps[m] = po[m] = Shard(e);
        continue;
      }
      pi[m] = Replicate();
    }
    const bool lines_up = ps[m].is_shard() && ps[m].dim() != d && same_len(ps[m].dim());
    if (lines_up) pi[m] = ps[m];  // the index sliced to self's rows
    beside_replicate_index(m, d, lines_up, allow_masked, ps, po, masked);
  }
  return {Propagation{{with(ls[0], ps, S), with(ls[1], pi, I)}, with(ls[0], po, I)}, masked, d};
}

IndexPropagation propagate_index_select(const std::string& op_name, const ArgLayout& self,
                                        int64_t dim, const ArgLayout& index, bool allow_masked) {
  auto where = [&] { return describe_args(op_name, {self, index}) + " dim " + std::to_string(dim); };
  const std::vector<Layout> ls = layouts_of(where(), {&self, &index});
  const Shape& S = self.shape;
  HYPER_CHECK_VALUE(index.shape.size() <= 1, where(), ": index must be 0-D or 1-D, got ",
                    index.shape.size(), " dims");
  const int64_t d = normalized_dim(dim, static_cast<int64_t>(S.size()), where);
  const int64_t k = index.shape.empty() ? 1 : index.shape[0];
  Shape O = S;
  if (!O.empty()) O[d] = k;
  Placements ps = ls[0].placements(), pi = ls[1].placements(), po(ps.size(), Replicate());
  std::vector<bool> masked(ps.size(), false);
  for (size_t m = 0; m < ps.size(); ++m) {
    if (pi[m].is_partial()) pi[m] = Replicate();
    if (pi[m].is_shard()) {
      if (ps[m].is_replicate() || (ps[m].is_shard() && ps[m].dim() == d)) {
        ps[m] = Replicate();
        po[m] = Shard(d);
        continue;
      }
      pi[m] = Replicate();  // the index is small: self's Shard or Partial stays
    }
    beside_replicate_index(m, d, /*keep_other=*/true, allow_masked, ps, po, masked);
  }
  return {Propagation{{with(ls[0], ps, S), with(ls[1], pi, index.shape)}, with(ls[0], po, O)},
          masked, d};
}

IndexPropagation propagate_scatter(const std::string& op_name, const ArgLayout& self, int64_t dim,
                                   const ArgLayout& index, const std::optional<ArgLayout>& src,
                                   bool add, bool inplace, bool allow_masked,
                                   bool partials_pass) {
  auto where = [&] {
    std::vector<ArgLayout> all = {self, index};
    if (src) all.push_back(*src);
    return describe_args(op_name, all) + " dim " + std::to_string(dim);
  };
  std::vector<const ArgLayout*> args = {&self, &index};
  if (src) args.push_back(&*src);
  const std::vector<Layout> ls = layouts_of(where(), args);
  const Shape& S = self.shape;
  const Shape& I = index.shape;
  const int64_t d = normalized_dim(dim, static_cast<int64_t>(S.size()), where);
  HYPER_CHECK_IMPLEMENTED(!inplace || self.layout, where(),
                          ": an in-place op on a plain tensor with DTensor operands");
  // Index and src can share self's Shard(e) when they are as long along e.
  auto fits = [&](int64_t e) {
    return e != d && I.size() == S.size() && S[e] == I[e] &&
           (!src || (src->shape.size() == S.size() && src->shape[e] == S[e]));
  };
  Placements ps = ls[0].placements(), pi = ls[1].placements();
  Placements pq = src ? ls[2].placements() : Placements(ps.size(), Replicate());
  auto need = [&](size_t m, const std::string& what) {
    HYPER_CHECK_IMPLEMENTED(!inplace, where(), ": in place, self's layout cannot change, and ",
                            "mesh dim ", m, " would need ", what);
  };
  std::vector<bool> masked(ps.size(), false);
  for (size_t m = 0; m < ps.size(); ++m) {
    if (pi[m].is_partial()) pi[m] = Replicate();
    // Self's Shard of the scatter dim kept (masked: each rank writes the entries whose index
    // falls in its rows) unless, out of place, moving self to an index / src Shard that lines
    // up moves fewer elements than gathering index and src.
    if (allow_masked && ps[m].is_shard() && ps[m].dim() == d) {
      const bool index_fits = pi[m].is_shard() && fits(pi[m].dim()) &&
                              (!src || pq[m].is_replicate() || pq[m] == pi[m]);
      const bool src_fits = src && pq[m].is_shard() && fits(pq[m].dim()) && pi[m].is_replicate();
      const int64_t gathered = (pi[m].is_shard() ? numel(I) : 0) +
                               (src && pq[m].is_shard() ? numel(src->shape) : 0);
      if (inplace || !(index_fits || src_fits) || gathered <= numel(S)) {
        masked[m] = true;
        pi[m] = Replicate();
        if (!pq[m].is_replicate()) pq[m] = Replicate();  // self is whole here: src too
        continue;
      }
    }
    int64_t e = -1;
    if (ps[m].is_shard() && fits(ps[m].dim())) {
      e = ps[m].dim();
    } else if (!inplace && !ps[m].is_partial() && pi[m].is_shard() && fits(pi[m].dim()) &&
               (!src || pq[m].is_replicate() || pq[m] == pi[m])) {
      e = pi[m].dim();
    } else if (!inplace && !ps[m].is_partial() && src && pq[m].is_shard() && fits(pq[m].dim()) &&
               pi[m].is_replicate()) {
      e = pq[m].dim();
    }
    if (e >= 0) {
      ps[m] = pi[m] = pq[m] = Shard(e);
      continue;
    }
    if (ps[m].is_shard()) {
      need(m, "self gathered (its Shard(" + std::to_string(ps[m].dim()) +
                  ") is of the scatter dim or longer than the index)");
      ps[m] = Replicate();
    }
    pi[m] = Replicate();
    if (pq[m].is_shard()) pq[m] = Replicate();
    if (!partials_pass) {  // scatter_reduce prod / mean / amax / amin: no Partial commutes
      if (ps[m].is_partial()) {
        need(m, "self's " + ps[m].to_string() + " reduced");
        ps[m] = Replicate();
      }
      if (pq[m].is_partial()) pq[m] = Replicate();
      continue;
    }
    // Partials: scatter_add is additive (sum/avg); scatter (overwrite) keeps any reduce op.
    auto keeps = [&](const Placement& p) { return p.is_partial() && (!add || linear_partial(p)); };
    if (ps[m].is_partial() && !keeps(ps[m])) {
      need(m, "self's " + ps[m].to_string() + " reduced");
      ps[m] = Replicate();
    }
    if (pq[m].is_partial() && (!keeps(pq[m]) || (ps[m].is_partial() && pq[m] != ps[m])))
      pq[m] = Replicate();
    if (ps[m].is_partial()) {
      if (src) pq[m] = ps[m];
    } else if (pq[m].is_partial()) {
      if (inplace)
        pq[m] = Replicate();
      else
        ps[m] = pq[m];
    }
  }
  std::vector<std::optional<Layout>> ins = {with(ls[0], ps, S), with(ls[1], pi, I)};
  if (src) ins.push_back(with(ls[2], pq, src->shape));
  return IndexPropagation{Propagation{ins, with(ls[0], ps, S)}, masked, d};
}

Propagation propagate_along_dims(const std::string& op_name, const ArgLayout& in,
                                 std::vector<int64_t> dims, bool linear,
                                 const std::optional<Shape>& out_shape) {
  auto where = [&] { return describe_args(op_name, {in}); };
  const Layout l = layouts_of(where(), {&in})[0];
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  for (int64_t& k : dims) k = normalized_dim(k, rank, where);
  Placements ps = l.placements();
  for (auto& p : ps) {
    if (p.is_shard() && std::find(dims.begin(), dims.end(), p.dim()) != dims.end()) p = Replicate();
    if (p.is_partial() && !(linear && linear_partial(p))) p = Replicate();
  }
  return Propagation{{with(l, ps, l.shape())}, with(l, ps, out_shape ? *out_shape : l.shape())};
}

Layout reduced_along(const Layout& l, int64_t d, bool keepdim) {
  Shape s = l.shape();
  Placements ps = l.placements();
  if (keepdim) {
    s[d] = 1;
  } else {
    s.erase(s.begin() + d);
    for (auto& q : ps)
      if (q.is_shard() && q.dim() > d) q = Shard(q.dim() - 1);
  }
  return Layout(l.mesh(), std::move(ps), std::move(s));
}

}  // namespace hyper::dispatch
