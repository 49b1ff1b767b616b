// bench_report: turns the result JSON files of hyper's benchmark programs into the benchmark
// report: docs/benchmarks.md (Markdown tables), PNG plots of the scaling series, one combined
// JSON, and optionally the summary section of README.md. Torch-free (nlohmann json, and
// hyper::trace's plots, drawn with cairo). scripts/bench.sh runs it after the benchmarks:
//
//   bench_report --results build/bench/results --md docs/benchmarks.md
//                --plots docs/benchmarks --json docs/benchmarks/results.json
//                [--readme README.md] [--expect a,b,c] [--require]
//                [--headline-ranks 4] [--headline-mib 64] [--command TEXT] [--duration-s S]
//
// Input: every *.json under --results (repeatable) with a "benchmark" name and a "rows" array
// (the schema in bench/bench_util.h); other JSON (e.g. Chrome traces) is skipped, PNGs there
// are copied to --plots and linked. Per benchmark the headline run is the one at
// (--headline-ranks, --headline-mib), else the nearest; its rows form the benchmark's table.
// Rows sharing an "id" across runs form the scaling series: by size at the headline rank
// count, by rank count at the headline size; each series gets a table and a plot (time and
// bytes on the wire, log-log). --expect names benchmarks that should be present; with
// --require a missing one makes the exit status 3 (after everything is written).

#include <nlohmann/json.hpp>
#include <sys/utsname.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "hyper/trace/palette.h"
#include "hyper/trace/plot.h"
#include "tools/cli/args.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// ------------------------------------------------------------------ data

struct RowRec {
  std::string bench, id, name, baseline, file;
  double ours_s = 0, base_s = 0, ratio = 0, target = 0;
  bool meets = true;
  int64_t bytes_ours = 0, bytes_base = 0, bytes_lower = 0;
  int ranks = 0;
  double mib = 0;
  std::vector<std::pair<std::string, double>> extra;
};

struct RunRec {
  std::string bench, setup, file, libtorch, load_start, load_end, time_utc;
  int ranks = 0, reps = 0;
  double mib = 0;
  std::vector<RowRec> rows;
  json raw;
};

double num(const json& j, const char* key, double def = 0) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : def;
}
std::string str(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

/// Parses one result file; false (with `why`) when it is not a benchmark result.
bool load_run(const fs::path& path, RunRec* run, std::string* why) {
  std::ifstream f(path);
  json j = json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return *why = "not valid JSON", false;
  if (!j.is_object() || !j.contains("rows") || !j["rows"].is_array() ||
      str(j, "benchmark").empty()) {
    return *why = "no \"benchmark\" and \"rows\" (not a result file)", false;
  }
  run->bench = str(j, "benchmark");
  run->setup = str(j, "setup");
  run->file = path.filename().string();
  run->libtorch = str(j, "libtorch");
  run->load_start = str(j, "loadavg_start");
  run->load_end = str(j, "loadavg_end");
  run->time_utc = str(j, "time_utc");
  run->ranks = static_cast<int>(num(j, "ranks"));
  run->mib = num(j, "mib");
  run->reps = static_cast<int>(num(j, "reps"));
  for (const auto& r : j["rows"]) {
    if (!r.is_object()) continue;
    RowRec row;
    row.bench = run->bench;
    row.file = run->file;
    row.name = str(r, "name");
    row.id = str(r, "id");
    if (row.id.empty()) row.id = row.name;
    row.baseline = str(r, "baseline");
    row.ours_s = num(r, "ours_s");
    row.base_s = num(r, "baseline_s");
    row.ratio = num(r, "ratio", row.base_s > 0 ? row.ours_s / row.base_s : 0);
    row.target = num(r, "target");
    row.meets = r.contains("meets_target") && r["meets_target"].is_boolean()
                    ? r["meets_target"].get<bool>()
                    : (row.target <= 0 || row.ratio <= row.target);
    row.bytes_ours = static_cast<int64_t>(num(r, "bytes_ours"));
    row.bytes_base = static_cast<int64_t>(num(r, "bytes_baseline"));
    row.bytes_lower = static_cast<int64_t>(num(r, "bytes_lower_bound"));
    row.ranks = static_cast<int>(num(r, "ranks"));
    if (row.ranks <= 0) row.ranks = run->ranks;
    row.mib = num(r, "mib");
    if (row.mib <= 0) row.mib = run->mib;
    if (r.contains("extra") && r["extra"].is_object()) {
      for (const auto& [k, v] : r["extra"].items()) {
        if (v.is_number()) row.extra.emplace_back(k, v.get<double>());
      }
    }
    run->rows.push_back(std::move(row));
  }
  run->raw = std::move(j);
  return true;
}

// ------------------------------------------------------------------ formatting

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string fmt_time(double s) {
  if (s <= 0) return "-";
  if (s >= 1) return fmt("%.2f s", s);
  if (s >= 1e-3) return fmt(s >= 0.1 ? "%.0f ms" : s >= 0.01 ? "%.1f ms" : "%.2f ms", s * 1e3);
  const double us = s * 1e6;
  return fmt(us >= 100 ? "%.0f us" : us >= 10 ? "%.1f us" : "%.2f us", us);
}

std::string fmt_bytes(double b) {
  if (b <= 0) return "-";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  return u == 0 ? fmt("%.0f B", b) : fmt(b >= 100 ? "%.0f " : b >= 10 ? "%.1f " : "%.2f ", b) + units[u];
}

std::string fmt_num(double v) { return fmt("%g", v); }

std::string fmt_ratio(double r) { return r <= 0 ? "-" : fmt(r < 0.095 ? "%.3f" : "%.2f", r); }

std::string target_text(const RowRec& r) { return r.target > 0 ? "<= " + fmt("%.3g", r.target) : "report"; }

std::string result_text(const RowRec& r) {
  if (r.target <= 0) return "";
  return r.meets ? "pass" : "**miss**";
}

std::string notes_text(const RowRec& r) {
  std::string s;
  for (const auto& [k, v] : r.extra) s += (s.empty() ? "" : ", ") + k + "=" + fmt("%g", v);
  return s;
}

/// Markdown cell: `|` escaped.
std::string cell(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '|') o += "\\|";
    else o += c;
  }
  return o;
}

