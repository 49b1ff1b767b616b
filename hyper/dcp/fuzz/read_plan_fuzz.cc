// libFuzzer target for the checkpoint read plan (hyper/core/read_plan.h): the tiling check of
// saved chunks (check_chunks_tile, what Metadata::from_json runs on every tensor) and the read
// runs of a target region (read_runs, what CheckpointReader::read executes).
//
// The input picks a shape of rank 0..4, chunk boxes and target boxes. Two modes (first byte):
// - small (dims <= 6): chunks from a grid of split points, then perturbed (a box moved, grown,
//   dropped, duplicated or replaced), so both tilings and near-tilings are common.
//   check_chunks_tile must agree with a brute-force count of how often each element is covered
//   (valid iff every chunk is inside the shape with no negative extent and every element is
//   covered exactly once). For a valid tiling, target boxes inside the shape with disjoint local
//   ranges are planned, and the runs are executed on chunk buffers that hold each element's
//   global index: every run lies inside its chunk and inside the target's local ranges, no two
//   runs write the same element, the runs' lengths sum to the region's volume, and every target
//   element receives exactly its own global element.
// - hostile: any int64 for the shape, the chunks and the target boxes (negative, huge, sums
//   that overflow). check_chunks_tile must answer with a ValueError or accept; accepted chunks
//   are planned against target boxes that pass the checks CheckpointReader::read makes.
// Any exception other than hyper::ValueError, a sanitizer report (ASan, UBSan: overflow is
// UB) or a broken invariant (__builtin_trap) is a bug.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/geometry.h"
#include "hyper/dcp/fuzz/fuzz_util.h"
#include "hyper/core/read_plan.h"

