#include "hyper/tp/timeline.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>

#include "hyper/tp/internal/raster.h"

namespace hyper::tp {

const char* to_string(RegionKind kind) {
  return kind == RegionKind::kComm ? "comm" : "compute";
}

std::string TimelineEvent::row() const { return stream.empty() ? to_string(kind) : stream; }

// ---------------------------------------------------------------- interval arithmetic

std::vector<Interval> interval_union(std::vector<Interval> intervals) {
  intervals.erase(std::remove_if(intervals.begin(), intervals.end(),
                                 [](const Interval& i) { return !(i.end > i.begin); }),
                  intervals.end());
  std::sort(intervals.begin(), intervals.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const auto& i : intervals) {
    if (!out.empty() && i.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, i.end);
    } else {
      out.push_back(i);
    }
  }
  return out;
}

std::vector<Interval> interval_intersection(const std::vector<Interval>& a,
                                            const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const double lo = std::max(a[i].begin, b[j].begin);
    const double hi = std::min(a[i].end, b[j].end);
    if (hi > lo) out.push_back({lo, hi});
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return out;
}

double interval_measure(const std::vector<Interval>& intervals) {
  double total = 0;
  for (const auto& i : intervals) total += i.length();
  return total;
}

namespace {

struct RankIntervals {
  std::vector<Interval> comm, compute;
};

std::map<int, RankIntervals> by_rank(const std::vector<TimelineEvent>& events) {
  std::map<int, RankIntervals> ranks;
  for (const auto& e : events) {
    auto& r = ranks[e.rank];
    (e.kind == RegionKind::kComm ? r.comm : r.compute).push_back({e.start_us, e.end_us});
  }
  for (auto& [rank, r] : ranks) {
    r.comm = interval_union(std::move(r.comm));
    r.compute = interval_union(std::move(r.compute));
  }
  return ranks;
}

}  // namespace

OverlapStats compute_overlap(const std::vector<TimelineEvent>& events, std::optional<int> rank) {
  OverlapStats stats;
  for (const auto& [r, iv] : by_rank(events)) {
    if (rank && *rank != r) continue;
    stats.comm_us += interval_measure(iv.comm);
    stats.compute_us += interval_measure(iv.compute);
    stats.hidden_us += interval_measure(interval_intersection(iv.comm, iv.compute));
  }
  return stats;
}

// ---------------------------------------------------------------- rows

namespace {

struct Row {
  int rank;
  std::string label;  // stream
  int tid;            // 1-based within the rank
};

/// Rows in order: ranks ascending; within a rank compute rows first, then comm rows, each in
/// order of first appearance.
std::vector<Row> make_rows(const std::vector<TimelineEvent>& events,
                           std::map<std::pair<int, std::string>, size_t>* index) {
  std::map<int, std::vector<std::pair<int, std::string>>> per_rank;  // (kind order, label)
  std::map<std::pair<int, std::string>, bool> seen;
  for (const auto& e : events) {
    auto key = std::make_pair(e.rank, e.row());
    if (seen.count(key)) continue;
    seen[key] = true;
    per_rank[e.rank].push_back({e.kind == RegionKind::kComm ? 1 : 0, e.row()});
  }
  std::vector<Row> rows;
  for (auto& [rank, labels] : per_rank) {
    std::stable_sort(labels.begin(), labels.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    int tid = 1;
    for (const auto& [order, label] : labels) {
      (*index)[{rank, label}] = rows.size();
      rows.push_back({rank, label, tid++});
    }
  }
  return rows;
}

void append_json_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

std::string fmt_us(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.3f", v);
  return buf;
}

}  // namespace

std::string to_chrome_trace(const std::vector<TimelineEvent>& events) {
  std::map<std::pair<int, std::string>, size_t> index;
  const auto rows = make_rows(events, &index);
  std::string out = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  int last_rank = -1;
  bool any_rank = false;
  for (const auto& row : rows) {
    if (!any_rank || row.rank != last_rank) {
      sep();
      out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(row.rank) +
             ",\"tid\":0,\"args\":{\"name\":\"rank " + std::to_string(row.rank) + "\"}}";
      last_rank = row.rank;
      any_rank = true;
    }
    sep();
    out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(row.rank) +
           ",\"tid\":" + std::to_string(row.tid) + ",\"args\":{\"name\":";
    append_json_string(out, row.label);
    out += "}}";
    sep();
    out += "{\"name\":\"thread_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(row.rank) +
           ",\"tid\":" + std::to_string(row.tid) +
           ",\"args\":{\"sort_index\":" + std::to_string(row.tid) + "}}";
  }
  for (const auto& e : events) {
    const auto& row = rows[index.at({e.rank, e.row()})];
    sep();
    out += "{\"name\":";
    append_json_string(out, e.name);
    out += ",\"cat\":\"";
    out += to_string(e.kind);
    out += "\",\"ph\":\"X\",\"ts\":" + fmt_us(e.start_us) + ",\"dur\":" + fmt_us(e.duration_us()) +
           ",\"pid\":" + std::to_string(e.rank) + ",\"tid\":" + std::to_string(row.tid) +
           ",\"args\":{\"kind\":\"" + to_string(e.kind) +
           "\",\"thread\":" + std::to_string(e.thread) + "}}";
  }
  out += "]}\n";
  return out;
}

// ---------------------------------------------------------------- PNG

namespace {

// The canvas, font and PNG encoder are shared with the benchmark plots (internal/raster.h).
using internal::Canvas;
using internal::Rgb;
using internal::encode_png;
using internal::tick_step;

constexpr Rgb kWhite{255, 255, 255};
constexpr Rgb kBand{244, 244, 246};
constexpr Rgb kText{40, 40, 40};
constexpr Rgb kGrid{215, 215, 220};
constexpr Rgb kCompute{66, 120, 220};
constexpr Rgb kComm{240, 150, 20};
constexpr Rgb kHidden{40, 170, 80};
constexpr Rgb kEdge{30, 30, 30};

std::string time_label(double us, double step) {
  char buf[32];
  if (step >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%gs", us / 1e6);
  } else if (step >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%gms", us / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%gus", us);
  }
  return buf;
}

}  // namespace

