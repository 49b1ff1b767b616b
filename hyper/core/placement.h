#pragma once
/// \file placement.h
/// Placements: how one mesh dimension distributes a tensor. Torch-free value types.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace hyper {

/// One mesh dimension's placement of a tensor.
///
/// - `Shard(dim)`: split tensor dim `dim` with torch.chunk semantics (chunk size
///   ceil(n/k); trailing ranks may be short or empty). Negative dims are allowed and
///   normalised when a Layout is built.
/// - `Replicate()`: every rank of the mesh dim holds the same values.
/// - `Partial(op)`: every rank holds a partial value; the logical value is the
///   reduction `op` ("sum", "avg", "max", "min") over the mesh dim.
/// - `RaggedShard(dims, local_units)`: the row-major flat storage of the tensor is
///   split into contiguous intervals proportional to `local_units`; `dims` is the
///   prefix of tensor dims whose cells are the unit of splitting (seed §3).
///
/// Text forms (round-trip through from_string): `S(0)`, `R`, `P(sum)`,
/// `RS((0, 1), (1, 2))`.
class Placement {
 public:
  enum class Kind { kShard, kReplicate, kPartial, kRaggedShard };

  /// Replicate.
  Placement();

  Kind kind() const { return kind_; }
  bool is_shard() const { return kind_ == Kind::kShard; }
  /// True iff this is Shard(dim) (no normalisation of negative dims).
  bool is_shard(int64_t dim) const { return is_shard() && dim_ == dim; }
  bool is_replicate() const { return kind_ == Kind::kReplicate; }
  bool is_partial() const { return kind_ == Kind::kPartial; }
  bool is_ragged_shard() const { return kind_ == Kind::kRaggedShard; }

  /// The tensor dim of a Shard. Throws ValueError for other kinds.
  int64_t dim() const;
  /// The reduce op of a Partial ("sum", "avg", "max", "min"). Throws ValueError otherwise.
  const std::string& reduce_op() const;
  /// RaggedShard dims (always 0..k-1). Throws ValueError for other kinds.
  const std::vector<int64_t>& dims() const;
  /// RaggedShard local units. Throws ValueError for other kinds.
  const std::vector<int64_t>& local_units() const;
  /// Sum of the RaggedShard units.
  int64_t total_units() const;

  std::string to_string() const;
  /// Parses the text form. Throws ValueError naming the text on failure.
  static Placement from_string(const std::string& text);

  bool operator==(const Placement& o) const;
  bool operator!=(const Placement& o) const { return !(*this == o); }
  std::size_t hash() const;

  // Factories (see the free functions below).
  static Placement make_shard(int64_t dim);
  static Placement make_partial(std::string op);
  static Placement make_ragged(std::vector<int64_t> dims, std::vector<int64_t> units);

 private:
  Kind kind_ = Kind::kReplicate;
  int64_t dim_ = 0;
  std::string op_;
  std::vector<int64_t> dims_;
  std::vector<int64_t> units_;
};

using Placements = std::vector<Placement>;

/// Shard tensor dim `dim` (negative counts from the end).
inline Placement Shard(int64_t dim) { return Placement::make_shard(dim); }
inline Placement Replicate() { return Placement(); }
/// Partial with reduce op "sum" (default), "avg", "max" or "min"; others throw ValueError.
inline Placement Partial(std::string op = "sum") { return Placement::make_partial(std::move(op)); }
/// RaggedShard. Throws ValueError for: empty dims; dims not the prefix (0..k-1);
/// empty local_units; a negative unit; all units zero.
/// Example: `RaggedShard({0, 1}, {1, 2})` on shape (6,4,8) gives rank 0 the flat
/// interval [0, 64) and rank 1 [64, 192).
inline Placement RaggedShard(std::vector<int64_t> dims, std::vector<int64_t> local_units) {
  return Placement::make_ragged(std::move(dims), std::move(local_units));
}

std::ostream& operator<<(std::ostream& os, const Placement& p);
/// `[S(0),R]`
std::string to_string(const Placements& ps);
/// Parses `[S(0),R]` (spaces allowed). Throws ValueError.
Placements placements_from_string(const std::string& text);

}  // namespace hyper

namespace std {
template <>
struct hash<hyper::Placement> {
  std::size_t operator()(const hyper::Placement& p) const { return p.hash(); }
};
}  // namespace std
