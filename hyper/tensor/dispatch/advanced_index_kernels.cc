// Advanced indexing and the index_* family on DTensor tensors (see advanced_index_kernels.h).
#include "hyper/tensor/dispatch/advanced_index_kernels.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/advanced_index_rules.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

using Indices = std::vector<std::optional<at::Tensor>>;

/// A `Tensor?[]` argument: None and undefined tensors as nullopt.
Indices index_list(const c10::IValue& v) {
  Indices out;
  for (const c10::IValue& e : v.toListRef()) {
    if (e.isNone() || !e.toTensor().defined())
      out.emplace_back(std::nullopt);
    else
      out.emplace_back(e.toTensor());
  }
  return out;
}

/// `op(arg 0: ...; ...)`: self, every index tensor, then `values` if given.
std::string where(const std::string& name, const at::Tensor& self, const Indices& idx,
                  const at::Tensor* values = nullptr) {
  std::vector<ArgLayout> a{arg_layout(self)};
  for (const auto& t : idx)
    if (t) a.push_back(arg_layout(*t));
  if (values) a.push_back(arg_layout(*values));
  return describe_args(name, a);
}

bool integer_index(const at::Tensor& t) {
  return t.scalar_type() == at::kLong || t.scalar_type() == at::kInt;
}

/// The one integer index tensor of `idx` and the dim it indexes, or nullopt when there are
/// several index tensors or a mask.
std::optional<std::pair<int64_t, at::Tensor>> one_integer_index(const Indices& idx) {
  std::optional<std::pair<int64_t, at::Tensor>> r;
  for (size_t k = 0; k < idx.size(); ++k) {
    if (!idx[k]) continue;
    if (r || !integer_index(*idx[k])) return std::nullopt;
    r.emplace(static_cast<int64_t>(k), *idx[k]);
  }
  return r;
}

/// One entry of an advanced index list as plain index tensors, one per self dim it indexes,
/// the same on every rank: the entry made whole, a bool / uint8 mask as its nonzero indices
/// (one per dim it covers, as ATen does), an integer index as it is. `where` names the call.
std::vector<at::Tensor> whole_indices(const at::Tensor& t, const std::function<std::string()>& where) {
  const at::Tensor w = whole(t);
  if (w.scalar_type() == at::kBool || w.scalar_type() == at::kByte) {
    HYPER_CHECK_IMPLEMENTED(w.dim() > 0, where(), ": a 0-dim mask index");
    const at::Tensor nz = at::nonzero(w);
    std::vector<at::Tensor> r;
    for (int64_t j = 0; j < w.dim(); ++j) r.push_back(nz.select(1, j));
    return r;
  }
  HYPER_CHECK_VALUE(integer_index(w), where(), ": an index tensor must be int64, int32, bool or "
                    "uint8, got ", w.scalar_type());
  return {w};
}

/// ValueError unless every entry of the (wrapped) index `t` of dim `e` is in [0, size).
void check_in_bounds(const at::Tensor& t, int64_t e, int64_t size,
                     const std::function<std::string()>& where) {
  if (t.numel() == 0) return;
  const auto [mn, mx] = at::aminmax(t);
  const int64_t lo = mn.item<int64_t>(), hi = mx.item<int64_t>();
  HYPER_CHECK_VALUE(lo >= 0 && hi < size, where(), ": index ", lo < 0 ? lo - size : hi,
                    " is out of bounds for dim ", e, " of size ", size);
}

/// ATen's negative indices (advanced indexing, index_put, index_fill) counted from the end:
/// elementwise ops on the index (its own layout). Indices below -size stay negative and are
/// refused by the op that reads them.
at::Tensor wrap_negative(const at::Tensor& index, int64_t size) {
  return at::where(index.lt(0), index.add(size), index);
}

