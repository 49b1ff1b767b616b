#pragma once
/// \file dispatch/ragged_operand.h
/// A Replicate operand beside a RaggedShard DTensor in an elementwise op (as in the
/// backward into ragged parameters): every rank holds the operand's global value, so its
/// piece of the ragged output's flat interval is cut locally, with no communication.
///
/// Worked example: a bias [4] beside a ragged [6,4] whose rank holds the flat interval [6, 15):
/// the bias expanded to [6,4] covers rows 1..3 of that interval (flat [4, 16)); those rows are
/// flattened (12 elements, a copy of at most the interval plus two rows) and narrowed to
/// [6 - 4, 15 - 4) = [2, 11): 9 elements, the local tensor's length.

#include <ATen/ATen.h>

#include "hyper/core/errors.h"
#include "hyper/core/layout.h"

namespace hyper::dispatch {

/// Rank `idx`'s piece of `full` (a tensor with at least one dim that broadcasts to the global
/// shape of the ragged layout `target`) as a 1-D tensor of the rank's flat interval
/// (`target.ragged_interval(idx)`, in the row-major order of `target.ragged_box(idx)`, the
/// whole tensor when no Shard is beside the RaggedShard). A view when `full` has `target`'s
/// shape and one dim; otherwise a copy of at most the interval plus two rows of the box's dim 0.
inline at::Tensor ragged_cut(const at::Tensor& full, const Layout& target, int64_t idx) {
  HYPER_CHECK_INTERNAL(target.is_ragged() && full.dim() > 0, "ragged_cut: target ",
                       target.to_string(), " and an operand of ", full.dim(), " dims");
  const Interval iv = target.ragged_interval(idx);
  const Box box = target.ragged_box(idx);
  at::Tensor e = full.expand(target.shape());
  for (int64_t d = 0; d < box.rank(); ++d)
    if (box.sizes[d] != e.size(d)) e = e.narrow(d, box.offsets[d], box.sizes[d]);
  if (e.dim() == 1) return e.narrow(0, iv.start, iv.size());
  const int64_t row = box.sizes[0] == 0 ? 0 : box.numel() / box.sizes[0];
  if (row == 0 || iv.empty()) return at::empty({0}, full.options());
  const int64_t r0 = iv.start / row, r1 = (iv.end + row - 1) / row;
  return e.narrow(0, r0, r1 - r0).reshape({-1}).narrow(0, iv.start - r0 * row, iv.size());
}

}  // namespace hyper::dispatch
