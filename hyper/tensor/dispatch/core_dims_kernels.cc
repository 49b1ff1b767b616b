// Ops over core dims, batched over the others (see core_dims_kernels.h).
#include "hyper/tensor/dispatch/core_dims_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/core/WrapDimMinimal.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/local_op.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"

namespace hyper::dispatch {
namespace {

/// Which dims of argument 0 an op reads whole.
enum class Core { kLast2, kLast3, kAllButFirst, kAll, kDimsArg1 };

std::vector<bool> core_dims(const std::string& name, Core c, const std::vector<c10::IValue>& a,
                            int64_t ndim) {
  std::vector<bool> core(static_cast<size_t>(ndim), false);
  auto from = [&](int64_t first) {
    for (int64_t d = std::max<int64_t>(first, 0); d < ndim; ++d) core[d] = true;
  };
  switch (c) {
    case Core::kLast2: from(ndim - 2); break;
    case Core::kLast3: from(ndim - 3); break;
    case Core::kAllButFirst: from(1); break;
    case Core::kAll: from(0); break;
    case Core::kDimsArg1:
      for (int64_t d : a[1].toIntVector()) {
        HYPER_CHECK_VALUE(d >= -ndim && d < ndim, name, ": dim ", d, " out of range for a tensor of ",
                          ndim, " dims");
        core[static_cast<size_t>(d < 0 ? d + ndim : d)] = true;
      }
      break;
  }
  return core;
}

/// `l` with every Shard of a `core` dim, every RaggedShard and every Partial made Replicate
/// (what the local op reads).
Layout kept_layout(const Layout& l, const std::vector<bool>& core) {
  Placements ps = l.placements();
  for (Placement& p : ps)
    if (!p.is_shard() || core[static_cast<size_t>(p.dim())]) p = Replicate();
  return Layout(l.mesh(), ps, l.shape());
}

/// An output's layout: the input's kept Shards on the same dims (its leading batch dims, with
/// the same local sizes: the op is batched over them), Replicate elsewhere; its global shape
/// is the local one with those dims' global sizes. An empty output without those dims is
/// Replicate.
Layout output_layout(const std::string& name, const Layout& in, const at::Tensor& local_in,
                     const at::Tensor& out) {
  Placements ps = in.placements();
  Shape shape = out.sizes().vec();
  for (Placement& p : ps) {
    if (!p.is_shard()) continue;
    const int64_t d = p.dim();
    if (d < out.dim() && out.size(d) == local_in.size(d)) {
      shape[static_cast<size_t>(d)] = in.shape()[static_cast<size_t>(d)];
      continue;
    }
    // An empty placeholder (svd's U and Vh without compute_uv): the same on every rank.
    HYPER_CHECK_INTERNAL(out.numel() == 0, name,
                         ": an output is not batched over the input's sharded dim ", d);
    p = Replicate();
  }
  return Layout(in.mesh(), ps, shape);
}

/// The local op of one call (see the file comment of core_dims_kernels.h).
template <Core C>
std::shared_ptr<LocalOp> core_call(const c10::OperatorHandle& op, const std::string& name,
                                   const std::vector<c10::IValue>& a) {
  std::vector<size_t> pos;  // the defined tensor arguments
  for (size_t i = 0; i < a.size(); ++i) {
    HYPER_CHECK_INTERNAL(!a[i].isTensorList(), name, ": a tensor list argument");
    if (a[i].isTensor() && a[i].toTensor().defined()) pos.push_back(i);
  }
  auto c = std::make_shared<LocalOp>();
  c->name = name;
  std::vector<at::Tensor> ts;
  for (size_t i : pos) ts.push_back(a[i].toTensor());
  for (const at::Tensor& t : ts)
    if (is_dtensor(t)) {
      c->ref = dtensor_of(t);
      break;
    }
  HYPER_CHECK_INTERNAL(c->ref.defined(), name, ": no DTensor operand");
  const bool batched = pos.size() == 1 && pos[0] == 0 && is_dtensor(ts[0]);
  for (const at::Tensor& t : ts) {
    const ArgLayout al = arg_layout(t);
    const int64_t nd = static_cast<int64_t>(al.shape.size());
    // Batched: argument 0's core dims; otherwise every dim is read whole.
    const std::vector<bool> core = batched ? core_dims(name, C, a, nd)
                                           : std::vector<bool>(static_cast<size_t>(nd), true);
    const Layout whole_or_batch =
        al.layout ? kept_layout(*al.layout, core)
                  : Layout(c->ref.layout().mesh(),
                           Placements(c->ref.layout().placements().size(), Replicate()), al.shape);
    c->ins.push_back(t);
    c->in.push_back(whole_or_batch);
  }
  LocalOp* self = c.get();  // f fills the outputs' layouts once it has seen the outputs
  c->f = [op, name, a, pos, self](const std::vector<at::Tensor>& l) -> std::vector<at::Tensor> {
    torch::jit::Stack stack(a.begin(), a.end());
    for (size_t k = 0; k < pos.size(); ++k) stack[pos[k]] = l[k];
    op.callBoxed(&stack);
    std::vector<at::Tensor> outs;
    self->out.clear();
    self->diff_out.clear();
    for (const c10::IValue& v : stack) {
      HYPER_CHECK_INTERNAL(v.isTensor(), name, ": a result that is not a tensor");
      const at::Tensor t = v.toTensor();
      outs.push_back(t);
      self->out.push_back(output_layout(name, self->in[0], l[0], t));
      self->diff_out.push_back(t.is_floating_point() || t.is_complex());
    }
    return outs;
  };
  return c;
}

/// _linalg_check_errors(info, api_name, is_matrix): the check on the gathered info, so every
/// rank raises the same error or none.
void check_errors_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t base = stack->size() - 3;
  (*stack)[base] = whole((*stack)[base].toTensor());
  at::AutoDispatchBelowADInplaceOrView below;
  op.callBoxed(stack);
}

}  // namespace

