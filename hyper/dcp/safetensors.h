#pragma once
/// \file safetensors.h
/// safetensors files (https://github.com/huggingface/safetensors): an 8-byte little-endian
/// header length N, N bytes of JSON header padded with spaces so the data starts at a
/// multiple of 8, then the tensors' bytes packed in order. Torch-free.
///
///   {"__metadata__":{"format":"hyper-dcp"},
///    "w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}
///
/// `data_offsets` are relative to the start of the data; TensorInfo keeps absolute file
/// offsets. The reader treats every file as hostile: see parse_safetensors_header.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"

namespace hyper::dcp {

class ReadFile;

/// The safetensors dtypes that ATen also has.
enum class DType : uint8_t { F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL };

/// Bytes per element.
int64_t dtype_size(DType d);
/// The safetensors name: "F32", "BOOL", ...
const char* dtype_name(DType d);
/// Inverse of dtype_name; nullopt for an unknown name.
std::optional<DType> dtype_from_name(const std::string& name);
/// Every DType, in enum order.
const std::vector<DType>& all_dtypes();

/// Largest header accepted (the reference implementation's limit, 100 MB).
constexpr int64_t kMaxHeaderBytes = int64_t{100} << 20;

/// One tensor of a file: its key, dtype, shape and absolute byte range [begin, end).
struct TensorInfo {
  std::string key;
  DType dtype = DType::F32;
  Shape shape;
  int64_t begin = 0;
  int64_t end = 0;
  int64_t nbytes() const { return end - begin; }
};

/// A parsed, validated header.
struct SafetensorsHeader {
  std::string file;          ///< path or label used in error messages
  int64_t file_size = 0;
  int64_t data_start = 0;    ///< 8 + N
  std::map<std::string, std::string> metadata;  ///< `__metadata__` (string -> string)
  std::vector<TensorInfo> tensors;              ///< ordered by begin offset
  /// The tensor named `key`, or nullptr.
  const TensorInfo* find(const std::string& key) const;
};

/// Parses and validates the JSON header bytes of a file of `file_size` bytes whose header
/// is `n` bytes long. Throws ValueError naming `file` (and the key) for: invalid JSON,
/// nesting past 64 levels, a non-object header, duplicate keys, a non-object entry,
/// `__metadata__` that is not an object of strings, an unknown dtype, a shape that is
/// not a list of non-negative integers or whose byte size overflows, data_offsets that
/// are not two integers begin <= end, a byte size other than dtype size x numel, a range
/// past the end of the file, two tensors whose ranges overlap.
SafetensorsHeader parse_safetensors_header(const char* json, int64_t n, int64_t file_size,
                                           const std::string& file);

/// Validates a whole file held in memory (the fuzz entry point): the length prefix
/// (refused when absurd, past kMaxHeaderBytes or past the end), then the header.
SafetensorsHeader parse_safetensors_bytes(const char* data, int64_t n, const std::string& file);

/// Reads and validates the header of an open file (two preads: 8 bytes, then N).
SafetensorsHeader read_safetensors_header(const ReadFile& f);
/// Opens `path` and reads its header.
SafetensorsHeader read_safetensors_header(const std::string& path);

/// One tensor to write: `nbytes` contiguous bytes at `data` (which must stay valid during
/// the write), equal to dtype_size(dtype) x numel(shape).
struct TensorToWrite {
  std::string key;
  DType dtype = DType::F32;
  Shape shape;
  const void* data = nullptr;
  int64_t nbytes = 0;
};

/// What was written for one tensor: absolute byte range and checksums of its bytes.
struct WrittenTensor {
  std::string key;
  int64_t begin = 0;
  int64_t end = 0;
  uint64_t checksum = 0;                 ///< XXH3-64 of all its bytes
  int64_t block_size = 0;                ///< 0 when block_checksums is empty
  std::vector<uint64_t> block_checksums; ///< XXH3-64 of each block_size-byte block
};

/// The bytes a safetensors file starts with when it holds `tensors` packed in the given
/// order without holes: the 8-byte little-endian length N, N bytes of JSON header
/// (`__metadata__` first when `metadata` is not empty) padded with spaces so the data
/// starts at a multiple of 8. The data follows at offset size(); tensor i's bytes come after
/// those of tensors 0..i-1. Uses each tensor's key, dtype, shape and nbytes, not its data,
/// so a caller may stream the data afterwards (hyper-dcp consolidate). Throws ValueError
/// naming `path` for an empty, duplicate or `__metadata__` key, a negative or overflowing
/// shape, or a byte count other than dtype size x numel.
std::string safetensors_header_bytes(const std::string& path,
                                     const std::vector<TensorToWrite>& tensors,
                                     const std::map<std::string, std::string>& metadata = {});

struct SafetensorsWriteOptions {
  /// Block size of the per-block checksums (a tensor no larger gets none). > 0.
  int64_t checksum_block_size = int64_t{1} << 20;
  /// String metadata stored as `__metadata__`.
  std::map<std::string, std::string> metadata;
  /// Rank reported to fault_point("mid_data_file", rank) halfway through the data.
  int fault_rank = 0;
};

/// Writes a safetensors file atomically (temporary file, fsync, rename, fsync dir),
/// streaming each tensor's bytes from its buffer (nothing is concatenated in memory).
/// Throws ValueError for an empty, duplicate or `__metadata__` key, a negative shape or
/// a byte count other than dtype size x numel; IOError when the OS refuses.
std::vector<WrittenTensor> write_safetensors(const std::string& path,
                                             const std::vector<TensorToWrite>& tensors,
                                             const SafetensorsWriteOptions& options = {});

}  // namespace hyper::dcp
