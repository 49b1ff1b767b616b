// torch_peer_bench: hyper's side of the benchmark against the real peer, PyTorch 2.x
// (bench/py/torch_peer.py runs the same cases with PyTorch DTensor, its functional
// collectives and torch.distributed.checkpoint). Both sides are started the same way, one
// intra-op thread per rank, and write the same JSON; bench/py/peer_compare.py pairs them into
// rows "hyper vs PyTorch" (scripts/bench.sh runs the two sides alternately).
//
//   build/tools/hyperrun -n 4 -- build/bench/torch_peer_bench --suite redistribute
//       [--mib 64] [--reps 3] [--warmup 1] [--out FILE]
//   build/tools/hyperrun -n 4 -- build/bench/torch_peer_bench --suite dcp [--mib 64]
//       [--dir DIR] [--keep DIR]                      (save + load, same layout)
//   build/tools/hyperrun -n 2 -- build/bench/torch_peer_bench --suite dcp --mode reshard
//       --from DIR                                    (saved on 4 ranks, loaded on 2)
//   build/tools/hyperrun -n 2 -- build/bench/torch_peer_bench --suite overlap [--mib 8]
//   build/tools/hyperrun -n 2 -- build/bench/torch_peer_bench --suite tp [--reps 9]
//
// Suite redistribute (--mib: the float32 global tensor), n ranks, X = cols of [13, X]:
//   s0_to_r.uneven   [13, X] Shard(0) (rows 4,4,4,1 on 4 ranks) -> Replicate
//   s0_to_s1.uneven  [13, X] Shard(0) -> Shard(1)
//   p_to_r.even      [R, 1024] Partial(sum) -> Replicate
//   s0_to_r.even     [R, 1024] Shard(0) -> Replicate
//   floor.all_gather_into_tensor / floor.all_to_all_single: hyper's comm::all_gather_v /
//                    all_to_all_v of the even shard (PyTorch's side: its c10d collectives)
// Suite dcp (--mib per rank): 4 tensors layers.{i}.w of [n*rows, 1024], Shard(0):
//   dcp.save (a fresh directory per call), dcp.load (same layout), dcp.load_reshard.
// Suite overlap (--mib: the float32 global [R, 1024], even Shard(0)): how much of a
// collective this machine can hide behind compute. The gather is DTensor redistribute
// Shard(0) -> Replicate; the product is this rank's own rows times a [1024, 256] weight (what
// a collective matmul computes while its gather is in flight):
//   overlap.gather, overlap.product   each alone
//   overlap.sequential                the gather, then the product
//   overlap.concurrent                the gather issued async (async_op), the product, the wait
// concurrent / sequential is the wall time overlap saves; max(gather, product) / (gather +
// product) the most it could save.
// Suite tp (--mib unused): one training step of a transformer block under sequence-parallel
// tensor parallelism, async vs sync (see tp_suite; PyTorch's side: parallelize_module with
// ColwiseParallel / RowwiseParallel / SequenceParallel, redistribute's async_op as its
// styles set it vs forced off):
//   tp.step.async, tp.step.sync              hyper's hookable modules, async_op on / off
//   tp.step.plain_async, tp.step.plain_sync  plain torch::nn modules (DTensor tensors), the
//                                            q/k/v and w1 gathers overlapped / synchronous
// The four are timed round-robin (one call of each per round), both sides.
// Timing: barrier, the call (result complete), the slowest rank's time (all_reduce max);
// the case's time is the median of --reps calls after --warmup calls; "cpu_s": the CPU time
// of the call, every thread of every rank summed (getrusage), median over the calls;
// "caller_cpu_s": the same for the calling thread alone (CLOCK_THREAD_CPUTIME_ID). --route
// (overlap) pins the all-gather's route (comm::set_all_gather_route; default auto). Every
// result's values are checked once against slicing the global tensor. Bytes: hyper's byte counters (wire) or
// LoadStats (bytes read); peak RSS: VmHWM after the call minus VmRSS before it, with the peak
// reset through /proc/self/clear_refs.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/optim/sgd.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sys/resource.h>
#include <string>
#include <utility>
#include <vector>