/// A 1-D (or 0-dim) index along `d` as an int64 index of `shape` (scatter's form): viewed
/// with size n at `d` and 1 elsewhere, then expanded.
at::Tensor expanded_index(const at::Tensor& index, int64_t d, at::IntArrayRef shape) {
  std::vector<int64_t> v(shape.size(), 1);
  v[static_cast<size_t>(d)] = index.numel();
  at::Tensor i = index.scalar_type() == at::kLong ? index : index.to(at::kLong);
  return i.reshape(v).expand(shape);
}

/// self's dims with dim `d` replaced by `mid`.
std::vector<int64_t> replaced_dim(at::IntArrayRef self, int64_t d, at::IntArrayRef mid) {
  std::vector<int64_t> s(self.begin(), self.begin() + d);
  s.insert(s.end(), mid.begin(), mid.end());
  s.insert(s.end(), self.begin() + d + 1, self.end());
  return s;
}

int64_t indexed_dim(const std::string& name, const at::Tensor& self, const Indices& idx, int64_t d) {
  HYPER_CHECK_VALUE(d < self.dim(), where(name, self, idx), ": index tensor at position ", d,
                    " of a tensor of ", self.dim(), " dims (too many indices)");
  return d;
}

/// The shape of `self[indices]` (ATen's rules: the broadcast index dims replace adjacent
/// indexed dims in place, or go first when the indexed dims are apart), from the op on meta
/// tensors of these sizes (int64 indices; absent: a full slice).
std::vector<int64_t> index_shape(const std::vector<int64_t>& self,
                                 const std::vector<std::optional<std::vector<int64_t>>>& indices) {
  c10::List<std::optional<at::Tensor>> meta;
  for (const auto& s : indices)
    meta.push_back(s ? std::optional<at::Tensor>(at::empty(*s, at::TensorOptions(at::kMeta).dtype(at::kLong)))
                     : std::nullopt);
  return at::index(at::empty(self, at::TensorOptions(at::kMeta)), meta).sizes().vec();
}

