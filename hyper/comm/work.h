#pragma once
/// \file work.h
/// hyper::comm::Work — the handle of an asynchronous collective.

#include <ATen/core/Tensor.h>

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

/// Handle of an issued collective. Copies share the same state.
///
/// `wait()` blocks until the collective has finished, runs its local epilogue (unpacking,
/// reduction) once, and returns the result. It is idempotent: a second `wait()` returns the
/// same tensor immediately, or throws the same CommError again. The caller may compute
/// between issuing and waiting; the input tensors are kept alive by the handle.
///
///   auto w = hyper::comm::all_gather_v_async(x, group);
///   auto y = heavy_local_work();            // overlaps with the communication
///   at::Tensor gathered = w.wait();
class Work {
 public:
  /// An already-completed handle with an undefined result.
  Work();
  explicit Work(std::shared_ptr<internal::WorkState> state);

  /// Waits (once), returns the result. Throws CommError with context on failure.
  at::Tensor wait() const;
  /// True when wait() would not block on communication (non-blocking test).
  bool is_completed() const;
  /// `all_gather_v on group [0,1] (rank 0)`.
  std::string description() const;

 private:
  std::shared_ptr<internal::WorkState> state_;
};

}  // namespace hyper::comm
