#pragma once
/// \file timeline.h
/// hyper::tp::Timeline — a thread-safe recorder of one training step's regions (compute
/// regions and collectives: issue time, completion time, rank, row, thread), written as a
/// Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing) and as a PNG
/// picture, plus the overlap fraction: the share of communication time hidden behind
/// computation. Torch-free (standard library + zlib). Passed explicitly, never global: in
/// thread-mode tests every rank records into the same Timeline with its own rank.
///
///   hyper::tp::Timeline tl;
///   {
///     auto ag = tl.begin("all_gather x", hyper::tp::RegionKind::kComm, rank);   // issued
///     {
///       auto mm = tl.scope("mm", hyper::tp::RegionKind::kCompute, rank);  // until '}'
///       y = heavy_matmul();
///     }
///     work.wait();
///     tl.end(ag);                                                          // completed
///   }
///   tl.write_chrome_trace("step.json");
///   tl.write_png("step.png");
///   double hidden = tl.overlap().fraction();   // in [0, 1]
///
/// Overlap arithmetic (per rank, then summed over ranks): C = union of the rank's
/// communication intervals [issue, completion), P = union of its compute intervals;
/// hidden = |C ∩ P|, total = |C|, fraction = Σ hidden / Σ total (0 when there is no
/// communication). Unions make concurrent collectives count once. Worked example, one rank:
/// comm [0,10) and [5,20) → C = [0,20), |C| = 20; compute [2,4), [8,12) → P ∩ C = [2,4) ∪
/// [8,12), 6 µs hidden → fraction 0.3.

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hyper::tp {

enum class RegionKind { kCompute, kComm };
/// "compute" / "comm".
const char* to_string(RegionKind kind);

/// One recorded region. Times are microseconds since the Timeline's origin.
struct TimelineEvent {
  std::string name;
  RegionKind kind = RegionKind::kCompute;
  int rank = 0;
  /// Row within the rank (e.g. "main", "comm"); empty means to_string(kind).
  std::string stream;
  double start_us = 0;  ///< issue / start
  double end_us = 0;    ///< completion / end (>= start_us)
  int thread = 0;       ///< small ordinal of the recording thread (order of first use)

  double duration_us() const { return end_us - start_us; }
  /// The row label: stream, or to_string(kind) when stream is empty.
  std::string row() const;
};

/// A half-open interval [begin, end) of microseconds.
struct Interval {
  double begin = 0;
  double end = 0;
  double length() const { return end > begin ? end - begin : 0; }
  bool operator==(const Interval& o) const { return begin == o.begin && end == o.end; }
};

/// Sorted, disjoint, non-adjacent union of `intervals` (empty ones dropped).
std::vector<Interval> interval_union(std::vector<Interval> intervals);
/// Intersection of two unions (each sorted and disjoint, as interval_union returns).
std::vector<Interval> interval_intersection(const std::vector<Interval>& a,
                                            const std::vector<Interval>& b);
/// Total length of a sorted disjoint set.
double interval_measure(const std::vector<Interval>& intervals);

/// Communication time hidden behind computation.
struct OverlapStats {
  double comm_us = 0;     ///< Σ over ranks of |union of comm intervals|
  double hidden_us = 0;   ///< Σ over ranks of |comm union ∩ compute union|
  double compute_us = 0;  ///< Σ over ranks of |union of compute intervals|
  /// hidden_us / comm_us, 0 when comm_us == 0.
  double fraction() const { return comm_us > 0 ? hidden_us / comm_us : 0.0; }
};

/// Overlap of `events` (all ranks, or only `rank`). See the file comment.
OverlapStats compute_overlap(const std::vector<TimelineEvent>& events,
                             std::optional<int> rank = std::nullopt);

/// Chrome trace JSON of `events`: one process per rank ("rank N"), one thread per row,
/// "X" (complete) events with ts/dur in microseconds, cat = kind, args {kind, thread}.
std::string to_chrome_trace(const std::vector<TimelineEvent>& events);

/// Picture options.
struct PngOptions {
  int width = 1200;        ///< pixels, >= 200
  int row_height = 22;     ///< pixels per row, >= 6
  std::string title;       ///< drawn at the top (lower-case letters, digits, ". : - _ /")
};

/// An RGB PNG of `events`: one row per (rank, stream) with compute bars in blue and
/// communication bars in orange, a green strip under each rank where its communication is
/// hidden by its computation, a time axis with labelled ticks, and the overlap fraction.
/// Throws std::invalid_argument for options out of range.
std::vector<uint8_t> to_png(const std::vector<TimelineEvent>& events,
                            const PngOptions& options = {});

/// Thread-safe recorder. Not copyable (it owns a mutex); share it by reference.
class Timeline {
 public:
  using Clock = std::chrono::steady_clock;

  /// Origin = now.
  Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Microseconds since the origin.
  double now_us() const;

  /// Records a finished region as given (times relative to the origin). Throws
  /// std::invalid_argument when end_us < start_us.
  void record(TimelineEvent event);

  /// Opens a region now (e.g. a collective at issue) and returns its id for end().
  int64_t begin(std::string name, RegionKind kind, int rank, std::string stream = {});
  /// Closes region `id` now (e.g. when the collective's wait returns); may be called from
  /// another thread than begin(). Throws std::invalid_argument for an unknown or closed id.
  void end(int64_t id);

  /// RAII region: begin() at construction, end() at destruction or finish().
  class Scope {
   public:
    Scope(Timeline& timeline, int64_t id) : timeline_(&timeline), id_(id) {}
    Scope(Scope&& other) noexcept : timeline_(other.timeline_), id_(other.id_) {
      other.timeline_ = nullptr;
    }
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    ~Scope() { finish(); }
    void finish() {
      if (timeline_ != nullptr) timeline_->end(id_);
      timeline_ = nullptr;
    }

   private:
    Timeline* timeline_;
    int64_t id_;
  };
  Scope scope(std::string name, RegionKind kind, int rank, std::string stream = {});

  /// Closed regions, sorted by (rank, start). Open regions are not included.
  std::vector<TimelineEvent> events() const;
  /// Number of regions begun and not yet ended.
  size_t num_open() const;
  void clear();

  OverlapStats overlap(std::optional<int> rank = std::nullopt) const {
    return compute_overlap(events(), rank);
  }
  std::string chrome_trace() const { return to_chrome_trace(events()); }
  /// Writes the Chrome trace; throws std::runtime_error naming the path on I/O failure.
  void write_chrome_trace(const std::string& path) const;
  /// Writes the PNG; throws std::runtime_error naming the path on I/O failure.
  void write_png(const std::string& path, const PngOptions& options = {}) const;

 private:
  int thread_ordinal_locked();

  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<TimelineEvent> done_;
  std::unordered_map<int64_t, TimelineEvent> open_;
  std::unordered_map<std::thread::id, int> threads_;
  int64_t next_id_ = 0;
};

}  // namespace hyper::tp
