// hyper::overlap_gradient_redistribution (distribute_module.h): a hook per DTensor parameter
// that redistributes an arriving gradient to the parameter's layout asynchronously.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <string>

#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/distribute_module.h"

namespace hyper {

int64_t overlap_gradient_redistribution(const std::shared_ptr<torch::nn::Module>& module) {
  HYPER_CHECK_VALUE(module != nullptr, "overlap_gradient_redistribution: the module is null");
  int64_t hooked = 0;
  for (auto& item : module->named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    if (!is_dtensor(p) || !p.requires_grad()) continue;
    const DTensor param = as_dtensor(p);
    // The hook holds the parameter's mesh and placements, not the parameter (no cycle
    // through the parameter's own autograd meta).
    const DeviceMesh mesh = param.device_mesh();
    const Placements placements = param.placements();
    p.register_hook([mesh, placements](const at::Tensor& grad) -> at::Tensor {
      if (!grad.defined() || !is_dtensor(grad)) return at::Tensor();  // unchanged
      const DTensor g = as_dtensor(grad);
      if (g.placements() == placements) return at::Tensor();
      return as_tensor(g.redistribute(mesh, placements, /*async_op=*/true));
    });
    ++hooked;
  }
  HYPER_CHECK_VALUE(hooked > 0, "overlap_gradient_redistribution: module ", module->name(),
                    " has no DTensor parameter that requires grad (",
                    module->parameters().size(), " parameters; distribute them first with "
                    "hyper::distribute_module or hyper::tp::parallelize_module)");
  return hooked;
}

}  // namespace hyper
