/// \file hyperrun.cc
/// hyperrun: start N local ranks of a program with torchrun's environment, prefix their output
/// with the rank, and if one rank fails, stop the others and exit non-zero naming it. With
/// --nnodes M, one hyperrun per node starts that node's N ranks of an M*N-rank job (torchrun's
/// --node-rank / --master-addr meaning); each supervises only its own ranks.
///
///   hyperrun -n 4 -- ./build/hyper/comm/comm_mp_test --gtest_brief=1
///   hyperrun --nnodes 2 --node-rank 1 --master-addr 10.0.0.1 -n 4 -- ./train   # on node 1
///
/// Values it cannot honour (a --timeout beyond the clock's range, more ranks than the
/// file-descriptor limit allows) are refused before anything starts (exit 2).
/// Pure C++17 + POSIX (no LibTorch), single-threaded: one poll() loop over every child's stdout
/// and stderr pipe plus a self-pipe that the signal handler writes to. Children are started with
/// fork + exec and nothing in between but dup2 / setpgid / signal reset / the environment, each
/// in its own process group so that a stop reaches the rank's own children too.
/// Normative description: docs/hyperrun.md.

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <dirent.h>
#include <sys/resource.h>

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "tools/cli/args.h"
#include "tools/cli/hyperrun_options.h"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kExitUsage = 2;
constexpr int kExitTimeout = 124;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;
constexpr int kDefaultMultiNodePort = 29500;  // torchrun's default MASTER_PORT
/// File descriptors hyperrun holds while starting ranks: per rank the read ends of its stdout,
/// stderr and exec-status pipes; besides those fds 0-2, the signal self-pipe, /dev/null and
/// the three write ends of the rank being started.
constexpr int64_t kFdsPerRank = 3;
constexpr int64_t kFdsFixed = 9;
constexpr double kGraceSeconds = 3.0;    // SIGTERM -> SIGKILL
constexpr double kLingerSeconds = 0.25;  // after the last rank exits, wait this long for EOF
constexpr size_t kMaxLine = 64 * 1024;   // longer lines are split
constexpr size_t kReadChunk = 64 * 1024;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP};

constexpr const char kUsage[] =
    "Usage: hyperrun -n N [options] [--] prog [args...]\n"
    "\n"
    "Starts N local ranks of prog with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,\n"
    "MASTER_ADDR, MASTER_PORT, ...), prefixes every output line with \"[rank i]: \", and if a\n"
    "rank fails, stops the others and exits non-zero naming it.\n"
    "\n"
    "Options:\n"
    "  -n, --nproc-per-node N   number of ranks to start on this node, 1 to 1024 (required)\n"
    "      --nnodes M           number of nodes, 1 to 65536 (default 1); run one hyperrun per\n"
    "                           node, each with the same M, N, --master-addr and --master-port\n"
    "      --node-rank K        this node's index, 0 to M-1 (default 0): its ranks are\n"
    "                           K*N .. K*N+N-1 of M*N\n"
    "      --master-addr ADDR   MASTER_ADDR for the ranks: node 0's address, where rank 0\n"
    "                           serves the rendezvous store (default 127.0.0.1; required\n"
    "                           when M > 1)\n"
    "      --master-port PORT   MASTER_PORT for the ranks (default: a free port on 127.0.0.1\n"
    "                           when M = 1, 29500 when M > 1)\n"
    "      --timeout SECONDS    if the ranks have not all finished after SECONDS (> 0, at most\n"
    "                           1e9), stop them and exit 124\n"
    "      --standalone, --no-python\n"
    "                           accepted and ignored, for torchrun command-line compatibility\n"
    "  -h, --help               show this help and exit\n"
    "Long options also accept --name=value and underscores (--nproc_per_node), like torchrun.\n"
    "\n"
    "Exit status: 0 if every rank exited 0; else the first failing rank's exit code, or\n"
    "128+signal if it was killed by a signal; 128+signal if hyperrun received SIGINT, SIGTERM\n"
    "or SIGHUP (forwarded to the ranks); 124 on --timeout; 127 if prog is not found, 126 if it\n"
    "cannot be executed; 2 on bad usage or a value it cannot honour (starting nothing).\n"
    "Details: docs/hyperrun.md.\n";

