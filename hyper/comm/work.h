#pragma once
/// \file work.h
/// hyper::comm::Work — the handle of an asynchronous collective.

#include <ATen/core/Tensor.h>

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "hyper/core/errors.h"

namespace hyper::comm {

namespace internal {
struct WorkState;
}

/// hyper::CommError (hyper/core/errors.h), by its older name.
using CommError = ::hyper::CommError;

/// Handle of an asynchronous operation: an issued collective, or any work built on one (the
/// pending result of an async redistribute, a gradient's collective, a background
/// checkpoint save). Copies share the same state. The one completion object of hyper
/// (as c10d's Work: an exception_ptr, a wait with a timeout, completion callbacks).
///
/// `wait()` blocks until the work has finished, runs its local epilogue (unpacking,
/// reduction) once, and returns the result. It is idempotent: a second `wait()` returns the
/// same tensor immediately, or rethrows the same exception. The caller may compute between
/// issuing and waiting; the input tensors are kept alive by the handle.
///
/// Errors keep their type on the way to the caller (a ValueError raised in an epilogue is
/// a ValueError at wait()). Only at the LibTorch boundary are errors mapped: a c10 error or
/// another foreign exception out of a c10d collective becomes a CommError whose message
/// starts with the collective (`all_gather_v on group [0,1,2] (rank 1): ...`).
///
///   auto w = hyper::comm::all_gather_v_async(x, group);
///   auto y = heavy_local_work();            // overlaps with the communication
///   at::Tensor gathered = w.wait();
class Work {
 public:
  /// An already-completed handle with an undefined result.
  Work();
  explicit Work(std::shared_ptr<internal::WorkState> state);

  /// A completed handle holding `result`.
  static Work completed(at::Tensor result, std::string what = "completed work");
  /// A handle whose epilogue `finish` runs once, on the first thread that waits; its
  /// exceptions reach every waiter with their type. `ready` tells is_completed() whether
  /// `finish` would return without blocking (default: always).
  static Work deferred(std::string what, std::function<at::Tensor()> finish,
                       std::function<bool()> ready = {});
  /// A handle that waits for this one, then returns `fn(result)` (fn runs once).
  Work then(std::string what, std::function<at::Tensor(const at::Tensor&)> fn) const;

  /// Waits (once), returns the result; rethrows the work's exception on failure.
  at::Tensor wait() const;
  /// Waits at most `timeout` for the work to complete. Returns true when it finished (its
  /// result is then what wait() returns), false when it is still running (it stays valid:
  /// wait again later). Rethrows the work's exception when it failed.
  bool wait(std::chrono::milliseconds timeout) const;
  /// True when wait() would not block on communication (non-blocking test).
  bool is_completed() const;
  /// True once the epilogue has run (successfully or not): wait() returns at once.
  bool is_finished() const;
  /// The failure of a finished work; null while running or after success.
  std::exception_ptr exception() const;
  /// Runs `callback(*this)` once the work has finished: at once (on this thread) if it has,
  /// else on the thread that finishes it, right after the epilogue, in the order added.
  /// A callback's own exception is not propagated (the work's outcome is already decided);
  /// it is reported to stderr.
  void add_callback(std::function<void(const Work&)> callback) const;
  /// `all_gather_v on group [0,1] (rank 0)`.
  std::string description() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

/// Rethrows the exception in flight (call inside a catch block) with `context + ": "` in
/// front of its message, keeping its type for hyper's error types (hyper/core/errors.h); a
/// c10 error is mapped as by rethrow_c10_error<CommError> (hyper/comm/c10_errors.h); any
/// other exception becomes a CommError.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace hyper::comm
