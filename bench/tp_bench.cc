// tp_bench: one training step (forward + backward + SGD step) of the example transformer
// block (examples/common/transformer_block.h) under sequence-parallel tensor parallelism,
// with every Col/Row/Seq style's async_op on (ours) vs off (baseline), timed side by side
// (alternating repetitions, medians of the slowest rank). Start it on N ranks:
//
//   build/tools/hyperrun -n 2 -- build/bench/tp_bench [--reps 9] [--hidden 512] [--seq 256]
//        [--batch 2] [--heads 8] [--ffn 2048] [--out FILE] [--no-trace]
//        [--profile plain|hookable|add|dispatch]   (only --reps steps of that path, or --reps x
//        10000 at::add calls on DTensor tensors, for perf record; dispatch: only the per-op
//        dispatch overhead rows, printed)
//        [--sp]   (plain vs hookable under sequence parallelism: parallelize_plain_block(..,
//        true) with a Shard(1) DTensor input against sequence_parallel_plan, async on)
//
// Target: ratio async/sync <= 0.9 on 2 ranks (reported on other rank counts). Also:
// the step of the same block built from plain torch::nn modules (PlainTransformerBlock,
// DTensor-tensor parameters and activations) against the hookable block, both under the
// plain tensor-parallel plan (target <= 1.05), and the per-call dispatch overhead of at::add
// and at::mm on small DTensor tensors against the plain ATen ops (reported), and the plain
// block under sequence parallelism with its q/k/v gather overlapped with the product of each
// rank's own rows (hyper::set_overlap_linear_gather) against the synchronous gather (target
// <= 0.9 on 2 ranks, wall time of the step). Each rank
// runs one intra-op thread (torch::set_num_threads(1)) so ranks do not fight for cores.
//
// Then one async step is recorded with a hyper::trace::Timeline (parallelize_module's
// ParallelizeOptions::observer: the styles' collectives and each parallelized module's
// forward; plus the attention core, the loss and the optimizer step as compute regions).
// Every rank's events are gathered to rank 0 (times aligned on the shared monotonic clock),
// which prints the overlap fraction beside the ratio and writes the Chrome trace and the
// PNG next to the result JSON: <results>/tp_step_<N>ranks.json and .png (default
// build/bench/results/), and the result rows to <results>/tp_bench_<N>ranks.json.
// The backward is not instrumented (its collectives run inside autograd and are not
// recorded by the styles), so the overlap fraction covers the forward's collectives.

#include <ATen/ATen.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "examples/common/transformer_block.h"
#include "hyper/comm/blocked_time.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/world.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tp/distribute_module.h"
#include "hyper/tp/parallelize.h"
#include "hyper/trace/timeline.h"

