// gather / index_select / scatter / sort / topk / cumprod of DTensor tensors (see
// index_kernels.h).
#include "hyper/tensor/dispatch/index_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/index_rules.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

using Call = LocalOp;

bool numeric(const at::Tensor& t) { return t.scalar_type() != at::kBool; }

/// The local op of gather / index_select where mesh dims keep self's Shard(d) (masked): each
/// rank picks the indices in its box [off, off + n) of d, zeros elsewhere.
at::Tensor masked_pick(const at::Tensor& self, const at::Tensor& index, int64_t d, int64_t off,
                       int64_t n, bool select) {
  const std::vector<int64_t> out_shape = [&] {
    if (!select) return index.sizes().vec();
    std::vector<int64_t> s = self.sizes().vec();
    if (!s.empty()) s[d] = index.numel();
    return s;
  }();
  if (n == 0) return at::zeros(out_shape, self.options());
  const at::Tensor mine = index.ge(off).logical_and_(index.lt(off + n));
  const at::Tensor li = (index - off).clamp_(0, n - 1);
  const at::Tensor picked = select ? at::index_select(self, d, li) : at::gather(self, d, li);
  at::Tensor mask = mine;
  if (select && self.dim() > 0) {
    std::vector<int64_t> v(static_cast<size_t>(self.dim()), 1);
    v[d] = index.numel();
    mask = mine.reshape(v);
  }
  return at::where(mask, picked, at::zeros({}, self.options()));
}

/// This rank's rows [off, off + n) of `d` in `self_layout` where a rule keeps self's Shard of
/// the picked / scattered dim (`masked`), after checking every index lies in the dim: an index
/// outside it would be held by no rank's box (picking zeros, or writing nothing) where ATen
/// raises. The index is Replicate on the masked mesh dims, so every rank of those groups
/// raises alike, before any collective.
std::pair<int64_t, int64_t> masked_rows(const std::string& name, const std::vector<ArgLayout>& args,
                                        const Layout& self_layout, int64_t d, int64_t dim,
                                        const at::Tensor& index_local, const DTensor& ref) {
  const Box box = self_layout.local_box(ref.mesh_index());
  const int64_t size = self_layout.shape().empty() ? 1 : self_layout.shape()[d];
  if (index_local.numel() > 0) {
    const auto [mn, mx] = at::aminmax(index_local);
    const int64_t lo = mn.item<int64_t>(), hi = mx.item<int64_t>();
    HYPER_CHECK_VALUE(lo >= 0 && hi < size, describe_args(name, args), " dim ", dim, ": index ",
                      lo < 0 ? lo : hi, " is out of bounds for a dim of size ", size);
  }
  return {box.offsets[d], box.sizes[d]};
}

/// `src` cut to `index`'s sizes (scatter reads only that corner of a larger src).
at::Tensor cut_to(const at::Tensor& src, const at::Tensor& index) {
  at::Tensor r = src;
  for (int64_t k = 0; k < index.dim(); ++k)
    if (r.size(k) != index.size(k)) r = r.narrow(k, 0, index.size(k));
  return r;
}

/// The local scatter / scatter_add where mesh dims keep self's Shard(d) (masked): this rank
/// writes only the entries whose index falls in its rows [off, off + n) of d. An add masks
/// the others' src to zeros (their index clamped into the rows); an overwrite sends them to
/// one extra row past this rank's, cut off after. `src` absent: scatter.value's scalar `v`.
/// In place: into `self` (returned); else a new tensor.
/// scatter_reduce's reduce and include_self.
struct ScatterReduce {
  std::string reduce;
  bool include_self = true;
};

