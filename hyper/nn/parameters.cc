#include "hyper/nn/parameters.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper::nn {
namespace {

/// The registry of a module's own parameters. `parameters_` is protected in
/// torch::nn::Module; a pointer to it, formed in a derived class, reaches it on any module.
struct RegistryAccess : torch::nn::Module {
  static torch::OrderedDict<std::string, at::Tensor>& params(torch::nn::Module& m) {
    return m.*(&RegistryAccess::parameters_);
  }
};

template <class Impl>
void add_weight_bias(torch::nn::Module& m, std::vector<at::Tensor*>& out) {
  if (auto* p = dynamic_cast<Impl*>(&m)) {
    out.push_back(&p->weight);
    out.push_back(&p->bias);
  }
}

template <class Impl>
void add_weight(torch::nn::Module& m, std::vector<at::Tensor*>& out) {
  if (auto* p = dynamic_cast<Impl*>(&m)) out.push_back(&p->weight);
}

/// The typed tensor members of LibTorch's modules that alias a registered parameter.
std::vector<at::Tensor*> typed_members(torch::nn::Module& m) {
  std::vector<at::Tensor*> out;
  add_weight_bias<torch::nn::LinearImpl>(m, out);
  add_weight_bias<torch::nn::BilinearImpl>(m, out);
  add_weight<torch::nn::EmbeddingImpl>(m, out);
  add_weight<torch::nn::EmbeddingBagImpl>(m, out);
  add_weight_bias<torch::nn::LayerNormImpl>(m, out);
  add_weight_bias<torch::nn::GroupNormImpl>(m, out);
  add_weight_bias<torch::nn::Conv1dImpl>(m, out);
  add_weight_bias<torch::nn::Conv2dImpl>(m, out);
  add_weight_bias<torch::nn::Conv3dImpl>(m, out);
  add_weight_bias<torch::nn::ConvTranspose1dImpl>(m, out);
  add_weight_bias<torch::nn::ConvTranspose2dImpl>(m, out);
  add_weight_bias<torch::nn::ConvTranspose3dImpl>(m, out);
  add_weight_bias<torch::nn::BatchNorm1dImpl>(m, out);
  add_weight_bias<torch::nn::BatchNorm2dImpl>(m, out);
  add_weight_bias<torch::nn::BatchNorm3dImpl>(m, out);
  add_weight_bias<torch::nn::InstanceNorm1dImpl>(m, out);
  add_weight_bias<torch::nn::InstanceNorm2dImpl>(m, out);
  add_weight_bias<torch::nn::InstanceNorm3dImpl>(m, out);
  return out;
}

std::string param_path(const std::string& path, const std::string& param) {
  return path.empty() ? param : path + "." + param;
}

std::string param_names(torch::nn::Module& m) {
  std::string s;
  for (const auto& item : RegistryAccess::params(m)) s += (s.empty() ? "" : ", ") + item.key();
  return "[" + s + "]";
}

}  // namespace

std::string module_type(const torch::nn::Module& module) { return module.name(); }

at::Tensor registered_parameter(torch::nn::Module& module, const std::string& param) {
  const at::Tensor* p = RegistryAccess::params(module).find(param);
  return p == nullptr ? at::Tensor() : *p;
}

void check_replaceable(torch::nn::Module& module, const std::string& path,
                       const std::string& param) {
  const at::Tensor* p = RegistryAccess::params(module).find(param);
  if (p == nullptr || !p->defined()) return;
  // Expected holders: the registry, plus each typed member holding the same tensor.
  size_t expected = 1;
  for (const at::Tensor* t : typed_members(module))
    if (t->defined() && t->is_same(*p)) ++expected;
  const size_t count = p->use_count();
  if (count <= expected) return;
  throw ValueError(hyper::internal::str_cat(
      "parameter '", param_path(path, param), "' of module ",
      path.empty() ? std::string() : "'" + path + "' ", "(", module_type(module), ") has ", count - expected, " holder(s) besides the module's registry",
      expected > 1 ? " and its typed member" : "",
      ": a member copy kept by the module, an optimizer built before, a view, or a tensor the "
      "caller keeps would go on using the old tensor once it is replaced, and C++ cannot update "
      "them. Build optimizers after distribute_module / parallelize_module / fully_shard, read parameters "
      "through the module's registered names (named_parameters(), or the members of "
      "torch::nn::Linear / Embedding / LayerNorm), or build the module from torch::nn Linear / "
      "Embedding / LayerNorm submodules. No parameter was changed"));
}

void replace_parameter(torch::nn::Module& module, const std::string& param,
                       const at::Tensor& value) {
  at::Tensor* p = RegistryAccess::params(module).find(param);
  HYPER_CHECK_INTERNAL(p != nullptr, "replace_parameter: no parameter '", param, "'");
  const at::Tensor old = *p;
  for (at::Tensor* t : typed_members(module))
    if (t->defined() && t->is_same(old)) *t = value;
  *p = value;
}

torch::OrderedDict<std::string, at::Tensor>& parameter_registry(torch::nn::Module& module) {
  return RegistryAccess::params(module);
}

}  // namespace hyper::nn
