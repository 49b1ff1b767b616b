#pragma once
/// \file dispatch/core_dims_kernels.h
/// Ops that read whole "core" dims of their input at once and are batched over the others:
/// linear algebra on matrices (the last two dims: svd, eigh, eig, eigvals, det, slogdet, inv,
/// cholesky, lu / lu_factor, ldl_factor, qr, geqrf, matrix_exp, pinv, cholesky_inverse), the
/// FFTs (the `dim` argument's dims), im2col (the last three), channel_shuffle (all but the
/// first) and pdist (both). Each is computed as ONE local op (dispatch/local_op.h):
/// - with argument 0 the only tensor: a Shard of a batch dim is kept (each rank computes its
///   batches, no bytes), a Shard of a core dim and a RaggedShard are gathered, a Partial is
///   reduced; each output is sharded as the input on the batch dims it keeps (an output's
///   leading dims are the input's batch dims) and Replicate elsewhere;
/// - with several tensor operands (solve, lstsq, lu_solve, ldl_solve, solve_triangular,
///   triangular_solve, cholesky_solve, lu_unpack, ormqr, householder_product, cross, pinv with
///   tensor tolerances, grid_sampler, take, max_unpool, prelu, max_pool2d_with_indices_backward
///   called directly, multi_margin / multilabel_margin losses): every operand gathered and reduced (Replicate), the op run on
///   the global tensors on every rank, the outputs Replicate.
/// Gradients: the local op's own backward (local_op.h), so they equal the single-device ones.
/// `_linalg_check_errors(info)` (what linalg.inv / cholesky / solve call after their `_ex`
/// op) checks the gathered info, so every rank raises the same error or none.
/// Not here: ops that update buffers in place (batch_norm's running statistics): refused.

namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h).
const KernelFamily& core_dims_kernels();

}  // namespace hyper::dispatch