/// Bad command line: main prints "hyperrun: <what>" and exits 2.
using hyper::cli::UsageError;

// ---------------------------------------------------------------------------------------------
// Small helpers

Clock::time_point after_seconds(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

/// Writes all of `data` to `fd`; false when the fd is broken (EPIPE, closed, ...).
bool write_all(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};  // an inherited non-blocking stdout
      ::poll(&p, 1, 100);
    } else {
      return false;
    }
  }
  return true;
}

/// One line on hyperrun's stderr, in a single write.
void note(const std::string& message) {
  std::string line = "hyperrun: " + message + "\n";
  write_all(STDERR_FILENO, line.data(), line.size());
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGCHLD: return "SIGCHLD";
    case SIGCONT: return "SIGCONT";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    case SIGPROF: return "SIGPROF";
    case SIGSYS: return "SIGSYS";
    default: return nullptr;
  }
}

std::string describe_signal(int sig) {
  const char* name = signal_name(sig);
  return "signal " + std::to_string(sig) + (name ? std::string(" (") + name + ")" : "");
}

/// "exited with code 3" / "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    std::string s = "was killed by " + describe_signal(WTERMSIG(status));
#ifdef WCOREDUMP
    if (WCOREDUMP(status)) s += ", core dumped";
#endif
    return s;
  }
  return "ended with wait status " + std::to_string(status);
}

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 1;
}

/// "rank 2" / "ranks 0, 2, 3".
std::string describe_ranks(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string count_ranks(size_t n, const char* adjective) {
  return std::to_string(n) + " " + adjective + (n == 1 ? " rank" : " ranks");
}

void set_cloexec(int fd) { ::fcntl(fd, F_SETFD, ::fcntl(fd, F_GETFD) | FD_CLOEXEC); }
void set_nonblock(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

/// A pipe whose both ends are close-on-exec (single-threaded, so no pipe2 needed).
void make_pipe(int fds[2]) {
  if (::pipe(fds) != 0) throw std::system_error(errno, std::generic_category(), "pipe");
  set_cloexec(fds[0]);
  set_cloexec(fds[1]);
}

/// Fds 0-2 must be open so that no pipe lands on them (dup2 onto 1 or 2 would then close it).
void ensure_standard_fds_open() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (::fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      int null_fd = ::open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) {
        ::dup2(null_fd, fd);
        ::close(null_fd);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Command line: tools/cli/hyperrun_options.h (shared with the fuzz target)

using Options = hyper::cli::HyperrunOptions;
using hyper::cli::parse_hyperrun_args;

/// Refusal of a value hyperrun cannot honour (not a usage error): main prints
/// "hyperrun: <what>" and exits 2, starting nothing.
struct Refusal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Number of open file descriptors of this process (inherited ones count against the limit
/// too: new descriptors take the lowest free numbers, and each must be below the limit).
int64_t count_open_fds(int64_t limit) {
#ifdef __linux__
  if (DIR* d = ::opendir("/proc/self/fd")) {
    int64_t n = 0;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_name[0] != '.') ++n;
    }
    ::closedir(d);
    return n - 1;  // the directory's own descriptor
  }
#endif
  int64_t n = 0;
  for (int64_t fd = 0; fd < std::min<int64_t>(limit, 1 << 16); ++fd) {
    if (::fcntl(static_cast<int>(fd), F_GETFD) != -1) ++n;
  }
  return n;
}

/// Refuses to start when the ranks' pipes would not fit under RLIMIT_NOFILE: otherwise
/// pipe() fails with EMFILE halfway, after some ranks have started.
void check_fd_limit(const Options& o) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return;
  const int64_t limit = static_cast<int64_t>(rl.rlim_cur);
  const int64_t inherited = std::max<int64_t>(count_open_fds(limit) - 3, 0);  // beyond 0-2
  const int64_t needed = kFdsPerRank * o.nproc + kFdsFixed + inherited;
  if (needed <= limit) return;
  std::string breakdown = std::to_string(kFdsPerRank) + " per rank + " + std::to_string(kFdsFixed);
  if (inherited > 0) breakdown += " + " + std::to_string(inherited) + " inherited open";
  throw Refusal("-n " + std::to_string(o.nproc) + " needs " + std::to_string(needed) +
                " file descriptors (" + breakdown + ") but the limit is " +
                std::to_string(limit) + " (RLIMIT_NOFILE); raise it (ulimit -n " +
                std::to_string(needed) + ") or start fewer ranks");
}

/// Binds 127.0.0.1:0, reads the port the kernel chose, and closes the socket. The port may be
/// taken by someone else before rank 0 binds it (as with torchrun --standalone).
int pick_free_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    int e = errno;
    ::close(fd);
    throw std::system_error(e, std::generic_category(), "cannot pick a free port on 127.0.0.1");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// ---------------------------------------------------------------------------------------------
// Signals: the handler only writes the signal number to a self-pipe that the poll loop reads.
// This is the one piece of process-global state, and POSIX signal handling forces it.

int g_signal_pipe_write = -1;

extern "C" void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
  (void)ignored;
  errno = saved;
}