std::string slug(const std::string& s) {
  std::string o;
  for (char c : s) o += std::isalnum(static_cast<unsigned char>(c)) ? static_cast<char>(std::tolower(c)) : '_';
  return o;
}

// ------------------------------------------------------------------ machine

struct Machine {
  std::string cpu, kernel, libtorch, date;
  int cores = 0;
  double mem_gib = 0;
  std::string load;  // range of the 1-minute load average over the runs
};

Machine probe_machine(const std::vector<RunRec>& runs) {
  Machine m;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("processor", 0) == 0) ++m.cores;
    if (m.cpu.empty() && line.rfind("model name", 0) == 0) {
      m.cpu = line.substr(line.find(':') + 1);
      m.cpu.erase(0, m.cpu.find_first_not_of(' '));
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemTotal:", 0) == 0) m.mem_gib = std::atof(line.c_str() + 9) / (1024.0 * 1024.0);
  }
  utsname u{};
  if (uname(&u) == 0) m.kernel = std::string(u.sysname) + " " + u.release + " " + u.machine;
  std::set<std::string> torch;
  double lo = 1e30, hi = -1;
  std::string first, last;
  for (const auto& r : runs) {
    if (!r.libtorch.empty()) torch.insert(r.libtorch);
    if (!r.load_start.empty()) {
      const double v = std::atof(r.load_start.c_str());
      lo = std::min(lo, v), hi = std::max(hi, v);
    }
    if (!r.time_utc.empty()) {
      if (first.empty() || r.time_utc < first) first = r.time_utc;
      if (last.empty() || r.time_utc > last) last = r.time_utc;
    }
  }
  for (const auto& t : torch) m.libtorch += (m.libtorch.empty() ? "" : ", ") + t;
  if (m.libtorch.empty()) m.libtorch = "unknown";
  if (hi >= 0) m.load = fmt("%.2f", lo) + " - " + fmt("%.2f", hi);
  m.date = first.empty() ? "unknown" : (first == last ? first : first + " to " + last);
  return m;
}

// ------------------------------------------------------------------ plots

struct Point {
  double x;
  const RowRec* row;
};

