#include "hyper/core/geometry.h"

#include <algorithm>
#include <cstdint>
#include <ostream>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/internal/text.h"
#include "hyper/core/placement.h"

namespace hyper {

using internal::ints_to_tuple;
using internal::str_cat;

namespace {
constexpr int64_t kMaxNumel = int64_t{1} << 62;
}

void check_shape(const Shape& shape, const char* what) {
  int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    HYPER_CHECK_VALUE(shape[i] >= 0, what, " ", shape_to_string(shape), " has negative size ",
                      shape[i], " at dim ", i);
    // Bound the product of max(size, 1), not the numel: a zero-size dim must not hide an
    // absurd extent elsewhere (the result would depend on the dim order, and the strides
    // of such a shape overflow).
    const int64_t s = std::max<int64_t>(shape[i], 1);
    HYPER_CHECK_VALUE(n <= kMaxNumel / s, what, " ", shape_to_string(shape),
                      " has too many elements (more than 2^62, counting zero-size dims as 1)");
    n *= s;
  }
}

int64_t numel(const Shape& shape) {
  check_shape(shape);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d)
    st[d] = st[d + 1] * std::max<int64_t>(shape[d + 1], 1);
  return st;
}

std::string Interval::to_string() const { return str_cat("[", start, ", ", end, ")"); }

Interval intersect(const Interval& a, const Interval& b) {
  int64_t s = std::max(a.start, b.start);
  int64_t e = std::min(a.end, b.end);
  if (e < s) e = s;
  return {s, e};
}

Box Box::full(const Shape& shape) { return Box(std::vector<int64_t>(shape.size(), 0), shape); }

int64_t Box::numel() const {
  // Boxes may come from a file or a caller (hostile sizes): an overflow is a ValueError, not UB.
  int64_t n = 1;
  for (auto s : sizes)
    HYPER_CHECK_VALUE(!__builtin_mul_overflow(n, s, &n), "box ", to_string(),
                      " has more elements than int64_t holds");
  return n;
}

bool Box::empty() const {
  return std::any_of(sizes.begin(), sizes.end(), [](int64_t s) { return s == 0; });
}

bool Box::contains(const Box& inner) const {
  // Checked without forming a product or a sum that can overflow: the boxes may come from a
  // caller or a file (CheckpointReader::read checks target boxes with this). A box with a
  // negative size, or with offsets and sizes of different lengths, is inside nothing.
  if (inner.offsets.size() != inner.sizes.size()) return false;
  bool empty_inner = false;
  for (int64_t s : inner.sizes) {
    if (s < 0) return false;
    empty_inner = empty_inner || s == 0;
  }
  if (empty_inner) return true;
  if (inner.rank() != rank() || offsets.size() != sizes.size()) return false;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || inner.offsets[d] < offsets[d]) return false;
    // inner.offsets + inner.sizes <= offsets + sizes, without overflow: the distance
    // between the offsets (exact in uint64_t, as inner.offsets >= offsets) plus the inner
    // size must fit in the outer size.
    const uint64_t gap = static_cast<uint64_t>(inner.offsets[d]) - static_cast<uint64_t>(offsets[d]);
    const uint64_t size = static_cast<uint64_t>(sizes[d]);
    if (gap > size || static_cast<uint64_t>(inner.sizes[d]) > size - gap)
      return false;
  }
  return true;
}

std::string Box::to_string() const {
  return str_cat("(", ints_to_tuple(offsets), ", ", ints_to_tuple(sizes), ")");
}

std::ostream& operator<<(std::ostream& os, const Box& b) { return os << b.to_string(); }
std::ostream& operator<<(std::ostream& os, const Interval& i) { return os << i.to_string(); }

std::string FlatBox::to_string() const {
  return str_cat(box.to_string(), "@", Interval{local_start, local_end()}.to_string());
}

std::optional<Box> intersect(const Box& a, const Box& b) {
  HYPER_CHECK_VALUE(a.rank() == b.rank(), "cannot intersect box ", a.to_string(), " of rank ",
                    a.rank(), " with box ", b.to_string(), " of rank ", b.rank());
  if (a.empty() || b.empty()) return std::nullopt;
  Box out;
  out.offsets.resize(a.sizes.size());
  out.sizes.resize(a.sizes.size());
  for (std::size_t d = 0; d < a.sizes.size(); ++d) {
    int64_t s = std::max(a.offsets[d], b.offsets[d]);
    int64_t e = std::min(a.offsets[d] + a.sizes[d], b.offsets[d] + b.sizes[d]);
    if (e <= s) return std::nullopt;
    out.offsets[d] = s;
    out.sizes[d] = e - s;
  }
  return out;
}

