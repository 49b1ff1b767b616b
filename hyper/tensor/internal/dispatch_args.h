#pragma once
/// \file internal/dispatch_args.h
/// What the boxed fallback (fallback.cc) and the per-op kernels (nn_kernels.cc) read off an
/// operator call: its name as the rules spell it and each tensor argument's ArgLayout.

#include <ATen/ATen.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>

#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/c10_errors.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/ragged_operand.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"

namespace hyper::dispatch {

/// The hook set_kernel_error_hook installed (dtensor_tensor.h), or null.
KernelErrorHook kernel_error_hook();

/// How many of hyper's kernels run on this thread, nested: the outermost was entered from
/// outside them (the program's op call, autograd's engine).
inline thread_local int g_kernel_depth = 0;

/// One kernel's run, counted in g_kernel_depth. Every registered kernel (and every backward of
/// hyper's autograd functions: at_boundary) runs inside one, so an error leaving the outermost
/// goes through the kernel error hook exactly once.
class KernelBoundary {
 public:
  KernelBoundary() : outermost_(g_kernel_depth++ == 0) {}
  ~KernelBoundary() { --g_kernel_depth; }
  KernelBoundary(const KernelBoundary&) = delete;
  KernelBoundary& operator=(const KernelBoundary&) = delete;
  /// Inside a catch block: the hook's replacement (outermost kernel only), else the current
  /// exception, rethrown.
  [[noreturn]] void rethrow() const {
    if (outermost_)
      if (const KernelErrorHook hook = kernel_error_hook()) hook(std::current_exception());
    throw;
  }

 private:
  const bool outermost_;
};

/// `f()` as a kernel run: an error leaving it goes through the kernel error hook when it is the
/// outermost. hyper's autograd backward functions run their bodies so (autograd's engine calls
/// them from outside any kernel), so a binding sees their errors as it sees a kernel's.
template <class F>
auto at_boundary(F&& f) -> decltype(f()) {
  const KernelBoundary boundary;
  try {
    return f();
  } catch (...) {
    boundary.rethrow();
  }
}

/// "aten::add.Tensor": the schema name, then "." and the overload name when there is one.
inline std::string full_name_of(const c10::OperatorName& on) {
  return on.overload_name.empty() ? on.name : on.name + "." + on.overload_name;
}
inline std::string op_name_of(const c10::OperatorHandle& op) {
  return full_name_of(op.operator_name());
}

/// The OperatorName that full_name_of spells `full`: "aten::add.Tensor" -> {"aten::add",
/// "Tensor"}, "aten::mm" -> {"aten::mm", ""}.
inline c10::OperatorName operator_name_of(const std::string& full) {
  const size_t dot = full.find('.');
  if (dot == std::string::npos) return {full, ""};
  return {full.substr(0, dot), full.substr(dot + 1)};
}

/// The registered operator `full` ("aten::add.Tensor"). Throws an internal error when there is
/// none (hyper names only ATen's own operators).
inline c10::OperatorHandle operator_handle(const std::string& full) {
  const auto h = c10::Dispatcher::singleton().findSchema(operator_name_of(full));
  HYPER_CHECK_INTERNAL(h.has_value(), "hyper dispatch: no ATen operator ", full);
  return *h;
}

/// "add.Tensor" of "aten::add.Tensor": the name a torch::Library of "aten" registers.
inline std::string short_name(const std::string& full) { return full.substr(full.find("::") + 2); }

/// A DTensor tensor's layout, or a plain tensor's shape.
inline ArgLayout arg_layout(const at::Tensor& t) {
  if (is_dtensor(t)) return ArgLayout::of(dtensor_of(t).layout());
  return ArgLayout::plain(t.sizes().vec());
}

/// A plain operand (Replicate: the same global value on every rank) as rank `idx`'s local
/// tensor of `target` (a non-ragged layout of its shape), with no communication: cut to the
/// rank's box, and zeros where `target` is Partial and the rank is off coordinate 0 (a wrapped
/// number stays one, so ATen's type promotion treats it as a scalar). A ragged `target` (the
/// output's layout beside a RaggedShard operand): `t` broadcast to it and cut to the rank's
/// flat interval (ragged_operand.h).
inline at::Tensor plain_local(const at::Tensor& t, const Layout& target, int64_t idx) {
  if (target.is_ragged()) return ragged_cut(t, target, idx);
  const Box b = target.local_box(idx);
  at::Tensor r = t;
  for (int64_t d = 0; d < b.rank(); ++d)
    if (b.sizes[d] != t.size(d)) r = r.narrow(d, b.offsets[d], b.sizes[d]);
  if (!target.holds_partial_zeros(idx)) return r;
  at::Tensor z = at::zeros_like(r);
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) z.unsafeGetTensorImpl()->set_wrapped_number(true);
  return z;
}

