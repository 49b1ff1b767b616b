#include "hyper/trace/timeline.h"

#include <algorithm>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/trace/chrome_trace.h"

namespace hyper::trace {

Timeline::Timeline() : origin_(Clock::now()) {}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

int Timeline::thread_ordinal_locked() {
  auto [it, inserted] =
      threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()));
  return it->second;
}

void Timeline::record(TimelineEvent event) {
  HYPER_CHECK_VALUE(event.end_us >= event.start_us, "Timeline::record: region '", event.name,
                    "' ends at ", event.end_us, " us before it starts at ", event.start_us, " us");
  std::lock_guard<std::mutex> lock(mu_);
  done_.push_back(std::move(event));
}

int64_t Timeline::begin(std::string name, RegionKind kind, int rank, std::string stream) {
  TimelineEvent e;
  e.name = std::move(name);
  e.kind = kind;
  e.rank = rank;
  e.stream = std::move(stream);
  e.start_us = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  e.thread = thread_ordinal_locked();
  const int64_t id = next_id_++;
  open_.emplace(id, std::move(e));
  return id;
}

void Timeline::end(int64_t id) {
  const double t = now_us();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = open_.find(id);
  HYPER_CHECK_VALUE(it != open_.end(), "Timeline::end: region id ", id,
                    " is not open (never begun, already ended, or cleared)");
  it->second.end_us = std::max(t, it->second.start_us);
  done_.push_back(std::move(it->second));
  open_.erase(it);
}

Timeline::Scope Timeline::scope(std::string name, RegionKind kind, int rank, std::string stream) {
  return Scope(*this, begin(std::move(name), kind, rank, std::move(stream)));
}

int64_t Timeline::collective_issued(const std::string& name, int rank) {
  return begin(name, RegionKind::kComm, rank);
}
void Timeline::collective_done(int64_t token) { end(token); }
int64_t Timeline::compute_begin(const std::string& name, int rank) {
  return begin(name, RegionKind::kCompute, rank);
}
void Timeline::compute_end(int64_t token) { end(token); }

std::vector<TimelineEvent> Timeline::events() const {
  std::vector<TimelineEvent> out;
  {
    std::lock_guard<std::mutex> lock(mu_);
    out = done_;
  }
  std::stable_sort(out.begin(), out.end(), [](const TimelineEvent& a, const TimelineEvent& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.start_us < b.start_us;
  });
  return out;
}

size_t Timeline::num_open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_.size();
}

void Timeline::clear() {
  std::lock_guard<std::mutex> lock(mu_);
  done_.clear();
  open_.clear();
}

std::string Timeline::chrome_trace() const { return to_chrome_trace(events()); }

void Timeline::write_chrome_trace(const std::string& path) const {
  trace::write_chrome_trace(path, events());
}

void Timeline::write_picture(const std::string& path, const StepPictureOptions& options) const {
  write_step_picture(path, events(), options);
}

}  // namespace hyper::trace
