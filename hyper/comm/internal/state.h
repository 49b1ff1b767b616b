#pragma once
/// \file internal/state.h
/// Shared state behind World, Group, DeviceMesh and Work. Not public.

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/group.h"
#include "hyper/comm/stats.h"
#include "hyper/comm/work.h"
#include "hyper/comm/world.h"

namespace gloo::transport {
class Device;
}

namespace hyper::comm::internal {

class HyperGlooGroup;

/// Mutex-protected counters (one per Group, one per World).
class StatsCounters {
 public:
  void add(CollectiveKind kind, int64_t sent, int64_t received, int64_t calls = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& c = stats_[kind];
    c.calls += calls;
    c.bytes_sent += sent;
    c.bytes_received += received;
  }
  CommStats snapshot() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = CommStats{};
  }

 private:
  mutable std::mutex mu_;
  CommStats stats_;
};

struct GroupState {
  c10::intrusive_ptr<c10d::ProcessGroup> pg;
  HyperGlooGroup* gloo = nullptr;  ///< pg as hyper's Gloo subclass, when it is one
  std::vector<int> ranks;          ///< global ranks in group order
  int rank = 0;                    ///< this process's group rank
  c10::DeviceType device_type = c10::DeviceType::CPU;
  /// The group moves CUDA memory itself (an NCCL backend). When false, CUDA tensors given to
  /// a collective are staged through host memory (staging_device).
  bool device_memory = false;
  std::string name;                ///< "[0,1,2]"
  std::shared_ptr<StatsCounters> counters = std::make_shared<StatsCounters>();
  std::shared_ptr<StatsCounters> world_counters;  ///< may be null
  std::atomic<AllGatherRoute> route{AllGatherRoute::kAuto};
  std::atomic<int> p2p_seq{0};     ///< tag source for point-to-point collectives

  void record(CollectiveKind kind, int64_t sent, int64_t received) {
    counters->add(kind, sent, received);
    if (world_counters) world_counters->add(kind, sent, received);
  }
  int next_p2p_tag() { return p2p_seq.fetch_add(1) & 0x3fffffff; }
  /// The first of `count` consecutive tags (every rank must ask for the same count).
  int next_p2p_tags(int count) { return p2p_seq.fetch_add(count) & 0x3fffffff; }
};

struct WorldState {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  ProcessGroupOptions options;
  std::string master_addr;
  std::shared_ptr<StatsCounters> counters = std::make_shared<StatsCounters>();
  std::atomic<int64_t> next_mesh_id{0};

  std::mutex mu;
  std::shared_ptr<gloo::transport::Device> gloo_device;  ///< created on first Gloo group
  bool world_group_made = false;
  Group world_group;
  std::map<std::string, Group> dedicated_groups;  ///< World::dedicated_group
  std::map<std::string, Work> background;         ///< World::exchange_background
};

/// State shared by a constructed mesh and every copy and sub-mesh derived from it.
struct MeshShared {
  int64_t id = -1;  ///< the mesh id (World::next_mesh_id); -1 for mesh_from_process_group
  std::shared_ptr<PlanCache> plan_cache = std::make_shared<PlanCache>();
  std::mutex mu;
  /// Groups over several mesh dims, keyed by their sorted global ranks ("0,1,4,5").
  std::map<std::string, Group> multi_dim_groups;
  /// comm::mesh_attachment (mesh_attachment.h): upper layers' per-mesh state, by key.
  std::map<std::string, std::shared_ptr<void>> attachments;
};

struct MeshState {
  World world;
  MeshTopology topology;
  c10::DeviceType device_type = c10::DeviceType::CPU;
  std::string device_name;
  std::vector<Group> groups;  ///< one per mesh dim
  int rank = 0;               ///< global rank
  std::shared_ptr<MeshShared> shared = std::make_shared<MeshShared>();
};

/// State of one Work: c10d works to wait on, then a local epilogue producing the result.
struct WorkState {
  std::string what;  ///< "all_gather_v on group [0,1] (rank 0)"
  std::vector<c10::intrusive_ptr<c10d::Work>> pending;
  /// hyper works this one finishes after (result_to / copy_into, reduce_scatter_v's exchange,
  /// then()): is_completed() asks them too.
  std::vector<Work> inner;
  std::function<at::Tensor()> finish;  ///< may be empty: result = `result`
  std::function<bool()> ready;         ///< may be empty: is_completed() asks pending/inner only
  std::vector<at::Tensor> keep_alive;
  /// Map foreign exceptions (c10, Gloo) to CommError with `what` (a collective: the
  /// LibTorch boundary). False for works built on other works (Work::deferred / then).
  bool map_errors = true;

