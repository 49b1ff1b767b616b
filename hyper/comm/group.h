#pragma once
/// \file group.h
/// hyper::comm::Group — a 1-D process group (a c10d ProcessGroup plus the global ranks it
/// spans and its byte counters). Cheap to copy (shared state).

#include <c10/core/DeviceType.h>

#include <memory>
#include <string>
#include <vector>

#include "hyper/comm/stats.h"

namespace hyper::comm {

namespace internal {
struct GroupState;
}

class Group {
 public:
  /// An undefined group; every collective refuses it.
  Group() = default;
  explicit Group(std::shared_ptr<internal::GroupState> state);

  bool defined() const { return state_ != nullptr; }
  /// This process's rank within the group (0..size-1).
  int rank() const;
  int size() const;
  /// Global ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const;
  /// This process's global rank.
  int global_rank() const;
  /// Device type the group's backend serves (kCPU for Gloo, kCUDA for NCCL).
  c10::DeviceType device_type() const;
  /// `[0,1,2]` (global ranks).
  std::string to_string() const;

  const std::shared_ptr<internal::GroupState>& state() const { return state_; }
  bool operator==(const Group& o) const { return state_ == o.state_; }
  bool operator!=(const Group& o) const { return state_ != o.state_; }

 private:
  std::shared_ptr<internal::GroupState> state_;
};

/// Counters of the collectives issued on this group by this rank.
CommStats stats(const Group& group);
void reset_stats(const Group& group);

}  // namespace hyper::comm
