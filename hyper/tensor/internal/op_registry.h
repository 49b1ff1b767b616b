#pragma once
/// \file internal/op_registry.h
/// The one way an op gets a kernel of its own (docs/architecture.md "Adding an op"): one line in
/// its family's table, at the end of the family's `*_kernels.cc`, naming the op once:
///
///   const KernelFamily& dot_kernels() {
///     static const KernelFamily f{"dot", /*serves_out=*/true, {
///         HYPER_KERNEL("aten::dot", KernelKey::kDTensor, dot),
///         HYPER_KERNEL("aten::vdot", KernelKey::kDTensor, vdot),
///     }};
///     return f;
///   }
///
/// The table registers each kernel wrapped in the shared prologue, so no kernel can forget it:
/// an argument that is a stale copied view is refused (check_no_stale_copy), and a c10::Error of
/// the local ATen op becomes hyper's type naming the op and every tensor argument's layout
/// (rethrow_local_error). The fallback's registration (fallback.cc) reads the names from the
/// tables: an op served by a family leaves the generic fallback, and a family with `serves_out`
/// also gets its ops' out= overloads (out_kernels.h). Ops without a kernel of their own need only
/// a rule (sharding_rule.cc and the `*_rules.cc` files): the fallback runs them.
///
/// Kinds of kernel:
/// - HYPER_KERNEL(op, key, fn): a typed kernel (its schema's C++ signature, as TORCH_FN takes).
/// - HYPER_BOXED_KERNEL(op, key, fn): `void fn(const c10::OperatorHandle&, torch::jit::Stack*)`.
/// - HYPER_BOXED_KERNEL_PAIR(op, below, above): boxed kernels at kDTensor and kAutograd.
/// - HYPER_ARGS_KERNEL(op, key, fn): `std::vector<c10::IValue> fn(const std::string& name,
///   const std::vector<c10::IValue>& args)`: the arguments popped, the results pushed.
/// - HYPER_LOCAL_OP_KERNEL(op, fn): `std::shared_ptr<LocalOp> fn(const c10::OperatorHandle&,
///   const std::string& name, const std::vector<c10::IValue>& args)` builds the op's local op
///   (dispatch/local_op.h), run below autograd and, at the autograd key, with its backward.
/// Ops of a family that differ (gather / index_select, the random draws) name their variant as a
/// template argument on their line, `fill_kernel<normal_draw<true>>`: no kernel tests its op's name.
/// `key`: KernelKey::kDTensor (below autograd: the op's values), kAutograd (above it: a
/// composite whose ops autograd records), or kBoth (a composite replaced at both keys).

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/internal/dispatch_args.h"

namespace hyper::dispatch {

enum class KernelKey { kDTensor, kAutograd, kBoth };

/// One op's kernel: the op's name (written once), the key, and how to register it.
struct OpKernel {
  const char* name;  ///< "aten::max.dim"
  KernelKey key;
  /// Registers the guarded kernel in `lib` under `short_name` ("max.dim").
  void (*add)(torch::Library& lib, const char* short_name);
};

/// A family's kernels (one table per `*_kernels.cc`).
struct KernelFamily {
  const char* family;  ///< for messages
  /// Whether the out= overloads of the family's ops are served too (computed, then copied into
  /// `out`: out_kernels.h); families whose outputs are lists or in-place ops say no.
  bool serves_out;
  std::vector<OpKernel> kernels;

