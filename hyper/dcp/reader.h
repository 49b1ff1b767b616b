#pragma once
/// \file reader.h
/// CheckpointReader: opens a checkpoint directory and executes read plans
/// (hyper::read_runs) with positioned reads straight into a caller's buffer, reading only
/// the byte ranges the target needs and verifying checksums. Torch-free.
///
///   hyper::dcp::CheckpointReader r("ckpt/step7");
///   std::vector<float> out(12);
///   r.read("w", {hyper::FlatBox{hyper::Box({0, 0}, {3, 4}), 0}}, DType::F32,
///          out.data(), 48);
///
/// Checksum verification (docs/checkpoint_format.md, "Checksums"): chunks carry an XXH3-64
/// of their bytes and, when larger than the block size (1 MiB by default), one XXH3-64
/// per block. A partial read reads and verifies the whole blocks it touches, so it reads
/// at most one block beyond each end of every contiguous stretch it needs; a chunk without
/// block checksums is read whole once any part of it is needed. With verification off,
/// exactly the needed bytes are read.

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/safetensors.h"

namespace hyper::dcp {

struct ReadOptions {
  /// Verify checksums of every byte read (default). Off: read exactly the needed bytes.
  bool verify_checksums = true;
  /// Largest `.metadata` accepted, in bytes (default kDefaultMaxMetadataBytes, 64 MiB; at
  /// most kMaxMetadataBytes). A larger one is refused before it is read, naming its size
  /// and this limit.
  int64_t max_metadata_bytes = kDefaultMaxMetadataBytes;
};

class CheckpointReader {
 public:
  /// Reads and validates `dir`/.metadata. Throws ValueError
  /// `incomplete checkpoint (no .metadata): <dir>` when it is missing (a save that did not
  /// finish), or any Metadata::from_json error; IOError when `dir` cannot be read.
  explicit CheckpointReader(std::string dir, ReadOptions options = {});

  const std::string& dir() const { return dir_; }
  const Metadata& metadata() const { return meta_; }
  /// The tensor's metadata. Throws ValueError `tensor 'x' is not in checkpoint <dir>`.
  const TensorMeta& tensor(const std::string& name) const;

  /// Reads the elements of `name` inside `region` (boxes in global coordinates, each
  /// with its place in the destination's flat storage) into `dst`, a buffer of
  /// `dst_bytes` bytes of `dtype`. Only chunks and byte ranges that overlap the region
  /// are read. Throws ValueError: unknown tensor; dtype other than the saved one; a region
  /// not covered by the saved shape or whose local ranges exceed `dst_bytes`; a chunk file
  /// that leaves the directory, is not valid safetensors, lacks the chunk's key, disagrees
  /// with the metadata (dtype, shape, byte range) or fails its checksum.
  void read(const std::string& name, const std::vector<FlatBox>& region, DType dtype, void* dst,
            int64_t dst_bytes);

  /// Reads and verifies every chunk of every tensor (whole files' worth of reads).
  void verify_all();

  /// Bytes read from chunk files so far (headers and .metadata not counted).
  int64_t bytes_read() const { return bytes_read_.load(); }
  void reset_bytes_read() { bytes_read_ = 0; }

 private:
  struct OpenFile {
    ReadFile file;
    SafetensorsHeader header;
  };
  OpenFile& open_file(const std::string& rel, const std::string& what);
  /// Validated absolute byte range of chunk `ci` of `name`.
  std::pair<int64_t, int64_t> chunk_range(const std::string& name, const TensorMeta& t,
                                          size_t ci);

  std::string dir_;
  ReadOptions options_;
  Metadata meta_;
  std::map<std::string, std::unique_ptr<OpenFile>> files_;
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace hyper::dcp
