#pragma once
/// \file writer.h
/// The torch-free writing side of the checkpoint: chunks of raw bytes into a safetensors data
/// file with their checksums, the metadata built from every writer's records, and the commit.
/// checkpoint.h's write_chunks (ATen tensors) and the Python packages' savers (hyper._core:
/// MindSpore's numpy buffers) write through it, so every framework writes one format.
///
/// Atomicity (docs/checkpoint_format.md): data files get fresh unique names
/// (`__<rank>_<id>.safetensors`) and are written atomically; the metadata is written last and
/// atomically (rename over `.metadata`); only then are data files that the new metadata does
/// not reference removed.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/safetensors.h"

namespace hyper::dcp {

/// One chunk to save as raw bytes: the values of `box` of the logical tensor `name` (of global
/// shape `global_shape`), `nbytes` bytes of `dtype` in row-major order of the box at `data`.
struct RawChunk {
  std::string name;
  Shape global_shape;
  Box box;
  DType dtype = DType::F32;
  const void* data = nullptr;
  int64_t nbytes = 0;
};

/// What write_raw_chunks (and write_chunks) wrote for one chunk.
struct ChunkRecord {
  std::string name;
  DType dtype = DType::F32;
  Shape global_shape;
  ChunkMeta chunk;
};

struct WriteOptions {
  /// Bytes of data per group checksum in .metadata (docs/checkpoint_format.md, "Checksums"):
  /// a group holds checksum_block_size / checksum_leaf_size leaves (at least one).
  int64_t checksum_block_size = int64_t{1} << 20;
  /// Bytes per leaf checksum (stored in the data file, 8 bytes per leaf). A verified partial
  /// read reads at most one leaf beyond each end of every contiguous stretch it needs.
  int64_t checksum_leaf_size = int64_t{1} << 10;
  /// This writer's rank (fault injection and file names).
  int rank = 0;
};

/// Writes `chunks` into `dir`/`file_name` (atomically; `dir` must exist), giving each a
/// physical key (allocate_physical_keys), and returns their metadata records with byte
/// ranges and checksums: the whole-chunk XXH3-64, the file's header checksum and, for a
/// chunk larger than one leaf, its leaf checksums (a U8 tensor `<key>.__dcp_leaves` in the
/// same file, after the data). Throws ValueError for an invalid file name, an empty name, a
/// box outside the global shape or of the wrong rank, a byte count other than the box's
/// elements times the dtype's size, missing data; IOError when the OS refuses. `file_bytes`,
/// when given, receives the size of the file written.
std::vector<ChunkRecord> write_raw_chunks(const std::string& dir, const std::string& file_name,
                                          const std::vector<RawChunk>& chunks,
                                          const WriteOptions& options = {},
                                          int64_t* file_bytes = nullptr);

/// A fresh data file name for `rank`: `__<rank>_<16 random hex digits>.safetensors`.
std::string unique_data_file_name(int rank);

/// Metadata from every writer's records plus the non-tensor values. Throws ValueError if
/// a tensor's records disagree on dtype or global shape, its chunks do not tile it, or a
/// name is both a tensor and a value.
Metadata build_metadata(const std::vector<ChunkRecord>& records,
                        const std::map<std::string, Value>& values);

/// Confirms every data file `meta` references (a regular file, not a symlink; of exactly
/// `file_sizes[file]` bytes where given — the size its writer reported —; reaching its last
/// chunk; its header ending before its first chunk), then writes `dir`/.metadata atomically
/// (the rename is the commit point of a save), then removes data files of earlier saves
/// (`__*.safetensors` not referenced by `meta`) and leftover temporary files, best effort.
/// Call it holding the directory lock (dir_lock.h): the cleanup assumes no other writer.
/// Throws SaveError naming a file that fails the confirmation (`...; nothing was
/// committed`), IOError when writing .metadata fails; returns iff .metadata was renamed in
/// (a failing directory fsync after the rename is not an error). Fault points:
/// before_metadata, after_metadata (with `rank`); write point metadata_write.
void commit_metadata(const std::string& dir, const Metadata& meta, int rank = 0,
                     const std::map<std::string, int64_t>& file_sizes = {});

/// The replica (0..replicas-1) that writes the replicated tensor `name`:
/// XXH3-64(name) % replicas. Spreads writers of different tensors across replicas.
int64_t replica_owner(const std::string& name, int64_t replicas);

}  // namespace hyper::dcp
