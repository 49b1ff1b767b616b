#pragma once
/// \file internal/plain_style.h
/// parallelize_module on a plain torch::nn module (no forward hooks): a style only sets the
/// layouts of the module's parameters (DTensor tensors, internal/param_replace.h); activations
/// flow between modules as DTensor tensors and each op's sharding rule redistributes them
/// lazily. Hence only the styles' default input/output layouts are accepted.

#include <string>

#include "hyper/comm/device_mesh.h"
#include "hyper/tp/style.h"

namespace torch::nn {
class Module;
}

namespace hyper::tp::internal {

/// Throws what apply_plain_style would throw, changing nothing. `hint` is appended to type
/// errors ("declare it as hyper::nn::Linear ...").
void check_plain_style(torch::nn::Module& module, const std::string& name,
                       const ParallelStyle& style, const std::string& hint);

/// Replaces the parameters of plain `module` (named `name`) by DTensor tensors on the 1-D
/// `mesh` as `style` says (every rank slices its own values: no communication).
/// ColwiseParallel: Linear weight S(0), bias S(0); Embedding weight S(1).
/// RowwiseParallel: Linear weight S(1), bias R; Embedding weight S(0).
/// SequenceParallel: LayerNorm weight, bias R.
/// Throws NotImplementedError for PrepareModuleInput/Output, non-default input/output layouts,
/// an Embedding while the dispatch has no rule for aten::embedding; ValueError for a module
/// type the style does not support, a module already distributed, a parameter held elsewhere.
void apply_plain_style(torch::nn::Module& module, const std::string& name, const DeviceMesh& mesh,
                       const ParallelStyle& style, const std::string& hint);

}  // namespace hyper::tp::internal
