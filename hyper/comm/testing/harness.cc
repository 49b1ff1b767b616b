#include "hyper/comm/testing/harness.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include "hyper/comm/c10_errors.h"
#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"

extern char** environ;

namespace hyper::comm::testing {

namespace {

using Clock = std::chrono::steady_clock;

ProcessGroupOptions rank_options(const HarnessOptions& o) {
  ProcessGroupOptions p;
  p.timeout = o.timeout;
  p.gloo_hostname = "127.0.0.1";
  p.cuda_backend = o.cuda_backend;
  return p;
}

int failed_parts() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr) return 0;
  const auto* result = info->result();
  int n = 0;
  for (int i = 0; i < result->total_part_count(); ++i)
    if (result->GetTestPartResult(i).failed()) ++n;
  return n;
}

// Runs the body for one rank; fills the outcome.
void run_rank(int rank, int world_size, const World& world, const RankBody& body,
              RankOutcome& out, Clock::time_point start, bool track_gtest) {
  ::testing::ScopedTrace trace(__FILE__, __LINE__, "rank " + std::to_string(rank));
  const int failures_before = track_gtest ? failed_parts() : 0;
  try {
    body(rank, world_size, world);
    out.ok = true;
  } catch (const std::exception& e) {
    out.error = message_of(e);
  } catch (...) {
    out.error = "unknown exception";
  }
  if (out.ok && track_gtest && failed_parts() > failures_before) {
    out.ok = false;
    out.error = "gtest expectation failed (see the output above)";
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  out.finished = true;
}

// Ends a rank whose body passed: once every peer's body has ended, a barrier (an
// all_reduce) on the world group, so that no rank tears down its Gloo pairs while a peer
// is still connecting or sending ("Connection closed by peer"). Each rank first records
// in the store whether its body passed; if one failed (or a peer does not report within
// `wait`, the harness timeout), the barrier is skipped: the failure is reported, not turned into a hang. A
// failing barrier is printed but does not fail a rank whose body passed.
void end_together(int rank, int world_size, const World& world,
                  const c10::intrusive_ptr<c10d::Store>& store, bool body_ok,
                  std::chrono::milliseconds wait) {
  const std::string prefix = "hyper_harness/done/";
  try {
    store->set(prefix + std::to_string(rank), std::vector<uint8_t>{body_ok ? uint8_t{1} : uint8_t{0}});
    if (!body_ok || world_size == 1) return;
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) keys.push_back(prefix + std::to_string(r));
    store->wait(keys, wait);
    for (const auto& k : keys)
      if (store->get(k) != std::vector<uint8_t>{1}) return;
    comm::all_reduce(at::zeros({1}), comm::ReduceOp::kSum, world.group());
  } catch (const std::exception& e) {
    std::cerr << "hyper test harness: rank " << rank << ": end-of-body barrier skipped: "
              << message_of(e) << std::endl;
  }
}

}  // namespace

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw IOError(std::string("free_tcp_port: socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;  // the OS picks
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) throw IOError(std::string("free_tcp_port: bind to port 0: ") + std::strerror(err));
  return ntohs(addr.sin_port);
}

int free_tcp_port_of_rank0(int rank, const World& world, const std::string& key) {
  auto store = comm::store_of(world);
  HYPER_CHECK_VALUE(store, "free_tcp_port_of_rank0: the world has no store");
  if (rank == 0) {
    const std::string port = std::to_string(free_tcp_port());
    store->set(key, std::vector<uint8_t>(port.begin(), port.end()));
  }
  const std::vector<uint8_t> got = store->get(key);  // waits for rank 0
  return std::stoi(std::string(got.begin(), got.end()));
}

std::string describe_failures(const std::vector<RankOutcome>& outcomes) {
  std::ostringstream os;
  bool first = true;
  for (const auto& o : outcomes) {
    if (o.ok) continue;
    if (!first) os << "; ";
    first = false;
    os << "rank " << o.rank << ": " << o.error;
  }
  return os.str();
}

