// The out= overloads of the DTensor dispatch key (see out_kernels.h): the functional overload
// through the dispatcher, then copy_ into each out.
#include "hyper/tensor/dispatch/out_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::dispatch {
namespace {

/// The functional overload of the out= op `s` among `overloads` (same base name): the same
/// non-out arguments (names and types, in order), no mutable argument, one return per out
/// argument. Empty when there is none.
std::string functional_of(const c10::FunctionSchema& s,
                          const std::vector<c10::OperatorName>& overloads) {
  std::vector<const c10::Argument*> ins;
  size_t nout = 0;
  for (const auto& a : s.arguments()) {
    if (!a.is_out()) {
      ins.push_back(&a);
      continue;
    }
    // Tensor-list outs (`unbind_copy.int_out`, `_foreach_*_out`): not served.
    if (a.type()->kind() != c10::TypeKind::TensorType) return "";
    ++nout;
  }
  if (nout == 0) return "";
  auto& d = c10::Dispatcher::singleton();
  for (const auto& on : overloads) {
    const auto h = d.findOp(on);
    if (!h || !h->hasSchema()) continue;
    const c10::FunctionSchema& c = h->schema();
    if (c.is_mutable() || c.arguments().size() != ins.size() || c.returns().size() != nout)
      continue;
    bool same = true;
    for (size_t i = 0; i < ins.size() && same; ++i)
      same = c.arguments()[i].name() == ins[i]->name() && *c.arguments()[i].type() == *ins[i]->type();
    if (same) return full_name_of(on);
  }
  return "";
}

/// out= op name -> its functional overload's name (written once, by out_kernel_names under
/// register_dtensor_kernels' one-time initialisation; read-only afterwards).
std::map<std::string, std::string>& functional_names() {
  static std::map<std::string, std::string> m;
  return m;
}

/// In-place ops served as their functional op then copy_ into self (argument 0).
const std::map<std::string, std::string>& inplace_functionals() {
  static const std::map<std::string, std::string> m = {{"aten::addmm_", "aten::addmm"},
                                                       {"aten::baddbmm_", "aten::baddbmm"}};
  return m;
}

c10::OperatorHandle functional_handle(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const void*, c10::OperatorHandle> cache;
  const void* key = &op.schema();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const std::string name = op_name_of(op);
  const auto f = functional_names().find(name);
  const auto g = inplace_functionals().find(name);
  HYPER_CHECK_INTERNAL(f != functional_names().end() || g != inplace_functionals().end(), name,
                       ": no functional overload recorded");
  const std::string& fn = f != functional_names().end() ? f->second : g->second;
  return cache.emplace(key, operator_handle(fn)).first->second;
}

/// The base of a view (whose version counter the view shares), or the tensor itself.
c10::TensorImpl* root_of(const at::Tensor& t) {
  return t.is_view() ? t._base().unsafeGetTensorImpl() : t.unsafeGetTensorImpl();
}

/// A DTensor out's CopiedView record (dtensor_impl.h), or null.
CopiedView* copied_out(const at::Tensor& t) {
  return is_dtensor(t) ? static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl())->copied().get()
                       : nullptr;
}

/// The local of the tensor at the top of a copy's chain (the base the write-backs reach).
at::Tensor top_target(const CopiedView* c) {
  while (c->parent) c = c->parent.get();
  return c->target;
}

