#pragma once
/// \file save_protocol.h
/// The distributed save protocol (docs/checkpoint_format.md, "Sequence"), torch-free: rank 0
/// locks the directory, every rank checks it writes into that directory and writes its data
/// file, the records are exchanged, rank 0 confirms the files and commits, everyone learns the
/// outcome. Its three collectives go through a SaveChannel, so hyper::dcp::save (c10d, the
/// checkpoint group of a World) and hyper.mindspore.dcp.save (MindSpore's collectives, through
/// hyper._core) run the same protocol and write the same checkpoints.

#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hyper/dcp/metadata.h"
#include "hyper/dcp/writer.h"

namespace hyper::dcp {

/// The collectives of one save, over every rank of it, in the same order on every rank. Each
/// throws (any exception) when a peer failed or timed out; it must not hang forever.
class SaveChannel {
 public:
  virtual ~SaveChannel() = default;
  /// Rank 0's `text` on every rank (the others' argument is ignored).
  virtual std::string broadcast_text(const std::string& text) = 0;
  /// Every rank's `text`, concatenated in rank order.
  virtual std::string all_gather_text(const std::string& text) = 0;
  /// Rank 0's `code` on every rank.
  virtual int64_t broadcast_code(int64_t code) = 0;
  /// The text of a failed collective: `<what> failed (<why such a failure happens>): <error>`.
  virtual std::string failure(const char* what, const std::exception& e) const = 0;
  /// A failed collective's error message alone.
  virtual std::string error_text(const std::exception& e) const { return e.what(); }
};

/// One rank's part of a save.
struct SaveRequest {
  std::string dir;
  int rank = 0;
  int size = 1;
  int64_t checksum_block_size = int64_t{1} << 20;
  /// Whether this rank writes a data file (then `write` is called once, inside the protocol:
  /// its errors are reported to every rank like any other failure).
  bool has_chunks = false;
  /// Writes this rank's chunks into `dir`/`file` (write_raw_chunks or write_chunks).
  std::function<std::vector<ChunkRecord>(const std::string& dir, const std::string& file,
                                         const WriteOptions& options, int64_t* file_bytes)>
      write;
  /// Non-tensor values (rank 0's are committed).
  std::map<std::string, Value> values;
};

/// Runs the protocol on this rank. `channel` may be null for a single rank. Returns on a rank
/// exactly when it knows `.metadata` was renamed in; throws SaveError otherwise, naming whether
/// nothing was committed or the commit state is unknown (with the `hyper-dcp` commands that
/// tell). Fault points (fs.h): after_lock, after_data_file, after_gather, and commit_metadata's.
void run_save(const SaveRequest& request, SaveChannel* channel);

}  // namespace hyper::dcp
