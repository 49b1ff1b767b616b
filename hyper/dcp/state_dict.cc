// Distributed save/load of a StateDict (DTensors, tensors, values) on top of the storage
// layer (write_chunks, build_metadata, commit_metadata, CheckpointReader, read_into).
// Protocol: docs/checkpoint_format.md ("Save and load protocol").
#include "hyper/dcp/state_dict.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <type_traits>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/comm/c10_errors.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"

namespace hyper::dcp {

using hyper::internal::str_cat;
using nlohmann::json;


namespace {

// ---- checkpoint group and save serialisation (both live with the World) ------------------

constexpr const char* kCheckpointGroup = "hyper_dcp/checkpoint";
constexpr const char* kSaves = "hyper_dcp/save";

/// The dedicated checkpoint group of `world` (created collectively on first use: every rank
/// of the world reaches it through save/async_save).
comm::Group checkpoint_group(const World& world) { return world.dedicated_group(kCheckpointGroup); }

/// A Work finishing with `done` (errors keep their type: SaveError, ValueError).
comm::Work work_of(std::shared_future<void> done, const std::string& what) {
  return comm::Work::deferred(
      what,
      [done]() {
        done.get();
        return at::Tensor();
      },
      [done]() { return done.wait_for(std::chrono::seconds(0)) == std::future_status::ready; });
}

/// Records `next` as the latest save on `world` and waits for the previous one (its errors
/// belong to its own handle).
void serialise_after_previous(const World& world, const comm::Work& next) {
  comm::Work prev = world.exchange_background(kSaves, next);
  try {
    prev.wait();
  } catch (...) {
  }
}

// ---- staging -----------------------------------------------------------------------------

struct SaveJob {
  World world;  // undefined: single process
  comm::Group group;
  int rank = 0;
  int size = 1;
  std::string dir;
  int64_t checksum_block_size = int64_t{1} << 20;
  std::vector<ChunkData> chunks;
  std::map<std::string, Value> values;  // rank 0 only
};

World world_of(const StateDict& state, const SaveOptions& options) {
  World found;
  std::string first;
  for (const auto& [name, v] : state) {
    const auto* dt = std::get_if<DTensor>(&v);
    if (dt == nullptr) continue;
    HYPER_CHECK_VALUE(dt->defined(), "saving '", name, "': undefined DTensor");
    const World& w = dt->device_mesh().world();
    if (!found.defined()) {
      found = w;
      first = name;
    } else {
      HYPER_CHECK_VALUE(found.state() == w.state(), "saving: DTensors '", first, "' and '", name,
                        "' live on different worlds");
    }
  }
  if (options.world) {
    HYPER_CHECK_VALUE(options.world->defined(), "save: SaveOptions::world is undefined");
    HYPER_CHECK_VALUE(!found.defined() || found.state() == options.world->state(),
                      "save: SaveOptions::world differs from the world of DTensor '", first, "'");
    return *options.world;
  }
  if (found.defined()) return found;
  try {
    return default_world();
  } catch (const ValueError&) {
    return World();  // single process
  }
}

at::Tensor stage_copy(const at::Tensor& t) {
  at::Tensor d = t.detach();
  if (d.device().is_cpu()) return d.clone(at::MemoryFormat::Contiguous);
  return d.to(at::kCPU).contiguous();
}

void stage_dtensor(const std::string& name, DTensor dt, bool copy, std::vector<ChunkData>& out) {
  if (dt.layout().has_partial()) {
    // Reduce first: Partial -> Replicate on those mesh dims (collective over the mesh).
    Placements p = dt.placements();
    for (auto& x : p)
      if (x.is_partial()) x = Replicate();
    dt = dt.redistribute(dt.device_mesh(), p);
  }
  const Layout& layout = dt.layout();
  const DeviceMesh& mesh = dt.device_mesh();
  const auto coord = mesh.get_coordinate();
  int64_t replicas = 1;
  int64_t replica = 0;
  for (int64_t d = 0; d < mesh.ndim(); ++d) {
    if (!layout.placements()[static_cast<size_t>(d)].is_replicate()) continue;
    replica = replica * mesh.size(d) + coord[static_cast<size_t>(d)];
    replicas *= mesh.size(d);
  }
  if (replica != replica_owner(name, replicas)) return;
  const Shape& shape = layout.shape();
  if (layout.numel() == 0) {
    // Nothing to tile: the owner replica at coordinate 0 of every other dim records the
    // (empty) whole box so that the tensor appears in the metadata.
    for (int64_t d = 0; d < mesh.ndim(); ++d)
      if (!layout.placements()[static_cast<size_t>(d)].is_replicate() &&
          coord[static_cast<size_t>(d)] != 0)
        return;
    out.push_back(ChunkData{name, shape, Box::full(shape),
                            at::empty(shape, dt.options().device(at::kCPU))});
    return;
  }
  const at::Tensor flat = dt.to_local().detach().reshape({-1});
  for (const auto& fb : layout.local_region(dt.mesh_index())) {
    if (fb.box.numel() == 0) continue;
    at::Tensor piece = flat.slice(0, fb.local_start, fb.local_end());
    out.push_back(ChunkData{name, shape, fb.box, copy ? stage_copy(piece) : piece});
  }
}

SaveJob prepare(const StateDict& state, const std::string& dir, const SaveOptions& options,
                bool copy) {
  HYPER_CHECK_VALUE(!dir.empty(), "save: empty checkpoint directory");
  HYPER_CHECK_VALUE(options.checksum_block_size > 0, "save: checksum_block_size must be > 0");
  SaveJob job;
  job.world = world_of(state, options);
  job.dir = dir;
  job.checksum_block_size = options.checksum_block_size;
  if (job.world.defined()) {
    job.rank = job.world.rank();
    job.size = job.world.size();
  }
  for (const auto& [name, v] : state) {
    HYPER_CHECK_VALUE(!name.empty(), "save: empty name in the state dict");
    if (const auto* t = std::get_if<at::Tensor>(&v)) {
      HYPER_CHECK_VALUE(t->defined(), "saving '", name, "': undefined tensor");
    }
  }
  for (const auto& [name, v] : state) {
    if (const auto* dt = std::get_if<DTensor>(&v)) {
      stage_dtensor(name, *dt, copy, job.chunks);
    } else if (const auto* t = std::get_if<at::Tensor>(&v)) {
      if (replica_owner(name, job.size) != job.rank) continue;
      const Shape shape(t->sizes().begin(), t->sizes().end());
      job.chunks.push_back(ChunkData{name, shape, Box::full(shape), copy ? stage_copy(*t) : *t});
    } else if (job.rank == 0) {
      std::visit(
          [&](const auto& x) {
            using X = std::decay_t<decltype(x)>;
            if constexpr (!std::is_same_v<X, DTensor> && !std::is_same_v<X, at::Tensor>)
              job.values.emplace(name, Value(x));
          },
          v);
    }
  }
  if (job.world.defined() && job.size > 1) job.group = checkpoint_group(job.world);
  return job;
}

// ---- record exchange ---------------------------------------------------------------------

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

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

/// Broadcasts rank 0's `text` (length, then bytes) over the checkpoint group.
std::string broadcast_text(const SaveJob& job, const std::string& text) {
  at::Tensor len = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
  len = comm::broadcast(len, 0, job.group);
  const int64_t n = len[0].item<int64_t>();
  if (n == 0) return "";
  at::Tensor msg = job.rank == 0 ? bytes_tensor(text) : at::empty({n}, at::kByte);
  return tensor_bytes(comm::broadcast(msg, 0, job.group));
}

/// What a failed collective of the save means (`what`: which step).
std::string comm_failure(const SaveJob& job, const char* what, const std::exception& e) {
  return str_cat(what, " failed (a rank died or exceeded the collective timeout of ",
                 job.world.defined() ? job.world.timeout().count() : 0, " ms): ",
                 hyper::message_of(e));
}

/// The tail of a SaveError on a rank that cannot know whether rank 0 committed.
std::string unknown_state(const SaveJob& job, const std::string& file) {
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
void remove_own_file(const SaveJob& job, const std::string& file) {
  if (file.empty()) return;
  try {
    remove_file(join_path(job.dir, file));
  } catch (const std::exception&) {
  }
}

/// Checks that `job.dir` on this (non-zero) rank is the directory rank 0 locked: its .lock
/// names rank 0's save id. Throws ValueError naming both directories otherwise.
void check_same_directory(const SaveJob& job, const std::string& save_id, const std::string& dir0,
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

/// The save protocol (docs/checkpoint_format.md, "Sequence"): rank 0 locks the directory,
/// every rank checks it writes into that directory and writes its data file, the records are
/// exchanged, rank 0 confirms the files and commits, everyone learns the outcome. Returns on
/// a rank exactly when it knows `.metadata` was renamed in; throws SaveError otherwise, naming
/// whether nothing was committed or the commit state is unknown.
void execute(const SaveJob& job) {
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
      text = broadcast_text(job, line.dump());
    } catch (const std::exception& e) {
      throw SaveError(prefix + me + comm_failure(job, "the lock broadcast", e) +
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
    if (!job.chunks.empty()) {
      WriteOptions wo;
      wo.rank = job.rank;
      wo.checksum_block_size = job.checksum_block_size;
      const std::string name = unique_data_file_name(job.rank);
      records = write_chunks(job.dir, name, job.chunks, wo, &file_size);
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
      gathered = tensor_bytes(comm::all_gather_v(bytes_tensor(mine), job.group));
    } catch (const std::exception& e) {
      const std::string why = prefix + me + comm_failure(job, "the record exchange", e);
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
      at::Tensor status = at::tensor({code}, at::kLong);
      status = comm::broadcast(status, 0, job.group);
      code = status[0].item<int64_t>();
      if (code != 0) message = broadcast_text(job, message);
    } catch (const std::exception& e) {
      if (job.rank == 0) {
        // Committed is committed: a peer that missed the status reports an unknown state.
        if (committed) return;
        remove_own_file(job, file);
        throw SaveError(message + " (and the status broadcast failed: " + hyper::message_of(e) + ")");
      }
      throw SaveError(prefix + me + comm_failure(job, "the status broadcast from rank 0", e) +
                      unknown_state(job, file));
    }
  }
  if (code != 0) {
    remove_own_file(job, file);
    throw SaveError(message);
  }
}

void check_dtype(const std::string& name, const TensorMeta& tm, at::ScalarType t) {
  const DType d = to_dtype(t);
  HYPER_CHECK_VALUE(d == tm.dtype, "loading '", name, "': target dtype ", dtype_name(d),
                    " differs from the saved dtype ", dtype_name(tm.dtype));
}

void check_shape(const std::string& name, const TensorMeta& tm, const Shape& shape) {
  HYPER_CHECK_VALUE(shape == tm.shape, "loading '", name, "': target global shape ",
                    shape_to_string(shape, ", "), " differs from the saved global shape ",
                    shape_to_string(tm.shape, ", "));
}

}  // namespace

int64_t replica_owner(const std::string& name, int64_t replicas) {
  HYPER_CHECK_VALUE(replicas >= 1, "replica_owner: replicas must be >= 1, got ", replicas);
  return static_cast<int64_t>(xxh3_64(name.data(), static_cast<int64_t>(name.size())) %
                              static_cast<uint64_t>(replicas));
}

void save(const StateDict& state, const std::string& dir, const SaveOptions& options) {
  SaveJob job = prepare(state, dir, options, /*copy=*/false);
  if (!job.world.defined()) {
    execute(job);
    return;
  }
  // A synchronous save still waits for a pending async save on the same World.
  std::promise<void> p;
  serialise_after_previous(job.world, work_of(p.get_future().share(), "save to '" + dir + "'"));
  try {
    execute(job);
  } catch (...) {
    p.set_value();
    throw;
  }
  p.set_value();
}

AsyncSaveHandle async_save(const StateDict& state, const std::string& dir,
                           const SaveOptions& options) {
  const std::string what = "async_save to '" + dir + "'";
  if (auto w = world_of(state, options); w.defined()) {
    // Wait for the previous save before staging (its collectives come first).
    std::promise<void> staged;
    serialise_after_previous(w, work_of(staged.get_future().share(), what + " (staging)"));
    SaveJob job;
    try {
      job = prepare(state, dir, options, /*copy=*/true);
    } catch (...) {
      staged.set_value();
      throw;
    }
    comm::Work work = work_of(
        std::async(std::launch::async, [job = std::move(job)] { execute(job); }).share(), what);
    // Later saves wait on the background work, not on staging.
    w.exchange_background(kSaves, work);
    staged.set_value();
    return AsyncSaveHandle(work);
  }
  SaveJob job = prepare(state, dir, options, /*copy=*/true);
  return AsyncSaveHandle(work_of(
      std::async(std::launch::async, [job = std::move(job)] { execute(job); }).share(), what));
}

AsyncSaveHandle::AsyncSaveHandle(comm::Work work) : work_(std::move(work)) {}

AsyncSaveHandle& AsyncSaveHandle::operator=(AsyncSaveHandle&& o) noexcept {
  if (this != &o) {
    discard();
    work_ = std::move(o.work_);
    o.work_.reset();
  }
  return *this;
}

AsyncSaveHandle::AsyncSaveHandle(AsyncSaveHandle&& o) noexcept : work_(std::move(o.work_)) {
  o.work_.reset();
}

AsyncSaveHandle::~AsyncSaveHandle() { discard(); }

void AsyncSaveHandle::discard() noexcept {
  if (!work_) return;
  try {
    work_->wait();
  } catch (...) {
  }
}

void AsyncSaveHandle::wait() {
  HYPER_CHECK_VALUE(work_.has_value(), "AsyncSaveHandle::wait on an empty handle");
  work_->wait();
}

bool AsyncSaveHandle::done() const { return !work_ || work_->is_completed(); }

comm::Work AsyncSaveHandle::work() const {
  HYPER_CHECK_VALUE(work_.has_value(), "AsyncSaveHandle::work on an empty handle");
  return *work_;
}

namespace {
// "an int" / "a float" / "a bool" / "a string" for Value's alternatives, in order.
const char* value_type_name(size_t index) {
  static const char* const kNames[] = {"an int", "a float", "a bool", "a string"};
  return index < 4 ? kNames[index] : "an unknown type";
}
static_assert(std::is_same_v<std::variant_alternative_t<2, StateValue>, int64_t> &&
                  std::is_same_v<std::variant_alternative_t<3, StateValue>, double> &&
                  std::is_same_v<std::variant_alternative_t<4, StateValue>, bool> &&
                  std::is_same_v<std::variant_alternative_t<5, StateValue>, std::string> &&
                  std::is_same_v<std::variant_alternative_t<0, Value>, int64_t> &&
                  std::is_same_v<std::variant_alternative_t<3, Value>, std::string>,
              "value_type_name and load() assume StateValue = (DTensor, Tensor, Value...)");
}  // namespace

LoadStats load(StateDict& state, const std::string& dir, const LoadOptions& options) {
  ReadOptions ro;
  ro.verify_checksums = options.verify_checksums;
  ro.allow_unchecksummed = options.allow_unchecksummed;
  ro.max_metadata_bytes = options.max_metadata_bytes;
  CheckpointReader reader(dir, ro);
  const Metadata& meta = reader.metadata();

  // Check everything before reading anything.
  std::vector<std::string> missing;
  for (const auto& [name, v] : state) {
    const bool is_tensor = std::holds_alternative<DTensor>(v) || std::holds_alternative<at::Tensor>(v);
    const bool saved_tensor = meta.tensors.count(name) > 0;
    const bool saved_value = meta.values.count(name) > 0;
    if (!saved_tensor && !saved_value) {
      missing.push_back(name);
      continue;
    }
    HYPER_CHECK_VALUE(is_tensor == saved_tensor, "loading '", name, "': the checkpoint holds a ",
                      saved_tensor ? "tensor" : "value", ", the target is a ",
                      is_tensor ? "tensor" : "value");
    if (!is_tensor) {
      // A saved value must not change the target's type (an int64 step stays int64).
      const Value& saved = meta.values.at(name);
      const size_t target_index = v.index() - 2;  // StateValue: DTensor, Tensor, then Value's
      HYPER_CHECK_VALUE(saved.index() == target_index, "loading '", name,
                        "': the checkpoint holds ", value_type_name(saved.index()),
                        ", the target is ", value_type_name(target_index));
      continue;
    }
    const TensorMeta& tm = meta.tensors.at(name);
    if (const auto* dt = std::get_if<DTensor>(&v)) {
      HYPER_CHECK_VALUE(dt->defined(), "loading '", name, "': undefined DTensor");
      check_dtype(name, tm, dt->scalar_type());
      check_shape(name, tm, dt->shape());
    } else {
      const auto& t = std::get<at::Tensor>(v);
      HYPER_CHECK_VALUE(t.defined(), "loading '", name, "': undefined tensor");
      check_dtype(name, tm, t.scalar_type());
      check_shape(name, tm, Shape(t.sizes().begin(), t.sizes().end()));
    }
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size(); ++i) list += (i ? ", '" : "'") + missing[i] + "'";
    throw ValueError(str_cat("checkpoint ", dir, " lacks ", missing.size() == 1 ? "entry " : "entries ",
                             list));
  }

  // Two passes: verify the bytes of every target in the files (hashed from the page cache,
  // nothing written), then copy them into the targets. A failed verification changes
  // nothing; the copy reads the page cache again. Memory: one 8 MiB file view, no staging.
  // Unverified loads only copy.
  LoadStats stats;
  at::NoGradGuard no_grad;
  struct Target {
    std::string name;
    std::vector<FlatBox> region;
    at::Tensor dst;
    bool zeros = false;  // a Partial target's zero replica: zeroed after the copy
  };
  std::vector<Target> targets;
  int fault_rank = -1;  // for the fault point: the rank of the first DTensor's world, else 0
  for (auto& [name, v] : state) {
    if (auto* dt = std::get_if<DTensor>(&v)) {
      if (fault_rank < 0) fault_rank = dt->device_mesh().world().rank();
      const Layout& layout = dt->layout();
      const int64_t idx = dt->mesh_index();
      Target tg{name, layout.local_region(idx), dt->to_local(), false};
      int64_t n = 0;
      for (const auto& fb : tg.region) n += fb.box.numel();
      stats.bytes_needed += n * static_cast<int64_t>(tg.dst.element_size());
      // Partial targets: the loaded value is the logical one; Partial(sum) keeps it on
      // coordinate 0 of each sum dim and zeros elsewhere (as distribute_tensor does).
      tg.zeros = layout.holds_partial_zeros(idx);
      if (n > 0) targets.push_back(std::move(tg));
    } else if (auto* t = std::get_if<at::Tensor>(&v)) {
      const Shape shape(t->sizes().begin(), t->sizes().end());
      stats.bytes_needed += t->numel() * static_cast<int64_t>(t->element_size());
      if (t->numel() > 0) targets.push_back({name, {FlatBox{Box::full(shape), 0}}, *t, false});
    }
  }
  if (options.verify_checksums)
    for (const Target& tg : targets) verify_region(reader, tg.name, tg.region, tg.dst);
  fault_point("load_between_passes", std::max(fault_rank, 0));
  reader.check_unchanged();  // nothing written yet
  for (const Target& tg : targets) {
    if (tg.zeros)
      tg.dst.zero_();
    else
      read_into(reader, tg.name, tg.region, tg.dst, /*verified=*/true);
  }
  // A data file written in place during the copy: the targets may hold unverified bytes.
  reader.check_unchanged();
  for (auto& [name, v] : state)
    if (!std::holds_alternative<DTensor>(v) && !std::holds_alternative<at::Tensor>(v))
      std::visit([&](const auto& x) { v = x; }, meta.values.at(name));
  stats.bytes_read = reader.bytes_read();
  return stats;
}

}  // namespace hyper::dcp
