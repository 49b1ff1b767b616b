#pragma once
/// \file dispatch/maxdim_kernels.h
/// `max.dim` / `min.dim` (values and indices) and `argmax` / `argmin` of a DTensor tensor,
/// kernels of the DTensor dispatch key:
/// - Partial inputs are reduced to Replicate first (a max of shares is not the max of the sum).
/// - Along a dim no mesh dim shards: the local op; the output keeps every Shard (renumbered
///   when keepdim is false), no bytes move.
/// - Along a sharded dim: each rank picks its local winner (value and index, the index made
///   GLOBAL by the rank's offset), the candidates (one per rank and output element, packed as
///   bytes: value, int64 index, a "holds elements" flag) are gathered over the mesh dims that
///   shard `dim` (one all_gather of output-numel x (itemsize + 9) bytes per rank, never the
///   tensor), and ATen's own op picks among them. The candidates are in global index order, so
///   ties (and NaN, which max/min propagate) resolve to the first global index, as ATen does on
///   the full tensor. A rank holding none of `dim` sends a flagged placeholder, replaced by
///   candidate 0 (always a real one) before the pick. Output: Replicate on those mesh dims.
/// - argmax / argmin with dim = None: the argmax of `self.reshape(-1)` (the view rule; a Shard
///   that does not stay exact in the flat view is gathered by it), keepdim giving [1, ..., 1].
/// The layouts: dispatch/maxdim_rules.h (torch-free).
/// max.dim / min.dim are registered at AutogradPrivateUse3 too, as a custom autograd function:
/// the values' gradient is scattered at the (global) indices, each rank writing the indices
/// inside its own box (grad laid out as self's layout; a Partial(sum/avg) gradient stays
/// Partial on mesh dims where self is Replicate). Double backward (create_graph) is refused.
/// Throws ValueError: dim out of range, a reduced dim of size 0 (ATen's errors, with the
/// layout); NotImplementedError: a RaggedShard input, a stale copied view (as the fallback).
/// Other ATen errors (argmax of bool, complex inputs) are raised by ATen on every rank, before
/// any collective.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& maxdim_kernels();

}  // namespace hyper::dispatch
