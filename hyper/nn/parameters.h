#pragma once
/// \file parameters.h
/// The parameter registry of a plain torch::nn::Module, for layers that replace parameters:
/// hyper::distribute_module and parallelize_module on plain modules (hyper::tp) and
/// fully_shard (hyper::fsdp). A replacement goes into the module's registry and into the typed
/// member of LibTorch's own modules that holds the same tensor (Linear::weight, ...), which is
/// what their forwards read.

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/ordered_dict.h>

#include <string>

namespace hyper::nn {

/// The registry of `module`'s own parameters (torch::nn::Module keeps it protected); entries
/// may be replaced in place (replace_parameter also updates the typed member).
torch::OrderedDict<std::string, at::Tensor>& parameter_registry(torch::nn::Module& module);

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

}  // namespace hyper::nn
