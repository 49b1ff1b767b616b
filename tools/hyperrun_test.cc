// Tests of the hyperrun launcher. hyperrun runs as a subprocess (fork + exec) against small
// /bin/sh scripts as ranks, so no extra binary is needed. Every run has a hard time limit
// (kHardLimitSeconds), after which the test kills hyperrun and fails instead of hanging.
//
// The test process makes itself a child subreaper (Linux), so that ranks' children orphaned by
// a stop are reparented here and reaped, and kill(pid, 0) == ESRCH really means "gone" even in
// a container whose init does not reap zombies.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef HYPERRUN_PATH
#error "compile with -DHYPERRUN_PATH=\"/path/to/hyperrun\""
#endif

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kHardLimitSeconds = 30.0;
const char kHyperrun[] = HYPERRUN_PATH;

/// Sends `sig` to hyperrun once `needle` has appeared `count` times in its stdout (or stderr).
struct SignalAction {
  std::string needle;
  int count = 1;
  int sig = SIGINT;
  bool in_stderr = false;
  bool done = false;
};

struct RunOptions {
  std::vector<std::string> env_set;    // "KEY=VALUE"
  std::vector<std::string> env_unset;  // "KEY"
  std::vector<SignalAction> actions;
};

struct Result {
  int status = 0;
  std::string out;
  std::string err;
  double seconds = 0;
  bool hard_limit_hit = false;

  bool exited() const { return WIFEXITED(status); }
  int code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : -1; }
  std::vector<std::string> out_lines() const { return split_lines(out); }
  std::vector<std::string> err_lines() const { return split_lines(err); }
  /// Lines of stderr that hyperrun itself wrote.
  std::vector<std::string> notes() const {
    std::vector<std::string> v;
    for (const std::string& l : err_lines()) {
      if (l.rfind("hyperrun: ", 0) == 0) v.push_back(l);
    }
    return v;
  }

  static std::vector<std::string> split_lines(const std::string& s) {
    std::vector<std::string> lines;
    std::istringstream is(s);
    for (std::string line; std::getline(is, line);) lines.push_back(line);
    return lines;
  }
};

size_t count_of(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos;
       pos = haystack.find(needle, pos + needle.size())) {
    ++n;
  }
  return n;
}

/// Runs argv (argv[0] is a path) with stdout/stderr captured. stdin is a pipe that stays open
/// until the program exits, so a rank that read hyperrun's stdin would block.
Result run_program(const std::vector<std::string>& argv, RunOptions options = {}) {
  int out[2];
  int err[2];
  int in[2];
  if (::pipe(out) != 0 || ::pipe(err) != 0 || ::pipe(in) != 0) std::abort();
  const auto start = Clock::now();
  pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    ::dup2(in[0], STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    for (int fd : {in[0], in[1], out[0], out[1], err[0], err[1]}) ::close(fd);
    for (const std::string& kv : options.env_set) {
      size_t eq = kv.find('=');
      ::setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    for (const std::string& k : options.env_unset) ::unsetenv(k.c_str());
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::perror("execv");
    ::_exit(99);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  Result r;
  int fds[2] = {out[0], err[0]};
  std::string* bufs[2] = {&r.out, &r.err};
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(kHardLimitSeconds));
  while (fds[0] >= 0 || fds[1] >= 0) {
    const auto now = Clock::now();
    if (now >= deadline) {
      r.hard_limit_hit = true;
      ::kill(pid, SIGKILL);
      break;
    }
    pollfd p[2];
    nfds_t n = 0;
    int which[2];
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0) continue;
      p[n] = pollfd{fds[i], POLLIN, 0};
      which[n++] = i;
    }
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count() + 1;
    if (::poll(p, n, static_cast<int>(ms)) < 0 && errno != EINTR) std::abort();
    for (nfds_t k = 0; k < n; ++k) {
      if (p[k].revents == 0) continue;
      char buf[4096];
      ssize_t got = ::read(fds[which[k]], buf, sizeof buf);
      if (got > 0) {
        bufs[which[k]]->append(buf, static_cast<size_t>(got));
      } else if (got == 0 || errno != EINTR) {
        ::close(fds[which[k]]);
        fds[which[k]] = -1;
      }
    }
    for (SignalAction& a : options.actions) {
      if (!a.done && count_of(a.in_stderr ? r.err : r.out, a.needle) >= size_t(a.count)) {
        a.done = true;
        ::kill(pid, a.sig);
      }
    }
  }
  for (int fd : fds) {
    if (fd >= 0) ::close(fd);
  }
  while (::waitpid(pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  ::close(in[1]);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(r.hard_limit_hit) << "killed after " << kHardLimitSeconds << " s\nstdout:\n"
                                 << r.out << "\nstderr:\n" << r.err;
  return r;
}

Result run_hyperrun(std::vector<std::string> args, RunOptions options = {}) {
  args.insert(args.begin(), kHyperrun);
  return run_program(args, std::move(options));
}

/// `hyperrun -n N -- /bin/sh -c script`
Result run_script(int n, const std::string& script, RunOptions options = {},
                  std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"-n", std::to_string(n)};
  args.insert(args.end(), extra.begin(), extra.end());
  args.insert(args.end(), {"--", "/bin/sh", "-c", script});
  return run_hyperrun(args, std::move(options));
}