#include "bench/bench_util.h"
#include "examples/common/transformer_block.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/world.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/state_dict.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/parallelize.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Options {
  std::string suite;
  std::string mode = "save_load";
  double mib = 64;
  int reps = 3;
  int warmup = 1;
  std::string out, dir, keep, from;
  std::string route = "auto";  // overlap: the all-gather route (comm::set_all_gather_route)
};

// Suite tp's block and batch (the defaults of bench/tp_bench.cc); bench/py/torch_peer.py
// builds the same.
constexpr int64_t kTpHidden = 512, kTpHeads = 8, kTpFfn = 2048, kTpSeq = 256, kTpBatch = 2;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "torch_peer_bench: %s\nusage: torch_peer_bench --suite redistribute|dcp|overlap|tp "
               "[--mib M] [--reps K] [--warmup W] [--out FILE] [--dir DIR] "
               "[--mode save_load|reshard] [--keep DIR] [--from DIR] [--route auto|ring|p2p]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  hyper::cli::ArgParser p({"unknown argument '{arg}'", "{arg} needs a value"});
  p.option({"--suite"}, [&](const std::string& v) { o.suite = v; });
  p.option({"--mode"}, [&](const std::string& v) { o.mode = v; });
  p.option({"--mib"}, [&](const std::string& v) { o.mib = std::atof(v.c_str()); });
  p.option({"--reps"}, [&](const std::string& v) { o.reps = std::atoi(v.c_str()); });
  p.option({"--warmup"}, [&](const std::string& v) { o.warmup = std::atoi(v.c_str()); });
  p.option({"--out"}, [&](const std::string& v) { o.out = v; });
  p.option({"--dir"}, [&](const std::string& v) { o.dir = v; });
  p.option({"--keep"}, [&](const std::string& v) { o.keep = v; });
  p.option({"--from"}, [&](const std::string& v) { o.from = v; });
  p.option({"--route"}, [&](const std::string& v) { o.route = v; });
  try {
    p.parse(argc, argv);
  } catch (const hyper::cli::UsageError& e) {
    usage(e.what());
  }
  if (o.suite != "redistribute" && o.suite != "dcp" && o.suite != "overlap" && o.suite != "tp")
    usage("--suite must be redistribute, dcp, overlap or tp");
  if (o.mode != "save_load" && o.mode != "reshard") usage("--mode must be save_load or reshard");
  if (o.mode == "reshard" && o.from.empty()) usage("--mode reshard needs --from DIR");
  if (o.route != "auto" && o.route != "ring" && o.route != "p2p")
    usage("--route must be auto, ring or p2p");
  if (!(o.mib > 0) || o.reps < 1 || o.warmup < 0) usage("--mib > 0, --reps >= 1, --warmup >= 0");
  return o;
}

/// CPU time of this process, every thread, user + system (getrusage RUSAGE_SELF).
double process_cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  auto sec = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec * 1e-6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

/// CPU time of the calling thread, user + system (CLOCK_THREAD_CPUTIME_ID).
double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + t.tv_nsec * 1e-9;
}

struct Bench {
  Options opt;
  hyper::World world;
  hyper::DeviceMesh mesh;
  hyper::comm::Group group;
  int rank = 0, n = 1;
  json cases = json::array();

  double agree(double v, hyper::comm::ReduceOp op) const {
    at::Tensor t = at::full({1}, v, at::kDouble);
    return hyper::comm::all_reduce(t, op, group).item<double>();
  }
  void barrier() const { hyper::comm::process_group_of(group)->barrier()->wait(); }

