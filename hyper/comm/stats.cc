#include "hyper/comm/stats.h"

#include <chrono>
#include <sstream>

#include "hyper/comm/blocked_time.h"

namespace hyper::comm {

namespace {
thread_local long long t_blocked_ns = 0;
long long steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

double blocked_seconds() { return static_cast<double>(t_blocked_ns) * 1e-9; }
void reset_blocked_time() { t_blocked_ns = 0; }
internal::BlockedScope::BlockedScope() : start_ns_(steady_ns()) {}
internal::BlockedScope::~BlockedScope() { t_blocked_ns += steady_ns() - start_ns_; }

const char* to_string(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGatherV: return "all_gather_v";
    case CollectiveKind::kAllToAllV: return "all_to_all_v";
    case CollectiveKind::kScatterV: return "scatter_v";
    case CollectiveKind::kAllReduce: return "all_reduce";
    case CollectiveKind::kReduceScatterV: return "reduce_scatter_v";
    case CollectiveKind::kBroadcast: return "broadcast";
  }
  return "?";
}

int64_t CommStats::bytes_sent() const {
  int64_t s = 0;
  for (const auto& c : by_kind) s += c.bytes_sent;
  return s;
}
int64_t CommStats::bytes_received() const {
  int64_t s = 0;
  for (const auto& c : by_kind) s += c.bytes_received;
  return s;
}
int64_t CommStats::calls() const {
  int64_t s = 0;
  for (const auto& c : by_kind) s += c.calls;
  return s;
}

std::string CommStats::to_string() const {
  std::ostringstream os;
  bool first = true;
  for (int k = 0; k < kNumCollectiveKinds; ++k) {
    const auto& c = by_kind[k];
    if (c.calls == 0) continue;
    if (!first) os << "; ";
    first = false;
    os << comm::to_string(static_cast<CollectiveKind>(k)) << ": calls=" << c.calls
       << " sent=" << c.bytes_sent << " received=" << c.bytes_received;
  }
  if (first) os << "(no collectives)";
  return os.str();
}

}  // namespace hyper::comm
