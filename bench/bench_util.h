#pragma once
// Shared helpers of hyper's benchmark programs (not installed): side-by-side timing of
// "ours" vs a baseline inside one run, and the result JSON that bench_report turns into
// docs/benchmarks.md (schema below). Targets are printed as ratios; nothing here asserts on
// time.
//
// Result file (one per program run; bench_report reads every *.json with "rows"):
//   {"benchmark": "comm_bench", "setup": "...", "ranks": 4, "mib": 64, "reps": 5,
//    "libtorch": "1.13.0", "loadavg_start": "0.52 0.61 0.70", "time_utc": "2024-..Z",
//    "rows": [{"id": "all_gather_v.padded", "name": "...", "baseline": "...",
//              "ours_s": 0.1, "baseline_s": 1.0, "ratio": 0.1, "target": 0.3,
//              "meets_target": true, "bytes_ours": 1, "bytes_baseline": 2,
//              "bytes_lower_bound": 1, "ranks": 4, "mib": 64, "extra": {"peak_mib": 3}}]}
// "id" names the comparison across sizes and rank counts (the scaling series); ranks/mib of
// a row default to the run's. Unknown numeric "extra" figures are shown as notes.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "hyper/core/format.h"
#include "tools/cli/args.h"

#if __has_include(<torch/version.h>)
#include <torch/version.h>
#endif

namespace hyper::bench {

inline double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

/// One comparison: ours vs a baseline, with the ratio ours/baseline and its target.
struct Row {
  std::string name;
  std::string baseline;
  double ours_s = 0;
  double base_s = 0;
  double target = 0;      ///< ratio must be <= target (0: reported only)
  int64_t bytes_ours = 0;  ///< bytes on the wire (all ranks), if known
  int64_t bytes_base = 0;
  /// Stable key of this comparison across sizes and rank counts (a scaling series);
  /// empty: the name.
  std::string id;
  /// Bytes any algorithm must move for this result (0: not meaningful).
  int64_t bytes_lower = 0;
  /// Size and rank count of this row when they differ from the run's (0: the run's).
  int ranks = 0;
  double mib = 0;
  /// Further figures shown as notes (peak memory, overlap fraction, ...).
  std::vector<std::pair<std::string, double>> extra;
  double ratio() const { return base_s > 0 ? ours_s / base_s : 0; }
  bool meets() const { return target <= 0 || ratio() <= target; }
};

/// Runs `ours` and `base` alternately `reps` times after `warmup` warm-up calls each (default
/// one); each call returns its elapsed seconds (already agreed across ranks by the caller).
/// Medians.
inline Row compare(const std::string& name, const std::string& baseline, int reps,
                   const std::function<double()>& ours, const std::function<double()>& base,
                   double target, int warmup = 1) {
  Row r;
  r.name = name;
  r.baseline = baseline;
  r.target = target;
  for (int i = 0; i < warmup; ++i) {
    ours();
    base();
  }
  std::vector<double> a, b;
  for (int i = 0; i < reps; ++i) {
    if (i % 2 == 0) {
      a.push_back(ours());
      b.push_back(base());
    } else {
      b.push_back(base());
      a.push_back(ours());
    }
  }
  r.ours_s = median(a);
  r.base_s = median(b);
  return r;
}

/// "(1,1,1,13)".
inline std::string tuple_string(const std::vector<int64_t>& v) {
  return "(" + hyper::join_ints(v) + ")";
}

inline void print_rows(const std::string& title, const std::vector<Row>& rows) {
  std::printf("\n%s\n", title.c_str());
  std::printf("%-48s %-40s %10s %10s %7s %8s %s\n", "ours", "baseline", "ours ms", "base ms",
              "ratio", "target", "");
  for (const auto& r : rows) {
    char target[32];
    if (r.target > 0)
      std::snprintf(target, sizeof target, "<= %.2f", r.target);
    else
      std::snprintf(target, sizeof target, "report");
    std::printf("%-48s %-40s %10.2f %10.2f %7.3f %8s %s\n", r.name.c_str(), r.baseline.c_str(),
                r.ours_s * 1e3, r.base_s * 1e3, r.ratio(), target,
                r.target > 0 ? (r.meets() ? "ok" : "MISSED") : "");
  }
}

inline std::string json_escape(const std::string& s) {
  std::string o;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += static_cast<char>(c);
    }
  }
  return o;
}

