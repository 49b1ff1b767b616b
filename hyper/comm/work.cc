#include "hyper/comm/work.h"

#include <c10/util/Exception.h>

#include "hyper/comm/internal/state.h"

namespace hyper::comm {

Work::Work() : state_(std::make_shared<internal::WorkState>()) {
  state_->what = "completed work";
  state_->done = true;
}

Work::Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {
  TORCH_CHECK(state_ != nullptr, "hyper::comm::Work made from a null state");
}

namespace {
std::string message_of(const std::exception& e) {
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) return ce->what_without_backtrace();
  return e.what();
}
}  // namespace

at::Tensor Work::wait() const {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.done) {
    try {
      for (auto& w : s.pending) w->wait();
      if (s.finish) s.result = s.finish();
    } catch (const CommError& e) {
      s.error = e.what();  // an inner hyper work's error already names its collective
    } catch (const std::exception& e) {
      s.error = s.what + ": " + message_of(e);
    }
    s.done = true;
    s.pending.clear();
    s.inner.clear();
    s.finish = nullptr;
    s.keep_alive.clear();
  }
  if (!s.error.empty()) throw CommError(s.error);
  return s.result;
}

bool Work::is_completed() const {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.done) return true;
  for (auto& w : s.pending)
    if (!w->isCompleted()) return false;
  for (const auto& w : s.inner)
    if (!w.is_completed()) return false;
  return true;
}

std::string Work::description() const { return state_->what; }

}  // namespace hyper::comm