  std::mutex mu;
  bool done = false;
  at::Tensor result;
  std::exception_ptr error;  ///< set when failed
  std::vector<std::function<void(const Work&)>> callbacks;  ///< run once done
};

// --- helpers shared by the collectives -------------------------------------------------

/// "[0,2,5]": a list of global ranks as messages and group names spell it.
std::string ranks_to_string(const std::vector<int>& ranks);

/// "<op> on group [..] (rank r)".
std::string describe(const char* op, const Group& group);
/// Throws c10::ValueError if the group is undefined.
const GroupState& checked_state(const Group& group, const char* op);
/// A Work over c10d works and an epilogue.
Work make_work(std::string what, std::vector<c10::intrusive_ptr<c10d::Work>> pending,
               std::function<at::Tensor()> finish, std::vector<at::Tensor> keep_alive = {});
/// Point-to-point sends and receives that `issue` starts (pushing their works), all in flight
/// at once. On a group that moves CUDA memory (NCCL) with `cuda` tensors they must be one
/// group (a send and the receive it waits for on the same pair progress only together:
/// NCCL's point-to-point rules), so they are issued between start/endCoalescing and the
/// group's one work stands for all of them. c10d and Gloo errors at issue time become
/// CommError naming `what`.
using C10dWorks = std::vector<c10::intrusive_ptr<c10d::Work>>;
C10dWorks issue_point_to_point(const GroupState& g, bool cuda, const std::string& what,
                               const std::function<void(C10dWorks& works)>& issue);
/// A Work that finishes after `inner` (whose wait() its epilogue calls).
Work make_work_after(std::string what, Work inner, std::function<at::Tensor()> finish);
/// A completed Work with `result`.
Work ready_work(std::string what, at::Tensor result);
/// The device of `t` when `g` cannot move its memory (a CUDA tensor on a Gloo-only group):
/// the collective then runs on a host copy and its result goes back (result_to / copy_into).
std::optional<c10::Device> staging_device(const GroupState& g, const at::Tensor& t);
/// A Work whose result is `w`'s copied to `device` once `w` finished.
Work result_to(Work w, c10::Device device);
/// A Work that copies `w`'s result into `target` (in place) once `w` finished; returns target.
Work copy_into(Work w, at::Tensor target);
/// 1-D uint8 alias of a contiguous tensor's bytes (keeps `t` alive).
at::Tensor as_bytes(const at::Tensor& t);
/// Elements per row (product of dims 1..); 1 for a 1-D tensor.
int64_t row_numel(const at::Tensor& t);
/// Shape with dim 0 replaced.
std::vector<int64_t> with_rows(const at::Tensor& t, int64_t rows);
/// Checks a caller's output buffer for a collective on `input` whose result has shape `want`:
/// contiguous, the input's dtype and device, that shape; not sharing the input's storage.
/// `noun` names the input in the messages ("input", "tensor").
void check_given_output(const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& want, const std::string& what,
                        const char* noun = "input");
/// Checks splits: length == group size, non-negative, and (when total >= 0) sum == total.
void check_splits(const std::vector<int64_t>& splits, int group_size, int64_t total,
                  const std::string& what, const char* name);
/// Rank-order local reduction of `n` equally shaped pieces stacked along dim 0 of `stacked`
/// (shape (n, rest...)): acc = p0 op p1 op ... ; avg divides by n at the end.
at::Tensor reduce_pieces(const at::Tensor& stacked, int64_t n, ReduceOp op);
/// The same reduction of equally shaped `parts` (at least two) written into `out`; an `out`
/// of a wider floating dtype accumulates in its dtype (out = p0, then out op= p1, ...).
void reduce_into(const at::Tensor& out, const std::vector<at::Tensor>& parts, ReduceOp op);
/// Throws c10::ValueError for avg on integral/bool dtypes.
void check_op_dtype(ReduceOp op, const at::Tensor& t, const std::string& what);

/// all_gather_v recording its bytes under `kind` and describing itself as `what`.
Work all_gather_v_impl(const at::Tensor& input, const Group& group,
                       std::optional<std::vector<int64_t>> sizes, CollectiveKind kind,
                       const std::string& what, std::optional<at::Tensor> output = std::nullopt);

/// Blocking exchange of (rows, row numel, dtype); checks row numel and dtype agree.
/// Not counted in the byte counters.
std::vector<int64_t> exchange_rows(const at::Tensor& input, const Group& group,
                                   const std::string& what);

/// Creates a Gloo (or NCCL) group over `ranks` for the World's rank; members only.
Group create_group(WorldState& world, const std::vector<int>& ranks, const std::string& key,
                   c10::DeviceType device);

}  // namespace hyper::comm::internal