/// index.Tensor with several index tensors or a mask (general advanced indexing): the index
/// tensors are made whole (gathered where sharded; a mask turned into its nonzero indices,
/// one per dim it covers, as ATen does; negative entries wrapped), then per mesh dim self's
/// Shard of an indexed dim is kept as a masked Partial(sum) (each rank picks the entries whose
/// indices fall in its box, zeros elsewhere; a numeric dtype), a Shard of another dim stays a
/// Shard of that dim's output position, and a Partial passes (picking commutes with every
/// reduce op; beside a masked dim only sum / avg). One local op (local_op.h), local backward.
at::Tensor general_index(const std::string& name, const at::Tensor& self, const Indices& idx,
                         bool record) {
  std::optional<DTensor> ref;
  if (is_dtensor(self)) ref = dtensor_of(self);
  for (const auto& t : idx)
    if (!ref && t && is_dtensor(*t)) ref = dtensor_of(*t);
  const Layout self_layout = is_dtensor(self) ? dtensor_of(self).layout()
                                               : Layout(ref->layout().mesh(),
                                                        Placements(ref->layout().placements().size(), Replicate()),
                                                        self.sizes().vec());
  // Refused before any index is gathered (advanced_index_layouts refuses it too).
  HYPER_CHECK_IMPLEMENTED(!self_layout.is_ragged(), where(name, self, idx),
                          ": advanced indexing of a RaggedShard DTensor (fail-closed)");
  const size_t nm = self_layout.placements().size();
  std::vector<int64_t> idx_shard;
  {
    std::vector<ArgLayout> ts;
    bool integer_dtensors = true;
    for (const auto& t : idx) {
      if (!t) continue;
      ts.push_back(arg_layout(*t));
      integer_dtensors = integer_dtensors && is_dtensor(*t) && integer_index(*t);
    }
    idx_shard = local_index_shards(self_layout, ts, integer_dtensors);  // advanced_index_rules.h
  }
  const bool idx_local = std::any_of(idx_shard.begin(), idx_shard.end(), [](int64_t k) { return k >= 0; });
  // The index tensors, one per self dim they index (a mask covers several): whole, or this
  // rank's slice on the mesh dims above. `gsizes`: their global shapes.
  std::vector<std::optional<at::Tensor>> li;
  std::vector<std::vector<int64_t>> gsizes;
  for (const auto& t : idx) {
    if (!t) {
      li.emplace_back(std::nullopt);
      gsizes.emplace_back();
      continue;
    }
    if (idx_local) {
      Placements ps(nm, Replicate());
      for (size_t m = 0; m < nm; ++m)
        if (idx_shard[m] >= 0) ps[m] = Shard(idx_shard[m]);
      li.emplace_back(local_as(*t, Layout(self_layout.mesh(), ps, t->sizes().vec()), *ref));
      gsizes.push_back(t->sizes().vec());
      continue;
    }
    for (const at::Tensor& w : whole_indices(*t, [&] { return where(name, self, idx); })) {
      li.emplace_back(w);
      gsizes.push_back(w.sizes().vec());
    }
  }
  const int64_t rank = self.dim();
  HYPER_CHECK_VALUE(static_cast<int64_t>(li.size()) <= rank, where(name, self, idx), ": ",
                    li.size(), " indexed dims for a tensor of ", rank, " dims (too many indices)");
  std::vector<int64_t> indexed;
  for (size_t k = 0; k < li.size(); ++k) {
    if (!li[k]) continue;
    const int64_t n = self.size(static_cast<int64_t>(k));
    li[k] = wrap_negative(*li[k], n);
    indexed.push_back(static_cast<int64_t>(k));
  }
  HYPER_CHECK_VALUE(!indexed.empty(), where(name, self, idx), ": no index tensor");
  // The output's shape (ATen's rules: the broadcast index dims replace adjacent indexed dims in
  // place, or go first when the indexed dims are apart), from the same op on meta tensors.
  std::vector<std::optional<std::vector<int64_t>>> sizes;
  std::vector<bool> is_indexed;
  for (size_t k = 0; k < li.size(); ++k) {
    sizes.push_back(li[k] ? std::optional<std::vector<int64_t>>(gsizes[k]) : std::nullopt);
    is_indexed.push_back(li[k].has_value());
  }
  const std::vector<int64_t> out_shape = index_shape(self.sizes().vec(), sizes);
  const AdvancedIndexLayouts layouts =
      advanced_index_layouts(where(name, self, idx), self_layout, is_indexed, idx_shard,
                             self.scalar_type() != at::kBool, out_shape);
  const Layout& in = layouts.in;
  const Box box = in.local_box(ref->mesh_index());
  // Masked dims: every index inside the dim (no rank's box would hold it: ATen raises), then
  // this rank's box.
  std::vector<std::pair<int64_t, int64_t>> rows(static_cast<size_t>(rank), {0, -1});
  for (int64_t e : indexed) {
    const int64_t size = self.size(e);
    check_in_bounds(*li[static_cast<size_t>(e)], e, size, [&] { return where(name, self, idx); });
    if (box.sizes[e] != size) rows[static_cast<size_t>(e)] = {box.offsets[e], box.sizes[e]};
  }
  const int64_t bpos = layouts.broadcast_pos;
  std::vector<int64_t> bshape;  // the local index tensors' broadcast shape
  for (int64_t e : indexed) bshape = at::infer_size(bshape, li[static_cast<size_t>(e)]->sizes());
  auto c = std::make_shared<LocalOp>();
  c->name = name;
  c->ins = {self};
  c->in = {in};
  c->out = {layouts.out};
  c->diff_out = {true};
  c->ref = *ref;
  c->f = [li, rows, bpos, bshape](const std::vector<at::Tensor>& l) -> std::vector<at::Tensor> {
    c10::List<std::optional<at::Tensor>> list;
    std::optional<at::Tensor> mine;
    bool empty = false;
    for (size_t e = 0; e < li.size(); ++e) {
      if (!li[e] || rows[e].second < 0) {
        list.push_back(li[e]);
        continue;
      }
      const auto [off, n] = rows[e];
      const at::Tensor& t = *li[e];
      const at::Tensor in_box = t.ge(off).logical_and_(t.lt(off + n));
      mine = mine ? mine->logical_and(in_box) : in_box;
      empty = empty || n == 0;
      list.push_back((t - off).clamp_(0, std::max<int64_t>(n - 1, 0)));
    }
    if (!mine) return {at::index(l[0], list)};
    if (empty) {  // no rows of this rank: zeros of the local output's shape
      std::vector<std::optional<std::vector<int64_t>>> sizes;
      for (size_t k = 0; k < list.size(); ++k) {
        const std::optional<at::Tensor> t = list.get(k);
        sizes.push_back(t ? std::optional<std::vector<int64_t>>(t->sizes().vec()) : std::nullopt);
      }
      std::vector<int64_t> padded = l[0].sizes().vec();  // a size-0 dim indexed on meta
      for (auto& v : padded) v = std::max<int64_t>(v, 1);
      return {at::zeros(index_shape(padded, sizes), l[0].options())};
    }
    const at::Tensor picked = at::index(l[0], list);
    std::vector<int64_t> v(static_cast<size_t>(picked.dim()), 1);
    for (size_t k = 0; k < bshape.size(); ++k) v[static_cast<size_t>(bpos) + k] = bshape[k];
    const at::Tensor m = mine->expand(bshape).reshape(v);
    return {at::where(m, picked, at::zeros({}, picked.options()))};
  };
  return run_local_op(c, record).at(0);
}