at::Tensor masked_scatter(at::Tensor self, int64_t d, const at::Tensor& index,
                          const std::optional<at::Tensor>& src, const at::Scalar& v, int64_t off,
                          int64_t n, bool add, bool inplace,
                          const std::optional<ScatterReduce>& reduce = std::nullopt) {
  if (n == 0) return inplace ? self : self.clone();  // none of the rows are this rank's
  const at::Tensor mine = index.ge(off).logical_and_(index.lt(off + n));
  if (add && !reduce) {
    const at::Tensor li = (index - off).clamp_(0, n - 1);
    const at::Tensor s = at::where(mine, cut_to(*src, index), at::zeros({}, src->options()));
    return inplace ? self.scatter_add_(d, li, s) : at::scatter_add(self, d, li, s);
  }
  const at::Tensor li = at::where(mine, index - off, at::full({}, n, index.options()));
  std::vector<int64_t> row = self.sizes().vec();
  row[static_cast<size_t>(d)] = 1;
  at::Tensor ext = at::cat({self, at::zeros(row, self.options())}, d);
  if (reduce)
    ext = at::scatter_reduce(ext, d, li, *src, reduce->reduce, reduce->include_self);
  else
    ext = src ? at::scatter(ext, d, li, *src) : at::scatter(ext, d, li, v);
  const at::Tensor mine_rows = ext.narrow(d, 0, n);
  return inplace ? self.copy_(mine_rows) : mine_rows;
}

/// gather(self, dim, index, *, sparse_grad) (`select` false) and index_select(self, dim, index).
template <bool select>
std::shared_ptr<Call> pick_call(const c10::OperatorHandle&, const std::string& name,
                                const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  const int64_t dim = a[1].toInt();
  if (!select)
    HYPER_CHECK_IMPLEMENTED(!a[3].toBool(), describe_args(name, {arg_layout(self), arg_layout(index)}),
                            ": sparse_grad=true is not implemented for DTensors");
  const bool masked_ok = numeric(self) && (select ? index.numel() < (self.dim() ? self.size(dim) : 1)
                                                  : index.numel() < self.numel());
  const IndexPropagation ip =
      select ? propagate_index_select(name, arg_layout(self), dim, arg_layout(index), masked_ok)
             : propagate_gather(name, sized(self), dim, sized(index), masked_ok);
  auto c = std::make_shared<Call>();
  c->name = name;
  c->ins = {self, index};
  c->in = {*ip.p.inputs[0], *ip.p.inputs[1]};
  c->out = {ip.p.output};
  c->diff_out = {true};
  c->ref = first_dtensor({self, index});
  const bool masked = ip.any_masked();
  const int64_t d = ip.dim;
  int64_t off = 0, n = 0;
  if (masked)
    std::tie(off, n) = masked_rows(name, {arg_layout(self), arg_layout(index)}, c->in[0], d, dim,
                                   local_as(index, c->in[1], c->ref), c->ref);
  c->f = [masked, d, off, n](const std::vector<at::Tensor>& l) -> std::vector<at::Tensor> {
    if (masked) return {masked_pick(l[0], l[1], d, off, n, select)};
    return {select ? at::index_select(l[0], d, l[1]) : at::gather(l[0], d, l[1])};
  };
  return c;
}

/// Which scatter: scatter(_).src, scatter(_).value, scatter_add(_), scatter_reduce(_).two.
enum class Scatter { kSrc, kValue, kAdd, kReduce };

/// scatter_reduce(_).two's reduce and include_self (arguments 4, 5); nullopt for the others.
template <Scatter K>
std::optional<ScatterReduce> reduce_of(const std::vector<c10::IValue>& a) {
  if (K != Scatter::kReduce) return std::nullopt;
  return ScatterReduce{a[4].toStringRef(), a[5].toBool()};
}