/// Refuses, before anything is written, outs that could overwrite each other's indices unseen:
/// two copied views (slices of a sharded dim) of one base unless they were taken from one
/// tensor (one write-back log) and hold disjoint indices (overlapping ones: ValueError, as ATen
/// refuses overlapping outs; taken through different views: their logs cannot see each other),
/// and a copied view beside an out aliasing the base's local (that write is in no log).
void check_outs_of_one_base(const std::vector<at::Tensor>& outs,
                            const std::function<std::string()>& where) {
  if (outs.size() < 2) return;
  for (size_t i = 0; i < outs.size(); ++i) {
    const CopiedView* ci = copied_out(outs[i]);
    if (ci == nullptr || !ci->reaches_base()) continue;  // (refused by its write, first)
    const at::Tensor top = top_target(ci);
    for (size_t j = 0; j < outs.size(); ++j) {
      if (i == j || !is_dtensor(outs[j])) continue;
      const CopiedView* cj = copied_out(outs[j]);
      if (cj == nullptr || !cj->reaches_base()) {
        HYPER_CHECK_IMPLEMENTED(!dtensor_of(outs[j]).to_local().is_alias_of(top), where(), ": out ",
                                i, " is a view of a DTensor whose local tensor is a copy (a slice "
                                "of a sharded dim) and out ", j, " a view of the same base that "
                                "aliases its local; writing both is not implemented (pass outs of "
                                "their own and copy them)");
        continue;
      }
      if (!top_target(cj).is_alias_of(top)) continue;
      HYPER_CHECK_IMPLEMENTED(ci->family == cj->family, where(), ": outs ", i, " and ", j,
                              " are copies of one base taken through different views (slices of "
                              "sharded dims of different tensors); writing both is not "
                              "implemented (pass outs of their own and copy them)");
      HYPER_CHECK_VALUE(ci->disjoint(cj->region()), where(), ": outs ", i, " and ", j,
                        " are views of overlapping indices of one tensor (dim ", ci->dim,
                        "); outs must not overlap");
    }
  }
}

/// The out= op's ADInplaceOrView kernel bumps each out's version counter when this kernel
/// returns: twice for a base two of whose views are outs. An out whose local is a copy written
/// back into its base (a slice of a sharded dim, CopiedView) must then be current after as many
/// bumps as outs share its base's counter (views of one base share it), or it reads as stale.
void expect_bumps_of_shared_bases(const std::vector<at::Tensor>& outs) {
  if (outs.size() < 2) return;
  for (const at::Tensor& o : outs) {
    CopiedView* c = copied_out(o);
    if (c == nullptr || !c->reaches_base()) continue;
    int64_t sharing = 0;
    for (const at::Tensor& p : outs) sharing += root_of(p) == root_of(o) ? 1 : 0;
    c->expect_bumps(sharing);
  }
}