/// arg_layout with the element size (rules that weigh operands of different dtypes: gather's
/// self against its index, convolution's input against its weight).
inline ArgLayout sized(const at::Tensor& t) {
  ArgLayout a = arg_layout(t);
  a.element_size = static_cast<int64_t>(t.element_size());
  return a;
}

/// A tensor's global value as a plain tensor, the same on every rank: a DTensor's full tensor
/// (a collective every rank runs; a Replicate one's local tensor, no collective), a plain
/// tensor itself.
inline at::Tensor whole(const at::Tensor& t) {
  if (!is_dtensor(t)) return t;
  const DTensor& d = dtensor_of(t);
  return d.layout().is_replicated() ? d.to_local() : d.full_tensor();
}

/// A defined tensor argument, or nullopt (None or an undefined tensor).
inline std::optional<at::Tensor> opt_tensor(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  at::Tensor t = v.toTensor();
  if (!t.defined()) return std::nullopt;
  return t;
}

/// The local tensor of `t` laid out as `target`, for a kernel that only reads it: a DTensor
/// tensor's local redistributed (a Partial's reduction remembered on the tensor,
/// DTensorImpl::local_as), or a plain `t` (Replicate) cut locally for `ref`'s rank.
inline at::Tensor local_as(const at::Tensor& t, const Layout& target, const DTensor& ref) {
  if (!is_dtensor(t)) return plain_local(t, target, ref.mesh_index());
  return static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl())->local_as(target, true);
}

/// The first DTensor among `ts` (a kernel runs because one of them is).
inline DTensor first_dtensor(std::initializer_list<at::Tensor> ts) {
  for (const at::Tensor& t : ts)
    if (t.defined() && is_dtensor(t)) return dtensor_of(t);
  HYPER_CHECK_INTERNAL(false, "no DTensor operand");
}

/// `local` wrapped as a DTensor tensor of `layout` on `ref`'s mesh (and plan cache).
inline at::Tensor wrap(const at::Tensor& local, const DTensor& ref, const Layout& layout) {
  return wrap_dtensor(DTensor::from_local_with_layout(local, ref.device_mesh(), layout, ref.plan_cache()));
}

/// The layouts of every tensor among args[0, n) and of every tensor of a tensor list, in
/// order (undefined tensors skipped): what an error message names.
inline std::vector<ArgLayout> arg_layouts(const c10::IValue* args, size_t n) {
  std::vector<ArgLayout> all;
  for (size_t k = 0; k < n; ++k) {
    if (args[k].isTensor() && args[k].toTensor().defined()) all.push_back(arg_layout(args[k].toTensor()));
    if (args[k].isTensorList())
      for (const at::Tensor& t : args[k].toTensorVector())
        if (t.defined()) all.push_back(arg_layout(t));
  }
  return all;
}

/// Whether `t` is a view of a DTensor whose local tensor is a copy, read after its base was
/// written (DTensorImpl's CopiedView::stale).
inline bool is_stale_copy(const at::Tensor& t) {
  if (!t.defined() || !is_dtensor(t)) return false;
  const auto& c = static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl())->copied();
  return c && c->stale();
}

