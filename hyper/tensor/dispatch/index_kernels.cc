// gather / index_select / scatter / sort / topk / cumprod of DTensor tensors (see
// index_kernels.h).
#include "hyper/tensor/dispatch/index_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/index_rules.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Locals = std::vector<at::Tensor>;

/// What one call decided: the operands, the layouts they are used in, the outputs' layouts
/// and the local op.
struct Call {
  std::string name;
  std::vector<at::Tensor> ins;   ///< tensor operands: DTensor wrappers or plain tensors
  std::vector<Layout> in;        ///< the layout each is used in
  std::vector<Layout> out;       ///< per output
  std::vector<bool> diff_out;    ///< which outputs carry gradients (not indices)
  std::function<Locals(const Locals&)> f;  ///< the local op
  DTensor ref;                   ///< the first DTensor operand (mesh, rank, plan cache)
};

Locals locals_of(const Call& c) {
  Locals l;
  for (size_t i = 0; i < c.ins.size(); ++i) l.push_back(local_as(c.ins[i], c.in[i], c.ref));
  return l;
}

variable_list wrap_all(const Call& c, const Locals& outs) {
  variable_list r;
  for (size_t j = 0; j < outs.size(); ++j) r.push_back(wrap(outs[j].detach(), c.ref, c.out[j]));
  return r;
}

/// The gradient layout of an operand used in `in` (index_kernels.h).
Layout grad_layout(const Layout& in, const std::vector<Layout>& outs) {
  Placements ps = in.placements();
  for (size_t m = 0; m < ps.size(); ++m) {
    if (ps[m].is_partial()) {
      ps[m] = Replicate();
    } else if (ps[m].is_replicate()) {
      for (const Layout& o : outs)
        if (o.placements()[m].is_shard()) ps[m] = Partial("sum");
    }
  }
  return Layout(in.mesh(), ps, in.shape());
}

/// A layout with every Partial made Replicate: how an output's gradient is read.
Layout without_partial(const Layout& l) {
  Placements ps = l.placements();
  for (auto& p : ps)
    if (p.is_partial()) p = Replicate();
  return Layout(l.mesh(), ps, l.shape());
}

struct State : torch::CustomClassHolder {
  std::shared_ptr<Call> call;
  Locals leaves;           ///< per operand: the local leaf (undefined: no gradient)
  Locals outs;             ///< the local outputs (their graph reaches the leaves)
  std::vector<bool> is_dt; ///< per operand: a DTensor (else a plain tensor)
};

struct IndexFn : public torch::autograd::Function<IndexFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList ins, std::shared_ptr<Call> c) {
    auto st = c10::make_intrusive<State>();
    Locals use = locals_of(*c);
    st->leaves.resize(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      st->is_dt.push_back(is_dtensor(ins[i]));
      if (ins[i].requires_grad() && use[i].is_floating_point()) {
        st->leaves[i] = use[i].detach().requires_grad_(true);
        use[i] = st->leaves[i];
      }
    }
    {
      at::AutoGradMode on(true);
      st->outs = c->f(use);
    }
    variable_list r = wrap_all(*c, st->outs);
    for (size_t j = 0; j < r.size(); ++j)
      if (!c->diff_out[j]) ctx->mark_non_differentiable({r[j]});
    st->call = std::move(c);
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return r;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto st = c10::static_intrusive_pointer_cast<State>(ctx->saved_data["state"].toCapsule());
    const Call& c = *st->call;
    variable_list result(st->leaves.size() + 1);
    auto where = [&] {
      std::vector<ArgLayout> ls;
      for (const Layout& l : c.in) ls.push_back(ArgLayout::of(l));
      return describe_args(c.name + " backward", ls);
    };
    HYPER_CHECK_IMPLEMENTED(!torch::autograd::GradMode::is_enabled(), where(),
                            ": double backward (create_graph=true) through ", c.name,
                            " of a DTensor is not implemented (its backward runs the local "
                            "op's backward, which autograd would not record)");
    Locals outs, gl, leaves;
    for (size_t j = 0; j < grads.size() && j < st->outs.size(); ++j)
      if (c.diff_out[j] && grads[j].defined() && st->outs[j].requires_grad()) {
        outs.push_back(st->outs[j]);
        gl.push_back(local_as(grads[j], without_partial(c.out[j]), c.ref));
      }
    for (const at::Tensor& l : st->leaves)
      if (l.defined()) leaves.push_back(l);
    Locals g;
    if (!outs.empty() && !leaves.empty())
      g = torch::autograd::grad(outs, leaves, gl, /*retain_graph=*/true, /*create_graph=*/false,
                                /*allow_unused=*/true);
    for (size_t i = 0, k = 0; i < st->leaves.size(); ++i) {
      if (!st->leaves[i].defined()) continue;
      at::Tensor gi = k < g.size() ? g[k] : at::Tensor();
      ++k;
      // Every rank returns a gradient (an empty shard's is zeros), so that the ranks' later
      // collectives on it match.
      if (!gi.defined()) gi = at::zeros_like(st->leaves[i]);
      const Layout lay = grad_layout(c.in[i], c.out);
      if (st->is_dt[i]) {
        result[i] = wrap(gi, c.ref, lay);
      } else {  // a plain operand's gradient: the global one, on every rank
        const Layout whole(lay.mesh(), Placements(static_cast<size_t>(lay.mesh().ndim()), Replicate()),
                           lay.shape());
        at::NoGradGuard no_grad;
        result[i] = redistribute_local(gi, c.ref.device_mesh(), lay, whole);
      }
    }
    return result;
  }
};