/// index.Tensor(self, indices).
at::Tensor index_tensor(const std::string& name, const at::Tensor& self, const Indices& idx,
                        bool record) {
  const auto one = one_integer_index(idx);
  if (!one) return general_index(name, self, idx, record);
  const int64_t d = indexed_dim(name, self, idx, one->first);
  const at::Tensor i = wrap_negative(one->second, self.size(d));
  if (i.dim() == 1) return at::index_select(self, d, i);
  return at::index_select(self, d, i.reshape({-1})).reshape(replaced_dim(self.sizes(), d, i.sizes()));
}

/// `x[mask] = v` with one bool / uint8 mask (after leading full slices) and a one-element v
/// (several values: nullopt after the mask's checks, index_put_several puts them):
/// the mask, viewed at its dims and expanded to self's shape, fills v (masked_fill; its rule
/// keeps self's layout) or, accumulating, adds v at each True position (self + mask * v).
/// nullopt for any other index list.
std::optional<at::Tensor> index_put_mask(const std::string& name, const at::Tensor& self,
                                         const Indices& idx, const at::Tensor& values,
                                         bool accumulate, bool inplace) {
  size_t lead = 0;
  while (lead < idx.size() && !idx[lead]) ++lead;
  if (lead == idx.size() ||
      (idx[lead]->scalar_type() != at::kBool && idx[lead]->scalar_type() != at::kByte))
    return std::nullopt;
  for (size_t k = lead + 1; k < idx.size(); ++k)
    if (idx[k]) return std::nullopt;
  const at::Tensor& m = *idx[lead];
  const int64_t p = static_cast<int64_t>(lead);
  HYPER_CHECK_VALUE(p + m.dim() <= self.dim(), where(name, self, idx, &values), ": too many indices for "
                    "a tensor of dimension ", self.dim(), " (a mask of ", m.dim(), " dims after ", p,
                    " full slices)");
  for (int64_t k = 0; k < m.dim(); ++k)
    HYPER_CHECK_VALUE(m.size(k) == self.size(p + k), where(name, self, idx, &values), ": the shape of "
                      "the mask ", m.sizes(), " at index ", k, " does not match the shape of the "
                      "indexed tensor ", self.sizes(), " at index ", p + k);
  // One value per True position, or a value that requires grad (masked_fill's Scalar would cut
  // its gradient): index_put_several.
  if (values.numel() != 1 || (!accumulate && values.requires_grad())) return std::nullopt;
  std::vector<int64_t> shape(static_cast<size_t>(p), 1);
  for (int64_t s : m.sizes()) shape.push_back(s);
  while (static_cast<int64_t>(shape.size()) < self.dim()) shape.push_back(1);
  const at::Tensor full = (m.scalar_type() == at::kBool ? m : m.to(at::kBool)).reshape(shape).expand(self.sizes());
  const at::Tensor v = values.reshape({});
  if (accumulate) {
    const at::Tensor add = full.to(self.scalar_type()) * v;
    return inplace ? self.add_(add) : self + add;
  }
  const at::Scalar value = v.item();
  return inplace ? self.masked_fill_(full, value) : self.masked_fill(full, value);
}

