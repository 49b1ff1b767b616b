#pragma once
// Helpers shared by the dcp fuzz targets (an oracle's view of boxes: row-major indices).
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"

namespace hyper::fuzz {

/// Row-major index of `idx` in `sizes`.
inline int64_t flat(const std::vector<int64_t>& idx, const std::vector<int64_t>& sizes) {
  int64_t f = 0;
  for (size_t d = 0; d < sizes.size(); ++d) f = f * sizes[d] + idx[d];
  return f;
}

/// Calls fn(index) for every index of `box` in row-major order.
template <class Fn>
void for_each_index(const Box& box, Fn fn) {
  if (box.numel() == 0) return;
  std::vector<int64_t> idx(box.offsets);
  while (true) {
    fn(idx);
    int64_t d = box.rank() - 1;
    for (; d >= 0; --d) {
      if (++idx[d] < box.offsets[d] + box.sizes[d]) break;
      idx[d] = box.offsets[d];
    }
    if (d < 0) return;
  }
}

/// The boxes of the grid whose cut points on dim d are `cuts[d]` (sorted, distinct, at least
/// two each), in row-major order of their grid cells.
inline std::vector<Box> grid_boxes(const std::vector<std::vector<int64_t>>& cuts) {
  const int rank = static_cast<int>(cuts.size());
  std::vector<Box> boxes;
  std::vector<size_t> at(cuts.size(), 0);
  while (true) {
    Box b;
    for (int d = 0; d < rank; ++d) {
      b.offsets.push_back(cuts[d][at[d]]);
      b.sizes.push_back(cuts[d][at[d] + 1] - cuts[d][at[d]]);
    }
    boxes.push_back(b);
    int d = rank - 1;
    for (; d >= 0; --d) {
      if (++at[d] + 1 < cuts[d].size()) break;
      at[d] = 0;
    }
    if (d < 0) break;
  }
  return boxes;
}

/// A fresh directory /dev/shm/hyper-<name>-XXXXXX (or under /tmp when /dev/shm is not
/// writable); traps when it cannot be made.
inline std::string make_temp_root(const char* name) {
  std::string tmpl = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  tmpl += std::string("/hyper-") + name + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) __builtin_trap();
  return buf.data();
}

}  // namespace hyper::fuzz
