#pragma once
/// \file geometry.h
/// Index-space geometry: shapes, flat intervals, N-D boxes, torch.chunk ranges,
/// RaggedShard intervals (seed 000 §3.2) and their decomposition into boxes.
/// Everything here is pure arithmetic on int64_t; nothing allocates tensors.

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

namespace hyper {

class Placement;

using Shape = std::vector<int64_t>;

/// Product of the sizes (1 for a 0-D shape). Throws ValueError on a negative size
/// or an overflow past 2^62.
int64_t numel(const Shape& shape);
/// Row-major strides of a contiguous tensor of `shape`.
std::vector<int64_t> contiguous_strides(const Shape& shape);
/// Checks a global shape: non-negative sizes, product of max(size, 1) at most 2^62 (so
/// strides cannot overflow, whatever the order of dims). Throws ValueError.
void check_shape(const Shape& shape, const char* what = "shape");

/// Half-open flat interval [start, end) in row-major order.
struct Interval {
  int64_t start = 0;
  int64_t end = 0;
  int64_t size() const { return end - start; }
  bool empty() const { return end <= start; }
  bool operator==(const Interval& o) const { return start == o.start && end == o.end; }
  bool operator!=(const Interval& o) const { return !(*this == o); }
  std::string to_string() const;  ///< `[2, 8)`
};
/// Intersection of two intervals (empty interval [max, max) if disjoint).
Interval intersect(const Interval& a, const Interval& b);

/// An N-D box: offsets + sizes in a global index space. A box with a zero size is
/// empty. Rank-0 boxes (scalars) have no offsets and numel 1.
struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;

  Box() = default;
  Box(std::vector<int64_t> o, std::vector<int64_t> s) : offsets(std::move(o)), sizes(std::move(s)) {}
  /// The box covering a whole tensor of `shape`.
  static Box full(const Shape& shape);

  int64_t rank() const { return static_cast<int64_t>(sizes.size()); }
  /// Product of the sizes (1 for rank 0). Throws ValueError naming the box when the product
  /// overflows int64_t (sizes read from a file or given by a caller may be anything).
  int64_t numel() const;
  /// True iff some size is 0 (numel() == 0), decided without multiplying the sizes.
  bool empty() const;
  /// True iff `inner` lies entirely inside this box (empty boxes are inside everything; a box
  /// with a negative size, or with offsets and sizes of different lengths, is inside nothing).
  /// Never overflows, whatever the values.
  bool contains(const Box& inner) const;
  bool operator==(const Box& o) const { return offsets == o.offsets && sizes == o.sizes; }
  bool operator!=(const Box& o) const { return !(*this == o); }
  std::string to_string() const;  ///< `((0, 2), (1, 2))` offsets then sizes
};
std::ostream& operator<<(std::ostream& os, const Box& b);
std::ostream& operator<<(std::ostream& os, const Interval& i);

/// Intersection of two boxes of equal rank; nullopt if they do not overlap (or
/// either is empty). Throws ValueError on a rank mismatch.
std::optional<Box> intersect(const Box& a, const Box& b);
/// `inner` expressed relative to `outer`'s origin (offsets minus outer offsets).
Box relative_to(const Box& inner, const Box& outer);

/// A box plus where its row-major contents sit inside a 1-D local storage:
/// local flat range [local_start, local_start + box.numel()).
struct FlatBox {
  Box box;
  int64_t local_start = 0;
  int64_t local_end() const { return local_start + box.numel(); }
  bool operator==(const FlatBox& o) const { return box == o.box && local_start == o.local_start; }
  std::string to_string() const;  ///< `((0, 2), (1, 2))@[0, 2)`
};

/// torch.chunk semantics: chunk = ceil(n / k); piece i is [i*chunk, min((i+1)*chunk, n)),
/// clipped to empty for trailing pieces. Throws ValueError for k < 1, n < 0, i outside [0, k).
Interval chunk_range(int64_t n, int64_t k, int64_t i);

/// Splits the flat interval [iv.start, iv.end) of a row-major tensor of `shape` into
/// the ordered list of N-D boxes whose row-major contents concatenate to the interval.
/// At most 2*(rank-1)+1 boxes; none empty; local ranges start at 0 and are contiguous.
/// Example: shape (3,4), [2,8) -> ((0,2),(1,2))@[0,2), ((1,0),(1,4))@[2,6).
/// Throws ValueError if the interval is not inside [0, numel(shape)].
std::vector<FlatBox> decompose_interval(const Shape& shape, const Interval& iv);

/// The RaggedShard flat interval of position `index` on its mesh dim (seed 000 §3.2):
/// prefix_cells = prod(shape[:k]); cells_per_unit = prefix_cells / sum(units);
/// flat_start = sum(units[:index]) * cells_per_unit * suffix_numel.
/// Throws ValueError: not a RaggedShard, dims past the tensor's rank, prefix cells not
/// divisible by sum(units) (names both numbers), index outside the units.
Interval ragged_interval(const Shape& shape, const Placement& ragged, int64_t index);
/// All intervals of a RaggedShard, in mesh-dim order.
std::vector<Interval> ragged_intervals(const Shape& shape, const Placement& ragged);
/// Checks a RaggedShard against a shape and a mesh dim size (len(units) == mesh dim size).
void check_ragged(const Shape& shape, const Placement& ragged, int64_t mesh_dim_size);

/// Contiguous runs of a sub-box inside a row-major buffer holding `outer` sizes:
/// calls fn(flat_offset_in_outer, run_length) in row-major order of the sub-box.
/// Trailing dims that the sub-box covers fully are merged into longer runs.
/// `sub` is relative to the outer buffer's origin. Nothing is called for an empty box.
void for_each_run(const std::vector<int64_t>& outer_sizes, const Box& sub,
                  const std::function<void(int64_t offset, int64_t length)>& fn);

}  // namespace hyper
