// dot / vdot of 1-D DTensor tensors as sum(a * b) on the wrapper (see dot_kernels.h).
#include "hyper/tensor/dispatch/dot_kernels.h"

#include <ATen/ATen.h>
#include <torch/library.h>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

void check_operands(const char* name, const at::Tensor& a, const at::Tensor& b) {
  auto where = [&] { return describe_args(name, {arg_layout(a), arg_layout(b)}); };
  HYPER_CHECK_VALUE(a.dim() == 1 && b.dim() == 1, where(), ": 1-D tensors expected, got ",
                    a.dim(), "-D and ", b.dim(), "-D");
  HYPER_CHECK_VALUE(a.size(0) == b.size(0), where(), ": sizes ", a.size(0), " and ", b.size(0),
                    " differ");
  HYPER_CHECK_VALUE(a.scalar_type() == b.scalar_type(), where(), ": dtypes ",
                    c10::toString(a.scalar_type()), " and ", c10::toString(b.scalar_type()),
                    " differ");
}

at::Tensor dot(const at::Tensor& a, const at::Tensor& b) {
  check_operands("aten::dot", a, b);
  return at::sum(a * b);
}

at::Tensor vdot(const at::Tensor& a, const at::Tensor& b) {
  check_operands("aten::vdot", a, b);
  return at::sum(a.conj() * b);
}

}  // namespace

const KernelFamily& dot_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"dot", /*serves_out=*/true, {
      HYPER_KERNEL("aten::dot", K::kDTensor, dot),
      HYPER_KERNEL("aten::vdot", K::kDTensor, vdot),
  }};
  return f;
}

}  // namespace hyper::dispatch