// ---------------------------------------------------------------------------------------------
// The launcher

/// One captured output stream of one rank.
struct Stream {
  int fd = -1;      // read end of the pipe; -1 after EOF / close
  int dest = -1;    // STDOUT_FILENO or STDERR_FILENO
  std::string buf;  // bytes after the last newline
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;  // started and not yet reaped
  int status = 0;
  Stream out;
  Stream err;
  int exec_status_fd = -1;  // read end of the close-on-exec pipe reporting exec failure
};

enum class Cause { kNone, kRankFailed, kSignal, kTimeout };

class Launcher {
 public:
  explicit Launcher(Options o)
      : o_(std::move(o)),
        node_prefix_(o_.nnodes > 1 ? "node " + std::to_string(o_.node_rank) + ": " : "") {}

  int run() {
    check_fd_limit(o_);
    if (o_.master_port == 0) {
      o_.master_port = o_.nnodes > 1 ? kDefaultMultiNodePort : pick_free_port();
    }
    install_signal_handlers();
    build_environments();
    if (int code = start_ranks(); code != 0) return code;
    loop();
    finish_streams();
    switch (cause_) {
      case Cause::kNone: return 0;
      case Cause::kRankFailed: return exit_code_of(failed_status_);
      case Cause::kSignal: return 128 + cause_signal_;
      case Cause::kTimeout: return kExitTimeout;
    }
    return 1;
  }

 private:
  /// The job-wide rank of local rank `local`.
  int global_rank(int local) const { return o_.node_rank * o_.nproc + local; }

  /// A message on stderr, naming this node when there are several.
  void say(const std::string& message) const { note(node_prefix_ + message); }

