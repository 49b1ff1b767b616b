#pragma once
/// \file dispatch/advanced_index_rules.h
/// The layouts of general advanced indexing (`index.Tensor` with several index tensors or a
/// mask; the kernel: dispatch/advanced_index_kernels.h), torch-free. Each mesh dim is decided
/// on its own:
/// - self Replicate and every index tensor an integer DTensor of one shape sharded alike
///   (Shard(k)): each rank picks with its own slice of the indices; the output keeps that Shard
///   at the index dims' position (no bytes);
/// - self's Shard of an indexed dim: a masked Partial(sum) (each rank picks the entries whose
///   indices fall in its box, zeros elsewhere) for a numeric self, gathered for a bool one;
/// - self's Shard of another dim: a Shard at that dim's output position;
/// - a Partial passes (picking commutes with every reduce op), but beside a masked dim only
///   sum / avg (max / min are gathered).
///
///   // x[i, j]: x [6,4] (S(0)) on 2 ranks, i and j plain -> in (S(0)), out [n] (P(sum))

#include <cstdint>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// Per mesh dim, the dim k every index tensor is Shard(k) on while `self` is Replicate there
/// (the first rule above), or -1. `indices`: the index tensors (absent entries left out),
/// `integer_dtensors`: whether every one is an integer DTensor (a plain or mask index keeps the
/// indices whole everywhere: all -1).
std::vector<int64_t> local_index_shards(const Layout& self, const std::vector<ArgLayout>& indices,
                                        bool integer_dtensors);

/// The layouts of `self[indices]`.
struct AdvancedIndexLayouts {
  Layout in;   ///< self's layout for the local pick
  Layout out;  ///< the output's
  /// The output dim where the broadcast index dims start: the first indexed dim when the
  /// indexed dims are adjacent, else 0.
  int64_t broadcast_pos = 0;
};

/// `indexed`: per leading self dim, whether an index tensor indexes it (the index list after a
/// mask became one index per dim it covers); `index_shards`: local_index_shards' answer;
/// `numeric`: self is not bool; `out_shape`: the output's global shape (ATen's rules: the
/// broadcast index dims replace adjacent indexed dims in place, or go first when the indexed dims
/// are apart). Throws NotImplementedError for a RaggedShard self (`where` names the call).
AdvancedIndexLayouts advanced_index_layouts(const std::string& where, const Layout& self,
                                            const std::vector<bool>& indexed,
                                            const std::vector<int64_t>& index_shards, bool numeric,
                                            const Shape& out_shape);

}  // namespace hyper::dispatch
