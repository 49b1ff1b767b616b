// masked_fill_ on a Partial self, share by share (see partial_fill_kernels.h).
#include "hyper/tensor/dispatch/partial_fill_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "hyper/core/errors.h"
#include "hyper/tensor/internal/dispatch_args.h"
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
    for (const auto& q : as_dtensor(self).placements()) partial = partial || q.is_partial();
  for (const auto& q : is_dtensor(self) ? as_dtensor(self).placements() : Placements{})
    partial = partial && !q.is_ragged_shard();
  if (!partial) return run_dtensor_fallback(op, stack);
  const std::string name = op_name_of(op);
  check_no_stale_copy(name, &(*stack)[base], 3);  // dispatch_args.h
  // (`c.detach()` / `c.data()` of a copied view c: the write goes through to c's base, or is
  // refused when it cannot.)
  check_inplace_reaches_base(self, [&] { return describe_args(name, arg_layouts(&(*stack)[base], 3)); });
  const DTensor ref = as_dtensor(self);
  const Layout& l = ref.layout();
  const Layout as_replicate = partials_replicated(l);  // sharding_rule.h
  const Propagation p = propagate_elementwise(
      name, *find_rule(name), {ArgLayout::of(as_replicate), arg_layout(mask)});
  // The in-place rule keeps self's layout; anything else is the fallback's (its refusal).
  if (!p.inputs[0] || *p.inputs[0] != as_replicate) return run_dtensor_fallback(op, stack);
  const at::Tensor lmask = p.inputs[1]          ? local_as(mask, *p.inputs[1], ref)
                           : is_dtensor(mask) ? as_dtensor(mask).to_local()
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

std::vector<std::string> partial_fill_kernel_names() { return {"aten::masked_fill_.Scalar"}; }

void register_partial_fill_kernels(torch::Library& aten) {
  for (const auto& n : partial_fill_kernel_names())
    aten.impl(n.substr(n.find("::") + 2).c_str(),
              torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&masked_fill_kernel>>());
}

}  // namespace hyper::dispatch
