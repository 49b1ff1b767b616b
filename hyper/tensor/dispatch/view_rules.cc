// Torch-free sharding rules of view ops (see view_rules.h).
#include "hyper/tensor/dispatch/view_rules.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper::dispatch {

Placements replicate_dim(const Placements& ps, int64_t dim) {
  Placements r = ps;
  for (auto& q : r)
    if (q.is_shard() && q.dim() == dim) q = Replicate();
  return r;
}

namespace {

const Layout& not_ragged(const ArgLayout& in, const std::string& op_name) {
  HYPER_CHECK_INTERNAL(in.layout.has_value(), op_name, ": no DTensor argument");
  HYPER_CHECK_IMPLEMENTED(!in.layout->is_ragged(), describe_args(op_name, {in}),
                          ": view ops of a RaggedShard DTensor are not implemented (fail-closed)");
  return *in.layout;
}

/// Shard dims renumbered by `map` (input dim -> output dim).
Propagation renumbered(const Layout& l, const Shape& out, const std::vector<int64_t>& map) {
  Placements ps = l.placements();
  for (auto& q : ps)
    if (q.is_shard()) q = Shard(map[q.dim()]);
  return Propagation{{l}, Layout(l.mesh(), ps, out)};
}


}  // namespace

Propagation propagate_view_groups(const std::string& op_name, const ArgLayout& in,
                                  const std::vector<int64_t>& size) {
  auto where = [&] { return describe_args(op_name, {in}) + " to size " + shape_to_string(size); };
  const Layout& l = not_ragged(in, op_name);
  const Shape& s = l.shape();
  Shape out(size.begin(), size.end());
  int64_t known = 1, infer = -1;
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == -1) {
      HYPER_CHECK_VALUE(infer < 0, where(), ": more than one -1");
      infer = static_cast<int64_t>(d);
    } else {
      HYPER_CHECK_VALUE(out[d] >= 0, where(), ": negative size ", out[d]);
      known *= out[d];
    }
  }
  if (infer >= 0) {
    HYPER_CHECK_VALUE(known != 0, where(), ": -1 is ambiguous with a size-0 dim");
    out[infer] = l.numel() / known;
  }
  HYPER_CHECK_VALUE(hyper::numel(out) == l.numel(), where(), ": ", hyper::numel(out),
                    " elements, the tensor has ", l.numel());
  const int64_t rank_in = static_cast<int64_t>(s.size());
  const int64_t ndim = l.mesh().ndim();

  // Groups of the non-1 dims: group_of[d] for an input dim, its first input and output dims,
  // and the products of the dims after them inside the group.
  std::vector<int64_t> group_of(rank_in, -1);
  struct Group {
    int64_t first_in, first_out, inner_in, inner_out;
  };
  std::vector<Group> groups;
  if (l.numel() > 0) {
    std::vector<int64_t> bi, bo;
    for (int64_t d = 0; d < rank_in; ++d)
      if (s[d] != 1) bi.push_back(d);
    for (size_t d = 0; d < out.size(); ++d)
      if (out[d] != 1) bo.push_back(static_cast<int64_t>(d));
    size_t i = 0, j = 0;
    while (i < bi.size() && j < bo.size()) {
      Group g{bi[i], bo[j], 1, 1};
      const size_t i0 = i, j0 = j;
      int64_t pi = s[bi[i++]], pj = out[bo[j++]];
      while (pi != pj) {
        if (pi < pj) {
          pi *= s[bi[i++]];
        } else {
          pj *= out[bo[j++]];
        }
      }
      for (size_t k = i0 + 1; k < i; ++k) g.inner_in *= s[bi[k]];
      for (size_t k = j0 + 1; k < j; ++k) g.inner_out *= out[bo[k]];
      for (size_t k = i0; k < i; ++k) group_of[bi[k]] = static_cast<int64_t>(groups.size());
      groups.push_back(g);
    }
  }

  // Placements: a Shard stays only on its group's first dim; then drop (to Replicate) every
  // Shard whose local boxes do not map exactly, until none is left to drop.
  Placements src = l.placements(), dst = l.placements();
  for (int64_t m = 0; m < ndim; ++m) {
    const Placement& q = src[m];
    if (!q.is_shard()) continue;
    const int64_t g = group_of[q.dim()];
    if (g < 0 || groups[g].first_in != q.dim()) {
      src[m] = dst[m] = Replicate();
    } else {
      dst[m] = Shard(groups[g].first_out);
    }
  }
  for (bool changed = true; changed;) {
    changed = false;
    const Layout a(l.mesh(), src, s), b(l.mesh(), dst, out);
    std::vector<bool> bad(groups.size(), false);
    for (int64_t idx = 0; idx < l.mesh().size(); ++idx) {
      const Box ba = a.local_box(idx), bb = b.local_box(idx);
      for (size_t g = 0; g < groups.size(); ++g) {
        const Group& G = groups[g];
        const int64_t na = ba.sizes[G.first_in] * G.inner_in;
        const int64_t nb = bb.sizes[G.first_out] * G.inner_out;
        if (na != nb || (na != 0 && ba.offsets[G.first_in] * G.inner_in !=
                                        bb.offsets[G.first_out] * G.inner_out))
          bad[g] = true;
      }
    }
    for (int64_t m = 0; m < ndim; ++m)
      if (src[m].is_shard() && bad[group_of[src[m].dim()]]) {
        src[m] = dst[m] = Replicate();
        changed = true;
      }
  }
  return Propagation{{Layout(l.mesh(), src, s)}, Layout(l.mesh(), dst, out)};
}