/// Refuses (NotImplementedError naming the op and every tensor argument's layout) an argument
/// among args[0, n) — a tensor, or a tensor of a list — that is a view of a DTensor whose local
/// tensor is a copy, read after its base was written: plain torch's view would see the write,
/// the copy does not. The same on every rank (the version counter is the wrapper's).
inline void check_no_stale_copy(const std::string& name, const c10::IValue* args, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    bool bad = args[i].isTensor() && is_stale_copy(args[i].toTensor());
    if (args[i].isTensorList())
      for (const at::Tensor& t : args[i].toTensorVector()) bad = bad || is_stale_copy(t);
    if (!bad) continue;
    throw NotImplementedError(internal::str_cat(
        describe_args(name, arg_layouts(args, n)), ": argument ", i, " is a view of a DTensor whose local tensor is "
        "a copy (the view redistributed its input or copied a non-row-major local), and its base "
        "was written since the view was taken, so the copy is stale; take the view again after "
        "the write (or clone() it before)"));
  }
}

/// Refuses (NotImplementedError, `where` in front) an in-place op on `self_wrapper` when it is
/// a view of a DTensor whose local tensor is a copy that the write cannot reach the base
/// through (DTensorImpl's CopiedView: the view merged a sharded inner dim or copied a
/// non-row-major local; a slice or select of a sharded dim writes back, write_through()).
/// `where()`: the op and its layouts, built only for the error.
template <class Where>
void check_inplace_reaches_base(const at::Tensor& self_wrapper, const Where& where) {
  if (!self_wrapper.defined() || !is_dtensor(self_wrapper)) return;
  // Checked for non-views too: detach() of a copied view, inference-mode views, `t.data()`.
  const auto* impl = static_cast<const DTensorImpl*>(self_wrapper.unsafeGetTensorImpl());
  const auto& c = impl->copied();
  const at::Tensor base = self_wrapper.is_view() ? at::Tensor(at::TensorBase(self_wrapper._base()))
                                                 : at::Tensor();
  const bool dbase = base.defined() && is_dtensor(base);
  if (!c && !dbase) return;
  HYPER_CHECK_IMPLEMENTED(
      c ? c->reaches_base() : dtensor_of(self_wrapper).to_local().is_alias_of(dtensor_of(base).to_local()),
      where(),
      ": in-place op on a view of a DTensor whose local tensor is a copy (the view "
      "redistributed its input other than by slicing a sharded dim, or copied a non-row-major "
      "local), so the write would not reach the base",
      dbase ? " " + dtensor_of(base).layout().to_string() : std::string(), " (clone() the view first)");
}

/// After an in-place op wrote `self_wrapper`'s local: when it is a view whose local is a
/// writable copy (a slice or select of a sharded dim, DTensorImpl's CopiedView), each rank's
/// part of the copy is written into the input's local, and on up to the base (no
/// communication); the copies of the chain are then current (CopiedView::pending_bumps: the
/// in-place op's ADInplaceOrView kernel bumps the base's counter when it returns).
inline void write_through(const at::Tensor& self_wrapper) {
  if (!self_wrapper.defined() || !is_dtensor(self_wrapper)) return;
  const auto& c = static_cast<const DTensorImpl*>(self_wrapper.unsafeGetTensorImpl())->copied();
  if (c && c->reaches_base())
    c->write_back(c->counter.enabled()
                      ? std::optional<int64_t>(static_cast<int64_t>(c->counter.current_version()))
                      : std::nullopt);
}

/// A boxed kernel's arguments, popped off `stack` (the op's schema says how many).
inline std::vector<c10::IValue> pop_args(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  std::vector<c10::IValue> a(stack->end() - static_cast<std::ptrdiff_t>(n), stack->end());
  torch::jit::drop(*stack, n);
  return a;
}

/// A c10::Error of a rank's local ATen op (ATen refusing the local tensors: a dtype, an
/// index, a value) as hyper's type (c10_errors.h: c10's NotImplementedError ->
/// NotImplementedError, Index/Value/TypeError and any other -> ValueError, out-of-memory
/// unchanged), prefixed with `where` (the op and every tensor argument's global layout) and
/// the rank: a caller of `at::` ops on DTensors catches what hyper's own refusals throw, and
/// the local sizes in ATen's message are explained.
[[noreturn]] inline void rethrow_local_error(const c10::Error& e, const std::string& where,
                                             int rank) {
  rethrow_c10_error<ValueError>(
      e, internal::str_cat(where, ": the local op on rank ", rank, "'s shards failed"));
}