bool numeric(const at::Tensor& t) { return t.scalar_type() != at::kBool; }

/// arg_layout with the element size (the gather rule weighs self against the index).
ArgLayout sized(const at::Tensor& t) {
  ArgLayout a = arg_layout(t);
  a.element_size = static_cast<int64_t>(t.element_size());
  return a;
}

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

/// gather(self, dim, index, *, sparse_grad) and index_select(self, dim, index).
std::shared_ptr<Call> pick_call(const std::string& name, const std::vector<c10::IValue>& a) {
  const bool select = name == "aten::index_select";
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
  bool masked = false;
  for (bool b : ip.masked) masked = masked || b;
  const int64_t d = ip.dim;
  int64_t off = 0, n = 0;
  if (masked) {
    const Box box = c->in[0].local_box(c->ref.mesh_index());
    off = box.offsets[d];
    n = box.sizes[d];
    // An index outside the dim would pick zeros on every rank (no rank's box holds it) where
    // ATen raises: check it here. The index is Replicate on the masked mesh dims, so every
    // rank of those groups raises alike, before any collective.
    const int64_t size = c->in[0].shape().empty() ? 1 : c->in[0].shape()[d];
    const at::Tensor il = local_as(index, c->in[1], c->ref);
    if (il.numel() > 0) {
      const int64_t lo = il.min().item<int64_t>(), hi = il.max().item<int64_t>();
      HYPER_CHECK_VALUE(lo >= 0 && hi < size, describe_args(name, {arg_layout(self), arg_layout(index)}),
                        " dim ", dim, ": index ", lo < 0 ? lo : hi, " is out of bounds for a dim of size ", size);
    }
  }
  c->f = [select, masked, d, off, n](const Locals& l) -> Locals {
    if (masked) return {masked_pick(l[0], l[1], d, off, n, select)};
    return {select ? at::index_select(l[0], d, l[1]) : at::gather(l[0], d, l[1])};
  };
  return c;
}

/// scatter.src / scatter.value / scatter_add (functional).
std::shared_ptr<Call> scatter_call(const std::string& name, const std::vector<c10::IValue>& a) {
  const bool add = name == "aten::scatter_add";
  const bool value = name == "aten::scatter.value";
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  const int64_t dim = a[1].toInt();
  std::optional<ArgLayout> src;
  if (!value) src = arg_layout(a[3].toTensor());
  const Propagation p =
      propagate_scatter(name, arg_layout(self), dim, arg_layout(index), src, add, false);
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
  c->f = [add, value, d, v](const Locals& l) -> Locals {
    if (value) return {at::scatter(l[0], d, l[1], v)};
    return {add ? at::scatter_add(l[0], d, l[1], l[2]) : at::scatter(l[0], d, l[1], l[2])};
  };
  return c;
}

/// sort / sort.stable / topk / cumprod: along an unsharded dim.
std::shared_ptr<Call> along_call(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const DTensor dt = as_dtensor(self);
  int64_t dim = 0;
  std::optional<Shape> out_shape;
  std::function<Locals(const Locals&)> f;
  if (name == "aten::cumprod") {
    dim = a[1].toInt();
    const auto dtype = a[2].isNone() ? std::optional<at::ScalarType>() : a[2].toScalarType();
    f = [dim, dtype](const Locals& l) -> Locals { return {at::cumprod(l[0], dim, dtype)}; };
  } else if (name == "aten::topk") {
    const int64_t k = a[1].toInt();
    dim = a[2].toInt();
    const bool largest = a[3].toBool(), sorted = a[4].toBool();
    Shape s = dt.layout().shape();
    const int64_t d = normalized_dim(dim, static_cast<int64_t>(s.size()),
                                     [&] { return describe_args(name, {arg_layout(self)}); });
    if (!s.empty()) s[d] = k;
    out_shape = s;
    f = [k, dim, largest, sorted](const Locals& l) -> Locals {
      auto [v, i] = at::topk(l[0], k, dim, largest, sorted);
      return {v, i};
    };
  } else {  // sort(self, dim, descending) / sort.stable(self, *, stable, dim, descending)
    const bool stable_overload = name == "aten::sort.stable";
    const std::optional<bool> stable =
        stable_overload ? (a[1].isNone() ? std::optional<bool>() : a[1].toBool()) : false;
    dim = a[stable_overload ? 2 : 1].toInt();
    const bool descending = a[stable_overload ? 3 : 2].toBool();
    f = [stable, dim, descending](const Locals& l) -> Locals {
      auto [v, i] = at::sort(l[0], stable, dim, descending);
      return {v, i};
    };
  }
  const Propagation p = propagate_along_dims(name, arg_layout(self), {dim}, false, out_shape);
  auto c = std::make_shared<Call>();
  c->name = name;
  c->ins = {self};
  c->in = {*p.inputs[0]};
  c->out = {p.output};
  c->diff_out = {true};
  if (name != "aten::cumprod") {
    c->out.push_back(p.output);
    c->diff_out.push_back(false);
  }
  c->ref = dt;
  c->f = std::move(f);
  return c;
}

