// hyper::distribute_module / distribute_parameter and the parameter replacement they share with
// parallelize_module on plain modules (internal/param_replace.h).
#include "hyper/tp/distribute_module.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/instancenorm.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <any>
#include <sstream>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/nn/hookable.h"
#include "hyper/nn/parameters.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/copied_view.h"
#include "hyper/tp/internal/param_replace.h"
#include "hyper/tp/internal/sharding.h"

namespace hyper {
namespace tp::internal {
namespace {
std::string param_names(torch::nn::Module& m) {
  std::string s;
  for (const auto& item : nn::parameter_registry(m)) s += (s.empty() ? "" : ", ") + item.key();
  return "[" + s + "]";
}
}  // namespace

namespace {
/// A gradient of a DTensor parameter with its local tensor row-major. LibTorch's backward
/// formulas choose their output's memory layout from their inputs' strides, and a DTensor
/// tensor's wrapper reports row-major strides whatever its local's: the gradient of a
/// Linear's weight, computed for `weight.t()`, arrives as a transposed local, which
/// AccumulateGrad keeps (the wrapper's strides match the parameter's), so every optimizer op
/// on it walked a transposed tensor (SGD's `add_` on a [1024, 512] shard: 7.9 ms, 0.3 ms
/// row-major). Plain parameters get the same copy from AccumulateGrad (it makes a gradient
/// obey the parameter's layout). A pending gradient (an async redistribution) is left as it
/// is: its local comes from a collective, row-major, and reading it would wait.
///
/// A gradient that is a copied view (copied_view.h: cat's or stack's backward
/// slicing a gradient sharded along the cat dim gathers each slice) is handed over as a
/// tensor of its own, the same local: its base is autograd's temporary, which nothing reads
/// again, and as a view it would refuse in-place writes through `.data()` (clip_grad_norm_'s
/// `grad.data().mul_(coef)`) and go stale when a sibling slice is written.
at::Tensor row_major_gradient(const at::Tensor& g) {
  if (!g.defined() || !is_dtensor(g)) return g;
  const DTensor d = as_dtensor(g);
  if (d.is_pending()) return g;
  if (!is_copied_view(g) && d.to_local().is_contiguous()) return g;
  return as_tensor(DTensor::from_local_with_layout(d.to_local().contiguous(), d.device_mesh(),
                                                   d.layout(), d.plan_cache()));
}
}  // namespace

at::Tensor distributed_copy(const at::Tensor& param, const DeviceMesh& mesh,
                            const Placements& placements, std::optional<int> src_data_rank) {
  at::NoGradGuard no_grad;
  const DTensor d = distribute_tensor(param.detach(), mesh, placements, src_data_rank);
  // A shard of a view keeps the whole parameter alive: copy it compact.
  const at::Tensor local = d.to_local().detach().clone(at::MemoryFormat::Contiguous);
  at::Tensor t = as_tensor(DTensor::from_local_with_layout(local, mesh, d.layout(), d.plan_cache()));
  if (param.requires_grad()) {
    t.requires_grad_(true);
    t.register_hook(&row_major_gradient);
  }
  return t;
}

}  // namespace tp::internal

void distribute_parameter(torch::nn::Module& module, const std::string& name,
                          const DeviceMesh& mesh, const Placements& placements,
                          std::optional<int> src_data_rank) {
  using namespace tp::internal;
  HYPER_CHECK_VALUE(mesh.defined(), "hyper::distribute_parameter: undefined DeviceMesh");
  const at::Tensor* p = nn::parameter_registry(module).find(name);
  HYPER_CHECK_VALUE(p != nullptr, "hyper::distribute_parameter: module ", module_type(module),
                    " has no parameter '", name, "' (its parameters: ", param_names(module), ")");
  HYPER_CHECK_VALUE(p->defined(), "hyper::distribute_parameter: parameter '", name, "' of ",
                    module_type(module), " is undefined (e.g. bias=false)");
  HYPER_CHECK_VALUE(!is_dtensor(*p), "hyper::distribute_parameter: parameter '", name, "' of ",
                    module_type(module), " already is a DTensor (",
                    as_dtensor(*p).layout().to_string(), ")");
  check_replaceable(module, "", name);
  replace_parameter(module, name, distributed_copy(*p, mesh, placements, src_data_rank));
}

void distribute_module(const std::shared_ptr<torch::nn::Module>& module, const DeviceMesh& mesh,
                       const PartitionFn& partition_fn, std::optional<int> src_data_rank) {
  using namespace tp::internal;
  HYPER_CHECK_VALUE(module != nullptr, "hyper::distribute_module: null module");
  HYPER_CHECK_VALUE(mesh.defined(), "hyper::distribute_module: undefined DeviceMesh");
  const auto modules = module->named_modules();
  // Everything that refuses is checked before any parameter changes.
  for (const auto& item : modules) {
    // A hookable module parallelized by a style holds local shards as plain parameters:
    // replicating them would take a shard for the whole tensor.
    if (const auto* h = dynamic_cast<const nn::HookableModule*>(item.value().get())) {
      const std::any* s = h->attribute(tp::internal::kParamShardingKey);
      HYPER_CHECK_VALUE(s == nullptr, "hyper::distribute_module: module '", item.key(), "' (",
                        module_type(*item.value()), ") is parallelized by ",
                        std::any_cast<const tp::internal::ModuleSharding&>(*s).style,
                        ": its parameters are local shards, not whole tensors; no parameter "
                        "was changed (hyper::tp::state_dict gives them as DTensors)");
    }
    for (const auto& p : nn::parameter_registry(*item.value()))
      if (p.value().defined() && !is_dtensor(p.value()))
        check_replaceable(*item.value(), item.key(), p.key());
  }
  if (partition_fn) {
    for (const auto& item : modules) partition_fn(item.key(), *item.value(), mesh);
  }
  const Placements replicate(static_cast<size_t>(mesh.ndim()), Replicate());
  for (const auto& item : modules) {
    auto& params = nn::parameter_registry(*item.value());
    for (size_t i = 0; i < params.size(); ++i) {
      const at::Tensor& p = params[i].value();
      if (!p.defined() || is_dtensor(p)) continue;
      at::Tensor value = distributed_copy(p, mesh, replicate, src_data_rank);
      replace_parameter(*item.value(), params[i].key(), value);
    }
    // Buffers stay plain tensors (a plain operand acts as Replicate), in place, so typed
    // members (BatchNorm's running_mean) keep pointing at them; with a source rank every rank
    // takes its values, as for the parameters.
    if (!src_data_rank) continue;
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      if (!b.value().defined() || is_dtensor(b.value())) continue;
      at::NoGradGuard no_grad;
      b.value().copy_(distribute_tensor(b.value().detach(), mesh, replicate, src_data_rank).to_local());
    }
  }
}

}  // namespace hyper