Propagation propagate_permute(const std::string& op_name, const ArgLayout& in,
                              const std::vector<int64_t>& dims) {
  auto where = [&] { return describe_args(op_name, {in}) + " dims " + shape_to_string(dims); };
  const Layout& l = not_ragged(in, op_name);
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(static_cast<int64_t>(dims.size()) == rank, where(), ": ", dims.size(),
                    " dims for a tensor of ", rank, " dims");
  std::vector<int64_t> map(rank, -1);
  Shape out(rank);
  for (int64_t j = 0; j < rank; ++j) {
    const int64_t d = normalized_dim(dims[j], rank, where());
    HYPER_CHECK_VALUE(map[d] < 0, where(), ": dim ", d, " repeated");
    map[d] = j;
    out[j] = l.shape()[d];
  }
  return renumbered(l, out, map);
}

Propagation propagate_unsqueeze(const std::string& op_name, const ArgLayout& in, int64_t dim) {
  const Layout& l = not_ragged(in, op_name);
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  const int64_t d =
      normalized_dim(dim, rank, describe_args(op_name, {in}) + " dim " + std::to_string(dim), 1);
  Shape out = l.shape();
  out.insert(out.begin() + d, 1);
  std::vector<int64_t> map(rank);
  for (int64_t k = 0; k < rank; ++k) map[k] = k < d ? k : k + 1;
  return renumbered(l, out, map);
}

Propagation propagate_squeeze(const std::string& op_name, const ArgLayout& in,
                              const std::optional<std::vector<int64_t>>& dims,
                              std::vector<int64_t>* squeezed) {
  const Layout& l = not_ragged(in, op_name);
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  std::vector<bool> removed(rank, false);
  if (!dims) {
    for (int64_t d = 0; d < rank; ++d) removed[d] = l.shape()[d] == 1;
  } else {
    for (int64_t d : *dims) {
      if (rank == 0) {
        normalized_dim(d, rank, describe_args(op_name, {in}));
        continue;
      }
      const int64_t k = normalized_dim(d, rank, describe_args(op_name, {in}));
      removed[k] = l.shape()[k] == 1;
    }
  }
  Shape out;
  std::vector<int64_t> map(rank, -1);
  if (squeezed) squeezed->clear();
  for (int64_t d = 0; d < rank; ++d) {
    if (removed[d]) {
      if (squeezed) squeezed->push_back(d);
      continue;
    }
    map[d] = static_cast<int64_t>(out.size());
    out.push_back(l.shape()[d]);
  }
  for (const auto& q : l.placements())
    if (q.is_shard())
      HYPER_CHECK_IMPLEMENTED(map[q.dim()] >= 0, describe_args(op_name, {in}),
                              ": squeeze of the sharded size-1 dim ", q.dim(),
                              " is not implemented (redistribute it to Replicate first)");
  return renumbered(l, out, map);
}

