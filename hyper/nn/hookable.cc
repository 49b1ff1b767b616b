#include "hyper/nn/hookable.h"

#include <algorithm>
#include <sstream>

#include "hyper/core/errors.h"

namespace hyper::nn {
namespace internal {

struct HookRegistry {
  int64_t next_id = 0;
  std::vector<std::pair<int64_t, ForwardPreHook>> pre;
  std::vector<std::pair<int64_t, ForwardHook>> post;

  template <class Vec>
  static bool erase(Vec& v, int64_t id) {
    auto it = std::find_if(v.begin(), v.end(), [&](const auto& p) { return p.first == id; });
    if (it == v.end()) return false;
    v.erase(it);
    return true;
  }
};

void throw_arg_count(const std::string& what, size_t expected, size_t got) {
  throw ValueError(hyper::internal::str_cat(what, ": forward takes ", expected,
                                            " tensor argument(s), got ", got));
}

void throw_signature(const std::string& what) {
  throw NotImplementedError(
      hyper::internal::str_cat(what,
                               ": forward_tensors needs a forward that takes only at::Tensor "
                               "arguments and returns at::Tensor; call forward() directly"));
}

}  // namespace internal

bool HookHandle::remove() {
  auto registry = registry_.lock();
  if (!registry) return false;
  return internal::HookRegistry::erase(registry->pre, id_) ||
         internal::HookRegistry::erase(registry->post, id_);
}

HookableModule::HookableModule() : hooks_(std::make_shared<internal::HookRegistry>()) {}

HookableModule::HookableModule(const HookableModule& other)
    : hooks_(std::make_shared<internal::HookRegistry>(*other.hooks_)),
      attributes_(other.attributes_) {}

HookableModule& HookableModule::operator=(const HookableModule& other) {
  if (this != &other) {
    hooks_ = std::make_shared<internal::HookRegistry>(*other.hooks_);
    attributes_ = other.attributes_;
  }
  return *this;
}

HookableModule::~HookableModule() = default;

HookHandle HookableModule::register_forward_pre_hook(ForwardPreHook hook, bool prepend) {
  HYPER_CHECK_VALUE(static_cast<bool>(hook), describe(), ": empty forward pre-hook");
  const int64_t id = hooks_->next_id++;
  auto pos = prepend ? hooks_->pre.begin() : hooks_->pre.end();
  hooks_->pre.insert(pos, {id, std::move(hook)});
  return HookHandle(hooks_, id);
}

HookHandle HookableModule::register_forward_hook(ForwardHook hook, bool prepend) {
  HYPER_CHECK_VALUE(static_cast<bool>(hook), describe(), ": empty forward hook");
  HYPER_CHECK_IMPLEMENTED(forward_returns_tensor(), describe(),
                          ": forward hooks need a forward that returns at::Tensor");
  const int64_t id = hooks_->next_id++;
  auto pos = prepend ? hooks_->post.begin() : hooks_->post.end();
  hooks_->post.insert(pos, {id, std::move(hook)});
  return HookHandle(hooks_, id);
}

size_t HookableModule::num_forward_pre_hooks() const { return hooks_->pre.size(); }
size_t HookableModule::num_forward_hooks() const { return hooks_->post.size(); }
bool HookableModule::has_hooks() const { return !hooks_->pre.empty() || !hooks_->post.empty(); }

void HookableModule::clear_hooks() {
  hooks_->pre.clear();
  hooks_->post.clear();
}

Tensors HookableModule::run_forward_pre_hooks(Tensors inputs) {
  // Copy: a hook may remove itself (or others) while running.
  auto pre = hooks_->pre;
  for (auto& [id, hook] : pre) {
    std::optional<Tensors> replaced = hook(as_module(), inputs);
    if (replaced) {
      HYPER_CHECK_VALUE(replaced->size() == inputs.size(), describe(), ": forward pre-hook ", id,
                        " returned ", replaced->size(), " tensor(s) for ", inputs.size(),
                        " tensor argument(s)");
      inputs = std::move(*replaced);
    }
  }
  return inputs;
}

at::Tensor HookableModule::run_forward_hooks(const Tensors& inputs, at::Tensor output) {
  auto post = hooks_->post;
  for (auto& [id, hook] : post) {
    std::optional<at::Tensor> replaced = hook(as_module(), inputs, output);
    if (replaced) output = std::move(*replaced);
  }
  return output;
}

std::string HookableModule::describe() const {
  std::ostringstream os;
  as_module().pretty_print(os);
  return os.str();
}

void HookableModule::set_parameter_data(const std::string& name, const at::Tensor& data) {
  auto& module = as_module();
  auto params = module.named_parameters(/*recurse=*/false);
  at::Tensor* param = params.find(name);
  if (param == nullptr) {
    std::ostringstream names;
    for (const auto& item : params) names << (names.tellp() > 0 ? ", " : "") << item.key();
    throw hyper::ValueError(hyper::internal::str_cat(describe(), " has no parameter '", name,
                                                     "' (parameters: [", names.str(), "])"));
  }
  HYPER_CHECK_VALUE(data.defined(), describe(), ": set_parameter_data('", name,
                    "') with an undefined tensor");
  at::NoGradGuard no_grad;
  param->set_data(data);
}

void HookableModule::set_attribute(const std::string& key, std::any value) {
  attributes_[key] = std::move(value);
}

const std::any* HookableModule::attribute(const std::string& key) const {
  auto it = attributes_.find(key);
  return it == attributes_.end() ? nullptr : &it->second;
}

void HookableModule::erase_attribute(const std::string& key) { attributes_.erase(key); }

std::shared_ptr<HookableModule> as_hookable(const std::shared_ptr<torch::nn::Module>& module) {
  return std::dynamic_pointer_cast<HookableModule>(module);
}

std::shared_ptr<torch::nn::Module> find_module(const std::shared_ptr<torch::nn::Module>& root,
                                               const std::string& name) {
  HYPER_CHECK_VALUE(root != nullptr, "find_module('", name, "'): null root module");
  if (name.empty()) return root;
  auto modules = root->named_modules();
  if (auto* found = modules.find(name)) return *found;
  std::ostringstream names;
  int shown = 0;
  for (const auto& item : modules) {
    if (item.key().empty()) continue;
    if (shown++ == 8) {
      names << ", ...";
      break;
    }
    names << (shown > 1 ? ", " : "") << item.key();
  }
  throw ValueError(
      hyper::internal::str_cat("no module named '", name, "' (modules: [", names.str(), "])"));
}

at::Tensor forward_with_hooks(const std::shared_ptr<torch::nn::Module>& module,
                              const Tensors& inputs) {
  HYPER_CHECK_VALUE(module != nullptr, "forward_with_hooks: null module");
  auto hookable = as_hookable(module);
  HYPER_CHECK_VALUE(hookable != nullptr, "forward_with_hooks: module '", module->name(),
                    "' is not hookable (use hyper::nn::Linear / Embedding / LayerNorm or "
                    "hyper::nn::Hooked<Impl>)");
  return hookable->forward_tensors(inputs);
}

}  // namespace hyper::nn