Box relative_to(const Box& inner, const Box& outer) {
  HYPER_CHECK_VALUE(outer.contains(inner), "box ", inner.to_string(), " is not inside ",
                    outer.to_string());
  Box r = inner;
  for (std::size_t d = 0; d < r.offsets.size(); ++d) r.offsets[d] -= outer.offsets[d];
  return r;
}

Interval chunk_range(int64_t n, int64_t k, int64_t i) {
  HYPER_CHECK_VALUE(n >= 0, "cannot chunk a dimension of negative size ", n);
  HYPER_CHECK_VALUE(k >= 1, "cannot chunk into ", k, " pieces");
  HYPER_CHECK_VALUE(i >= 0 && i < k, "chunk index ", i, " is outside [0, ", k, ")");
  int64_t chunk = (n + k - 1) / k;
  int64_t s = std::min(n, i * chunk);
  int64_t e = std::min(n, s + chunk);
  return {s, e};
}

namespace {
// Appends the boxes of [s, e) inside the tensor shape[d:], with the leading offsets
// `prefix` (one per dim before d, sizes 1).
void decompose_rec(const Shape& shape, std::size_t d, std::vector<int64_t>& prefix, int64_t s,
                   int64_t e, std::vector<FlatBox>& out, int64_t& local) {
  if (s >= e) return;
  const std::size_t n = shape.size();
  auto emit = [&](std::vector<int64_t> offs, std::vector<int64_t> sizes) {
    Box b;
    b.offsets = prefix;
    b.sizes.assign(prefix.size(), 1);
    b.offsets.insert(b.offsets.end(), offs.begin(), offs.end());
    b.sizes.insert(b.sizes.end(), sizes.begin(), sizes.end());
    FlatBox fb{std::move(b), local};
    local += fb.box.numel();
    out.push_back(std::move(fb));
  };
  if (d + 1 >= n) {  // last dim: one run
    emit({s}, {e - s});
    return;
  }
  int64_t inner = 1;
  for (std::size_t k = d + 1; k < n; ++k) inner *= shape[k];
  std::vector<int64_t> inner_zero(n - d - 1, 0);
  std::vector<int64_t> inner_full(shape.begin() + d + 1, shape.end());
  int64_t r0 = s / inner, r1 = e / inner;
  if (r0 == r1) {
    prefix.push_back(r0);
    decompose_rec(shape, d + 1, prefix, s - r0 * inner, e - r0 * inner, out, local);
    prefix.pop_back();
    return;
  }
  int64_t first_full = r0;
  if (s % inner != 0) {  // head: the tail part of row r0
    prefix.push_back(r0);
    decompose_rec(shape, d + 1, prefix, s - r0 * inner, inner, out, local);
    prefix.pop_back();
    first_full = r0 + 1;
  }
  if (r1 > first_full) {  // whole rows
    std::vector<int64_t> offs{first_full};
    offs.insert(offs.end(), inner_zero.begin(), inner_zero.end());
    std::vector<int64_t> sizes{r1 - first_full};
    sizes.insert(sizes.end(), inner_full.begin(), inner_full.end());
    emit(offs, sizes);
  }
  if (e % inner != 0) {  // tail: the head part of row r1
    prefix.push_back(r1);
    decompose_rec(shape, d + 1, prefix, 0, e - r1 * inner, out, local);
    prefix.pop_back();
  }
}
}  // namespace

std::vector<FlatBox> decompose_interval(const Shape& shape, const Interval& iv) {
  const int64_t total = numel(shape);
  HYPER_CHECK_VALUE(iv.start >= 0 && iv.start <= iv.end && iv.end <= total, "flat interval ",
                    iv.to_string(), " is not inside [0, ", total, ") of shape ",
                    shape_to_string(shape));
  std::vector<FlatBox> out;
  if (iv.empty()) return out;
  if (shape.empty()) {  // a scalar: the only non-empty interval is [0, 1)
    out.push_back(FlatBox{Box{}, 0});
    return out;
  }
  std::vector<int64_t> prefix;
  int64_t local = 0;
  decompose_rec(shape, 0, prefix, iv.start, iv.end, out, local);
  return out;
}

