#pragma once
/// \file hookable.h
/// hyper::nn::HookableModule — forward pre/post hooks for LibTorch C++ modules — and
/// hyper::nn::Hooked<Impl>, which gives any torch::nn module (whose forward is not
/// overloaded) those hooks while staying a drop-in replacement for it.
///
/// LibTorch's C++ modules have no forward hooks and a parent's forward calls its members
/// directly, so a tensor-parallel layer cannot intercept a plain torch::nn::Linear. A model
/// written with hookable modules (hyper::nn::Linear, Embedding, LayerNorm, Hooked<...>)
/// can be parallelized the PyTorch way: a style finds the module by name in
/// `named_modules()`, `dynamic_pointer_cast`s it to HookableModule, registers hooks that
/// redistribute inputs/outputs and replaces the parameters in place by local shards.
///
///   hyper::nn::Hooked<torch::nn::Conv1dImpl> conv(torch::nn::Conv1dOptions(3, 8, 2));
///   auto h = conv->register_forward_hook(
///       [](torch::nn::Module&, const hyper::nn::Tensors&, const at::Tensor& out)
///           -> std::optional<at::Tensor> { return out * 2; });
///   auto y = conv->forward(x);   // == 2 * torch conv
///   h.remove();                  // conv is again identical to torch::nn::Conv1d
///
/// Semantics (as PyTorch's nn.Module hooks):
/// - Pre-hooks run in registration order (`prepend=true` puts one first); each sees the
///   tensor arguments as possibly replaced by the previous one and may return replacements
///   (std::nullopt keeps them). Only the `at::Tensor` arguments of forward are exposed;
///   other arguments pass through unchanged.
/// - Post-hooks run in registration order after forward with the (final) inputs and the
///   output, and may return a replacement output. Only modules whose forward returns
///   `at::Tensor` accept post-hooks.
/// - With no hook registered, forward is exactly the wrapped module's forward.
/// - clone() deep-copies parameters as torch's Cloneable does and copies the hooks (the
///   original's handles do not remove the clone's hooks).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <any>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace hyper::nn {

/// The tensor arguments of a forward call, in order.
using Tensors = std::vector<at::Tensor>;

/// `(module, inputs) -> replacement inputs or std::nullopt`.
using ForwardPreHook =
    std::function<std::optional<Tensors>(torch::nn::Module& module, const Tensors& inputs)>;
/// `(module, inputs, output) -> replacement output or std::nullopt`.
using ForwardHook = std::function<std::optional<at::Tensor>(
    torch::nn::Module& module, const Tensors& inputs, const at::Tensor& output)>;

namespace internal {
struct HookRegistry;
}

/// Removes one registered hook (PyTorch's RemovableHandle). Copyable; remove() is
/// idempotent and harmless once the module is gone.
class HookHandle {
 public:
  HookHandle() = default;
  HookHandle(std::weak_ptr<internal::HookRegistry> registry, int64_t id)
      : registry_(std::move(registry)), id_(id) {}
  /// Removes the hook; returns whether it was still registered.
  bool remove();
  int64_t id() const { return id_; }

 private:
  std::weak_ptr<internal::HookRegistry> registry_;
  int64_t id_ = -1;
};

/// Common base of every hookable module (a mixin beside torch::nn::Module: reach it from a
/// `std::shared_ptr<torch::nn::Module>` with `std::dynamic_pointer_cast<HookableModule>`).
class HookableModule {
 public:
  HookableModule();
  HookableModule(const HookableModule& other);             ///< copies the hooks
  HookableModule& operator=(const HookableModule& other);  ///< copies the hooks
  virtual ~HookableModule();

  /// Registers a forward pre-hook (see the file comment for the order).
  HookHandle register_forward_pre_hook(ForwardPreHook hook, bool prepend = false);
  /// Registers a forward post-hook. Throws hyper::NotImplementedError when the module's
  /// forward does not return a single at::Tensor.
  HookHandle register_forward_hook(ForwardHook hook, bool prepend = false);
  size_t num_forward_pre_hooks() const;
  size_t num_forward_hooks() const;
  bool has_hooks() const;
  /// Removes every hook.
  void clear_hooks();