std::vector<RankOutcome> run_threads_collect(int world_size, const RankBody& body,
                                             const HarnessOptions& options) {
  HYPER_CHECK_VALUE(world_size >= 1, "run_threads: world size ", world_size);
  auto store = c10::make_intrusive<c10d::HashStore>();
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    int finished = 0;
    std::vector<RankOutcome> outcomes;
  };
  auto shared = std::make_shared<Shared>();
  shared->outcomes.resize(world_size);
  const auto start = Clock::now();
  std::vector<std::thread> threads;
  for (int r = 0; r < world_size; ++r) {
    shared->outcomes[r].rank = r;
    World world = make_world(store, r, world_size, rank_options(options));
    threads.emplace_back([r, world_size, world, body, shared, start, store,
                          timeout = options.timeout] {
      RankOutcome out;
      out.rank = r;
      run_rank(r, world_size, world, body, out, start, /*track_gtest=*/false);
      {
        // Finished = the body ended; the end-of-body barrier below is not the body's time.
        std::lock_guard<std::mutex> lock(shared->mu);
        shared->outcomes[r] = out;
        ++shared->finished;
        shared->cv.notify_all();
      }
      end_together(r, world_size, world, store, out.ok, timeout);
    });
  }
  {
    std::unique_lock<std::mutex> lock(shared->mu);
    const bool all = shared->cv.wait_for(lock, options.deadline,
                                         [&] { return shared->finished == world_size; });
    if (!all) {
      std::ostringstream os;
      os << "hyper thread harness: ranks [";
      bool first = true;
      for (const auto& o : shared->outcomes) {
        if (o.finished) continue;
        os << (first ? "" : ",") << o.rank;
        first = false;
      }
      os << "] of " << world_size << " did not finish within "
         << std::chrono::duration<double>(options.deadline).count()
         << " s; aborting the test process (threads cannot be killed)";
      const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
      if (info) os << " [test " << info->test_suite_name() << "." << info->name() << "]";
      std::cerr << os.str() << std::endl;
      std::fflush(stderr);
      std::abort();
    }
  }
  for (auto& t : threads) t.join();
  return shared->outcomes;
}

void run_threads(int world_size, const RankBody& body, const HarnessOptions& options) {
  auto outcomes = run_threads_collect(world_size, body, options);
  const std::string f = describe_failures(outcomes);
  if (!f.empty()) {
    throw std::runtime_error("run_threads(" + std::to_string(world_size) + "): " + f);
  }
}

// ---------------------------------------------------------------------------------------
// Process mode

namespace {

const char* const kEnvRank = "HYPER_TEST_RANK";
const char* const kEnvWorld = "HYPER_TEST_WORLD";
const char* const kEnvDir = "HYPER_TEST_DIR";
const char* const kEnvCall = "HYPER_TEST_CALL";

// Index of run_processes calls within the current test run (children skip all but theirs).
// Reset when each test starts, so that --gtest_repeat (which runs the same test again)
// numbers its calls from 0 as the re-executed child does.
int g_call_index = 0;

struct CallIndexReset : ::testing::EmptyTestEventListener {
  void OnTestStart(const ::testing::TestInfo&) override { g_call_index = 0; }
};
const bool g_call_index_reset_registered = [] {
  ::testing::UnitTest::GetInstance()->listeners().Append(new CallIndexReset);
  return true;
}();

int next_call_index() { return g_call_index++; }

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string tail(const std::string& s, std::size_t n) {
  return s.size() <= n ? s : "..." + s.substr(s.size() - n);
}

}  // namespace

bool in_rank_process() { return std::getenv(kEnvRank) != nullptr; }

HarnessOptions with_timeouts(std::chrono::milliseconds timeout, std::chrono::milliseconds deadline) {
  HarnessOptions o;
  o.timeout = timeout;
  o.deadline = deadline;
  return o;
}

void run_on_mesh(const std::vector<int64_t>& mesh_shape,
                 const std::function<void(const DeviceMesh&)>& fn, const HarnessOptions& options) {
  int n = 1;
  for (int64_t s : mesh_shape) n *= static_cast<int>(s);
  run_threads(
      n,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", mesh_shape);
        fn(mesh);
        for (int64_t d = 0; d < mesh.ndim(); ++d)
          all_reduce(at::zeros({1}), ReduceOp::kSum, mesh.get_group(d));
      },
      options);
}

