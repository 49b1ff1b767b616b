#pragma once
/// \file dispatch/local_op.h
/// An op on DTensor tensors computed as ONE local op on the operands' local tensors, laid out
/// as a rule decided, with a local backward. The kernels of dispatch/index_kernels.h
/// (gather, index_select, scatter, sort, topk, cumprod) and dispatch/matmul_kernels.h's matmul
/// with several sharded batch dims use it.
///
/// With `record` (the op's kernel at AutogradPrivateUse3, grad mode on) it is one
/// torch::autograd::Function: the forward runs the local op under local autograd (the
/// operands that require grad as local leaves) and keeps that local graph; the backward is
/// the local op's vector-Jacobian product on it, each operand's gradient wrapped in the layout
/// derived from the forward's: an operand's Shard is kept, its Partial gives Replicate (the
/// gradient of the global tensor), and its Replicate gives Partial(sum) on a mesh dim where an
/// output is sharded (each rank's part contributes), the output's Partial(sum/avg) where an
/// output is such a Partial (each rank's share contributes: conv(P(sum) x, R w)) and
/// Replicate elsewhere. A plain operand
/// that requires grad gets the global gradient (every rank the same). Every rank returns a
/// gradient (an empty shard's is zeros), so later collectives on it match. A backward that
/// does not retain the graph frees the local graph and the local outputs (as PyTorch frees a
/// node's saved tensors); another backward through the op is then a ValueError. Double backward
/// (create_graph) is refused with NotImplementedError naming the op and layouts. Without
/// `record`: the local op below autograd, the outputs wrapped.
///
/// Exact whenever the local op on each rank's locals computes that rank's part of the output
/// layouts (the rule's job): then the local VJPs are the rank's parts of the global VJP.

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hyper/core/layout.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::dispatch {

/// What one call decided.
struct LocalOp {
  std::string name;              ///< the op, for messages ("aten::gather")
  std::vector<at::Tensor> ins;   ///< tensor operands: DTensor wrappers or plain tensors
  std::vector<Layout> in;        ///< the layout each is used in (a plain one: Replicate-made)
  std::vector<Layout> out;       ///< per output
  std::vector<bool> diff_out;    ///< which outputs carry gradients (not indices)
  /// The local op: the operands' locals (laid out as `in`) to the outputs' locals.
  std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)> f;
  DTensor ref;                   ///< a DTensor operand (mesh, rank, plan cache)
};

/// Runs `op` (see the file comment); returns the outputs as DTensor tensors.
std::vector<at::Tensor> run_local_op(std::shared_ptr<LocalOp> op, bool record);

}  // namespace hyper::dispatch
