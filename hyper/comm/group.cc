#include "hyper/comm/group.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <sstream>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/internal/gloo_group.h"
#include "hyper/comm/internal/state.h"
#include "hyper/core/errors.h"

namespace hyper::comm {

Group::Group(std::shared_ptr<internal::GroupState> state) : state_(std::move(state)) {}

namespace {
const internal::GroupState& st(const std::shared_ptr<internal::GroupState>& s) {
  HYPER_CHECK_VALUE(s != nullptr, "use of an undefined hyper::comm::Group");
  return *s;
}
}  // namespace

int Group::rank() const { return st(state_).rank; }
int Group::size() const { return static_cast<int>(st(state_).ranks.size()); }
const std::vector<int>& Group::ranks() const { return st(state_).ranks; }
int Group::global_rank() const {
  const auto& s = st(state_);
  return s.ranks[s.rank];
}
c10::DeviceType Group::device_type() const { return st(state_).device_type; }
std::string Group::to_string() const { return state_ ? state_->name : "[undefined]"; }

CommStats stats(const Group& group) { return st(group.state()).counters->snapshot(); }
void reset_stats(const Group& group) { st(group.state()).counters->reset(); }

Group group_from_process_group(c10::intrusive_ptr<c10d::ProcessGroup> pg,
                               std::vector<int> global_ranks) {
  HYPER_CHECK_VALUE(pg, "group_from_process_group: null process group");
  auto s = std::make_shared<internal::GroupState>();
  if (global_ranks.empty()) {
    for (int i = 0; i < pg->getSize(); ++i) global_ranks.push_back(i);
  }
  HYPER_CHECK_VALUE(static_cast<int>(global_ranks.size()) == pg->getSize(),
                    "group_from_process_group: ", global_ranks.size(),
                    " global ranks given for a process group of size ", pg->getSize());
  s->ranks = std::move(global_ranks);
  s->rank = pg->getRank();
  s->name = internal::ranks_to_string(s->ranks);
  if (pg->hasBackendForDeviceType(c10::DeviceType::CPU)) {
    s->gloo = dynamic_cast<internal::HyperGlooGroup*>(pg->getBackend(c10::DeviceType::CPU).get());
  }
  s->device_type = pg->getBackendName() == "nccl" ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  s->device_memory = pg->getBackendName() == "nccl";
  track_gloo_workers(*pg);
  s->pg = std::move(pg);
  return Group(std::move(s));
}

c10::intrusive_ptr<c10d::ProcessGroup> process_group_of(const Group& group) {
  return st(group.state()).pg;
}

namespace internal {

std::string ranks_to_string(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < ranks.size(); ++i) os << (i ? "," : "") << ranks[i];
  os << "]";
  return os.str();
}

std::string describe(const char* op, const Group& group) {
  std::ostringstream os;
  os << op << " on group " << group.to_string();
  if (group.defined()) os << " (rank " << group.global_rank() << ")";
  return os.str();
}

const GroupState& checked_state(const Group& group, const char* op) {
  HYPER_CHECK_VALUE(group.defined(), op, ": the group is undefined");
  return *group.state();
}

Work make_work(std::string what, std::vector<c10::intrusive_ptr<c10d::Work>> pending,
               std::function<at::Tensor()> finish, std::vector<at::Tensor> keep_alive) {
  auto s = std::make_shared<WorkState>();
  s->what = std::move(what);
  s->pending = std::move(pending);
  s->finish = std::move(finish);
  s->keep_alive = std::move(keep_alive);
  return Work(std::move(s));
}

Work ready_work(std::string what, at::Tensor result) {
  auto s = std::make_shared<WorkState>();
  s->what = std::move(what);
  s->result = std::move(result);
  s->done = true;
  return Work(std::move(s));
}

std::optional<c10::Device> staging_device(const GroupState& g, const at::Tensor& t) {
  if (!t.defined() || t.is_cpu() || g.device_memory) return std::nullopt;
  return t.device();
}

Work make_work_after(std::string what, Work inner, std::function<at::Tensor()> finish) {
  auto s = std::make_shared<WorkState>();
  s->what = std::move(what);
  s->inner.push_back(std::move(inner));
  s->finish = std::move(finish);
  return Work(std::move(s));
}

Work result_to(Work w, c10::Device device) {
  return make_work_after(w.description(), w, [w, device] { return w.wait().to(device); });
}

Work copy_into(Work w, at::Tensor target) {
  return make_work_after(w.description(), w, [w, target]() mutable {
    target.copy_(w.wait());
    return target;
  });
}

at::Tensor as_bytes(const at::Tensor& t) {
  HYPER_CHECK_INTERNAL(t.is_contiguous(), "as_bytes of a non-contiguous tensor");
  const int64_t n = t.numel() * static_cast<int64_t>(t.element_size());
  if (n == 0) return at::empty({0}, t.options().dtype(at::kByte));
  at::Tensor keep = t;
  return at::from_blob(
      t.data_ptr(), {n}, [keep](void*) mutable { keep.reset(); },
      t.options().dtype(at::kByte));
}

int64_t row_numel(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t d = 1; d < t.dim(); ++d) n *= t.size(d);
  return n;
}

