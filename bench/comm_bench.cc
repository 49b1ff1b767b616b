// comm_bench: hyper's variable-length collectives vs the baselines they replace, timed
// side by side in one run. Start it on N ranks (scripts/bench.sh runs a grid of sizes and
// rank counts):
//
//   build/tools/hyperrun -n 4 -- build/bench/comm_bench [--mib 64] [--reps 5] [--warmup 1]
//                                                       [--out FILE]
//
// --mib MiB of float32 in total, split over the ranks by units (1,...,1,13) (the last rank
// holds 13 units, every other rank 1). Rows (targets in brackets):
//   all_gather_v            vs  the seed's CPU path: pad to the largest rank, Gloo
//                               allgather, trim + concatenate                   [<= 0.3]
//   all_gather_v            vs  bare c10d: Gloo's equal-size allgather of the same total
//                               bytes (+ concatenate)                           [<= 1.0]
//   scatter_v from rank 0 (all sends in flight)  vs  sends issued one after another [<= 0.8]
//   all_to_all_v (every rank spreads its rows evenly over all ranks)  vs  bare c10d:
//                               ProcessGroupGloo::all_to_all_single, same splits    [<= 1.15]
//   reduce_scatter_v        vs  c10d 2.x's Gloo reduce_scatter of an uneven list      [report]
//   all_gather_v, Gloo ring route  vs  its point-to-point route                        [report]
// Bytes: ours from hyper's comm::stats counters (one untimed call, summed over ranks), the
// baselines' from their algorithm; the lower bound is what any algorithm must move.
// Rank 0 prints the table and writes JSON (default build/bench/results/comm_bench.json).

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/group.h"
#include "hyper/comm/world.h"

using hyper::bench::Row;