std::vector<uint8_t> to_png(const std::vector<TimelineEvent>& events, const PngOptions& options) {
  if (options.width < 200 || options.width > 20000) {
    throw std::invalid_argument("timeline PNG: width " + std::to_string(options.width) +
                                " is outside [200, 20000]");
  }
  if (options.row_height < 6 || options.row_height > 400) {
    throw std::invalid_argument("timeline PNG: row_height " + std::to_string(options.row_height) +
                                " is outside [6, 400]");
  }
  std::map<std::pair<int, std::string>, size_t> index;
  const auto rows = make_rows(events, &index);
  const auto intervals = by_rank(events);
  const OverlapStats stats = compute_overlap(events);

  double t0 = 0, t1 = 1;
  if (!events.empty()) {
    t0 = events.front().start_us, t1 = events.front().end_us;
    for (const auto& e : events) t0 = std::min(t0, e.start_us), t1 = std::max(t1, e.end_us);
  }
  if (!(t1 > t0)) t1 = t0 + 1;

  size_t label_chars = 4;
  for (const auto& row : rows) {
    label_chars = std::max(label_chars, ("r" + std::to_string(row.rank) + " " + row.label).size());
  }
  const int rh = options.row_height;
  const int strip = 4;  // hidden-communication strip under each rank
  const int left = static_cast<int>(std::min<size_t>(label_chars, 24)) * 8 + 12;
  const int right = 16;
  const int top = 40;
  int rows_h = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    rows_h += rh;
    if (i + 1 == rows.size() || rows[i + 1].rank != rows[i].rank) rows_h += strip + 4;
  }
  const int axis_h = 34;
  const int height = top + std::max(rows_h, rh) + axis_h;
  const int width = options.width;
  const int plot_w = width - left - right;
  if (plot_w < 50) throw std::invalid_argument("timeline PNG: width too small for the labels");
  Canvas canvas(width, height);
  auto x_of = [&](double us) {
    return left + static_cast<int>(std::lround((us - t0) / (t1 - t0) * plot_w));
  };

  // Title and legend.
  char head[160];
  std::snprintf(head, sizeof(head), "overlap %.1f%%  comm %.0fus  hidden %.0fus",
                100.0 * stats.fraction(), stats.comm_us, stats.hidden_us);
  int x = canvas.text(8, 6, options.title.empty() ? std::string("step timeline") : options.title, kText);
  canvas.text(std::max(x + 24, 8), 6, head, kText);
  int lx = 8;
  for (auto [color, name] : {std::pair<Rgb, const char*>{kCompute, "compute"},
                             {kComm, "comm"}, {kHidden, "hidden comm"}}) {
    canvas.fill(lx, 22, lx + 14, 32, color);
    lx = canvas.text(lx + 18, 22, name, kText) + 16;
  }

  // Tick grid.
  const double step = tick_step(t1 - t0, std::max(2, plot_w / 110));
  const int grid_bottom = top + rows_h;
  for (double t = std::ceil(t0 / step) * step; t <= t1 + 1e-9 * step; t += step) {
    const int gx = x_of(t);
    canvas.fill(gx, top - 2, gx + 1, grid_bottom + 4, kGrid);
    canvas.text(std::max(0, gx - 10), grid_bottom + 10, time_label(t, step), kText);
  }
  canvas.fill(left, grid_bottom + 3, left + plot_w + 1, grid_bottom + 4, kText);

  // Rows.
  std::vector<int> row_y(rows.size());
  int y = top;
  for (size_t i = 0; i < rows.size(); ++i) {
    row_y[i] = y;
    if (i % 2 == 0) canvas.fill(0, y, width, y + rh, kBand);
    std::string label = "r" + std::to_string(rows[i].rank) + " " + rows[i].label;
    if (label.size() > 24) label.resize(24);
    canvas.text(6, y + (rh - 10) / 2, label, kText);
    y += rh;
    if (i + 1 == rows.size() || rows[i + 1].rank != rows[i].rank) {
      // Hidden communication of this rank.
      const auto& iv = intervals.at(rows[i].rank);
      for (const auto& h : interval_intersection(iv.comm, iv.compute)) {
        canvas.fill(x_of(h.begin), y + 1, std::max(x_of(h.end), x_of(h.begin) + 1), y + 1 + strip,
                    kHidden);
      }
      y += strip + 4;
    }
  }
  const int pad = std::max(1, rh / 6);
  for (const auto& e : events) {
    const size_t r = index.at({e.rank, e.row()});
    const int x0 = x_of(e.start_us);
    const int x1 = std::max(x_of(e.end_us), x0 + 1);
    const Rgb c = e.kind == RegionKind::kComm ? kComm : kCompute;
    canvas.fill(x0, row_y[r] + pad, x1, row_y[r] + rh - pad, c);
    if (x1 - x0 >= 3) {  // thin dark edges keep adjacent regions apart
      canvas.fill(x0, row_y[r] + pad, x0 + 1, row_y[r] + rh - pad, kEdge);
    }
  }
  return encode_png(canvas);
}

