#pragma once
/// \file internal/checks.h
/// Argument checks shared by the DTensor constructors and distribute_tensor. Not public.

#include <ATen/core/Tensor.h>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/errors.h"

namespace hyper::tensor_internal {

inline void check_mesh(const DeviceMesh& mesh, const char* what) {
  HYPER_CHECK_VALUE(mesh.defined(), what, ": undefined DeviceMesh");
}

inline void check_device(const at::Tensor& local, const DeviceMesh& mesh, const char* what) {
  HYPER_CHECK_VALUE(local.defined(), what, ": undefined local tensor");
  HYPER_CHECK_VALUE(local.device().type() == mesh.device_type(), what, ": the tensor is on ",
                    local.device().str(), " but the mesh is ", mesh.to_string());
}

}  // namespace hyper::tensor_internal