/// scatter.src / scatter.value / scatter_add / scatter_reduce.two (functional).
template <Scatter K>
std::shared_ptr<Call> scatter_call(const c10::OperatorHandle&, const std::string& name,
                                   const std::vector<c10::IValue>& a) {
  const std::optional<ScatterReduce> reduce = reduce_of<K>(a);
  const bool add = K == Scatter::kAdd || (reduce && reduce->reduce == "sum");
  const bool value = K == Scatter::kValue;
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  const int64_t dim = a[1].toInt();
  std::optional<ArgLayout> src;
  if (!value) src = arg_layout(a[3].toTensor());
  const IndexPropagation ip = propagate_scatter(name, arg_layout(self), dim, arg_layout(index), src,
                                                add, false, true, !reduce || add);
  const Propagation& p = ip.p;
  auto c = std::make_shared<Call>();
  c->name = name;
  c->ins = {self, index};
  c->in = {*p.inputs[0], *p.inputs[1]};
  if (!value) {
    c->ins.push_back(a[3].toTensor());
    c->in.push_back(*p.inputs[2]);
  }
  c->out = {p.output};
  c->diff_out = {true};
  c->ref = value ? first_dtensor({self, index}) : first_dtensor({self, index, a[3].toTensor()});
  const int64_t d = normalized_dim(dim, self.dim(), [] { return std::string(); });
  // A Partial(sum) output: the scalar is written on coordinate 0 only (zeros elsewhere).
  const at::Scalar v = value ? (p.output.holds_partial_zeros(c->ref.mesh_index())
                                    ? at::Scalar(0) : a[3].toScalar())
                             : at::Scalar(0);
  const bool masked = ip.any_masked();
  int64_t off = 0, n = 0;
  if (masked) {
    std::vector<ArgLayout> args = {arg_layout(self), arg_layout(index)};
    if (src) args.push_back(*src);
    std::tie(off, n) = masked_rows(name, args, c->in[0], d, dim, local_as(index, c->in[1], c->ref), c->ref);
  }
  c->f = [add, value, d, v, masked, off, n, reduce](const std::vector<at::Tensor>& l) -> std::vector<at::Tensor> {
    if (masked)
      return {masked_scatter(l[0], d, l[1], value ? std::nullopt : std::optional<at::Tensor>(l[2]), v,
                             off, n, add, /*inplace=*/false, reduce)};
    if (reduce) return {at::scatter_reduce(l[0], d, l[1], l[2], reduce->reduce, reduce->include_self)};
    if (value) return {at::scatter(l[0], d, l[1], v)};
    return {add ? at::scatter_add(l[0], d, l[1], l[2]) : at::scatter(l[0], d, l[1], l[2])};
  };
  return c;
}

/// What an op computed along one dim reads off its arguments: the dim, whether it is reduced
/// (keepdim set), the output's global shape when it differs from self's (topk), whether a
/// second output holds indices (not differentiable), and the op on the local tensor.
struct Along {
  int64_t dim = 0;
  std::optional<bool> keepdim;
  std::optional<Shape> out_shape;
  bool indices = true;
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> f;
};
using Vec = std::vector<at::Tensor>;
using ValuesIndices = std::tuple<at::Tensor, at::Tensor>;

/// cumprod(self, dim, *, dtype) / logcumsumexp(self, dim).
Along cumprod_along(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const int64_t dim = a[1].toInt();
  const auto dtype = a[2].isNone() ? std::optional<at::ScalarType>() : a[2].toScalarType();
  return {dim, {}, {}, false, [dim, dtype](const Vec& l) -> Vec { return {at::cumprod(l[0], dim, dtype)}; }};
}
Along logcumsumexp_along(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const int64_t dim = a[1].toInt();
  return {dim, {}, {}, false, [dim](const Vec& l) -> Vec { return {at::logcumsumexp(l[0], dim)}; }};
}
/// cummax / cummin(self, dim).
template <ValuesIndices (*F)(const at::Tensor&, int64_t)>
Along cumulative_along(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const int64_t dim = a[1].toInt();
  return {dim, {}, {}, true, [dim](const Vec& l) -> Vec {
            auto [v, i] = F(l[0], dim);
            return {v, i};
          }};
}
/// kthvalue(self, k, dim, keepdim).
Along kthvalue_along(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const int64_t k = a[1].toInt(), dim = a[2].toInt();
  const bool keep = a[3].toBool();
  return {dim, keep, {}, true, [k, dim, keep](const Vec& l) -> Vec {
            auto [v, i] = at::kthvalue(l[0], k, dim, keep);
            return {v, i};
          }};
}
/// median.dim / nanmedian.dim / mode(self, dim, keepdim).
template <ValuesIndices (*F)(const at::Tensor&, int64_t, bool)>
Along reduced_along_dim(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const int64_t dim = a[1].toInt();
  const bool keep = a[2].toBool();
  return {dim, keep, {}, true, [dim, keep](const Vec& l) -> Vec {
            auto [v, i] = F(l[0], dim, keep);
            return {v, i};
          }};
}
/// topk(self, k, dim, largest, sorted): the dim's global size becomes k.
Along topk_along(const std::string& name, const at::Tensor& self, const std::vector<c10::IValue>& a) {
  const int64_t k = a[1].toInt(), dim = a[2].toInt();
  const bool largest = a[3].toBool(), sorted = a[4].toBool();
  Shape s = dtensor_of(self).layout().shape();
  const int64_t d = normalized_dim(dim, static_cast<int64_t>(s.size()),
                                   [&] { return describe_args(name, {arg_layout(self)}); });
  if (!s.empty()) s[d] = k;
  return {dim, {}, s, true, [k, dim, largest, sorted](const Vec& l) -> Vec {
            auto [v, i] = at::topk(l[0], k, dim, largest, sorted);
            return {v, i};
          }};
}
/// sort(self, dim, descending) (`stable_overload` false) / sort.stable(self, *, stable, dim,
/// descending).
template <bool stable_overload>
Along sort_along(const std::string&, const at::Tensor&, const std::vector<c10::IValue>& a) {
  const std::optional<bool> stable =
      stable_overload ? (a[1].isNone() ? std::optional<bool>() : a[1].toBool()) : false;
  const int64_t dim = a[stable_overload ? 2 : 1].toInt();
  const bool descending = a[stable_overload ? 3 : 2].toBool();
  return {dim, {}, {}, true, [stable, dim, descending](const Vec& l) -> Vec {
            auto [v, i] = at::sort(l[0], stable, dim, descending);
            return {v, i};
          }};
}

