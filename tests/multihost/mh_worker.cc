// mh_worker: the workloads of the multi-host test (tests/multihost/run.sh), one rank of a job
// started by hyperrun on each host (network namespace). Every check compares against slicing
// a known global tensor G(step) = arange(rows*cols).reshape(rows, cols) + step, which every
// rank can compute alone (the oracle).
//
//   mh_worker redistribute                       every pair of 2-D layouts on the mesh
//                                                [nodes, ranks per node]: redistribute, then
//                                                compare to_local() with slicing G
//   mh_worker save --dir D --step K              saves {w: G(K) as [S(0),S(1)], step: K} to D
//   mh_worker load --dir D --step K              loads into a 1-D [S(1)] layout on this
//                                                world size and compares with G(K)
//   mh_worker collective-loop --ready F          all_reduce over the world in a loop; writes
//                                                F.<rank> once the first one is done
//   mh_worker save-loop --dir D --ready F        saves step 1 to D/step1, writes F.<rank>,
//                                                then saves steps 2, 3, ... to D/stepK
//
// --timeout-ms T sets the rendezvous and collective timeout (default 5000). A loop ends only
// with an error: the rank prints one line
//   mh_worker: rank R: CommError after 5.0 s: <message>
// (the exception's type: CommError, SaveError, ...; the seconds since the last completed
// operation) and exits 3; after --max-seconds without an error it exits 4. SIGTERM (hyperrun
// stopping the rank after a sibling failed) prints "mh_worker: rank R: stopped by SIGTERM"
// and exits 143.
#include <ATen/ATen.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include "hyper/hyper.h"
#include "tools/cli/args.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string mode;
  std::string dir;
  std::string ready;
  int64_t step = 0;
  int64_t timeout_ms = 5000;
  double max_seconds = 60;
  int64_t rows = 13;
  int64_t cols = 10;
};