  void install_signal_handlers() {
    int fds[2];
    make_pipe(fds);
    set_nonblock(fds[0]);
    set_nonblock(fds[1]);
    signal_pipe_read_ = fds[0];
    g_signal_pipe_write = fds[1];
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : kForwardedSignals) ::sigaction(sig, &sa, nullptr);
    ::sigaction(SIGCHLD, &sa, nullptr);
    ::signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher
  }

  void build_environments() {
    const int n = o_.nproc;
    const int world = o_.nnodes * n;
    const std::set<std::string> ours = {
        "RANK",          "LOCAL_RANK",        "WORLD_SIZE",          "LOCAL_WORLD_SIZE",
        "GROUP_RANK",    "GROUP_WORLD_SIZE",  "ROLE_RANK",           "ROLE_WORLD_SIZE",
        "ROLE_NAME",     "MASTER_ADDR",       "MASTER_PORT",         "TORCHELASTIC_RUN_ID",
        "TORCHELASTIC_RESTART_COUNT",          "TORCHELASTIC_MAX_RESTARTS"};
    std::vector<std::string> base;
    bool has_omp = false;
    for (char** e = environ; *e != nullptr; ++e) {
      std::string entry = *e;
      std::string key = entry.substr(0, entry.find('='));
      if (key == "OMP_NUM_THREADS") has_omp = true;
      if (ours.count(key) == 0) base.push_back(std::move(entry));
    }
    // torchrun sets OMP_NUM_THREADS=1 when it starts more than one rank and it is unset.
    if (n > 1 && !has_omp) base.emplace_back("OMP_NUM_THREADS=1");
    const std::string ns = std::to_string(n);
    const std::string ws = std::to_string(world);
    env_strings_.resize(n);
    env_.resize(n);
    for (int r = 0; r < n; ++r) {
      const std::string rs = std::to_string(global_rank(r));
      std::vector<std::string>& env = env_strings_[r];
      env = base;
      env.push_back("RANK=" + rs);
      env.push_back("LOCAL_RANK=" + std::to_string(r));
      env.push_back("WORLD_SIZE=" + ws);
      env.push_back("LOCAL_WORLD_SIZE=" + ns);
      env.push_back("GROUP_RANK=" + std::to_string(o_.node_rank));
      env.push_back("GROUP_WORLD_SIZE=" + std::to_string(o_.nnodes));
      env.push_back("ROLE_RANK=" + rs);
      env.push_back("ROLE_WORLD_SIZE=" + ws);
      env.push_back("ROLE_NAME=default");
      env.push_back("MASTER_ADDR=" + o_.master_addr.value_or("127.0.0.1"));
      env.push_back("MASTER_PORT=" + std::to_string(o_.master_port));
      env.push_back("TORCHELASTIC_RUN_ID=hyperrun");
      env.push_back("TORCHELASTIC_RESTART_COUNT=0");
      env.push_back("TORCHELASTIC_MAX_RESTARTS=0");
      for (std::string& s : env) env_[r].push_back(s.data());
      env_[r].push_back(nullptr);
    }
    for (const std::string& a : o_.command) argv_strings_.push_back(a);
    for (std::string& a : argv_strings_) argv_.push_back(a.data());
    argv_.push_back(nullptr);
  }

  /// Forks and execs every rank. Returns 0, or 126/127 when the program cannot be executed.
  int start_ranks() {
    const int n = o_.nproc;
    int dev_null = ::open("/dev/null", O_RDONLY);
    if (dev_null < 0) throw std::system_error(errno, std::generic_category(), "/dev/null");
    set_cloexec(dev_null);

    // Block our signals while forking: a SIGINT now is forwarded once every process group
    // exists, and the child must not run our handler before it resets the dispositions.
    sigset_t block;
    sigset_t original;
    sigemptyset(&block);
    for (int sig : kForwardedSignals) sigaddset(&block, sig);
    sigaddset(&block, SIGCHLD);
    ::sigprocmask(SIG_BLOCK, &block, &original);

    ranks_.resize(n);
    for (int r = 0; r < n; ++r) {
      Rank& rank = ranks_[r];
      rank.index = global_rank(r);
      int out[2];
      int err[2];
      int exec_status[2];
      make_pipe(out);
      make_pipe(err);
      make_pipe(exec_status);
#ifdef __linux__
      const pid_t launcher_pid = ::getpid();
#endif
      pid_t pid = ::fork();
      if (pid < 0) throw std::system_error(errno, std::generic_category(), "fork");
      if (pid == 0) {
        // Child: async-signal-safe calls only, then exec.
        ::setpgid(0, 0);
#ifdef __linux__
        // Die with the launcher even if it is SIGKILLed (no stray ranks holding ports).
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (::getppid() != launcher_pid) ::_exit(kExitNotFound);
#endif
        ::dup2(dev_null, STDIN_FILENO);
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
        struct sigaction dfl {};
        dfl.sa_handler = SIG_DFL;
        sigemptyset(&dfl.sa_mask);
        for (int sig : kForwardedSignals) ::sigaction(sig, &dfl, nullptr);
        ::sigaction(SIGCHLD, &dfl, nullptr);
        ::sigaction(SIGPIPE, &dfl, nullptr);
        ::sigprocmask(SIG_SETMASK, &original, nullptr);
        environ = env_[r].data();
        ::execvp(argv_[0], argv_.data());
        int e = errno;
        ssize_t ignored = ::write(exec_status[1], &e, sizeof e);
        (void)ignored;
        ::_exit(e == ENOENT ? kExitNotFound : kExitCannotExecute);
      }
      ::setpgid(pid, pid);  // also here, so that the group exists before any kill(-pid)
      ::close(out[1]);
      ::close(err[1]);
      ::close(exec_status[1]);
      rank.pid = pid;
      rank.running = true;
      rank.out = Stream{out[0], STDOUT_FILENO, {}};
      rank.err = Stream{err[0], STDERR_FILENO, {}};
      rank.exec_status_fd = exec_status[0];
      set_nonblock(out[0]);
      set_nonblock(err[0]);
    }
    ::close(dev_null);
    start_time_ = Clock::now();

    // EOF on the exec-status pipe means exec succeeded; an errno means it failed.
    int exec_errno = 0;
    for (Rank& rank : ranks_) {
      int e = 0;
      size_t got = 0;
      while (got < sizeof e) {
        ssize_t k = ::read(rank.exec_status_fd, reinterpret_cast<char*>(&e) + got, sizeof e - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += static_cast<size_t>(k);
      }
      ::close(rank.exec_status_fd);
      rank.exec_status_fd = -1;
      if (got == sizeof e && exec_errno == 0) exec_errno = e;
    }
    if (exec_errno != 0) {
      say("cannot execute '" + o_.command[0] + "': " + std::strerror(exec_errno));
      for (Rank& rank : ranks_) signal_group(rank, SIGKILL);
      for (Rank& rank : ranks_) {
        while (::waitpid(rank.pid, &rank.status, 0) < 0 && errno == EINTR) {
        }
        rank.running = false;
        close_stream(rank.out);
        close_stream(rank.err);
      }
      ::sigprocmask(SIG_SETMASK, &original, nullptr);
      return exec_errno == ENOENT ? kExitNotFound : kExitCannotExecute;
    }
    ::sigprocmask(SIG_SETMASK, &original, nullptr);
    return 0;
  }

  void loop() {
    std::optional<Clock::time_point> timeout_at;
    if (o_.timeout_s > 0) {
      timeout_at = start_time_ + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double>(o_.timeout_s));
    }
    std::optional<Clock::time_point> linger_until;
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    while (true) {
      reap();
      if (running_count() == 0) {
        if (!linger_until) {
          // Output still open after every rank exited is held by the ranks' own children.
          if (cause_ != Cause::kNone) {
            for (Rank& rank : ranks_) {
              if (rank.out.fd >= 0 || rank.err.fd >= 0) signal_group(rank, SIGKILL);
            }
          }
          linger_until = after_seconds(kLingerSeconds);
        }
        if (open_stream_count() == 0 || Clock::now() >= *linger_until) break;
      }
      const auto now = Clock::now();
      if (timeout_at && cause_ == Cause::kNone && now >= *timeout_at) on_timeout();
      if (kill_at_ && now >= *kill_at_) escalate("did not exit within " +
                                                 format_seconds(kGraceSeconds) + " s of SIGTERM");

      // Sleep until output, a signal, or the next deadline.
      Clock::time_point wake = now + std::chrono::seconds(1);
      if (timeout_at && cause_ == Cause::kNone) wake = std::min(wake, *timeout_at);
      if (kill_at_) wake = std::min(wake, *kill_at_);
      if (linger_until) wake = std::min(wake, *linger_until);
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count() + 1;
      fds.clear();
      streams.clear();
      fds.push_back(pollfd{signal_pipe_read_, POLLIN, 0});
      streams.push_back(nullptr);
      for (Rank& rank : ranks_) {
        for (Stream* s : {&rank.out, &rank.err}) {
          if (s->fd < 0) continue;
          fds.push_back(pollfd{s->fd, POLLIN, 0});
          streams.push_back(s);
        }
      }
      int ready = ::poll(fds.data(), fds.size(), static_cast<int>(std::max<long long>(ms, 0)));
      if (ready < 0) {
        if (errno == EINTR) continue;
        throw std::system_error(errno, std::generic_category(), "poll");
      }
      for (size_t i = 1; i < fds.size(); ++i) {
        if (fds[i].revents != 0) read_stream(*streams[i], rank_of(streams[i]));
      }
      if (fds[0].revents != 0) handle_signals();
    }
  }

  /// Reaps every rank that has ended; reports the first failure and stops the others.
  void reap() {
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      pid_t got;
      do {
        got = ::waitpid(rank.pid, &rank.status, WNOHANG);
      } while (got < 0 && errno == EINTR);
      if (got != rank.pid) continue;
      rank.running = false;
      // Its last words come before our message about it.
      drain_stream(rank.out, rank.index);
      drain_stream(rank.err, rank.index);
      const bool ok = WIFEXITED(rank.status) && WEXITSTATUS(rank.status) == 0;
      if (ok || cause_ != Cause::kNone) continue;
      cause_ = Cause::kRankFailed;
      failed_status_ = rank.status;
      const size_t others = running_count();
      std::string message = "rank " + std::to_string(rank.index) + " (pid " +
                            std::to_string(rank.pid) + ") " + describe_status(rank.status);
      if (others > 0) message += "; stopping " + count_ranks(others, "other");
      say(message);
      stop(SIGTERM);
    }
  }

  void handle_signals() {
    unsigned char buf[64];
    while (true) {
      ssize_t k = ::read(signal_pipe_read_, buf, sizeof buf);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      for (ssize_t i = 0; i < k; ++i) {
        const int sig = buf[i];
        if (sig == SIGCHLD) continue;  // reap() runs at the top of every iteration
        if (running_count() == 0) continue;  // too late: every rank has already ended
        const std::string name = signal_name(sig) ? signal_name(sig) : describe_signal(sig);
        if (cause_ == Cause::kNone) {
          cause_ = Cause::kSignal;
          cause_signal_ = sig;
          say("received " + name + "; forwarding it to " +
               count_ranks(running_count(), "running"));
          stop(sig);
        } else {
          escalate("still running after hyperrun received " + name + " again");
        }
      }
    }
  }

  void on_timeout() {
    cause_ = Cause::kTimeout;
    std::vector<int> running;
    for (const Rank& rank : ranks_) {
      if (rank.running) running.push_back(rank.index);
    }
    say("timeout after " + format_seconds(o_.timeout_s) + " s: " + describe_ranks(running) +
         " of " + (o_.nnodes > 1 ? "this node's " : "") + std::to_string(ranks_.size()) +
        " still running; stopping them");
    stop(SIGTERM);
  }

  /// Sends `sig` to every running rank's process group and arms the SIGKILL deadline.
  void stop(int sig) {
    for (Rank& rank : ranks_) {
      if (rank.running) signal_group(rank, sig);
    }
    if (!kill_at_ && !killed_) kill_at_ = after_seconds(kGraceSeconds);
  }

  void escalate(const std::string& why) {
    kill_at_.reset();
    killed_ = true;
    std::vector<int> running;
    for (Rank& rank : ranks_) {
      if (!rank.running) continue;
      running.push_back(rank.index);
      signal_group(rank, SIGKILL);
    }
    if (!running.empty()) say(describe_ranks(running) + " " + why + "; sending SIGKILL");
  }

  static void signal_group(const Rank& rank, int sig) {
    if (rank.pid <= 0) return;
    if (::kill(-rank.pid, sig) != 0 && errno == ESRCH && rank.running) ::kill(rank.pid, sig);
  }

  size_t running_count() const {
    return static_cast<size_t>(
        std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
  }

  size_t open_stream_count() const {
    size_t n = 0;
    for (const Rank& rank : ranks_) n += (rank.out.fd >= 0) + (rank.err.fd >= 0);
    return n;
  }

  int rank_of(const Stream* s) const {
    for (const Rank& rank : ranks_) {
      if (&rank.out == s || &rank.err == s) return rank.index;
    }
    return -1;
  }

  enum class ReadResult { kData, kWouldBlock, kClosed };

  /// One read from a stream; emits its complete lines, and at EOF its partial last line.
  ReadResult read_stream(Stream& s, int rank) {
    if (s.fd < 0) return ReadResult::kClosed;
    char chunk[kReadChunk];
    ssize_t k;
    do {
      k = ::read(s.fd, chunk, sizeof chunk);
    } while (k < 0 && errno == EINTR);
    if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ReadResult::kWouldBlock;
    if (k <= 0) {
      flush_partial(s, rank);
      close_stream(s);
      return ReadResult::kClosed;
    }
    s.buf.append(chunk, static_cast<size_t>(k));
    emit_lines(s, rank);
    return ReadResult::kData;
  }

  /// Reads what is in the pipe now, without waiting.
  void drain_stream(Stream& s, int rank) {
    while (read_stream(s, rank) == ReadResult::kData) {
    }
  }

  void emit_lines(Stream& s, int rank) {
    std::string out;
    size_t start = 0;
    while (true) {
      size_t nl = s.buf.find('\n', start);
      if (nl == std::string::npos) {
        if (s.buf.size() - start < kMaxLine) break;
        nl = start + kMaxLine;  // split an overlong line
        append_line(out, rank, s.buf.data() + start, nl - start);
        start = nl;
        continue;
      }
      append_line(out, rank, s.buf.data() + start, nl - start);
      start = nl + 1;
    }
    s.buf.erase(0, start);
    write_dest(s.dest, out);
  }

  void flush_partial(Stream& s, int rank) {
    if (s.buf.empty()) return;
    std::string out;
    append_line(out, rank, s.buf.data(), s.buf.size());
    s.buf.clear();
    write_dest(s.dest, out);
  }

  static void append_line(std::string& out, int rank, const char* data, size_t size) {
    out += "[rank ";
    out += std::to_string(rank);
    out += "]: ";
    out.append(data, size);
    out += '\n';
  }

  void write_dest(int dest, const std::string& data) {
    if (data.empty()) return;
    bool& broken = dest == STDOUT_FILENO ? stdout_broken_ : stderr_broken_;
    if (!broken && !write_all(dest, data.data(), data.size())) broken = true;  // keep draining
  }

  static void close_stream(Stream& s) {
    if (s.fd >= 0) ::close(s.fd);
    s.fd = -1;
  }

  /// At exit: whatever is left in the pipes, then the partial last lines.
  void finish_streams() {
    for (Rank& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        drain_stream(*s, rank.index);
        flush_partial(*s, rank.index);
        close_stream(*s);
      }
    }
  }

  Options o_;
  std::string node_prefix_;  // "node 1: " with several nodes, else empty
  std::vector<std::vector<std::string>> env_strings_;
  std::vector<std::vector<char*>> env_;
  std::vector<std::string> argv_strings_;
  std::vector<char*> argv_;
  std::vector<Rank> ranks_;
  int signal_pipe_read_ = -1;
  Clock::time_point start_time_;
  Cause cause_ = Cause::kNone;
  int failed_status_ = 0;
  int cause_signal_ = 0;
  std::optional<Clock::time_point> kill_at_;
  bool killed_ = false;
  bool stdout_broken_ = false;
  bool stderr_broken_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  ensure_standard_fds_open();
  Options options;
  try {
    options = parse_hyperrun_args(argc, argv);
  } catch (const UsageError& e) {
    note(e.what());
    note("try 'hyperrun --help' for usage");
    return kExitUsage;
  }
  if (options.help) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  try {
    return Launcher(std::move(options)).run();
  } catch (const Refusal& e) {
    note(e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    note(std::string("internal error: ") + e.what());
    return 1;
  }
}
