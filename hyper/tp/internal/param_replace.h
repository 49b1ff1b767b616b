#pragma once
/// \file internal/param_replace.h
/// What hyper::distribute_module and hyper::tp::parallelize_module on plain modules share:
/// hyper::nn's parameter replacement (hyper/nn/parameters.h) and distributed copies.

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/placement.h"
#include "hyper/nn/parameters.h"

namespace torch::nn {
class Module;
}

namespace hyper::tp::internal {

// Parameter replacement is hyper::nn's (hyper/nn/parameters.h).
using nn::check_replaceable;
using nn::module_type;
using nn::registered_parameter;
using nn::replace_parameter;

/// `param` as a DTensor tensor with `placements` on `mesh`: a fresh leaf whose local values
/// are distribute_tensor's (`src_data_rank` as there), copied compact; requires_grad as
/// `param`'s.
at::Tensor distributed_copy(const at::Tensor& param, const DeviceMesh& mesh,
                            const Placements& placements, std::optional<int> src_data_rank);

}  // namespace hyper::tp::internal
