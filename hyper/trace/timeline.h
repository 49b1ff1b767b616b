#pragma once
/// \file timeline.h
/// hyper::trace::Timeline — a thread-safe recorder of one training step's regions (compute
/// regions and collectives: issue time, completion time, rank, row, thread). It is an
/// Observer, so instrumented code (hyper::tp's styles) reports to it without knowing it;
/// what it holds is written as a Chrome trace (chrome_trace.h) and as a picture
/// (step_picture.h), and measured by compute_overlap (overlap.h). Passed explicitly, never
/// global: in thread-mode tests every rank records into the same Timeline with its own rank.
///
///   hyper::trace::Timeline tl;
///   hyper::tp::ParallelizeOptions options;
///   options.observer = &tl;                   // the styles report their collectives
///   ...
///   {
///     auto mm = tl.scope("loss", hyper::trace::RegionKind::kCompute, rank);  // until '}'
///     loss = compute_loss();
///   }
///   tl.write_chrome_trace("step.json");
///   tl.write_picture("step.png");             // or "step.svg"
///   double hidden = tl.overlap().fraction();  // in [0, 1]

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "hyper/trace/event.h"
#include "hyper/trace/observer.h"
#include "hyper/trace/overlap.h"
#include "hyper/trace/step_picture.h"

namespace hyper::trace {

/// Thread-safe recorder. Not copyable (it owns a mutex); share it by reference.
class Timeline : public Observer {
 public:
  using Clock = std::chrono::steady_clock;

  /// Origin = now.
  Timeline();
  Timeline(const Timeline&) = delete;
  Timeline& operator=(const Timeline&) = delete;

  /// Microseconds since the origin.
  double now_us() const;

  /// Records a finished region as given (times relative to the origin). Throws
  /// hyper::ValueError when end_us < start_us.
  void record(TimelineEvent event);

  /// Opens a region now (e.g. a collective at issue) and returns its id for end().
  int64_t begin(std::string name, RegionKind kind, int rank, std::string stream = {});
  /// Closes region `id` now (e.g. when the collective's wait returns); may be called from
  /// another thread than begin(). Throws hyper::ValueError for an unknown or closed id.
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

  // Observer: collectives and compute regions as begin()/end() of kComm / kCompute regions.
  int64_t collective_issued(const std::string& name, int rank) override;
  void collective_done(int64_t token) override;
  int64_t compute_begin(const std::string& name, int rank) override;
  void compute_end(int64_t token) override;

  /// Closed regions, sorted by (rank, start). Open regions are not included.
  std::vector<TimelineEvent> events() const;
  /// Number of regions begun and not yet ended.
  size_t num_open() const;
  void clear();

  OverlapStats overlap(std::optional<int> rank = std::nullopt) const {
    return compute_overlap(events(), rank);
  }
  /// to_chrome_trace(events()).
  std::string chrome_trace() const;
  /// Writes the Chrome trace; throws std::runtime_error naming the path on I/O failure.
  void write_chrome_trace(const std::string& path) const;
  /// Writes the step picture, PNG or SVG by the path's extension (write_step_picture).
  void write_picture(const std::string& path, const StepPictureOptions& options = {}) const;

 private:
  int thread_ordinal_locked();

  Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<TimelineEvent> done_;
  std::unordered_map<int64_t, TimelineEvent> open_;
  std::unordered_map<std::thread::id, int> threads_;
  int64_t next_id_ = 0;
};

}  // namespace hyper::trace