void out_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const auto& args = op.schema().arguments();
  const bool inplace = inplace_functionals().count(name) > 0;
  const size_t n = args.size();
  const size_t base = stack->size() - n;
  auto arg = [&](size_t i) -> c10::IValue& { return (*stack)[base + i]; };
  check_no_stale_copy(name, &arg(0), n);  // dispatch_args.h
  auto where = [&] { return describe_args(name, arg_layouts(&arg(0), n)); };  // dispatch_args.h

  std::vector<at::Tensor> outs;
  torch::jit::Stack fs;
  for (size_t i = 0; i < n; ++i) {
    if (inplace && i == 0) {
      HYPER_CHECK_IMPLEMENTED(is_dtensor(arg(0).toTensor()), where(), ": in-place op on a plain "
                              "tensor with a DTensor operand");
      outs.push_back(arg(0).toTensor());
    }
    if (args[i].is_out()) {
      const at::Tensor o = arg(i).toTensor();
      HYPER_CHECK_IMPLEMENTED(is_dtensor(o), where(), ": out argument '", args[i].name(),
                              "' is a plain tensor beside DTensor inputs (ATen would write the "
                              "rank's local result into it, resizing it to the local shape); pass "
                              "a DTensor out of the result's global shape, or call the "
                              "functional op");
      outs.push_back(o);
    } else {
      fs.push_back(arg(i));
    }
  }
  // The result first (out may alias an input), through the dispatcher (below autograd, as
  // the out= op's autograd kernel called this one: out= ops are not differentiable).
  functional_handle(op).callBoxed(&fs);
  HYPER_CHECK_INTERNAL(fs.size() == outs.size(), name, ": ", fs.size(), " results for ",
                       outs.size(), " out arguments");
  // An op with an out_int32 argument (searchsorted, bucketize): ATen requires the index dtype
  // it names (Int or Long), not any dtype the result casts to.
  std::optional<bool> out_int32;
  for (size_t i = 0; i < n; ++i)
    if (args[i].name() == "out_int32") out_int32 = arg(i).toBool();
  if (out_int32) {
    const at::ScalarType want = *out_int32 ? at::kInt : at::kLong;
    HYPER_CHECK_VALUE(outs.size() == 1 && outs[0].scalar_type() == want, where(), ": ",
                      short_name(name), " out's dtype must be ", c10::toString(want),
                      " (out_int32 is ", *out_int32 ? "true" : "false", "), got ",
                      c10::toString(outs.empty() ? want : outs[0].scalar_type()));
  }
  check_outs_of_one_base(outs, where);
  for (size_t i = 0; i < outs.size(); ++i) {
    const at::Tensor r = fs[i].toTensor();
    HYPER_CHECK_IMPLEMENTED(outs[i].sizes() == r.sizes(), where(), ": out ", i, " has global shape ",
                            shape_to_string(outs[i].sizes().vec()), " but the result's is ",
                            shape_to_string(r.sizes().vec()), " (ATen would resize out; resizing "
                            "a DTensor is not implemented: pass an out of the result's shape)");
    HYPER_CHECK_VALUE(at::canCast(r.scalar_type(), outs[i].scalar_type()), where(), ": result type ",
                      c10::toString(r.scalar_type()), " can't be cast to out ", i, "'s dtype ",
                      c10::toString(outs[i].scalar_type()));
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    at::Tensor r = fs[i].toTensor();
    if (is_dtensor(r)) {
      // copy_ does not change a Partial's reduce op (P(max) result into a P(sum) out): such
      // mesh dims of the result are reduced to Replicate first.
      const DTensor d = dtensor_of(r);
      Placements want = d.placements();
      const Placements& have = dtensor_of(outs[i]).placements();
      bool change = false;
      for (size_t m = 0; m < want.size(); ++m)
        if (want[m].is_partial() && have[m].is_partial() && want[m].reduce_op() != have[m].reduce_op()) {
          want[m] = Replicate();
          change = true;
        }
      if (change) r = wrap_dtensor(d.redistribute(d.device_mesh(), want));
    }
    // (An earlier out's write-back into a base this one shares is in the base's write-back
    // log, so this one, of other indices (check_outs_of_one_base), stays current.)
    outs[i].copy_(r);
  }
  expect_bumps_of_shared_bases(outs);
  torch::jit::drop(*stack, n);
  for (const at::Tensor& o : outs) stack->push_back(o);
}

}  // namespace

std::vector<std::string> out_kernel_names(const std::vector<std::string>& served) {
  const std::set<std::string> ok(served.begin(), served.end());
  auto& d = c10::Dispatcher::singleton();
  std::map<std::string, std::vector<c10::OperatorName>> by_name;
  for (const auto& on : d.getAllOpNames())
    if (on.name.rfind("aten::", 0) == 0) by_name[on.name].push_back(on);
  std::vector<std::string> names;
  auto& fmap = functional_names();
  for (const auto& [base, overloads] : by_name)
    for (const auto& on : overloads) {
      const std::string full = full_name_of(on);
      if (full == "aten::maximum.out") continue;  // its own kernel (fallback.cc)
      const auto h = d.findOp(on);
      if (!h || !h->hasSchema()) continue;
      // A composite out= op decomposes into ops served on their own.
      if (h->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
      const std::string f = functional_of(h->schema(), overloads);
      if (f.empty() || !ok.count(f)) continue;
      fmap[full] = f;
      names.push_back(full);
    }
  for (const auto& [n, f] : inplace_functionals())
    if (ok.count(f)) names.push_back(n);
  return names;
}

void register_out_kernels(torch::Library& aten, const std::vector<std::string>& names) {
  for (const auto& n : names)
    aten.impl(short_name(n).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&at_kernel_boundary<&out_kernel>>());
}

}  // namespace hyper::dispatch