  /// The module itself.
  virtual torch::nn::Module& as_module() = 0;
  const torch::nn::Module& as_module() const {
    return const_cast<HookableModule*>(this)->as_module();
  }
  /// Whether forward returns at::Tensor (post-hooks possible).
  virtual bool forward_returns_tensor() const = 0;
  /// Number of at::Tensor arguments of forward.
  virtual size_t num_tensor_args() const = 0;
  /// Runs forward, hooks included, on a module whose forward takes only tensors and
  /// returns a tensor — the way to call a child found by name in named_modules().
  /// Throws ValueError on a wrong argument count, NotImplementedError for other signatures.
  virtual at::Tensor forward_tensors(const Tensors& inputs) = 0;

  /// Replaces the data of this module's own parameter `name` in place (`set_data` under
  /// no_grad): the Tensor object — and every handle to it, such as the `weight` member and
  /// an optimizer's reference — now holds `data`; requires_grad is kept. Throws ValueError
  /// naming the module's parameters when `name` is not one of them.
  void set_parameter_data(const std::string& name, const at::Tensor& data);

  /// Free-form annotations for upper layers (hyper::tp records how parameters are
  /// sharded here). Copied by clone().
  void set_attribute(const std::string& key, std::any value);
  /// nullptr when absent.
  const std::any* attribute(const std::string& key) const;
  void erase_attribute(const std::string& key);

 protected:
  /// Runs the pre-hooks; throws ValueError if a hook changes the number of tensors.
  Tensors run_forward_pre_hooks(Tensors inputs);
  at::Tensor run_forward_hooks(const Tensors& inputs, at::Tensor output);
  /// "hyper::nn::Linear" etc. for messages.
  std::string describe() const;

 private:
  std::shared_ptr<internal::HookRegistry> hooks_;
  std::map<std::string, std::any> attributes_;
};

/// `std::dynamic_pointer_cast<HookableModule>(module)` (nullptr when not hookable).
std::shared_ptr<HookableModule> as_hookable(const std::shared_ptr<torch::nn::Module>& module);

/// The descendant of `root` named `name` in `root.named_modules()` ("" is root itself).
/// Throws ValueError listing a few existing names when absent.
std::shared_ptr<torch::nn::Module> find_module(const std::shared_ptr<torch::nn::Module>& root,
                                               const std::string& name);

/// Runs a hookable module's forward, hooks included (HookableModule::forward_tensors).
/// Throws ValueError when `module` is not hookable (naming its type).
at::Tensor forward_with_hooks(const std::shared_ptr<torch::nn::Module>& module,
                              const Tensors& inputs);

namespace internal {

[[noreturn]] void throw_arg_count(const std::string& what, size_t expected, size_t got);
[[noreturn]] void throw_signature(const std::string& what);

template <class F>
struct ForwardSig;
template <class C, class R, class... A>
struct ForwardSig<R (C::*)(A...)> {
  using type = R(A...);
};
template <class C, class R, class... A>
struct ForwardSig<R (C::*)(A...) const> {
  using type = R(A...);
};

template <class Impl>
using ForwardSigOf = typename ForwardSig<decltype(&Impl::forward)>::type;

template <class T>
constexpr bool kIsTensorArg = std::is_same_v<std::decay_t<T>, at::Tensor>;

/// Number of tensor arguments among the first I of A...
template <size_t I, class... A>
constexpr size_t tensor_index() {
  constexpr bool flags[] = {kIsTensorArg<A>..., false};
  size_t n = 0;
  for (size_t k = 0; k < I; ++k) n += flags[k] ? 1 : 0;
  return n;
}

/// The hook-running forward, defined for a concrete signature R(A...).
template <class Impl, class Self, class Sig>
class HookedBase;

template <class Impl, class Self, class R, class... A>
class HookedBase<Impl, Self, R(A...)> : public Impl, public HookableModule {
 public:
  static constexpr size_t kNumTensorArgs = (size_t{0} + ... + (kIsTensorArg<A> ? 1 : 0));
  static constexpr bool kAllTensorArgs = kNumTensorArgs == sizeof...(A);