std::vector<int64_t> with_rows(const at::Tensor& t, int64_t rows) {
  std::vector<int64_t> shape = t.sizes().vec();
  shape[0] = rows;
  return shape;
}

void check_given_output(const at::Tensor& output, const at::Tensor& input,
                        const std::vector<int64_t>& want, const std::string& what,
                        const char* noun) {
  HYPER_CHECK_VALUE(
      output.defined() && output.is_contiguous() && output.scalar_type() == input.scalar_type() &&
          output.sizes().vec() == want,
      what, ": output must be a contiguous ", input.scalar_type(), " tensor of shape ",
      c10::IntArrayRef(want), ", got ",
      output.defined() ? output.toString() + " of shape " + c10::str(output.sizes()) +
                             (output.is_contiguous() ? "" : " (not contiguous)")
                       : std::string("an undefined tensor"));
  HYPER_CHECK_VALUE(output.device() == input.device(), what, ": output is on ",
                    output.device().str(), " but the ", noun, " on ", input.device().str());
  HYPER_CHECK_VALUE(output.numel() == 0 || input.numel() == 0 || !output.is_alias_of(input), what,
                    ": output shares the ", noun, "'s storage (it would be overwritten while it "
                    "is sent)");
}

void check_splits(const std::vector<int64_t>& splits, int group_size, int64_t total,
                  const std::string& what, const char* name) {
  HYPER_CHECK_VALUE(static_cast<int>(splits.size()) == group_size, what, ": ", name, " has ",
                    splits.size(), " entries but the group has ", group_size, " ranks");
  int64_t sum = 0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    HYPER_CHECK_VALUE(splits[i] >= 0, what, ": ", name, "[", i, "] = ", splits[i], " is negative");
    sum += splits[i];
  }
  if (total >= 0) {
    HYPER_CHECK_VALUE(sum == total, what, ": ", name, " sum to ", sum, " rows but the input has ",
                      total, " rows");
  }
}

void check_op_dtype(ReduceOp op, const at::Tensor& t, const std::string& what) {
  if (op == ReduceOp::kAvg) {
    HYPER_CHECK_VALUE(at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type()),
                      what, ": avg is not defined for dtype ", t.scalar_type(),
                      " (integer division would floor); reduce with sum and divide yourself");
  }
  if (op == ReduceOp::kMax || op == ReduceOp::kMin) {
    HYPER_CHECK_VALUE(!at::isComplexType(t.scalar_type()), what, ": ", to_string(op),
                      " is not defined for complex dtype ", t.scalar_type());
  }
}

