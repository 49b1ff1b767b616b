// Per-op kernels of the DTensor dispatch key for split / unbind, _to_copy, new_* factories,
// fill_.Scalar (see shape_kernels.h).
#include "hyper/tensor/dispatch/shape_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/ScalarType.h>
#include <torch/library.h>

#include <optional>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dispatch/shape_rules.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {


/// Refuses a device other than self's (dispatch_args.h check_same_device).
void check_same_device(const std::string& name, const at::Tensor& self, const c10::IValue& device) {
  dispatch::check_same_device([&] { return describe_args(name, {arg_layout(self)}); },
                              self.device(), device);
}

int64_t int_of(const c10::IValue& v) { return v.isInt() ? v.toInt() : v.toSymInt().expect_int(); }

std::optional<at::ScalarType> opt_dtype(const c10::IValue& v) {
  if (v.isNone()) return std::nullopt;
  return v.toScalarType();
}

/// What the cast from `from` to `to` keeps (shape_rules.h CastTraits).
CastTraits cast_traits(at::ScalarType from, at::ScalarType to) {
  CastTraits c;
  if (from == to) return CastTraits{true, true};
  auto fc = [](at::ScalarType t) { return at::isFloatingType(t) || at::isComplexType(t); };
  c.linear = fc(from) && fc(to);
  if (!at::isComplexType(from)) {
    if (at::isFloatingType(to))
      c.monotone = true;  // rounding to nearest is non-decreasing
    else if (!at::isFloatingType(from) && at::isIntegralType(to, /*includeBool=*/false))
      c.monotone = c10::promoteTypes(from, to) == to;  // every source value fits
  }
  return c;
}

/// Which split: split.Tensor (self, split_size, dim), split_with_sizes (self, split_sizes, dim),
/// unbind.int (self, dim).
enum class Split { kSize, kSizes, kUnbind };

// The split `K`; `unsafe`: unsafe_split(_with_sizes), whose pieces are not tracked as views.
template <Split K, bool unsafe>
std::vector<c10::IValue> split(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const bool unbind = K == Split::kUnbind;
  const int64_t dim = int_of(unbind ? a[1] : a[2]);
  const DTensor d = dtensor_of(self);
  const ArgLayout in = ArgLayout::of(d.layout());
  std::vector<int64_t> sizes;
  if (K == Split::kSize) {
    const int64_t rank = self.dim();
    const std::string where = describe_args(name, {in}) + " dim " + std::to_string(dim);
    HYPER_CHECK_VALUE(rank > 0, where, ": a 0-dim tensor cannot be split");
    sizes = split_pieces(self.size(normalized_dim(dim, rank, where)), int_of(a[1]), where);
  } else if (!unbind) {
    sizes = a[1].toIntVector();
  }
  const SplitPropagation p = propagate_split(name, in, sizes, dim, unbind);
  const at::Tensor in_local = d.to_local();
  at::Tensor local = in_local;
  if (p.input != d.layout()) local = redistribute_local(local, d.device_mesh(), d.layout(), p.input);
  std::vector<at::Tensor> pieces;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    pieces = unbind ? local.unbind(p.dim) : local.split_with_sizes(p.sizes, p.dim);
  }
  // A piece whose local is a copy remembers the version of the input's counter, which the
  // outputs share once ADInplaceOrView makes them views (as the fallback does for views), and
  // writes itself back after an in-place op: piece i is rows [offset, offset + size) of the
  // dim (unbind: row i), a slice (dtensor_impl.h CopiedView).
  const bool track = !unsafe;
  std::vector<at::Tensor> out;
  int64_t offset = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    out.push_back(wrap(pieces[i], d, p.outputs[i]));
    if (track) track_copied_view(self, out.back(), pieces[i], SliceOf{p.dim, offset, 1, unbind});
    // An unsafe piece aliasing the local (an unsharded dim) shares the input's record and
    // counter, as a view's; one gathered along the sharded dim is a tensor of its own.
    else if (pieces[i].is_alias_of(in_local)) track_copied_view(self, out.back(), pieces[i], std::nullopt);
    offset += unbind ? 1 : p.sizes[i];
  }
  return {c10::IValue(out)};
}