at::Tensor index_put(const std::string& name, const at::Tensor& self, const Indices& idx,
                     const at::Tensor& values, bool accumulate, bool inplace);

/// index_put with several index tensors (`x[i, j] = v`, `x[mask] = values`, masks among integer
/// indices), out of place. The index tensors are made whole (plain: gathered where they are
/// DTensors; a mask as its nonzero indices, one per dim it covers, as ATen does), negative
/// entries wrapped, each checked against its dim, broadcast together and combined into one
/// linear index over the indexed dims, which are flattened into one dim of a view of self
/// (adjacent dims in place; dims apart permuted to the front first, where ATen puts their
/// values too); the one-index index_put (scatter / scatter_add) writes that view, and the dims
/// are unflattened (and permuted back). Layouts are the view and scatter rules' (a Shard of an
/// inner flattened dim is gathered by the view rule); autograd records the ops.
at::Tensor index_put_several(const std::string& name, const at::Tensor& self, const Indices& idx,
                             const at::Tensor& values, bool accumulate) {
  auto w = [&] { return where(name, self, idx, &values); };
  const int64_t rank = self.dim();
  std::vector<std::optional<at::Tensor>> by_dim;  // a plain int64 index per self dim, or none
  for (const auto& t : idx) {
    if (!t) {
      by_dim.emplace_back(std::nullopt);
      continue;
    }
    if (t->scalar_type() == at::kBool || t->scalar_type() == at::kByte) {  // before the gather
      const int64_t p = static_cast<int64_t>(by_dim.size());
      HYPER_CHECK_IMPLEMENTED(t->dim() > 0, w(), ": a 0-dim mask index");
      HYPER_CHECK_VALUE(p + t->dim() <= rank, w(), ": too many indices for a tensor of dimension ",
                        rank, " (a mask of ", t->dim(), " dims at dim ", p, ")");
      for (int64_t k = 0; k < t->dim(); ++k)
        HYPER_CHECK_VALUE(t->size(k) == self.size(p + k), w(), ": the shape of the mask ",
                          t->sizes(), " at index ", k, " does not match the shape of the indexed "
                          "tensor ", self.sizes(), " at index ", p + k);
    }
    for (const at::Tensor& v : whole_indices(*t, w)) by_dim.emplace_back(v.to(at::kLong));
  }
  HYPER_CHECK_VALUE(static_cast<int64_t>(by_dim.size()) <= rank, w(), ": ", by_dim.size(),
                    " indexed dims for a tensor of ", rank, " dims (too many indices)");
  std::vector<int64_t> indexed, sizes;
  std::vector<at::Tensor> ts;
  std::vector<int64_t> bshape;
  for (size_t k = 0; k < by_dim.size(); ++k) {
    if (!by_dim[k]) continue;
    const int64_t e = static_cast<int64_t>(k), n = self.size(e);
    const at::Tensor t = wrap_negative(*by_dim[k], n);
    check_in_bounds(t, e, n, w);
    try {
      bshape = at::infer_size(bshape, t.sizes());
    } catch (const c10::Error&) {
      HYPER_CHECK_VALUE(false, w(), ": the index tensors' shapes cannot be broadcast together (",
                        c10::IntArrayRef(bshape), " and ", t.sizes(), " at dim ", e, ")");
    }
    indexed.push_back(e);
    sizes.push_back(n);
    ts.push_back(t);
  }
  HYPER_CHECK_VALUE(!ts.empty(), w(), ": no index tensor");
  at::Tensor linear = ts[0].expand(bshape);
  for (size_t j = 1; j < ts.size(); ++j) linear = linear * sizes[j] + ts[j].expand(bshape);
  const int64_t a = indexed.front(), b = indexed.back();
  if (b - a + 1 == static_cast<int64_t>(indexed.size())) {  // adjacent: flattened in place
    Indices one(static_cast<size_t>(a), std::nullopt);
    one.emplace_back(linear);
    return index_put(name, self.flatten(a, b), one, values, accumulate, false).unflatten(a, sizes);
  }
  std::vector<int64_t> perm = indexed, back(static_cast<size_t>(rank));
  for (int64_t d = 0; d < rank; ++d)
    if (std::find(indexed.begin(), indexed.end(), d) == indexed.end()) perm.push_back(d);
  for (int64_t j = 0; j < rank; ++j) back[static_cast<size_t>(perm[static_cast<size_t>(j)])] = j;
  const at::Tensor front = self.permute(perm).flatten(0, static_cast<int64_t>(indexed.size()) - 1);
  // Contiguous, as ATen's result (a permuted local would make later views copies).
  return index_put(name, front, Indices{linear}, values, accumulate, false)
      .unflatten(0, sizes)
      .permute(back)
      .clone(at::MemoryFormat::Contiguous);
}