namespace {

using hyper::bench::Row;
using hyper::examples::PlainTransformerBlock;
using hyper::examples::TransformerBlock;
using hyper::examples::TransformerConfig;

struct Options {
  hyper::bench::Args common;  // --reps, --out
  int64_t hidden = 512;
  int64_t heads = 8;
  int64_t ffn = 2048;
  int64_t seq = 256;
  int64_t batch = 2;
  bool trace = true;
  bool sp = false;      // plain vs hookable under sequence parallelism
  std::string profile;  // "plain" / "hookable": run only that path's steps (for a profiler)
};

Options parse(int argc, char** argv) {
  Options o;
  o.common.reps = 9;
  hyper::cli::ArgParser p({"unknown argument '{arg}' (--reps N --hidden H --heads K --ffn F "
                           "--seq S --batch B --out FILE --no-trace --profile plain|hookable|add|dispatch --sp)",
                           "missing value after {arg}"});
  const auto int64 = [](int64_t& to) {
    return [&to](const std::string& v) { to = std::atoll(v.c_str()); };
  };
  p.option({"--reps"}, [&](const std::string& v) { o.common.reps = std::atoi(v.c_str()); });
  p.option({"--out"}, [&](const std::string& v) { o.common.out = v; });
  p.option({"--hidden"}, int64(o.hidden));
  p.option({"--heads"}, int64(o.heads));
  p.option({"--ffn"}, int64(o.ffn));
  p.option({"--seq"}, int64(o.seq));
  p.option({"--batch"}, int64(o.batch));
  p.flag({"--no-trace"}, [&] { o.trace = false; });
  p.flag({"--sp"}, [&] { o.sp = true; });
  p.option({"--profile"}, [&](const std::string& v) {
    if (v != "plain" && v != "hookable" && v != "add" && v != "dispatch")
      throw hyper::cli::UsageError("--profile must be plain, hookable, add or dispatch, got '" + v + "'");
    o.profile = v;
  });
  try {
    p.parse(argc, argv);
  } catch (const hyper::cli::UsageError& e) {
    std::fprintf(stderr, "tp_bench: %s\n", e.what());
    std::exit(2);
  }
  if (o.common.reps < 1 || o.hidden < 1 || o.heads < 1 || o.hidden % o.heads != 0) {
    std::fprintf(stderr, "tp_bench: need reps >= 1 and hidden divisible by heads\n");
    std::exit(2);
  }
  return o;
}

/// Microseconds of the steady clock since its epoch (CLOCK_MONOTONIC on Linux: shared by
/// every process of the machine, so ranks' timelines can be aligned).
double steady_us() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// One rank's events as text lines: kind \t start \t end \t stream \t name.
std::string serialize(const std::vector<hyper::trace::TimelineEvent>& events, double shift_us) {
  std::ostringstream os;
  os.precision(17);
  for (const auto& e : events) {
    os << (e.kind == hyper::trace::RegionKind::kComm ? 'c' : 'p') << '\t'
       << e.start_us + shift_us << '\t' << e.end_us + shift_us << '\t' << e.stream << '\t'
       << e.name << '\n';
  }
  return os.str();
}

void parse_into(const std::string& text, int rank, hyper::trace::Timeline& out) {
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    std::vector<std::string> f;
    size_t pos = 0;
    for (int k = 0; k < 4; ++k) {
      const size_t tab = line.find('\t', pos);
      f.push_back(line.substr(pos, tab - pos));
      pos = tab + 1;
    }
    f.push_back(line.substr(pos));
    hyper::trace::TimelineEvent e;
    e.kind = f[0] == "c" ? hyper::trace::RegionKind::kComm : hyper::trace::RegionKind::kCompute;
    e.start_us = std::stod(f[1]);
    e.end_us = std::stod(f[2]);
    e.stream = f[3];
    e.name = f[4];
    e.rank = rank;
    out.record(e);
  }
}

/// The events with every "<module>: forward" compute region minus the intervals of that
/// module's own "<module>: input ..." collectives on the same rank: the styles record a
/// module's forward from its first hook to its last, so a forward that waits for its input
/// gather would otherwise count that wait as hidden communication.
std::vector<hyper::trace::TimelineEvent> without_input_waits(
    const std::vector<hyper::trace::TimelineEvent>& events) {
  using hyper::trace::RegionKind;
  const std::string suffix = ": forward";
  std::vector<hyper::trace::TimelineEvent> out;
  for (const auto& e : events) {
    const bool is_fwd = e.kind == RegionKind::kCompute && e.name.size() > suffix.size() &&
                        e.name.compare(e.name.size() - suffix.size(), suffix.size(), suffix) == 0;
    if (!is_fwd) {
      out.push_back(e);
      continue;
    }
    const std::string prefix = e.name.substr(0, e.name.size() - suffix.size()) + ": input";
    std::vector<hyper::trace::Interval> waits;
    for (const auto& c : events) {
      if (c.kind == RegionKind::kComm && c.rank == e.rank && c.name.rfind(prefix, 0) == 0)
        waits.push_back({c.start_us, c.end_us});
    }
    waits = hyper::trace::interval_union(waits);
    double at = e.start_us;
    for (const auto& w : waits) {
      if (w.begin > at) {
        auto piece = e;
        piece.start_us = at;
        piece.end_us = std::min(w.begin, e.end_us);
        if (piece.end_us > piece.start_us) out.push_back(piece);
      }
      at = std::max(at, w.end);
    }
    if (e.end_us > at) {
      auto piece = e;
      piece.start_us = at;
      out.push_back(piece);
    }
  }
  return out;
}

}  // namespace

