// The save protocol (save_protocol.h), torch-free: its collectives go through a SaveChannel.
#include "hyper/dcp/save_protocol.h"

#include <unistd.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"

namespace hyper::dcp {

using hyper::internal::str_cat;
using nlohmann::json;

namespace {


json record_to_json(const ChunkRecord& r) {
  json j;
  j["name"] = r.name;
  j["dtype"] = dtype_name(r.dtype);
  j["shape"] = r.global_shape;
  j["offsets"] = r.chunk.box.offsets;
  j["sizes"] = r.chunk.box.sizes;
  j["file"] = r.chunk.file;
  j["key"] = r.chunk.key;
  if (r.chunk.byte_range) j["range"] = {r.chunk.byte_range->first, r.chunk.byte_range->second};
  if (r.chunk.checksum) j["checksum"] = *r.chunk.checksum;
  if (r.chunk.block_size > 0) {
    j["block_size"] = r.chunk.block_size;
    j["blocks"] = r.chunk.block_checksums;
  }
  if (r.chunk.header_checksum) j["header_checksum"] = *r.chunk.header_checksum;
  if (r.chunk.leaves) {
    const LeafChecksums& l = *r.chunk.leaves;
    j["leaves"] = {{"key", l.key}, {"leaf_size", l.leaf_size}, {"group_leaves", l.group_leaves},
                   {"groups", l.group_checksums}};
  }
  return j;
}

ChunkRecord record_from_json(const json& j) {
  ChunkRecord r;
  r.name = j.at("name").get<std::string>();
  const auto d = dtype_from_name(j.at("dtype").get<std::string>());
  HYPER_CHECK_VALUE(d.has_value(), "bad dtype in a chunk record");
  r.dtype = *d;
  r.global_shape = j.at("shape").get<Shape>();
  r.chunk.box = Box(j.at("offsets").get<std::vector<int64_t>>(),
                    j.at("sizes").get<std::vector<int64_t>>());
  r.chunk.file = j.at("file").get<std::string>();
  r.chunk.key = j.at("key").get<std::string>();
  if (j.contains("range"))
    r.chunk.byte_range = std::make_pair(j["range"][0].get<int64_t>(), j["range"][1].get<int64_t>());
  if (j.contains("checksum")) r.chunk.checksum = j["checksum"].get<uint64_t>();
  if (j.contains("block_size")) {
    r.chunk.block_size = j["block_size"].get<int64_t>();
    r.chunk.block_checksums = j["blocks"].get<std::vector<uint64_t>>();
  }
  if (j.contains("header_checksum")) r.chunk.header_checksum = j["header_checksum"].get<uint64_t>();
  if (j.contains("leaves")) {
    const json& lj = j["leaves"];
    LeafChecksums l;
    l.key = lj.at("key").get<std::string>();
    l.leaf_size = lj.at("leaf_size").get<int64_t>();
    l.group_leaves = lj.at("group_leaves").get<int64_t>();
    l.group_checksums = lj.at("groups").get<std::vector<uint64_t>>();
    r.chunk.leaves = std::move(l);
  }
  return r;
}

/// The tail of a SaveError on a rank that cannot know whether rank 0 committed.
std::string unknown_state(const SaveRequest& job, const std::string& file) {
  const std::string meta = join_path(job.dir, kMetadataFileName);
  return str_cat(
      "; the commit state is unknown (rank 0 may have committed before the failure): the save "
      "was committed iff '", meta, "' ",
      file.empty() ? std::string("holds the values of this save (this rank wrote no data file)")
                   : str_cat("references this rank's data file '", file, "'"),
      " — check with `hyper-dcp list ", job.dir, "` and `hyper-dcp verify ", job.dir, "`");
}

std::string with_nothing_committed(std::string m) {
  const std::string tail = "; nothing was committed";
  if (m.size() < tail.size() || m.compare(m.size() - tail.size(), tail.size(), tail) != 0) m += tail;
  return m;
}

/// Removes this rank's data file of a save that certainly did not commit (best effort: a
/// leftover is removed by the next commit in the directory).
void remove_own_file(const SaveRequest& job, const std::string& file) {
  if (file.empty()) return;
  try {
    remove_file(join_path(job.dir, file));
  } catch (const std::exception&) {
  }
}

/// Checks that `job.dir` on this (non-zero) rank is the directory rank 0 locked: its .lock
/// names rank 0's save id. Throws ValueError naming both directories otherwise.
void check_same_directory(const SaveRequest& job, const std::string& save_id, const std::string& dir0,
                          const std::string& host0) {
  std::string found;
  try {
    found = read_lock_file(job.dir);
  } catch (const std::exception& e) {
    found = str_cat("(unreadable: ", e.what(), ")");
  }
  if (found.find(", save " + save_id + ",") != std::string::npos) return;
  throw ValueError(str_cat(
      "checkpoint directory '", job.dir, "' is not rank 0's '", dir0, "': rank ", job.rank,
      " on host ", host_name(), " finds ",
      found.empty() ? std::string("no lock file") : str_cat("the lock '", found, "'"),
      " there, not rank 0's save ", save_id, " (host ", host0,
      "); every rank must be given the same directory, on storage shared by all hosts"));
}

}  // namespace

/// The save protocol (docs/checkpoint_format.md, "Sequence"): rank 0 locks the directory,
/// every rank checks it writes into that directory and writes its data file, the records are
/// exchanged, rank 0 confirms the files and commits, everyone learns the outcome. Returns on
/// a rank exactly when it knows `.metadata` was renamed in; throws SaveError otherwise, naming
/// whether nothing was committed or the commit state is unknown.
void run_save(const SaveRequest& job, SaveChannel* channel) {
  HYPER_CHECK_VALUE(job.size <= 1 || channel != nullptr, "run_save: ", job.size,
                    " ranks need a channel");
  const std::string prefix = str_cat("save to '", job.dir, "' failed: ");
  const std::string me = str_cat("rank ", job.rank, ": ");
  const bool multi = job.size > 1;

  // 1. Rank 0 creates the directory and takes its writer lock for the whole save.
  DirLock lock;
  std::string save_id, dir0 = job.dir, host0 = host_name(), lock_error;
  if (job.rank == 0) {
    try {
      make_dirs(job.dir);
      save_id = new_save_id();
      lock = DirLock(job.dir, lock_holder_text(save_id));
    } catch (const std::exception& e) {
      lock_error = e.what();
    }
    fault_point("after_lock", job.rank);
  }
  if (multi) {
    json line = lock_error.empty()
                    ? json{{"save", save_id}, {"dir", job.dir}, {"host", host0}}
                    : json{{"error", lock_error}};
    std::string text;
    try {
      text = channel->broadcast_text(line.dump());
    } catch (const std::exception& e) {
      throw SaveError(prefix + me + channel->failure("the lock broadcast", e) +
                      "; nothing was committed");
    }
    line = json::parse(text);
    if (line.contains("error")) lock_error = line["error"].get<std::string>();
    else {
      save_id = line.at("save").get<std::string>();
      dir0 = line.at("dir").get<std::string>();
      host0 = line.at("host").get<std::string>();
    }
  }
  if (!lock_error.empty()) throw SaveError(prefix + "rank 0: " + lock_error);

  // 2. Every rank checks it writes into rank 0's directory, then writes its data file.
  std::string local_error, file;
  int64_t file_size = 0;
  std::vector<ChunkRecord> records;
  try {
    if (job.rank != 0) check_same_directory(job, save_id, dir0, host0);
    if (job.has_chunks) {
      WriteOptions wo;
      wo.rank = job.rank;
      wo.checksum_block_size = job.checksum_block_size;
      const std::string name = unique_data_file_name(job.rank);
      records = job.write(job.dir, name, wo, &file_size);
      file = name;
    }
  } catch (const std::exception& e) {
    local_error = e.what();
    if (local_error.empty()) local_error = "unknown error";
  }
  fault_point("after_data_file", job.rank);

  // 3. Record exchange.
  json payload;
  if (!local_error.empty()) {
    payload["error"] = local_error;
  } else {
    payload["records"] = json::array();
    for (const auto& r : records) payload["records"].push_back(record_to_json(r));
    if (!file.empty()) payload["file"] = {file, file_size};
  }
  // One line per rank (dump() escapes newlines inside strings).
  std::string mine = payload.dump() + "\n";
  std::string gathered = mine;
  if (multi) {
    try {
      gathered = channel->all_gather_text(mine);
    } catch (const std::exception& e) {
      const std::string why = prefix + me + channel->failure("the record exchange", e);
      if (job.rank == 0) {  // rank 0 commits only after a complete exchange
        remove_own_file(job, file);
        throw SaveError(why + "; nothing was committed");
      }
      throw SaveError(why + unknown_state(job, file));
    }
  }
  fault_point("after_gather", job.rank);

  // 4. Rank 0 confirms every referenced file and commits.
  int64_t code = 0;
  std::string message;
  bool committed = false;
  if (job.rank == 0) {
    try {
      std::vector<ChunkRecord> all;
      std::vector<std::string> errors;
      std::map<std::string, int64_t> sizes;
      std::istringstream lines(gathered);
      std::string line;
      int r = 0;
      for (; std::getline(lines, line); ++r) {
        const json j = json::parse(line);
        if (j.contains("error")) {
          errors.push_back(str_cat("rank ", r, ": ", j["error"].get<std::string>()));
          continue;
        }
        for (const auto& jr : j.at("records")) all.push_back(record_from_json(jr));
        if (j.contains("file"))
          sizes[j["file"][0].get<std::string>()] = j["file"][1].get<int64_t>();
      }
      HYPER_CHECK_VALUE(r == job.size, "metadata exchange returned ", r, " records for ",
                        job.size, " ranks");
      if (!errors.empty()) {
        code = 1;
        message = prefix;
        for (size_t i = 0; i < errors.size(); ++i) message += (i ? "; " : "") + errors[i];
      } else {
        // Identical boxes written twice (DTensors on sub-meshes that do not span the world
        // are saved by each copy): keep the first.
        std::set<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>> seen;
        std::vector<ChunkRecord> unique;
        for (auto& rec : all)
          if (seen.emplace(rec.name, rec.chunk.box.offsets, rec.chunk.box.sizes).second)
            unique.push_back(std::move(rec));
        commit_metadata(job.dir, build_metadata(unique, job.values), job.rank, sizes);
        committed = true;  // commit_metadata returns iff .metadata was renamed in
      }
    } catch (const std::exception& e) {
      code = 1;
      message = prefix + "rank 0: " + e.what();
    }
    if (code != 0) message = with_nothing_committed(message);
  }

  // 5. Status: rank 0's outcome reaches every rank.
  if (multi) {
    try {
      code = channel->broadcast_code(code);
      if (code != 0) message = channel->broadcast_text(message);
    } catch (const std::exception& e) {
      if (job.rank == 0) {
        // Committed is committed: a peer that missed the status reports an unknown state.
        if (committed) return;
        remove_own_file(job, file);
        throw SaveError(message + " (and the status broadcast failed: " + channel->error_text(e) +
                        ")");
      }
      throw SaveError(prefix + me + channel->failure("the status broadcast from rank 0", e) +
                      unknown_state(job, file));
    }
  }
  if (code != 0) {
    remove_own_file(job, file);
    throw SaveError(message);
  }
}

}  // namespace hyper::dcp