/// index_put / index_put_ / _index_put_impl_: a mask and a one-element value
/// (index_put_mask: self's layout kept), one integer index tensor (scatter / scatter_add),
/// or several index tensors (index_put_several; in place: its result copied into self).
at::Tensor index_put(const std::string& name, const at::Tensor& self, const Indices& idx,
                     const at::Tensor& values, bool accumulate, bool inplace) {
  if (auto masked = index_put_mask(name, self, idx, values, accumulate, inplace)) return *masked;
  const auto one = one_integer_index(idx);
  if (!one) {
    const at::Tensor r = index_put_several(name, self, idx, values, accumulate);
    if (!inplace) return r;
    at::Tensor s = self;
    s.copy_(r);
    return self;
  }
  const int64_t d = indexed_dim(name, self, idx, one->first);
  const at::Tensor i = wrap_negative(one->second, self.size(d)).reshape({-1});
  const std::vector<int64_t> flat = replaced_dim(self.sizes(), d, {i.numel()});
  const std::vector<int64_t> shaped = replaced_dim(self.sizes(), d, one->second.sizes());
  at::Tensor v = values.expand(shaped);
  if (shaped != flat) v = v.reshape(flat);
  const at::Tensor ie = expanded_index(i, d, flat);
  if (inplace) return accumulate ? self.scatter_add_(d, ie, v) : self.scatter_(d, ie, v);
  return accumulate ? at::scatter_add(self, d, ie, v) : at::scatter(self, d, ie, v);
}

/// masked_scatter(_): self's positions where the mask (broadcast to self's shape) is True take
/// source's first elements in row-major order: `x[mask] = source.flatten()[:count]` by
/// index_put (index_put_mask for one True position, index_put_several otherwise), so the
/// layouts are index_put's; in place, self's layout is kept. The mask is made whole (plain).
at::Tensor masked_scatter(const std::string& name, const at::Tensor& self, const at::Tensor& mask,
                          const at::Tensor& source, bool inplace) {
  auto w = [&] { return where(name, self, {mask}, &source); };
  HYPER_CHECK_VALUE(mask.scalar_type() == at::kBool, w(), ": masked_scatter only supports boolean "
                    "masks, got a mask of ", mask.scalar_type());
  HYPER_CHECK_VALUE(self.scalar_type() == source.scalar_type(), w(), ": expected self and source "
                    "to have the same dtype, got ", self.scalar_type(), " and ", source.scalar_type());
  std::vector<int64_t> shape;
  try {
    shape = at::infer_size(self.sizes(), mask.sizes());
  } catch (const c10::Error&) {
    HYPER_CHECK_VALUE(false, w(), ": the mask's shape ", mask.sizes(), " cannot be broadcast to "
                      "self's ", self.sizes());
  }
  HYPER_CHECK_VALUE(!inplace || c10::IntArrayRef(shape) == self.sizes(), w(), ": in place, the "
                    "mask's shape ", mask.sizes(), " must broadcast to self's ", self.sizes(),
                    " without growing it");
  const at::Tensor m = whole(mask).expand(shape);
  const int64_t count = m.sum().item<int64_t>();
  HYPER_CHECK_VALUE(count <= source.numel(), w(), ": the source has ", source.numel(),
                    " elements, fewer than the mask's ", count, " True positions");
  const at::Tensor values = source.reshape({-1}).narrow(0, 0, count);
  if (shape.empty()) {  // a 0-dim self and mask: where(mask, source[0], self)
    if (count == 0) return inplace ? self : self.clone();
    const at::Tensor r = at::where(m, values.reshape({}), self);
    if (!inplace) return r;
    at::Tensor s = self;
    s.copy_(r);
    return self;
  }
  const at::Tensor base =
      c10::IntArrayRef(shape) == self.sizes() ? self : self.expand(shape).clone();
  return index_put(name, base, Indices{m}, values, /*accumulate=*/false, inplace);
}