const KernelFamily& core_dims_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"core-dims", /*serves_out=*/true, {
      // Matrices (the last two dims).
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_svd", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_eigh", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_eig", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_eigvals", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_det", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_slogdet", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_inv_ex", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_cholesky_ex", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_lu", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_lu_factor_ex", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_ldl_factor_ex", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_qr", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::geqrf", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_matrix_exp", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::cholesky_inverse", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_pinv.atol_rtol_tensor", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::_linalg_solve_ex", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_lstsq", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_lu_solve", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_ldl_solve", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_solve_triangular", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::triangular_solve", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::cholesky_solve", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::lu_unpack", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::ormqr", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_householder_product", core_call<Core::kLast2>),
      HYPER_LOCAL_OP_KERNEL("aten::linalg_cross", core_call<Core::kAll>),
      HYPER_BOXED_KERNEL("aten::_linalg_check_errors", K::kDTensor, check_errors_kernel),
      // FFTs (the dims of argument 1).
      HYPER_LOCAL_OP_KERNEL("aten::_fft_r2c", core_call<Core::kDimsArg1>),
      HYPER_LOCAL_OP_KERNEL("aten::_fft_c2c", core_call<Core::kDimsArg1>),
      HYPER_LOCAL_OP_KERNEL("aten::_fft_c2r", core_call<Core::kDimsArg1>),
      // Images and rows: batched over dim 0.
      HYPER_LOCAL_OP_KERNEL("aten::im2col", core_call<Core::kLast3>),
      HYPER_LOCAL_OP_KERNEL("aten::channel_shuffle", core_call<Core::kAllButFirst>),
      HYPER_LOCAL_OP_KERNEL("aten::native_group_norm", core_call<Core::kAllButFirst>),
      HYPER_LOCAL_OP_KERNEL("aten::_pdist_forward", core_call<Core::kAll>),
      // Several operands: every one whole.
      HYPER_LOCAL_OP_KERNEL("aten::grid_sampler_2d", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::grid_sampler_3d", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::take", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::max_unpool2d", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::max_unpool3d", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::_prelu_kernel", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::max_pool2d_with_indices_backward", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::multi_margin_loss", core_call<Core::kAll>),
      HYPER_LOCAL_OP_KERNEL("aten::multilabel_margin_loss_forward", core_call<Core::kAll>),
  }};
  return f;
}

}  // namespace hyper::dispatch
