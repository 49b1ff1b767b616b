#include "hyper/tp/parallelize.h"

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <any>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/nn/hookable.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/internal/plain_style.h"
#include "hyper/tp/internal/sharding.h"

namespace hyper::tp {
namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == '.') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

bool fnmatch_at(const std::string& p, size_t pi, const std::string& t, size_t ti) {
  while (pi < p.size()) {
    const char c = p[pi];
    if (c == '*') {
      while (pi < p.size() && p[pi] == '*') ++pi;
      if (pi == p.size()) return true;
      for (size_t k = ti; k <= t.size(); ++k) {
        if (fnmatch_at(p, pi, t, k)) return true;
      }
      return false;
    }
    if (ti == t.size()) return false;
    if (c == '?') {
      ++pi, ++ti;
      continue;
    }
    if (c == '[') {
      size_t close = p.find(']', pi + 2);  // ']' right after '[' or '[!' is literal
      if (close != std::string::npos) {
        size_t k = pi + 1;
        bool negate = false;
        if (p[k] == '!') negate = true, ++k;
        bool hit = false;
        for (; k < close; ++k) {
          if (k + 2 < close && p[k + 1] == '-') {
            hit |= p[k] <= t[ti] && t[ti] <= p[k + 2];
            k += 2;
          } else {
            hit |= p[k] == t[ti];
          }
        }
        if (hit == negate) return false;
        pi = close + 1, ++ti;
        continue;
      }
    }
    if (c != t[ti]) return false;
    ++pi, ++ti;
  }
  return ti == t.size();
}

/// The hyper::nn module to use instead of a plain torch::nn one.
std::string replacement_for(const torch::nn::Module& m) {
  if (dynamic_cast<const torch::nn::LinearImpl*>(&m)) return "hyper::nn::Linear";
  if (dynamic_cast<const torch::nn::EmbeddingImpl*>(&m)) return "hyper::nn::Embedding";
  if (dynamic_cast<const torch::nn::LayerNormImpl*>(&m)) return "hyper::nn::LayerNorm";
  return "hyper::nn::Hooked<" + m.name() + ">";
}

/// What a plain module's refusal suggests instead.
std::string plain_hint(const torch::nn::Module& m) {
  return "for forward hooks declare it as " + replacement_for(m) +
         " (a drop-in replacement with the same options and parameters)";
}

void check_mesh(const DeviceMesh& mesh) {
  HYPER_CHECK_VALUE(mesh.defined(), "parallelize_module: undefined DeviceMesh");
  HYPER_CHECK_VALUE(
      mesh.ndim() == 1, "parallelize_module: tensor parallelism needs a 1-D mesh, got ",
      mesh.to_string(), " (", mesh.ndim(), " dims); pass a sub-mesh such as mesh[\"tp\"]");
}

void apply_style(const std::shared_ptr<torch::nn::Module>& module, const std::string& name,
                 const DeviceMesh& mesh, const ParallelStyle& style,
                 const ParallelizeOptions& options) {
  auto hookable = nn::as_hookable(module);
  if (hookable == nullptr) {  // a plain torch::nn module: parameter layouts only
    internal::apply_plain_style(*module, name, mesh, style, plain_hint(*module));
    return;
  }
  if (style.shards_parameters()) {
    if (const std::any* prev = hookable->attribute(internal::kParamShardingKey)) {
      throw hyper::ValueError(hyper::internal::str_cat(
          "parallelize_module: module '", name, "' is already parallelized by ",
          std::any_cast<const internal::ModuleSharding&>(*prev).style, "; cannot also apply ",
          style.to_string()));
    }
  }
  StyleContext ctx{name, mesh, options.observer};
  style.apply(*hookable, ctx);
}

const internal::ModuleSharding* sharding_of(const torch::nn::Module& m) {
  auto* hookable = dynamic_cast<const nn::HookableModule*>(&m);
  if (hookable == nullptr) return nullptr;
  const std::any* a = hookable->attribute(internal::kParamShardingKey);
  return a == nullptr ? nullptr : std::any_cast<internal::ModuleSharding>(a);
}

}  // namespace

bool fnmatch(const std::string& pattern, const std::string& text) {
  return fnmatch_at(pattern, 0, text, 0);
}

bool module_name_matches(const std::string& pattern, const std::string& name) {
  const auto p = split_dots(pattern);
  const auto n = split_dots(name);
  if (p.size() != n.size()) return false;
  for (size_t i = 0; i < p.size(); ++i) {
    if (!fnmatch(p[i], n[i])) return false;
  }
  return true;
}