/// An op along one unsharded dim (`Spec` reads its arguments).
template <Along (*Spec)(const std::string&, const at::Tensor&, const std::vector<c10::IValue>&)>
std::shared_ptr<Call> along_call(const c10::OperatorHandle&, const std::string& name,
                                 const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const DTensor dt = dtensor_of(self);
  Along spec = Spec(name, self, a);
  Propagation p = propagate_along_dims(name, arg_layout(self), {spec.dim}, false, spec.out_shape);
  if (spec.keepdim && self.dim() > 0)  // index_rules.h; the rule checked dim
    p.output = reduced_along(p.output, normalized_dim(spec.dim, self.dim(), [] { return std::string(); }),
                             *spec.keepdim);
  auto c = std::make_shared<Call>();
  c->name = name;
  c->ins = {self};
  c->in = {*p.inputs[0]};
  c->out = {p.output};
  c->diff_out = {true};
  if (spec.indices) {
    c->out.push_back(p.output);
    c->diff_out.push_back(false);
  }
  c->ref = dt;
  c->f = std::move(spec.f);
  return c;
}

/// prod(self, *, dtype) / prod.dim_int(self, dim, keepdim, *, dtype): each rank's product of
/// its part of the reduced dims (1 for an empty part), those candidates all-gathered over the
/// mesh dims that shard a reduced dim (one per rank and output element, never the tensor),
/// and the product of the other ranks' candidates times this rank's own: the local graph
/// reaches self's local only through this rank's product, so the backward (local_op.h) is
/// exact with zeros (no division by the product). `all`: prod, else prod.dim_int.
template <bool all>
std::shared_ptr<Call> prod_call(const c10::OperatorHandle&, const std::string& name,
                                const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const DTensor dt = dtensor_of(self);
  auto where = [&] { return describe_args(name, {arg_layout(self)}); };
  const size_t dpos = all ? 1 : 3;
  const auto dtype = a[dpos].isNone() ? std::optional<at::ScalarType>() : a[dpos].toScalarType();
  const int64_t rank = self.dim();
  std::vector<int64_t> dims;
  if (all) {
    for (int64_t k = 0; k < rank; ++k) dims.push_back(k);
  } else {
    dims = {normalized_dim(a[1].toInt(), rank, where)};
  }
  const bool keepdim = !all && a[2].toBool();
  const Layout& l = dt.layout();
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where(),
                          ": not implemented for a RaggedShard DTensor (fail-closed: elementwise "
                          "ops and full sums / max / min only)");
  if (rank == 0) dims.clear();  // a 0-dim tensor: its one value
  // Self with every Partial reduced (a product of shares is not the product of the sum); the
  // mesh dims that shard a reduced dim, and the candidates' global shape.
  const Layout in = partials_replicated(l);  // sharding_rule.h
  const Placements& in_ps = in.placements();
  auto reduced = [&](int64_t e) { return std::find(dims.begin(), dims.end(), e) != dims.end(); };
  Shape cshape = l.shape();
  for (int64_t d : dims) cshape[d] = 1;
  Placements gathered = in_ps, out_ps = in_ps;
  for (size_t m = 0; m < in_ps.size(); ++m) {
    if (!in_ps[m].is_shard() || !reduced(in_ps[m].dim())) continue;
    cshape[in_ps[m].dim()] *= l.mesh().size(static_cast<int64_t>(m));
    gathered[m] = out_ps[m] = Replicate();
  }
  Layout out(l.mesh(), out_ps, l.shape());
  if (all)
    out = Layout(l.mesh(), Placements(in_ps.size(), Replicate()), {});
  else if (rank > 0)
    out = reduced_along(out, dims[0], keepdim);  // index_rules.h
  auto c = std::make_shared<Call>();
  c->name = name;
  c->ins = {self};
  c->in = {in};
  c->out = {out};
  c->diff_out = {true};
  c->ref = dt;
  const Layout cand(l.mesh(), in_ps, cshape), cand_all(l.mesh(), gathered, cshape);
  const bool communicates = !(gathered == in_ps);
  // This rank's candidate among the gathered ones: its offset along each reduced dim.
  std::vector<at::indexing::TensorIndex> own;
  const Box box = cand.local_box(dt.mesh_index());
  for (int64_t k = 0; k < rank; ++k)
    own.emplace_back(reduced(k) ? at::indexing::TensorIndex(at::indexing::Slice(box.offsets[k], box.offsets[k] + 1))
                                : at::indexing::TensorIndex(at::indexing::Slice()));
  const DeviceMesh mesh = dt.device_mesh();
  c->f = [dtype, rank, dims, keepdim, communicates, mesh, cand, cand_all,
          own](const std::vector<at::Tensor>& loc) -> std::vector<at::Tensor> {
    at::Tensor x = dtype ? loc[0].to(*dtype) : loc[0];
    at::Tensor mine = x;  // this rank's product over the reduced dims, keepdim
    if (rank == 0) mine = x.clone();
    for (int64_t d : dims) mine = at::prod(mine, d, /*keepdim=*/true);
    at::Tensor out = mine;
    if (communicates) {
      at::Tensor all_c;
      {
        at::NoGradGuard no_grad;
        all_c = redistribute_local(mine.detach().contiguous(), mesh, cand, cand_all);
        // The others' product: this rank's candidate replaced by 1.
        all_c = all_c.clone();
        all_c.index_put_(own, 1);
        for (int64_t d : dims) all_c = at::prod(all_c, d, /*keepdim=*/true);
      }
      out = mine * all_c;
    }
    if (all) return {out.reshape({})};
    if (!keepdim && rank > 0) out = out.squeeze(dims[0]);
    return {out};
  };
  return c;
}

