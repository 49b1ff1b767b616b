#pragma once
/// \file internal/gloo_group.h
/// hyper's ProcessGroupGloo subclass: it reaches the group's gloo::Context (protected in
/// c10d) to run Gloo algorithms that c10d does not expose, such as gloo::allgatherv.
/// In LibTorch 2.x ProcessGroupGloo is a c10d::Backend: hyper wraps it in a
/// c10d::ProcessGroup as the CPU backend (internal::wrap_backend) and keeps a pointer to the
/// subclass for the Gloo-only algorithms.
///
/// The torch wheel ships no gloo headers: they come from Debian's libgloo-dev, while the gloo
/// code that runs is the copy inside libtorch_cpu (libgloo itself is never linked). The only
/// gloo API used directly is gloo::allgatherv with its options (stable across gloo versions);
/// comm_test's Gloo ring route tests check it against the point-to-point route.

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <cstddef>
#include <vector>

namespace hyper::comm::internal {

class HyperGlooGroup : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  /// gloo::allgatherv on bytes: `input` (uint8, contiguous) holds counts[rank()] bytes,
  /// `output` (uint8, contiguous) sum(counts) bytes. Runs on the group's worker threads in
  /// issue order like every c10d collective.
  c10::intrusive_ptr<c10d::Work> allgatherv_bytes(at::Tensor output, at::Tensor input,
                                                  std::vector<size_t> counts);

  /// Whether `pg`'s worker threads have nothing queued or running and hold no finished work
  /// (any ProcessGroupGloo, not only hyper's: it reads the base class's queue under its lock).
  /// A worker drops its last reference to a work while holding that lock, so idle here means
  /// every reference the workers held is gone.
  static bool workers_idle(c10d::ProcessGroupGloo& pg);
};


}  // namespace hyper::comm::internal
