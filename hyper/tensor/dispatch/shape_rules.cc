// Torch-free sharding rules of split / unbind, dtype casts and new_* factories (see
// shape_rules.h).
#include "hyper/tensor/dispatch/shape_rules.h"

#include <algorithm>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/view_rules.h"

namespace hyper::dispatch {

std::vector<int64_t> split_pieces(int64_t n, int64_t split_size, const std::string& where) {
  HYPER_CHECK_VALUE(split_size >= 0, where, ": split_size must be non-negative, got ", split_size);
  HYPER_CHECK_VALUE(split_size > 0 || n == 0, where, ": split_size 0 for a dim of size ", n,
                    " (only a size-0 dim can be split into pieces of 0)");
  if (n == 0) return {0};
  std::vector<int64_t> v(static_cast<size_t>((n + split_size - 1) / split_size), split_size);
  v.back() = n - split_size * (static_cast<int64_t>(v.size()) - 1);
  return v;
}

SplitPropagation propagate_split(const std::string& op_name, const ArgLayout& in,
                                 const std::vector<int64_t>& sizes, int64_t dim, bool unbind) {
  auto where = [&] { return describe_args(op_name, {in}) + " dim " + std::to_string(dim); };
  HYPER_CHECK_INTERNAL(in.layout.has_value(), op_name, ": no DTensor argument");
  const Layout& l = *in.layout;
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where(), ": split / chunk / unbind of a RaggedShard "
                          "DTensor is not implemented (fail-closed: elementwise ops only)");
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  HYPER_CHECK_VALUE(rank > 0, where(), ": a 0-dim tensor cannot be split");
  const int64_t d = normalized_dim(dim, rank, where);
  SplitPropagation p{l, {}, d, sizes};
  if (unbind) p.sizes.assign(static_cast<size_t>(l.shape()[d]), 1);
  int64_t total = 0;
  for (int64_t s : p.sizes) {
    HYPER_CHECK_VALUE(s >= 0, where(), ": negative split size ", s, " in ",
                      shape_to_string(p.sizes));
    total += s;
  }
  HYPER_CHECK_VALUE(total == l.shape()[d], where(), ": split sizes ", shape_to_string(p.sizes),
                    " sum to ", total, ", the dim has size ", l.shape()[d]);
  Placements src = replicate_dim(l.placements(), d);
  p.input = Layout(l.mesh(), src, l.shape());
  Placements dst = src;
  if (unbind)
    for (auto& q : dst)
      if (q.is_shard() && q.dim() > d) q = Shard(q.dim() - 1);
  for (int64_t s : p.sizes) {
    Shape shape = l.shape();
    if (unbind)
      shape.erase(shape.begin() + d);
    else
      shape[d] = s;
    p.outputs.emplace_back(l.mesh(), dst, shape);
  }
  return p;
}

Propagation propagate_cast(const std::string& op_name, const ArgLayout& in, CastTraits cast) {
  HYPER_CHECK_INTERNAL(in.layout.has_value(), op_name, ": no DTensor argument");
  Placements ps = in.layout->placements();
  for (auto& q : ps)
    if (q.is_partial() && !(linear_partial(q) ? cast.linear : cast.monotone)) q = Replicate();
  const Layout l(in.layout->mesh(), ps, in.layout->shape());
  return Propagation{{l}, l};
}

Propagation propagate_new_factory(const std::string& op_name, const ArgLayout& in,
                                  const std::vector<int64_t>& size) {
  HYPER_CHECK_INTERNAL(in.layout.has_value(), op_name, ": no DTensor argument");
  const Layout& l = *in.layout;
  for (int64_t s : size)
    HYPER_CHECK_VALUE(s >= 0, describe_args(op_name, {in}), " size ", shape_to_string(size),
                      ": negative size ", s);
  const Shape shape(size.begin(), size.end());
  if (shape != l.shape())
    return Propagation{{l}, Layout(l.mesh(), Placements(l.mesh().ndim(), Replicate()), shape)};
  return Propagation{{l}, partials_replicated(l)};  // shape == l.shape()
}

}  // namespace hyper::dispatch