namespace {

using hyper::Box;
using hyper::FlatBox;
using hyper::Shape;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

int64_t volume(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

using hyper::fuzz::flat;
using hyper::fuzz::for_each_index;

// The brute-force tiling check of small inputs.
bool brute_tiles(const Shape& shape, const std::vector<Box>& chunks) {
  const Box whole = Box::full(shape);
  for (const Box& c : chunks) {
    if (c.rank() != whole.rank() || c.offsets.size() != c.sizes.size()) return false;
    for (size_t d = 0; d < c.sizes.size(); ++d)
      if (c.sizes[d] < 0 || c.offsets[d] < 0) return false;
    if (volume(c.sizes) == 0) continue;  // an empty box lies inside everything
    for (size_t d = 0; d < c.sizes.size(); ++d)
      if (c.offsets[d] + c.sizes[d] > shape[d]) return false;
  }
  std::vector<int> count(static_cast<size_t>(volume(shape)), 0);
  for (const Box& c : chunks)
    for_each_index(c, [&](const std::vector<int64_t>& i) { ++count[flat(i, shape)]; });
  return std::all_of(count.begin(), count.end(), [](int n) { return n == 1; });
}

Box small_box(FuzzedDataProvider& in, const Shape& shape) {
  Box b;
  for (int64_t d : shape) {
    const int64_t o = in.ConsumeIntegralInRange<int64_t>(0, d);
    b.offsets.push_back(o);
    b.sizes.push_back(in.ConsumeIntegralInRange<int64_t>(0, d - o));
  }
  return b;
}

void small_mode(FuzzedDataProvider& in) {
  const int rank = in.ConsumeIntegralInRange<int>(0, 4);
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(in.ConsumeIntegralInRange<int64_t>(0, 6));
  // A grid of split points per dim.
  std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    cuts[d] = {0, shape[d]};
    const int k = in.ConsumeIntegralInRange<int>(0, 3);
    for (int i = 0; i < k; ++i) cuts[d].push_back(in.ConsumeIntegralInRange<int64_t>(0, shape[d]));
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    if (cuts[d].size() < 2) cuts[d] = {0, 0};  // zero-size dim: one empty piece
  }
  std::vector<Box> chunks = hyper::fuzz::grid_boxes(cuts);
  std::reverse(chunks.begin(), chunks.end());  // not only in row-major order
  const int edits = in.ConsumeIntegralInRange<int>(0, 3);
  for (int e = 0; e < edits && !chunks.empty(); ++e) {
    const size_t i = in.ConsumeIntegralInRange<size_t>(0, chunks.size() - 1);
    switch (in.ConsumeIntegralInRange<int>(0, 5)) {
      case 0: chunks.erase(chunks.begin() + static_cast<std::ptrdiff_t>(i)); break;
      case 1: chunks.push_back(chunks[i]); break;
      case 2: chunks[i] = small_box(in, shape); break;
      case 3:
        if (rank > 0) chunks[i].offsets[in.ConsumeIntegralInRange<int>(0, rank - 1)] +=
            in.ConsumeIntegralInRange<int64_t>(-2, 2);
        break;
      case 4:
        if (rank > 0) chunks[i].sizes[in.ConsumeIntegralInRange<int>(0, rank - 1)] +=
            in.ConsumeIntegralInRange<int64_t>(-2, 2);
        break;
      case 5: std::swap(chunks[i], chunks.back()); break;
    }
  }
  const bool expected = brute_tiles(shape, chunks);
  bool accepted = true;
  try {
    hyper::check_chunks_tile(shape, chunks);
  } catch (const hyper::ValueError&) {
    accepted = false;
  }
  check(accepted == expected);
  if (!accepted) return;

  // Target boxes inside the shape, with disjoint local ranges (gaps between them).
  std::vector<FlatBox> region;
  int64_t local = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int nt = in.ConsumeIntegralInRange<int>(0, 4);
  for (int t = 0; t < nt; ++t) {
    FlatBox fb{small_box(in, shape), local};
    local = fb.local_end() + in.ConsumeIntegralInRange<int64_t>(0, 2);
    region.push_back(fb);
  }
  const int64_t dst_size = local;
  const std::vector<hyper::ReadRun> runs = hyper::read_runs(chunks, region);

  // Chunk buffers hold the global row-major index of each of their elements.
  std::vector<std::vector<int64_t>> bufs;
  for (const Box& c : chunks) {
    std::vector<int64_t> b;
    for_each_index(c, [&](const std::vector<int64_t>& i) { b.push_back(flat(i, shape)); });
    bufs.push_back(std::move(b));
  }
  std::vector<int64_t> dst(static_cast<size_t>(dst_size), -1);
  std::vector<int> writes(static_cast<size_t>(dst_size), 0);
  int64_t total = 0;
  for (const auto& r : runs) {
    check(r.chunk >= 0 && r.chunk < static_cast<int64_t>(chunks.size()));
    const auto& src = bufs[static_cast<size_t>(r.chunk)];
    check(r.length > 0 && r.src_offset >= 0 &&
          r.src_offset + r.length <= static_cast<int64_t>(src.size()));
    check(r.dst_offset >= 0 && r.dst_offset + r.length <= dst_size);
    for (int64_t k = 0; k < r.length; ++k) {
      dst[static_cast<size_t>(r.dst_offset + k)] = src[static_cast<size_t>(r.src_offset + k)];
      ++writes[static_cast<size_t>(r.dst_offset + k)];
    }
    total += r.length;
  }
  int64_t want_total = 0;
  std::vector<int> expected_writes(static_cast<size_t>(dst_size), 0);
  for (const FlatBox& fb : region) {
    want_total += fb.box.numel();
    int64_t k = fb.local_start;
    for_each_index(fb.box, [&](const std::vector<int64_t>& i) {
      check(dst[static_cast<size_t>(k)] == flat(i, shape));
      expected_writes[static_cast<size_t>(k)] = 1;
      ++k;
    });
  }
  check(total == want_total);
  check(writes == expected_writes);  // each target element once, nothing else touched
}

void hostile_mode(FuzzedDataProvider& in) {
  const int rank = in.ConsumeIntegralInRange<int>(0, 4);
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(in.ConsumeIntegral<int64_t>());
  auto any_box = [&](int r) {
    Box b;
    for (int d = 0; d < r; ++d) b.offsets.push_back(in.ConsumeIntegral<int64_t>());
    for (int d = 0; d < r; ++d) b.sizes.push_back(in.ConsumeIntegral<int64_t>());
    return b;
  };
  std::vector<Box> chunks;
  const int n = in.ConsumeIntegralInRange<int>(0, 8);
  for (int i = 0; i < n; ++i)
    chunks.push_back(any_box(in.ConsumeBool() ? rank : in.ConsumeIntegralInRange<int>(0, 4)));
  try {
    hyper::check_chunks_tile(shape, chunks);
  } catch (const hyper::ValueError&) {
    return;
  }
  // Accepted: the chunks lie inside a valid shape, so their extents cannot overflow.
  int64_t covered = 0;
  for (const Box& c : chunks) {
    for (size_t d = 0; d < c.sizes.size(); ++d) check(c.sizes[d] >= 0 && c.offsets[d] >= 0);
    const int64_t n = c.numel();
    for (size_t d = 0; d < c.sizes.size() && n > 0; ++d)
      check(c.offsets[d] <= shape[d] && c.sizes[d] <= shape[d] - c.offsets[d]);
    covered += n;
  }
  check(covered == hyper::numel(shape));
  // Target boxes as CheckpointReader::read checks them.
  std::vector<FlatBox> region;
  const int nt = in.ConsumeIntegralInRange<int>(0, 4);
  const Box whole = Box::full(shape);
  for (int t = 0; t < nt; ++t) {
    FlatBox fb{any_box(rank), in.ConsumeIntegralInRange<int64_t>(0, int64_t{1} << 40)};
    if (!whole.contains(fb.box)) continue;
    region.push_back(fb);
  }
  try {
    const auto runs = hyper::read_runs(chunks, region);
    for (const auto& r : runs) {
      check(r.length > 0 && r.src_offset >= 0 &&
            r.src_offset + r.length <= chunks[static_cast<size_t>(r.chunk)].numel());
    }
  } catch (const hyper::ValueError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  if (in.ConsumeIntegralInRange<int>(0, 3) != 0)
    small_mode(in);
  else
    hostile_mode(in);
  return 0;
}
