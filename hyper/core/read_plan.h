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
/// Throws ValueError naming the offending chunk(s) or the number of missing elements.
void check_chunks_tile(const Shape& shape, const std::vector<Box>& chunks);

/// Read items for a target local region (ordered by target box, then chunk index).
/// Throws ValueError if some target element is in no chunk (naming the target box and
/// how many elements are missing) or if ranks differ.
std::vector<ReadItem> plan_read(const std::vector<Box>& chunks,
                                const std::vector<FlatBox>& target_region);

/// The same reads as contiguous runs, adjacent runs merged when both sides continue.
std::vector<ReadRun> read_runs(const std::vector<Box>& chunks,
                               const std::vector<FlatBox>& target_region);

}  // namespace hyper
