#pragma once
/// \file layout.h
/// Layout = mesh topology + placements + global shape, validated, with the three
/// views of seed 000 §4.2 and every rank's local region. Torch-free value type.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/core/mesh_topology.h"
#include "hyper/core/placement.h"

namespace hyper {

/// The RaggedShard of a layout and the mesh dim it sits on.
struct RaggedInfo {
  int64_t mesh_dim = 0;
  Placement placement;
  bool operator==(const RaggedInfo& o) const {
    return mesh_dim == o.mesh_dim && placement == o.placement;
  }
};

/// How a tensor of a given global shape is spread over a mesh.
///
/// Local storage convention (used by plans, DTensor and the checkpoint):
/// - without RaggedShard, a rank's local tensor is contiguous with shape
///   `local_shape(i)`; its region is one box (possibly empty), nested Shard placements
///   of one tensor dim split in mesh-dim order (torch.chunk semantics each time);
/// - with RaggedShard, the Shard placements beside it (if any) first give the rank a box as
///   above (`ragged_box(i)`; the whole tensor when the others are Replicate), and the
///   RaggedShard splits that box's row-major storage over its mesh dim; the local tensor is
///   1-D and holds the rank's flat interval of the box; its region is the ordered boxes of
///   decompose_interval() of that interval, placed at the box's offsets. With a Shard beside
///   it this is FSDP over tensor parallelism (docs/fsdp.md): a RaggedShard of each
///   tensor-parallel shard.
/// Either way `local_region(i)` lists boxes whose row-major contents, concatenated,
/// are the local storage.
///
/// Text form: `mesh=[2,2] placements=[RS((0,),(1,2)),R] shape=[6,4,8]`.
class Layout {
 public:
  /// Validates and normalises (negative Shard dims become non-negative). Throws
  /// ValueError for: placements count != mesh ndim; a bad shape; a Shard dim out of
  /// range; more than one RaggedShard; a RaggedShard beside anything but Replicate or
  /// Shard; RaggedShard dims past the tensor's rank; len(local_units) != mesh dim size;
  /// prefix cells (of any rank's Shard box) not divisible by sum(units).
  Layout(MeshTopology mesh, Placements placements, Shape shape);

  const MeshTopology& mesh() const { return mesh_; }
  const Placements& placements() const { return placements_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const;

  /// The ragged view (seed §4.2): the RaggedShard and its mesh dim, if any.
  const std::optional<RaggedInfo>& ragged() const { return ragged_; }
  bool is_ragged() const { return ragged_.has_value(); }
  /// Placements with RaggedShard replaced by Replicate (seed §4.2 normal view).
  Placements normal_placements() const;
  /// The same layout with the normal placements.
  Layout normal_layout() const;
  bool has_partial() const;
  /// True iff every placement is Replicate.
  bool is_replicated() const;
  /// The Partial(sum) rule for a value that is not yet partial (distribute_tensor, a
  /// checkpoint load, redistribute from R or S): on each Partial(sum) mesh dim the value
  /// stays at coordinate 0 and the other coordinates hold zeros, so the sum over the dim
  /// is the value. True iff the rank at mesh index `index` holds zeros, i.e. its coordinate
  /// is not 0 on some Partial(sum) mesh dim. Other reduce ops (avg, max, min) keep the value
  /// everywhere. Throws ValueError for an index out of range.
  ///   mesh=[2,2] placements=[P(sum),R]: indices 2 and 3 hold zeros.
  bool holds_partial_zeros(int64_t index) const;
  /// The same for a value laid out with `source` placements (one per mesh dim): a mesh dim
  /// already Partial in `source` keeps its contributions, so only the Partial(sum) dims new
  /// in this layout count. Throws ValueError when `source` has the wrong length.
  bool holds_partial_zeros(int64_t index, const Placements& source) const;

  /// Seed convention: one entry per tensor dim: {-1} if unsharded, else the mesh axes
  /// that shard it, counted from the right (mesh_ndim - 1 - mesh_dim), in mesh-dim
  /// order (several for nested shards). Built from the normal view.
  std::vector<std::vector<int64_t>> tensor_map() const;

  /// Local region of the rank at mesh linear index `index` (0..mesh.size()-1).
  std::vector<FlatBox> local_region(int64_t index) const;
  /// The single box of a non-ragged layout's rank. Throws ValueError for ragged layouts.
  Box local_box(int64_t index) const;
  /// Shape of the local tensor: the box's sizes, or {numel} for ragged layouts.
  Shape local_shape(int64_t index) const;
  int64_t local_numel(int64_t index) const;
  /// The box the RaggedShard splits for `index`: the box of the Shard placements beside it,
  /// the whole tensor when there are none. Throws ValueError if not ragged.
  Box ragged_box(int64_t index) const;
  /// The ragged flat interval of `index`, in the row-major storage of ragged_box(index)
  /// (the tensor's own when no Shard is beside the RaggedShard). Throws ValueError if not
  /// ragged.
  Interval ragged_interval(int64_t index) const;

  std::string to_string() const;
  /// Parses the text form. Throws ValueError naming the text.
  static Layout from_string(const std::string& text);

  bool operator==(const Layout& o) const;
  bool operator!=(const Layout& o) const { return !(*this == o); }
  std::size_t hash() const;

 private:
  Box shard_box(int64_t index) const;
  MeshTopology mesh_;
  Placements placements_;
  Shape shape_;
  std::optional<RaggedInfo> ragged_;
};

std::ostream& operator<<(std::ostream& os, const Layout& l);

}  // namespace hyper

namespace std {
template <>
struct hash<hyper::Layout> {
  std::size_t operator()(const hyper::Layout& l) const { return l.hash(); }
};
}  // namespace std