// ---------------------------------------------------------------- Timeline

Timeline::Timeline() : origin_(Clock::now()) {}

double Timeline::now_us() const {
  return std::chrono::duration<double, std::micro>(Clock::now() - origin_).count();
}

int Timeline::thread_ordinal_locked() {
  auto [it, inserted] = threads_.emplace(std::this_thread::get_id(), static_cast<int>(threads_.size()));
  return it->second;
}

void Timeline::record(TimelineEvent event) {
  if (event.end_us < event.start_us) {
    throw std::invalid_argument("Timeline::record: region '" + event.name + "' ends at " +
                                fmt_us(event.end_us) + " us before it starts at " +
                                fmt_us(event.start_us) + " us");
  }
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
  if (it == open_.end()) {
    throw std::invalid_argument("Timeline::end: region id " + std::to_string(id) +
                                " is not open (never begun, already ended, or cleared)");
  }
  it->second.end_us = std::max(t, it->second.start_us);
  done_.push_back(std::move(it->second));
  open_.erase(it);
}

Timeline::Scope Timeline::scope(std::string name, RegionKind kind, int rank, std::string stream) {
  return Scope(*this, begin(std::move(name), kind, rank, std::move(stream)));
}

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

namespace {
void write_file(const std::string& path, const void* data, size_t size, const char* what) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (f) f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) throw std::runtime_error(std::string("Timeline: cannot write the ") + what + " to '" + path + "'");
}
}  // namespace

void Timeline::write_chrome_trace(const std::string& path) const {
  const std::string json = chrome_trace();
  write_file(path, json.data(), json.size(), "Chrome trace");
}

void Timeline::write_png(const std::string& path, const PngOptions& options) const {
  const auto png = to_png(events(), options);
  write_file(path, png.data(), png.size(), "PNG");
}

}  // namespace hyper::tp
