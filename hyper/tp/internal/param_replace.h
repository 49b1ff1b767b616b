#pragma once
/// \file internal/param_replace.h
/// Replacing a parameter of a plain torch::nn::Module (its registry and, for LibTorch's own
/// modules, the typed member that holds the same tensor), used by hyper::distribute_module and
/// by hyper::tp::parallelize_module on plain modules.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/placement.h"

namespace torch::nn {
class Module;
}

namespace hyper::tp::internal {

/// "torch::nn::LinearImpl", or the user module's class name.
std::string module_type(const torch::nn::Module& module);

/// Throws hyper::ValueError when parameter `param` of `module` (at `path` in the root's
/// named_modules(), "" for the root) has a holder besides the module's registry and the
/// typed member of a LibTorch module (Linear::weight, ...): a member copy in a user module,
/// an optimizer built before, a view or a tensor kept by the caller. Replacing it would leave
/// that holder with the old tensor. Changes nothing. An absent or undefined parameter passes.
void check_replaceable(torch::nn::Module& module, const std::string& path, const std::string& param);

/// Puts `value` in the registry under `param` (which must exist) and in the typed member
/// holding the old tensor, if any. Call check_replaceable first.
void replace_parameter(torch::nn::Module& module, const std::string& param, const at::Tensor& value);

/// The parameter registered as `param` (not recursive); undefined when absent or undefined.
at::Tensor registered_parameter(torch::nn::Module& module, const std::string& param);

/// `param` as a DTensor tensor with `placements` on `mesh`: a fresh leaf whose local values
/// are distribute_tensor's (`src_data_rank` as there), copied compact; requires_grad as
/// `param`'s.
at::Tensor distributed_copy(const at::Tensor& param, const DeviceMesh& mesh,
                            const Placements& placements, std::optional<int> src_data_rank);

}  // namespace hyper::tp::internal