std::string prefix(int rank) { return "[rank " + std::to_string(rank) + "]: "; }

bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// Reaps orphans reparented to us (we are a subreaper) until `pid` is gone or `seconds` pass.
bool becomes_gone(pid_t pid, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(seconds));
  while (true) {
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
    if (gone(pid)) return true;
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

class SubreaperEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
#ifdef __linux__
    ::prctl(PR_SET_CHILD_SUBREAPER, 1);
#endif
  }
};

const ::testing::Environment* const kSubreaper =
    ::testing::AddGlobalTestEnvironment(new SubreaperEnvironment);

/// Fixture with a fresh temporary directory `dir_` for pid files.
class HyperrunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string templ = (fs::temp_directory_path() / "hyperrun_test.XXXXXX").string();
    ASSERT_NE(::mkdtemp(templ.data()), nullptr) << std::strerror(errno);
    dir_ = templ;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  /// Shell: "wait until `count` files named <kind>.* exist in dir_".
  std::string wait_for_files(const std::string& kind, int count) const {
    return "while [ $(ls '" + dir_ + "' | grep -c '^" + kind + "\\.') -lt " +
           std::to_string(count) + " ]; do sleep 0.02; done; ";
  }
  /// Shell: "write $$ to pid.$RANK" (atomically, via rename).
  std::string write_pid() const {
    return "echo $$ > \"" + dir_ + "/tmp.$RANK\" && mv \"" + dir_ + "/tmp.$RANK\" \"" + dir_ +
           "/pid.$RANK\"; ";
  }
  /// Shell: "start a background sleep and write its pid to bg.$RANK".
  std::string start_background() const {
    return "sleep 30 & echo $! > \"" + dir_ + "/tmpbg.$RANK\" && mv \"" + dir_ +
           "/tmpbg.$RANK\" \"" + dir_ + "/bg.$RANK\"; ";
  }
  /// Pids recorded in files <kind>.*.
  std::vector<pid_t> pids(const std::string& kind) const {
    std::vector<pid_t> v;
    for (const auto& entry : fs::directory_iterator(dir_)) {
      if (entry.path().filename().string().rfind(kind + ".", 0) != 0) continue;
      std::ifstream f(entry.path());
      pid_t pid = 0;
      if (f >> pid) v.push_back(pid);
    }
    return v;
  }

  std::string dir_;
};

class HyperrunWorldTest : public HyperrunTest, public ::testing::WithParamInterface<int> {};

INSTANTIATE_TEST_SUITE_P(WorldSizes, HyperrunWorldTest, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "n" + std::to_string(info.param); });

// ---------------------------------------------------------------------------------------------
// Environment and output

TEST_P(HyperrunWorldTest, SetsTorchrunEnvironmentAndPrefixesLines) {
  const int n = GetParam();
  // Values inherited from hyperrun's environment are replaced, not kept.
  RunOptions opts;
  opts.env_set = {"RANK=99", "WORLD_SIZE=99", "MASTER_PORT=1"};
  Result r = run_script(n,
                        "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
                        "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK "
                        "ROLE_RANK=$ROLE_RANK MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT "
                        "TORCHELASTIC_RUN_ID=$TORCHELASTIC_RUN_ID\"; echo \"to stderr $RANK\" >&2",
                        opts);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_TRUE(r.notes().empty()) << r.err;

  std::vector<std::string> lines = r.out_lines();
  ASSERT_EQ(lines.size(), size_t(n)) << r.out;
  std::vector<int> seen(n, 0);
  std::string port;
  for (const std::string& line : lines) {
    ASSERT_EQ(line.rfind("[rank ", 0), 0u) << line;
    const int rank = std::atoi(line.c_str() + 6);
    ASSERT_GE(rank, 0);
    ASSERT_LT(rank, n);
    ++seen[rank];
    ASSERT_EQ(line.rfind(prefix(rank) + "env ", 0), 0u) << line;
    std::map<std::string, std::string> env;
    std::istringstream is(line.substr(prefix(rank).size() + 4));
    for (std::string kv; is >> kv;) {
      size_t eq = kv.find('=');
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    const std::string rs = std::to_string(rank);
    EXPECT_EQ(env["RANK"], rs);
    EXPECT_EQ(env["LOCAL_RANK"], rs);
    EXPECT_EQ(env["ROLE_RANK"], rs);
    EXPECT_EQ(env["WORLD_SIZE"], std::to_string(n));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], std::to_string(n));
    EXPECT_EQ(env["GROUP_RANK"], "0");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "hyperrun");
    const std::string& p = env["MASTER_PORT"];
    ASSERT_FALSE(p.empty());
    ASSERT_EQ(p.find_first_not_of("0123456789"), std::string::npos) << p;
    EXPECT_GT(std::atoi(p.c_str()), 1);
    EXPECT_LE(std::atoi(p.c_str()), 65535);
    if (port.empty()) port = p;
    EXPECT_EQ(p, port) << "MASTER_PORT differs between ranks";
  }
  for (int rank = 0; rank < n; ++rank) EXPECT_EQ(seen[rank], 1) << "rank " << rank;

  std::vector<std::string> err = r.err_lines();
  ASSERT_EQ(err.size(), size_t(n)) << r.err;
  for (int rank = 0; rank < n; ++rank) {
    const std::string expected = prefix(rank) + "to stderr " + std::to_string(rank);
    EXPECT_EQ(std::count(err.begin(), err.end(), expected), 1) << r.err;
  }
}

