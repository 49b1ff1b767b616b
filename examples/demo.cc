// demo: the end-to-end story of hyper on local ranks (scripts/demo.sh runs it; docs/demo.md
// walks through its output).
//
//   hyperrun -n 4 -- demo --phase train-save --dir CKPT --out OUT
//   hyperrun -n 2 -- demo --phase load       --dir CKPT --out OUT
//
// Phase train-save (any world size; 4 in the demo):
//   1. a [rows, cols] float32 parameter distributed as RaggedShard((0,1), units): each rank's
//      flat interval and the N-D boxes it decomposes into, checked against the global tensor;
//   2. redistributions between ragged, Shard and Replicate layouts, each checked against
//      slicing the known global tensor, with the bytes on the wire (comm byte counters,
//      summed over ranks) next to the plan's lower bound;
//   3. tensor-parallel (sequence-parallel) training steps of a transformer block with async
//      redistributes, the loss beside the single-device loss, the overlap fraction, and one
//      step's timeline as a Chrome trace and a PNG;
//   3b. the same block built from plain torch::nn modules, parallelized with the plain TP plan
//      (parameters and activations are DTensor tensors), trained with torch::optim::AdamW
//      beside the single-device block: losses and parameters compared;
//   4. an async checkpoint save of mixed layouts while the next training step runs.
// Phase load (any world size; 2 in the demo):
//   5. the checkpoint loaded into other layouts on another world size, every value checked
//      against tensors recomputed from their formulas (or, for the trained block, against a
//      reference written by phase 1 with plain file I/O), bytes read vs needed; the loaded
//      block's evaluation loss vs the one measured before the save;
//   6. a summary table of both phases (phase 1 leaves its rows in OUT/summary.tsv).
// Exit status 1 on any mismatch (every rank), 2 on bad usage.

#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "examples/common/transformer_block.h"
#include "hyper/hyper.h"
#include "hyper/trace/chrome_trace.h"
#include "hyper/trace/step_picture.h"
#include "hyper/trace/timeline.h"
#include "tools/cli/args.h"

namespace fs = std::filesystem;
namespace ex = hyper::examples;
using Clock = std::chrono::steady_clock;
using hyper::join_ints;
using hyper::shape_to_string;

namespace {

// ------------------------------------------------------------------------------------------
// Options

struct Options {
  std::string phase;
  std::string dir;
  std::string out;
  int64_t rows = 1000;
  int64_t cols = 1000;
  std::vector<int64_t> units;       // phase 1 RaggedShard units (default: 1,2,3,10 on 4 ranks)
  std::vector<int64_t> units2;      // phase 1 "other" units (default: reversed)
  std::vector<int64_t> load_units;  // phase 2 RaggedShard units (default: 3,5 on 2 ranks)
  int64_t steps = 5;
  int64_t hidden = 128;
  int64_t ffn = 512;
  int64_t batch = 4;
  int64_t seq = 64;
  int64_t seed = 1;
};

int usage(const std::string& why) {
  if (!why.empty()) std::cerr << "demo: " << why << "\n";
  std::cerr << "usage: demo --phase train-save|load --dir CKPT --out OUT [--rows N] [--cols N]\n"
               "            [--units a,b,..] [--units2 a,b,..] [--load-units a,b,..]\n"
               "            [--steps N] [--hidden N] [--ffn N] [--batch N] [--seq N] [--seed N]\n"
               "  run under hyperrun: train-save on 4 ranks, then load on 2 ranks\n";
  return 2;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stoll(item));
  if (out.empty()) throw std::invalid_argument("empty list '" + s + "'");
  return out;
}

// ------------------------------------------------------------------------------------------
// Printing (rank 0 only) and formatting

int g_rank = 0;

std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

void say(const std::string& line) {
  if (g_rank == 0) std::cout << line << "\n" << std::flush;
}

void heading(const std::string& title) {
  say("");
  say("== " + title);
}

/// A box as numpy-style slices: [0:62, 0:1000].
std::string box_str(const hyper::Box& b) {
  std::string s = "[";
  for (int64_t d = 0; d < b.rank(); ++d) {
    s += (d ? ", " : "") + std::to_string(b.offsets[d]) + ":" +
         std::to_string(b.offsets[d] + b.sizes[d]);
  }
  return s + "]";
}

std::string bytes_str(double b) {
  if (b < 1024.0) return fmt("%.0f B", b);
  if (b < 1024.0 * 1024.0) return fmt("%.1f KiB", b / 1024.0);
  return fmt("%.1f MiB", b / (1024.0 * 1024.0));
}

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// One row of the final summary table.
struct Row {
  std::string step, what, result;
};

// ------------------------------------------------------------------------------------------
// Collective helpers

