// redistribute_bench: DTensor::redistribute (one direct step, executed with one
// all_to_all_v) vs the routes it replaces, timed side by side in one run. Start it on N ranks
// (scripts/bench.sh runs a grid of sizes and rank counts):
//
//   build/tools/hyperrun -n 4 -- build/bench/redistribute_bench [--mib 64] [--reps 5]
//                                    [--warmup 1] [--out FILE]
//
// Rows (targets in brackets), a float32 global tensor of --mib MiB, shape (R, 4096),
// ragged units (1,...,1,13) (written (1,1,1,13) for 4 ranks) and their reverse:
//   (a) RS((0,),(1,1,1,13)) -> RS((0,),(13,1,1,1))  vs  the seed's route through Replicate:
//       pad every local to the largest, Gloo allgather (c10d), trim + concatenate, slice the
//       target interval                                                         [<= 0.15]
//   (a') the same transition  vs  bare c10d: ProcessGroupGloo::all_to_all_single moving the
//       plan's element counts between prepacked buffers (no planning, packing or
//       unpacking)                                                               [<= 1.15]
//   (b) S(0) -> RS((0,),(1,1,1,13))  vs  the same route through Replicate       [<= 0.15]
//   (c) S(0) -> R  vs  the bare comm::all_gather_v of the local shard            [<= 1.15]
//   (d) a small tensor redistributed 100 times: plan cache misses (must be 1), and the
//       time of a cached plan lookup vs planning                                 [report]
// Bytes: ours = the plan's traffic, lower bound = the plan's lower bound (target elements a
// rank needs and does not hold), the baselines' from their algorithm.
// Each timed call runs between barriers; the slowest rank's time is agreed with an
// all_reduce(max). Rank 0 prints the table and writes JSON (default
// build/bench/results/redistribute_bench.json).

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/world.h"
#include "hyper/core/layout.h"
#include "hyper/core/redistribute_plan.h"
#include "hyper/tensor/dtensor.h"

using hyper::bench::Row;

