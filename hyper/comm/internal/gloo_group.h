#pragma once
/// \file internal/gloo_group.h
/// hyper's ProcessGroupGloo subclass: it reaches the group's gloo::Context (protected in
/// c10d) to run Gloo algorithms that c10d does not expose, such as gloo::allgatherv.
/// LibTorch 1.13 makes ProcessGroupGloo a ProcessGroup; in LibTorch 2.x it is a Backend
/// wrapped by a ProcessGroup — the subclass then has to be registered as the CPU backend
/// of a c10d::ProcessGroup (not done here; the generic point-to-point routes need none).

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
};

}  // namespace hyper::comm::internal
