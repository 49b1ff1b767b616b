// Advanced indexing and the index_* family on DTensor tensors (see advanced_index.h).
#include "hyper/tensor/dispatch/advanced_index.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"

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

bool replicated(const at::Tensor& t) { return !is_dtensor(t) || as_dtensor(t).layout().is_replicated(); }

/// index.Tensor with several index tensors or a mask, every DTensor operand Replicate: the
/// op on the locals (a mask turned into its nonzero indices first, as ATen does), the output
/// Replicate. A local op (local_op.h): the gradient of a Replicate self is Replicate.
at::Tensor replicated_index(const std::string& name, const at::Tensor& self, const Indices& idx,
                            bool record) {
  std::vector<at::Tensor> ts{self};
  for (const auto& t : idx)
    if (t) ts.push_back(*t);
  bool all = true;
  std::optional<DTensor> ref;
  for (const at::Tensor& t : ts) {
    all = all && replicated(t);
    if (!ref && is_dtensor(t)) ref = as_dtensor(t);
  }
  HYPER_CHECK_IMPLEMENTED(
      all, where(name, self, idx),
      ": advanced indexing with several index tensors or a bool mask needs every DTensor "
      "operand Replicate (one integer index tensor is served for any layout: "
      "x.index({idx}) / x.index({Slice(), idx}); a sharded mask would give a data-dependent "
      "output)");
  // The indices on the locals: a mask (bool / uint8) becomes one index per dim it covers.
  std::vector<std::optional<at::Tensor>> li;
  for (const auto& t : idx) {
    if (!t) {
      li.emplace_back(std::nullopt);
      continue;
    }
    const at::Tensor l = is_dtensor(*t) ? as_dtensor(*t).to_local() : *t;
    if (l.scalar_type() == at::kBool || l.scalar_type() == at::kByte) {
      const at::Tensor nz = at::nonzero(l);
      for (int64_t j = 0; j < l.dim(); ++j) li.emplace_back(nz.select(1, j));
    } else {
      li.emplace_back(l);
    }
  }
  // The output's shape, from the same op on meta tensors.
  c10::List<std::optional<at::Tensor>> meta;
  for (const auto& t : li)
    meta.push_back(t ? std::optional<at::Tensor>(at::empty(t->sizes(), t->options().device(at::kMeta)))
                     : std::nullopt);
  const at::Tensor shape_of =
      at::index(at::empty(self.sizes(), self.options().device(at::kMeta)), meta);
  const Layout& rl = ref->layout();
  auto c = std::make_shared<LocalOp>();
  c->name = name;
  c->ins = {self};
  c->in = {Layout(rl.mesh(), Placements(rl.placements().size(), Replicate()), self.sizes().vec())};
  c->out = {Layout(rl.mesh(), Placements(rl.placements().size(), Replicate()), shape_of.sizes().vec())};
  c->diff_out = {true};
  c->ref = *ref;
  c->f = [li](const std::vector<at::Tensor>& l) -> std::vector<at::Tensor> {
    c10::List<std::optional<at::Tensor>> list;
    for (const auto& t : li) list.push_back(t);
    return {at::index(l[0], list)};
  };
  return run_local_op(c, record).at(0);
}

/// index.Tensor(self, indices).
at::Tensor index_tensor(const std::string& name, const at::Tensor& self, const Indices& idx,
                        bool record) {
  const auto one = one_integer_index(idx);
  if (!one) return replicated_index(name, self, idx, record);
  const int64_t d = indexed_dim(name, self, idx, one->first);
  const at::Tensor i = wrap_negative(one->second, self.size(d));
  if (i.dim() == 1) return at::index_select(self, d, i);
  return at::index_select(self, d, i.reshape({-1})).reshape(replaced_dim(self.sizes(), d, i.sizes()));
}

/// index_put / index_put_ / _index_put_impl_ with one integer index tensor.
at::Tensor index_put(const std::string& name, const at::Tensor& self, const Indices& idx,
                     const at::Tensor& values, bool accumulate, bool inplace) {
  const auto one = one_integer_index(idx);
  HYPER_CHECK_IMPLEMENTED(one.has_value(), where(name, self, idx, &values),
                          ": index_put with several index tensors or a mask is not implemented "
                          "for DTensors (one integer index tensor is)");
  const int64_t d = indexed_dim(name, self, idx, one->first);
  const at::Tensor i = wrap_negative(one->second, self.size(d)).reshape({-1});
  const std::vector<int64_t> flat = replaced_dim(self.sizes(), d, {i.numel()});
  const std::vector<int64_t> shaped = replaced_dim(self.sizes(), d, one->second.sizes());
  at::Tensor v = values.expand(shaped);
  if (shaped != flat) v = v.reshape(flat);
  const at::Tensor ie = expanded_index(i, d, flat);
  at::Tensor s = self;
  if (inplace) return accumulate ? s.scatter_add_(d, ie, v) : s.scatter_(d, ie, v);
  return accumulate ? at::scatter_add(self, d, ie, v) : at::scatter(self, d, ie, v);
}

