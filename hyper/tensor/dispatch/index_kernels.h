#pragma once
/// \file dispatch/index_kernels.h
/// Kernels of the DTensor dispatch key (PrivateUse3) for ops that pick, place or reorder
/// elements along one dim: `gather`, `index_select`, `scatter.src`,
/// `scatter.value`, `scatter_add`, `scatter_reduce.two` and their in-place forms `scatter_.src`,
/// `scatter_.value`, `scatter_add_`, `scatter_reduce_.two`, `sort` / `sort.stable` (values, indices), `topk`, `cumprod`, `logcumsumexp`,
/// `cummax` / `cummin`, `kthvalue` / `median.dim` / `nanmedian.dim` / `mode`, `prod` /
/// `prod.dim_int` (along a sharded dim: each rank's product of its part, those candidates
/// all-gathered, this rank's product times the others', so the local backward is exact with
/// zeros). (`argsort`,
/// `msort` and `take_along_dim` arrive as them.) The layouts are index_rules.h's; the local op
/// runs on the local tensors laid out so, and its output is wrapped with the propagated
/// layout. Where the rule keeps a Shard along the picked dim (a masked Partial: gather /
/// index_select of a self sharded along `dim` beside a Replicate index, a numeric dtype and
/// fewer output than self elements), each rank picks the indices inside its own box, zeros
/// elsewhere, and the output is Partial(sum): the output's size moves when it is reduced,
/// never self's. A scatter / scatter_add into a self sharded along `dim` keeps that Shard the
/// same way (masked): index and src Replicate there, each rank writes only the entries whose
/// index falls in its rows (an add masks the others' src to zeros; an overwrite sends them to
/// one extra row past its own, cut off after), so a few rows added into a row-sharded table
/// move no bytes; an index outside the dim raises ValueError on this path. Indices (sort,
/// topk) are global: the sorted dim is whole on every rank.
///
/// Autograd: the functional ops are registered at AutogradPrivateUse3 as a local op
/// (dispatch/local_op.h) whose backward is the LOCAL op's vector-Jacobian product on the same
/// local tensors, wrapped in the gradient layouts local_op.h derives (an input's Shard kept,
/// its Partial giving Replicate, its Replicate Partial(sum) where an output is sharded). ATen's
/// own formulas would build plain `at::zeros` (sort, topk,
/// index_select) or in-place scatters that change layout. The in-place scatters run at
/// PrivateUse3 only (their autograd formulas, `grad.scatter(dim, index, 0)` and
/// `grad.gather(dim, index)`, call the kernels above). Double backward (create_graph) is
/// refused. Refused: RaggedShard operands, `gather(sparse_grad=true)`, an in-place scatter
/// whose self would need another layout, a stale copied view (as the fallback). `index_add`,
/// `index_put`, `index_copy`, `index_fill` and advanced indexing are compositions of these
/// and `index_reduce` (advanced_index_kernels.h); the legacy `scatter.reduce` has no rule yet.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& index_kernels();

}  // namespace hyper::dispatch
