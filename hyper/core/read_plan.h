#pragma once
/// \file read_plan.h
/// The checkpoint read plan: saved chunks (N-D boxes stored row-major) intersected
/// with a target rank's local region give read items — which chunk, where inside
/// it, and where in the rank's local storage. Torch-free; the dcp layer executes it.

#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"

namespace hyper {

/// One rectangular read: `box` (global) lies in saved chunk `chunk` and in box
/// `dst_region` of the target local region.
struct ReadItem {
  int64_t chunk = 0;
  Box box;
  Box src;              ///< `box` relative to the chunk's origin
  int64_t dst_region = 0;
  Box dst;              ///< `box` relative to the target region box's origin
  std::string to_string() const;
};

/// A contiguous run: `length` elements from element offset `src_offset` of a chunk's
/// row-major data to element offset `dst_offset` of the local flat storage.
struct ReadRun {
  int64_t chunk = 0;
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t length = 0;
  bool operator==(const ReadRun& o) const {
    return chunk == o.chunk && src_offset == o.src_offset && dst_offset == o.dst_offset &&
           length == o.length;
  }
};

/// Checks that `chunks` lie inside `shape`, do not overlap and together cover it.
/// Throws ValueError naming the offending chunk(s) or the number of missing elements; the
/// same message as checking chunk by chunk in order (its own checks, then overlap with every
/// earlier chunk: the overlapping pair with the smallest later index, then the smallest
/// earlier one), then the volume.
///
/// Bounded work on any input (hostile .metadata): rank 0 and 2 are O(n log^2 n). Rank 1 and
/// rank >= 3 (n non-empty chunks, rank r, B = internal::tile_check_budget(n, r) =
/// 32 n r + 2^16) first run a sweep limited to 8 B coordinate comparisons (grids and ragged
/// layouts need far fewer), then, if needed, an exact split method limited to B units of
/// O(log n) work each (rank 1: never short of budget). If both give up, throws ValueError
/// "chunk layout of N non-empty boxes in rank R too irregular to check within ...": such a
/// layout is refused, never accepted unchecked. Total: O(r n log n + B log^2 n) time, O(n r)
/// memory. Layouts hyper writes (Shard/Replicate grids, RaggedShard staircases) never reach
/// the refusal.
void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks);

namespace internal {
/// check_chunks_tile's work budget for n non-empty chunks of rank r: 32 n max(r, 1) + 2^16.
int64_t tile_check_budget(int64_t boxes, int64_t rank);
/// check_chunks_tile with explicit budgets (coordinate units) for its sweep and for its split
/// method, so tests can force the split method (sweep_budget 0) or the refusal; groups of at
/// most `small_group` chunks are compared pair by pair in the split method (0: never).
void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks, int64_t sweep_budget,
                       int64_t split_budget, int64_t small_group = 8);
}  // namespace internal

/// Read items for a target local region (ordered by target box, then chunk index).
/// Throws ValueError if some target element is in no chunk (naming the target box and
/// how many elements are missing) or if ranks differ.
std::vector<ReadItem> plan_read(const std::vector<Box>& chunks,
                                const std::vector<FlatBox>& target_region);

/// The same reads as contiguous runs, adjacent runs merged when both sides continue.
std::vector<ReadRun> read_runs(const std::vector<Box>& chunks,
                               const std::vector<FlatBox>& target_region);

}  // namespace hyper
