// cumsum / flip / roll / tril / triu of DTensor tensors (see dim_local_kernels.h).
#include "hyper/tensor/dispatch/dim_local_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <functional>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/index_rules.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/internal/dtensor_impl.h"

namespace hyper::dispatch {
namespace {

/// tril / triu (and in place): the kept triangle is a condition on the GLOBAL row and column,
/// col - row <= k (tril) or >= k (triu), which on a rank's box is the local triangle of
/// diagonal k + row offset - col offset. Any layout but RaggedShard is kept, no bytes: every
/// Shard (the last two dims included, uneven or empty) by that shift, Replicate as is, and
/// every Partial, since a zeroed position is 0 in every share (its sum, avg, max and min: 0).
void triangle_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const size_t base = stack->size() - 2;
  const at::Tensor self = (*stack)[base].toTensor();
  const DTensor d = dtensor_of(self);
  const Layout& l = d.layout();
  auto where = [&] { return describe_args(name, {ArgLayout::of(l)}); };
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where(),
                          ": tril / triu of a RaggedShard DTensor is not implemented");
  HYPER_CHECK_VALUE(l.shape().size() >= 2, where(), ": ", short_name(name),
                    " needs a tensor of at least 2 dimensions, got ", l.shape().size());
  const auto& alias = op.schema().arguments()[0].alias_info();
  const bool inplace = alias && alias->isWrite();
  if (inplace) check_inplace_reaches_base(self, where);
  const Box box = l.local_box(d.mesh_index());
  const size_t r = box.offsets.size() - 2;
  const int64_t k = (*stack)[base + 1].toInt() + box.offsets[r] - box.offsets[r + 1];
  at::Tensor local = d.to_local();
  (*stack)[base] = local;
  (*stack)[base + 1] = k;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.callBoxed(stack);  // the op itself on the local triangle (in place: into the local)
  }
  const at::Tensor out = stack->back().toTensor();
  stack->pop_back();
  if (inplace) {
    bump_local_version(local);  // written below ADInplaceOrView (internal/dtensor_impl.h)
    write_through(self);        // a copied slice of a sharded dim writes its base
    stack->push_back(self);
  } else {
    stack->push_back(wrap(out, d, l));
  }
}

/// The dims cumsum(self, dim), flip(self, dims) and roll(self, shifts, dims) run along (`args`:
/// the call's arguments; `rank`: self's); roll without dims rolls the flattened tensor.
std::vector<int64_t> cumsum_dims(const c10::IValue* args, int64_t) {
  return {args[1].toInt()};
}
std::vector<int64_t> flip_dims(const c10::IValue* args, int64_t) {
  return args[1].toIntVector();
}
std::vector<int64_t> roll_dims(const c10::IValue* args, int64_t rank) {
  std::vector<int64_t> dims = args[2].toIntVector();
  if (dims.empty())
    for (int64_t k = 0; k < rank; ++k) dims.push_back(k);
  return dims;
}

/// An op computed along `Dims` of its input: those dims gathered (a Shard of another dim and a
/// Partial(sum/avg) kept), then the op on the local.
template <std::vector<int64_t> (*Dims)(const c10::IValue*, int64_t)>
void dim_local_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const size_t n = op.schema().arguments().size();
  const size_t base = stack->size() - n;
  auto arg = [&](size_t i) -> c10::IValue& { return (*stack)[base + i]; };
  const at::Tensor self = arg(0).toTensor();
  const DTensor d = dtensor_of(self);
  const Layout& l = d.layout();
  auto where = [&] { return describe_args(name, {ArgLayout::of(l)}); };
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where(),
                          ": cumsum / flip / roll of a RaggedShard DTensor is not implemented");
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  const std::vector<int64_t> dims = Dims(&(*stack)[base], rank);
  const Layout target =  // index_rules.h: linear, so a Partial(sum/avg) passes
      *propagate_along_dims(name, ArgLayout::of(l), dims, /*linear=*/true).inputs[0];
  arg(0) = static_cast<const DTensorImpl*>(self.unsafeGetTensorImpl())->local_as(target, /*memo=*/true);
  {
    at::AutoDispatchBelowADInplaceOrView below;
    op.callBoxed(stack);
  }
  const at::Tensor out = stack->back().toTensor();
  stack->pop_back();
  stack->push_back(wrap(out, d, target));  // the shape is the input's (dispatch_args.h)
}

}  // namespace

const KernelFamily& dim_local_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"dim-local", /*serves_out=*/true, {
      HYPER_BOXED_KERNEL("aten::cumsum", K::kDTensor, dim_local_kernel<cumsum_dims>),
      HYPER_BOXED_KERNEL("aten::flip", K::kDTensor, dim_local_kernel<flip_dims>),
      HYPER_BOXED_KERNEL("aten::roll", K::kDTensor, dim_local_kernel<roll_dims>),
      HYPER_BOXED_KERNEL("aten::tril", K::kDTensor, triangle_kernel),
      HYPER_BOXED_KERNEL("aten::triu", K::kDTensor, triangle_kernel),
      HYPER_BOXED_KERNEL("aten::tril_", K::kDTensor, triangle_kernel),
      HYPER_BOXED_KERNEL("aten::triu_", K::kDTensor, triangle_kernel),
  }};
  return f;
}

}  // namespace hyper::dispatch