  /// One call of `fn` between a barrier and the end of its work: the slowest rank's wall
  /// seconds, and the CPU seconds of every thread (cpu) and of the calling thread (caller),
  /// each summed over the ranks.
  struct Sample {
    double wall = 0, cpu = 0, caller = 0;
  };
  /// `then` (optional) runs right after, before the ranks agree (the peak RSS is read there).
  Sample time_call(const std::function<void()>& fn, const std::function<void()>& then = {}) const {
    barrier();
    const double c0 = process_cpu_seconds();
    const double k0 = thread_cpu_seconds();
    const double t0 = hyper::bench::now_seconds();
    fn();
    const double dt = hyper::bench::now_seconds() - t0;
    const double dk = thread_cpu_seconds() - k0;
    const double dc = process_cpu_seconds() - c0;
    if (then) then();
    return {agree(dt, hyper::comm::ReduceOp::kMax), agree(dc, hyper::comm::ReduceOp::kSum),
            agree(dk, hyper::comm::ReduceOp::kSum)};
  }

  /// The case's record from its timed samples (medians).
  static json case_of(const std::string& id, const std::vector<Sample>& samples) {
    std::vector<double> times, cpu, caller;
    for (const Sample& s : samples) {
      times.push_back(s.wall);
      cpu.push_back(s.cpu);
      caller.push_back(s.caller);
    }
    return {{"id", id}, {"s", hyper::bench::median(times)}, {"times", times},
            {"cpu_s", hyper::bench::median(cpu)}, {"caller_cpu_s", hyper::bench::median(caller)}};
  }

  /// Times `fn` (warm-up + reps). `before` runs outside the timing before each call.
  /// Records the case; `rss`: also the peak RSS figures.
  json& time_case(const std::string& id, const std::function<void()>& fn, bool rss,
                  const std::function<void()>& before = {}) {
    std::vector<Sample> samples;
    double peak = 0, base = -1;
    for (int i = 0; i < opt.warmup + opt.reps; ++i) {
      if (before) before();
      const int64_t rss0 = hyper::bench::proc_status_kib("VmRSS");
      if (base < 0 && i == opt.warmup) base = rss0 / 1024.0;
      if (rss) hyper::bench::reset_peak_rss();
      double hwm = 0;
      const Sample s = time_call(fn, [&] { hwm = hyper::bench::proc_status_kib("VmHWM"); });
      if (i >= opt.warmup) {
        samples.push_back(s);
        peak = std::max(peak, (hwm - rss0) / 1024.0);
      }
    }
    json c = case_of(id, samples);
    if (rss) {
      c["peak_rss_mib"] = agree(peak, hyper::comm::ReduceOp::kMax);
      c["rss_base_mib"] = agree(base, hyper::comm::ReduceOp::kMax);
    }
    cases.push_back(c);
    return cases.back();
  }

  /// Times several cases round-robin (warm-up rounds, then --reps rounds of one call each),
  /// so that a drift of the machine's speed reaches every case alike: for ratios between
  /// them. Records the cases in order.
  void time_interleaved(const std::vector<std::pair<std::string, std::function<void()>>>& calls) {
    std::vector<std::vector<Sample>> samples(calls.size());
    for (int i = 0; i < opt.warmup + opt.reps; ++i) {
      for (std::size_t k = 0; k < calls.size(); ++k) {
        const Sample s = time_call(calls[k].second);
        if (i >= opt.warmup) samples[k].push_back(s);
      }
    }
    for (std::size_t k = 0; k < calls.size(); ++k) cases.push_back(case_of(calls[k].first, samples[k]));
  }

  int64_t wire_bytes_of(const std::function<void()>& fn) const {
    hyper::comm::reset_stats(world);
    fn();
    const int64_t mine = hyper::comm::stats(world).bytes_sent();
    return static_cast<int64_t>(agree(static_cast<double>(mine), hyper::comm::ReduceOp::kSum));
  }

  void check(bool ok, const std::string& what) const {
    const double bad = agree(ok ? 0.0 : 1.0, hyper::comm::ReduceOp::kSum);
    if (bad > 0) throw std::runtime_error("torch_peer_bench: wrong values in " + what);
  }