std::vector<std::string> parallelize_module(const std::shared_ptr<torch::nn::Module>& module,
                                            const DeviceMesh& mesh, const ParallelizePlan& plan,
                                            const ParallelizeOptions& options) {
  HYPER_CHECK_VALUE(module != nullptr, "parallelize_module: null module");
  check_mesh(mesh);
  const auto modules = module->named_modules();
  // Plain modules are checked before anything changes: a refusal leaves them all unchanged.
  std::map<std::string, std::string> plain_styles;  // plain module name -> style
  for (const auto& entry : plan) {
    if (entry.style == nullptr) continue;
    for (const auto& item : modules) {
      if (item.key().empty() || !module_name_matches(entry.pattern, item.key()) ||
          nn::as_hookable(item.value()) != nullptr)
        continue;
      internal::check_plain_style(*item.value(), item.key(), *entry.style,
                                  plain_hint(*item.value()));
      const auto [it, fresh] = plain_styles.emplace(item.key(), entry.style->to_string());
      HYPER_CHECK_VALUE(fresh, "parallelize_module: plain module '", item.key(), "' is given ",
                        it->second, " and ", entry.style->to_string(),
                        "; a module takes one parameter-sharding style");
    }
  }
  std::vector<std::string> done;
  for (const auto& entry : plan) {
    HYPER_CHECK_VALUE(entry.style != nullptr, "parallelize_module: plan entry '", entry.pattern,
                      "' has no style");
    bool matched = false;
    for (const auto& item : modules) {
      if (item.key().empty() || !module_name_matches(entry.pattern, item.key())) continue;
      matched = true;
      apply_style(item.value(), item.key(), mesh, *entry.style, options);
      done.push_back(item.key());
    }
    if (!matched) {
      std::ostringstream names;
      int shown = 0;
      for (const auto& item : modules) {
        if (item.key().empty()) continue;
        if (shown++ == 10) {
          names << ", ...";
          break;
        }
        names << (shown > 1 ? ", " : "") << item.key();
      }
      throw hyper::ValueError(hyper::internal::str_cat(
          "parallelize_module: plan entry '", entry.pattern, "' (", entry.style->to_string(),
          ") matches no module (modules: [", names.str(), "])"));
    }
  }
  return done;
}

void parallelize_module(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                        const ParallelStyle& style, const ParallelizeOptions& options) {
  HYPER_CHECK_VALUE(module != nullptr, "parallelize_module: null module");
  check_mesh(mesh);
  apply_style(module, "", mesh, style, options);
}

ParamDict state_dict(const torch::nn::Module& module, std::optional<DeviceMesh> mesh) {
  const auto modules = module.named_modules();  // includes module itself as ""
  if (!mesh) {
    for (const auto& item : modules) {
      if (const auto* s = sharding_of(*item.value())) {
        if (!s->params.empty()) {
          mesh = s->params.begin()->second.mesh;
          break;
        }
      }
      for (const auto& p : item.value()->named_parameters(/*recurse=*/false))
        if (!mesh && p.value().defined() && is_dtensor(p.value()))
          mesh = as_dtensor(p.value()).device_mesh();  // a plain module's DTensor parameter
      if (mesh) break;
    }
  }
  HYPER_CHECK_VALUE(mesh.has_value(),
                    "hyper::tp::state_dict: no module is parallelized; pass the "
                    "mesh for replicated parameters");
  ParamDict out;
  for (const auto& item : modules) {
    const auto* s = sharding_of(*item.value());
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      if (!p.value().defined()) continue;
      if (is_dtensor(p.value())) {  // plain modules: the parameter is a DTensor tensor
        out.emplace(prefix + p.key(), as_dtensor(p.value()).detach());
        continue;
      }
      const at::Tensor local = p.value().detach();
      const internal::ParamSharding* ps = nullptr;
      if (s != nullptr) {
        auto it = s->params.find(p.key());
        if (it != s->params.end()) ps = &it->second;
      }
      if (ps != nullptr) {
        out.emplace(prefix + p.key(),
                    DTensor::from_local(local, ps->mesh, ps->placements, ps->global_shape));
      } else {
        out.emplace(prefix + p.key(),
                    DTensor::from_local(local, *mesh, Placements(mesh->ndim(), Replicate())));
      }
    }
    // Buffers (BatchNorm's running statistics): Replicate, sharing the buffer's storage, so a
    // checkpoint keeps them and a load writes them in place.
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      if (!b.value().defined()) continue;
      out.emplace(prefix + b.key(),
                  is_dtensor(b.value())
                      ? as_dtensor(b.value()).detach()
                      : DTensor::from_local(b.value().detach(), *mesh,
                                            Placements(mesh->ndim(), Replicate())));
    }
  }
  return out;
}

}  // namespace hyper::tp