/// Element-wise sum (or max) over the mesh of a few doubles (exact for byte counts).
std::vector<double> reduce(const hyper::DeviceMesh& mesh, const std::vector<double>& v,
                           hyper::comm::ReduceOp op = hyper::comm::ReduceOp::kSum) {
  at::Tensor t = at::tensor(at::ArrayRef<double>(v), at::kDouble);
  t = hyper::comm::all_reduce(t, op, mesh.get_group(0));
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

/// Number of ranks whose `ok` is false.
int64_t count_failures(const hyper::DeviceMesh& mesh, bool ok) {
  return static_cast<int64_t>(reduce(mesh, {ok ? 0.0 : 1.0})[0]);
}

// ------------------------------------------------------------------------------------------
// The known global tensors (recomputed identically by both phases)

/// The ragged parameter: 0, 1, 2, ... (exact in float32 below 2^24).
at::Tensor param_global(int64_t rows, int64_t cols) {
  return at::arange(rows * cols, at::kFloat).reshape({rows, cols});
}
/// An activation-like tensor saved as Shard(0) (uneven rows on 4 ranks).
at::Tensor act_global() { return at::sin(at::arange(517 * 96, at::kFloat) * 0.37 + 1.0).reshape({517, 96}); }
/// A small replicated table.
at::Tensor table_global() { return at::cos(at::arange(64 * 48, at::kFloat) * 0.11).reshape({64, 48}); }

/// What the rank at `index` must hold under `layout`: the row-major contents of its boxes,
/// cut from `global` with narrow (independent of redistribute and of the checkpoint).
at::Tensor expected_local(const at::Tensor& global, const hyper::Layout& layout, int64_t index) {
  std::vector<at::Tensor> parts;
  for (const auto& fb : layout.local_region(index)) {
    at::Tensor v = global;
    for (int64_t d = 0; d < fb.box.rank(); ++d) {
      v = v.narrow(d, fb.box.offsets[d], fb.box.sizes[d]);
    }
    parts.push_back(v.reshape({-1}));
  }
  if (parts.empty()) return at::empty({0}, global.options());
  return at::cat(parts);
}

/// True iff this rank's local storage of `dt` equals its part of `global`, bit for bit.
bool matches(const hyper::DTensor& dt, const at::Tensor& global) {
  if (dt.shape() != global.sizes().vec()) return false;
  at::Tensor local = dt.to_local().detach().reshape({-1});
  at::Tensor want = expected_local(global, dt.layout(), dt.mesh_index());
  return local.sizes() == want.sizes() && at::equal(local, want);
}

// ------------------------------------------------------------------------------------------
// Training helpers

void sgd_step(torch::nn::Module& m, double lr) {
  at::NoGradGuard no_grad;
  for (auto& p : m.parameters()) {
    if (!p.grad().defined()) continue;
    p.sub_(p.grad() * lr);
    p.grad().zero_();
  }
}

constexpr double kLearningRate = 0.05;

/// Serialises this rank's timeline events (times made absolute on the steady clock, which
/// every process of this machine shares) and gathers them on every rank.
std::vector<hyper::trace::TimelineEvent> gather_events(const hyper::trace::Timeline& tl,
                                                    const hyper::DeviceMesh& mesh) {
  const double origin_us =
      std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count() -
      tl.now_us();
  std::ostringstream os;
  os.precision(17);
  for (const auto& e : tl.events()) {
    std::string name = e.name, stream = e.stream;
    std::replace(name.begin(), name.end(), '\t', ' ');
    std::replace(name.begin(), name.end(), '\n', ' ');
    os << e.rank << '\t' << static_cast<int>(e.kind) << '\t' << e.start_us + origin_us << '\t'
       << e.end_us + origin_us << '\t' << e.thread << '\t' << stream << '\t' << name << '\n';
  }
  const std::string text = os.str();
  at::Tensor mine = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
  std::memcpy(mine.data_ptr<uint8_t>(), text.data(), text.size());
  at::Tensor all = hyper::comm::all_gather_v(mine, mesh.get_group(0));
  const std::string joined(reinterpret_cast<const char*>(all.data_ptr<uint8_t>()),
                           static_cast<size_t>(all.numel()));
  std::vector<hyper::trace::TimelineEvent> events;
  std::istringstream is(joined);
  std::string line;
  double t0 = 1e300;
  while (std::getline(is, line)) {
    std::istringstream ls(line);
    std::string f[7];
    for (int i = 0; i < 6; ++i) std::getline(ls, f[i], '\t');
    std::getline(ls, f[6]);
    hyper::trace::TimelineEvent e;
    e.rank = std::stoi(f[0]);
    e.kind = static_cast<hyper::trace::RegionKind>(std::stoi(f[1]));
    e.start_us = std::stod(f[2]);
    e.end_us = std::stod(f[3]);
    e.thread = std::stoi(f[4]);
    e.stream = f[5];
    e.name = f[6];
    t0 = std::min(t0, e.start_us);
    events.push_back(std::move(e));
  }
  for (auto& e : events) {
    e.start_us -= t0;
    e.end_us -= t0;
  }
  return events;
}

void write_file(const fs::path& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

// Reference of the trained block at save time: OUT/reference/index.tsv lists
// "name<TAB>dims" and OUT/reference/<name>.f32 holds the raw float32 values, written by
// rank 0 with plain file I/O so that phase 2's check does not go through the checkpoint.
void write_reference(const fs::path& dir, const std::string& name, const at::Tensor& full,
                     std::ofstream& index) {
  at::Tensor c = full.detach().to(at::kFloat).contiguous();
  write_file(dir / (name + ".f32"), c.data_ptr<float>(), static_cast<size_t>(c.numel()) * 4);
  index << name << '\t' << join_ints(c.sizes().vec()) << '\n';
}

std::map<std::string, at::Tensor> read_reference(const fs::path& dir) {
  std::map<std::string, at::Tensor> out;
  std::ifstream index(dir / "index.tsv");
  if (!index) throw std::runtime_error("no reference at " + (dir / "index.tsv").string() +
                                       " (run phase train-save first)");
  std::string line;
  while (std::getline(index, line)) {
    const auto tab = line.find('\t');
    const std::string name = line.substr(0, tab);
    at::Tensor t = at::empty(parse_list(line.substr(tab + 1)), at::kFloat);
    std::ifstream f(dir / (name + ".f32"), std::ios::binary);
    f.read(reinterpret_cast<char*>(t.data_ptr<float>()), t.numel() * 4);
    if (!f) throw std::runtime_error("short reference file for " + name);
    out[name] = t;
  }
  return out;
}

int64_t dir_bytes(const fs::path& dir) {
  int64_t total = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += static_cast<int64_t>(e.file_size());
  }
  return total;
}

ex::TransformerConfig block_config(int64_t hidden, int64_t ffn) {
  ex::TransformerConfig cfg;
  cfg.hidden = hidden;
  cfg.head_dim = 16;
  cfg.n_heads = hidden / 16;
  cfg.ffn = ffn;
  return cfg;
}

/// The evaluation loss of a sequence-parallel block on a fixed batch (no gradients).
double eval_loss(ex::TransformerBlock& blk, const ex::TransformerConfig& cfg,
                 const hyper::DeviceMesh& mesh, const Options& o) {
  at::NoGradGuard no_grad;
  const ex::Batch b = ex::make_batch(cfg, o.batch, o.seq, /*seed=*/1000);
  at::Tensor y = blk->forward(ex::shard_sequence(b.x, mesh));
  return ex::sum_over_mesh(
      ex::sp_mse_loss(y, ex::shard_sequence(b.target, mesh), b.target.numel()), mesh);
}

void write_summary(const fs::path& path, const std::vector<Row>& rows, bool append) {
  std::ofstream f(path, append ? std::ios::app : std::ios::trunc);
  for (const auto& r : rows) f << r.step << '\t' << r.what << '\t' << r.result << '\n';
}

// ------------------------------------------------------------------------------------------
// Phase 1: train-save

int phase_train_save(const Options& o) {
  hyper::World world = hyper::init_process_group();
  const int n = world.size();
  g_rank = world.rank();
  hyper::DeviceMesh mesh = hyper::init_device_mesh(world, "cpu", {n});
  const int64_t me = mesh.get_local_rank(0);
  const fs::path out(o.out);
  if (g_rank == 0) fs::create_directories(out);

  std::vector<int64_t> units = o.units;
  if (units.empty()) {
    if (n == 4) {
      units = {1, 2, 3, 10};
    } else {
      for (int i = 0; i < n; ++i) units.push_back(i + 1);
    }
  }
  std::vector<int64_t> units2 = o.units2.empty()
                                    ? std::vector<int64_t>(units.rbegin(), units.rend())
                                    : o.units2;
  if (static_cast<int>(units.size()) != n || static_cast<int>(units2.size()) != n) {
    throw std::invalid_argument("--units/--units2 need one entry per rank (" + std::to_string(n) +
                                ")");
  }
  std::vector<Row> summary;
  int64_t failures = 0;
  const auto t_phase = Clock::now();

  say(fmt("hyper demo, phase 1 (train-save) on %d ranks (processes, Gloo over loopback)", n));

  // ---- 1. A RaggedShard parameter -------------------------------------------------------
  const hyper::Placement rs = hyper::RaggedShard({0, 1}, units);
  const hyper::Placement rs2 = hyper::RaggedShard({0, 1}, units2);
  const at::Tensor global = param_global(o.rows, o.cols);
  heading(fmt("1. A [%lld, %lld] float32 parameter (%s) as %s", (long long)o.rows,
              (long long)o.cols, bytes_str(global.numel() * 4.0).c_str(), rs.to_string().c_str()));
  hyper::DTensor param = hyper::distribute_tensor(global, mesh, {rs});
  {
    const hyper::Layout& L = param.layout();
    say(fmt("   %-4s %-5s %-22s %-9s %s", "rank", "units", "flat interval", "share",
            "boxes of the interval (row-major pieces: [rows, cols])"));
    for (int r = 0; r < n; ++r) {
      const hyper::Interval iv = L.ragged_interval(r);
      std::string boxes;
      for (const auto& fb : L.local_region(r)) boxes += (boxes.empty() ? "" : " + ") + box_str(fb.box);
      say(fmt("   %-4d %-5lld %-22s %5.1f%%   %s", r, (long long)units[r], iv.to_string().c_str(),
              100.0 * iv.size() / static_cast<double>(global.numel()),
              boxes.empty() ? "(empty)" : boxes.c_str()));
    }
    const hyper::Interval mine = L.ragged_interval(me);
    at::Tensor local = param.to_local();
    const bool ok = local.dim() == 1 && local.numel() == mine.size() &&
                    at::equal(local, global.reshape({-1}).narrow(0, mine.start, mine.size()));
    const int64_t bad = count_failures(mesh, ok);
    failures += bad;
    say(fmt("   every rank's local storage is 1-D and equals its interval of the global tensor: %s",
            bad ? "MISMATCH" : "ok"));
    summary.push_back({"1", "ragged parameter " + rs.to_string() + " on " + std::to_string(n) +
                                " ranks",
                       bad ? "MISMATCH" : fmt("ok (%zu boxes in all)", [&] {
                         size_t k = 0;
                         for (int r = 0; r < n; ++r) k += L.local_region(r).size();
                         return k;
                       }())});
  }

  // ---- 2. Redistributions ----------------------------------------------------------------
  heading("2. Redistributions, each checked against slicing the global tensor");
  say("   bytes on the wire: the comm layer's counters (bytes received), summed over ranks;");
  say("   lower bound: per rank, the target elements it does not already hold (the plan's);");
  say("   RS(u) is RaggedShard((0,1), u)");
  say(fmt("   %-44s %12s %12s %6s %8s  %s", "transition", "moved", "lower bound", "calls",
          "ms", "values"));
  int64_t redistribution_failures = 0;
  double moved_total = 0, bound_total = 0;
  auto measure = [&](const std::string& label, const hyper::DTensor& src,
                     const hyper::Placements& to) {
    (void)reduce(mesh, {0.0});  // line the ranks up so the timing is the redistribute's
    const hyper::comm::CommStats before = hyper::comm::stats(mesh);
    const auto t0 = Clock::now();
    hyper::DTensor dst = src.redistribute(mesh, to);
    const double ms = ms_since(t0);
    const hyper::comm::CommStats after = hyper::comm::stats(mesh);
    const auto plan = hyper::plan_redistribute(src.layout(), dst.layout());
    const bool ok = matches(dst, global);
    const auto sums = reduce(mesh, {static_cast<double>(after.bytes_received() - before.bytes_received()),
                                    static_cast<double>(after.calls() - before.calls()),
                                    ok ? 0.0 : 1.0});
    const double max_ms = reduce(mesh, {ms}, hyper::comm::ReduceOp::kMax)[0];
    const double bound = static_cast<double>(plan.total_lower_bound()) * 4.0;
    const double moved = sums[0];
    moved_total += moved;
    bound_total += bound;
    redistribution_failures += static_cast<int64_t>(sums[2]);
    const std::string moved_s = bytes_str(moved) + (moved == bound ? " =" : "  ");
    say(fmt("   %-44s %12s %12s %6.0f %8.1f  %s", label.c_str(), moved_s.c_str(),
            bytes_str(bound).c_str(), sums[1], max_ms, sums[2] > 0 ? "MISMATCH" : "ok"));
    return dst;
  };
  const std::string rs_s = "RS(" + join_ints(units) + ")", rs2_s = "RS(" + join_ints(units2) + ")";
  hyper::DTensor as_rs2 = measure(rs_s + " -> " + rs2_s + " (units change)", param, {rs2});
  hyper::DTensor as_s0 = measure(rs_s + " -> S(0)", param, {hyper::Shard(0)});
  hyper::DTensor as_s1 = measure("S(0) -> S(1)", as_s0, {hyper::Shard(1)});
  hyper::DTensor as_r = measure(rs_s + " -> R", param, {hyper::Replicate()});
  hyper::DTensor back = measure("R -> " + rs_s + " (local slice)", as_r, {rs});
  hyper::DTensor s1_rs2 = measure("S(1) -> " + rs2_s, as_s1, {rs2});
  say("   ('=': moved exactly the lower bound; no transition goes through Replicate unless its");
  say(fmt("    target is Replicate. The seed's route for a ragged change, a padded all-gather, "
          "moves %s here.)",
          bytes_str(static_cast<double>(n) * (n - 1) *
                    static_cast<double>(*std::max_element(units.begin(), units.end())) /
                    static_cast<double>(std::accumulate(units.begin(), units.end(), int64_t{0})) *
                    global.numel() * 4.0)
              .c_str()));
  failures += redistribution_failures;
  summary.push_back({"2", "6 redistributions ragged / S(0) / S(1) / R",
                     redistribution_failures ? "MISMATCH"
                                             : fmt("ok; %s moved, lower bound %s",
                                                   bytes_str(moved_total).c_str(),
                                                   bytes_str(bound_total).c_str())});
  as_rs2 = as_s0 = as_s1 = as_r = back = s1_rs2 = hyper::DTensor();

  // ---- 3. Tensor-parallel training --------------------------------------------------------
  const ex::TransformerConfig cfg = block_config(o.hidden, o.ffn);
  heading(fmt("3. Tensor-parallel training of a transformer block (%s) on %d ranks",
              cfg.to_string().c_str(), n));
  say(fmt("   sequence-parallel plan, async redistributes; batch %lld x seq %lld; SGD lr %.2f; "
          "the single-device block",
          (long long)o.batch, (long long)o.seq, kLearningRate));
  say("   trains beside it on every rank from the same seed");
  ex::TransformerBlock ref = ex::make_block(cfg, static_cast<uint64_t>(o.seed));
  ex::TransformerBlock blk = ex::copy_block(*ref);
  hyper::trace::Timeline tl;
  hyper::tp::ParallelizeOptions popts;
  popts.observer = &tl;
  hyper::tp::parallelize_module(blk.ptr(), mesh, ex::sequence_parallel_plan(cfg, n, /*async=*/true),
                                popts);
  blk->set_observer(&tl, g_rank);
  say(fmt("   %-5s %-12s %-14s %-10s %-9s %s", "step", "loss (TP)", "single-device", "|diff|",
          "ms", "comm hidden by compute"));
  const int64_t record_step = std::max<int64_t>(1, o.steps - 1);
  const fs::path trace_path = out / "tp_step_trace.json", png_path = out / "tp_step.png";
  double max_loss_diff = 0, recorded_overlap = 0;
  std::vector<double> losses;

  auto train_step = [&](int64_t step, const std::string& note) {
    tl.clear();
    const auto t0 = Clock::now();
    const ex::Batch b = ex::make_batch(cfg, o.batch, o.seq, static_cast<uint64_t>(o.seed * 100 + step));
    at::Tensor y = blk->forward(ex::shard_sequence(b.x, mesh));
    at::Tensor loss = ex::sp_mse_loss(y, ex::shard_sequence(b.target, mesh), b.target.numel());
    loss.backward();
    sgd_step(*blk, kLearningRate);
    const double ms = ms_since(t0);
    const double tp_loss = ex::sum_over_mesh(loss, mesh);
    // The single-device block on the whole batch.
    at::Tensor ref_loss = ex::mse_loss(ref->forward(b.x), b.target);
    ref_loss.backward();
    sgd_step(*ref, kLearningRate);
    const double single = ref_loss.item<double>();
    const auto ov = tl.overlap(g_rank);
    const auto sums = reduce(mesh, {ov.comm_us, ov.hidden_us});
    const double frac = sums[0] > 0 ? sums[1] / sums[0] : 0.0;
    const double max_ms = reduce(mesh, {ms}, hyper::comm::ReduceOp::kMax)[0];
    max_loss_diff = std::max(max_loss_diff, std::abs(tp_loss - single));
    losses.push_back(tp_loss);
    say(fmt("   %-5lld %-12.6f %-14.6f %-10.2e %-9.1f %.0f%% of %.1f ms%s", (long long)step, tp_loss,
            single, std::abs(tp_loss - single), max_ms, 100.0 * frac, sums[0] / 1000.0 / n,
            note.c_str()));
    if (step == record_step) {
      const auto events = gather_events(tl, mesh);
      recorded_overlap = frac;
      if (g_rank == 0) {
        hyper::trace::write_chrome_trace(trace_path.string(), events);
        hyper::trace::StepPictureOptions po;
        po.title = fmt("TP step %lld on %d ranks, sequence parallel, async", (long long)step, n);
        hyper::trace::write_step_picture(png_path.string(), events, po);
      }
    }
  };

  const int64_t before_save = std::max<int64_t>(0, o.steps - 1);
  for (int64_t step = 1; step <= before_save; ++step) train_step(step, "");
  if (record_step <= before_save) {
    say("   ('comm hidden': share of the collectives' time, issue to wait, during which the same");
    say("    rank was computing; summed over ranks.) Timeline of step " + std::to_string(record_step) +
        ", all ranks:");
    say("   " + trace_path.string() + " (Chrome trace: open in https://ui.perfetto.dev)");
    say("   " + png_path.string());
  }

  // ---- 3b. The same block of plain torch::nn modules ---------------------------------------
  // Its forward is ordinary LibTorch code; parallelize_module makes the parameters DTensor
  // tensors and hyper's dispatch key propagates the sharding through every op (issue 14).
  heading(fmt("3b. The same block built from plain torch::nn modules, AdamW, on %d ranks", n));
  say("   torch::nn::Linear / LayerNorm and an unmodified forward; the plain tensor-parallel plan");
  say("   makes the parameters DTensor tensors (attn.q/k/v, mlp.w1 S(0); attn.o, mlp.w2 S(1); norms R)");
  say("   and the activations flow between modules as DTensor tensors. torch::optim::AdamW steps");
  say("   both it and the single-device block on the whole batch:");
  Row plain_summary;
  {
    auto pref = ex::make_block<ex::PlainTransformerBlock>(cfg, static_cast<uint64_t>(o.seed));
    auto pblk = ex::copy_block(*pref);
    ex::parallelize_plain_block(pblk, mesh);
    // eps 1e-3: attn.k.bias's gradient is zero up to rounding (softmax is shift-invariant
    // along a query row); Adam with a tiny eps would turn that noise into lr-sized steps.
    const auto aopts = torch::optim::AdamWOptions(1e-3).weight_decay(0.01).eps(1e-3);
    torch::optim::AdamW opt(pblk->parameters(), aopts);
    torch::optim::AdamW opt_ref(pref->parameters(), aopts);
    say(fmt("   %-5s %-12s %-14s %-10s %s", "step", "loss (TP)", "single-device", "|diff|", "ms"));
    double max_diff = 0, first = 0, last = 0;
    for (int64_t step = 1; step <= o.steps; ++step) {
      const ex::Batch b = ex::make_batch(cfg, o.batch, o.seq, static_cast<uint64_t>(o.seed * 100 + step));
      const auto t0 = Clock::now();
      opt.zero_grad();
      at::Tensor loss = ex::mse_loss(pblk->forward(b.x), b.target);
      loss.backward();
      opt.step();
      const double max_ms = reduce(mesh, {ms_since(t0)}, hyper::comm::ReduceOp::kMax)[0];
      const double tp_loss = hyper::as_dtensor(loss).full_tensor().item<double>();
      opt_ref.zero_grad();
      at::Tensor ref_loss = ex::mse_loss(pref->forward(b.x), b.target);
      ref_loss.backward();
      opt_ref.step();
      const double single = ref_loss.item<double>();
      max_diff = std::max(max_diff, std::abs(tp_loss - single));
      if (step == 1) first = tp_loss;
      last = tp_loss;
      say(fmt("   %-5lld %-12.6f %-14.6f %-10.2e %.1f", (long long)step, tp_loss, single,
              std::abs(tp_loss - single), max_ms));
    }
    const auto pm = ex::compare_parameters(*pblk, *pref, mesh, /*rtol=*/1e-4, /*atol=*/1e-5);
    if (!pm.empty()) std::cerr << ex::describe(pm);
    const int64_t plain_bad = count_failures(mesh, pm.empty());
    const bool plain_loss_ok = max_diff <= 1e-4 * std::max(1.0, std::abs(first));
    failures += plain_bad + (plain_loss_ok ? 0 : 1);
    say(fmt("   every parameter (full tensor) equals the single-device block's after AdamW (rtol 1e-4): %s",
            plain_bad ? "MISMATCH" : "ok"));
    plain_summary = {"3b", fmt("%lld AdamW steps, plain torch::nn block", (long long)o.steps),
                     fmt("%s; loss %.4f -> %.4f, max |TP - single| %.1e",
                         (plain_bad || !plain_loss_ok) ? "MISMATCH" : "ok", first, last, max_diff)};
  }

  // ---- 4. Async checkpoint ---------------------------------------------------------------
  // The saved state: the ragged parameter, a Shard(0) tensor, a replicated tensor, the block's
  // parameters (TP layouts) and values.
  hyper::DTensor act = hyper::distribute_tensor(act_global(), mesh, {hyper::Shard(0)});
  hyper::DTensor table = hyper::distribute_tensor(table_global(), mesh, {hyper::Replicate()});
  const double eval_before = eval_loss(blk, cfg, mesh, o);
  hyper::dcp::StateDict sd = {
      {"param.ragged", param},
      {"act.shard0", act},
      {"table.replicated", table},
      {"step", int64_t{before_save}},
      {"eval.loss", eval_before},
      {"config.rows", int64_t{o.rows}},
      {"config.cols", int64_t{o.cols}},
      {"config.hidden", int64_t{o.hidden}},
      {"config.ffn", int64_t{o.ffn}},
      {"config.batch", int64_t{o.batch}},
      {"config.seq", int64_t{o.seq}},
      {"layout.param.ragged", "RS((0,1),(" + join_ints(units) + "))"},
  };
  std::map<std::string, std::string> block_layouts;
  const hyper::tp::ParamDict block_sd = hyper::tp::state_dict(*blk);
  {
    const fs::path refdir = out / "reference";
    std::ofstream index;
    if (g_rank == 0) {
      fs::create_directories(refdir);
      index.open(refdir / "index.tsv", std::ios::trunc);
    }
    for (const auto& [name, dt] : block_sd) {
      sd["block." + name] = dt;
      block_layouts[name] = hyper::to_string(dt.placements());
      at::Tensor full = dt.full_tensor();  // collective: every rank
      if (g_rank == 0) write_reference(refdir, "block." + name, full, index);
    }
  }
  heading(fmt("4. Async checkpoint save of %zu entries into %s", sd.size(), o.dir.c_str()));
  {
    std::map<std::string, int> kinds;
    for (const auto& [name, layout] : block_layouts) kinds[layout]++;
    std::string kl;
    for (const auto& [l, c] : kinds) kl += (kl.empty() ? "" : ", ") + std::to_string(c) + " x " + l;
    say("   param.ragged " + rs.to_string() + " " + shape_to_string(param.shape(), ", ") +
        ", act.shard0 S(0) " + shape_to_string(act.shape(), ", ") + ", table.replicated R " +
        shape_to_string(table.shape(), ", ") + ",");
    say(fmt("   block.* (%zu parameters: %s), step=%lld, eval.loss=%.6f, config.*", block_sd.size(),
            kl.c_str(), (long long)before_save, eval_before));
  }
  (void)reduce(mesh, {0.0});
  const auto t_save = Clock::now();
  hyper::dcp::AsyncSaveHandle handle = hyper::dcp::async_save(sd, o.dir);
  const double blocked_ms = ms_since(t_save);
  // The checkpoint holds the values at the call: change the parameter in place at once ...
  {
    at::NoGradGuard no_grad;
    param.to_local().neg_();
  }
  // ... and run the next training step while the save is written in the background.
  const auto t_step = Clock::now();
  train_step(o.steps, "  (during the async save)");
  const double step_ms = ms_since(t_step);
  const bool done_before_wait = handle.done();
  bool save_ok = true;
  std::string save_error;
  try {
    handle.wait();
  } catch (const std::exception& e) {
    save_ok = false;
    save_error = e.what();
  }
  const double total_ms = ms_since(t_save);
  const auto tm = reduce(mesh, {blocked_ms, total_ms, step_ms}, hyper::comm::ReduceOp::kMax);
  const int64_t save_bad = count_failures(mesh, save_ok);
  failures += save_bad;
  if (!save_ok) std::cerr << "async_save failed: " << save_error << "\n";
  const int64_t ckpt_bytes = g_rank == 0 && save_ok ? dir_bytes(o.dir) : 0;
  say(fmt("   async_save returned after %.1f ms (staging to host memory). The caller then negated",
          tm[0]));
  say(fmt("   param.ragged in place and ran step %lld with its single-device twin (%.1f ms); wait()",
          (long long)o.steps, tm[2]));
  say(fmt("   returned %.1f ms after the call%s: blocked %.1f ms of %.1f ms.", tm[1],
          done_before_wait ? " (the save had finished meanwhile)" : "", tm[0], tm[1]));
  say(fmt("   Checkpoint: %s on disk. (Times: max over ranks.)",
          bytes_str(static_cast<double>(ckpt_bytes)).c_str()));
  say(save_bad ? "   SAVE FAILED" : "   committed on every rank");

  // ---- after the save: parameters vs the single-device block --------------------------------
  const auto mism = ex::compare_parameters(*blk, *ref, mesh, /*rtol=*/1e-4, /*atol=*/1e-5);
  const int64_t param_bad = count_failures(mesh, mism.empty());
  if (!mism.empty()) std::cerr << ex::describe(mism);
  failures += param_bad;
  const bool loss_ok = max_loss_diff <= 1e-4 * std::max(1.0, std::abs(losses.front()));
  if (!loss_ok) ++failures;
  say(fmt("   after step %lld: every TP parameter equals the single-device block's (rtol 1e-4): %s;",
          (long long)o.steps, param_bad ? "MISMATCH" : "ok"));
  say(fmt("   max |TP loss - single-device loss| over the steps: %.1e", max_loss_diff));
  if (record_step == o.steps) {
    say("   timeline of step " + std::to_string(record_step) + ": " + trace_path.string() + ", " +
        png_path.string());
  }

  summary.push_back({"3", fmt("%lld TP training steps, %s", (long long)o.steps,
                              "sequence-parallel, async"),
                     fmt("%s; loss %.4f -> %.4f, max |TP - single| %.1e; step %lld comm hidden %.0f%%",
                         (param_bad || !loss_ok) ? "MISMATCH" : "ok", losses.front(), losses.back(),
                         max_loss_diff, (long long)record_step, 100.0 * recorded_overlap)});
  summary.push_back(plain_summary);
  summary.push_back({"4", fmt("async_save of %zu entries (ragged, S(0), R, TP, values)", sd.size()),
                     save_bad ? "FAILED"
                              : fmt("ok; blocked %.0f ms of %.0f ms; %s", tm[0], tm[1],
                                    bytes_str(static_cast<double>(ckpt_bytes)).c_str())});
  const int64_t total_failures = static_cast<int64_t>(reduce(mesh, {static_cast<double>(failures)},
                                                              hyper::comm::ReduceOp::kMax)[0]);
  if (g_rank == 0) write_summary(out / "summary.tsv", summary, /*append=*/false);
  say("");
  say(fmt("phase 1 %s in %.1f s", total_failures ? "FAILED" : "done", ms_since(t_phase) / 1000.0));
  hyper::destroy_process_group();
  return total_failures ? 1 : 0;
}

// ------------------------------------------------------------------------------------------
// Phase 2: load on another world size into other layouts

int phase_load(const Options& o) {
  hyper::World world = hyper::init_process_group();
  const int n = world.size();
  g_rank = world.rank();
  hyper::DeviceMesh mesh = hyper::init_device_mesh(world, "cpu", {n});
  const fs::path out(o.out);
  const auto t_phase = Clock::now();
  int64_t failures = 0;
  std::vector<Row> summary;

  say(fmt("hyper demo, phase 2 (load) on %d ranks", n));
  // The sizes and values saved by phase 1 (a values-only load: no tensor bytes).
  hyper::dcp::StateDict cfgsd = {
      {"config.rows", int64_t{0}},   {"config.cols", int64_t{0}}, {"config.hidden", int64_t{0}},
      {"config.ffn", int64_t{0}},    {"config.batch", int64_t{0}}, {"config.seq", int64_t{0}},
      {"step", int64_t{-1}},         {"eval.loss", 0.0},
      {"layout.param.ragged", std::string()},
  };
  hyper::dcp::load(cfgsd, o.dir);
  const auto iv = [&](const char* k) { return std::get<int64_t>(cfgsd.at(k)); };
  const int64_t rows = iv("config.rows"), cols = iv("config.cols");
  const std::string saved_param = std::get<std::string>(cfgsd.at("layout.param.ragged"));
  Options eo = o;
  eo.batch = iv("config.batch");
  eo.seq = iv("config.seq");
  const ex::TransformerConfig cfg = block_config(iv("config.hidden"), iv("config.ffn"));

  std::vector<int64_t> lu = o.load_units;
  if (lu.empty()) {
    if (n == 2) {
      lu = {3, 5};
    } else {
      for (int i = 0; i < n; ++i) lu.push_back(n - i);
    }
  }
  if (static_cast<int>(lu.size()) != n) {
    throw std::invalid_argument("--load-units needs one entry per rank (" + std::to_string(n) + ")");
  }

  heading(fmt("5. Load %s (saved on 4 ranks) on %d ranks into other layouts", o.dir.c_str(), n));
  say("   each target starts as zeros; every value is then checked against the tensor recomputed");
  say("   from its formula, or for block.* against the reference phase 1 wrote with plain file I/O");
  say(fmt("   %-18s %-24s %-16s %10s %10s  %s", "entry", "saved as", "loaded as", "read",
          "needed", "values"));

  const at::Tensor pglobal = param_global(rows, cols);
  const auto zeros_like_layout = [&](const std::vector<int64_t>& shape,
                                     const hyper::Placements& pl) {
    return hyper::distribute_tensor(at::zeros(shape, at::kFloat), mesh, pl);
  };
  struct Target {
    std::string name, saved, loaded;
    hyper::DTensor dt;
    at::Tensor expect;
  };
  // Three loads: the same checkpoint entry can be loaded into two layouts at once only through
  // two StateDicts.
  std::vector<std::vector<Target>> loads(2);
  loads[0].push_back({"param.ragged", saved_param, "S(1)",
                      zeros_like_layout({rows, cols}, {hyper::Shard(1)}), pglobal});
  loads[0].push_back({"act.shard0", "S(0)", "R", zeros_like_layout({517, 96}, {hyper::Replicate()}),
                      act_global()});
  const std::vector<int64_t> tu = n == 2 ? std::vector<int64_t>{1, 3} : lu;
  loads[0].push_back({"table.replicated", "R", "RS((0,),(" + join_ints(tu) + "))",
                      zeros_like_layout({64, 48}, {hyper::RaggedShard({0}, tu)}), table_global()});
  loads[1].push_back({"param.ragged", saved_param,
                      "RS((0,1),(" + join_ints(lu) + "))",
                      zeros_like_layout({rows, cols}, {hyper::RaggedShard({0, 1}, lu)}), pglobal});

  bool ok_all = true;
  int64_t read_total = 0, needed_total = 0;
  auto run_load = [&](std::vector<Target>& targets, hyper::dcp::StateDict& sd,
                      const std::string& label) {
    const auto t0 = Clock::now();
    const hyper::dcp::LoadStats st = hyper::dcp::load(sd, o.dir);
    const double ms = ms_since(t0);
    const auto sums = reduce(mesh, {static_cast<double>(st.bytes_read),
                                    static_cast<double>(st.bytes_needed)});
    const double max_ms = reduce(mesh, {ms}, hyper::comm::ReduceOp::kMax)[0];
    read_total += static_cast<int64_t>(sums[0]);
    needed_total += static_cast<int64_t>(sums[1]);
    int64_t bad_entries = 0;
    for (auto& t : targets) {
      const int64_t bad = count_failures(mesh, matches(t.dt, t.expect));
      if (bad) ++bad_entries;
      say(fmt("   %-18s %-24s %-16s %10s %10s  %s", t.name.c_str(), t.saved.c_str(),
              t.loaded.c_str(), "", "", bad ? "MISMATCH" : "ok"));
    }
    say(fmt("   %-60s %10s %10s  (%.0f ms, summed over ranks)", ("  load #" + label).c_str(),
            bytes_str(sums[0]).c_str(), bytes_str(sums[1]).c_str(), max_ms));
    if (bad_entries) ok_all = false;
    failures += bad_entries;
  };

  for (size_t i = 0; i < loads.size(); ++i) {
    hyper::dcp::StateDict sd;
    for (auto& t : loads[i]) sd[t.name] = t.dt;
    run_load(loads[i], sd, std::to_string(i + 1));
  }

  // The trained block, parallelized over this world size, zeroed, then loaded.
  ex::TransformerBlock blk(cfg);
  hyper::tp::parallelize_module(blk.ptr(), mesh, ex::sequence_parallel_plan(cfg, n));
  {
    at::NoGradGuard no_grad;
    for (auto& p : blk->parameters()) p.zero_();
  }
  const auto reference = read_reference(out / "reference");
  std::vector<Target> block_targets;
  hyper::dcp::StateDict bsd;
  for (const auto& [name, dt] : hyper::tp::state_dict(*blk)) {
    const std::string full = "block." + name;
    auto it = reference.find(full);
    if (it == reference.end()) throw std::runtime_error("no reference for " + full);
    block_targets.push_back({full, "", hyper::to_string(dt.placements()), dt, it->second});
    bsd[full] = dt;
  }
  // Print the block as one line per layout class, not 16 lines.
  {
    const auto t0 = Clock::now();
    const hyper::dcp::LoadStats st = hyper::dcp::load(bsd, o.dir);
    const double ms = ms_since(t0);
    const auto sums = reduce(mesh, {static_cast<double>(st.bytes_read),
                                    static_cast<double>(st.bytes_needed)});
    read_total += static_cast<int64_t>(sums[0]);
    needed_total += static_cast<int64_t>(sums[1]);
    int64_t bad_entries = 0;
    for (auto& t : block_targets) bad_entries += count_failures(mesh, matches(t.dt, t.expect)) ? 1 : 0;
    failures += bad_entries;
    say(fmt("   %-18s %-24s %-16s %10s %10s  %s",
            fmt("block.* (%zu)", block_targets.size()).c_str(), fmt("TP on 4 ranks").c_str(),
            fmt("TP on %d ranks", n).c_str(), bytes_str(sums[0]).c_str(), bytes_str(sums[1]).c_str(),
            bad_entries ? fmt("%lld MISMATCH", (long long)bad_entries).c_str() : "ok"));
    (void)ms;
  }
  const int64_t saved_step = iv("step");
  const bool step_ok = saved_step >= 0;
  say(fmt("   %-18s %-24s %-16s %10s %10s  %s", "step", "value", "value", "", "",
          fmt("%lld", (long long)saved_step).c_str()));
  // End to end: the loaded block evaluated on this world size vs the 4-rank block at the save.
  const double eval_saved = std::get<double>(cfgsd.at("eval.loss"));
  const double eval_now = eval_loss(blk, cfg, mesh, eo);
  const bool eval_ok = std::abs(eval_now - eval_saved) <= 1e-5 * std::max(1.0, std::abs(eval_saved));
  if (!eval_ok || !step_ok) ++failures;
  say(fmt("   evaluation loss of the loaded block on %d ranks: %.6f; on 4 ranks before the save: "
          "%.6f (%s)",
          n, eval_now, eval_saved, eval_ok ? "ok" : "MISMATCH"));
  say(fmt("   bytes read from the checkpoint: %s for %s needed (%.2fx). Loads verify checksums, which",
          bytes_str(static_cast<double>(read_total)).c_str(),
          bytes_str(static_cast<double>(needed_total)).c_str(),
          static_cast<double>(read_total) / std::max<double>(1.0, static_cast<double>(needed_total))));
  say("   reads whole checksum blocks (1 MiB) around each stretch: an S(1) target needs half of every");
  say("   saved row, so it reads the blocks it touches whole; box-aligned targets read ~what they need.");
  summary.push_back({"5",
                     fmt("load on %d ranks into S(1), RS(%s), R, RS, TP/%d", n,
                         join_ints(lu).c_str(), n),
                     fmt("%s; read %s for %s needed; eval loss %.6f vs %.6f",
                         (failures || !ok_all) ? "MISMATCH" : "ok",
                         bytes_str(static_cast<double>(read_total)).c_str(),
                         bytes_str(static_cast<double>(needed_total)).c_str(), eval_now, eval_saved)});

  const int64_t total_failures = static_cast<int64_t>(reduce(mesh, {static_cast<double>(failures)},
                                                              hyper::comm::ReduceOp::kMax)[0]);
  // ---- 6. Summary ------------------------------------------------------------------------
  if (g_rank == 0) {
    std::vector<Row> rows_all;
    std::ifstream f(out / "summary.tsv");
    std::string line;
    while (std::getline(f, line)) {
      std::istringstream ls(line);
      Row r;
      std::getline(ls, r.step, '\t');
      std::getline(ls, r.what, '\t');
      std::getline(ls, r.result);
      rows_all.push_back(r);
    }
    for (const auto& r : summary) rows_all.push_back(r);
    write_summary(out / "summary.tsv", summary, /*append=*/true);
    heading("6. Summary");
    size_t w = 4;
    for (const auto& r : rows_all) w = std::max(w, r.what.size());
    say(fmt("   %-4s %-*s  %s", "step", static_cast<int>(w), "what", "result"));
    for (const auto& r : rows_all) {
      say(fmt("   %-4s %-*s  %s", r.step.c_str(), static_cast<int>(w), r.what.c_str(), r.result.c_str()));
    }
    say("");
    say("   trace (Chrome JSON): " + (out / "tp_step_trace.json").string());
    say("   picture (PNG):       " + (out / "tp_step.png").string());
    say("   checkpoint:          " + o.dir);
    say("   reference, summary:  " + (out / "reference").string() + ", " + (out / "summary.tsv").string());
  }
  say("");
  say(fmt("phase 2 %s in %.1f s", total_failures ? "FAILED" : "done", ms_since(t_phase) / 1000.0));
  hyper::destroy_process_group();
  return total_failures ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  hyper::cli::ArgParser p({"unknown argument '{arg}'", "missing value after {arg}"});
  const auto int64 = [](int64_t& to) {
    return [&to](const std::string& v) { to = std::stoll(v); };
  };
  const auto list = [](std::vector<int64_t>& to) {
    return [&to](const std::string& v) { to = parse_list(v); };
  };
  p.option({"--phase"}, [&](const std::string& v) { o.phase = v; });
  p.option({"--dir"}, [&](const std::string& v) { o.dir = v; });
  p.option({"--out"}, [&](const std::string& v) { o.out = v; });
  p.option({"--rows"}, int64(o.rows));
  p.option({"--cols"}, int64(o.cols));
  p.option({"--units"}, list(o.units));
  p.option({"--units2"}, list(o.units2));
  p.option({"--load-units"}, list(o.load_units));
  p.option({"--steps"}, int64(o.steps));
  p.option({"--hidden"}, int64(o.hidden));
  p.option({"--ffn"}, int64(o.ffn));
  p.option({"--batch"}, int64(o.batch));
  p.option({"--seq"}, int64(o.seq));
  p.option({"--seed"}, int64(o.seed));
  p.help({"-h", "--help"});
  try {
    p.parse(argc, argv);
  } catch (const std::exception& e) {
    return usage(e.what());
  }
  if (p.help_requested()) return usage(""), 0;
  if (o.dir.empty() || o.out.empty()) return usage("--dir and --out are required");
  if (o.steps < 1) return usage("--steps must be at least 1");
  if (o.hidden < 16 || o.hidden % 16 != 0) return usage("--hidden must be a multiple of 16");
  try {
    if (o.phase == "train-save") return phase_train_save(o);
    if (o.phase == "load") return phase_load(o);
    return usage("--phase must be train-save or load");
  } catch (const std::exception& e) {
    std::cerr << "demo: " << e.what() << "\n";
    return 1;
  }
}
