#pragma once
// Shared helpers of hyper's benchmark programs (not installed): side-by-side timing of
// "ours" vs a baseline inside one run, and a small JSON/Markdown report.
// Targets are printed as ratios; nothing here asserts on time.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

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
  double ratio() const { return base_s > 0 ? ours_s / base_s : 0; }
  bool meets() const { return target <= 0 || ratio() <= target; }
};

/// Runs `ours` and `base` alternately `reps` times after one warm-up each; each call
/// returns its elapsed seconds (already agreed across ranks by the caller). Medians.
inline Row compare(const std::string& name, const std::string& baseline, int reps,
                   const std::function<double()>& ours, const std::function<double()>& base,
                   double target) {
  Row r;
  r.name = name;
  r.baseline = baseline;
  r.target = target;
  ours();
  base();
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
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

inline void write_json(const std::string& path, const std::string& bench,
                       const std::string& setup, const std::vector<Row>& rows) {
  std::ofstream f(path);
  f << "{\n  \"benchmark\": \"" << json_escape(bench) << "\",\n  \"setup\": \""
    << json_escape(setup) << "\",\n  \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto& r = rows[i];
    f << "    {\"name\": \"" << json_escape(r.name) << "\", \"baseline\": \""
      << json_escape(r.baseline) << "\", \"ours_s\": " << r.ours_s << ", \"baseline_s\": "
      << r.base_s << ", \"ratio\": " << r.ratio() << ", \"target\": " << r.target
      << ", \"meets_target\": " << (r.meets() ? "true" : "false") << ", \"bytes_ours\": "
      << r.bytes_ours << ", \"bytes_baseline\": " << r.bytes_base << "}"
      << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

/// Command line shared by the benchmark programs: --mib N, --reps N, --out FILE.
struct Args {
  int64_t mib = 64;
  int reps = 5;
  std::string out;
};

inline Args parse_args(const char* program, int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--mib" && i + 1 < argc) a.mib = std::atoll(argv[++i]);
    else if (s == "--reps" && i + 1 < argc) a.reps = std::atoi(argv[++i]);
    else if (s == "--out" && i + 1 < argc) a.out = argv[++i];
    else {
      std::fprintf(stderr, "%s: unknown argument '%s' (use --mib N, --reps N, --out FILE)\n",
                   program, s.c_str());
      std::exit(2);
    }
  }
  if (a.mib < 1 || a.reps < 1) {
    std::fprintf(stderr, "%s: --mib and --reps must be at least 1\n", program);
    std::exit(2);
  }
  return a;
}

/// `--out` if given, else <directory of argv0>/results/<name>.json (directories created).
inline std::string result_path(const Args& args, const char* argv0, const std::string& name) {
  if (!args.out.empty()) return args.out;
  std::filesystem::path dir = std::filesystem::path(argv0).parent_path() / "results";
  std::filesystem::create_directories(dir);
  return (dir / (name + ".json")).string();
}

}  // namespace hyper::bench