  /// The ops served (each once, in table order).
  std::vector<std::string> names() const;
  /// Registers every kernel: kDTensor ones in `dtensor` (PrivateUse3), kAutograd ones in
  /// `autograd` (AutogradPrivateUse3), kBoth in both.
  void add_to(torch::Library& dtensor, torch::Library& autograd) const;
};

inline std::vector<std::string> KernelFamily::names() const {
  std::vector<std::string> v;
  for (const OpKernel& k : kernels)
    if (std::find(v.begin(), v.end(), k.name) == v.end()) v.emplace_back(k.name);
  return v;
}

inline void KernelFamily::add_to(torch::Library& dtensor, torch::Library& autograd) const {
  for (const OpKernel& k : kernels) {
    const std::string s = short_name(k.name);
    if (k.key != KernelKey::kAutograd) k.add(dtensor, s.c_str());
    if (k.key != KernelKey::kDTensor) k.add(autograd, s.c_str());
  }
}

namespace registry_internal {

template <class F>
void visit_tensor(const F& f, const at::Tensor& t) {
  if (t.defined()) f(t);
}
template <class F>
void visit_tensor(const F& f, const std::optional<at::Tensor>& t) {
  if (t && t->defined()) f(*t);
}
template <class F>
void visit_tensor(const F& f, at::TensorList l) {
  for (const at::Tensor& t : l) visit_tensor(f, t);
}
template <class F>
void visit_tensor(const F& f, const at::ITensorListRef& l) {
  for (const at::Tensor& t : l) visit_tensor(f, t);
}
template <class F>
void visit_tensor(const F& f, const c10::List<std::optional<at::Tensor>>& l) {
  for (const std::optional<at::Tensor> t : l) visit_tensor(f, t);
}
template <class F, class T>
void visit_tensor(const F&, const T&) {}

/// The tensor arguments of a typed call as IValues (for the prologue's checks and messages).
template <class... A>
std::vector<c10::IValue> tensor_args(const A&... a) {
  std::vector<c10::IValue> v;
  auto note = [&v](const at::Tensor& t) { v.emplace_back(t); };
  (visit_tensor(note, a), ...);
  return v;
}

/// Whether any tensor argument is a stale copied view (the cheap scan before the message).
template <class... A>
bool any_stale(const A&... a) {
  bool stale = false;
  auto note = [&stale](const at::Tensor& t) { stale = stale || is_stale_copy(t); };
  (visit_tensor(note, a), ...);
  return stale;
}

}  // namespace registry_internal

/// A typed kernel `F` inside the shared prologue. `name` is set when the kernel is registered
/// (HYPER_KERNEL); a function registered for several ops names the last.
template <auto F>
struct Guarded;
template <class R, class... A, R (*F)(A...)>
struct Guarded<F> {
  static inline const char* name = "aten op";
  static R call(A... a) {
    const KernelBoundary boundary;
    try {
      if (registry_internal::any_stale(a...)) {
        const std::vector<c10::IValue> ts = registry_internal::tensor_args(a...);
        check_no_stale_copy(name, ts.data(), ts.size());
      }
      try {
        return F(std::forward<A>(a)...);
      } catch (const c10::Error& e) {
        rethrow_local_error(e, name, registry_internal::tensor_args(a...));
      }
    } catch (...) {
      boundary.rethrow();
    }
  }
};

/// `K` after the stale-copy check of its arguments.
template <void (*K)(const c10::OperatorHandle&, torch::jit::Stack*)>
void stale_checked(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t n = op.schema().arguments().size();
  check_no_stale_copy(op_name_of(op), &*(stack->end() - static_cast<std::ptrdiff_t>(n)), n);
  K(op, stack);
}

/// A boxed kernel `K` inside the shared prologue (its op's name read from the handle).
template <void (*K)(const c10::OperatorHandle&, torch::jit::Stack*)>
void guarded_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  mapping_local_errors<&stale_checked<K>>(op, stack);
}

/// An args kernel (HYPER_ARGS_KERNEL) as a boxed one.
template <std::vector<c10::IValue> (*F)(const std::string&, const std::vector<c10::IValue>&)>
void args_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::vector<c10::IValue> a = pop_args(op, stack);
  for (c10::IValue& v : F(op_name_of(op), a)) stack->push_back(std::move(v));
}

/// What a LocalOp kernel (HYPER_LOCAL_OP_KERNEL) computes: the op's local op from its call.
using LocalOpOf = std::shared_ptr<LocalOp> (*)(const c10::OperatorHandle& op, const std::string& name,
                                               const std::vector<c10::IValue>& args);

/// The arguments popped, `F`'s local op run (`record`: at the autograd key, its backward
/// recorded; else below autograd: inference, the out= kernels), the results pushed.
template <LocalOpOf F, bool record>
void local_op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::vector<c10::IValue> a = pop_args(op, stack);
  for (at::Tensor& t : run_local_op(F(op, op_name_of(op), a), record)) stack->push_back(std::move(t));
}

/// The OpKernel of a boxed kernel `K` (HYPER_BOXED_KERNEL), for tables built from data.
template <void (*K)(const c10::OperatorHandle&, torch::jit::Stack*)>
OpKernel boxed_kernel(const char* name, KernelKey key) {
  return {name, key, [](torch::Library& lib, const char* short_name) {
            lib.impl(short_name, torch::CppFunction::makeFromBoxedFunction<&guarded_boxed<K>>());
          }};
}

}  // namespace hyper::dispatch

#define HYPER_KERNEL(op, key, ...)                                                      \
  ::hyper::dispatch::OpKernel {                                                         \
    op, key, [](torch::Library& lib, const char* short_name) {                          \
      ::hyper::dispatch::Guarded<&__VA_ARGS__>::name = op;                              \
      lib.impl(short_name, TORCH_FN((::hyper::dispatch::Guarded<&__VA_ARGS__>::call))); \
    }                                                                                   \
  }

#define HYPER_BOXED_KERNEL(op, key, ...) ::hyper::dispatch::boxed_kernel<&__VA_ARGS__>(op, key)

#define HYPER_ARGS_KERNEL(op, key, ...) \
  ::hyper::dispatch::boxed_kernel<&::hyper::dispatch::args_kernel<&__VA_ARGS__>>(op, key)

/// One op with a boxed kernel at each key: `below` (kDTensor) and `above` (kAutograd).
#define HYPER_BOXED_KERNEL_PAIR(op, below, above)                                       \
  HYPER_BOXED_KERNEL(op, ::hyper::dispatch::KernelKey::kDTensor, below),                \
      HYPER_BOXED_KERNEL(op, ::hyper::dispatch::KernelKey::kAutograd, above)

/// One op computed as a local op (local_op_kernel) at both keys.
#define HYPER_LOCAL_OP_KERNEL(op, ...)                                                        \
  ::hyper::dispatch::boxed_kernel<&::hyper::dispatch::local_op_kernel<&__VA_ARGS__, false>>( \
      op, ::hyper::dispatch::KernelKey::kDTensor),                                            \
      ::hyper::dispatch::boxed_kernel<&::hyper::dispatch::local_op_kernel<&__VA_ARGS__, true>>( \
          op, ::hyper::dispatch::KernelKey::kAutograd)
