#pragma once
/// \file dispatch/dropout_rules.h
/// The layouts of the dropout family (the kernels: dropout_kernels.h), torch-free.

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// native_dropout of an input of layout `in`: the output keeps `in` with Partial(max/min) made
/// Replicate (Partial(sum/avg) passes: dropout is linear in its input), the mask has every
/// Partial Replicate.
struct DropoutPropagation {
  Layout out;
  Layout mask;
};
DropoutPropagation propagate_dropout(const Layout& in);

/// The noise of alpha / feature dropout over an input of layout `in`: every Partial Replicate;
/// `feature`: one value per (sample, channel), so the dims from 2 on have size 1 and their Shards
/// are Replicate. A RaggedShard placement stays (alpha dropout; the kernel refuses feature dropout
/// of a ragged input).
Layout propagate_noise(const Layout& in, bool feature);

}  // namespace hyper::dispatch