/// `s` cut to `n` characters (UTF-8 unaware: our names are ASCII) with "..." when longer.
std::string shorten(const std::string& s, size_t n) {
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

/// Time | bytes on the wire, two log-log panels over the measured x values; points without a
/// value (0: not measured) are left out, and so are series and panels left empty. nullopt
/// when nothing is left.
std::optional<hyper::trace::Figure> plot_series(const std::string& title,
                                                const std::string& x_label,
                                                const std::vector<Point>& pts) {
  namespace tr = hyper::trace;
  namespace pal = hyper::trace::palette;
  const RowRec& first = *pts.front().row;
  tr::Axis x{x_label, tr::AxisScale::kLog, tr::AxisUnit::kNumber, {}};
  for (const auto& p : pts) x.ticks.push_back(p.x);
  auto series = [&](std::string label, tr::Rgb color, bool dashed, auto value) {
    tr::Series s{std::move(label), {}, color, dashed};
    for (const auto& p : pts) {
      const double v = value(*p.row);
      if (v > 0) s.points.emplace_back(p.x, v);
    }
    return s;
  };
  tr::Panel time{"Time (slowest rank, median)", x,
                 {"time per call", tr::AxisScale::kLog, tr::AxisUnit::kSeconds, {}},
                 {series("ours: " + shorten(first.name, 44), pal::kBlue, false,
                         [](const RowRec& r) { return r.ours_s; }),
                  series("baseline: " + shorten(first.baseline, 40), pal::kOrange, false,
                         [](const RowRec& r) { return r.base_s; })}};
  tr::Panel bytes{"Bytes on the wire (all ranks)", x,
                  {"bytes", tr::AxisScale::kLog, tr::AxisUnit::kBytes, {}},
                  {series("ours", pal::kBlue, false,
                          [](const RowRec& r) { return static_cast<double>(r.bytes_ours); }),
                   series("baseline", pal::kOrange, false,
                          [](const RowRec& r) { return static_cast<double>(r.bytes_base); }),
                   series("lower bound", pal::kGrey, true,
                          [](const RowRec& r) { return static_cast<double>(r.bytes_lower); })}};
  tr::Figure fig;
  fig.title = title;
  fig.width = 1300;
  fig.height = 500;
  for (tr::Panel* panel : {&time, &bytes}) {
    auto& ss = panel->series;
    ss.erase(std::remove_if(ss.begin(), ss.end(), [](const tr::Series& s) { return s.points.empty(); }),
             ss.end());
    if (!ss.empty()) fig.panels.push_back(std::move(*panel));
  }
  if (fig.panels.empty()) return std::nullopt;
  return fig;
}

// ------------------------------------------------------------------ report

struct Options {
  std::vector<fs::path> results;
  fs::path md, plots, json_out, readme;
  std::vector<std::string> expect;
  bool require = false;
  int head_ranks = 4;
  double head_mib = 64;
  std::string command = "bash scripts/bench.sh";
  double duration_s = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "bench_report: %s\nusage: bench_report --results DIR [--results DIR...] --md FILE "
               "--plots DIR --json FILE [--readme FILE] [--expect a,b] [--require] "
               "[--headline-ranks N] [--headline-mib M] [--command TEXT] [--duration-s S]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  hyper::cli::ArgParser p({"unknown argument '{arg}'", "missing value after {arg}"});
  p.option({"--results"}, [&](const std::string& v) { o.results.emplace_back(v); });
  p.option({"--md"}, [&](const std::string& v) { o.md = v; });
  p.option({"--plots"}, [&](const std::string& v) { o.plots = v; });
  p.option({"--json"}, [&](const std::string& v) { o.json_out = v; });
  p.option({"--readme"}, [&](const std::string& v) { o.readme = v; });
  p.flag({"--require"}, [&] { o.require = true; });
  p.option({"--expect"}, [&](const std::string& v) {
    std::stringstream ss(v);
    for (std::string t; std::getline(ss, t, ',');) {
      if (!t.empty()) o.expect.push_back(t);
    }
  });
  p.option({"--headline-ranks"},
           [&](const std::string& v) { o.head_ranks = std::atoi(v.c_str()); });
  p.option({"--headline-mib"}, [&](const std::string& v) { o.head_mib = std::atof(v.c_str()); });
  p.option({"--command"}, [&](const std::string& v) { o.command = v; });
  p.option({"--duration-s"}, [&](const std::string& v) { o.duration_s = std::atof(v.c_str()); });
  try {
    p.parse(argc, argv);
  } catch (const hyper::cli::UsageError& e) {
    usage(e.what());
  }
  if (o.results.empty() || o.md.empty() || o.plots.empty() || o.json_out.empty()) {
    usage("--results, --md, --plots and --json are required");
  }
  return o;
}

std::string rel_link(const fs::path& target, const fs::path& from_dir) {
  return fs::relative(fs::absolute(target), fs::absolute(from_dir)).generic_string();
}

std::string main_table(const std::vector<const RowRec*>& rows) {
  std::string s =
      "| ours | baseline | ours time | baseline time | ratio | target | result | bytes ours | "
      "bytes baseline | lower bound | series | notes |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto* r : rows) {
    s += "| " + cell(r->name) + " | " + cell(r->baseline) + " | " + fmt_time(r->ours_s) + " | " +
         fmt_time(r->base_s) + " | " + fmt_ratio(r->ratio) + " | " + target_text(*r) + " | " +
         result_text(*r) + " | " + fmt_bytes(static_cast<double>(r->bytes_ours)) + " | " +
         fmt_bytes(static_cast<double>(r->bytes_base)) + " | " +
         fmt_bytes(static_cast<double>(r->bytes_lower)) + " | `" + cell(r->id) + "` | " +
         cell(notes_text(*r)) + " |\n";
  }
  return s;
}

