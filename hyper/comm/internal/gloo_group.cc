#include "hyper/comm/internal/gloo_group.h"

#include <gloo/allgatherv.h>

#include <algorithm>
#include <mutex>
#include <thread>

#include "hyper/comm/c10d_interop.h"

namespace hyper::comm::internal {

namespace {

class AllgathervWork : public c10d::ProcessGroupGloo::AsyncWork {
 public:
  AllgathervWork(std::shared_ptr<gloo::Context> context, uint32_t tag, uint64_t seq,
                 at::Tensor output, at::Tensor input, std::vector<size_t> counts,
                 std::chrono::milliseconds timeout)
      : AsyncWork(context, {{output}}, c10d::OpType::ALLGATHER, seq, timeout, "hyper:allgatherv",
                  std::optional<std::vector<at::Tensor>>({input})),
        tag_(tag),
        output_(std::move(output)),
        input_(std::move(input)),
        counts_(std::move(counts)) {}

  const std::vector<at::Tensor> getInputTensors() override { return {input_}; }
  const std::vector<at::Tensor> getOutputTensors() override { return {output_}; }

  void run() override {
    gloo::AllgathervOptions opts(context_);
    // Gloo refuses null pointers even for zero bytes; point empty buffers at a scratch byte.
    uint8_t* in = input_.numel() ? input_.data_ptr<uint8_t>() : &scratch_in_;
    uint8_t* out = output_.numel() ? output_.data_ptr<uint8_t>() : &scratch_out_;
    opts.setInput<uint8_t>(in, static_cast<size_t>(input_.numel()));
    opts.setOutput<uint8_t>(out, counts_);
    opts.setTag(tag_);
    opts.setTimeout(timeout_);
    gloo::allgatherv(opts);
  }

 private:
  uint32_t tag_;
  at::Tensor output_;
  at::Tensor input_;
  std::vector<size_t> counts_;
  uint8_t scratch_in_ = 0;
  uint8_t scratch_out_ = 0;
};

}  // namespace

c10::intrusive_ptr<c10d::Work> HyperGlooGroup::allgatherv_bytes(at::Tensor output,
                                                                 at::Tensor input,
                                                                 std::vector<size_t> counts) {
  const uint32_t tag = nextTag();
  auto context = getContext(tag);
  ++seq_;  // as ProcessGroupGloo's own collectives: the new value is this work's
  auto work = c10::make_intrusive<AllgathervWork>(std::move(context), tag, seq_, std::move(output),
                                                  std::move(input), std::move(counts),
                                                  options_->timeout);
  enqueue(work);
  return work;
}

bool HyperGlooGroup::workers_idle(c10d::ProcessGroupGloo& pg) {
  // Pointers to the base's members, named through this subclass (which may name them).
  std::mutex c10d::ProcessGroupGloo::*mu = &HyperGlooGroup::workMutex_;
  auto queue = &HyperGlooGroup::workQueue_;
  auto running = &HyperGlooGroup::workInProgress_;
  std::lock_guard<std::mutex> lock(pg.*mu);
  if (!(pg.*queue).empty()) return false;
  for (const auto& w : pg.*running)
    if (w) return false;
  return true;
}

namespace {

struct GlooRegistry {
  std::mutex mu;
  std::vector<c10::weak_intrusive_ptr<c10d::ProcessGroupGloo>> backends;
};

GlooRegistry& gloo_registry() {
  static auto* r = new GlooRegistry();  // never destroyed: usable from atexit handlers
  return *r;
}

}  // namespace

}  // namespace hyper::comm::internal

namespace hyper::comm {

void track_gloo_workers(c10d::ProcessGroup& pg) {
  if (!pg.hasBackendForDeviceType(c10::DeviceType::CPU)) return;
  auto gloo = c10::dynamic_intrusive_pointer_cast<c10d::ProcessGroupGloo>(
      pg.getBackend(c10::DeviceType::CPU));
  if (!gloo) return;
  auto& r = internal::gloo_registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto& v = r.backends;
  v.erase(std::remove_if(v.begin(), v.end(), [](const auto& w) { return w.expired(); }), v.end());
  for (const auto& w : v)
    if (w._unsafe_get_target() == gloo.get()) return;
  v.emplace_back(gloo);
}

bool quiesce_gloo_workers(std::chrono::milliseconds bound) {
  std::vector<c10::intrusive_ptr<c10d::ProcessGroupGloo>> live;
  {
    auto& r = internal::gloo_registry();
    std::lock_guard<std::mutex> lock(r.mu);
    for (const auto& w : r.backends)
      if (auto p = w.lock()) live.push_back(std::move(p));
  }
  const auto deadline = std::chrono::steady_clock::now() + bound;
  bool all_idle = true;
  for (const auto& pg : live) {
    while (!internal::HyperGlooGroup::workers_idle(*pg)) {
      if (std::chrono::steady_clock::now() >= deadline) {
        all_idle = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  return all_idle;
}

}  // namespace hyper::comm
