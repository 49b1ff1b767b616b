#pragma once
/// \file flat_bucket.h
/// The layout of one fully-sharded bucket (docs/fsdp.md): the bucket's parameters packed in
/// parameter order into one flat buffer, which is sharded over the data-parallel ranks as a
/// RaggedShard. Torch-free, inspectable as data; the fsdp layer executes it.
///
///   FlatBucketPlan p = plan_flat_bucket({4096, 64, 4096}, /*ranks=*/3, /*block=*/128);
///   p.rank_units()     // elements per rank: the RaggedShard((0), units) of the flat buffer
///   p.param_range(2, 1) // the flat elements [lo, hi) of parameter 2 that rank 1 holds
///
/// Rank boundaries balance elements (and so bytes: one dtype per bucket) across ranks and
/// fall on block boundaries of the parameter they cut: a boundary inside parameter p lies at
/// offset(p) + k * block, or at a parameter's start or end. So no block of any parameter
/// (a quantization tile of `block` consecutive elements counted from the parameter's first
/// element) straddles two ranks, and nothing is padded: the flat buffer is exactly the
/// parameters' elements.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hyper/core/placement.h"

namespace hyper {

class FlatBucketPlan {
 public:
  FlatBucketPlan() = default;

  int64_t ranks() const { return static_cast<int64_t>(bounds_.size()) - 1; }
  int64_t params() const { return static_cast<int64_t>(numels_.size()); }
  int64_t block() const { return block_; }
  /// Elements of the flat buffer (the parameters' sum).
  int64_t numel() const { return offsets_.empty() ? 0 : offsets_.back(); }
  /// Parameter p's first element in the flat buffer and its element count.
  int64_t offset(int64_t p) const;
  int64_t param_numel(int64_t p) const;
  /// Rank r holds flat elements [bound(r), bound(r + 1)); bound(0) = 0, bound(ranks()) = numel().
  int64_t bound(int64_t r) const;
  /// Elements per rank (some may be 0: a small bucket on many ranks).
  std::vector<int64_t> rank_units() const;
  /// RaggedShard({0}, rank_units()) of the flat buffer of shape [numel()]. ValueError for an
  /// empty bucket (no elements: nothing to shard).
  Placement placement() const;
  /// The elements [lo, hi) of parameter p (counted from its first element) that rank r holds;
  /// lo == hi when none.
  std::pair<int64_t, int64_t> param_range(int64_t p, int64_t r) const;
  /// Parameter p's elements per rank: the units of its own RaggedShard over all its dims.
  std::vector<int64_t> param_units(int64_t p) const;
  /// Largest |rank elements - numel / ranks| over the ranks.
  double max_imbalance() const;

  /// One line per rank and parameter piece, e.g.
  /// `flat bucket: 3 params, 8256 elements, block 128, 3 ranks, units (2816,2688,2752)`.
  std::string to_string() const;

  /// Plans the bucket a text names: `numels=[4096,64,4096] ranks=3 block=128` (keys in any
  /// order, each once; `block` defaults to 1). Throws ValueError naming the text and what is
  /// wrong, or plan_flat_bucket's.
  static FlatBucketPlan from_string(const std::string& text);

 private:
  friend FlatBucketPlan plan_flat_bucket(const std::vector<int64_t>&, int64_t, int64_t);
  std::vector<int64_t> numels_;
  std::vector<int64_t> offsets_;  ///< params() + 1 entries: starts, then numel()
  std::vector<int64_t> bounds_;   ///< ranks() + 1 entries
  int64_t block_ = 1;
};

/// Plans the bucket of parameters with `numels` (in parameter order) over `ranks` ranks with
/// blocks of `block` elements (1: element granularity). Each boundary is the candidate nearest
/// to r * numel / ranks (ties to the lower one); candidates are never more than `block` apart,
/// so every rank holds within `block` elements of numel / ranks. Throws ValueError naming the
/// value: ranks < 1, block < 1, a negative numel, or a total past 2^62.
FlatBucketPlan plan_flat_bucket(const std::vector<int64_t>& numels, int64_t ranks, int64_t block);

}  // namespace hyper