std::vector<RankOutcome> run_processes_collect(int world_size, const RankBody& body,
                                               const HarnessOptions& options) {
  HYPER_CHECK_VALUE(world_size >= 1, "run_processes: world size ", world_size);
  const int call = next_call_index();
  if (in_rank_process()) {
    // Child: run our rank for our call only, then leave the process.
    const int my_call = std::atoi(std::getenv(kEnvCall));
    if (call != my_call) {
      std::vector<RankOutcome> fake(world_size);
      for (int r = 0; r < world_size; ++r) {
        fake[r].rank = r;
        fake[r].ok = fake[r].finished = true;
      }
      return fake;
    }
    const int rank = std::atoi(std::getenv(kEnvRank));
    const int n = std::atoi(std::getenv(kEnvWorld));
    const std::string dir = std::getenv(kEnvDir);
    RankOutcome out;
    out.rank = rank;
    try {
      auto store = c10::make_intrusive<c10d::FileStore>(dir + "/store", n);
      World world = make_world(store, rank, n, rank_options(options));
      run_rank(rank, n, world, body, out, Clock::now(), /*track_gtest=*/true);
      end_together(rank, n, world, store, out.ok, options.timeout);
    } catch (const std::exception& e) {
      out.error = "setting up the rank: " + message_of(e);
    }
    {
      std::ofstream f(dir + "/rank" + std::to_string(rank) + ".err");
      f << out.error;
    }
    std::cout.flush();
    std::cerr.flush();
    std::fflush(nullptr);
    std::_Exit(out.ok ? 0 : 1);
  }

  // Parent.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  if (info == nullptr)
    throw std::logic_error("run_processes must be called from a gtest test body");
  const std::string filter =
      std::string("--gtest_filter=") + info->test_suite_name() + "." + info->name();
  char tmpl[] = "/tmp/hyper_mp_XXXXXX";
  if (mkdtemp(tmpl) == nullptr)
    throw IOError(std::string("run_processes: mkdtemp failed: ") + std::strerror(errno));
  const std::string dir = tmpl;
  char exe[4096];
  const ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) throw IOError("run_processes: cannot read /proc/self/exe");
  exe[len] = '\0';

  std::vector<pid_t> pids(world_size, -1);
  std::vector<RankOutcome> outcomes(world_size);
  const auto start = Clock::now();
  for (int r = 0; r < world_size; ++r) {
    outcomes[r].rank = r;
    // Everything the child needs is prepared before spawning (posix_spawn = fork+exec,
    // nothing runs in the child between them).
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string kv = *e;
      if (kv.rfind("HYPER_TEST_", 0) == 0) continue;
      env_strings.push_back(kv);
    }
    env_strings.push_back(std::string(kEnvRank) + "=" + std::to_string(r));
    env_strings.push_back(std::string(kEnvWorld) + "=" + std::to_string(world_size));
    env_strings.push_back(std::string(kEnvDir) + "=" + dir);
    env_strings.push_back(std::string(kEnvCall) + "=" + std::to_string(call));
    std::vector<char*> envp;
    for (auto& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string arg0 = exe, arg1 = filter, arg2 = "--gtest_brief=1";
    char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
    const std::string log = dir + "/rank" + std::to_string(r) + ".log";
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, exe, &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      outcomes[r].finished = true;
      outcomes[r].error = std::string("posix_spawn failed: ") + std::strerror(rc);
      continue;
    }
    pids[r] = pid;
  }

  int running = 0;
  for (pid_t p : pids) running += p > 0;
  while (running > 0) {
    for (int r = 0; r < world_size; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      const pid_t w = waitpid(pids[r], &status, WNOHANG);
      if (w == 0) continue;
      pids[r] = -1;
      --running;
      auto& o = outcomes[r];
      o.finished = true;
      o.seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const std::string err = read_file(dir + "/rank" + std::to_string(r) + ".err");
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        o.ok = true;
      } else if (WIFEXITED(status)) {
        o.error = err.empty() ? "exited with status " + std::to_string(WEXITSTATUS(status))
                              : err;
        if (err.empty()) {
          o.error += "; output: " + tail(read_file(dir + "/rank" + std::to_string(r) + ".log"),
                                         1500);
        }
      } else if (WIFSIGNALED(status)) {
        o.error = "killed by signal " + std::to_string(WTERMSIG(status)) + "; output: " +
                  tail(read_file(dir + "/rank" + std::to_string(r) + ".log"), 1500);
      }
    }
    if (running == 0) break;
    if (Clock::now() - start > options.deadline) {
      for (int r = 0; r < world_size; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        int status = 0;
        waitpid(pids[r], &status, 0);
        pids[r] = -1;
        auto& o = outcomes[r];
        o.error = "did not finish within " +
                  std::to_string(std::chrono::duration<double>(options.deadline).count()) +
                  " s; killed";
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Clean the temp dir.
  for (int r = 0; r < world_size; ++r) {
    std::remove((dir + "/rank" + std::to_string(r) + ".err").c_str());
    std::remove((dir + "/rank" + std::to_string(r) + ".log").c_str());
  }
  std::remove((dir + "/store").c_str());
  rmdir(dir.c_str());
  return outcomes;
}

void run_processes(int world_size, const RankBody& body, const HarnessOptions& options) {
  auto outcomes = run_processes_collect(world_size, body, options);
  const std::string f = describe_failures(outcomes);
  if (!f.empty()) {
    throw std::runtime_error("run_processes(" + std::to_string(world_size) + "): " + f);
  }
}

}  // namespace hyper::comm::testing