  /// Constructs the wrapped module with the same arguments as Impl.
  template <class... Args,
            std::enable_if_t<std::is_constructible_v<Impl, Args&&...> &&
                                 !(sizeof...(Args) == 1 &&
                                   (std::is_base_of_v<HookedBase, std::decay_t<Args>> && ...)),
                             int> = 0>
  explicit HookedBase(Args&&... args) : Impl(std::forward<Args>(args)...) {}

  /// Impl's forward with the hooks around it.
  R forward(A... args) {
    if (!has_hooks()) return self().forward_core(std::forward<A>(args)...);
    return hooked_forward(std::index_sequence_for<A...>{}, args...);
  }

  /// The computation between the hooks: Impl::forward. A Self may hide it (Linear does,
  /// to let a parallel style add the bias after a reduction).
  R forward_core(A... args) { return Impl::forward(std::forward<A>(args)...); }

  torch::nn::Module& as_module() override { return *this; }
  bool forward_returns_tensor() const override { return std::is_same_v<R, at::Tensor>; }
  size_t num_tensor_args() const override { return kNumTensorArgs; }

  at::Tensor forward_tensors(const Tensors& inputs) override {
    if constexpr (kAllTensorArgs && std::is_same_v<R, at::Tensor>) {
      if (inputs.size() != sizeof...(A)) throw_arg_count(describe(), sizeof...(A), inputs.size());
      return call_with(std::index_sequence_for<A...>{}, inputs);
    } else {
      throw_signature(describe());
    }
  }

  /// Deep copy (parameters, buffers, children as torch's Cloneable) that stays a Self and
  /// keeps the hooks and attributes.
  std::shared_ptr<torch::nn::Module> clone(
      const c10::optional<c10::Device>& device = c10::nullopt) const override {
    auto fresh = std::dynamic_pointer_cast<Impl>(Impl::clone(device));
    auto copy = std::make_shared<Self>(static_cast<const Self&>(*this));
    static_cast<Impl&>(*copy) = std::move(*fresh);
    return copy;
  }

 private:
  Self& self() { return static_cast<Self&>(*this); }

  template <size_t I, class Arg>
  static decltype(auto) pick(const Tensors& tensors, Arg& arg) {
    if constexpr (kIsTensorArg<Arg>) {
      return static_cast<const at::Tensor&>(tensors[tensor_index<I, A...>()]);
    } else {
      return std::forward<Arg>(arg);
    }
  }

  template <size_t... I>
  R hooked_forward(std::index_sequence<I...>, A&... args) {
    Tensors inputs;
    inputs.reserve(kNumTensorArgs);
    (
        [&] {
          if constexpr (kIsTensorArg<A>) inputs.push_back(args);
        }(),
        ...);
    inputs = run_forward_pre_hooks(std::move(inputs));
    if constexpr (std::is_same_v<R, at::Tensor>) {
      at::Tensor out = self().forward_core(pick<I, A>(inputs, args)...);
      return run_forward_hooks(inputs, std::move(out));
    } else {
      return self().forward_core(pick<I, A>(inputs, args)...);
    }
  }

  template <size_t... I>
  at::Tensor call_with(std::index_sequence<I...>, const Tensors& inputs) {
    return forward(inputs[I]...);
  }
};

}  // namespace internal

/// Any torch::nn module `Impl` (e.g. torch::nn::Conv1dImpl) with forward hooks; constructed
/// with Impl's arguments. Its forward has Impl::forward's exact signature (so it works in
/// Sequential/AnyModule); pass `Sig` explicitly when Impl::forward is overloaded.
template <class Impl, class Sig = internal::ForwardSigOf<Impl>>
class HookedImpl : public internal::HookedBase<Impl, HookedImpl<Impl, Sig>, Sig> {
  using Base = internal::HookedBase<Impl, HookedImpl<Impl, Sig>, Sig>;

 public:
  using Base::Base;
  using Base::forward;
};

/// ModuleHolder of HookedImpl<Impl>: `hyper::nn::Hooked<torch::nn::GELUImpl> act;`.
template <class Impl, class Sig = internal::ForwardSigOf<Impl>>
class Hooked : public torch::nn::ModuleHolder<HookedImpl<Impl, Sig>> {
 public:
  using torch::nn::ModuleHolder<HookedImpl<Impl, Sig>>::ModuleHolder;
  using Impl_ = HookedImpl<Impl, Sig>;
};

}  // namespace hyper::nn