namespace {


/// Flat interval [start, end) of every mesh index for a 1-D layout's local storage.
std::vector<std::pair<int64_t, int64_t>> intervals(const hyper::Layout& layout,
                                                   int64_t row_numel) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const int64_t n = layout.mesh().size();
  if (layout.is_ragged()) {
    for (int64_t i = 0; i < n; ++i) {
      const hyper::Interval iv = layout.ragged_interval(i);
      out.emplace_back(iv.start, iv.end);
    }
    return out;
  }
  // Shard(0) (torch.chunk rows).
  for (int64_t i = 0; i < n; ++i) {
    const auto box = layout.local_box(i);
    out.emplace_back(box.offsets[0] * row_numel, (box.offsets[0] + box.sizes[0]) * row_numel);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  const hyper::bench::Args args = hyper::bench::parse_args("redistribute_bench", argc, argv);
  hyper::ProcessGroupOptions opts;
  opts.timeout = std::chrono::seconds(300);
  hyper::World world = hyper::init_process_group(opts);
  const int rank = world.rank();
  const int n = world.size();
  const hyper::DeviceMesh mesh = hyper::init_device_mesh(world, "cpu", {n});
  const hyper::comm::Group group = mesh.get_group(0);
  auto pg = hyper::comm::process_group_of(group);

  auto timed = [&](const std::function<void()>& fn) {
    pg->barrier()->wait();
    const double t0 = hyper::bench::now_seconds();
    fn();
    const double dt = hyper::bench::now_seconds() - t0;
    at::Tensor t = at::full({1}, dt, at::kDouble);
    return hyper::comm::all_reduce(t, hyper::comm::ReduceOp::kMax, group).item<double>();
  };

  const int64_t cols = 4096;
  std::vector<int64_t> units(n, 1), units_rev(n, 1);
  units[n - 1] = n == 1 ? 1 : 13;
  units_rev[0] = units[n - 1];
  int64_t unit_sum = 0;
  for (auto u : units) unit_sum += u;
  // Rows: a multiple of the unit sum and of n, about --mib MiB in total.
  int64_t rows_total = args.mib * 1024 * 1024 / 4 / cols;
  const int64_t quantum = unit_sum * n;
  rows_total = std::max<int64_t>(quantum, rows_total / quantum * quantum);
  const std::vector<int64_t> shape{rows_total, cols};
  const int64_t numel = rows_total * cols;
  const at::Tensor global = at::arange(numel, at::kFloat).view(shape);

  const hyper::Placements rs_a{hyper::RaggedShard({0}, units)};
  const hyper::Placements rs_b{hyper::RaggedShard({0}, units_rev)};
  const hyper::Placements s0{hyper::Shard(0)};
  const hyper::Placements rep{hyper::Replicate()};

  // The seed's route through Replicate: pad to the largest local, Gloo allgather, trim +
  // concatenate (the full flat tensor on every rank), slice this rank's target interval.
  auto via_replicate = [&](const at::Tensor& local_flat,
                           const std::vector<std::pair<int64_t, int64_t>>& src_iv,
                           std::pair<int64_t, int64_t> dst_iv) {
    int64_t max_len = 0;
    for (const auto& iv : src_iv) max_len = std::max(max_len, iv.second - iv.first);
    at::Tensor padded = at::zeros({max_len}, at::kFloat);
    padded.narrow(0, 0, local_flat.numel()).copy_(local_flat);
    std::vector<std::vector<at::Tensor>> out(1);
    for (int i = 0; i < n; ++i) out[0].push_back(at::empty({max_len}, at::kFloat));
    std::vector<at::Tensor> in{padded};
    pg->allgather(out, in)->wait();
    std::vector<at::Tensor> parts;
    for (int i = 0; i < n; ++i)
      parts.push_back(out[0][i].narrow(0, 0, src_iv[i].second - src_iv[i].first));
    const at::Tensor full = at::cat(parts);
    return full.narrow(0, dst_iv.first, dst_iv.second - dst_iv.first).clone();
  };
  auto padded_bytes = [&](const std::vector<std::pair<int64_t, int64_t>>& src_iv) {
    int64_t max_len = 0;
    for (const auto& iv : src_iv) max_len = std::max(max_len, iv.second - iv.first);
    return static_cast<int64_t>(n) * (n - 1) * max_len * 4;
  };

  std::vector<Row> rows;
  bool all_equal = true;
  auto ragged_row = [&](const std::string& id, const std::string& name,
                        const hyper::Placements& from, const hyper::Placements& to) {
    const hyper::DTensor dt = hyper::distribute_tensor(global, mesh, from);
    const hyper::Layout src(mesh.topology(), from, shape), dst(mesh.topology(), to, shape);
    const auto src_iv = intervals(src, cols), dst_iv = intervals(dst, cols);
    const at::Tensor local_flat = dt.to_local().reshape({-1});
    const int64_t idx = mesh.get_local_rank(0);
    const at::Tensor a = dt.redistribute(mesh, to).to_local().reshape({-1});
    const at::Tensor b = via_replicate(local_flat, src_iv, dst_iv[idx]);
    all_equal = all_equal && at::equal(a, b);
    Row r = hyper::bench::compare(
        name, "via Replicate: pad + allgather + trim + slice", args.reps,
        [&] { return timed([&] { dt.redistribute(mesh, to); }); },
        [&] { return timed([&] { via_replicate(local_flat, src_iv, dst_iv[idx]); }); }, 0.15,
        args.warmup);
    r.id = id;
    const auto plan = mesh.plan_cache()->get(src, dst);
    r.bytes_ours = plan->total_sent() * 4;
    r.bytes_lower = plan->total_lower_bound() * 4;
    r.bytes_base = padded_bytes(src_iv);
    rows.push_back(r);
  };

  const std::string ua = hyper::bench::tuple_string(units);
  const std::string ub = hyper::bench::tuple_string(units_rev);
  // (a) ragged units change.
  ragged_row("redistribute.ragged_units_change.vs_replicate",
             "(a) RS((0,)," + ua + ") -> RS((0,)," + ub + ")", rs_a, rs_b);

  // (a') the same transition vs bare c10d all_to_all_single of the plan's element counts.
  {
    const hyper::DTensor dt = hyper::distribute_tensor(global, mesh, rs_a);
    const hyper::Layout src(mesh.topology(), rs_a, shape), dst(mesh.topology(), rs_b, shape);
    const auto plan = mesh.plan_cache()->get(src, dst);
    const int64_t idx = mesh.get_local_rank(0);
    const std::vector<int64_t> send = plan->send_counts(idx), recv = plan->recv_counts(idx);
    int64_t send_total = 0, recv_total = 0;
    for (auto v : send) send_total += v;
    for (auto v : recv) recv_total += v;
    at::Tensor packed = at::arange(send_total, at::kFloat);
    Row r = hyper::bench::compare(
        "(a') RS((0,)," + ua + ") -> RS((0,)," + ub + ")",
        "bare c10d: Gloo all_to_all_single of the plan's counts", args.reps,
        [&] { return timed([&] { dt.redistribute(mesh, rs_b); }); },
        [&] {
          return timed([&] {
            // c10d may move from the split vectors: fresh copies for every call.
            std::vector<int64_t> out_counts = recv, in_counts = send;
            at::Tensor out = at::empty({recv_total}, at::kFloat);
            pg->all_to_all_single(out, packed, out_counts, in_counts)->wait();
          });
        },
        1.15, args.warmup);
    r.id = "redistribute.ragged_units_change.vs_c10d_alltoall";
    r.bytes_ours = r.bytes_base = plan->total_sent() * 4;
    r.bytes_lower = plan->total_lower_bound() * 4;
    rows.push_back(r);
  }

  // (b) Shard(0) -> ragged.
  ragged_row("redistribute.shard_to_ragged.vs_replicate", "(b) S(0) -> RS((0,)," + ua + ")", s0,
             rs_a);

  // (c) Shard(0) -> Replicate vs the bare all_gather_v of the same bytes.
  {
    const hyper::DTensor dt = hyper::distribute_tensor(global, mesh, s0);
    const at::Tensor local = dt.to_local();
    std::vector<int64_t> sizes(n);
    for (int i = 0; i < n; ++i) sizes[i] = rows_total / n;
    all_equal = all_equal && at::equal(dt.redistribute(mesh, rep).to_local(),
                                       hyper::comm::all_gather_v(local, group, sizes));
    Row r = hyper::bench::compare(
        "(c) S(0) -> R", "bare comm::all_gather_v of the shard", args.reps,
        [&] { return timed([&] { dt.redistribute(mesh, rep); }); },
        [&] { return timed([&] { hyper::comm::all_gather_v(local, group, sizes); }); }, 1.15,
        args.warmup);
    r.id = "redistribute.shard_to_replicate.vs_all_gather_v";
    const hyper::Layout src(mesh.topology(), s0, shape), dst(mesh.topology(), rep, shape);
    const auto plan = mesh.plan_cache()->get(src, dst);
    r.bytes_ours = plan->total_sent() * 4;
    r.bytes_lower = plan->total_lower_bound() * 4;
    r.bytes_base = static_cast<int64_t>(n - 1) * numel * 4;
    rows.push_back(r);
  }

  // (d) plan cache: a small tensor redistributed 100 times on a fresh mesh.
  int64_t misses = -1, hits = -1;
  {
    const hyper::DeviceMesh small_mesh = hyper::init_device_mesh(world, "cpu", {n});
    const std::vector<int64_t> small_shape{static_cast<int64_t>(4 * n), 8};
    const at::Tensor small = at::arange(4 * n * 8, at::kFloat).view(small_shape);
    const hyper::DTensor dt = hyper::distribute_tensor(small, small_mesh, s0);
    const hyper::Placements s1{hyper::Shard(1)};
    hyper::DTensor moved;
    for (int i = 0; i < 100; ++i) moved = dt.redistribute(small_mesh, s1);
    misses = small_mesh.plan_cache()->misses();
    hits = small_mesh.plan_cache()->hits();
    all_equal = all_equal && at::equal(moved.full_tensor(), small);
    const hyper::Layout src(small_mesh.topology(), s0, small_shape),
        dst(small_mesh.topology(), s1, small_shape);
    const auto cache = small_mesh.plan_cache();
    const int inner = 2000;
    Row r = hyper::bench::compare(
        "(d) cached plan lookup, S(0) -> S(1) (4n, 8)", "plan_redistribute (planning)", args.reps,
        [&] {
          const double t0 = hyper::bench::now_seconds();
          for (int i = 0; i < inner; ++i) cache->get(src, dst);
          return (hyper::bench::now_seconds() - t0) / inner;
        },
        [&] {
          const double t0 = hyper::bench::now_seconds();
          for (int i = 0; i < inner; ++i) hyper::plan_redistribute(src, dst);
          return (hyper::bench::now_seconds() - t0) / inner;
        },
        0.0);
    r.id = "plan_cache.lookup_vs_planning";
    r.extra = {{"plan_cache_misses", static_cast<double>(misses)},
               {"plan_cache_hits", static_cast<double>(hits)}};
    rows.push_back(r);
  }

  // Agree on correctness across ranks.
  const bool ok_everywhere =
      hyper::comm::all_reduce(at::full({1}, all_equal ? 0 : 1, at::kInt),
                              hyper::comm::ReduceOp::kMax, group)
          .item<int>() == 0;

  if (rank == 0) {
    char setup[200];
    std::snprintf(setup, sizeof setup,
                  "%d ranks, float32 global (%lld, %lld) = %.1f MiB, Gloo on loopback, median "
                  "of %d alternating reps",
                  n, static_cast<long long>(rows_total), static_cast<long long>(cols),
                  numel * 4.0 / (1024 * 1024), args.reps);
    hyper::bench::print_rows(std::string("redistribute_bench: ") + setup, rows);
    std::printf("(d) plan cache after 100 redistributes of one small DTensor: misses %lld "
                "(must be 1), hits %lld; cached lookup %.3f us vs planning %.3f us\n",
                static_cast<long long>(misses), static_cast<long long>(hits),
                rows.back().ours_s * 1e6, rows.back().base_s * 1e6);
    std::printf("results equal to the baselines on every rank: %s\n",
                ok_everywhere ? "yes" : "NO");
    const std::string out = hyper::bench::result_path(args, argv[0], "redistribute_bench");
    hyper::bench::write_json(out, "redistribute_bench", setup, rows,
                             hyper::bench::run_info(args, n));
    std::printf("wrote %s\n", out.c_str());
  }
  return (ok_everywhere && misses == 1) ? 0 : 1;
}