  // ---- redistribute ------------------------------------------------------------------------
  void redistribute_case(const std::string& id, const at::Tensor& global,
                         const hyper::Placements& from, const hyper::Placements& to,
                         int64_t lower_bound) {
    const auto shape = global.sizes().vec();
    hyper::DTensor dt;
    if (from[0].is_partial()) {
      // Every rank holds global / n: the sum over ranks is the global tensor.
      dt = hyper::DTensor::from_local(global / static_cast<double>(n), mesh, from, shape);
    } else {
      dt = hyper::distribute_tensor(global, mesh, from);
    }
    const hyper::Layout dst(mesh.topology(), to, shape);
    at::Tensor got;
    const int64_t bytes = wire_bytes_of([&] { got = dt.redistribute(mesh, to).to_local(); });
    const auto box = dst.local_box(mesh.get_local_rank(0));
    at::Tensor want = global;
    for (size_t d = 0; d < box.sizes.size(); ++d)
      want = want.narrow(static_cast<int64_t>(d), box.offsets[d], box.sizes[d]);
    check(from[0].is_partial() ? at::allclose(got, want) : at::equal(got, want), id);
    json& c = time_case(id, [&] { dt.redistribute(mesh, to).to_local(); }, false);
    c["bytes"] = bytes;
    c["bytes_lower_bound"] = lower_bound;
    c["shape"] = shape;
  }

  void redistribute_suite() {
    const double elems = opt.mib * 1024 * 1024 / 4;
    const int64_t x = std::max<int64_t>(n, static_cast<int64_t>(elems / 13) / n * n);
    const int64_t r = std::max<int64_t>(n, static_cast<int64_t>(elems / 1024) / n * n);
    const at::Tensor uneven = at::arange(13 * x, at::kFloat).view({13, x});
    const at::Tensor even = at::arange(r * 1024, at::kFloat).view({r, 1024});
    const hyper::Placements s0{hyper::Shard(0)}, s1{hyper::Shard(1)}, rep{hyper::Replicate()},
        part{hyper::Partial()};
    const int64_t ub = uneven.numel() * 4, eb = even.numel() * 4;
    // Lower bounds: every element a rank lacks reaches it once; S(0)->S(1) keeps the
    // diagonal blocks in place; Partial->Replicate: a reduce-scatter ((n-1)/n of the tensor
    // from every rank) then an all-gather (the same again).
    const hyper::Layout ls0(mesh.topology(), s0, {13, x}), ls1(mesh.topology(), s1, {13, x});
    int64_t diag = 0;
    for (int i = 0; i < n; ++i) {
      const auto both = hyper::intersect(ls0.local_box(i), ls1.local_box(i));
      if (both) diag += both->numel();
    }
    redistribute_case("s0_to_r.uneven", uneven, s0, rep, (n - 1) * ub);
    redistribute_case("s0_to_s1.uneven", uneven, s0, s1, ub - diag * 4);
    redistribute_case("p_to_r.even", even, part, rep, 2 * (n - 1) * eb);
    redistribute_case("s0_to_r.even", even, s0, rep, (n - 1) * eb);

    // Floors: hyper's comm layer on the even shard.
    const at::Tensor shard = even.narrow(0, rank * (r / n), r / n).contiguous();
    const std::vector<int64_t> rows(n, r / n);
    int64_t ag_bytes = wire_bytes_of([&] {
      check(at::equal(hyper::comm::all_gather_v(shard, group, rows), even), "all_gather_v");
    });
    json& ag = time_case("floor.all_gather_into_tensor",
                         [&] { hyper::comm::all_gather_v(shard, group, rows); }, false);
    ag["bytes"] = ag_bytes;
    ag["bytes_lower_bound"] = (n - 1) * eb;
    ag["shape"] = even.sizes().vec();
    std::vector<int64_t> a2a_split(n, r / n / n);
    a2a_split[n - 1] += r / n - (r / n / n) * n;
    std::vector<int64_t> a2a_recv(n, a2a_split[rank]);
    int64_t a2a_bytes = wire_bytes_of([&] { hyper::comm::all_to_all_v(shard, a2a_split, a2a_recv, group); });
    // Into a preallocated output, as PyTorch's side calls all_to_all_single.
    at::Tensor a2a_out = at::empty({n * a2a_split[rank], 1024}, at::kFloat);
    {
      hyper::comm::all_to_all_v_async(shard, a2a_split, a2a_recv, group, a2a_out).wait();
      // From rank j: rows [j*R/n + rank*q, +split[rank]) of the global tensor (q = R/n/n).
      std::vector<at::Tensor> want;
      for (int j = 0; j < n; ++j)
        want.push_back(even.narrow(0, j * (r / n) + rank * (r / n / n), a2a_split[rank]));
      check(at::equal(a2a_out, at::cat(want)), "all_to_all_v");
    }
    json& aa = time_case(
        "floor.all_to_all_single",
        [&] { hyper::comm::all_to_all_v_async(shard, a2a_split, a2a_recv, group, a2a_out).wait(); },
        false);
    aa["bytes"] = a2a_bytes;
    aa["bytes_lower_bound"] = a2a_bytes;
    aa["shape"] = even.sizes().vec();
  }

