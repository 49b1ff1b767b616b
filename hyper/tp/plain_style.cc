// parallelize_module on plain torch::nn modules (internal/plain_style.h).
#include "hyper/tp/internal/plain_style.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <utility>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/internal/param_replace.h"

namespace hyper::tp::internal {
namespace {

using ParamPlan = std::vector<std::pair<std::string, Placement>>;

std::string where(const torch::nn::Module& m, const std::string& name, const ParallelStyle& s) {
  return hyper::internal::str_cat("parallelize_module: ", s.to_string(), " on plain module '",
                                  name, "' (", module_type(m), ")");
}

/// A non-default layout cannot be honoured without a hook at the module's boundary.
void check_default(bool is_default, const torch::nn::Module& m, const std::string& name,
                   const ParallelStyle& s, const std::string& what, const std::string& hint) {
  HYPER_CHECK_IMPLEMENTED(
      is_default, where(m, name, s), ": ", what,
      " is not the default; a plain torch::nn module has no forward hooks, so no relayout can "
      "be inserted at its boundary (its activations flow on as DTensor tensors and the next "
      "op's sharding rule redistributes them); keep the default layouts, or ", hint);
}

/// The parameter placements `style` gives `m`; throws for what is refused.
ParamPlan plan_of(const torch::nn::Module& m, const std::string& name, const ParallelStyle& style,
                  const std::string& hint) {
  const bool linear = dynamic_cast<const torch::nn::LinearImpl*>(&m) != nullptr;
  const bool embedding = dynamic_cast<const torch::nn::EmbeddingImpl*>(&m) != nullptr;
  const bool layer_norm = dynamic_cast<const torch::nn::LayerNormImpl*>(&m) != nullptr;
  auto unsupported = [&](const char* supported) {
    return ValueError(hyper::internal::str_cat(where(m, name, style), ": on a plain torch::nn "
                                               "module the style supports ", supported, "; ",
                                               hint));
  };
  if (const auto* col = dynamic_cast<const ColwiseParallel*>(&style)) {
    check_default(col->input_layout() == Replicate(), m, name, style,
                  "input_layouts=" + col->input_layout().to_string(), hint);
    check_default(col->output_layout() == Shard(-1), m, name, style,
                  "output_layouts=" + col->output_layout().to_string(), hint);
    if (linear) return {{"weight", Shard(0)}, {"bias", Shard(0)}};
    if (embedding) return {{"weight", Shard(1)}};
    throw unsupported("torch::nn::Linear and torch::nn::Embedding");
  }
  if (const auto* row = dynamic_cast<const RowwiseParallel*>(&style)) {
    const Placement in_default = embedding ? Placement(Replicate()) : Placement(Shard(-1));
    check_default(!row->input_layout() || *row->input_layout() == in_default, m, name, style,
                  "input_layouts=" + (row->input_layout() ? row->input_layout()->to_string() : ""),
                  hint);
    check_default(row->output_layout() == Replicate(), m, name, style,
                  "output_layouts=" + row->output_layout().to_string(), hint);
    if (linear) return {{"weight", Shard(1)}, {"bias", Replicate()}};
    if (embedding) return {{"weight", Shard(0)}};
    throw unsupported("torch::nn::Linear and torch::nn::Embedding");
  }
  if (const auto* seq = dynamic_cast<const SequenceParallel*>(&style)) {
    check_default(!seq->input_layout(), m, name, style,
                  "input_layouts=" + (seq->input_layout() ? seq->input_layout()->to_string() : ""),
                  hint);
    if (layer_norm) return {{"weight", Replicate()}, {"bias", Replicate()}};
    throw unsupported("torch::nn::LayerNorm");
  }
  throw NotImplementedError(hyper::internal::str_cat(
      where(m, name, style), ": only ColwiseParallel, RowwiseParallel and SequenceParallel "
      "apply to a plain torch::nn module (they set its parameters' layouts); this style "
      "relayouts at the module's boundary, which needs forward hooks; ", hint));
}

}  // namespace

void check_plain_style(torch::nn::Module& module, const std::string& name,
                       const ParallelStyle& style, const std::string& hint) {
  const ParamPlan plan = plan_of(module, name, style, hint);
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    if (!p.value().defined() || !is_dtensor(p.value())) continue;
    throw ValueError(hyper::internal::str_cat(
        where(module, name, style), ": the module is already parallelized or distributed (its "
        "parameter '", p.key(), "' is a DTensor, ", as_dtensor(p.value()).layout().to_string(),
        ")"));
  }
  for (const auto& [param, placement] : plan) check_replaceable(module, name, param);
}

void apply_plain_style(torch::nn::Module& module, const std::string& name, const DeviceMesh& mesh,
                       const ParallelStyle& style, const std::string& hint) {
  check_plain_style(module, name, style, hint);
  for (const auto& [param, placement] : plan_of(module, name, style, hint)) {
    const at::Tensor p = registered_parameter(module, param);
    if (!p.defined()) continue;  // bias=false, elementwise_affine=false
    const at::Tensor value = distributed_copy(p, mesh, {placement}, std::nullopt);
    replace_parameter(module, param, value);
  }
}

}  // namespace hyper::tp::internal
