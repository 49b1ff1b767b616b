#include "hyper/nn/modules.h"

#include <sstream>
#include <string>

namespace hyper::nn {
namespace {

/// Torch's text with the namespace swapped: `torch::nn::Linear(...)` → `hyper::nn::Linear(...)`.
template <class Impl>
void print_as_hyper(const Impl& impl, std::ostream& stream) {
  std::ostringstream os;
  impl.Impl::pretty_print(os);
  std::string text = os.str();
  const std::string prefix = "torch::";
  if (text.compare(0, prefix.size(), prefix) == 0) text = "hyper::" + text.substr(prefix.size());
  stream << text;
}

}  // namespace

void LinearImpl::pretty_print(std::ostream& stream) const {
  print_as_hyper<torch::nn::LinearImpl>(*this, stream);
}
at::Tensor LinearImpl::forward_core(const at::Tensor& input) {
  if (core_) return core_(input, weight, defer_bias_ ? at::Tensor() : bias);
  if (defer_bias_) return torch::nn::functional::linear(input, weight);
  return torch::nn::LinearImpl::forward(input);
}

void EmbeddingImpl::pretty_print(std::ostream& stream) const {
  print_as_hyper<torch::nn::EmbeddingImpl>(*this, stream);
}
void LayerNormImpl::pretty_print(std::ostream& stream) const {
  print_as_hyper<torch::nn::LayerNormImpl>(*this, stream);
}

}  // namespace hyper::nn