TEST_P(HyperrunWorldTest, KeepsLinesIntactAndInOrder) {
  const int n = GetParam();
  constexpr int kLines = 300;
  const std::string dots = " ..........................................";
  Result r = run_script(n, "i=0; while [ $i -lt " + std::to_string(kLines) +
                               " ]; do echo \"out $RANK $i" + dots +
                               "\"; echo \"err $RANK $i\" >&2; i=$((i+1)); done");
  ASSERT_EQ(r.code(), 0) << r.err;
  for (const bool is_err : {false, true}) {
    std::vector<int> next(n, 0);
    for (const std::string& line : is_err ? r.err_lines() : r.out_lines()) {
      ASSERT_EQ(line.rfind("[rank ", 0), 0u) << line;
      const int rank = std::atoi(line.c_str() + 6);
      ASSERT_TRUE(rank >= 0 && rank < n) << line;
      std::string expected = prefix(rank) + (is_err ? "err " : "out ") + std::to_string(rank) +
                             " " + std::to_string(next[rank]);
      if (!is_err) expected += dots;
      ASSERT_EQ(line, expected);
      ++next[rank];
    }
    for (int rank = 0; rank < n; ++rank) EXPECT_EQ(next[rank], kLines) << "rank " << rank;
  }
}

TEST_F(HyperrunTest, FlushesPartialLastLineAtExit) {
  Result r = run_script(2, "printf 'first\\nsecond'; printf 'no newline' >&2");
  ASSERT_EQ(r.code(), 0) << r.err;
  std::vector<std::string> out = r.out_lines();
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0]: first", "[rank 0]: second",
                                           "[rank 1]: first", "[rank 1]: second"}));
  EXPECT_EQ(r.out.back(), '\n');
  std::vector<std::string> err = r.err_lines();
  std::sort(err.begin(), err.end());
  EXPECT_EQ(err, (std::vector<std::string>{"[rank 0]: no newline", "[rank 1]: no newline"}));
}

TEST_F(HyperrunTest, SplitsOverlongLinesWithoutLosingBytes) {
  constexpr size_t kBytes = 200000;
  Result r = run_script(1, "head -c " + std::to_string(kBytes) + " /dev/zero | tr '\\0' a");
  ASSERT_EQ(r.code(), 0) << r.err;
  std::string payload;
  for (const std::string& line : r.out_lines()) {
    ASSERT_EQ(line.rfind(prefix(0), 0), 0u);
    payload += line.substr(prefix(0).size());
  }
  EXPECT_EQ(payload, std::string(kBytes, 'a'));
}

TEST_F(HyperrunTest, ExplicitMasterAddrAndPort) {
  Result r = run_hyperrun({"--master-port=29555", "--master_addr", "localhost", "-n", "2",
                           "/bin/sh", "-c", "echo $MASTER_ADDR:$MASTER_PORT"});
  ASSERT_EQ(r.code(), 0) << r.err;
  std::vector<std::string> out = r.out_lines();
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0]: localhost:29555",
                                           "[rank 1]: localhost:29555"}));
}

TEST_F(HyperrunTest, AcceptsTorchrunSpellings) {
  Result r = run_hyperrun({"--standalone", "--nnodes=1", "--nproc_per_node=3", "--no-python",
                           "/bin/sh", "-c", "echo $RANK/$WORLD_SIZE"});
  ASSERT_EQ(r.code(), 0) << r.err;
  std::vector<std::string> out = r.out_lines();
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0]: 0/3", "[rank 1]: 1/3", "[rank 2]: 2/3"}));

  Result r2 = run_hyperrun({"--nproc-per-node", "2", "-n3", "/bin/sh", "-c", "echo $WORLD_SIZE"});
  ASSERT_EQ(r2.code(), 0) << r2.err;
  EXPECT_EQ(r2.out_lines().size(), 3u) << "the last -n wins";
}