Propagation propagate_slice(const std::string& op_name, const ArgLayout& in, int64_t dim,
                            std::optional<int64_t> start, std::optional<int64_t> end,
                            int64_t step) {
  const Layout& l = not_ragged(in, op_name);
  auto where = [&] { return describe_args(op_name, {in}) + " dim " + std::to_string(dim); };
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(rank > 0, where(), ": slice of a 0-dim tensor");
  const int64_t d = normalized_dim(dim, rank, where());
  HYPER_CHECK_VALUE(step > 0, where(), ": slice step must be positive, got ", step);
  const int64_t n = l.shape()[d];
  int64_t lo = start.value_or(0), hi = end.value_or(n);
  if (lo < 0) lo += n;
  if (hi < 0) hi += n;
  lo = std::clamp<int64_t>(lo, 0, n);
  hi = std::clamp<int64_t>(hi, lo, n);
  Shape out = l.shape();
  out[d] = hi == lo ? 0 : (hi - lo - 1) / step + 1;  // no overflow for a huge step
  const Placements src = replicate_dim(l.placements(), d);
  return Propagation{{Layout(l.mesh(), src, l.shape())}, Layout(l.mesh(), src, out)};
}

Propagation propagate_select(const std::string& op_name, const ArgLayout& in, int64_t dim,
                             int64_t index) {
  const Layout& l = not_ragged(in, op_name);
  auto where = [&] {
    return describe_args(op_name, {in}) + " dim " + std::to_string(dim) + " index " +
           std::to_string(index);
  };
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(rank > 0, where(), ": select of a 0-dim tensor");
  const int64_t d = normalized_dim(dim, rank, where());
  const int64_t n = l.shape()[d];
  HYPER_CHECK_VALUE(index >= -n && index < n, where(), ": index out of range for size ", n);
  Shape out = l.shape();
  out.erase(out.begin() + d);
  const Placements src = replicate_dim(l.placements(), d);
  Placements dst = src;
  for (auto& q : dst)
    if (q.is_shard() && q.dim() > d) q = Shard(q.dim() - 1);
  return Propagation{{Layout(l.mesh(), src, l.shape())}, Layout(l.mesh(), dst, out)};
}

Propagation propagate_view_backward(const std::string& op_name, const ArgLayout& grad,
                                    const std::vector<int64_t>& input_sizes, int64_t dim,
                                    bool select) {
  const Layout& g = not_ragged(grad, op_name);
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  const std::string where = describe_args(op_name, {grad}) + " input_sizes " +
                            shape_to_string(input_sizes) + " dim " + std::to_string(dim);
  HYPER_CHECK_VALUE(rank > 0, where, ": a 0-dim input");
  const int64_t d = normalized_dim(dim, rank, where);
  HYPER_CHECK_VALUE(static_cast<int64_t>(g.shape().size()) == (select ? rank - 1 : rank), where,
                    ": the gradient's rank does not match");
  Placements src = select ? g.placements() : replicate_dim(g.placements(), d);
  Placements dst = src;
  if (select)
    for (auto& q : dst)
      if (q.is_shard() && q.dim() >= d) q = Shard(q.dim() + 1);
  return Propagation{{Layout(g.mesh(), src, g.shape())},
                     Layout(g.mesh(), dst, Shape(input_sizes.begin(), input_sizes.end()))};
}