  // ---- dcp ------------------------------------------------------------------------------------
  hyper::dcp::StateDict make_state(int64_t global_rows, bool zero) const {
    hyper::dcp::StateDict sd;
    for (int i = 0; i < 4; ++i) {
      const at::Tensor g =
          at::arange(global_rows * 1024, at::kFloat).add_(i * 1000.0).view({global_rows, 1024});
      hyper::DTensor dt = hyper::distribute_tensor(g, mesh, {hyper::Shard(0)});
      if (zero) dt.to_local().zero_();
      sd["layers." + std::to_string(i) + ".w"] = dt;
    }
    return sd;
  }
  bool state_ok(hyper::dcp::StateDict& sd, int64_t global_rows) const {
    bool ok = true;
    for (int i = 0; i < 4; ++i) {
      const at::Tensor g =
          at::arange(global_rows * 1024, at::kFloat).add_(i * 1000.0).view({global_rows, 1024});
      const auto& dt = std::get<hyper::DTensor>(sd["layers." + std::to_string(i) + ".w"]);
      ok = ok && at::equal(dt.full_tensor(), g);
    }
    return ok;
  }
  void zero(hyper::dcp::StateDict& sd) const {
    for (auto& [k, v] : sd) std::get<hyper::DTensor>(v).to_local().zero_();
  }

  /// Loads `dir` into a zeroed Shard(0) state on this world, checks it once, then times the
  /// load (targets zeroed before each call); bytes read and needed summed over ranks.
  void load_case(const std::string& id, const std::string& dir, int64_t global_rows) {
    hyper::dcp::StateDict target = make_state(global_rows, true);
    const hyper::dcp::LoadStats st = hyper::dcp::load(target, dir);
    check(state_ok(target, global_rows), id);
    json& c = time_case(id, [&] { hyper::dcp::load(target, dir); }, true, [&] { zero(target); });
    c["bytes"] = static_cast<int64_t>(agree(static_cast<double>(st.bytes_read), hyper::comm::ReduceOp::kSum));
    c["bytes_lower_bound"] =
        static_cast<int64_t>(agree(static_cast<double>(st.bytes_needed), hyper::comm::ReduceOp::kSum));
  }