[[noreturn]] void usage(const std::string& msg) {
  std::fprintf(stderr,
               "mh_worker: %s\n"
               "usage: mh_worker redistribute|save|load|collective-loop|save-loop [--dir D]\n"
               "       [--step K] [--ready F] [--timeout-ms T] [--max-seconds S]\n"
               "       [--rows R] [--cols C]\n",
               msg.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  hyper::cli::ArgParser p({"unknown argument {arg}", "missing value after {arg}"},
                          hyper::cli::Positionals::kInterleaved);
  p.option({"--dir"}, [&](const std::string& v) { a.dir = v; });
  p.option({"--ready"}, [&](const std::string& v) { a.ready = v; });
  p.option({"--step"}, [&](const std::string& v) { a.step = std::stoll(v); });
  p.option({"--timeout-ms"}, [&](const std::string& v) { a.timeout_ms = std::stoll(v); });
  p.option({"--max-seconds"}, [&](const std::string& v) { a.max_seconds = std::stod(v); });
  p.option({"--rows"}, [&](const std::string& v) { a.rows = std::stoll(v); });
  p.option({"--cols"}, [&](const std::string& v) { a.cols = std::stoll(v); });
  std::vector<std::string> rest;
  try {
    rest = p.parse(argc, argv);
  } catch (const std::exception& e) {
    usage(e.what());
  }
  if (rest.size() != 1) usage("expected one mode");
  a.mode = rest[0];
  return a;
}

int g_rank = -1;

extern "C" void on_sigterm(int) {
  char buf[96];
  int n = std::snprintf(buf, sizeof buf, "mh_worker: rank %d: stopped by SIGTERM\n", g_rank);
  ssize_t ignored = ::write(STDERR_FILENO, buf, n > 0 ? static_cast<size_t>(n) : 0);
  (void)ignored;
  ::_exit(143);
}

at::Tensor global_tensor(const Args& a, int64_t step) {
  return at::arange(a.rows * a.cols, at::kFloat).reshape({a.rows, a.cols}) +
         static_cast<double>(step);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

/// The 2-D mesh [nodes, ranks per node] when the launcher says so, else [world].
hyper::DeviceMesh host_mesh(const hyper::World& world) {
  const int nodes = env_int("GROUP_WORLD_SIZE", 1);
  const int per_node = env_int("LOCAL_WORLD_SIZE", world.size());
  if (nodes > 1 && per_node > 1 && nodes * per_node == world.size()) {
    return hyper::init_device_mesh(world, "cpu", {nodes, per_node}, {"host", "local"});
  }
  return hyper::init_device_mesh(world, "cpu", {world.size()}, {"all"});
}

void touch(const std::string& path) {
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << "ready\n"; }
  std::rename(tmp.c_str(), path.c_str());
}

/// Every pair of layouts from {S(0), S(1), R}^mesh_dims.
int run_redistribute(const Args& a, const hyper::World& world) {
  auto mesh = host_mesh(world);
  const at::Tensor g = global_tensor(a, 0);
  std::vector<hyper::Placements> layouts;
  const std::vector<hyper::Placement> one = {hyper::Shard(0), hyper::Shard(1),
                                             hyper::Replicate()};
  if (mesh.ndim() == 1) {
    for (const auto& p : one) layouts.push_back({p});
  } else {
    for (const auto& p : one)
      for (const auto& q : one) layouts.push_back({p, q});
  }
  int checked = 0;
  for (const auto& src : layouts) {
    for (const auto& dst : layouts) {
      hyper::DTensor moved = hyper::distribute_tensor(g, mesh, src).redistribute(mesh, dst);
      at::Tensor expected = hyper::distribute_tensor(g, mesh, dst).to_local();
      if (!at::equal(moved.to_local(), expected)) {
        std::fprintf(stderr, "mh_worker: rank %d: redistribute %s -> %s: MISMATCH\n",
                     world.rank(), hyper::to_string(src).c_str(), hyper::to_string(dst).c_str());
        return 1;
      }
      ++checked;
    }
  }
  std::printf("mh_worker: rank %d: redistribute: %d transitions on mesh of %lld dims ok\n",
              world.rank(), checked, static_cast<long long>(mesh.ndim()));
  return 0;
}

hyper::dcp::StateDict save_state(const Args& a, const hyper::DeviceMesh& mesh, int64_t step) {
  hyper::Placements p = mesh.ndim() == 2 ? hyper::Placements{hyper::Shard(0), hyper::Shard(1)}
                                         : hyper::Placements{hyper::Shard(0)};
  return {{"w", hyper::distribute_tensor(global_tensor(a, step), mesh, p)}, {"step", step}};
}

int run_save(const Args& a, const hyper::World& world) {
  auto mesh = host_mesh(world);
  auto sd = save_state(a, mesh, a.step);
  hyper::dcp::save(sd, a.dir);
  std::printf("mh_worker: rank %d: saved step %lld\n", world.rank(),
              static_cast<long long>(a.step));
  return 0;
}

int run_load(const Args& a, const hyper::World& world) {
  auto mesh = hyper::init_device_mesh(world, "cpu", {world.size()}, {"all"});
  const at::Tensor g = global_tensor(a, a.step);
  hyper::dcp::StateDict sd = {
      {"w", hyper::distribute_tensor(at::zeros_like(g), mesh, {hyper::Shard(1)})},
      {"step", int64_t{-1}}};
  hyper::dcp::load(sd, a.dir);
  const at::Tensor got = std::get<hyper::DTensor>(sd["w"]).to_local();
  const at::Tensor expected = hyper::distribute_tensor(g, mesh, {hyper::Shard(1)}).to_local();
  const int64_t step = std::get<int64_t>(sd["step"]);
  if (step != a.step || !at::equal(got, expected)) {
    std::fprintf(stderr, "mh_worker: rank %d: load of %s: MISMATCH (step %lld, expected %lld)\n",
                 world.rank(), a.dir.c_str(), static_cast<long long>(step),
                 static_cast<long long>(a.step));
    return 1;
  }
  std::printf("mh_worker: rank %d: loaded step %lld from %s: values equal\n", world.rank(),
              static_cast<long long>(step), a.dir.c_str());
  return 0;
}

const char* type_of(const std::exception& e) {
  if (dynamic_cast<const hyper::SaveError*>(&e)) return "SaveError";
  if (dynamic_cast<const hyper::CommError*>(&e)) return "CommError";
  if (dynamic_cast<const hyper::IOError*>(&e)) return "IOError";
  if (dynamic_cast<const hyper::ValueError*>(&e)) return "ValueError";
  return "std::exception";
}

/// Runs `body` until it throws; reports the error and the seconds since the last success.
template <class F>
int loop_until_error(const Args& a, int rank, F body) {
  const auto start = Clock::now();
  auto last_ok = start;
  bool announced = false;
  while (std::chrono::duration<double>(Clock::now() - start).count() < a.max_seconds) {
    try {
      body();
    } catch (const std::exception& e) {
      const double s = std::chrono::duration<double>(Clock::now() - last_ok).count();
      std::fprintf(stderr, "mh_worker: rank %d: %s after %.1f s: %s\n", rank, type_of(e), s,
                   e.what());
      return 3;
    }
    last_ok = Clock::now();
    if (!announced && !a.ready.empty()) {
      touch(a.ready + "." + std::to_string(rank));
      announced = true;
    }
  }
  std::fprintf(stderr, "mh_worker: rank %d: no error within %g s\n", rank, a.max_seconds);
  return 4;
}

int run_collective_loop(const Args& a, const hyper::World& world) {
  hyper::comm::Group group = world.group();
  const int n = world.size();
  return loop_until_error(a, world.rank(), [&] {
    at::Tensor t = at::full({1024}, static_cast<float>(world.rank()));
    at::Tensor sum = hyper::comm::all_reduce(t, hyper::comm::ReduceOp::kSum, group);
    const float expected = static_cast<float>(n) * static_cast<float>(n - 1) / 2;
    if (sum[0].item<float>() != expected) throw std::runtime_error("all_reduce result wrong");
  });
}

int run_save_loop(const Args& a, const hyper::World& world) {
  auto mesh = host_mesh(world);
  int64_t step = 1;
  return loop_until_error(a, world.rank(), [&] {
    auto sd = save_state(a, mesh, step);
    hyper::dcp::save(sd, a.dir + "/step" + std::to_string(step));
    ++step;
  });
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  g_rank = env_int("RANK", -1);
  struct sigaction sa {};
  sa.sa_handler = on_sigterm;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGTERM, &sa, nullptr);
  try {
    hyper::ProcessGroupOptions options;
    options.timeout = std::chrono::milliseconds(a.timeout_ms);
    hyper::World world = hyper::init_process_group(options);
    if (a.mode == "redistribute") return run_redistribute(a, world);
    if (a.mode == "save") return run_save(a, world);
    if (a.mode == "load") return run_load(a, world);
    if (a.mode == "collective-loop") return run_collective_loop(a, world);
    if (a.mode == "save-loop") return run_save_loop(a, world);
    usage("unknown mode '" + a.mode + "'");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mh_worker: rank %d: %s: %s\n", g_rank, type_of(e), e.what());
    return 1;
  }
}