std::shared_ptr<Call> call_of(const std::string& name, const std::vector<c10::IValue>& a) {
  if (name == "aten::gather" || name == "aten::index_select") return pick_call(name, a);
  if (name.rfind("aten::scatter", 0) == 0) return scatter_call(name, a);
  return along_call(name, a);
}

void check_fresh(const std::string& name, const std::vector<c10::IValue>& a) {
  check_no_stale_copy(name, a.data(), a.size());  // dispatch_args.h
}

/// The functional ops below autograd (inference, the out= kernels): the local op, wrapped.
void functional_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  check_fresh(name, a);
  const std::shared_ptr<Call> c = call_of(name, a);
  Locals outs;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    outs = c->f(locals_of(*c));
  }
  for (at::Tensor& t : wrap_all(*c, outs)) stack->push_back(std::move(t));
}

/// The functional ops at AutogradPrivateUse3: IndexFn records the local op's backward.
void autograd_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  if (!torch::autograd::GradMode::is_enabled()) {  // nothing to record: the local op only
    functional_kernel(op, stack);
    return;
  }
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  check_fresh(name, a);
  std::shared_ptr<Call> c = call_of(name, a);
  const variable_list ins = c->ins;
  // A TensorList (not the vector, which apply() would take as one non-tensor argument).
  for (at::Tensor& t : IndexFn::apply(at::TensorList(ins), std::move(c))) stack->push_back(std::move(t));
}

/// scatter_.src / scatter_.value / scatter_add_: into self's local, self's layout kept.
void inplace_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const std::vector<c10::IValue> a = pop_args(op, stack);
  check_fresh(name, a);
  const at::Tensor self = a[0].toTensor(), index = a[2].toTensor();
  const bool value = name == "aten::scatter_.value", add = name == "aten::scatter_add_";
  std::optional<ArgLayout> src;
  if (!value) src = arg_layout(a[3].toTensor());
  auto where = [&] { return describe_args(name, arg_layouts(a.data(), a.size())); };
  HYPER_CHECK_IMPLEMENTED(is_dtensor(self), where(),
                          ": an in-place op on a plain tensor with DTensor operands");
  const Propagation p = propagate_scatter(name, arg_layout(self), a[1].toInt(), arg_layout(index),
                                          src, add, true);
  check_inplace_reaches_base(self, where);  // dispatch_args.h
  const DTensor dt = as_dtensor(self);
  const int64_t d = normalized_dim(a[1].toInt(), self.dim(), where);
  const at::Tensor il = local_as(index, *p.inputs[1], dt);
  at::Tensor local = dt.to_local();
  {
    at::AutoDispatchBelowADInplaceOrView below;
    if (value) {
      local.scatter_(d, il, p.output.holds_partial_zeros(dt.mesh_index()) ? at::Scalar(0)
                                                                           : a[3].toScalar());
    } else {
      const at::Tensor sl = local_as(a[3].toTensor(), *p.inputs[2], dt);
      if (add)
        local.scatter_add_(d, il, sl);
      else
        local.scatter_(d, il, sl);
    }
  }
  bump_local_version(local);
  stack->push_back(self);
}

const char* const kFunctional[] = {"aten::gather",        "aten::index_select",
                                   "aten::scatter.src",   "aten::scatter.value",
                                   "aten::scatter_add",   "aten::sort",
                                   "aten::sort.stable",   "aten::topk",
                                   "aten::cumprod"};
const char* const kInplace[] = {"aten::scatter_.src", "aten::scatter_.value", "aten::scatter_add_"};

std::string short_name(const std::string& n) { return n.substr(n.find("::") + 2); }

}  // namespace

std::vector<std::string> index_kernel_names() {
  std::vector<std::string> v(std::begin(kFunctional), std::end(kFunctional));
  v.insert(v.end(), std::begin(kInplace), std::end(kInplace));
  return v;
}

void register_index_kernels(torch::Library& aten, torch::Library& autograd) {
  for (const char* n : kFunctional) {
    aten.impl(short_name(n).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&functional_kernel>>());
    autograd.impl(short_name(n).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&autograd_kernel>>());
  }
  for (const char* n : kInplace)
    aten.impl(short_name(n).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&inplace_kernel>>());
}

}  // namespace hyper::dispatch