/// The per-op dispatch overhead rows (report): a DTensor tensor's op against the plain op on the
/// local tensors, per call.
std::vector<Row> dispatch_overhead_rows(const hyper::DeviceMesh& mesh, int n, int reps) {
  // Per-op dispatch overhead of a DTensor tensor on a small tensor (report only): at::add of
  // two Replicate [16, 16] DTensor tensors (rule lookup, wrap, no communication) against
  // at::add of the plain local tensors. 2000 calls per repetition.
  const at::Tensor small = at::rand({16, 16});
  const at::Tensor small_dt =
      hyper::distribute_tensor(small, mesh, {hyper::Replicate()}).as_tensor();
  auto per_call = [](const std::function<void()>& f) {
    const int calls = 2000;
    const double t0 = hyper::bench::now_seconds();
    for (int i = 0; i < calls; ++i) f();
    return (hyper::bench::now_seconds() - t0) / calls;
  };
  Row op_row = hyper::bench::compare(
      "at::add, DTensor tensors R [16x16] (per call)", "at::add, plain [16x16]", reps,
      [&] { return per_call([&] { (void)at::add(small_dt, small_dt); }); },
      [&] { return per_call([&] { (void)at::add(small, small); }); }, 0.0);
  op_row.id = "dispatch.add_overhead";
  op_row.ranks = n;
  Row mm_row = hyper::bench::compare(
      "at::mm, DTensor tensors S(0) x R [16x16] (per call)", "at::mm, plain [16x16]",
      reps,
      [&] {
        const at::Tensor a = hyper::distribute_tensor(small, mesh, {hyper::Shard(0)}).as_tensor();
        return per_call([&] { (void)at::mm(a, small_dt); });
      },
      [&] { return per_call([&] { (void)at::mm(small, small); }); }, 0.0);
  mm_row.id = "dispatch.mm_overhead";
  mm_row.ranks = n;
  // A convolution of a batch-sharded DTensor (data parallel: rule choice cached, one local
  // conv with a local backward node) against the same conv on this rank's images.
  const at::Tensor images = at::rand({2 * n, 16, 16, 16});
  const at::Tensor filters = at::rand({16, 16, 3, 3});
  const at::Tensor images_dt = hyper::distribute_tensor(images, mesh, {hyper::Shard(0)}).as_tensor();
  const at::Tensor filters_dt =
      hyper::distribute_tensor(filters, mesh, {hyper::Replicate()}).as_tensor();
  const at::Tensor my_images = hyper::as_dtensor(images_dt).to_local();
  Row conv_row = hyper::bench::compare(
      "at::conv2d, DTensor S(0) [2n,16,16,16] x R [16,16,3,3] (per call)",
      "at::conv2d, this rank's [2,16,16,16]", reps,
      [&] { return per_call([&] { (void)at::conv2d(images_dt, filters_dt, {}, 1, 1); }); },
      [&] { return per_call([&] { (void)at::conv2d(my_images, filters, {}, 1, 1); }); }, 0.0);
  conv_row.id = "dispatch.conv2d_overhead";
  conv_row.ranks = n;
  return {op_row, mm_row, conv_row};
}

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  torch::set_num_threads(1);
  hyper::ProcessGroupOptions pgo;
  pgo.timeout = std::chrono::seconds(300);
  hyper::World world = hyper::init_process_group(pgo);
  const int rank = world.rank();
  const int n = world.size();
  const hyper::comm::Group group = world.group();
  const auto mesh = hyper::init_device_mesh(world, "cpu", {n}, {"tp"});
  if (opt.profile == "dispatch") {
    // --profile dispatch: only the per-op dispatch overhead rows, printed.
    for (const Row& r : dispatch_overhead_rows(mesh, n, opt.common.reps))
      if (rank == 0)
        std::printf("%s: %.2f us, %s: %.2f us, ratio %.3f (%d ranks)\n", r.name.c_str(),
                    r.ours_s * 1e6, r.baseline.c_str(), r.base_s * 1e6, r.ratio(), n);
    return 0;
  }

  TransformerConfig cfg;
  cfg.hidden = opt.hidden;
  cfg.n_heads = opt.heads;
  cfg.head_dim = opt.hidden / opt.heads;
  cfg.ffn = opt.ffn;
  if (cfg.n_heads % n != 0 || opt.seq % n != 0) {
    if (rank == 0)
      std::fprintf(stderr, "tp_bench: heads (%lld) and seq (%lld) must be divisible by %d ranks\n",
                   static_cast<long long>(cfg.n_heads), static_cast<long long>(opt.seq), n);
    return 2;
  }
  const auto batch = hyper::examples::make_batch(cfg, opt.batch, opt.seq, 1);
  const at::Tensor x_local = hyper::examples::shard_sequence(batch.x, mesh);
  const at::Tensor t_local = hyper::examples::shard_sequence(batch.target, mesh);
  const int64_t numel = batch.target.numel();

  // Two blocks with identical parameters, async on and off; a third (async on) records.
  const TransformerBlock ref = hyper::examples::make_block(cfg, 7);
  struct Setup {
    TransformerBlock block{nullptr};
    std::unique_ptr<torch::optim::SGD> opt;
  };
  hyper::trace::Timeline timeline;
  auto make_setup = [&](bool async, hyper::trace::Timeline* tl) {
    Setup s;
    s.block = hyper::examples::copy_block(*ref);
    hyper::tp::ParallelizeOptions po;
    po.observer = tl;
    hyper::tp::parallelize_module(s.block.ptr(), mesh,
                                  hyper::examples::sequence_parallel_plan(cfg, n, async), po);
    s.block->set_observer(tl, rank);
    // lr 0: the parameters (and so every repetition's work) stay the same.
    s.opt = std::make_unique<torch::optim::SGD>(s.block->parameters(),
                                                torch::optim::SGDOptions(0.0));
    return s;
  };
  Setup on = make_setup(true, nullptr);
  Setup off = make_setup(false, nullptr);

  auto over_ranks = [&](double v, hyper::comm::ReduceOp op) {
    at::Tensor t = at::full({1}, v, at::kDouble);
    return hyper::comm::all_reduce(t, op, group).item<double>();
  };
  auto max_over_ranks = [&](double v) { return over_ranks(v, hyper::comm::ReduceOp::kMax); };
  auto barrier = [&] { max_over_ranks(0.0); };

  // Plain torch::nn modules: the same block of torch::nn::Linear / LayerNorm,
  // parallelized with tensor_parallel_plan (no sequence parallelism: the plain path has no
  // hooks to relayout at module boundaries), whose parameters and activations are DTensor
  // tensors, against the hookable block under the same plan (async on). Target <= 1.05.
  const auto plain_ref = hyper::examples::make_block<PlainTransformerBlock>(cfg, 7);
  auto plain = hyper::examples::copy_block(*plain_ref);
  // --sp: both under sequence parallelism instead (the plain block's input a Shard(1) DTensor
  // tensor, the hookable block's this rank's sequence shard; async on).
  hyper::examples::parallelize_plain_block(plain, mesh, opt.sp);
  torch::optim::SGD plain_opt(plain->parameters(), torch::optim::SGDOptions(0.0));
  auto hooked = hyper::examples::copy_block(*ref);
  hyper::tp::parallelize_module(hooked.ptr(), mesh,
                                opt.sp ? hyper::examples::sequence_parallel_plan(cfg, n)
                                       : hyper::examples::tensor_parallel_plan(cfg, n));
  torch::optim::SGD hooked_opt(hooked->parameters(), torch::optim::SGDOptions(0.0));
  const at::Tensor x_sp = opt.sp ? hyper::examples::shard_sequence_dtensor(batch.x, mesh) : at::Tensor();
  auto plain_loss = [&] {
    return hyper::examples::mse_loss(plain->forward(opt.sp ? x_sp : batch.x), batch.target);
  };
  auto hooked_loss = [&] {
    return opt.sp ? hyper::examples::sp_mse_loss(hooked->forward(x_local), t_local, numel)
                  : hyper::examples::mse_loss(hooked->forward(batch.x), batch.target);
  };
  auto timed_full_batch_step = [&](const std::function<at::Tensor()>& loss, torch::optim::SGD& sgd) {
    barrier();
    const double t0 = hyper::bench::now_seconds();
    sgd.zero_grad();
    loss().backward();
    sgd.step();
    return max_over_ranks(hyper::bench::now_seconds() - t0);
  };
  auto plain_step = [&] { return timed_full_batch_step(plain_loss, plain_opt); };
  auto hooked_step = [&] { return timed_full_batch_step(hooked_loss, hooked_opt); };
  if (opt.profile == "add") {
    // --profile add: only `reps` x 10000 at::add calls on two Replicate [16, 16] DTensor
    // tensors (the per-op dispatch overhead, run under perf).
    const at::Tensor s = hyper::distribute_tensor(at::rand({16, 16}), mesh, {hyper::Replicate()}).as_tensor();
    for (int r = 0; r < opt.common.reps * 10000; ++r) (void)at::add(s, s);
    if (rank == 0) std::printf("tp_bench: %d x 10000 at::add calls done\n", opt.common.reps);
    return 0;
  }
  if (!opt.profile.empty()) {
    // --profile: only `reps` steps of one path, nothing else (run under perf).
    for (int r = 0; r < opt.common.reps; ++r) opt.profile == "plain" ? plain_step() : hooked_step();
    if (rank == 0) std::printf("tp_bench: %d %s steps done\n", opt.common.reps, opt.profile.c_str());
    return 0;
  }

  hyper::trace::Timeline* rec = nullptr;  // set while recording a step
  auto step = [&](Setup& s) -> at::Tensor {
    s.opt->zero_grad();
    at::Tensor y = s.block->forward(x_local);
    at::Tensor loss;
    {
      auto r = hyper::trace::Region::compute(rec, "loss", rank);
      loss = hyper::examples::sp_mse_loss(y, t_local, numel);
    }
    loss.backward();
    {
      auto r = hyper::trace::Region::compute(rec, "sgd step", rank);
      s.opt->step();
    }
    return loss.detach();
  };
  // Seconds each timed step spent blocked on communication (hyper::comm::blocked_seconds,
  // mean over the ranks): the communication on the critical path, transfers plus waiting
  // for the slower rank; with async on, what overlap left of it.
  std::vector<double> blocked_on, blocked_off;
  auto timed = [&](Setup& s, std::vector<double>& blocked) {
    barrier();
    hyper::comm::reset_blocked_time();
    const double t0 = hyper::bench::now_seconds();
    step(s);
    const double dt = hyper::bench::now_seconds() - t0;
    blocked.push_back(over_ranks(hyper::comm::blocked_seconds(), hyper::comm::ReduceOp::kAvg));
    return max_over_ranks(dt);
  };

  // Sanity: async on and off compute the same step (bit-identical losses and gradients).
  bool identical = at::equal(step(on), step(off));
  {
    auto pa = on.block->parameters(), pb = off.block->parameters();
    for (size_t i = 0; i < pa.size(); ++i) identical = identical && at::equal(pa[i].grad(), pb[i].grad());
  }

  if (rank == 0) {
    std::printf("tp_bench: %d ranks, block %s, batch %lld x seq %lld, 1 intra-op thread per "
                "rank, %d reps\n",
                n, cfg.to_string().c_str(), static_cast<long long>(opt.batch),
                static_cast<long long>(opt.seq), opt.common.reps);
    std::printf("async on/off results bit-identical: %s\n", identical ? "yes" : "NO");
  }

  Row row = hyper::bench::compare(
      "tp step async_op on (" + std::to_string(n) + " ranks)", "async_op off", opt.common.reps,
      [&] { return timed(on, blocked_on); }, [&] { return timed(off, blocked_off); },
      n == 2 ? 0.9 : 0.0);
  row.id = "tp_step.async_vs_sync";
  row.ranks = n;
  const double blocked_on_s = hyper::bench::median(blocked_on);
  const double blocked_off_s = hyper::bench::median(blocked_off);
  row.extra.push_back({"blocked_ms_async", blocked_on_s * 1e3});
  row.extra.push_back({"blocked_ms_sync", blocked_off_s * 1e3});

  // Bytes one step sends (summed over ranks) and this rank's collectives, for each path: the
  // cause of a ratio above 1 is usually communication the plain path adds.
  auto step_bytes = [&](const std::function<double()>& f, std::string* calls) {
    const hyper::comm::CommStats before = hyper::comm::stats(world);
    f();
    const hyper::comm::CommStats after = hyper::comm::stats(world);
    hyper::comm::CommStats d;
    for (int k = 0; k < hyper::comm::kNumCollectiveKinds; ++k) {
      d.by_kind[k].calls = after.by_kind[k].calls - before.by_kind[k].calls;
      d.by_kind[k].bytes_sent = after.by_kind[k].bytes_sent - before.by_kind[k].bytes_sent;
      d.by_kind[k].bytes_received = after.by_kind[k].bytes_received - before.by_kind[k].bytes_received;
    }
    *calls = d.to_string();
    at::Tensor t = at::full({1}, static_cast<double>(d.bytes_sent()), at::kDouble);
    return static_cast<int64_t>(
        hyper::comm::all_reduce(t, hyper::comm::ReduceOp::kSum, group).item<double>());
  };
  std::string plain_calls, hooked_calls;
  const int64_t plain_bytes = step_bytes(plain_step, &plain_calls);
  const int64_t hooked_bytes = step_bytes(hooked_step, &hooked_calls);
  // The plain path's collectives by phase: forward (and loss), backward, optimizer step.
  std::string phase_calls[3];
  {
    at::Tensor loss;
    plain_opt.zero_grad();
    step_bytes([&] { loss = plain_loss(); return 0.0; },
               &phase_calls[0]);
    step_bytes([&] { loss.backward(); return 0.0; }, &phase_calls[1]);
    step_bytes([&] { plain_opt.step(); return 0.0; }, &phase_calls[2]);
  }
  Row plain_row = hyper::bench::compare(
      std::string(opt.sp ? "tp+sp" : "tp") + " step, plain torch::nn modules (" + std::to_string(n) + " ranks)",
      "hookable hyper::nn modules", opt.common.reps, plain_step, hooked_step, 1.05);
  plain_row.id = opt.sp ? "tp_step.plain_vs_hookable_sp" : "tp_step.plain_vs_hookable";
  plain_row.ranks = n;
  plain_row.bytes_ours = plain_bytes;
  plain_row.bytes_base = hooked_bytes;
  // The same two blocks unsharded on each rank (plain tensors: no DTensor, no collectives):
  // the ratio LibTorch's own modules give, against which plain_vs_hookable is read.
  // (torch::nn::functional::linear runs `matmul` + `output += bias` for the block's 3-D input;
  // the hookable Linear calls at::linear, one fused addmm.) Report only.
  auto plain_one = hyper::examples::copy_block(*plain_ref);
  auto hooked_one = hyper::examples::copy_block(*ref);
  torch::optim::SGD plain_one_opt(plain_one->parameters(), torch::optim::SGDOptions(0.0));
  torch::optim::SGD hooked_one_opt(hooked_one->parameters(), torch::optim::SGDOptions(0.0));
  Row one_row = hyper::bench::compare(
      "block step unsharded on each rank, plain torch::nn modules", "hookable hyper::nn modules",
      opt.common.reps,
      [&] {
        return timed_full_batch_step(
            [&] { return hyper::examples::mse_loss(plain_one->forward(batch.x), batch.target); },
            plain_one_opt);
      },
      [&] {
        return timed_full_batch_step(
            [&] { return hyper::examples::mse_loss(hooked_one->forward(batch.x), batch.target); },
            hooked_one_opt);
      },
      0.0);
  one_row.id = "block_step.plain_vs_hookable_unsharded";
  one_row.ranks = n;
  std::vector<Row> rows_out;  // filled below, in print order
  // The plain block's q/k/v gather under sequence parallelism overlapped with the product of each rank's own
  // sequence rows (hyper::set_overlap_linear_gather, a collective matmul) against the
  // synchronous gather: the same collectives and values, wall time of the whole step.
  // (Its own block under sequence parallelism, whatever --sp says.)
  std::optional<Row> gather_row;
  {
    auto plain_sp = hyper::examples::copy_block(*plain_ref);
    hyper::examples::parallelize_plain_block(plain_sp, mesh, /*sequence_parallel=*/true);
    torch::optim::SGD sp_opt(plain_sp->parameters(), torch::optim::SGDOptions(0.0));
    const at::Tensor x_seq = hyper::examples::shard_sequence_dtensor(batch.x, mesh);
    auto with_overlap = [&](bool on) {
      hyper::set_overlap_linear_gather(on);
      const double t = timed_full_batch_step(
          [&] { return hyper::examples::mse_loss(plain_sp->forward(x_seq), batch.target); }, sp_opt);
      hyper::set_overlap_linear_gather(true);
      return t;
    };
    gather_row = hyper::bench::compare(
        "tp+sp step, plain modules, q/k/v gather overlapped (" + std::to_string(n) + " ranks)",
        "gather synchronous", opt.common.reps, [&] { return with_overlap(true); },
        [&] { return with_overlap(false); }, n == 2 ? 0.9 : 0.0);
    gather_row->id = "tp_step.overlap_gather_vs_sync";
    gather_row->ranks = n;
  }

  const std::vector<Row> dispatch_rows = dispatch_overhead_rows(mesh, n, opt.common.reps);

  // Data parallel on plain modules (report): a torch::nn::Sequential MLP with Replicate
  // parameters and a batch-sharded input gives P(sum) gradients. With
  // hyper::overlap_gradient_redistribution their all_reduces are issued in the backward
  // (async) as each gradient is produced; without it the optimizer's step reduces them.
  auto make_dp = [&](bool overlap) {
    torch::manual_seed(11);  // the same values in both models (rank 0's are broadcast)
    namespace nn = torch::nn;
    auto seq = std::make_shared<nn::SequentialImpl>(
        nn::Linear(cfg.hidden, cfg.ffn), nn::ReLU(), nn::Linear(cfg.ffn, cfg.hidden), nn::ReLU(),
        nn::Linear(cfg.hidden, cfg.ffn), nn::ReLU(), nn::Linear(cfg.ffn, cfg.hidden));
    hyper::distribute_module(seq, mesh);
    if (overlap) hyper::overlap_gradient_redistribution(seq);
    return seq;
  };
  auto dp_on = make_dp(true), dp_off = make_dp(false);
  torch::optim::SGD dp_on_opt(dp_on->parameters(), torch::optim::SGDOptions(0.0));
  torch::optim::SGD dp_off_opt(dp_off->parameters(), torch::optim::SGDOptions(0.0));
  const at::Tensor dp_x =
      hyper::distribute_tensor(batch.x.reshape({-1, cfg.hidden}), mesh, {hyper::Shard(0)})
          .as_tensor();
  auto dp_step = [&](const std::shared_ptr<torch::nn::SequentialImpl>& m, torch::optim::SGD& sgd) {
    barrier();
    const double t0 = hyper::bench::now_seconds();
    sgd.zero_grad();
    m->forward(dp_x).pow(2).mean().backward();
    sgd.step();
    return max_over_ranks(hyper::bench::now_seconds() - t0);
  };
  Row dp_row = hyper::bench::compare(
      "dp step, gradients reduced in the backward (" + std::to_string(n) + " ranks)",
      "reduced by the optimizer step", opt.common.reps,
      [&] { return dp_step(dp_on, dp_on_opt); }, [&] { return dp_step(dp_off, dp_off_opt); },
      0.0);
  dp_row.id = "dp_step.gradient_overlap";
  dp_row.ranks = n;

  // One recorded async step.
  double overlap = 0, strict_overlap = 0;
  std::string trace_json, trace_png;
  const std::string results_path =
      hyper::bench::result_path(opt.common, argv[0], "tp_bench_" + std::to_string(n) + "ranks");
  if (opt.trace) {
    Setup traced = make_setup(true, &timeline);
    step(traced);  // warm-up
    barrier();
    timeline.clear();
    rec = &timeline;
    barrier();
    step(traced);
    rec = nullptr;
    // Gather every rank's events on rank 0, aligned on the monotonic clock.
    const double origin_abs = steady_us() - timeline.now_us();
    const std::string text = serialize(timeline.events(), origin_abs);
    at::Tensor bytes = at::empty({static_cast<int64_t>(text.size())}, at::kByte);
    if (!text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
    at::Tensor len = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
    at::Tensor lens = hyper::comm::all_gather_v(len, group);
    std::vector<int64_t> sizes(lens.data_ptr<int64_t>(), lens.data_ptr<int64_t>() + n);
    at::Tensor all = hyper::comm::all_gather_v(bytes, group, sizes);
    if (rank == 0) {
      // Shift so that the earliest event starts near 0.
      hyper::trace::Timeline merged;
      std::string blob(reinterpret_cast<const char*>(all.data_ptr()), all.numel());
      int64_t off_b = 0;
      double first = 1e300;
      std::vector<std::string> texts;
      for (int r = 0; r < n; ++r) {
        texts.push_back(blob.substr(off_b, sizes[r]));
        off_b += sizes[r];
      }
      hyper::trace::Timeline tmp;
      for (int r = 0; r < n; ++r) parse_into(texts[r], r, tmp);
      for (const auto& e : tmp.events()) first = std::min(first, e.start_us);
      for (auto e : tmp.events()) {
        e.start_us -= first;
        e.end_us -= first;
        merged.record(e);
      }
      const auto stats = merged.overlap();
      overlap = stats.fraction();
      const auto strict_stats = hyper::trace::compute_overlap(without_input_waits(merged.events()));
      strict_overlap = strict_stats.fraction();
      const std::filesystem::path dir = std::filesystem::path(results_path).parent_path();
      trace_json = (dir / ("tp_step_" + std::to_string(n) + "ranks.json")).string();
      trace_png = (dir / ("tp_step_" + std::to_string(n) + "ranks.png")).string();
      merged.write_chrome_trace(trace_json);
      hyper::trace::StepPictureOptions png;
      png.title = "TP step, async_op on, " + std::to_string(n) + " ranks";
      merged.write_picture(trace_png, png);
      std::printf("recorded async step: %zu regions, comm %.2f ms, compute %.2f ms, hidden "
                  "%.2f ms (sums over ranks)\n",
                  merged.events().size(), stats.comm_us / 1e3, stats.compute_us / 1e3,
                  stats.hidden_us / 1e3);
    }
  }
  row.extra.push_back({"overlap_fraction", overlap});
  row.extra.push_back({"overlap_fraction_strict", strict_overlap});

  rows_out = {row, plain_row, one_row};
  if (gather_row) rows_out.push_back(*gather_row);
  rows_out.insert(rows_out.end(), dispatch_rows.begin(), dispatch_rows.end());
  rows_out.push_back(dp_row);
  if (rank == 0) {
    // Blocked time is transfer plus waiting for the slower rank; only the first can be
    // hidden behind this rank's own work.
    std::printf("blocked on communication per step (hyper::comm::blocked_seconds, mean over "
                "ranks, median): async on %.2f ms, off %.2f ms (%.1f%% of the synchronous "
                "step)\n",
                blocked_on_s * 1e3, blocked_off_s * 1e3, 100.0 * blocked_off_s / row.base_s);
    hyper::bench::print_rows("tp_bench: training step, async_op on vs off; plain vs hookable "
                             "modules; per-op dispatch overhead (median of slowest rank)",
                             rows_out);
    std::printf("one step's collectives on rank 0: plain modules: %s; hookable modules: %s; "
                "bytes sent per step (all ranks): %lld vs %lld\n",
                plain_calls.c_str(), hooked_calls.c_str(), static_cast<long long>(plain_bytes),
                static_cast<long long>(hooked_bytes));
    std::printf("plain modules by phase: forward: %s; backward: %s; optimizer step: %s\n",
                phase_calls[0].c_str(), phase_calls[1].c_str(), phase_calls[2].c_str());
    std::printf("overlap fraction of the recorded async step: %.3f (Timeline::overlap); "
                "%.3f strict (a module's wait for its own input gather not counted as "
                "compute)\n",
                overlap, strict_overlap);
    hyper::bench::RunInfo info = hyper::bench::run_info(opt.common, n);
    info.mib = 0;
    std::ostringstream setup;
    setup << "sequence-parallel transformer block " << cfg.to_string() << ", batch "
          << opt.batch << " x seq " << opt.seq << ", SGD, 1 thread per rank";
    hyper::bench::write_json(results_path, "tp_bench", setup.str(),
                             rows_out, info);
    std::printf("wrote %s", results_path.c_str());
    if (!trace_json.empty()) std::printf(", %s, %s", trace_json.c_str(), trace_png.c_str());
    std::printf("\n");
  }
  return identical ? 0 : 1;
}
