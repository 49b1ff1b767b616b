#pragma once
/// \file testing/test_data.h
/// Deterministic test data for multi-rank tests: every rank can build any rank's input and
/// hence the expected global result by itself (the single-device oracle).

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace hyper::comm::testing {

/// Rows contributed by rank r of n: 2, 3, 0, 1, 2, 3, ... (zero for r = 2 mod 4).
inline int64_t rows_of(int r) { return (r * 5 + 2) % 4; }
inline std::vector<int64_t> rows_all(int n) {
  std::vector<int64_t> v(n);
  for (int r = 0; r < n; ++r) v[r] = rows_of(r);
  return v;
}
/// Rows rank i sends to rank j in all_to_all_v tests (has zeros).
inline int64_t a2a_rows(int i, int j) { return (i * 3 + j * 2 + 1) % 4; }

/// rows_all(n) as rank `rank` sees it: every rank's rows, their sum, and the rows before
/// `rank` (where its piece starts in the gathered tensor).
struct RowsSeen {
  std::vector<int64_t> rows;
  int64_t total = 0;
  int64_t offset = 0;
};
inline RowsSeen rows_seen_by(int rank, int n) {
  RowsSeen s{rows_all(n)};
  for (int r = 0; r < n; ++r) {
    if (r < rank) s.offset += s.rows[r];
    s.total += s.rows[r];
  }
  return s;
}

/// A (rows, cols) tensor of `dtype` whose values are small integers (exact in every
/// dtype, bool included) depending on (tag, row, col).
inline at::Tensor pattern(int64_t tag, int64_t rows, int64_t cols, at::ScalarType dtype) {
  at::Tensor r = at::arange(rows, at::kLong).reshape({rows, 1});
  at::Tensor c = at::arange(cols, at::kLong).reshape({1, cols});
  at::Tensor v = (r * 7 + c * 3 + tag * 11) % 23 - 5;  // in [-5, 17]
  if (dtype == at::kBool) return (v % 2 == 0);
  if (dtype == at::kByte) v = v + 5;
  return v.to(dtype).contiguous();
}

/// Rank-order concatenation of pieces.
inline at::Tensor cat_rows(const std::vector<at::Tensor>& pieces, const at::Tensor& like) {
  if (pieces.empty()) return at::empty({0}, like.options());
  return at::cat(pieces, 0);
}

/// The all_to_all_v case of rank `rank` of n: block (i -> j) has a2a_rows(i, j) rows of
/// pattern(i * 10 + j, rows, cols, dtype). `expected` is what `rank` must receive.
struct AllToAllCase {
  std::vector<int64_t> in_splits, out_splits;
  at::Tensor input, expected;
};
inline AllToAllCase all_to_all_case(int rank, int n, int64_t cols, at::ScalarType dtype) {
  AllToAllCase c;
  std::vector<at::Tensor> in, out;
  for (int j = 0; j < n; ++j) {
    c.in_splits.push_back(a2a_rows(rank, j));
    c.out_splits.push_back(a2a_rows(j, rank));
    in.push_back(pattern(rank * 10 + j, c.in_splits.back(), cols, dtype));
    out.push_back(pattern(j * 10 + rank, c.out_splits.back(), cols, dtype));
  }
  c.input = at::cat(in);
  c.expected = at::cat(out);
  return c;
}

inline bool same(const at::Tensor& a, const at::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.sizes() == b.sizes() && at::equal(a, b);
}

}  // namespace hyper::comm::testing