TEST_F(HyperrunTest, PassesArgumentsAfterTheProgramVerbatim) {
  Result r = run_hyperrun(
      {"-n", "1", "/bin/sh", "-c", "echo \"[$0] [$1] [$2] [$3]\"", "x", "-n", "--timeout", "--"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out_lines(), std::vector<std::string>{"[rank 0]: [x] [-n] [--timeout] [--]"});
}

TEST_F(HyperrunTest, SetsOmpNumThreadsLikeTorchrun) {
  RunOptions unset;
  unset.env_unset = {"OMP_NUM_THREADS"};
  Result r = run_script(2, "echo omp=$OMP_NUM_THREADS", unset);
  std::vector<std::string> out = r.out_lines();
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"[rank 0]: omp=1", "[rank 1]: omp=1"}));
  Result r1 = run_script(1, "echo omp=$OMP_NUM_THREADS", unset);
  EXPECT_EQ(r1.out_lines(), std::vector<std::string>{"[rank 0]: omp="});
  RunOptions set;
  set.env_set = {"OMP_NUM_THREADS=7"};
  Result r7 = run_script(1, "echo omp=$OMP_NUM_THREADS", set);
  EXPECT_EQ(r7.out_lines(), std::vector<std::string>{"[rank 0]: omp=7"});
}

TEST_F(HyperrunTest, RanksDoNotReadHyperrunsStdin) {
  // run_program keeps hyperrun's stdin open; a rank reading it would block until the hard limit.
  Result r = run_script(2, "cat; echo done");
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(r.out_lines().size(), 2u);
}