/// scatter_.src / scatter_.value / scatter_add_ / scatter_reduce_.two: into self's local,
/// self's layout kept.
template <Scatter K>
void inplace_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  const std::optional<ScatterReduce> reduce = reduce_of<K>(a);
  const bool value = K == Scatter::kValue;
  const bool add = K == Scatter::kAdd || (reduce && reduce->reduce == "sum");
  std::optional<ArgLayout> src;
  if (!value) src = arg_layout(a[3].toTensor());
  auto where = [&] { return describe_args(name, arg_layouts(a.data(), a.size())); };
  HYPER_CHECK_IMPLEMENTED(is_dtensor(self), where(),
                          ": an in-place op on a plain tensor with DTensor operands");
  const IndexPropagation ip = propagate_scatter(name, arg_layout(self), a[1].toInt(),
                                                arg_layout(index), src, add, true, true,
                                                !reduce || add);
  const Propagation& p = ip.p;
  check_inplace_reaches_base(self, where);  // dispatch_args.h
  const DTensor dt = dtensor_of(self);
  const int64_t d = normalized_dim(a[1].toInt(), self.dim(), where);
  const at::Tensor il = local_as(index, *p.inputs[1], dt);
  at::Tensor local = dt.to_local();
  const bool masked = ip.any_masked();
  if (masked) {
    const auto [off, n] = masked_rows(name, arg_layouts(a.data(), a.size()), dt.layout(), d,
                                      a[1].toInt(), il, dt);
    at::AutoDispatchBelowADInplaceOrView below;
    const at::Scalar v = value && !p.output.holds_partial_zeros(dt.mesh_index()) ? a[3].toScalar()
                                                                                 : at::Scalar(0);
    std::optional<at::Tensor> sl;
    if (!value) sl = local_as(a[3].toTensor(), *p.inputs[2], dt);
    masked_scatter(local, d, il, sl, v, off, n, add, /*inplace=*/true, reduce);
  }
  if (!masked) {
    at::AutoDispatchBelowADInplaceOrView below;
    if (value) {
      local.scatter_(d, il, p.output.holds_partial_zeros(dt.mesh_index()) ? at::Scalar(0)
                                                                           : a[3].toScalar());
    } else {
      const at::Tensor sl = local_as(a[3].toTensor(), *p.inputs[2], dt);
      if (reduce)
        local.scatter_reduce_(d, il, sl, reduce->reduce, reduce->include_self);
      else if (add)
        local.scatter_add_(d, il, sl);
      else
        local.scatter_(d, il, sl);
    }
  }
  bump_local_version(local);
  write_through(self);  // a copied slice of a sharded dim writes its base (dispatch_args.h)
  stack->push_back(self);
}

}  // namespace

