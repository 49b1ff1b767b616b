#pragma once
/// \file dispatch/dispatch_args.h
/// What the boxed fallback (fallback.cc) and the per-op kernels (nn_kernels.cc) read off an
/// operator call: its name as the rules spell it and each tensor argument's ArgLayout.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <string>

#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::dispatch {

/// "aten::add.Tensor": the schema name, then "." and the overload name when there is one.
inline std::string op_name_of(const c10::OperatorHandle& op) {
  const auto& s = op.schema();
  std::string n = s.name();
  if (!s.overload_name().empty()) n += "." + s.overload_name();
  return n;
}

/// A DTensor tensor's layout, or a plain tensor's shape.
inline ArgLayout arg_layout(const at::Tensor& t) {
  if (is_dtensor(t)) return ArgLayout::of(as_dtensor(t).layout());
  return ArgLayout::plain(t.sizes().vec());
}

}  // namespace hyper::dispatch