int main(int argc, char** argv) {
  const hyper::bench::Args args = hyper::bench::parse_args("comm_bench", argc, argv);
  hyper::ProcessGroupOptions opts;
  opts.timeout = std::chrono::seconds(300);
  hyper::World world = hyper::init_process_group(opts);
  const int rank = world.rank();
  const int n = world.size();
  hyper::comm::Group group = world.group();
  auto pg = hyper::comm::process_group_of(group);

  // Times `fn` on every rank between barriers; returns the slowest rank's seconds.
  auto timed = [&](const std::function<void()>& fn) {
    pg->barrier()->wait();
    const double t0 = hyper::bench::now_seconds();
    fn();
    double dt = hyper::bench::now_seconds() - t0;
    at::Tensor t = at::full({1}, dt, at::kDouble);
    return hyper::comm::all_reduce(t, hyper::comm::ReduceOp::kMax, group).item<double>();
  };

  const int64_t total = args.mib * 1024 * 1024 / 4;  // float32 elements
  std::vector<int64_t> units(n, 1);
  units[n - 1] = n == 1 ? 1 : 13;
  int64_t unit_sum = 0;
  for (auto u : units) unit_sum += u;
  std::vector<int64_t> sizes(n);
  for (int i = 0; i < n; ++i) sizes[i] = total / unit_sum * units[i];
  int64_t max_rows = 0, sum_rows = 0;
  for (auto s : sizes) max_rows = std::max(max_rows, s), sum_rows += s;

  at::Tensor mine = at::arange(sizes[rank], at::kFloat).add_(1000.0f * rank);
  std::vector<Row> rows;
  const std::string units_s = hyper::bench::tuple_string(units);

  // Bytes hyper's counters see for one call of `fn`, summed over ranks (untimed).
  auto counted_bytes = [&](const std::function<void()>& fn) {
    hyper::comm::reset_stats(group);
    fn();
    const int64_t mine_sent = hyper::comm::stats(group).bytes_sent();
    at::Tensor t = at::full({1}, mine_sent, at::kLong);
    const int64_t sum =
        hyper::comm::all_reduce(t, hyper::comm::ReduceOp::kSum, group).item<int64_t>();
    hyper::comm::reset_stats(group);
    return sum;
  };
  const int64_t gather_lower = static_cast<int64_t>(n - 1) * sum_rows * 4;

  // 1. all_gather_v vs padded allgather + trim.
  {
    Row r = hyper::bench::compare(
        "all_gather_v units " + units_s, "pad to largest + allgather + trim", args.reps,
        [&] { return timed([&] { hyper::comm::all_gather_v(mine, group, sizes); }); },
        [&] {
          return timed([&] {
            at::Tensor padded = at::zeros({max_rows}, at::kFloat);
            padded.narrow(0, 0, sizes[rank]).copy_(mine);
            std::vector<std::vector<at::Tensor>> out(1);
            for (int i = 0; i < n; ++i) out[0].push_back(at::empty({max_rows}, at::kFloat));
            std::vector<at::Tensor> in{padded};
            pg->allgather(out, in)->wait();
            std::vector<at::Tensor> parts;
            for (int i = 0; i < n; ++i) parts.push_back(out[0][i].narrow(0, 0, sizes[i]));
            at::cat(parts);
          });
        },
        0.3, args.warmup);
    r.id = "all_gather_v.vs_padded";
    r.bytes_ours = counted_bytes([&] { hyper::comm::all_gather_v(mine, group, sizes); });
    r.bytes_base = static_cast<int64_t>(n) * (n - 1) * max_rows * 4;
    r.bytes_lower = gather_lower;
    rows.push_back(r);
  }
  // 2. all_gather_v vs an even allgather of the same total.
  {
    const int64_t even = sum_rows / n;
    at::Tensor even_in = at::ones({even}, at::kFloat);
    Row r = hyper::bench::compare(
        "all_gather_v units " + units_s, "bare c10d: even Gloo allgather, same total", args.reps,
        [&] { return timed([&] { hyper::comm::all_gather_v(mine, group, sizes); }); },
        [&] {
          return timed([&] {
            std::vector<std::vector<at::Tensor>> out(1);
            for (int i = 0; i < n; ++i) out[0].push_back(at::empty({even}, at::kFloat));
            std::vector<at::Tensor> in{even_in};
            pg->allgather(out, in)->wait();
            at::cat(out[0]);
          });
        },
        1.0, args.warmup);
    r.id = "all_gather_v.vs_c10d_allgather";
    r.bytes_ours = counted_bytes([&] { hyper::comm::all_gather_v(mine, group, sizes); });
    r.bytes_base = (n - 1) * even * n * 4;
    r.bytes_lower = gather_lower;
    rows.push_back(r);
  }
  // 3. scatter_v (all sends in flight) vs sends one after another.
  {
    at::Tensor full = rank == 0 ? at::arange(sum_rows, at::kFloat) : at::empty({0}, at::kFloat);
    int tag = 100;
    Row r = hyper::bench::compare(
        "scatter_v from rank 0, units " + units_s, "send to each rank in turn", args.reps,
        [&] { return timed([&] { hyper::comm::scatter_v(full, sizes, 0, group); }); },
        [&] {
          ++tag;
          return timed([&] {
            if (rank == 0) {
              int64_t off = sizes[0];
              for (int p = 1; p < n; ++p) {
                std::vector<at::Tensor> t{full.narrow(0, off, sizes[p]).contiguous()};
                pg->send(t, p, tag)->wait();
                off += sizes[p];
              }
            } else {
              std::vector<at::Tensor> t{at::empty({sizes[rank]}, at::kFloat)};
              pg->recv(t, 0, tag)->wait();
            }
          });
        },
        0.8, args.warmup);
    r.id = "scatter_v.vs_sequential_sends";
    r.bytes_ours = counted_bytes([&] { hyper::comm::scatter_v(full, sizes, 0, group); });
    r.bytes_base = r.bytes_lower = (sum_rows - sizes[0]) * 4;
    rows.push_back(r);
  }
  // 4. all_to_all_v vs bare c10d all_to_all_single with the same uneven splits: every rank
  //    spreads its sizes[rank] rows evenly over all ranks (the last one takes the remainder).
  {
    auto spread = [&](int64_t rows_of) {
      std::vector<int64_t> v(n, rows_of / n);
      v[n - 1] += rows_of % n;
      return v;
    };
    const std::vector<int64_t> in_splits = spread(sizes[rank]);
    std::vector<int64_t> out_splits(n);
    for (int j = 0; j < n; ++j) out_splits[j] = spread(sizes[j])[rank];
    int64_t out_rows = 0;
    for (auto v : out_splits) out_rows += v;
    int64_t lower = 0;
    for (int src = 0; src < n; ++src) {
      const auto v = spread(sizes[src]);
      for (int dst = 0; dst < n; ++dst) lower += dst == src ? 0 : v[dst] * 4;
    }
    // c10d takes the split vectors by non-const reference and may move from them: fresh
    // copies for every call.
    auto bare = [&] {
      std::vector<int64_t> c10d_in = in_splits, c10d_out = out_splits;
      at::Tensor out = at::empty({out_rows}, at::kFloat);
      pg->all_to_all_single(out, mine, c10d_out, c10d_in)->wait();
      return out;
    };
    const bool same =
        at::equal(hyper::comm::all_to_all_v(mine, in_splits, out_splits, group), bare());
    HYPER_CHECK_INTERNAL(
        same, "comm_bench: all_to_all_v differs from c10d all_to_all_single on rank ", rank);
    Row r = hyper::bench::compare(
        "all_to_all_v units " + units_s + ", spread evenly",
        "bare c10d: Gloo all_to_all_single, same splits", args.reps,
        [&] {
          return timed([&] { hyper::comm::all_to_all_v(mine, in_splits, out_splits, group); });
        },
        [&] { return timed([&] { bare(); }); }, 1.15,
        args.warmup);
    r.id = "all_to_all_v.vs_c10d_alltoall";
    r.bytes_ours = counted_bytes(
        [&] { hyper::comm::all_to_all_v(mine, in_splits, out_splits, group); });
    r.bytes_base = r.bytes_lower = lower;
    rows.push_back(r);
  }

  // 5. reduce_scatter_v vs c10d 2.x's native Gloo reduce_scatter with an uneven list of
  //    pieces (new in LibTorch 2.x; 1.13 refused it): every rank holds the whole total, rank r
  //    receives the sum of piece r. Measured to decide whether hyper should call it.
  {
    const at::Tensor whole = at::arange(sum_rows, at::kFloat).add_(rank);
    auto native = [&] {
      std::vector<std::vector<at::Tensor>> in(1);
      int64_t off = 0;
      for (int j = 0; j < n; ++j) {
        in[0].push_back(whole.narrow(0, off, sizes[j]));
        off += sizes[j];
      }
      std::vector<at::Tensor> out{at::empty({sizes[rank]}, at::kFloat)};
      pg->reduce_scatter(out, in)->wait();
      return out[0];
    };
    const at::Tensor ours = hyper::comm::reduce_scatter_v(whole, sizes, hyper::comm::ReduceOp::kSum, group);
    HYPER_CHECK_INTERNAL(at::allclose(ours, native()),
                         "comm_bench: reduce_scatter_v differs from c10d reduce_scatter on rank ",
                         rank);
    Row r = hyper::bench::compare(
        "reduce_scatter_v units " + units_s, "c10d 2.x: Gloo reduce_scatter, uneven list",
        args.reps,
        [&] {
          return timed([&] {
            hyper::comm::reduce_scatter_v(whole, sizes, hyper::comm::ReduceOp::kSum, group);
          });
        },
        [&] { return timed([&] { native(); }); }, 0, args.warmup);
    r.id = "reduce_scatter_v.vs_c10d_reduce_scatter";
    r.bytes_ours = counted_bytes(
        [&] { hyper::comm::reduce_scatter_v(whole, sizes, hyper::comm::ReduceOp::kSum, group); });
    // Lower bound: every rank's contribution to each other rank's piece reaches it once.
    r.bytes_lower = (n - 1) * sum_rows * 4;
    rows.push_back(r);
  }

  // 6. all_gather_v's two routes side by side: Gloo's native ring vs point-to-point (kAuto
  //    takes the ring up to 64 KiB of output, docs/comm.md; these rows back that threshold).
  {
    using hyper::comm::AllGatherRoute;
    auto gather_by = [&](AllGatherRoute route) {
      hyper::comm::set_all_gather_route(group, route);  // same sequence on every rank
      hyper::comm::all_gather_v(mine, group, sizes);
    };
    Row r = hyper::bench::compare(
        "all_gather_v units " + units_s + ", Gloo ring route", "point-to-point route", args.reps,
        [&] { return timed([&] { gather_by(AllGatherRoute::kGlooRing); }); },
        [&] { return timed([&] { gather_by(AllGatherRoute::kPointToPoint); }); }, 0,
        args.warmup);
    r.id = "all_gather_v.ring_vs_point_to_point";
    r.bytes_ours = counted_bytes([&] { gather_by(AllGatherRoute::kGlooRing); });
    r.bytes_base = counted_bytes([&] { gather_by(AllGatherRoute::kPointToPoint); });
    r.bytes_lower = gather_lower;
    hyper::comm::set_all_gather_route(group, AllGatherRoute::kAuto);
    rows.push_back(r);
  }

  if (rank == 0) {
    char setup[200];
    std::snprintf(setup, sizeof setup, "%d ranks, %lld MiB float32 in total split by units %s, "
                  "Gloo on loopback, median of %d alternating reps", n,
                  static_cast<long long>(args.mib), units_s.c_str(), args.reps);
    hyper::bench::print_rows(std::string("comm_bench: ") + setup, rows);
    const std::string out = hyper::bench::result_path(args, argv[0], "comm_bench");
    hyper::bench::write_json(out, "comm_bench", setup, rows, hyper::bench::run_info(args, n));
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}