// Functional ops: the local op below autograd, and at the autograd key with its own backward.
const KernelFamily& index_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"index", /*serves_out=*/true, {
      HYPER_LOCAL_OP_KERNEL("aten::gather", pick_call<false>),
      HYPER_LOCAL_OP_KERNEL("aten::index_select", pick_call<true>),
      HYPER_LOCAL_OP_KERNEL("aten::scatter.src", scatter_call<Scatter::kSrc>),
      HYPER_LOCAL_OP_KERNEL("aten::scatter.value", scatter_call<Scatter::kValue>),
      HYPER_LOCAL_OP_KERNEL("aten::scatter_add", scatter_call<Scatter::kAdd>),
      HYPER_LOCAL_OP_KERNEL("aten::scatter_reduce.two", scatter_call<Scatter::kReduce>),
      HYPER_LOCAL_OP_KERNEL("aten::sort", along_call<sort_along<false>>),
      HYPER_LOCAL_OP_KERNEL("aten::sort.stable", along_call<sort_along<true>>),
      HYPER_LOCAL_OP_KERNEL("aten::topk", along_call<topk_along>),
      HYPER_LOCAL_OP_KERNEL("aten::cumprod", along_call<cumprod_along>),
      HYPER_LOCAL_OP_KERNEL("aten::prod", prod_call<true>),
      HYPER_LOCAL_OP_KERNEL("aten::prod.dim_int", prod_call<false>),
      HYPER_LOCAL_OP_KERNEL("aten::logcumsumexp", along_call<logcumsumexp_along>),
      HYPER_LOCAL_OP_KERNEL("aten::cummax", along_call<cumulative_along<&at::cummax>>),
      HYPER_LOCAL_OP_KERNEL("aten::cummin", along_call<cumulative_along<&at::cummin>>),
      HYPER_LOCAL_OP_KERNEL("aten::kthvalue", along_call<kthvalue_along>),
      HYPER_LOCAL_OP_KERNEL("aten::median.dim", along_call<reduced_along_dim<&at::median>>),
      HYPER_LOCAL_OP_KERNEL("aten::nanmedian.dim", along_call<reduced_along_dim<&at::nanmedian>>),
      HYPER_LOCAL_OP_KERNEL("aten::mode", along_call<reduced_along_dim<&at::mode>>),
      HYPER_BOXED_KERNEL("aten::scatter_.src", K::kDTensor, inplace_kernel<Scatter::kSrc>),
      HYPER_BOXED_KERNEL("aten::scatter_.value", K::kDTensor, inplace_kernel<Scatter::kValue>),
      HYPER_BOXED_KERNEL("aten::scatter_add_", K::kDTensor, inplace_kernel<Scatter::kAdd>),
      HYPER_BOXED_KERNEL("aten::scatter_reduce_.two", K::kDTensor, inplace_kernel<Scatter::kReduce>),
  }};
  return f;
}

}  // namespace hyper::dispatch
