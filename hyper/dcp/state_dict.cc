// Distributed save/load of a StateDict (DTensors, tensors, values) on top of the storage
// layer: save_protocol.h's run_save over the checkpoint group, writing with write_chunks;
// load with CheckpointReader and read_into.
// Protocol: docs/checkpoint_format.md ("Save and load protocol").
#include "hyper/dcp/state_dict.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/comm/c10_errors.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/save_protocol.h"

namespace hyper::dcp {

using hyper::internal::str_cat;


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

// ---- the save protocol over the checkpoint group ---------------------------------------------

at::Tensor bytes_tensor(const std::string& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(s.size())}, at::kByte);
  if (!s.empty()) std::memcpy(t.data_ptr(), s.data(), s.size());
  return t;
}

std::string tensor_bytes(const at::Tensor& t) {
  const at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

/// save_protocol.h's transport on the World's checkpoint group (c10d collectives).
class GroupChannel final : public SaveChannel {
 public:
  explicit GroupChannel(const SaveJob& job) : job_(job) {}
  std::string broadcast_text(const std::string& text) override {
    at::Tensor len = at::tensor({static_cast<int64_t>(text.size())}, at::kLong);
    len = comm::broadcast(len, 0, job_.group);
    const int64_t n = len[0].item<int64_t>();
    if (n == 0) return "";
    at::Tensor msg = job_.rank == 0 ? bytes_tensor(text) : at::empty({n}, at::kByte);
    return tensor_bytes(comm::broadcast(msg, 0, job_.group));
  }
  std::string all_gather_text(const std::string& text) override {
    return tensor_bytes(comm::all_gather_v(bytes_tensor(text), job_.group));
  }
  int64_t broadcast_code(int64_t code) override {
    at::Tensor status = at::tensor({code}, at::kLong);
    status = comm::broadcast(status, 0, job_.group);
    return status[0].item<int64_t>();
  }
  std::string failure(const char* what, const std::exception& e) const override {
    return str_cat(what, " failed (a rank died or exceeded the collective timeout of ",
                   job_.world.defined() ? job_.world.timeout().count() : 0, " ms): ",
                   error_text(e));
  }
  std::string error_text(const std::exception& e) const override { return hyper::message_of(e); }

 private:
  const SaveJob& job_;
};

void execute(const SaveJob& job) {
  SaveRequest req;
  req.dir = job.dir;
  req.rank = job.rank;
  req.size = job.size;
  req.values = job.values;
  req.has_chunks = !job.chunks.empty();
  req.write = [&job](const std::string& dir, const std::string& file, const WriteOptions& wo,
                     int64_t* bytes) { return write_chunks(dir, file, job.chunks, wo, bytes); };
  req.checksum_block_size = job.checksum_block_size;
  GroupChannel channel(job);
  run_save(req, job.size > 1 ? &channel : nullptr);
}

}  // namespace

namespace {

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
