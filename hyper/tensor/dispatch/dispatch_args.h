#pragma once
/// \file dispatch/dispatch_args.h
/// What the boxed fallback (fallback.cc) and the per-op kernels (nn_kernels.cc) read off an
/// operator call: its name as the rules spell it and each tensor argument's ArgLayout.

#include <ATen/ATen.h>
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

/// A plain operand (Replicate: the same global value on every rank) as rank `idx`'s local
/// tensor of `target` (a non-ragged layout of its shape), with no communication: cut to the
/// rank's box, and zeros where `target` is Partial and the rank is off coordinate 0 (a wrapped
/// number stays one, so ATen's type promotion treats it as a scalar).
inline at::Tensor plain_local(const at::Tensor& t, const Layout& target, int64_t idx) {
  const Box b = target.local_box(idx);
  at::Tensor r = t;
  for (int64_t d = 0; d < b.rank(); ++d)
    if (b.sizes[d] != t.size(d)) r = r.narrow(d, b.offsets[d], b.sizes[d]);
  if (!target.holds_partial_zeros(idx)) return r;
  at::Tensor z = at::zeros_like(r);
  if (t.unsafeGetTensorImpl()->is_wrapped_number()) z.unsafeGetTensorImpl()->set_wrapped_number(true);
  return z;
}

}  // namespace hyper::dispatch
