// masked_fill_ on a Partial self, share by share (see partial_fill_kernels.h).
#include "hyper/tensor/dispatch/partial_fill_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "hyper/core/errors.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper::dispatch {
namespace {

// masked_fill_.Scalar(self, mask, value)
void masked_fill_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t base = stack->size() - 3;
  const at::Tensor self = (*stack)[base].toTensor();
  const at::Tensor mask = (*stack)[base + 1].toTensor();
  bool partial = false;
  if (is_dtensor(self) && !self.is_view())
    for (const auto& q : dtensor_of(self).placements()) partial = partial || q.is_partial();
  for (const auto& q : is_dtensor(self) ? dtensor_of(self).placements() : Placements{})
    partial = partial && !q.is_ragged_shard();
  if (!partial) return run_dtensor_fallback(op, stack);
  const std::string name = op_name_of(op);
  // (`c.detach()` / `c.data()` of a copied view c: the write goes through to c's base, or is
  // refused when it cannot.)
  check_inplace_reaches_base(self, [&] { return describe_args(name, arg_layouts(&(*stack)[base], 3)); });
  const DTensor ref = dtensor_of(self);
  const Layout& l = ref.layout();
  const Layout as_replicate = partials_replicated(l);  // sharding_rule.h
  const Propagation p = propagate_elementwise(
      name, *find_rule(name), {ArgLayout::of(as_replicate), arg_layout(mask)});
  // The in-place rule keeps self's layout; anything else is the fallback's (its refusal).
  if (!p.inputs[0] || *p.inputs[0] != as_replicate) return run_dtensor_fallback(op, stack);
  const at::Tensor lmask = p.inputs[1]          ? local_as(mask, *p.inputs[1], ref)
                           : is_dtensor(mask) ? dtensor_of(mask).to_local()
                                              : mask;
  const at::Scalar value = (*stack)[base + 2].toScalar();
  at::Tensor local = ref.to_local();
  {
    at::AutoDispatchBelowADInplaceOrView below;
    local.masked_fill_(lmask, l.holds_partial_zeros(ref.mesh_index()) ? at::Scalar(0) : value);
  }
  bump_local_version(local);  // written below ADInplaceOrView (internal/dtensor_impl.h)
  write_through(self);        // a copied slice of a sharded dim writes its base (dispatch_args.h)
  torch::jit::drop(*stack, 3);
  stack->push_back(self);
}

}  // namespace

const KernelFamily& partial_fill_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"masked_fill", /*serves_out=*/false, {
      HYPER_BOXED_KERNEL("aten::masked_fill_.Scalar", K::kDTensor, masked_fill_kernel),
  }};
  return f;
}

}  // namespace hyper::dispatch