/// index_add(_) / index_copy(_) / index_fill(_).int_Scalar: (self, dim, index, source|value).
at::Tensor along_dim(const std::string& name, const std::vector<c10::IValue>& a, bool inplace) {
  at::Tensor self = a[0].toTensor();
  const at::Tensor index = a[2].toTensor();
  const int64_t d = normalized_dim(a[1].toInt(), self.dim(), [&] {
    return where(name, self, {index});
  });
  HYPER_CHECK_VALUE(index.dim() <= 1 && integer_index(index), where(name, self, {index}),
                    ": index must be a 1-D (or 0-dim) int64 / int32 tensor, got ", index.dim(),
                    " dims of ", index.scalar_type());
  const at::Tensor i = index.reshape({-1});
  if (name.rfind("aten::index_fill", 0) == 0) {
    const at::Tensor ie = expanded_index(wrap_negative(i, self.dim() ? self.size(d) : 1), d,
                                         replaced_dim(self.sizes(), d, {i.numel()}));
    return inplace ? self.scatter_(d, ie, a[3].toScalar()) : at::scatter(self, d, ie, a[3].toScalar());
  }
  const at::Tensor source = a[3].toTensor();
  const at::Tensor ie = expanded_index(i, d, source.sizes());
  if (name.rfind("aten::index_reduce", 0) == 0) {
    const std::string reduce(a[4].toStringRef());
    const bool include_self = a[5].toBool();
    return inplace ? self.scatter_reduce_(d, ie, source, reduce, include_self)
                   : at::scatter_reduce(self, d, ie, source, reduce, include_self);
  }
  if (name.rfind("aten::index_copy", 0) == 0)
    return inplace ? self.scatter_(d, ie, source) : at::scatter(self, d, ie, source);
  const at::Scalar alpha = a[4].toScalar();
  const bool one = alpha.isIntegral(true) ? alpha.toLong() == 1 : alpha.toDouble() == 1.0;
  const at::Tensor src = one ? source : source.mul(alpha);
  return inplace ? self.scatter_add_(d, ie, src) : at::scatter_add(self, d, ie, src);
}

template <bool kRecord>
void kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  check_no_stale_copy(name, a.data(), a.size());  // dispatch_args.h
  const at::Tensor self = a[0].toTensor();
  at::Tensor r;
  // A refusal or bad value of an op this one is composed of names this op first.
  auto named = [&](const std::exception& e) { return hyper::internal::str_cat(name, ": as ", e.what()); };
  try {
  if (name == "aten::index.Tensor") {
    r = index_tensor(name, self, index_list(a[1]), kRecord);
  } else if (name.rfind("aten::index_put", 0) == 0 || name == "aten::_index_put_impl_") {
    r = index_put(name, self, index_list(a[1]), a[2].toTensor(), a[3].toBool(),
                  name != "aten::index_put");
  } else {
    const bool inplace = name.find("_.") != std::string::npos || name.back() == '_';
    r = along_dim(name, a, inplace);
  }
  } catch (const NotImplementedError& e) {
    if (std::string(e.what()).rfind(name, 0) == 0) throw;
    throw NotImplementedError(named(e));
  } catch (const ValueError& e) {
    if (std::string(e.what()).rfind(name, 0) == 0) throw;
    throw ValueError(named(e));
  }
  stack->push_back(std::move(r));
}

const char* const kNames[] = {"aten::index.Tensor",       "aten::index_put",
                              "aten::index_put_",         "aten::_index_put_impl_",
                              "aten::index_add",          "aten::index_add_",
                              "aten::index_copy",         "aten::index_copy_",
                              "aten::index_fill.int_Scalar", "aten::index_fill_.int_Scalar",
                              "aten::index_reduce",       "aten::index_reduce_"};

}  // namespace

std::vector<std::string> advanced_index_kernel_names() {
  return std::vector<std::string>(std::begin(kNames), std::end(kNames));
}

void register_advanced_index_kernels(torch::Library& aten, torch::Library& autograd) {
  for (const char* n : kNames) {
    aten.impl(short_name(n).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&kernel<false>>>());
    autograd.impl(short_name(n).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&kernel<true>>>());
  }
}

}  // namespace hyper::dispatch