/// Which op along one dim: index_add(self, dim, index, source, alpha), index_copy(self, dim,
/// index, source), index_fill.int_Scalar(self, dim, index, value), index_reduce(self, dim,
/// index, source, reduce, include_self).
enum class AlongDim { kAdd, kCopy, kFill, kReduce };

/// An op along one dim as the scatter it is (index_kernels.h), in place into self (`inplace`).
template <AlongDim K>
at::Tensor along_dim(const std::string& name, const std::vector<c10::IValue>& a, bool inplace) {
  at::Tensor self = a[0].toTensor();
  const at::Tensor index = a[2].toTensor();
  const int64_t d = normalized_dim(a[1].toInt(), self.dim(), [&] {
    return where(name, self, {index});
  });
  HYPER_CHECK_VALUE(index.dim() <= 1 && integer_index(index), where(name, self, {index}),
                    ": index must be a 1-D (or 0-dim) int64 / int32 tensor, got ", index.dim(),
                    " dims of ", index.scalar_type());
  if (self.dim() == 0) {
    // A 0-dim self (dim 0 or -1) as the 1-element 1-D tensor it is, its source likewise.
    std::vector<c10::IValue> one = a;
    one[0] = self.reshape({1});
    one[1] = int64_t{0};
    if (K != AlongDim::kFill) one[3] = a[3].toTensor().reshape({-1});
    const at::Tensor r = along_dim<K>(name, one, /*inplace=*/false).reshape({});
    if (!inplace) return r;
    self.copy_(r);
    return self;
  }
  const at::Tensor i = index.reshape({-1});
  if (K == AlongDim::kFill) {
    const at::Tensor ie = expanded_index(wrap_negative(i, self.dim() ? self.size(d) : 1), d,
                                         replaced_dim(self.sizes(), d, {i.numel()}));
    return inplace ? self.scatter_(d, ie, a[3].toScalar()) : at::scatter(self, d, ie, a[3].toScalar());
  }
  const at::Tensor source = a[3].toTensor();
  const at::Tensor ie = expanded_index(i, d, source.sizes());
  if (K == AlongDim::kReduce) {
    const std::string reduce(a[4].toStringRef());
    const bool include_self = a[5].toBool();
    return inplace ? self.scatter_reduce_(d, ie, source, reduce, include_self)
                   : at::scatter_reduce(self, d, ie, source, reduce, include_self);
  }
  if (K == AlongDim::kCopy)
    return inplace ? self.scatter_(d, ie, source) : at::scatter(self, d, ie, source);
  const at::Scalar alpha = a[4].toScalar();
  const bool one = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  const at::Tensor src = one ? source : source.mul(alpha);
  return inplace ? self.scatter_add_(d, ie, src) : at::scatter_add(self, d, ie, src);
}

// Each op of the family from its name and arguments; `record`: at the autograd key (the local
// op's backward recorded), else below autograd.
using IndexOp = at::Tensor (*)(const std::string& name, const std::vector<c10::IValue>& a, bool record);

