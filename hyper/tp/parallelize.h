#pragma once
/// \file parallelize.h
/// hyper::tp::parallelize_module — apply tensor-parallel styles to the hookable modules of a
/// model, by name — and hyper::tp::state_dict, the model's parameters as DTensors.
///
///   auto model = std::make_shared<Block>(...);   // members are hyper::nn::Linear etc.
///   hyper::tp::parallelize_module(model, tp_mesh, {
///       {"attn.q", hyper::tp::ColwiseParallel()}, {"attn.o", hyper::tp::RowwiseParallel()},
///       {"layers.*.mlp.w1", hyper::tp::ColwiseParallel()},
///   });
///   auto y = model->forward(x);                   // same result as the unparallelized model
///   auto sd = hyper::tp::state_dict(*model);     // {"attn.q.weight": DTensor S(0), ...}
///
/// Names are those of `named_modules()`. A pattern is matched component by component
/// (split at '.', as PyTorch's parallelize_module) with fnmatch rules inside a component:
/// `*` (any run of characters), `?` (one), `[abc]`, `[!abc]`; so `layers.*.w1` matches
/// `layers.0.w1` but not `layers.0.mlp.w1`. Entries apply in plan order.

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tp/style.h"

namespace torch::nn {
class Module;
}

namespace hyper::tp {

/// One plan entry: a module name pattern and a style. Constructible from any style value:
/// `{"mlp.w1", ColwiseParallel()}`.
struct PlanEntry {
  template <class Style,
            std::enable_if_t<std::is_base_of_v<ParallelStyle, std::decay_t<Style>>, int> = 0>
  PlanEntry(std::string pattern_, Style&& style_)
      : pattern(std::move(pattern_)),
        style(std::make_shared<std::decay_t<Style>>(std::forward<Style>(style_))) {}
  PlanEntry(std::string pattern_, std::shared_ptr<const ParallelStyle> style_)
      : pattern(std::move(pattern_)), style(std::move(style_)) {}

  std::string pattern;
  std::shared_ptr<const ParallelStyle> style;
};

using ParallelizePlan = std::vector<PlanEntry>;

/// Options of parallelize_module.
struct ParallelizeOptions {
  /// Told of every style's collectives and each parallelized module's forward (may be null),
  /// e.g. a hyper::trace::Timeline. Must outlive the model's forwards and backwards.
  trace::Observer* observer = nullptr;
};

/// fnmatch of one name component (`*`, `?`, `[...]`, `[!...]`).
bool fnmatch(const std::string& pattern, const std::string& text);
/// Component-wise match of a dotted module name (see the file comment).
bool module_name_matches(const std::string& pattern, const std::string& name);

/// Applies `plan` to `module`'s descendants over the 1-D `mesh`: parameters of hookable
/// (hyper::nn) modules are replaced in place by local shards and the modules get the styles'
/// forward hooks; parameters of plain torch::nn Linear / Embedding / LayerNorm modules become
/// DTensor tensors (no hooks: activations flow on as DTensor tensors; docs/tp.md "Plain
/// torch::nn modules"). Returns the names parallelized, in application order.
/// Throws hyper::ValueError: a mesh with more than one dimension; an entry matching no module
/// (its pattern and a few module names); a plain module the style does not support (its
/// type and the hyper::nn replacement: torch::nn::Linear → hyper::nn::Linear, ...,
/// otherwise hyper::nn::Hooked<Impl>); a plain module's parameter held elsewhere (a member
/// copy, an optimizer built before); a module given two parameter-sharding styles; a
/// style that does not support the module's type. NotImplementedError: on a plain module,
/// non-default input/output layouts and PrepareModuleInput/Output. Plain modules are all
/// checked before any changes.
std::vector<std::string> parallelize_module(const std::shared_ptr<torch::nn::Module>& module,
                                            const DeviceMesh& mesh, const ParallelizePlan& plan,
                                            const ParallelizeOptions& options = {});

/// Applies one style to `module` itself (PyTorch's `parallelize_module(m, mesh, style)`).
void parallelize_module(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                        const ParallelStyle& style, const ParallelizeOptions& options = {});

/// Name → DTensor, ordered by name. Converts implicitly to any map whose values can be made
/// from a DTensor — in particular `hyper::dcp::StateDict` — without tp depending on dcp:
/// `hyper::dcp::StateDict sd = hyper::tp::state_dict(*model);`.
class ParamDict : public std::map<std::string, DTensor> {
 public:
  using Base = std::map<std::string, DTensor>;
  using Base::Base;

  template <class Map,
            std::enable_if_t<!std::is_same_v<Map, Base> &&
                                 std::is_same_v<typename Map::key_type, std::string> &&
                                 std::is_constructible_v<typename Map::mapped_type, const DTensor&>,
                             int> = 0>
  operator Map() const {
    return Map(begin(), end());
  }
};

/// Every parameter of `module` (recursively, named as named_parameters()) as a DTensor
/// sharing the parameter's storage (detached): parallelized parameters with their sharding
/// and global shape, every other parameter Replicate on `mesh` (default: the mesh of the
/// first parallelized module), and every buffer (BatchNorm's running statistics, named as
/// named_buffers()) Replicate, sharing its storage. Throws hyper::ValueError when nothing is parallelized and no
/// mesh is given.
ParamDict state_dict(const torch::nn::Module& module,
                     std::optional<DeviceMesh> mesh = std::nullopt);

}  // namespace hyper::tp
