#pragma once
/// \file state_dict.h
/// The DTensor-facing distributed checkpoint: save / async_save / load of a StateDict
/// (DTensors, plain tensors and small values) to a checkpoint directory
/// (docs/checkpoint.md: user guide; docs/checkpoint_format.md: format and protocol).
///
///   hyper::dcp::StateDict sd = {{"model.w", dt}, {"step", int64_t{7}}};
///   hyper::dcp::save(sd, "ckpt/step7");                    // collective over the world
///   auto h = hyper::dcp::async_save(sd, "ckpt/step8");     // returns after staging
///   h.wait();                                             // surfaces errors
///   hyper::dcp::load(sd_with_target_layouts, "ckpt/step7");  // in place, any layout
///
/// Save (collective: every rank of the world calls it with the same names, in any order
/// of insertion — a StateDict is sorted by name):
/// - each DTensor: Partial placements are first reduced (redistribute Partial -> Replicate
///   on those mesh dims; collective over the mesh). Each rank then writes the boxes of its
///   `Layout::local_region(mesh_index)`, sliced from its local storage (ragged shards as
///   their N-D boxes; no communication). On replicated mesh dims only one replica writes:
///   the one whose index among the replicas equals `replica_owner(name, replicas)`.
/// - a plain at::Tensor is treated as replicated over the world: world rank
///   `replica_owner(name, world size)` writes it whole.
/// - values (int64/double/bool/string) are taken from rank 0.
/// - rank 0 locks the directory (`<dir>/.lock`, one save per directory at a time) and
///   broadcasts its save id; every other rank checks that its `dir` is that directory;
///   every rank writes one data file, then the chunk records are gathered (all_gather_v)
///   to rank 0, which confirms every referenced file and commits `.metadata`; a final
///   broadcast of rank 0's status makes every rank return only after the commit, or throw
///   SaveError. A rank returns exactly when it knows `.metadata` was renamed in
///   (docs/checkpoint_format.md, "Sequence"; docs/checkpoint.md, "Faults").
/// Checkpoint traffic uses a dedicated group over the whole world, created (collectively)
/// by the first save on that World, so a background async save never interleaves with the
/// caller's collectives on mesh or world groups.
///
/// Load (not collective; each rank reads its own regions): every DTensor is read in place
/// into its existing local storage (`Layout::local_region(mesh_index)`; any saved layout
/// and world size into any target layout and world size), every plain tensor whole, in
/// place; values are replaced by the saved ones.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "hyper/comm/work.h"
#include "hyper/dcp/writer.h"
#include "hyper/comm/world.h"
#include "hyper/core/errors.h"
#include "hyper/dcp/checkpoint.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::dcp {

/// One entry of a StateDict. Build strings as std::string("x") (a string literal would
/// otherwise pick bool on older standard libraries) and integers as int64_t{7}.
using StateValue = std::variant<DTensor, at::Tensor, int64_t, double, bool, std::string>;

/// Name -> value, ordered by name (the order collectives are issued in during save).
using StateDict = std::map<std::string, StateValue>;

/// hyper::SaveError (hyper/core/errors.h), by its older name: a save that failed on some
/// rank, thrown on every rank with the same message
/// (`save to '<dir>' failed: rank 1: <error>; ...`).
using SaveError = ::hyper::SaveError;

struct SaveOptions {
  /// The world the save is collective over. Default: the World of the DTensors (all must
  /// share one); with no DTensor, the default world of init_process_group() if any,
  /// else a single-process save. Pass it when a StateDict holds no DTensor in a
  /// multi-rank job without a default world (e.g. thread-mode tests).
  std::optional<World> world;
  /// Block size of the per-block checksums (docs/checkpoint_format.md).
  int64_t checksum_block_size = int64_t{1} << 20;
};

struct LoadOptions {
  /// Verify checksums of every byte read (reads whole checksum leaves; see reader.h). A
  /// verified load stages each target's bytes in host memory and copies them into the
  /// targets only after everything was verified: a failed load changes nothing (extra host
  /// memory = the bytes this rank loads). Off: targets are read into directly.
  bool verify_checksums = true;
  /// Load a checkpoint without checksums (format version 1, or stripped fields), verifying
  /// whatever is present (ReadOptions::allow_unchecksummed). Default: refused.
  bool allow_unchecksummed = false;
  /// Largest `.metadata` accepted, in bytes (ReadOptions::max_metadata_bytes: default 64 MiB,
  /// 1..1 GiB); a larger one is refused before it is read, naming its size and the limit.
  int64_t max_metadata_bytes = kDefaultMaxMetadataBytes;
};

/// What a load read.
struct LoadStats {
  int64_t bytes_read = 0;    ///< bytes read from data files (CheckpointReader::bytes_read)
  int64_t bytes_needed = 0;  ///< bytes of the targets' local regions
};

/// Saves `state` to `dir` (created if needed). Collective over the world (see above).
/// Throws ValueError before any communication for an undefined tensor or DTensors on
/// different worlds; SaveError on every rank when the directory is locked by another save,
/// ranks were given different directories, writing (ENOSPC included) or committing failed on
/// any rank, or a collective of the save failed (a dead peer, the collective timeout: never
/// a bare CommError). The message ends with "nothing was committed" when the rank knows it,
/// or says "the commit state is unknown" and how to check (rank 0 died). A crash at any
/// point leaves the previous checkpoint in `dir` loadable.
void save(const StateDict& state, const std::string& dir, const SaveOptions& options = {});

/// Handle of an async_save, built on the one completion object (comm::Work). Movable; the
/// destructor waits (and discards errors). [[nodiscard]]: dropping it at once would wait
/// for the save right there, which is what save() is for.
class [[nodiscard]] AsyncSaveHandle {
 public:
  AsyncSaveHandle() = default;
  explicit AsyncSaveHandle(comm::Work work);
  AsyncSaveHandle(AsyncSaveHandle&& o) noexcept;
  AsyncSaveHandle& operator=(AsyncSaveHandle&& o) noexcept;
  ~AsyncSaveHandle();

  /// Blocks until the save is committed (or failed); rethrows its error with its type
  /// (SaveError, ...) on every call after a failure.
  void wait();
  /// True once the background work finished (wait() then returns at once).
  bool done() const;
  bool valid() const { return work_.has_value(); }
  /// The save's Work: wait with a timeout, add a completion callback. Throws ValueError on
  /// an empty handle.
  comm::Work work() const;

 private:
  void discard() noexcept;
  std::optional<comm::Work> work_;
};

/// Like save, but returns after *staging*: every chunk this rank writes has been copied to
/// host memory (and Partial placements reduced), so the caller may modify its tensors at
/// once. Writing, the metadata exchange and the commit run in a background thread on the
/// checkpoint group. Collective (every rank calls it). A later save/async_save on the same
/// World first waits for this one, so saves never interleave.
[[nodiscard]] AsyncSaveHandle async_save(const StateDict& state, const std::string& dir,
                                         const SaveOptions& options = {});

/// Loads `dir` into `state` in place: DTensors and tensors keep their storage (handles taken
/// before see the values); values are replaced. Not collective. Throws ValueError naming
/// them for: names missing from the checkpoint (all of them listed), a tensor saved as a
/// value or vice versa, a value saved with another type than the target's (`the checkpoint
/// holds a float, the target is an int`: a load never changes a value's type), a dtype
/// mismatch, BOOL data bytes other than 0 and 1, a global shape mismatch (both shapes), an
/// incomplete checkpoint, and every CheckpointReader error.
LoadStats load(StateDict& state, const std::string& dir, const LoadOptions& options = {});



}  // namespace hyper::dcp