TEST_F(HyperrunTest, SurvivesClosedStdout) {
  // `hyperrun ... | head -n 1`: hyperrun must keep draining the ranks and report their status.
  Result r = run_program({"/bin/sh", "-c",
                          std::string("( '") + kHyperrun +
                              "' -n 2 -- /bin/sh -c 'i=0; while [ $i -lt 20000 ]; do echo $i; "
                              "i=$((i+1)); done'; echo \"rc=$?\" >&2 ) | head -n 1"});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out_lines().size(), 1u);
  EXPECT_NE(r.err.find("rc=0"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// Failures

TEST_P(HyperrunWorldTest, FailingRankStopsTheOthers) {
  const int n = GetParam();
  const int failing = n > 1 ? 1 : 0;
  // The others record their pid and a background child's pid, then sleep; the failing rank
  // waits for those records, then exits 3.
  const std::string script = "if [ $RANK = " + std::to_string(failing) + " ]; then " +
                             wait_for_files("pid", n - 1) + "echo bye; exit 3; fi; " +
                             start_background() + write_pid() + "exec sleep 30";
  Result r = run_script(n, script);
  EXPECT_TRUE(r.exited());
  EXPECT_EQ(r.code(), 3) << r.err;
  EXPECT_LT(r.seconds, 10);
  std::vector<std::string> notes = r.notes();
  ASSERT_FALSE(notes.empty()) << r.err;
  EXPECT_NE(notes[0].find("rank " + std::to_string(failing) + " (pid "), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("exited with code 3"), std::string::npos) << notes[0];
  if (n == 1) {
    EXPECT_EQ(notes[0].find("stopping"), std::string::npos) << notes[0];
  } else if (n == 2) {
    EXPECT_NE(notes[0].find("; stopping 1 other rank"), std::string::npos) << notes[0];
  } else {
    EXPECT_NE(notes[0].find("; stopping " + std::to_string(n - 1) + " other ranks"),
              std::string::npos)
        << notes[0];
  }
  // The failing rank's last output comes before the note about it.
  EXPECT_EQ(r.out_lines(), std::vector<std::string>{prefix(failing) + "bye"});

  std::vector<pid_t> ranks = pids("pid");
  ASSERT_EQ(ranks.size(), size_t(n - 1));
  for (pid_t pid : ranks) EXPECT_TRUE(gone(pid)) << "rank pid " << pid << " still exists";
  for (pid_t pid : pids("bg")) EXPECT_TRUE(becomes_gone(pid, 2)) << "child " << pid;
}

TEST_P(HyperrunWorldTest, RankKilledBySignalIsReported) {
  const int n = GetParam();
  const int failing = n - 1;
  const std::string script = "if [ $RANK = " + std::to_string(failing) + " ]; then " +
                             wait_for_files("pid", n - 1) + "kill -9 $$; fi; " + write_pid() +
                             "exec sleep 30";
  Result r = run_script(n, script);
  EXPECT_EQ(r.code(), 128 + 9) << r.err;
  EXPECT_LT(r.seconds, 10);
  std::vector<std::string> notes = r.notes();
  ASSERT_FALSE(notes.empty()) << r.err;
  EXPECT_NE(notes[0].find("rank " + std::to_string(failing) + " (pid "), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find("was killed by signal 9 (SIGKILL)"), std::string::npos) << notes[0];
  for (pid_t pid : pids("pid")) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
}

TEST_F(HyperrunTest, LateFailureAfterOthersSucceeded) {
  Result r = run_script(3, "[ $RANK = 2 ] || exit 0; sleep 0.2; exit 7");
  EXPECT_EQ(r.code(), 7) << r.err;
  ASSERT_EQ(r.notes().size(), 1u) << r.err;
  EXPECT_NE(r.notes()[0].find("rank 2 (pid "), std::string::npos);
  EXPECT_NE(r.notes()[0].find("exited with code 7"), std::string::npos);
  EXPECT_EQ(r.notes()[0].find("stopping"), std::string::npos) << r.notes()[0];
}

TEST_F(HyperrunTest, ExitCodeAbove128IsPassedThrough) {
  Result r = run_script(2, "[ $RANK = 0 ] && exit 0; exit 200");
  EXPECT_EQ(r.code(), 200) << r.err;
}

TEST_F(HyperrunTest, EscalatesToSigkillWhenRanksIgnoreSigterm) {
  const std::string script = "if [ $RANK = 1 ]; then " + wait_for_files("pid", 2) +
                             "exit 4; fi; trap '' TERM; " + write_pid() + "exec sleep 30";
  Result r = run_script(3, script);
  EXPECT_EQ(r.code(), 4) << r.err;
  EXPECT_GT(r.seconds, 2.5) << "SIGKILL should follow SIGTERM after the ~3 s grace period";
  EXPECT_LT(r.seconds, 10);
  ASSERT_EQ(r.notes().size(), 2u) << r.err;
  EXPECT_NE(r.notes()[1].find("ranks 0, 2 did not exit within 3 s of SIGTERM; sending SIGKILL"),
            std::string::npos)
      << r.notes()[1];
  for (pid_t pid : pids("pid")) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
}

// ---------------------------------------------------------------------------------------------
// Signals to hyperrun

TEST_P(HyperrunWorldTest, SigintStopsEverything) {
  const int n = GetParam();
  RunOptions opts;
  opts.actions.push_back(SignalAction{"ready", n, SIGINT});
  // A background job of a non-interactive shell ignores SIGINT, so it outlives its rank and
  // is only removed by the final SIGKILL of the rank's process group.
  Result r = run_script(n, start_background() + write_pid() + "echo ready; exec sleep 30", opts);
  EXPECT_EQ(r.code(), 128 + SIGINT) << r.err;
  EXPECT_LT(r.seconds, 10);
  ASSERT_FALSE(r.notes().empty()) << r.err;
  EXPECT_NE(r.notes()[0].find("received SIGINT; forwarding it to " + std::to_string(n) +
                              " running rank"),
            std::string::npos)
      << r.notes()[0];
  std::vector<pid_t> ranks = pids("pid");
  ASSERT_EQ(ranks.size(), size_t(n));
  for (pid_t pid : ranks) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
  std::vector<pid_t> children = pids("bg");
  ASSERT_EQ(children.size(), size_t(n));
  for (pid_t pid : children) EXPECT_TRUE(becomes_gone(pid, 2)) << "child " << pid;
}

TEST_F(HyperrunTest, SigtermIsForwarded) {
  RunOptions opts;
  opts.actions.push_back(SignalAction{"ready", 2, SIGTERM});
  Result r = run_script(2, write_pid() + "trap 'echo got TERM; exit 0' TERM; echo ready; "
                                         "sleep 30 & wait",
                        opts);
  EXPECT_EQ(r.code(), 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 10);
  EXPECT_EQ(count_of(r.out, "got TERM"), 2u) << "each rank's handler ran:\n" << r.out;
  for (pid_t pid : pids("pid")) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
}

TEST_F(HyperrunTest, SecondSigintKillsAtOnce) {
  RunOptions opts;
  opts.actions.push_back(SignalAction{"ready", 2, SIGINT});
  opts.actions.push_back(SignalAction{"received SIGINT", 1, SIGINT, /*in_stderr=*/true});
  Result r = run_script(2, "trap '' INT TERM; " + write_pid() + "echo ready; exec sleep 30", opts);
  EXPECT_EQ(r.code(), 128 + SIGINT) << r.err;
  EXPECT_LT(r.seconds, 2.5) << "the second SIGINT should not wait for the grace period";
  EXPECT_NE(r.err.find("sending SIGKILL"), std::string::npos) << r.err;
  for (pid_t pid : pids("pid")) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
}

// ---------------------------------------------------------------------------------------------
// --timeout

TEST_P(HyperrunWorldTest, TimeoutStopsRanksStillRunning) {
  const int n = GetParam();
  // Rank 0 finishes at once (unless it is alone); the others sleep past the timeout.
  const std::string script =
      std::string(n > 1 ? "[ $RANK = 0 ] && exit 0; " : "") + write_pid() + "exec sleep 30";
  Result r = run_script(n, script, {}, {"--timeout", "1"});
  EXPECT_EQ(r.code(), 124) << r.err;
  EXPECT_GT(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 10);
  ASSERT_FALSE(r.notes().empty()) << r.err;
  std::string still = n == 1 ? "rank 0" : n == 2 ? "rank 1" : "ranks 1, 2, 3";
  EXPECT_EQ(r.notes()[0], "hyperrun: timeout after 1 s: " + still + " of " + std::to_string(n) +
                              " still running; stopping them");
  for (pid_t pid : pids("pid")) EXPECT_TRUE(gone(pid)) << "rank pid " << pid;
}

TEST_F(HyperrunTest, TimeoutNotReachedExitsZero) {
  Result r = run_script(2, "echo ok", {}, {"--timeout=20"});
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_LT(r.seconds, 5);
  EXPECT_TRUE(r.notes().empty()) << r.err;
}

// ---------------------------------------------------------------------------------------------
// Usage errors and exec failures

TEST_F(HyperrunTest, HelpPrintsUsage) {
  for (const char* flag : {"-h", "--help"}) {
    Result r = run_hyperrun({flag});
    EXPECT_EQ(r.code(), 0);
    EXPECT_EQ(r.out.rfind("Usage: hyperrun -n N", 0), 0u) << r.out;
    EXPECT_TRUE(r.err.empty()) << r.err;
  }
}

struct UsageCase {
  std::vector<std::string> args;
  std::string message;  // expected in the first line of stderr
};

TEST_F(HyperrunTest, UsageErrorsNameTheBadValue) {
  const std::vector<UsageCase> cases = {
      {{"--", "echo", "ran"}, "missing -n N"},
      {{"echo", "ran"}, "missing -n N"},
      {{"-n", "0", "echo", "ran"}, "invalid value for -n: '0'"},
      {{"-n", "-1", "echo", "ran"}, "invalid value for -n: '-1'"},
      {{"-n", "abc", "echo", "ran"}, "invalid value for -n: 'abc'"},
      {{"-n", "2x", "echo", "ran"}, "invalid value for -n: '2x'"},
      {{"-n", "", "echo", "ran"}, "invalid value for -n: ''"},
      {{"-n", "5000", "echo", "ran"}, "invalid value for -n: '5000' (expected a number of ranks "
                                      "from 1 to 1024)"},
      {{"--nproc-per-node=auto", "echo", "ran"}, "invalid value for --nproc-per-node: 'auto'"},
      {{"-n"}, "option -n requires a value"},
      {{"-n", "2"}, "no program to run"},
      {{"-n", "2", "--"}, "no program to run"},
      {{"-n", "2", "--master-port", "70000", "echo", "ran"},
       "invalid value for --master-port: '70000'"},
      {{"-n", "2", "--master-port", "http", "echo", "ran"},
       "invalid value for --master-port: 'http'"},
      {{"-n", "2", "--master-addr=", "echo", "ran"}, "invalid value for --master-addr: ''"},
      {{"-n", "2", "--timeout", "0", "echo", "ran"}, "invalid value for --timeout: '0'"},
      {{"-n", "2", "--timeout", "-3", "echo", "ran"}, "invalid value for --timeout: '-3'"},
      {{"-n", "2", "--timeout", "abc", "echo", "ran"}, "invalid value for --timeout: 'abc'"},
      {{"-n", "2", "--timeout", "inf", "echo", "ran"}, "invalid value for --timeout: 'inf'"},
      {{"-n", "2", "--bogus", "echo", "ran"}, "unknown option '--bogus'"},
      {{"-x", "-n", "2", "echo", "ran"}, "unknown option '-x'"},
      {{"--nnodes", "2", "-n", "2", "echo", "ran"},
       "--nnodes 2 needs --master-addr (the address of node 0, where rank 0 serves the "
       "rendezvous store)"},
      {{"--nnodes", "0", "-n", "2", "echo", "ran"}, "invalid value for --nnodes: '0'"},
      {{"--nnodes", "x", "-n", "2", "echo", "ran"}, "invalid value for --nnodes: 'x'"},
      {{"--nnodes", "1:4", "-n", "2", "echo", "ran"},
       "unsupported value for --nnodes: '1:4' (elastic ranges are not supported; give one "
       "number of nodes)"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-addr", "10.0.0.1", "-n", "2", "echo",
        "ran"},
       "--node-rank 2 is not below --nnodes 2"},
      {{"--node-rank", "1", "-n", "2", "echo", "ran"}, "--node-rank 1 is not below --nnodes 1"},
      {{"--node-rank", "-1", "-n", "2", "echo", "ran"}, "invalid value for --node-rank: '-1'"},
      {{"--nnodes", "70000", "--master-addr", "a", "-n", "2", "echo", "ran"},
       "invalid value for --nnodes: '70000'"},
      {{"--nnodes", "65536", "--master-addr", "a", "-n", "1024", "echo", "ran"},
       "--nnodes 65536 times -n 1024 is 67108864 ranks, more than the 1048576 hyperrun supports"},
      {{"--no-python=1", "-n", "2", "echo", "ran"}, "option --no-python takes no value"},
  };
  for (const UsageCase& c : cases) {
    std::string joined;
    for (const std::string& a : c.args) joined += " '" + a + "'";
    SCOPED_TRACE("hyperrun" + joined);
    Result r = run_hyperrun(c.args);
    EXPECT_EQ(r.code(), 2);
    EXPECT_TRUE(r.out.empty()) << "no rank may run: " << r.out;
    std::vector<std::string> err = r.err_lines();
    ASSERT_EQ(err.size(), 2u) << r.err;
    EXPECT_EQ(err[0].rfind("hyperrun: " + c.message, 0), 0u) << err[0];
    EXPECT_EQ(err[1], "hyperrun: try 'hyperrun --help' for usage");
  }
}

// ---------------------------------------------------------------------------------------------
// Several nodes (torchrun's --nnodes / --node-rank / --master-addr)

/// Parses "[rank i]: env K=V K=V ..." lines into rank -> {K: V}.
std::map<int, std::map<std::string, std::string>> parse_env_lines(const Result& r) {
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (const std::string& line : r.out_lines()) {
    EXPECT_EQ(line.rfind("[rank ", 0), 0u) << line;
    const int rank = std::atoi(line.c_str() + 6);
    EXPECT_EQ(line.rfind(prefix(rank) + "env ", 0), 0u) << line;
    std::istringstream is(line.substr(prefix(rank).size() + 4));
    for (std::string kv; is >> kv;) {
      size_t eq = kv.find('=');
      by_rank[rank][kv.substr(0, eq)] = kv.substr(eq + 1);
    }
  }
  return by_rank;
}

const char kEnvScript[] =
    "echo \"env RANK=$RANK LOCAL_RANK=$LOCAL_RANK WORLD_SIZE=$WORLD_SIZE "
    "LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE GROUP_RANK=$GROUP_RANK GROUP_WORLD_SIZE=$GROUP_WORLD_SIZE "
    "ROLE_RANK=$ROLE_RANK ROLE_WORLD_SIZE=$ROLE_WORLD_SIZE MASTER_ADDR=$MASTER_ADDR "
    "MASTER_PORT=$MASTER_PORT\"";

TEST_F(HyperrunTest, SeveralNodesGiveGlobalRanksLikeTorchrun) {
  // Node 1 of 3, 2 ranks per node: global ranks 2 and 3 of 6.
  Result r = run_hyperrun({"--nnodes", "3", "--node-rank", "1", "--master-addr", "10.9.0.1",
                           "--master-port", "29601", "-n", "2", "/bin/sh", "-c", kEnvScript});
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_TRUE(r.notes().empty()) << r.err;
  auto env = parse_env_lines(r);
  ASSERT_EQ(env.size(), 2u) << r.out;
  for (int local = 0; local < 2; ++local) {
    const int rank = 2 + local;
    ASSERT_EQ(env.count(rank), 1u) << r.out;
    auto& e = env[rank];
    EXPECT_EQ(e["RANK"], std::to_string(rank));
    EXPECT_EQ(e["ROLE_RANK"], std::to_string(rank));
    EXPECT_EQ(e["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(e["WORLD_SIZE"], "6");
    EXPECT_EQ(e["ROLE_WORLD_SIZE"], "6");
    EXPECT_EQ(e["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(e["GROUP_RANK"], "1");
    EXPECT_EQ(e["GROUP_WORLD_SIZE"], "3");
    EXPECT_EQ(e["MASTER_ADDR"], "10.9.0.1");
    EXPECT_EQ(e["MASTER_PORT"], "29601");
  }
  // torchrun's spellings, and its default port when there are several nodes.
  Result t = run_hyperrun({"--nnodes=2:2", "--node_rank=0", "--master_addr=10.9.0.1",
                           "--nproc_per_node=1", "/bin/sh", "-c", kEnvScript});
  ASSERT_EQ(t.code(), 0) << t.err;
  auto te = parse_env_lines(t);
  ASSERT_EQ(te.size(), 1u) << t.out;
  EXPECT_EQ(te[0]["RANK"], "0");
  EXPECT_EQ(te[0]["WORLD_SIZE"], "2");
  EXPECT_EQ(te[0]["GROUP_WORLD_SIZE"], "2");
  EXPECT_EQ(te[0]["MASTER_PORT"], "29500");
}

TEST_F(HyperrunTest, SeveralNodesFailureNamesTheGlobalRankAndNode) {
  Result r = run_hyperrun({"--nnodes", "2", "--node-rank", "1", "--master-addr", "127.0.0.1",
                           "-n", "2", "/bin/sh", "-c",
                           "if [ $LOCAL_RANK = 1 ]; then exit 5; fi; exec sleep 30"});
  EXPECT_EQ(r.code(), 5) << r.err;
  EXPECT_LT(r.seconds, 10);
  std::vector<std::string> notes = r.notes();
  ASSERT_FALSE(notes.empty()) << r.err;
  EXPECT_EQ(notes[0].rfind("hyperrun: node 1: rank 3 (pid ", 0), 0u) << notes[0];
  EXPECT_NE(notes[0].find("exited with code 5; stopping 1 other rank"), std::string::npos)
      << notes[0];
}

// ---------------------------------------------------------------------------------------------
// Values hyperrun cannot honour: refused before any rank starts.

TEST_F(HyperrunTest, RefusesTimeoutItCannotHonour) {
  // The deadline is kept in the steady clock's nanoseconds: 1e300 s does not fit, and would
  // wrap to a deadline in the past (an immediate "timeout") or to no deadline at all.
  for (const char* t : {"1e300", "1e19", "1000000001", "9223372037"}) {
    SCOPED_TRACE(std::string("--timeout ") + t);
    Result r = run_hyperrun({"-n", "2", "--timeout", t, "/bin/sh", "-c", "echo ran"});
    EXPECT_EQ(r.code(), 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << "no rank may run: " << r.out;
    std::vector<std::string> err = r.err_lines();
    ASSERT_EQ(err.size(), 2u) << r.err;
    EXPECT_EQ(err[0], std::string("hyperrun: invalid value for --timeout: '") + t +
                          "' (expected a number of seconds > 0 and at most 1000000000)");
  }
  // The largest value is honoured (the ranks finish long before it).
  Result r = run_hyperrun({"-n", "2", "--timeout", "1e9", "/bin/sh", "-c", "echo ran"});
  EXPECT_EQ(r.code(), 0) << r.err;
  EXPECT_EQ(r.out_lines().size(), 2u) << r.out;
}

/// Runs hyperrun under `ulimit -n <nofile>` (a shell that then execs it).
Result run_with_nofile(int nofile, const std::vector<std::string>& args) {
  std::string cmd = "ulimit -n " + std::to_string(nofile) + " && exec \"$0\"";
  for (size_t i = 0; i < args.size(); ++i) cmd += " \"$" + std::to_string(i + 1) + "\"";
  std::vector<std::string> argv = {"/bin/sh", "-c", cmd, kHyperrun};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_program(argv);
}

TEST_F(HyperrunTest, RefusesMoreRanksThanFileDescriptorsAllow) {
  // 3 descriptors per rank (stdout, stderr, exec status) + 9 of its own: -n 16 needs 57.
  Result r = run_with_nofile(32, {"-n", "16", "/bin/sh", "-c", "echo ran"});
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << "no rank may run: " << r.out;
  std::vector<std::string> err = r.err_lines();
  ASSERT_EQ(err.size(), 1u) << r.err;
  // Descriptors the test process leaks into its children count too ("+ K inherited open").
  const std::string head = "hyperrun: -n 16 needs ";
  ASSERT_EQ(err[0].rfind(head, 0), 0u) << err[0];
  const int needed = std::atoi(err[0].c_str() + head.size());
  EXPECT_GE(needed, 57) << err[0];
  EXPECT_NE(err[0].find(std::to_string(needed) + " file descriptors (3 per rank + 9"),
            std::string::npos)
      << err[0];
  EXPECT_NE(err[0].find(") but the limit is 32 (RLIMIT_NOFILE); raise it (ulimit -n " +
                        std::to_string(needed) + ") or start fewer ranks"),
            std::string::npos)
      << err[0];

  // Within the limit, the same ranks start.
  Result ok = run_with_nofile(64, {"-n", "16", "/bin/sh", "-c", "echo ran"});
  EXPECT_EQ(ok.code(), 0) << ok.err;
  EXPECT_EQ(ok.out_lines().size(), 16u) << ok.out;
}

TEST_P(HyperrunWorldTest, ProgramNotFound) {
  const std::string n = std::to_string(GetParam());
  Result r = run_hyperrun({"-n", n, "/nonexistent/hyperrun_prog", "arg"});
  EXPECT_EQ(r.code(), 127);
  EXPECT_EQ(r.err,
            "hyperrun: cannot execute '/nonexistent/hyperrun_prog': No such file or directory\n");
  EXPECT_TRUE(r.out.empty());
  EXPECT_LT(r.seconds, 5);

  Result by_path = run_hyperrun({"-n", n, "--", "hyperrun_no_such_program_on_path"});
  EXPECT_EQ(by_path.code(), 127);
  EXPECT_EQ(by_path.err,
            "hyperrun: cannot execute 'hyperrun_no_such_program_on_path': No such file or "
            "directory\n");
}

TEST_F(HyperrunTest, ProgramNotExecutable) {
  const std::string path = dir_ + "/not_executable";
  std::ofstream(path) << "#!/bin/sh\necho ran\n";
  ::chmod(path.c_str(), 0644);
  Result r = run_hyperrun({"-n", "2", path});
  EXPECT_EQ(r.code(), 126);
  EXPECT_EQ(r.err, "hyperrun: cannot execute '" + path + "': Permission denied\n");
  EXPECT_TRUE(r.out.empty());
}

TEST_F(HyperrunTest, SuccessIsQuiet) {
  Result r = run_script(4, "exit 0");
  EXPECT_EQ(r.code(), 0);
  EXPECT_TRUE(r.out.empty());
  EXPECT_TRUE(r.err.empty()) << r.err;
}

}  // namespace