C10dWorks issue_point_to_point(const GroupState& g, bool cuda, const std::string& what,
                               const std::function<void(C10dWorks& works)>& issue) {
  C10dWorks works;
  const bool coalesce = g.device_memory && cuda;
  try {
    if (coalesce) g.pg->startCoalescing(c10::DeviceType::CUDA);
    issue(works);
    if (coalesce) {
      works.clear();  // inside a coalescing group the single works are placeholders
      works.push_back(g.pg->endCoalescing(c10::DeviceType::CUDA));
    }
  } catch (const c10::Error& e) {
    rethrow_c10_error<CommError>(e, what);
  } catch (const std::exception& e) {
    rethrow_foreign_error(e, what);  // gloo::IoException at issue time
  }
  return works;
}

at::Tensor reduce_pieces(const at::Tensor& stacked, int64_t n, ReduceOp op) {
  HYPER_CHECK_INTERNAL(n >= 1 && stacked.size(0) == n, "reduce_pieces of ", n, " pieces");
  if (n == 1) return stacked[0].clone();  // avg over one rank is the value itself
  at::Tensor acc = at::empty_like(stacked[0]);
  reduce_into(acc, stacked.unbind(0), op);
  return acc;
}

void reduce_into(const at::Tensor& acc, const std::vector<at::Tensor>& parts, ReduceOp op) {
  const auto n = static_cast<int64_t>(parts.size());
  HYPER_CHECK_INTERNAL(n >= 2, "reduce_into of ", n, " parts");
  // The first two parts make the accumulator (one pass, no copy of part 0 first); the rest
  // are added in rank order, so the result is the same bits as acc = p0; acc op= p1; ...
  const at::Tensor& p0 = parts[0];
  const at::Tensor& p1 = parts[1];
  at::Tensor out = acc;
  if (out.scalar_type() != p0.scalar_type()) {
    // A wider accumulator: every part converted as it is added (p0 + p1 computed in the
    // accumulator's dtype, not in the parts').
    out.copy_(p0);
    for (size_t i = 1; i < parts.size(); ++i) {
      switch (op) {
        case ReduceOp::kSum:
        case ReduceOp::kAvg: out.add_(parts[i]); break;
        case ReduceOp::kMax: at::maximum_out(out, out, parts[i]); break;
        case ReduceOp::kMin: at::minimum_out(out, out, parts[i]); break;
      }
    }
    if (op == ReduceOp::kAvg) out.div_(n);
    return;
  }
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      if (p0.scalar_type() == at::kBool) {
        at::logical_or_out(out, p0, p1);
      } else {
        at::add_out(out, p0, p1);
      }
      break;
    case ReduceOp::kMax: at::maximum_out(out, p0, p1); break;
    case ReduceOp::kMin: at::minimum_out(out, p0, p1); break;
  }
  for (int64_t i = 2; i < n; ++i) {
    const at::Tensor& p = parts[static_cast<size_t>(i)];
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        if (out.scalar_type() == at::kBool) {
          out.logical_or_(p);
        } else {
          out.add_(p);
        }
        break;
      case ReduceOp::kMax: at::maximum_out(out, out, p); break;
      case ReduceOp::kMin: at::minimum_out(out, out, p); break;
    }
  }
  if (op == ReduceOp::kAvg) out.div_(n);
}

namespace {
/// The World's Gloo transport device, made on first use: `gloo_interface`, else
/// `gloo_hostname`, else $GLOO_SOCKET_IFNAME, else 127.0.0.1 for a loopback MASTER_ADDR, else
/// the address this host's name resolves to.
std::shared_ptr<gloo::transport::Device> gloo_device_of(WorldState& world) {
  std::lock_guard<std::mutex> lock(world.mu);
  if (!world.gloo_device) {
    const auto& o = world.options;
    const char* env_if = std::getenv("GLOO_SOCKET_IFNAME");
    if (!o.gloo_interface.empty()) {
      world.gloo_device = c10d::ProcessGroupGloo::createDeviceForInterface(o.gloo_interface);
    } else if (!o.gloo_hostname.empty()) {
      world.gloo_device = c10d::ProcessGroupGloo::createDeviceForHostname(o.gloo_hostname);
    } else if (env_if != nullptr && *env_if != '\0') {
      world.gloo_device = c10d::ProcessGroupGloo::createDeviceForInterface(env_if);
    } else if (world.master_addr.empty() || world.master_addr == "localhost" ||
               world.master_addr.rfind("127.", 0) == 0) {
      world.gloo_device = c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
    } else {
      world.gloo_device = c10d::ProcessGroupGloo::createDefaultDevice();
    }
  }
  return world.gloo_device;
}
}  // namespace

