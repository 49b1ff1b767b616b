#pragma once
/// \file collectives.h
/// Variable-length and reducing collectives on a 1-D hyper::comm::Group.
///
/// Common rules:
/// - Tensors are CPU tensors of any dtype LibTorch has (bool, bfloat16, half, complex, ...)
///   for Gloo groups; non-contiguous inputs are made contiguous first.
/// - Sizes and splits count rows (dim 0); the trailing dims must agree across ranks.
///   Zero-row contributions are legal and take part normally.
/// - Every collective must be called by every member of the group, in the same order.
/// - `*_async` returns a comm::Work at once; the plain form is `*_async(...).wait()`.
/// - Argument errors throw hyper::ValueError before anything is sent; failures on the wire
///   throw comm::CommError from wait(), prefixed `<collective> on group [..] (rank r): `.
/// Algorithms and bytes on the wire: docs/comm.md.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/group.h"
#include "hyper/comm/work.h"

namespace hyper::comm {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
/// "sum", "avg", "max", "min"; throws hyper::ValueError otherwise.
ReduceOp reduce_op_from_string(const std::string& name);
const char* to_string(ReduceOp op);

/// Concatenation along dim 0 of every rank's `input`, in group-rank order.
/// `sizes` (rows per rank), when the caller knows them, saves a small blocking exchange of
/// row counts; without it the exchange also checks that row sizes and dtypes agree.
/// `output`, when given, is where the rows land and what the work returns (contiguous, the
/// input's dtype, device and row shape, sum(sizes) rows, not sharing the input's storage):
/// a caller that already holds the result's buffer saves an allocation and a copy. Throws
/// ValueError naming what does not match.
Work all_gather_v_async(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes = std::nullopt,
                        std::optional<at::Tensor> output = std::nullopt);
at::Tensor all_gather_v(const at::Tensor& input, const Group& group,
                        std::optional<std::vector<int64_t>> sizes = std::nullopt);

/// Rank r sends rows [sum(input_splits[:j]), +input_splits[j]) of `input` to rank j and
/// receives output_splits[j] rows from rank j; the output concatenates them in rank order.
/// Precondition (not checked on the wire): input_splits[j] on rank r == output_splits[r]
/// on rank j.
/// `output`, when given, is the receive buffer (contiguous, input's dtype and row shape,
/// sum(output_splits) rows) and is what the work returns: a caller that knows where the
/// received rows belong saves a copy. Throws ValueError naming what does not match.
Work all_to_all_v_async(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group,
                        std::optional<at::Tensor> output = std::nullopt);
at::Tensor all_to_all_v(const at::Tensor& input, const std::vector<int64_t>& input_splits,
                        const std::vector<int64_t>& output_splits, const Group& group);

/// Rank `src` (group rank) sends rows of `input` split by `splits` to each rank; returns this
/// rank's piece. On other ranks `input` only supplies dtype, device and trailing shape (its
/// rows are ignored; pass e.g. `at::empty({0, d})`). All sends are in flight at once.
Work scatter_v_async(const at::Tensor& input, const std::vector<int64_t>& splits, int src,
                     const Group& group);
at::Tensor scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits, int src,
                     const Group& group);

/// Elementwise reduction over ranks; returns a new tensor (the input is not modified).
/// avg = sum then divide by the group size; avg of integer or bool tensors throws
/// hyper::ValueError (no silent floor). Bool: sum = logical or. `output`, when given, is where
/// the result lands and what the work returns (contiguous, the tensor's dtype, device and
/// shape, not sharing its storage).
Work all_reduce_async(const at::Tensor& tensor, ReduceOp op, const Group& group,
                      std::optional<at::Tensor> output = std::nullopt);
at::Tensor all_reduce(const at::Tensor& tensor, ReduceOp op, const Group& group);

/// `input` holds sum(splits) rows on every rank; rank r receives the reduction over ranks
/// of rows [sum(splits[:r]), +splits[r]). The reduction runs locally in rank order
/// (deterministic, bitwise identical for any timing).
Work reduce_scatter_v_async(const at::Tensor& input, const std::vector<int64_t>& splits,
                            ReduceOp op, const Group& group);
at::Tensor reduce_scatter_v(const at::Tensor& input, const std::vector<int64_t>& splits,
                            ReduceOp op, const Group& group);

/// reduce_scatter_v whose input is read where it lies, in pieces: `pieces[j]` are the 1-D
/// contiguous tensors whose concatenation is what this rank contributes to rank j (no staging
/// copy of them is made; each piece travels as its own message). Rank r receives the
/// reduction over ranks of their pieces[r], in rank order (the same bits as reduce_scatter_v),
/// in `output` when given (contiguous, 1-D, the pieces' dtype and device, sum of pieces[r]'s
/// sizes elements) or in a new tensor. An output of a wider floating dtype than floating
/// pieces accumulates in its own dtype (bf16 gradients summed in fp32: the pieces travel in
/// bf16). Precondition (not checked on the wire): pieces[j] has
/// the same number and sizes of pieces on every rank. ValueError for a list of another
/// length, a piece that is undefined, not 1-D or not contiguous, pieces of different dtypes
/// or devices, or a bad output. The pieces must stay unmodified until the work finishes; the
/// output doubles as the receive buffer of one peer's part (only n - 2 parts more are
/// allocated), so after a failure its contents are unspecified.
Work reduce_scatter_pieces_async(const std::vector<std::vector<at::Tensor>>& pieces, ReduceOp op,
                                 const Group& group, std::optional<at::Tensor> output = std::nullopt);

/// In place: every rank's `tensor` receives rank `src`'s values; returns `tensor`.
Work broadcast_async(const at::Tensor& tensor, int src, const Group& group);
at::Tensor broadcast(const at::Tensor& tensor, int src, const Group& group);

/// How all_gather_v moves data (docs/comm.md has the measurements behind the default).
enum class AllGatherRoute {
  kAuto,         ///< Gloo ring up to 64 KiB of output on hyper's Gloo groups, else p2p
  kPointToPoint, ///< isend the input to every peer, irecv every peer's rows; all in flight
  kGlooRing,     ///< Gloo's native gloo::allgatherv (ring) on the group's gloo::Context
};
/// Per-group setting (all members must choose the same). Throws
/// hyper::NotImplementedError for kGlooRing on a group that is not hyper's Gloo group.
void set_all_gather_route(const Group& group, AllGatherRoute route);

}  // namespace hyper::comm