/// index.Tensor(self, indices).
at::Tensor index_op(const std::string& name, const std::vector<c10::IValue>& a, bool record) {
  return index_tensor(name, a[0].toTensor(), index_list(a[1]), record);
}
/// masked_scatter(_)(self, mask, source).
template <bool inplace>
at::Tensor masked_scatter_op(const std::string& name, const std::vector<c10::IValue>& a, bool) {
  return masked_scatter(name, a[0].toTensor(), a[1].toTensor(), a[2].toTensor(), inplace);
}
/// index_put(_)(self, indices, values, accumulate), _index_put_impl_ (in place).
template <bool inplace>
at::Tensor index_put_op(const std::string& name, const std::vector<c10::IValue>& a, bool) {
  return index_put(name, a[0].toTensor(), index_list(a[1]), a[2].toTensor(), a[3].toBool(), inplace);
}
template <AlongDim K, bool inplace>
at::Tensor along_dim_op(const std::string& name, const std::vector<c10::IValue>& a, bool) {
  return along_dim<K>(name, a, inplace);
}

/// The op's kernel: a refusal or bad value of an op it is composed of names this op first.
template <IndexOp run, bool kRecord>
void kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  at::Tensor r;
  auto named = [&](const std::exception& e) { return hyper::internal::str_cat(name, ": as ", e.what()); };
  try {
    r = run(name, a, kRecord);
  } catch (const NotImplementedError& e) {
    if (std::string(e.what()).rfind(name, 0) == 0) throw;
    throw NotImplementedError(named(e));
  } catch (const ValueError& e) {
    if (std::string(e.what()).rfind(name, 0) == 0) throw;
    throw ValueError(named(e));
  }
  stack->push_back(std::move(r));
}

}  // namespace

/// An op's kernels: below autograd, and at the autograd key recording its backward.
#define HYPER_ADVANCED_INDEX(op, ...)                                                \
  HYPER_BOXED_KERNEL(op, KernelKey::kDTensor, kernel<__VA_ARGS__, false>),          \
      HYPER_BOXED_KERNEL(op, KernelKey::kAutograd, kernel<__VA_ARGS__, true>)

const KernelFamily& advanced_index_kernels() {
  using D = AlongDim;
  static const KernelFamily f{"advanced index", /*serves_out=*/true, {
      HYPER_ADVANCED_INDEX("aten::index.Tensor", index_op),
      HYPER_ADVANCED_INDEX("aten::index_put", index_put_op<false>),
      HYPER_ADVANCED_INDEX("aten::index_put_", index_put_op<true>),
      HYPER_ADVANCED_INDEX("aten::_index_put_impl_", index_put_op<true>),
      HYPER_ADVANCED_INDEX("aten::index_add", along_dim_op<D::kAdd, false>),
      HYPER_ADVANCED_INDEX("aten::index_add_", along_dim_op<D::kAdd, true>),
      HYPER_ADVANCED_INDEX("aten::index_copy", along_dim_op<D::kCopy, false>),
      HYPER_ADVANCED_INDEX("aten::index_copy_", along_dim_op<D::kCopy, true>),
      HYPER_ADVANCED_INDEX("aten::index_fill.int_Scalar", along_dim_op<D::kFill, false>),
      HYPER_ADVANCED_INDEX("aten::index_fill_.int_Scalar", along_dim_op<D::kFill, true>),
      HYPER_ADVANCED_INDEX("aten::index_reduce", along_dim_op<D::kReduce, false>),
      HYPER_ADVANCED_INDEX("aten::index_reduce_", along_dim_op<D::kReduce, true>),
      HYPER_ADVANCED_INDEX("aten::masked_scatter", masked_scatter_op<false>),
      HYPER_ADVANCED_INDEX("aten::masked_scatter_", masked_scatter_op<true>),
  }};
  return f;
}

#undef HYPER_ADVANCED_INDEX

}  // namespace hyper::dispatch
