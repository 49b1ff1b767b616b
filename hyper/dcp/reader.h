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
/// Checksum verification (docs/checkpoint_format.md, "Checksums"): checksums are required.
/// A checkpoint whose .metadata carries no "metadata_checksum" (format version 1, or a file
/// whose checksum fields were removed), or a chunk without a checksum or header checksum, is
/// refused with a ValueError unless ReadOptions::allow_unchecksummed is set (then whatever
/// checksums are present are verified). Chunks written by this version carry one XXH3-64 per
/// 1 KiB leaf (stored in the data file; .metadata holds a checksum per group of 1024 leaf
/// sums): a partial read reads the whole leaves it touches plus the leaf sums of the groups it
/// touches (8 bytes per KiB), so a verified read reads at most one leaf beyond each end of
/// every contiguous stretch, plus 0.8 % (e.g. 1.03x for a Shard(1) reshard of 4 KiB rows on 4
/// ranks). With verification off, exactly the needed bytes are read.
///
/// Verify before touch: read() writes `dst` only after every byte it copies there was
/// verified. It verifies first, hashing the file's bytes through views of the page cache
/// (ReadFile::view, at most 8 MiB mapped at a time), then reads the runs straight into `dst`
/// (a second pass over the page cache: no staging copy, no staging memory). A load verifies
/// every target with verify() before it copies any with copy_verified().

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/safetensors.h"

namespace hyper::dcp {

struct ReadOptions {
  /// Verify checksums of every byte read (default). Off: read exactly the needed bytes,
  /// nothing is verified and nothing is required.
  bool verify_checksums = true;
  /// Largest `.metadata` accepted, in bytes (default kDefaultMaxMetadataBytes, 64 MiB; at
  /// most kMaxMetadataBytes). A larger one is refused before it is read, naming its size
  /// and this limit.
  int64_t max_metadata_bytes = kDefaultMaxMetadataBytes;
  /// Accept a checkpoint without checksums: a .metadata without "metadata_checksum" (e.g.
  /// format version 1) and chunks without checksum or header checksum are read, verifying
  /// only the checksums present. Default: refused with a ValueError (an attacker or a tool
  /// that strips the fields must not switch verification off).
  bool allow_unchecksummed = false;
};

class CheckpointReader {
 public:
  /// Reads and validates `dir`/.metadata. Throws ValueError
  /// `incomplete checkpoint (no .metadata): <dir>` when it is missing (a save that did not
  /// finish), or any Metadata::from_json error; IOError when `dir` cannot be read.
  /// With verification on and allow_unchecksummed off, also a ValueError
  /// `<dir>/.metadata carries no checksum ...` for an unsealed .metadata, and
  /// `checksum mismatch in '<dir>/.metadata'` for an edited one.
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
  /// with the metadata (dtype, shape, byte range) or fails its checksum; a chunk without
  /// checksums (unless allow_unchecksummed); a data file header that fails its checksum
  /// (`header checksum mismatch in '<file>'`). On any of these errors `dst` is unchanged:
  /// every chunk's plan is checked and every checksum verified before `dst` is written. An
  /// I/O error while copying may leave `dst` partly written. The bytes are copied as stored
  /// (BOOL bytes other than 0 and 1 too: read_into and verify() refuse those).
  void read(const std::string& name, const std::vector<FlatBox>& region, DType dtype, void* dst,
            int64_t dst_bytes);

  /// The same as read() (which no longer stages).
  void read_into_scratch(const std::string& name, const std::vector<FlatBox>& region,
                         DType dtype, void* dst, int64_t dst_bytes);

  /// The checks and verification of read() for the same arguments, writing nothing: every
  /// checksum covering the bytes the read would copy, and that BOOL elements hold 0 or 1
  /// (ValueError `loading '<name>': BOOL element i holds the byte b (a bool is 0 or 1)`).
  /// Memory: one view of at most 8 MiB and the leaf sums of the chunk at hand. Throws as
  /// read().
  void verify(const std::string& name, const std::vector<FlatBox>& region, DType dtype,
              int64_t dst_bytes);

  /// The copy of read() without verifying again: for a region whose verify() succeeded on
  /// this reader (a load's second pass), or any region when verification is off. Checks the
  /// plan (ValueError as read()); the bytes are copied as the files hold them now, so pair
  /// it with check_unchanged().
  void copy_verified(const std::string& name, const std::vector<FlatBox>& region, DType dtype,
                     void* dst, int64_t dst_bytes);

  /// Throws ValueError `'<file>' changed while it was read (...)` when a data file this
  /// reader opened was written in place since it was opened (size or modification time
  /// differ): its verified bytes may no longer be the copied ones.
  void check_unchanged() const;

  /// Reads and verifies chunk `ci` of `name`: every byte read once, in pieces of at most
  /// 8 MiB (rounded up to a leaf group), checking the leaf sums (or v1 blocks) and the
  /// whole-chunk checksum as it streams. Throws as read(); a chunk without any checksum is
  /// refused unless allow_unchecksummed (then only read).
  void verify_chunk(const std::string& name, size_t ci);

  /// verify_chunk for every chunk of every tensor (bounded memory: one piece buffer).
  void verify_all();

  /// Bytes read from chunk files so far (headers and .metadata not counted).
  int64_t bytes_read() const { return bytes_read_.load(); }
  void reset_bytes_read() { bytes_read_ = 0; }

 private:
  struct OpenFile {
    ReadFile file;
    SafetensorsHeader header;
    std::optional<uint64_t> header_hash;  ///< XXH3-64 of [0, data_start), once computed
  };
  struct ChunkRead;  // one chunk's part of a read (reader.cc)
  OpenFile& open_file(const std::string& rel, const std::string& what);
  /// Validated absolute byte range of chunk `ci` of `name`.
  std::pair<int64_t, int64_t> chunk_range(const std::string& name, const TensorMeta& t,
                                          size_t ci);
  /// Checks the region, plans the runs per chunk and validates every chunk touched.
  std::vector<ChunkRead> plan(const std::string& name, const std::vector<FlatBox>& region,
                              DType dtype, int64_t dst_bytes);
  /// Whether chunk `c` of `nbytes` bytes is verified (options and checksums present).
  bool verifies(const ChunkMeta& c, int64_t nbytes) const;
  /// Verifies the checksums covering `plan`; with `check_bools`, also that BOOL bytes are 0/1.
  void verify_planned(const std::string& name, const std::vector<ChunkRead>& plan, DType dtype,
                      bool check_bools);
  void copy_planned(const std::string& name, const std::vector<ChunkRead>& plan, DType dtype,
                    char* out);
  /// Reads and verifies the leaf sums of groups [g0, g1) of a chunk into sums[g0 * GL ...].
  void read_leaf_sums(const std::string& name, const TensorMeta& t, size_t ci, int64_t g0,
                      int64_t g1, std::vector<uint64_t>& sums);

  std::string dir_;
  ReadOptions options_;
  Metadata meta_;
  std::map<std::string, std::unique_ptr<OpenFile>> files_;
  std::atomic<int64_t> bytes_read_{0};
};

}  // namespace hyper::dcp
