#pragma once
/// \file dispatch/decomposition_rules.h
/// The layouts the decompositions (dispatch/decompositions.h) choose themselves, torch-free;
/// everything else they compute is decided by the rules of the ops they call.

#include <cstdint>
#include <optional>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// The layout of per-rank counts of the elements of a tensor laid out as `l` (histc, bincount,
/// unique's counts), of global shape `shape`: each rank counts its own elements, so a Shard /
/// RaggedShard mesh dim gives Partial(sum) and any other Replicate.
///   mesh=[2,2] (S(0), R) -> (P(sum), R)
Layout counts_layout(const Layout& l, const std::vector<int64_t>& shape);

/// The placements of a block of constant_pad_nd's value padded to `x` (layout `x`) along `d`:
/// x's, with a Shard of `d` Replicate, so that cat keeps x's other Shards and its Partial (the
/// value on coordinate 0 of a Partial(sum)); nullopt for a RaggedShard x (the block stays
/// Replicate and cat's rule decides).
///   x (S(0), S(1)), d = 1 -> (S(0), R)
std::optional<Placements> pad_block_placements(const Layout& x, int64_t d);

}  // namespace hyper::dispatch
