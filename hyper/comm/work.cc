#include "hyper/comm/work.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <iostream>
#include <thread>

#include "hyper/comm/blocked_time.h"
#include "hyper/comm/c10_errors.h"
#include "hyper/comm/internal/state.h"
#include "hyper/core/errors.h"

namespace hyper::comm {

Work::Work() : state_(std::make_shared<internal::WorkState>()) {
  state_->what = "completed work";
  state_->done = true;
}

Work::Work(std::shared_ptr<internal::WorkState> state) : state_(std::move(state)) {
  HYPER_CHECK_INTERNAL(state_ != nullptr, "hyper::comm::Work made from a null state");
}

Work Work::completed(at::Tensor result, std::string what) {
  auto s = std::make_shared<internal::WorkState>();
  s->what = std::move(what);
  s->result = std::move(result);
  s->done = true;
  return Work(std::move(s));
}

Work Work::deferred(std::string what, std::function<at::Tensor()> finish,
                    std::function<bool()> ready) {
  auto s = std::make_shared<internal::WorkState>();
  s->what = std::move(what);
  s->finish = std::move(finish);
  s->ready = std::move(ready);
  s->map_errors = false;
  return Work(std::move(s));
}

Work Work::then(std::string what, std::function<at::Tensor(const at::Tensor&)> fn) const {
  auto s = std::make_shared<internal::WorkState>();
  s->what = std::move(what);
  s->inner.push_back(*this);
  Work first = *this;
  s->finish = [first, fn = std::move(fn)]() { return fn(first.wait()); };
  s->map_errors = false;
  return Work(std::move(s));
}

namespace {

/// hyper's own error types pass unchanged; a c10 error goes through the c10 boundary
/// (rethrow_c10_error, CommError by default); anything else out of c10d or Gloo becomes a
/// CommError naming the collective (rethrow_foreign_error: the same mapping as at issue time).
std::exception_ptr map_foreign(std::exception_ptr e, const std::string& what) {
  try {
    try {
      std::rethrow_exception(e);
    } catch (const c10::Error& x) {
      rethrow_c10_error<CommError>(x, what);
    } catch (const std::exception& x) {
      rethrow_foreign_error(x, what);
    } catch (...) {
      throw CommError(what + ": unknown exception");
    }
  } catch (...) {
    return std::current_exception();
  }
}

/// Runs a completion callback; its exception is reported, not propagated.
void run_callback(const std::function<void(const Work&)>& cb, const Work& w) {
  try {
    cb(w);
  } catch (const std::exception& e) {
    std::cerr << "hyper: a completion callback of '" << w.description() << "' threw: " << e.what()
              << "\n";
  }
}

}  // namespace

at::Tensor Work::wait() const {
  auto& s = *state_;
  std::vector<std::function<void(const Work&)>> callbacks;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.done) {
      try {
        if (!s.pending.empty()) {
          internal::BlockedScope blocked;
          for (auto& w : s.pending) w->wait();
        }
        if (s.finish) s.result = s.finish();
      } catch (...) {
        s.error = s.map_errors ? map_foreign(std::current_exception(), s.what)
                               : std::current_exception();
      }
      s.done = true;
      s.pending.clear();
      s.inner.clear();
      s.finish = nullptr;
      s.ready = nullptr;
      s.keep_alive.clear();
      callbacks = std::move(s.callbacks);
      s.callbacks.clear();
    }
  }
  // Outside the lock: a callback may wait on this work or another.
  for (auto& cb : callbacks) run_callback(cb, *this);
  if (s.error) std::rethrow_exception(s.error);
  return s.result;
}

bool Work::wait(std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto nap = std::chrono::microseconds(50);
  internal::BlockedScope blocked;  // the polling is time spent waiting too
  while (!is_completed()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(nap, deadline - now));
    nap = std::min(nap * 2, std::chrono::microseconds(2000));
  }
  wait();
  return true;
}

bool Work::is_completed() const {
  auto& s = *state_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.done) return true;
  for (auto& w : s.pending)
    if (!w->isCompleted()) return false;
  for (const auto& w : s.inner)
    if (!w.is_completed()) return false;
  return !s.ready || s.ready();
}

bool Work::is_finished() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->error;
}

void Work::add_callback(std::function<void(const Work&)> callback) const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    if (!state_->done) {
      state_->callbacks.push_back(std::move(callback));
      return;
    }
  }
  run_callback(callback, *this);
}

std::string Work::description() const { return state_->what; }

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const ValueError& e) {
    throw ValueError(context + ": " + e.what());
  } catch (const NotImplementedError& e) {
    throw NotImplementedError(context + ": " + e.what());
  } catch (const InternalError& e) {
    throw InternalError(context + ": " + e.what());
  } catch (const CommError& e) {
    throw CommError(context + ": " + e.what());
  } catch (const IOError& e) {
    throw IOError(context + ": " + e.what());
  } catch (const SaveError& e) {
    throw SaveError(context + ": " + e.what());
  } catch (const c10::Error& e) {
    rethrow_c10_error<CommError>(e, context);
  } catch (const std::exception& e) {
    throw CommError(context + ": " + e.what());
  }
}

}  // namespace hyper::comm