/// A number as JSON (non-finite values become null).
inline std::string json_number(double v) {
  if (!(v == v) || v > 1e308 || v < -1e308) return "null";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

/// The first line of a small text file ("" if unreadable), e.g. /proc/loadavg.
inline std::string read_first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

/// A "VmRSS"-style field of /proc/self/status in KiB (-1 if absent).
inline int64_t proc_status_kib(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::string k = std::string(key) + ":";
  while (std::getline(f, line))
    if (line.compare(0, k.size(), k) == 0) return std::atoll(line.c_str() + k.size());
  return -1;
}

/// Resets the RSS high-water mark (VmHWM) to the current RSS (/proc/self/clear_refs "5",
/// Linux >= 4.0); false where that is not possible.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

inline std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

/// What a result file says about its run (all optional).
struct RunInfo {
  int ranks = 0;
  double mib = 0;
  int reps = 0;
  std::string loadavg_start;  ///< /proc/loadavg when the program started
};

inline void write_json(const std::string& path, const std::string& bench,
                       const std::string& setup, const std::vector<Row>& rows,
                       const RunInfo& info = {}) {
  std::ofstream f(path);
  f << "{\n  \"benchmark\": \"" << json_escape(bench) << "\",\n  \"setup\": \""
    << json_escape(setup) << "\",\n";
  if (info.ranks > 0) f << "  \"ranks\": " << info.ranks << ",\n";
  if (info.mib > 0) f << "  \"mib\": " << json_number(info.mib) << ",\n";
  if (info.reps > 0) f << "  \"reps\": " << info.reps << ",\n";
#ifdef TORCH_VERSION
  f << "  \"libtorch\": \"" << TORCH_VERSION << "\",\n";
#endif
  const std::string load_end = read_first_line("/proc/loadavg");
  if (!info.loadavg_start.empty())
    f << "  \"loadavg_start\": \"" << json_escape(info.loadavg_start) << "\",\n";
  if (!load_end.empty()) f << "  \"loadavg_end\": \"" << json_escape(load_end) << "\",\n";
  f << "  \"time_utc\": \"" << utc_now_iso() << "\",\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    f << "    {\"id\": \"" << json_escape(r.id.empty() ? r.name : r.id) << "\", \"name\": \""
      << json_escape(r.name) << "\", \"baseline\": \"" << json_escape(r.baseline)
      << "\", \"ours_s\": " << json_number(r.ours_s)
      << ", \"baseline_s\": " << json_number(r.base_s)
      << ", \"ratio\": " << json_number(r.ratio()) << ", \"target\": " << json_number(r.target)
      << ", \"meets_target\": " << (r.meets() ? "true" : "false")
      << ", \"bytes_ours\": " << r.bytes_ours << ", \"bytes_baseline\": " << r.bytes_base
      << ", \"bytes_lower_bound\": " << r.bytes_lower
      << ", \"ranks\": " << (r.ranks > 0 ? r.ranks : info.ranks)
      << ", \"mib\": " << json_number(r.mib > 0 ? r.mib : info.mib);
    if (!r.extra.empty()) {
      f << ", \"extra\": {";
      for (std::size_t k = 0; k < r.extra.size(); ++k)
        f << (k ? ", " : "") << "\"" << json_escape(r.extra[k].first)
          << "\": " << json_number(r.extra[k].second);
      f << "}";
    }
    f << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

/// Command line shared by the benchmark programs: --mib N, --reps N, --warmup N, --out FILE.
struct Args {
  int64_t mib = 64;
  int reps = 5;
  int warmup = 1;  ///< warm-up calls of ours and of the baseline before the timed reps
  std::string out;
  std::string loadavg_start = read_first_line("/proc/loadavg");  ///< load when parsed
};

/// The RunInfo of a run with these arguments on `ranks` ranks.
inline RunInfo run_info(const Args& args, int ranks) {
  RunInfo info;
  info.ranks = ranks;
  info.mib = static_cast<double>(args.mib);
  info.reps = args.reps;
  info.loadavg_start = args.loadavg_start;
  return info;
}

/// Parses --mib N, --reps N, --warmup N, --out FILE and the options `more` adds (a
/// benchmark's own); exits 2 with a message naming `program` on a bad command line.
inline Args parse_args(const char* program, int argc, char** argv,
                       const std::function<void(cli::ArgParser&)>& more = {}) {
  Args a;
  const std::string unknown =
      "unknown argument '{arg}' (use --mib N, --reps N, --warmup N, --out FILE)";
  cli::ArgParser p({unknown, unknown});  // a value option last is an unknown argument too
  p.option({"--mib"}, [&](const std::string& v) { a.mib = std::atoll(v.c_str()); });
  p.option({"--reps"}, [&](const std::string& v) { a.reps = std::atoi(v.c_str()); });
  p.option({"--warmup"}, [&](const std::string& v) { a.warmup = std::atoi(v.c_str()); });
  p.option({"--out"}, [&](const std::string& v) { a.out = v; });
  if (more) more(p);
  try {
    p.parse(argc, argv);
  } catch (const cli::UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    std::exit(2);
  }
  if (a.mib < 1 || a.reps < 1 || a.warmup < 0) {
    std::fprintf(stderr, "%s: --mib and --reps must be at least 1, --warmup at least 0\n",
                 program);
    std::exit(2);
  }
  return a;
}

/// `--out` if given, else <directory of argv0>/results/<name>.json (directories created).
inline std::string result_path(const Args& args, const char* argv0, const std::string& name) {
  if (!args.out.empty()) {
    const std::filesystem::path parent = std::filesystem::path(args.out).parent_path();
    if (!parent.empty()) std::filesystem::create_directories(parent);
    return args.out;
  }
  std::filesystem::path dir = std::filesystem::path(argv0).parent_path() / "results";
  std::filesystem::create_directories(dir);
  return (dir / (name + ".json")).string();
}

}  // namespace hyper::bench
