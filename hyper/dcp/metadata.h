#pragma once
/// \file metadata.h
/// The checkpoint's `.metadata` file (normative spec: docs/checkpoint_format.md): format
/// version; per logical tensor its dtype, global shape and chunks (N-D boxes), and per
/// chunk the file holding it, its physical key there, its byte range and checksums;
/// non-tensor values (integers, floats, bools, strings). Torch-free.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/dcp/safetensors.h"

namespace hyper::dcp {

/// The version this library writes; it reads versions 1..kFormatVersion. Version 2 added
/// the checksum of .metadata itself, header checksums and leaf checksums (a version 1
/// checkpoint is read only with ReadOptions::allow_unchecksummed: its .metadata and headers
/// are not covered).
constexpr int64_t kFormatVersion = 2;
/// Name of the metadata file inside a checkpoint directory.
constexpr const char* kMetadataFileName = ".metadata";
/// Largest .metadata accepted by default (64 MiB; ReadOptions::max_metadata_bytes).
constexpr int64_t kDefaultMaxMetadataBytes = int64_t{64} << 20;
/// Largest .metadata limit a reader may be configured with (1 GiB).
constexpr int64_t kMaxMetadataBytes = int64_t{1} << 30;
/// Limits Metadata::from_json enforces while it streams the text (each refused with a
/// ValueError naming the value, the limit and the label): nesting depth (the format uses 7
/// levels), the length of a key or of a string other than a value's "str" (a tensor name, a
/// file, a physical key), the entries of a shape, offsets, sizes or byte_range list.
constexpr int kMaxMetadataDepth = 16;
constexpr int64_t kMaxMetadataStringBytes = int64_t{64} << 10;
constexpr int64_t kMaxMetadataDims = 64;

/// Fine-grained checksums of a chunk (format version 2): the XXH3-64 of each `leaf_size`-byte
/// leaf of the chunk, stored in the chunk's data file as a U8 tensor `key` (8 little-endian
/// bytes per leaf), and in the metadata one XXH3-64 per group of `group_leaves` leaf sums
/// (over their bytes). A partial read reads the leaf sums of the groups it touches and
/// verifies whole leaves only (docs/checkpoint_format.md, "Checksums").
struct LeafChecksums {
  std::string key;
  int64_t leaf_size = 0;
  int64_t group_leaves = 0;
  std::vector<uint64_t> group_checksums;
  int64_t leaves_for(int64_t nbytes) const { return (nbytes + leaf_size - 1) / leaf_size; }
  bool operator==(const LeafChecksums& o) const {
    return key == o.key && leaf_size == o.leaf_size && group_leaves == o.group_leaves &&
           group_checksums == o.group_checksums;
  }
};

/// One saved chunk of a tensor.
struct ChunkMeta {
  Box box;                 ///< where the chunk sits in the global shape
  std::string file;        ///< relative to the checkpoint directory
  std::string key;         ///< physical key in the file; empty: the logical name (old files)
  /// Absolute byte range [begin, end) in the file; absent: taken from the file's header.
  std::optional<std::pair<int64_t, int64_t>> byte_range;
  std::optional<uint64_t> checksum;       ///< XXH3-64 of the chunk's bytes
  int64_t block_size = 0;                 ///< 0: no block checksums
  std::vector<uint64_t> block_checksums;  ///< XXH3-64 of each block_size-byte block (v1)
  std::optional<LeafChecksums> leaves;     ///< leaf checksums (v2)
  /// XXH3-64 of the bytes [0, 8 + N) of the chunk's data file (length and JSON header).
  std::optional<uint64_t> header_checksum;
  bool operator==(const ChunkMeta& o) const;
};

/// A logical tensor: dtype, global shape and the chunks that tile it.
struct TensorMeta {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<ChunkMeta> chunks;
  bool operator==(const TensorMeta& o) const {
    return dtype == o.dtype && shape == o.shape && chunks == o.chunks;
  }
};

/// A non-tensor value. (Build with int64_t{7} / std::string("x"): a bare `7` is
/// ambiguous and a string literal would pick bool.)
using Value = std::variant<int64_t, double, bool, std::string>;

/// The whole `.metadata`.
struct Metadata {
  int64_t version = kFormatVersion;
  std::map<std::string, TensorMeta> tensors;
  std::map<std::string, Value> values;
  /// Set by from_json: the text carried a "metadata_checksum" and it matched. (Not part of
  /// ==; to_json always writes one.)
  bool checksummed = false;

  /// The JSON text, sealed with its "metadata_checksum" (seal_metadata_text) (docs/checkpoint_format.md).
  std::string to_json() const;
  /// Parses and validates the JSON text, streaming: it holds the result plus the small DOM
  /// of one chunk (or one value) at a time, never a DOM of the whole text (chunks that come
  /// before their tensor's "dtype" and "shape" are held until the tensor closes). A sealed
  /// text (ending in "metadata_checksum") is checked against its checksum before parsing.
  /// Throws ValueError naming `label` (and the tensor and chunk) for: invalid JSON, a
  /// duplicate key (naming it and where), nesting, strings or dims lists past the limits
  /// above, a format other than "hyper-dcp", a version outside
  /// 1..kFormatVersion, an unknown dtype, a bad shape, a chunk whose rank differs from the
  /// shape's, that lies outside the shape, overlaps another or leaves elements uncovered,
  /// an empty file name, a byte range that is reversed, absurd or does not hold
  /// numel x dtype size bytes, a malformed checksum, block checksums that do not match
  /// the block size, a malformed value.
  static Metadata from_json(const std::string& text, const std::string& label = ".metadata");

  bool operator==(const Metadata& o) const {
    return version == o.version && tensors == o.tensors && values == o.values;
  }
};

/// Appends the field `"metadata_checksum": "<XXH3-64 hex>"` to the JSON object `text`. The checksum covers every
/// byte before `,\n "metadata_checksum"`; from_json checks it and throws ValueError
/// `checksum mismatch in '<label>'` when any byte of the file was changed. Throws ValueError
/// if `text` does not end in `}` (plus whitespace) or is an empty object.
std::string seal_metadata_text(const std::string& text);

/// Physical keys for the chunks of one file, given their logical names in order.
/// A name with one chunk in the file keeps its literal name; a name with several (and the
/// reserved `__metadata__`) gets `NAME.__dcp_chunk_I`, with I counting up from 0 and
/// skipping every key already taken, so that keys stay unique even when another tensor
/// is literally called `NAME.__dcp_chunk_0`. Literal names are allocated first.
///
///   {"weight", "weight", "weight.__dcp_chunk_0"}
///     -> {"weight.__dcp_chunk_1", "weight.__dcp_chunk_2", "weight.__dcp_chunk_0"}
std::vector<std::string> allocate_physical_keys(const std::vector<std::string>& logical);

}  // namespace hyper::dcp
