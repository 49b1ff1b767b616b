#pragma once
/// \file local_exec.h
/// The local half of executing a core RedistributePlan on ATen tensors: slicing a
/// global tensor into one rank's local storage, packing the pieces a rank sends into
/// one buffer, and unpacking received buffers plus local pieces into the target local
/// storage. No communication here: the DTensor layer moves the packed buffer with one
/// all_to_all_v; tests simulate every rank in one process by passing buffers in memory.
///
/// Local storage convention (hyper/core/layout.h): the row-major contents of the boxes
/// of `Layout::local_region(index)`, concatenated. A non-ragged rank's storage is one
/// contiguous tensor of `Layout::local_shape(index)`; a ragged rank's is 1-D.
///
/// The twin of hyper/core/plan_executor.h (std::vector), which is the oracle in tests.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "hyper/core/layout.h"
#include "hyper/core/redistribute_plan.h"

namespace hyper {

/// The local storage of mesh index `index` under `layout`, cut from the global tensor
/// `global` (every rank gets plain values: Partial placements are treated as Replicate).
/// Shard boxes are narrowed from `global`; ragged intervals are sliced from its flat
/// view. The result is a fresh contiguous tensor (never aliases `global`), with shape
/// `layout.local_shape(index)`. Differentiable (narrow + clone).
/// Throws ValueError if `global`'s shape is not `layout.shape()`.
at::Tensor slice_local(const at::Tensor& global, const Layout& layout, int64_t index);

/// A strided view of `local` (the storage of mesh index `index` under `layout`) onto the
/// global box `box`, which must lie inside region box `region` of that rank. The view
/// has shape `box.sizes`.
at::Tensor region_view(const at::Tensor& local, const std::vector<FlatBox>& regions,
                       int64_t region, const Box& box);

/// Everything mesh index `index` sends under `plan`, packed into one contiguous 1-D
/// buffer: peers in ascending order, each peer's pieces in plan order, each piece in
/// row-major order. Split sizes (elements) are `plan.send_counts(index)`.
/// `local` is the rank's source local storage (any shape with the right numel; made
/// contiguous if needed). Throws ValueError if its numel does not match the source layout.
at::Tensor pack(const RedistributePlan& plan, int64_t index, const at::Tensor& local);

/// The same buffer split per peer: out[peer] is a 1-D view (empty for itself and for
/// peers it sends nothing).
std::vector<at::Tensor> pack_per_peer(const RedistributePlan& plan, int64_t index,
                                      const at::Tensor& local);

/// The target local storage of mesh index `index`: local pieces are copied from `local`
/// (the source storage), remote pieces are read from `received` (1-D, the concatenation
/// over peers in ascending order of what each sent, split by `plan.recv_counts(index)`).
/// Assign pieces are copied, reduce pieces combined with the plan's op (sum: add, max:
/// maximum, min: minimum, avg: add then divide by reduce_count); zero-filled ranks get
/// zeros. Returns a new contiguous tensor of shape `plan.dst.local_shape(index)`.
/// Throws ValueError if `local` or `received` has the wrong numel.
at::Tensor unpack(const RedistributePlan& plan, int64_t index, const at::Tensor& local,
                  const at::Tensor& received);

/// unpack() with the received buffer given per peer (received[peer], 1-D).
at::Tensor unpack_per_peer(const RedistributePlan& plan, int64_t index, const at::Tensor& local,
                           const std::vector<at::Tensor>& received);

/// Executes `plan` over all ranks in one process (tests, single-process tools): packs
/// every rank's sends, hands them over in memory, unpacks. `locals[i]` is mesh index
/// i's source storage; returns the target storages.
std::vector<at::Tensor> execute_plan_locally(const RedistributePlan& plan,
                                             const std::vector<at::Tensor>& locals);

}  // namespace hyper
