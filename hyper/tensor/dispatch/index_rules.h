#pragma once
/// \file dispatch/index_rules.h
/// Sharding rules of the DTensor dispatch key for the ops that pick, place or reorder
/// elements along one dim, torch-free: `gather`, `index_select`, `scatter` /
/// `scatter_add` (and their in-place forms), and the ops computed along an unsharded dim
/// (`sort`, `topk`, `cumprod`). The kernels that execute them (and their backward, the local
/// op's vector-Jacobian product) are in dispatch/index_kernels.h.
///
///   // gather(x, 1, idx): x [4,6] S(0), idx [4,3] R on 2 ranks -> idx sliced to S(0), no bytes.
///   Propagation p = propagate_gather("aten::gather", x, 1, idx, false);
///   // p.inputs: {x: S(0), idx: S(0)}; p.output: [4,3] S(0).
///
/// Each mesh dim is decided on its own. A plain (non-DTensor) operand is Replicate on the
/// DTensor's mesh (sliced or zeroed locally, no bytes). A Partial index is reduced first.
/// Every rule throws NotImplementedError (naming the op and the layouts) for a RaggedShard
/// operand, ValueError for a dim out of range or DTensors on different meshes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hyper/tensor/dispatch/sharding_rule.h"

namespace hyper::dispatch {

/// Which layout a masked Partial needs: `masked` on a mesh dim means the input sharded along
/// the picked dim d keeps its Shard, each rank picks the indices inside its own box (others
/// give zeros) and the output is Partial(sum) there.
struct IndexPropagation {
  Propagation p;
  /// Per mesh dim: masked — gather / index_select: the output is a masked Partial(sum) (see
  /// above); scatter: self's Shard(dim) kept, each rank writing the entries in its rows.
  std::vector<bool> masked;
  int64_t dim = 0;  ///< normalised
  bool any_masked() const {
    for (bool b : masked)
      if (b) return true;
    return false;
  }
};

/// gather(self, dim, index) (output: index's shape). Per mesh dim: an index Shard(e), e != dim,
/// of a dim as long as self's keeps it and self is laid out Shard(e) too (the rows match);
/// an index Shard(dim) keeps it and self is made Replicate there; otherwise the index is
/// Replicate and self's Shard(e), e != dim and as long as the index's, is kept (the index is
/// sliced locally); self's Shard(dim) is a masked Partial(sum) when `allow_masked` (the
/// kernel's choice: a numeric dtype and fewer output than self elements), else gathered;
/// self's Partial of any reduce op passes through (picking elements commutes with it). Where
/// one mesh dim shards self and the index along different dims, the operand of fewer bytes
/// (shape x element_size) gives up its Shard.
IndexPropagation propagate_gather(const std::string& op_name, const ArgLayout& self,
                                  int64_t dim, const ArgLayout& index, bool allow_masked);

/// index_select(self, dim, index) (index 1-D; output: self's shape with dim of index's
/// length). Per mesh dim: self's Shard(e), e != dim, kept (the index made Replicate);
/// self's Shard(dim): a masked Partial(sum) when `allow_masked`, else gathered; self's
/// Partial passes through (the index made Replicate); with self Replicate there an index
/// Shard(0) gives the output Shard(dim).
IndexPropagation propagate_index_select(const std::string& op_name, const ArgLayout& self,
                                        int64_t dim, const ArgLayout& index, bool allow_masked);

/// scatter / scatter_add(self, dim, index, src) (`src` absent: scatter.value's scalar;
/// output: self's layout on the mesh dims kept). Per mesh dim: self's Shard(e), e != dim,
/// kept when index (and src) are as long along e (they are sliced or moved to Shard(e));
/// with self Replicate, an index Shard(e) of such a dim shards all three; otherwise self is
/// gathered there (in-place: refused) and index and src made Replicate — except self's
/// Shard(dim) with `allow_masked`: kept (`masked` on that mesh dim), index and src made
/// Replicate there, each rank writing the entries whose index falls in its rows (in place
/// always; out of place unless an index / src Shard that lines up would move fewer elements
/// by moving self to it). Partials: scatter
/// (overwrite) keeps self's or src's Partial of any reduce op (the other operand made that
/// Partial locally: zeros off coordinate 0 for sum; the scalar value likewise); scatter_add
/// only sum/avg (additive), reducing max/min first. In-place (`inplace`): self's layout
/// cannot change (NotImplementedError naming what it would need); the other operands adapt.
/// `partials_pass` false (scatter_reduce prod / mean / amax / amin): every Partial reduced.
/// (scatter_reduce "sum" is `add`.)
IndexPropagation propagate_scatter(const std::string& op_name, const ArgLayout& self, int64_t dim,
                                   const ArgLayout& index, const std::optional<ArgLayout>& src,
                                   bool add, bool inplace, bool allow_masked = true,
                                   bool partials_pass = true);

/// An op computed along `dims` (sort, topk, cumprod; cumsum/flip/roll): those dims unsharded
/// (a Shard of one made Replicate), other Shards kept; a Partial of any reduce op is reduced
/// first unless `linear` (then sum/avg pass through). `out_shape`: the output's global shape
/// (topk's k along dim); absent: the input's.
Propagation propagate_along_dims(const std::string& op_name, const ArgLayout& in,
                                 std::vector<int64_t> dims, bool linear,
                                 const std::optional<Shape>& out_shape = std::nullopt);

/// `l` reduced along `d` (a dim no mesh dim shards): the dim kept with size 1 (`keepdim`) or
/// removed, the Shards of later dims renumbered.
Layout reduced_along(const Layout& l, int64_t d, bool keepdim);

}  // namespace hyper::dispatch
