#pragma once
/// \file modules.h
/// Hookable drop-in replacements for torch::nn::Linear, Embedding and LayerNorm.
///
/// Each `hyper::nn::XImpl` *is a* `torch::nn::XImpl` (same options, constructor arguments,
/// parameter names `weight`/`bias`, initialization and RNG consumption, forward) and a
/// HookableModule; `hyper::nn::X` is its ModuleHolder. With no hook registered a model
/// built from them is bit-identical to the same model built from torch::nn (same seed →
/// same parameters, outputs and gradients).
///
///   struct Mlp : torch::nn::Module {
///     Mlp() {
///       w1 = register_module("w1", hyper::nn::Linear(torch::nn::LinearOptions(8, 32)));
///       w2 = register_module("w2", hyper::nn::Linear(torch::nn::LinearOptions(32, 8)));
///     }
///     at::Tensor forward(const at::Tensor& x) { return w2(torch::relu(w1(x))); }
///     hyper::nn::Linear w1{nullptr}, w2{nullptr};
///   };
///
/// After tensor parallelization (hyper::tp) `weight`/`bias` hold this rank's local shards;
/// `options` keeps the global sizes.

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <functional>
#include <ostream>

#include "hyper/nn/hookable.h"

namespace hyper::nn {

/// torch::nn::LinearImpl with forward hooks.
class LinearImpl
    : public internal::HookedBase<torch::nn::LinearImpl, LinearImpl, at::Tensor(const at::Tensor&)> {
  using Base =
      internal::HookedBase<torch::nn::LinearImpl, LinearImpl, at::Tensor(const at::Tensor&)>;

 public:
  using Base::Base;
  using Base::forward;
  /// `hyper::nn::Linear(in_features=4, out_features=3, bias=true)`.
  void pretty_print(std::ostream& stream) const override;

  /// When true, forward computes `x W^T` only and leaves the bias to a forward hook
  /// (hyper::tp::RowwiseParallel adds it once, after the partial sums are reduced).
  /// Default false: forward is exactly torch::nn::Linear's.
  void set_defer_bias(bool defer) { defer_bias_ = defer; }
  bool defer_bias() const { return defer_bias_; }

  /// A replacement of the layer's computation `linear(input, weight, bias)`, installed by a
  /// tensor-parallel style (hyper::tp::ColwiseParallel runs the input's layout change and
  /// its gradient collective inside one autograd node, overlapped with the weight
  /// gradient). Called with the input and the module's own parameters (bias undefined
  /// when absent or deferred). Hooks still run around it. Empty (the default): the
  /// computation is torch::nn::Linear's.
  using CoreFn = std::function<at::Tensor(const at::Tensor& input, const at::Tensor& weight,
                                          const at::Tensor& bias)>;
  void set_core(CoreFn core) { core_ = std::move(core); }
  bool has_core() const { return static_cast<bool>(core_); }

  /// torch::nn::functional::linear(input, weight, bias) (bias omitted when deferred), or
  /// the installed core.
  at::Tensor forward_core(const at::Tensor& input);

 private:
  bool defer_bias_ = false;
  CoreFn core_;
};

/// torch::nn::EmbeddingImpl with forward hooks.
class EmbeddingImpl : public internal::HookedBase<torch::nn::EmbeddingImpl, EmbeddingImpl,
                                                  at::Tensor(const at::Tensor&)> {
  using Base = internal::HookedBase<torch::nn::EmbeddingImpl, EmbeddingImpl,
                                    at::Tensor(const at::Tensor&)>;

 public:
  using Base::Base;
  using Base::forward;
  /// `hyper::nn::Embedding(num_embeddings=10, embedding_dim=4)`.
  void pretty_print(std::ostream& stream) const override;
};

/// torch::nn::LayerNormImpl with forward hooks.
class LayerNormImpl : public internal::HookedBase<torch::nn::LayerNormImpl, LayerNormImpl,
                                                  at::Tensor(const at::Tensor&)> {
  using Base = internal::HookedBase<torch::nn::LayerNormImpl, LayerNormImpl,
                                    at::Tensor(const at::Tensor&)>;

 public:
  using Base::Base;
  using Base::forward;
  /// `hyper::nn::LayerNorm([8], eps=1e-05, elementwise_affine=true)`.
  void pretty_print(std::ostream& stream) const override;
};

/// `hyper::nn::Linear lin(torch::nn::LinearOptions(4, 3));  lin->forward(x);`
class Linear : public torch::nn::ModuleHolder<LinearImpl> {
 public:
  using torch::nn::ModuleHolder<LinearImpl>::ModuleHolder;
};
/// `hyper::nn::Embedding emb(torch::nn::EmbeddingOptions(100, 16));`
class Embedding : public torch::nn::ModuleHolder<EmbeddingImpl> {
 public:
  using torch::nn::ModuleHolder<EmbeddingImpl>::ModuleHolder;
};
/// `hyper::nn::LayerNorm norm(torch::nn::LayerNormOptions({16}));`
class LayerNorm : public torch::nn::ModuleHolder<LayerNormImpl> {
 public:
  using torch::nn::ModuleHolder<LayerNormImpl>::ModuleHolder;
};

}  // namespace hyper::nn