Group create_group(WorldState& world, const std::vector<int>& ranks, const std::string& key,
                   c10::DeviceType device) {
  int my = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == world.rank) my = static_cast<int>(i);
  HYPER_CHECK_VALUE(my >= 0, "new_group ", internal::ranks_to_string(ranks), ": rank ", world.rank,
                    " is not a member (only members create a group)");
  HYPER_CHECK_VALUE(world.store, "new_group ", internal::ranks_to_string(ranks),
                    ": this World has no store (made from an existing process group)");
  auto store = c10::make_intrusive<c10d::PrefixStore>("hyper/" + key, world.store);
  const int n = static_cast<int>(ranks.size());
  HYPER_CHECK_VALUE(device == c10::DeviceType::CPU || device == c10::DeviceType::CUDA,
                    "new_group: unsupported device type ", device);
  const std::string& cuda_backend = world.options.cuda_backend;
  HYPER_CHECK_VALUE(cuda_backend == "nccl" || cuda_backend == "gloo",
                    "ProcessGroupOptions::cuda_backend \"", cuda_backend,
                    "\" is not a backend (expected nccl or gloo)");
  const bool nccl = device == c10::DeviceType::CUDA && cuda_backend == "nccl";
  auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, my, n);
  if (nccl) {
#ifdef USE_C10D_NCCL
    HYPER_CHECK_IMPLEMENTED(at::hasCUDA(), "new_group ", internal::ranks_to_string(ranks),
                            ": a CUDA mesh needs a CUDA device, and this process sees none "
                            "(or set ProcessGroupOptions::cuda_backend = \"gloo\")");
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = world.options.timeout;
    auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(
        c10::make_intrusive<c10d::PrefixStore>("nccl", store), my, n, opts);
    pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::NCCL, backend);
#else
    throw hyper::NotImplementedError(
        hyper::internal::str_cat("new_group ", internal::ranks_to_string(ranks),
                                 ": this LibTorch build has no NCCL; CUDA meshes need it "
                                 "(or set ProcessGroupOptions::cuda_backend = \"gloo\")"));
#endif
  }
  // Gloo: every CPU group, the host side of an NCCL group, and a CUDA group on Gloo.
  c10::intrusive_ptr<HyperGlooGroup> gloo;
  auto opts = c10d::ProcessGroupGloo::Options::create(world.options.timeout);
  opts->devices.push_back(gloo_device_of(world));
  try {
    gloo = c10::make_intrusive<HyperGlooGroup>(
        nccl ? c10::make_intrusive<c10d::PrefixStore>("gloo", store) : store, my, n, opts);
    pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
    if (!nccl && device == c10::DeviceType::CUDA) {
      pg->setBackend(c10::DeviceType::CUDA, c10d::ProcessGroup::BackendType::GLOO, gloo);
    }
    pg->setDefaultBackend(nccl ? c10d::ProcessGroup::BackendType::NCCL
                               : c10d::ProcessGroup::BackendType::GLOO);
    // Creation completes on every member before it returns anywhere: without this, a
    // member that finished connecting could drop the group (and close its pairs) while
    // a peer is still handshaking, which fails the peer with "Connection closed by
    // peer". Not counted in the byte counters.
    if (n > 1) gloo->barrier()->wait();
  } catch (const std::exception& e) {
    std::ostringstream os;
    os << "creating Gloo group " << internal::ranks_to_string(ranks) << " (key " << key << ", rank "
       << world.rank << ", timeout " << world.options.timeout.count() << " ms): " << message_of(e);
    throw CommError(os.str());
  }
  Group g = group_from_process_group(pg, ranks);
  g.state()->world_counters = world.counters;
  g.state()->device_type = device;
  g.state()->device_memory = nccl;
  return g;
}

}  // namespace internal
}  // namespace hyper::comm