namespace {

/// The diagonal's length of dims of sizes n1 (rows) and n2 at `offset` (ATen's rule).
int64_t diagonal_size(int64_t n1, int64_t n2, int64_t offset) {
  return std::max<int64_t>(offset >= 0 ? std::min(n1, n2 - offset) : std::min(n1 + offset, n2), 0);
}

/// The dims of a tensor of `rank` dims other than a and b, in order.
std::vector<int64_t> other_dims(int64_t rank, int64_t a, int64_t b) {
  std::vector<int64_t> r;
  for (int64_t d = 0; d < rank; ++d)
    if (d != a && d != b) r.push_back(d);
  return r;
}

/// dim1 and dim2 of a diagonal (of a tensor of `rank` dims) made non-negative; ValueError when
/// out of range or the same.
std::pair<int64_t, int64_t> diagonal_dims(int64_t dim1, int64_t dim2, int64_t rank,
                                          const std::string& where) {
  const int64_t a = normalized_dim(dim1, rank, where), b = normalized_dim(dim2, rank, where);
  HYPER_CHECK_VALUE(a != b, where, ": diagonal dimensions cannot be identical ", dim1, ", ", dim2);
  return {a, b};
}

std::string diagonal_where(const std::string& op_name, const ArgLayout& in, int64_t offset,
                           int64_t dim1, int64_t dim2) {
  return describe_args(op_name, {in}) + " offset " + std::to_string(offset) + " dim1 " +
         std::to_string(dim1) + " dim2 " + std::to_string(dim2);
}

}  // namespace

Propagation propagate_diagonal(const std::string& op_name, const ArgLayout& in, int64_t offset,
                               int64_t dim1, int64_t dim2) {
  const Layout& l = not_ragged(in, op_name);
  const std::string where = diagonal_where(op_name, in, offset, dim1, dim2);
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(rank >= 2, where, ": diagonal of a tensor of ", rank, " dims (expects >= 2)");
  const auto [a, b] = diagonal_dims(dim1, dim2, rank, where);
  const Placements src = replicate_dim(replicate_dim(l.placements(), a), b);
  const std::vector<int64_t> rest = other_dims(rank, a, b);
  Shape out;
  std::vector<int64_t> map(static_cast<size_t>(rank), -1);
  for (size_t j = 0; j < rest.size(); ++j) {
    out.push_back(l.shape()[rest[j]]);
    map[rest[j]] = static_cast<int64_t>(j);
  }
  out.push_back(diagonal_size(l.shape()[a], l.shape()[b], offset));
  return renumbered(Layout(l.mesh(), src, l.shape()), out, map);
}

Propagation propagate_diagonal_backward(const std::string& op_name, const ArgLayout& grad,
                                        const std::vector<int64_t>& input_sizes, int64_t offset,
                                        int64_t dim1, int64_t dim2) {
  const Layout& g = not_ragged(grad, op_name);
  const std::string where = diagonal_where(op_name, grad, offset, dim1, dim2) + " input_sizes " +
                            shape_to_string(input_sizes);
  const int64_t rank = static_cast<int64_t>(input_sizes.size());
  HYPER_CHECK_VALUE(rank >= 2, where, ": an input of ", rank, " dims (expects >= 2)");
  const auto [a, b] = diagonal_dims(dim1, dim2, rank, where);
  const std::vector<int64_t> rest = other_dims(rank, a, b);
  Shape want;
  for (int64_t d : rest) want.push_back(input_sizes[static_cast<size_t>(d)]);
  want.push_back(diagonal_size(input_sizes[static_cast<size_t>(a)],
                               input_sizes[static_cast<size_t>(b)], offset));
  HYPER_CHECK_VALUE(g.shape() == want, where, ": the gradient's shape ", shape_to_string(g.shape()),
                    " is not the diagonal's ", shape_to_string(want));
  const Placements src = replicate_dim(g.placements(), rank - 2);  // rest: the gradient's dims'
  return renumbered(Layout(g.mesh(), src, g.shape()),                 // input positions
                    Shape(input_sizes.begin(), input_sizes.end()), rest);
}

