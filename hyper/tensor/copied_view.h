#pragma once
/// \file copied_view.h
/// Queries on views of DTensor tensors whose local tensor is a copy (docs/dtensor.md, views):
/// a slice or select of a dim some mesh dim shards gathers that dim, so the view's local is a
/// copy of part of its base's, kept in step with the base by hyper (writes go through, reads
/// after a write to the base are refused as stale).

#include <ATen/core/Tensor.h>

namespace hyper {

/// True when `t` is a DTensor tensor (hyper::as_tensor) whose local tensor is such a copy:
/// a view made by slicing a sharded dim, a view merging a sharded inner dim, a piece of
/// split / unbind along a sharded dim, their detach() or `.data()`. False for a plain tensor,
/// an undefined one and every other DTensor tensor (views that alias their base's local).
/// A copy is tied to its base: `as_tensor(as_dtensor(t))` makes a tensor of its own from the
/// same local (no bytes), which nothing writes back and nothing marks stale.
bool is_copied_view(const at::Tensor& t);

}  // namespace hyper