void check_ragged(const Shape& shape, const Placement& ragged, int64_t mesh_dim_size) {
  HYPER_CHECK_VALUE(ragged.is_ragged_shard(), ragged.to_string(), " is not a RaggedShard");
  const auto& dims = ragged.dims();
  const auto& units = ragged.local_units();
  HYPER_CHECK_VALUE(dims.size() <= shape.size(), ragged.to_string(), " shards dims ",
                    ints_to_tuple(dims), " but the tensor of shape ", shape_to_string(shape),
                    " has only ", shape.size(), " dims");
  if (mesh_dim_size >= 0) {
    HYPER_CHECK_VALUE(static_cast<int64_t>(units.size()) == mesh_dim_size, ragged.to_string(),
                      " has ", units.size(), " local_units but its mesh dim has ", mesh_dim_size,
                      " ranks");
  }
  check_shape(shape);
  int64_t prefix = 1;
  for (std::size_t k = 0; k < dims.size(); ++k) prefix *= shape[k];
  int64_t total = ragged.total_units();
  HYPER_CHECK_VALUE(prefix % total == 0, ragged.to_string(), " on shape ", shape_to_string(shape),
                    ": ", prefix, " prefix cells are not divisible by ", total,
                    " total units (sum of local_units)");
}

Interval ragged_interval(const Shape& shape, const Placement& ragged, int64_t index) {
  check_ragged(shape, ragged, -1);
  const auto& units = ragged.local_units();
  HYPER_CHECK_VALUE(index >= 0 && index < static_cast<int64_t>(units.size()), "index ", index,
                    " is outside the ", units.size(), " local_units of ", ragged.to_string());
  const std::size_t k = ragged.dims().size();
  int64_t prefix = 1, suffix = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) (d < k ? prefix : suffix) *= shape[d];
  const int64_t cells_per_unit = prefix / ragged.total_units();
  int64_t before = 0;
  for (int64_t i = 0; i < index; ++i) before += units[i];
  const int64_t start = before * cells_per_unit * suffix;
  const int64_t len = units[index] * cells_per_unit * suffix;
  return {start, start + len};
}

std::vector<Interval> ragged_intervals(const Shape& shape, const Placement& ragged) {
  std::vector<Interval> out;
  HYPER_CHECK_VALUE(ragged.is_ragged_shard(), ragged.to_string(), " is not a RaggedShard");
  for (std::size_t i = 0; i < ragged.local_units().size(); ++i)
    out.push_back(ragged_interval(shape, ragged, static_cast<int64_t>(i)));
  return out;
}

void for_each_run(const std::vector<int64_t>& outer_sizes, const Box& sub,
                  const std::function<void(int64_t, int64_t)>& fn) {
  HYPER_CHECK_VALUE(sub.rank() == static_cast<int64_t>(outer_sizes.size()), "box ",
                    sub.to_string(), " has rank ", sub.rank(), " but the buffer has shape ",
                    shape_to_string(outer_sizes));
  HYPER_CHECK_VALUE(Box::full(outer_sizes).contains(sub), "box ", sub.to_string(),
                    " is outside a buffer of shape ", shape_to_string(outer_sizes));
  if (sub.empty()) return;
  const int64_t n = sub.rank();
  if (n == 0) {
    fn(0, 1);
    return;
  }
  const auto strides = contiguous_strides(outer_sizes);
  // k: the outermost dim merged into one run; dims after k are covered fully.
  int64_t k = n - 1;
  while (k > 0 && sub.sizes[k] == outer_sizes[k]) --k;
  const int64_t run = sub.sizes[k] * strides[k];
  std::vector<int64_t> idx(static_cast<std::size_t>(k), 0);
  while (true) {
    int64_t off = sub.offsets[k] * strides[k];
    for (int64_t d = 0; d < k; ++d) off += (sub.offsets[d] + idx[d]) * strides[d];
    fn(off, run);
    int64_t d = k - 1;
    while (d >= 0) {
      if (++idx[d] < sub.sizes[d]) break;
      idx[d] = 0;
      --d;
    }
    if (d < 0) break;
  }
}

}  // namespace hyper
