#pragma once
/// \file random.h
/// The RNG tracker of random ops on DTensor tensors (dropout_kernels.h, random_kernels.h; docs/dtensor.md
/// "Dropout and the RNG tracker").
///
/// A draw of a DTensor with global shape S gives every GLOBAL element index i (row-major over
/// S) the uniform u(seed, offset + i) of a counter-based generator (formula below), so the
/// values depend only on (seed, offset, i): a Replicate region draws the same values on every
/// rank, Shard regions different ones, and the result is the same for every layout of the same
/// global tensor, and equal to the draw of the full tensor on a 1-rank mesh. Each rank computes
/// only its own elements' indices (its box, or its RaggedShard interval).
///
/// The tracker is per mesh: a seed and an offset (the next draw's first counter) kept with the
/// DeviceMesh (copies of a mesh and `mesh["tp"]` taken again find the same tracker; another
/// mesh, a sub-mesh included, has its own). Each draw advances the offset by the GLOBAL numel,
/// so ranks with uneven or empty shards stay in step. The ranks agree on the seed by
/// construction: manual_seed is collective and refuses differing seeds; an unseeded tracker
/// takes rank 0's seed by broadcast at its first draw. The offsets agree as long as every
/// rank of the mesh makes the same draws (the SPMD order every collective on the mesh needs).
///
///   hyper::manual_seed(mesh, 1234);               // every rank of mesh, same seed
///   at::Tensor y = torch::dropout(hyper::as_tensor(dt), 0.1, true);  // mask by global index
///
/// Formula (all arithmetic mod 2^64 on unsigned 64-bit words, >> logical):
///   mix(z)  = z ^= z >> 30; z *= 0xbf58476d1ce4e5b9; z ^= z >> 27; z *= 0x94d049bb133111eb;
///             z ^= z >> 31  (splitmix64's finalizer)
///   u(seed, n) = (mix(mix(seed) + n * 0x9e3779b97f4a7c15) >> 11) * 2^-53   in [0, 1)
/// Dropout keeps element i of a draw at `offset` iff u(seed, offset + i) >= p.

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "hyper/comm/device_mesh.h"
#include "hyper/core/layout.h"

namespace hyper {

/// One mesh's tracker, as this rank holds it.
struct RngState {
  uint64_t seed = 0;
  int64_t offset = 0;   ///< the counter of the next draw's element 0
  bool seeded = false;  ///< false until manual_seed or the first draw
  bool operator==(const RngState& o) const {
    return seed == o.seed && offset == o.offset && seeded == o.seeded;
  }
};

/// Seeds `mesh`'s tracker and resets its offset to 0, so the same seed reproduces the same
/// draws. Collective over the mesh (one all-gather of 8 bytes per rank over its mesh group):
/// every rank of `mesh` calls it with the same seed; when the seeds differ, every rank throws
/// the same ValueError naming each rank's seed (in mesh-group order) and leaves its tracker
/// unchanged. Other meshes (sub-meshes included) keep their own trackers.
void manual_seed(const DeviceMesh& mesh, uint64_t seed);

/// This rank's tracker state of `mesh` (no communication; seeded is false before
/// manual_seed or the first draw).
RngState rng_state(const DeviceMesh& mesh);

/// For the kernels of random ops: the (seed, offset) of a draw of `global_numel` elements,
/// advancing the tracker's offset by `global_numel`. An unseeded tracker is seeded first with
/// the current seed of the torch default CPU generator of the mesh group's rank 0, broadcast
/// over the mesh group (collective: every rank of the mesh draws). Throws ValueError for a
/// negative `global_numel`.
RngState draw_rng(const DeviceMesh& mesh, int64_t global_numel);

/// u(seed, offset + i) (formula above) for each element i of the int64 tensor
/// `global_index`: a double tensor of its shape and device, values in [0, 1). Torch int64 ops
/// only (CPU or CUDA), no temporaries beyond the index's size.
at::Tensor uniform_at(const at::Tensor& global_index, uint64_t seed, int64_t offset);

/// The global row-major linear index of every element of rank `mesh_index`'s local tensor of
/// `layout` (int64, the local shape; a RaggedShard layout: its flat interval), on `options`'
/// device. Partial and Replicate mesh dims do not change the index.
at::Tensor global_linear_index(const Layout& layout, int64_t mesh_index,
                               const at::TensorOptions& options);

}  // namespace hyper