/// rethrow_local_error() for the call of `name` with `args` (its arguments, or only its tensor
/// arguments): every tensor and tensor-list element is described, the rank is the first
/// DTensor's.
[[noreturn]] inline void rethrow_local_error(const c10::Error& e, const std::string& name,
                                             c10::ArrayRef<c10::IValue> args) {
  int rank = -1;
  auto note = [&](const at::Tensor& t) {
    if (rank < 0 && t.defined() && is_dtensor(t)) rank = dtensor_of(t).device_mesh().get_rank();
  };
  for (const c10::IValue& v : args) {
    if (v.isTensor()) note(v.toTensor());
    else if (v.isTensorList()) for (const at::Tensor& t : v.toTensorVector()) note(t);
  }
  rethrow_local_error(e, describe_args(name, arg_layouts(args.data(), args.size())), rank);
}

/// rethrow_local_error() for a boxed call: `args` are the call's arguments (saved before the
/// kernel consumed them).
[[noreturn]] inline void rethrow_local_error(const c10::Error& e, const c10::OperatorHandle& op,
                                             c10::ArrayRef<c10::IValue> args) {
  rethrow_local_error(e, op_name_of(op), args);
}

/// A boxed kernel whose c10::Errors become hyper's (rethrow_local_error). The arguments are
/// kept (a reference each, no copy of data) until the kernel returns, for the message; hyper's
/// own errors, and those of nested DTensor calls (mapped where they ran), pass unchanged.
template <void (*Kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
void mapping_local_errors(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const KernelBoundary boundary;
  const auto n = static_cast<std::ptrdiff_t>(op.schema().arguments().size());
  const c10::SmallVector<c10::IValue, 8> args(stack->end() - n, stack->end());
  try {
    try {
      Kernel(op, stack);
    } catch (const c10::Error& e) {
      rethrow_local_error(e, op, args);
    }
  } catch (...) {
    boundary.rethrow();
  }
}

/// A boxed kernel counted as one of hyper's kernels (KernelBoundary), errors unchanged.
template <void (*Kernel)(const c10::OperatorHandle&, torch::jit::Stack*)>
void at_kernel_boundary(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const KernelBoundary boundary;
  try {
    Kernel(op, stack);
  } catch (...) {
    boundary.rethrow();
  }
}

/// A Scalar as the 0-dim "wrapped number" tensor ATen makes for `tensor op scalar`.
inline at::Tensor wrapped(const at::Scalar& s) {
  at::Tensor t = c10::scalar_to_tensor(s);
  t.unsafeGetTensorImpl()->set_wrapped_number(true);
  return t;
}

/// Refuses (NotImplementedError) a `device` argument other than `from`, the DTensor's device
/// (its devices are its mesh's); "cpu" and "cpu:0" are the same device. `where()` names the op
/// and layouts; it is called only on a refusal.
template <class Where>
void check_same_device(const Where& where, const c10::Device& from, const c10::IValue& device) {
  if (device.isNone()) return;
  const c10::Device to = device.toDevice();
  const bool same = to.type() == from.type() &&
                    (!to.has_index() || !from.has_index() || to.index() == from.index());
  HYPER_CHECK_IMPLEMENTED(same, where(), ": moving a DTensor from device ", from.str(),
                          " to device ", to.str(), " is not implemented (its devices are those "
                          "of its mesh)");
}

/// Refuses (NotImplementedError) a `layout` argument other than strided (a DTensor's local
/// tensors are strided). `where()` names the op and layouts; called only on a refusal.
template <class Where>
void check_strided(const Where& where, const c10::IValue& layout) {
  HYPER_CHECK_IMPLEMENTED(layout.isNone() || layout.toLayout() == at::kStrided, where(),
                          ": layout ", layout.isNone() ? std::string() : c10::str(layout.toLayout()),
                          " is not implemented for a DTensor (strided only)");
}

/// `<name>(<layouts of the defined tensors among ts>)`: what an error of a kernel with typed
/// arguments names (describe_args of their layouts; absent / undefined tensors skipped).
inline std::string describe_tensors(const std::string& name,
                                    std::initializer_list<std::optional<at::Tensor>> ts) {
  std::vector<ArgLayout> v;
  for (const auto& t : ts)
    if (t && t->defined()) v.push_back(arg_layout(*t));
  return describe_args(name, v);
}

}  // namespace hyper::dispatch
