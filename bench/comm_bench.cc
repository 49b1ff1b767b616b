// comm_bench: hyper's variable-length collectives vs the baselines they replace, timed
// side by side in one run. Start it on 4 ranks:
//
//   build/tools/hyperrun -n 4 -- build/bench/comm_bench [--mib 64] [--reps 5] [--out FILE]
//
// Rows (issue targets in brackets):
//   all_gather_v, units (1,1,1,13)  vs  the seed's CPU path: pad to the largest rank, Gloo
//                                        allgather, trim + concatenate          [<= 0.3]
//   all_gather_v, units (1,1,1,13)  vs  Gloo's equal-size allgather of the same total
//                                        bytes (+ concatenate)                  [<= 1.0]
//   scatter_v from rank 0 (all sends in flight)  vs  sends issued one after another [<= 0.8]
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

  // 1. all_gather_v vs padded allgather + trim.
  {
    Row r = hyper::bench::compare(
        "all_gather_v units (1,1,1,13)", "pad to largest + allgather + trim", args.reps,
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
        0.3);
    r.bytes_ours = (n - 1) * sum_rows * 4;
    r.bytes_base = static_cast<int64_t>(n) * (n - 1) * max_rows * 4;
    rows.push_back(r);
  }
  // 2. all_gather_v vs an even allgather of the same total.
  {
    const int64_t even = sum_rows / n;
    at::Tensor even_in = at::ones({even}, at::kFloat);
    Row r = hyper::bench::compare(
        "all_gather_v units (1,1,1,13)", "even Gloo allgather, same total", args.reps,
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
        1.0);
    r.bytes_ours = (n - 1) * sum_rows * 4;
    r.bytes_base = (n - 1) * even * n * 4;
    rows.push_back(r);
  }
  // 3. scatter_v (all sends in flight) vs sends one after another.
  {
    at::Tensor full = rank == 0 ? at::arange(sum_rows, at::kFloat) : at::empty({0}, at::kFloat);
    int tag = 100;
    Row r = hyper::bench::compare(
        "scatter_v from rank 0, units (1,1,1,13)", "send to each rank in turn", args.reps,
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
        0.8);
    r.bytes_ours = r.bytes_base = (sum_rows - sizes[0]) * 4;
    rows.push_back(r);
  }

  if (rank == 0) {
    char setup[160];
    std::snprintf(setup, sizeof setup, "%d ranks, %lld MiB float32 in total, Gloo on loopback, "
                  "median of %d alternating reps", n, static_cast<long long>(args.mib), args.reps);
    hyper::bench::print_rows(std::string("comm_bench: ") + setup, rows);
    const std::string out = hyper::bench::result_path(args, argv[0], "comm_bench");
    hyper::bench::write_json(out, "comm_bench", setup, rows);
    std::printf("wrote %s\n", out.c_str());
  }
  return 0;
}
