#pragma once
/// \file stats.h
/// Per-rank byte counters of hyper's collectives, by collective kind.
///
/// Counters live on the objects that own the communication (each comm::Group and each
/// World), never in a process-global variable, so thread-mode tests that run every rank in
/// one process can read rank r's numbers: `hyper::comm::stats(mesh_of_rank_r)`.
/// Counted: payload bytes as moved on the wire by hyper's algorithm (see docs/comm.md),
/// not a rank's copy to itself and not the small metadata exchanges (row counts).

#include <array>
#include <cstdint>
#include <string>

namespace hyper::comm {

/// The collectives hyper counts.
enum class CollectiveKind : int {
  kAllGatherV = 0,
  kAllToAllV,
  kScatterV,
  kAllReduce,
  kReduceScatterV,
  kBroadcast,
};
constexpr int kNumCollectiveKinds = 6;

/// `all_gather_v`, `all_to_all_v`, ...
const char* to_string(CollectiveKind kind);

/// Counters of one collective kind.
struct ByteCount {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t bytes_received = 0;
  bool operator==(const ByteCount& o) const {
    return calls == o.calls && bytes_sent == o.bytes_sent && bytes_received == o.bytes_received;
  }
};

/// A snapshot of one rank's counters (value type).
struct CommStats {
  std::array<ByteCount, kNumCollectiveKinds> by_kind{};

  const ByteCount& operator[](CollectiveKind k) const { return by_kind[static_cast<int>(k)]; }
  ByteCount& operator[](CollectiveKind k) { return by_kind[static_cast<int>(k)]; }
  /// Sums over all kinds.
  int64_t bytes_sent() const;
  int64_t bytes_received() const;
  int64_t calls() const;
  /// `all_gather_v: calls=1 sent=96 received=160; ...` (kinds with calls only).
  std::string to_string() const;
  bool operator==(const CommStats& o) const { return by_kind == o.by_kind; }
};

}  // namespace hyper::comm
