#pragma once
/// \file mesh_topology.h
/// The shape of a device mesh as plain data: which global rank sits at which
/// coordinate, and which ranks form the group along each mesh dim. Torch-free;
/// hyper::DeviceMesh (comm layer) pairs it with process groups.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hyper {

/// The most devices a mesh may hold (2^20, as many ranks as hyperrun starts:
/// tools/cli/hyperrun_options.h kMaxWorldSize). MeshTopology refuses larger shapes.
constexpr int64_t kMaxMeshSize = int64_t{1} << 20;

/// An N-D arrangement of global ranks, row-major. Immutable value type.
///
/// Example: `MeshTopology({2, 2}, {"dp", "tp"})` places ranks 0..3 as
/// [[0, 1], [2, 3]]; rank 2 has coordinate (1, 0); the tp group of rank 2 is {2, 3},
/// its dp group is {0, 2}.
class MeshTopology {
 public:
  /// Throws ValueError for: empty shape, a non-positive size, more than kMaxMeshSize devices
  /// (naming the count and the limit), names whose count differs
  /// from the shape's, that repeat, or that are not identifiers ([A-Za-z_][A-Za-z0-9_]*), ranks whose count differs from the
  /// mesh size, negative or repeated ranks.
  /// `ranks` defaults to 0..size-1; `names` defaults to none (dims addressed by index).
  explicit MeshTopology(std::vector<int64_t> shape, std::vector<std::string> names = {},
                        std::vector<int> ranks = {});

  int64_t ndim() const { return static_cast<int64_t>(shape_.size()); }
  /// Number of ranks in the mesh.
  int64_t size() const;
  /// Size of mesh dim `dim` (negative counts from the end). Throws ValueError if out of range.
  int64_t size(int64_t dim) const;
  const std::vector<int64_t>& shape() const { return shape_; }
  const std::vector<std::string>& names() const { return names_; }
  /// Global ranks in row-major order of coordinates.
  const std::vector<int>& ranks() const { return ranks_; }

  /// Index of the mesh dim called `name`. Throws ValueError naming the known names.
  int64_t dim_index(const std::string& name) const;
  /// Normalises a possibly negative mesh dim; throws ValueError if out of range.
  int64_t normalize_dim(int64_t dim) const;

  /// True iff `rank` (global) is part of this mesh.
  bool contains(int rank) const;
  /// Position of `rank` in ranks() (its linear index). Throws ValueError if absent.
  int64_t index_of(int rank) const;
  /// Coordinate of global `rank`. Throws ValueError if absent.
  std::vector<int64_t> coordinate_of(int rank) const;
  /// Coordinate of the rank at linear index `index`.
  std::vector<int64_t> coordinate_at(int64_t index) const;
  /// Linear index of a coordinate. Throws ValueError if out of range.
  int64_t index_at(const std::vector<int64_t>& coord) const;
  /// Global rank at a coordinate.
  int rank_at(const std::vector<int64_t>& coord) const;

  /// All groups along mesh dim `dim`: each a list of global ranks ordered by their
  /// coordinate on `dim`; groups are ordered by the linear index of their first rank.
  std::vector<std::vector<int>> groups_along(int64_t dim) const;
  /// The group along `dim` that contains global `rank`.
  std::vector<int> group_of(int rank, int64_t dim) const;
  /// The sub-mesh over mesh dims `dims` (kept in the given order) that contains `rank`.
  MeshTopology sub_mesh(int rank, const std::vector<int64_t>& dims) const;

  /// `[2,2]`, or `[dp=2,tp=2]` when named; ranks are printed only when not 0..n-1:
  /// `[2,2]@[4,5,6,7]`. Round-trips through from_string.
  std::string to_string() const;
  static MeshTopology from_string(const std::string& text);

  bool operator==(const MeshTopology& o) const;
  bool operator!=(const MeshTopology& o) const { return !(*this == o); }
  std::size_t hash() const;

 private:
  std::vector<int64_t> shape_;
  std::vector<std::string> names_;
  std::vector<int> ranks_;
};

}  // namespace hyper

namespace std {
template <>
struct hash<hyper::MeshTopology> {
  std::size_t operator()(const hyper::MeshTopology& m) const { return m.hash(); }
};
}  // namespace std