Propagation propagate_diag_embed(const std::string& op_name, const ArgLayout& in, int64_t offset,
                                 int64_t dim1, int64_t dim2) {
  const Layout& l = not_ragged(in, op_name);
  const std::string where = diagonal_where(op_name, in, offset, dim1, dim2);
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(rank >= 1, where, ": diag_embed of a 0-dim tensor");
  const auto [a, b] = diagonal_dims(dim1, dim2, rank + 1, where);
  const std::vector<int64_t> rest = other_dims(rank + 1, a, b);  // self's dims but the last
  const int64_t n = l.shape()[rank - 1] + (offset < 0 ? -offset : offset);
  Shape out(static_cast<size_t>(rank + 1), n);
  for (size_t j = 0; j < rest.size(); ++j) out[rest[j]] = l.shape()[j];
  return renumbered(Layout(l.mesh(), replicate_dim(l.placements(), rank - 1), l.shape()), out,
                    rest);  // rest: self's dims (but the diagonal) at their output positions
}

namespace {

// A view op's arguments as its rule reads them (InternalError: the call's schema and the rule
// disagree).
const std::vector<int64_t>& ints(const std::string& op_name, const ViewOpArgs& args, size_t i) {
  HYPER_CHECK_INTERNAL(i < args.size() && args[i].has_value(), op_name, ": argument ", i + 1,
                       " is not an int or int list");
  return *args[i];
}
int64_t one(const std::string& op_name, const ViewOpArgs& args, size_t i) {
  const auto& v = ints(op_name, args, i);
  HYPER_CHECK_INTERNAL(v.size() == 1, op_name, ": argument ", i + 1, " is not an int");
  return v[0];
}
std::optional<int64_t> opt(const std::string& op_name, const ViewOpArgs& args, size_t i) {
  if (i >= args.size() || !args[i]) return std::nullopt;
  return one(op_name, args, i);
}

// Each view op's ViewRule: (self, <args>).
Propagation view_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite* r) {
  r->local_shape_arg = 1;  // view / _unsafe_view(self, size)
  return propagate_view_groups(n, in, ints(n, a, 0));
}
Propagation permute_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_permute(n, in, ints(n, a, 0));
}
/// transpose.int(self, dim0, dim1); t(self) (`t`: dims 0 and 1 of at most 2).
template <bool t>
Propagation transpose_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  const int64_t rank = static_cast<int64_t>(in.shape.size());
  int64_t d0 = 0, d1 = 1;
  if (t) {
    HYPER_CHECK_VALUE(rank <= 2, describe_args(n, {in}), ": t() of a tensor of ", rank,
                      " dims (expects <= 2)");
    if (rank < 2) d0 = d1 = 0;
  } else {
    d0 = one(n, a, 0);
    d1 = one(n, a, 1);
  }
  std::vector<int64_t> perm(rank);
  for (int64_t k = 0; k < rank; ++k) perm[k] = k;
  if (rank > 0) {
    const std::string w = describe_args(n, {in});
    std::swap(perm[normalized_dim(d0, rank, w)], perm[normalized_dim(d1, rank, w)]);
  }
  return propagate_permute(n, in, perm);
}
Propagation unsqueeze_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_unsqueeze(n, in, one(n, a, 0));
}
/// view_as_real: a trailing dim of 2 (real, imaginary) appended, every placement kept (the view
/// is linear, so a Partial stays). view_as_complex: that trailing dim folded back; a Shard of it
/// is refused (a rank would hold half of a complex number).
Propagation view_as_real_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs&, ViewRewrite*) {
  const Layout& l = not_ragged(in, n);
  Shape out = l.shape();
  out.push_back(2);
  std::vector<int64_t> map(l.shape().size());
  for (size_t k = 0; k < map.size(); ++k) map[k] = static_cast<int64_t>(k);
  return renumbered(l, out, map);
}
Propagation view_as_complex_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs&, ViewRewrite*) {
  const Layout& l = not_ragged(in, n);
  const int64_t last = static_cast<int64_t>(l.shape().size()) - 1;
  HYPER_CHECK_VALUE(last >= 0 && l.shape()[last] == 2, describe_args(n, {in}),
                    ": Tensor must have a last dimension of size 2");
  for (const Placement& q : l.placements())
    HYPER_CHECK_IMPLEMENTED(!q.is_shard(last), describe_args(n, {in}),
                            ": view_as_complex of a Shard of the last dim (real and imaginary "
                            "parts on different ranks) is not implemented");
  Shape out(l.shape().begin(), l.shape().end() - 1);
  std::vector<int64_t> map(l.shape().size());
  for (size_t k = 0; k < map.size(); ++k) map[k] = static_cast<int64_t>(k);
  return renumbered(l, out, map);
}
Propagation squeeze_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite* r) {
  r->rewrite_arg = 1;  // squeeze.dims(self, dims): the global size-1 dims only
  return propagate_squeeze(n, in, ints(n, a, 0), &r->rewrite_value);
}
Propagation slice_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_slice(n, in, one(n, a, 0), opt(n, a, 1), opt(n, a, 2), one(n, a, 3));
}
Propagation select_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_select(n, in, one(n, a, 0), one(n, a, 1));
}
Propagation diagonal_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_diagonal(n, in, one(n, a, 0), one(n, a, 1), one(n, a, 2));
}
Propagation diag_embed_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a, ViewRewrite*) {
  return propagate_diag_embed(n, in, one(n, a, 0), one(n, a, 1), one(n, a, 2));
}
Propagation diagonal_backward_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a,
                                   ViewRewrite* r) {
  r->local_shape_arg = 1;  // (grad, input_sizes, offset, dim1, dim2)
  return propagate_diagonal_backward(n, in, ints(n, a, 0), one(n, a, 1), one(n, a, 2), one(n, a, 3));
}
/// select_backward(grad, input_sizes, dim, index) (`select`) / slice_backward(grad, input_sizes,
/// dim, ...).
template <bool select>
Propagation view_backward_rule(const std::string& n, const ArgLayout& in, const ViewOpArgs& a,
                               ViewRewrite* r) {
  r->local_shape_arg = 1;
  return propagate_view_backward(n, in, ints(n, a, 0), one(n, a, 1), select);
}

}  // namespace