// _to_copy(self, *, dtype?, layout?, device?, pin_memory?, non_blocking, memory_format?)
std::vector<c10::IValue> to_copy(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  check_same_device(name, self, a[3]);
  check_strided([&] { return describe_args(name, {arg_layout(self)}); }, a[2]);
  const at::ScalarType to = opt_dtype(a[1]).value_or(self.scalar_type());
  const DTensor d = dtensor_of(self);
  const Propagation p = propagate_cast(name, ArgLayout::of(d.layout()),
                                       cast_traits(self.scalar_type(), to));
  at::Tensor local = d.to_local();
  if (*p.inputs[0] != d.layout())
    local = redistribute_local(local, d.device_mesh(), d.layout(), *p.inputs[0]);
  at::AutoDispatchBelowADInplaceOrView below;
  const auto pin = a[4].isNone() ? std::optional<bool>() : std::optional<bool>(a[4].toBool());
  const auto mf = a[6].isNone() ? std::optional<at::MemoryFormat>()
                                : std::optional<at::MemoryFormat>(a[6].toMemoryFormat());
  return {wrap(at::_to_copy(local, to, std::nullopt, std::nullopt, pin, a[5].toBool(), mf), d,
               p.output)};
}

/// Which factory: new_zeros / new_ones / new_empty(self, size, *, dtype?, layout?, device?,
/// pin_memory?); new_full(self, size, fill_value, *, ...).
enum class Factory { kZeros, kOnes, kEmpty, kFull };

template <Factory K>
std::vector<c10::IValue> new_factory(const std::string& name, const std::vector<c10::IValue>& a) {
  const at::Tensor self = a[0].toTensor();
  const size_t o = K == Factory::kFull ? 3 : 2;  // dtype's position
  check_same_device(name, self, a[o + 2]);
  check_strided([&] { return describe_args(name, {arg_layout(self)}); }, a[o + 1]);
  const DTensor d = dtensor_of(self);
  const Propagation p = propagate_new_factory(name, ArgLayout::of(d.layout()), a[1].toIntVector());
  at::TensorOptions opts = d.to_local().options();
  if (const auto dt = opt_dtype(a[o])) opts = opts.dtype(*dt);
  if (!a[o + 3].isNone()) opts = opts.pinned_memory(a[o + 3].toBool());
  const std::vector<int64_t> shape = p.output.local_shape(d.mesh_index());
  at::AutoDispatchBelowADInplaceOrView below;
  at::Tensor local;
  switch (K) {
    case Factory::kZeros: local = at::zeros(shape, opts); break;
    case Factory::kOnes: local = at::ones(shape, opts); break;
    case Factory::kEmpty: local = at::empty(shape, opts); break;
    case Factory::kFull: local = at::full(shape, a[2].toScalar(), opts); break;
  }
  return {wrap(local, d, p.output)};
}

// fill_.Scalar: fill_.Tensor's additive rule puts the value on coordinate 0 of a Partial(sum).
at::Tensor& fill_scalar_(at::Tensor& self, const at::Scalar& value) {
  return self.fill_(wrapped(value));
}

}  // namespace

const KernelFamily& shape_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"shape", /*serves_out=*/true, {
      HYPER_ARGS_KERNEL("aten::split.Tensor", K::kDTensor, split<Split::kSize, false>),
      HYPER_ARGS_KERNEL("aten::split_with_sizes", K::kDTensor, split<Split::kSizes, false>),
      HYPER_ARGS_KERNEL("aten::unsafe_split.Tensor", K::kDTensor, split<Split::kSize, true>),
      HYPER_ARGS_KERNEL("aten::unsafe_split_with_sizes", K::kDTensor, split<Split::kSizes, true>),
      HYPER_ARGS_KERNEL("aten::unbind.int", K::kDTensor, split<Split::kUnbind, false>),
      HYPER_ARGS_KERNEL("aten::_to_copy", K::kDTensor, to_copy),
      HYPER_ARGS_KERNEL("aten::new_zeros", K::kDTensor, new_factory<Factory::kZeros>),
      HYPER_ARGS_KERNEL("aten::new_ones", K::kDTensor, new_factory<Factory::kOnes>),
      HYPER_ARGS_KERNEL("aten::new_full", K::kDTensor, new_factory<Factory::kFull>),
      HYPER_ARGS_KERNEL("aten::new_empty", K::kDTensor, new_factory<Factory::kEmpty>),
      HYPER_KERNEL("aten::fill_.Scalar", K::kDTensor, fill_scalar_),
  }};
  return f;
}

}  // namespace hyper::dispatch