std::string machine_line(const Machine& m) {
  return m.cpu + ", " + std::to_string(m.cores) + " cores, " + fmt("%.0f", m.mem_gib) +
         " GiB memory, " + m.kernel + ", LibTorch " + m.libtorch + ", Gloo on loopback";
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);

  // Load every result file.
  std::vector<RunRec> runs;
  std::vector<fs::path> figures;
  for (const auto& dir : opt.results) {
    if (!fs::is_directory(dir)) {
      std::fprintf(stderr, "bench_report: results dir '%s' does not exist\n", dir.c_str());
      continue;
    }
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      if (p.extension() == ".png") figures.push_back(p);
      if (p.extension() != ".json") continue;
      RunRec run;
      std::string why;
      if (load_run(p, &run, &why)) runs.push_back(std::move(run));
      else std::printf("bench_report: skipped %s: %s\n", p.c_str(), why.c_str());
    }
  }

  // Benchmarks in a fixed order: the expected ones first, then any other by name.
  std::vector<std::string> benches = opt.expect;
  {
    std::set<std::string> seen(benches.begin(), benches.end()), rest;
    for (const auto& r : runs) {
      if (!seen.count(r.bench)) rest.insert(r.bench);
    }
    benches.insert(benches.end(), rest.begin(), rest.end());
  }
  std::vector<std::string> missing;
  for (const auto& b : opt.expect) {
    if (std::none_of(runs.begin(), runs.end(), [&](const RunRec& r) { return r.bench == b; })) {
      missing.push_back(b);
    }
  }

  fs::create_directories(opt.plots);
  if (opt.md.has_parent_path()) fs::create_directories(opt.md.parent_path());
  const fs::path md_dir = opt.md.has_parent_path() ? opt.md.parent_path() : fs::path(".");
  const Machine machine = probe_machine(runs);

  std::string md;
  md += "# Benchmarks\n\n";
  md += "Generated by `" + opt.command + "` (program `bench_report`, source `bench/bench_report.cc`"
        "); do not edit by hand, rerun the command. Every row is ours vs a baseline timed side by "
        "side in the same run: the two alternate, each time is the slowest rank's, the figure is "
        "the median over the repetitions. Ratio = ours / baseline; targets are the issue's. Bytes "
        "are payload bytes on the wire summed over all ranks (ours from hyper's `comm::stats` "
        "counters or the redistribution plan, baselines from their algorithm); the lower bound is "
        "what any algorithm must move for the result (for redistributions: the target elements a "
        "rank needs and does not hold). The machine is shared and noisy: compare ratios, not "
        "absolute times.\n\n";
  md += "## Machine\n\n| | |\n|---|---|\n";
  md += "| CPU | " + cell(machine.cpu) + " |\n| cores | " + std::to_string(machine.cores) + " |\n";
  md += "| memory | " + fmt("%.1f", machine.mem_gib) + " GiB |\n| kernel | " + machine.kernel + " |\n";
  md += "| LibTorch | " + machine.libtorch + " (Gloo on loopback, CPU tensors) |\n";
  md += "| measured | " + machine.date + " |\n";
  if (!machine.load.empty()) {
    md += "| 1-min load average as each run started | " + machine.load +
          " (the previous run's ranks count too; well above the core count means other work "
          "shared the machine) |\n";
  }
  if (opt.duration_s > 0) md += "| suite duration | " + fmt("%.0f", opt.duration_s) + " s |\n";
  md += "\n";

  // Summary: the headline rows of every benchmark.
  std::string summary_md =
      "| benchmark | ours | baseline | ratio | target | result | bytes ours / baseline / lower "
      "bound |\n|---|---|---|---|---|---|---|\n";
  std::string summary_txt;
  std::string body;
  json combined_runs = json::array();
  int misses = 0, passes = 0;
  std::map<std::string, const RunRec*> headline_of;

  for (const auto& b : benches) {
    std::vector<const RunRec*> rs;
    for (const auto& r : runs) {
      if (r.bench == b) rs.push_back(&r);
    }
    body += "## " + b + "\n\n";
    if (rs.empty()) {
      body += "**Missing**: no result file of `" + b + "` (program not built or not run).\n\n";
      continue;
    }
    // Headline run: exact (ranks, mib), else nearest (ranks first, then log size).
    const RunRec* head = *std::min_element(rs.begin(), rs.end(), [&](const RunRec* x, const RunRec* y) {
      auto key = [&](const RunRec* r) {
        const double dm = r->mib > 0 && opt.head_mib > 0 ? std::fabs(std::log(r->mib / opt.head_mib)) : 0;
        return std::make_tuple(std::abs(r->ranks - opt.head_ranks), dm, -static_cast<double>(r->rows.size()));
      };
      return key(x) < key(y);
    });
    headline_of[b] = head;
    // A benchmark without a size parameter (mib 0 everywhere, e.g. tp_bench) shows the rows
    // of every run (one per rank count) instead of one headline run.
    const bool sizeless = std::all_of(rs.begin(), rs.end(), [](const RunRec* r) { return r->mib <= 0; });
    std::vector<const RowRec*> hrows;
    if (sizeless) {
      std::vector<const RunRec*> by_ranks = rs;
      std::stable_sort(by_ranks.begin(), by_ranks.end(),
                       [](const RunRec* x, const RunRec* y) { return x->ranks < y->ranks; });
      for (const auto* run : by_ranks) {
        body += "Setup (" + std::to_string(run->ranks) + " ranks): " + cell(run->setup) + " (`" +
                run->file + "`).\n\n";
        for (const auto& r : run->rows) hrows.push_back(&r);
      }
    } else {
      body += "Setup: " + cell(head->setup) + " (`" + head->file + "`).\n\n";
      for (const auto& r : head->rows) hrows.push_back(&r);
    }
    body += main_table(hrows) + "\n";
    for (const auto* r : hrows) {
      if (r->target > 0) (r->meets ? passes : misses)++;
      summary_md += "| " + b + " | " + cell(r->name) + " | " + cell(r->baseline) + " | " +
                    fmt_ratio(r->ratio) + " | " + target_text(*r) + " | " + result_text(*r) + " | " +
                    fmt_bytes(static_cast<double>(r->bytes_ours)) + " / " +
                    fmt_bytes(static_cast<double>(r->bytes_base)) + " / " +
                    fmt_bytes(static_cast<double>(r->bytes_lower)) + " |\n";
      char line[512];
      std::snprintf(line, sizeof line, "%-18s %-52.52s %10s %10s %7s %8s %s\n", b.c_str(),
                    r->name.c_str(), fmt_time(r->ours_s).c_str(), fmt_time(r->base_s).c_str(),
                    fmt_ratio(r->ratio).c_str(), target_text(*r).c_str(),
                    r->target > 0 ? (r->meets ? "pass" : "MISS") : "");
      summary_txt += line;
    }

    // Scaling series: ids in headline order, then any others.
    std::vector<std::string> ids;
    for (const auto* r : hrows) {
      if (std::find(ids.begin(), ids.end(), r->id) == ids.end()) ids.push_back(r->id);
    }
    for (const auto* run : rs) {
      for (const auto& r : run->rows) {
        if (std::find(ids.begin(), ids.end(), r.id) == ids.end()) ids.push_back(r.id);
      }
    }
    struct Sweep {
      const char* title;
      const char* x_label;
      const char* tag;
    };
    for (const Sweep sw : {Sweep{"tensor size", "tensor size (MiB)", "size"},
                           Sweep{"rank count", "ranks", "ranks"}}) {
      const bool by_size = std::string(sw.tag) == "size";
      std::string table, plots_md;
      int series_count = 0;
      for (const auto& id : ids) {
        std::vector<Point> pts;
        for (const auto* run : rs) {
          for (const auto& r : run->rows) {
            if (r.id != id) continue;
            if (by_size && r.ranks == head->ranks && r.mib > 0) pts.push_back({r.mib, &r});
            if (!by_size && r.mib == head->mib && r.ranks > 0) pts.push_back({static_cast<double>(r.ranks), &r});
          }
        }
        std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b2) { return a.x < b2.x; });
        pts.erase(std::unique(pts.begin(), pts.end(), [](const Point& a, const Point& b2) { return a.x == b2.x; }),
                  pts.end());
        if (pts.size() < 2) continue;
        ++series_count;
        const std::string label = "`" + id + "`";
        for (const auto& p : pts) {
          table += "| " + cell(label) + " | " + fmt_num(p.x) + " | " + fmt_time(p.row->ours_s) + " | " +
                   fmt_time(p.row->base_s) + " | " + fmt_ratio(p.row->ratio) + " | " +
                   fmt_bytes(static_cast<double>(p.row->bytes_ours)) + " | " +
                   fmt_bytes(static_cast<double>(p.row->bytes_base)) + " | " +
                   fmt_bytes(static_cast<double>(p.row->bytes_lower)) + " |\n";
        }
        const bool has_bytes = std::any_of(pts.begin(), pts.end(), [](const Point& p) {
          return p.row->bytes_ours > 0 || p.row->bytes_base > 0;
        });
        if (!has_bytes && pts.front().row->ours_s < 1e-4) continue;  // e.g. plan lookups: table only
        const std::string png = slug(b) + "__" + slug(id) + "__" + sw.tag + ".png";
        const std::string title = b + ": " + id + (by_size ? " by size at " + std::to_string(head->ranks) + " ranks"
                                                         : " by ranks" + (head->mib > 0 ? " at " + fmt_num(head->mib) + " MiB" : ""));
        const auto figure = plot_series(title, sw.x_label, pts);
        if (!figure) continue;
        hyper::trace::write_figure((opt.plots / png).string(), *figure);
        plots_md += "![" + id + " by " + sw.title + "](" + rel_link(opt.plots / png, md_dir) + ")\n";
      }
      if (series_count == 0) continue;
      body += std::string("### ") + b + ": scaling with " + sw.title + " (" +
              (by_size ? std::to_string(head->ranks) + " ranks"
                       : head->mib > 0 ? fmt_num(head->mib) + " MiB" : "fixed problem size") + ")\n\n";
      body += std::string("| comparison | ") + (by_size ? "MiB" : "ranks") +
              " | ours | baseline | ratio | bytes ours | bytes baseline | lower bound |\n"
              "|---|---|---|---|---|---|---|---|\n" + table + "\n" + plots_md + "\n";
    }
    for (const auto* run : rs) {
      json j = run->raw;
      j["file"] = run->file;
      combined_runs.push_back(std::move(j));
    }
  }

  // Figures written by the benchmark programs themselves (e.g. the TP step timeline).
  if (!figures.empty()) {
    body += "## Figures from the benchmark programs\n\n";
    for (const auto& f : figures) {
      const fs::path to = opt.plots / f.filename();
      if (fs::absolute(f) != fs::absolute(to)) fs::copy_file(f, to, fs::copy_options::overwrite_existing);
      body += "![" + f.filename().string() + "](" + rel_link(to, md_dir) + ")\n";
    }
    body += "\n";
  }
  if (!missing.empty()) {
    body += "## Missing\n\n";
    for (const auto& m : missing) body += "- `" + m + "`: no result file (program not built or not run)\n";
    body += "\n";
  }

  md += "## Summary (headline runs: " + std::to_string(opt.head_ranks) + " ranks, " + fmt_num(opt.head_mib) +
        " MiB, or the nearest)\n\n" + summary_md + "\n" + std::to_string(passes) + " targets met, " +
        std::to_string(misses) + " missed" +
        (missing.empty() ? "" : "; missing benchmarks: " + [&] {
          std::string s;
          for (const auto& m : missing) s += (s.empty() ? "" : ", ") + m;
          return s;
        }()) + ".\n\n";
  md += body;
  {
    std::ofstream f(opt.md, std::ios::trunc);
    f << md;
    if (!f) throw std::runtime_error("bench_report: cannot write '" + opt.md.string() + "'");
  }

  json combined = {{"generated_utc", [] {
                      const std::time_t t = std::time(nullptr);
                      std::tm tm{};
                      gmtime_r(&t, &tm);
                      char buf[32];
                      std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
                      return std::string(buf);
                    }()},
                   {"command", opt.command},
                   {"duration_s", opt.duration_s},
                   {"machine", {{"cpu", machine.cpu}, {"cores", machine.cores},
                                {"memory_gib", machine.mem_gib}, {"kernel", machine.kernel},
                                {"libtorch", machine.libtorch}, {"measured", machine.date},
                                {"loadavg_range", machine.load}}},
                   {"headline", {{"ranks", opt.head_ranks}, {"mib", opt.head_mib}}},
                   {"targets_met", passes},
                   {"targets_missed", misses},
                   {"missing", missing},
                   {"runs", combined_runs}};
  if (opt.json_out.has_parent_path()) fs::create_directories(opt.json_out.parent_path());
  {
    std::ofstream f(opt.json_out, std::ios::trunc);
    f << combined.dump(1) << "\n";
  }

  // README: replace the text between the markers with the summary.
  if (!opt.readme.empty()) {
    const std::string begin = "<!-- bench-summary:begin -->", end = "<!-- bench-summary:end -->";
    std::ifstream in(opt.readme);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string text = ss.str();
    const size_t a = text.find(begin), z = text.find(end);
    if (a == std::string::npos || z == std::string::npos || z < a) {
      std::fprintf(stderr, "bench_report: %s lacks the markers %s ... %s; README not updated\n",
                   opt.readme.c_str(), begin.c_str(), end.c_str());
      return 2;
    }
    const std::string block =
        begin + "\nMeasured " + machine.date + " on " + machine_line(machine) +
        (machine.load.empty() ? "" : " (1-min load " + machine.load + ")") +
        "; headline runs at " + std::to_string(opt.head_ranks) + " ranks and " +
        fmt_num(opt.head_mib) + " MiB of float32. Scaling tables and plots: "
        "[docs/benchmarks.md](docs/benchmarks.md).\n\n" + summary_md + "\n";
    text = text.substr(0, a) + block + text.substr(z);
    std::ofstream out(opt.readme, std::ios::trunc);
    out << text;
  }

  std::printf("\nbenchmark summary (%d runs; headline %d ranks, %s MiB or nearest)\n", static_cast<int>(runs.size()),
              opt.head_ranks, fmt_num(opt.head_mib).c_str());
  std::printf("%-18s %-52s %10s %10s %7s %8s\n", "benchmark", "ours", "ours", "baseline", "ratio", "target");
  std::printf("%s", summary_txt.c_str());
  std::printf("%d targets met, %d missed\n", passes, misses);
  std::printf("machine: %s\n", machine_line(machine).c_str());
  std::printf("wrote %s, %s, plots in %s\n", opt.md.c_str(), opt.json_out.c_str(), opt.plots.c_str());
  if (!missing.empty()) {
    std::string s;
    for (const auto& m : missing) s += (s.empty() ? "" : ", ") + m;
    std::printf("MISSING benchmark results: %s (not built or not run)\n", s.c_str());
    if (opt.require) {
      std::fprintf(stderr, "bench_report: required benchmarks missing: %s\n", s.c_str());
      return 3;
    }
  }
  return 0;
}