  void dcp_suite() {
    if (opt.mode == "reshard") {
      const hyper::dcp::Metadata meta = hyper::dcp::CheckpointReader(opt.from).metadata();
      const int64_t global_rows = meta.tensors.at("layers.0.w").shape.at(0);
      opt.mib = global_rows * 1024 * 4 * 4 / (1024.0 * 1024.0);  // reported: the global MiB
      load_case("dcp.load_reshard", opt.from, global_rows);
      return;
    }
    // A fresh directory of this run's own under --dir (or the temp dir): removed at the end,
    // never the directory the caller named.
    std::string base;
    {
      std::string tmpl = ((opt.dir.empty() ? fs::temp_directory_path() : fs::path(opt.dir)) /
                          "hyper_torch_peer.XXXXXX").string();
      if (rank == 0) {
        fs::create_directories(fs::path(tmpl).parent_path());
        if (::mkdtemp(tmpl.data()) == nullptr)
          throw std::runtime_error("torch_peer_bench: cannot create a directory like " + tmpl);
      }
      // Rank 0 names it; every rank learns the name (fixed length: the template's).
      at::Tensor name = at::zeros({static_cast<int64_t>(tmpl.size())}, at::kByte);
      if (rank == 0) std::memcpy(name.data_ptr(), tmpl.data(), tmpl.size());
      name = hyper::comm::all_reduce(name, hyper::comm::ReduceOp::kMax, group);
      base.assign(static_cast<const char*>(name.data_ptr()), tmpl.size());
    }
    const int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(opt.mib * 1024 * 1024 / 4 / 1024 / 4));
    const int64_t global_rows = rows * n;
    hyper::dcp::StateDict sd = make_state(global_rows, false);
    const int64_t global_bytes = global_rows * 1024 * 4 * 4;
    int call = 0;
    std::string dir;
    json& s = time_case(
        "dcp.save", [&] { hyper::dcp::save(sd, dir); }, true, [&] {
          if (!dir.empty() && rank == 0) fs::remove_all(dir);
          dir = base + "/save_" + std::to_string(call++);
          barrier();
        });
    int64_t written = 0;
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().filename() != ".metadata") written += static_cast<int64_t>(fs::file_size(e.path()));
    s["bytes"] = written;  // the files of all ranks (one directory)
    s["bytes_lower_bound"] = global_bytes;
    barrier();
    if (rank == 0) fs::remove_all(dir);
    barrier();
    const std::string ck = opt.keep.empty() ? base + "/load" : opt.keep;
    if (rank == 0) fs::remove_all(ck);
    barrier();
    hyper::dcp::save(sd, ck);
    load_case("dcp.load", ck, global_rows);
    barrier();
    if (rank == 0) fs::remove_all(base);
  }

  // ---- overlap -----------------------------------------------------------------------------
  void overlap_suite() {
    if (opt.route != "auto")
      hyper::comm::set_all_gather_route(mesh.get_group(0), opt.route == "ring"
                                                               ? hyper::comm::AllGatherRoute::kGlooRing
                                                               : hyper::comm::AllGatherRoute::kPointToPoint);
    const int64_t r =
        std::max<int64_t>(n, static_cast<int64_t>(opt.mib * 1024 * 1024 / 4 / 1024) / n * n);
    const at::Tensor global = at::arange(r * 1024, at::kFloat).view({r, 1024}).div_(r * 1024.0);
    const at::Tensor w = at::full({1024, 256}, 0.5f);
    const hyper::DTensor dt = hyper::distribute_tensor(global, mesh, {hyper::Shard(0)});
    const at::Tensor own = dt.to_local().contiguous();
    const hyper::Placements rep{hyper::Replicate()};
    auto gather = [&] { return dt.redistribute(mesh, rep).to_local(); };
    auto product = [&] { return at::mm(own, w); };
    check(at::equal(gather(), global), "overlap.gather");
    {
      const hyper::DTensor p = dt.redistribute(mesh, rep, /*async_op=*/true);
      const at::Tensor y = product();
      check(at::equal(p.to_local(), global) && at::allclose(y, at::mm(own, w)),
            "overlap.concurrent");
    }
    const int64_t bytes = wire_bytes_of([&] { gather(); });
    const std::vector<std::pair<std::string, std::function<void()>>> calls = {
        {"overlap.gather", [&] { gather(); }},
        {"overlap.product", [&] { product(); }},
        {"overlap.sequential", [&] { gather(); product(); }},
        {"overlap.concurrent", [&] {
           const hyper::DTensor p = dt.redistribute(mesh, rep, /*async_op=*/true);
           product();
           p.wait();
         }}};
    for (const auto& [id, call] : calls) {
      json& row = time_case(id, call, false);
      const bool moves = id != "overlap.product";
      row["bytes"] = moves ? bytes : 0;
      row["bytes_lower_bound"] = moves ? (n - 1) * r * 1024 * 4 : 0;  // every rank lacks (n-1)/n
      row["shape"] = {r, 1024};
    }
  }

  // ---- tp ----------------------------------------------------------------------------------
  /// One training step (forward, backward, SGD step, lr 0 so every call does the same work)
  /// of the example transformer block (examples/common/transformer_block.h: hidden 512, 8
  /// heads, ffn 2048, causal attention, GELU, biases) on a [2, 256, 512] batch under
  /// sequence parallelism, MSE loss against a random target. tp.step.* is the block of
  /// hookable hyper::nn modules under sequence_parallel_plan (every style's async_op on /
  /// off); tp.step.plain_* the same block of plain torch::nn modules under
  /// plain_sequence_parallel_plan, the one whose activations are DTensor tensors,
  /// with its q/k/v and w1 gathers overlapped with each rank's own rows
  /// (hyper::set_overlap_linear_gather) or synchronous. Values: each variant's loss against
  /// the single-device block's; the hookable async and sync steps bit-identical.
  void tp_suite() {
    using hyper::examples::PlainTransformerBlock;
    using hyper::examples::TransformerBlock;
    hyper::examples::TransformerConfig cfg;
    cfg.hidden = kTpHidden;
    cfg.n_heads = kTpHeads;
    cfg.head_dim = kTpHidden / kTpHeads;
    cfg.ffn = kTpFfn;
    if (kTpHeads % n != 0 || kTpSeq % n != 0)
      throw hyper::ValueError("suite tp: " + std::to_string(n) + " ranks must divide the " +
                              std::to_string(kTpHeads) + " heads and the sequence of " +
                              std::to_string(kTpSeq));
    const auto batch = hyper::examples::make_batch(cfg, kTpBatch, kTpSeq, 1);
    const at::Tensor x_local = hyper::examples::shard_sequence(batch.x, mesh);
    const at::Tensor t_local = hyper::examples::shard_sequence(batch.target, mesh);
    const at::Tensor x_seq = hyper::examples::shard_sequence_dtensor(batch.x, mesh);
    const int64_t numel = batch.target.numel();
    const TransformerBlock ref = hyper::examples::make_block(cfg, 7);
    double want = 0;
    {
      at::NoGradGuard no_grad;
      TransformerBlock one = hyper::examples::copy_block(*ref);  // forward is not const
      want = hyper::examples::mse_loss(one->forward(batch.x), batch.target).item<double>();
    }

    auto hookable = [&](bool async) {
      TransformerBlock b = hyper::examples::copy_block(*ref);
      hyper::tp::parallelize_module(b.ptr(), mesh,
                                    hyper::examples::sequence_parallel_plan(cfg, n, async));
      return b;
    };
    TransformerBlock on = hookable(true), off = hookable(false);
    PlainTransformerBlock plain =
        hyper::examples::copy_block(*hyper::examples::make_block<PlainTransformerBlock>(cfg, 7));
    hyper::examples::parallelize_plain_block(plain, mesh, /*sequence_parallel=*/true);
    torch::optim::SGD sgd_on(on->parameters(), torch::optim::SGDOptions(0.0));
    torch::optim::SGD sgd_off(off->parameters(), torch::optim::SGDOptions(0.0));
    torch::optim::SGD sgd_plain(plain->parameters(), torch::optim::SGDOptions(0.0));

    // Each returns the global loss of the step (untimed where it is read).
    auto hookable_step = [&](TransformerBlock& b, torch::optim::SGD& sgd) {
      sgd.zero_grad();
      at::Tensor loss = hyper::examples::sp_mse_loss(b->forward(x_local), t_local, numel);
      loss.backward();
      sgd.step();
      return loss.detach();
    };
    auto plain_step = [&](bool overlap) {
      hyper::set_overlap_linear_gather(overlap);
      sgd_plain.zero_grad();
      at::Tensor loss = hyper::examples::mse_loss(plain->forward(x_seq), batch.target);
      loss.backward();
      sgd_plain.step();
      hyper::set_overlap_linear_gather(true);
      return loss.detach();
    };
    const at::Tensor l_on = hookable_step(on, sgd_on), l_off = hookable_step(off, sgd_off);
    check(at::equal(l_on, l_off), "tp.step.async vs tp.step.sync (bit-identical losses)");
    auto near = [&](double got) { return std::abs(got - want) <= 1e-4 * std::abs(want); };
    check(near(hyper::examples::sum_over_mesh(l_on, mesh)), "tp.step.async (loss)");
    for (bool overlap : {true, false}) {
      const double got = hyper::as_dtensor(plain_step(overlap)).full_tensor().item<double>();
      check(near(got), overlap ? "tp.step.plain_async (loss)" : "tp.step.plain_sync (loss)");
    }
    time_interleaved({{"tp.step.async", [&] { hookable_step(on, sgd_on); }},
                      {"tp.step.sync", [&] { hookable_step(off, sgd_off); }},
                      {"tp.step.plain_async", [&] { plain_step(true); }},
                      {"tp.step.plain_sync", [&] { plain_step(false); }}});
    // Bytes one step sends, summed over ranks (the same with the overlap on and off).
    const int64_t hookable_bytes = wire_bytes_of([&] { hookable_step(on, sgd_on); });
    const int64_t plain_bytes = wire_bytes_of([&] { plain_step(true); });
    for (auto& c : cases) {
      c["shape"] = {kTpBatch, kTpSeq, kTpHidden};
      c["bytes"] = c["id"].get<std::string>().rfind("tp.step.plain", 0) == 0 ? plain_bytes
                                                                              : hookable_bytes;
      c["bytes_lower_bound"] = 0;
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  at::set_num_threads(1);
  hyper::ProcessGroupOptions po;
  po.timeout = std::chrono::seconds(300);
  try {
    hyper::World world = hyper::init_process_group(po);
    Bench b;
    b.opt = opt;
    b.world = world;
    b.mesh = hyper::init_device_mesh(world, "cpu", {world.size()});
    b.group = b.mesh.get_group(0);
    b.rank = world.rank();
    b.n = world.size();
    const std::string load0 = hyper::bench::read_first_line("/proc/loadavg");
    if (opt.suite == "redistribute") b.redistribute_suite();
    else if (opt.suite == "overlap") b.overlap_suite();
    else if (opt.suite == "tp") b.tp_suite();
    else b.dcp_suite();
    if (b.rank == 0) {
      json out = {{"side", "hyper"},          {"suite", opt.suite},
                  {"mode", opt.mode},         {"ranks", b.n},
                  {"mib", b.opt.mib},           {"reps", opt.reps},
                  {"warmup", opt.warmup},     {"libtorch", TORCH_VERSION},
                  {"loadavg_start", load0},   {"time_utc", hyper::bench::utc_now_iso()},
                  {"cases", b.cases}};
      std::printf("torch_peer_bench (hyper) %s on %d ranks, %g MiB:\n", opt.suite.c_str(), b.n,
                  b.opt.mib);
      for (const auto& c : b.cases)
        std::printf("  %-30s %10.3f ms\n", c["id"].get<std::string>().c_str(),
                    c["s"].get<double>() * 1e3);
      if (!opt.out.empty()) {
        const fs::path parent = fs::path(opt.out).parent_path();
        if (!parent.empty()) fs::create_directories(parent);
        std::ofstream(opt.out) << out.dump(1) << "\n";
      }
    }
    hyper::destroy_process_group();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_peer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