void add_view_rules(std::map<std::string, OpRule>& r) {
  auto add = [&r](const char* op, ViewRule rule) {
    OpRule o;
    o.kind = RuleKind::kViewOp;
    o.tensor_args = {0};
    o.view = rule;
    r[op] = o;
  };
  add("aten::view", view_rule);
  add("aten::_unsafe_view", view_rule);
  add("aten::permute", permute_rule);
  add("aten::transpose.int", transpose_rule<false>);
  add("aten::t", transpose_rule<true>);
  add("aten::unsqueeze", unsqueeze_rule);
  add("aten::squeeze.dims", squeeze_rule);
  add("aten::slice.Tensor", slice_rule);
  add("aten::select.int", select_rule);
  add("aten::select_backward", view_backward_rule<true>);
  add("aten::slice_backward", view_backward_rule<false>);
  add("aten::diagonal", diagonal_rule);
  add("aten::diagonal_copy", diagonal_rule);
  add("aten::diagonal_backward", diagonal_backward_rule);
  add("aten::diag_embed", diag_embed_rule);
  add("aten::view_as_real", view_as_real_rule);
  add("aten::view_as_complex", view_as_complex_rule);
}

Propagation propagate_view_op(const std::string& op_name, const ArgLayout& in,
                              const ViewOpArgs& args, ViewRewrite* rewrite) {
  const OpRule* rule = find_rule(op_name);
  HYPER_CHECK_INTERNAL(rule != nullptr && rule->view != nullptr, op_name,
                       ": not a view op with a rule");
  ViewRewrite r;
  Propagation p = rule->view(op_name, in, args, &r);
  if (rewrite) *rewrite = r;
  return p;
}

}  // namespace hyper::dispatch
