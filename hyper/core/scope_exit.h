#pragma once
/// \file scope_exit.h
/// ScopeExit: runs a function when the scope ends, by return or by exception. The one RAII
/// guard for undoing a counter or a state change on every path, instead of a local struct
/// with a destructor at each site. Torch-free, header-only.
///
///   note_backward_collective(+1);
///   ...
///   ScopeExit done([] { note_backward_collective(-1); });  // also when finish() throws
///   at::Tensor r = finish();

#include <utility>

namespace hyper {

/// Calls `fn` once, from the destructor. Neither copyable nor movable, so it runs exactly
/// once, where it was declared. `fn` must not throw (it runs during unwinding).
template <class F>
class ScopeExit {
 public:
  explicit ScopeExit(F fn) : fn_(std::move(fn)) {}
  ~ScopeExit() { fn_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  F fn_;
};

}  // namespace hyper
