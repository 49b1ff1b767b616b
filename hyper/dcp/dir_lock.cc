#include "hyper/dcp/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <thread>

#include "hyper/core/errors.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/fs.h"

namespace hyper::dcp {

using internal::str_cat;

namespace {

std::string read_fd(int fd) {
  std::string out(4096, '\0');
  ssize_t n;
  do {
    n = ::pread(fd, out.data(), out.size(), 0);
  } while (n < 0 && errno == EINTR);
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  while (!out.empty() && (out.back() == '\n' || out.back() == '\0')) out.pop_back();
  return out;
}

}  // namespace

DirLock::DirLock(const std::string& dir, const std::string& holder) {
  const std::string path = join_path(dir, kLockFileName);
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd_ < 0) throw_errno("cannot open the lock file", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    release();
    errno = e;
    throw_errno("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    release();
    throw IOError(str_cat("lock file '", path, "' is not a regular file"));
  }
  int r;
  do {
    r = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (r != 0 && errno == EINTR);
  if (r != 0) {
    const int e = errno;
    if (e == EWOULDBLOCK) {
      // The holder writes its line right after locking; a fresh lock file may still be empty
      // for a moment, so wait briefly for the name.
      std::string other = read_fd(fd_);
      for (int i = 0; other.empty() && i < 40; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        other = read_fd(fd_);
      }
      release();
      if (other.empty()) other = "holder unknown: its lock file stayed empty for 200 ms";
      throw SaveError(str_cat("checkpoint directory '", dir, "' is locked by another save (",
                              other, "); concurrent saves into one directory are refused"));
    }
    release();
    errno = e;
    throw_errno("cannot lock", path);
  }
  locked_ = true;
  // New contents first, then cut to their length (a crashed holder may have left a line).
  const std::string text = holder + "\n";
  if (::pwrite(fd_, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()) ||
      ::ftruncate(fd_, static_cast<off_t>(text.size())) != 0) {
    const int e = errno;
    release();
    errno = e;
    throw_errno("cannot write the lock file", path);
  }
}

DirLock::DirLock(DirLock&& o) noexcept : fd_(o.fd_), locked_(o.locked_) {
  o.fd_ = -1;
  o.locked_ = false;
}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    locked_ = o.locked_;
    o.fd_ = -1;
    o.locked_ = false;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() noexcept {
  // A released lock file is empty, so a refused writer never names a holder that is gone
  // (it waits briefly for the new holder's line instead). A crashed holder leaves its line.
  if (fd_ >= 0 && locked_) (void)::ftruncate(fd_, 0);
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor drops the flock
  fd_ = -1;
  locked_ = false;
}

std::string new_save_id() {
  std::random_device rd;
  const uint64_t mix[3] = {(uint64_t{rd()} << 32) ^ rd(),
                           static_cast<uint64_t>(
                               std::chrono::steady_clock::now().time_since_epoch().count()),
                           static_cast<uint64_t>(::getpid())};
  return checksum_hex(xxh3_64(mix, sizeof(mix)));
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "?";
  return buf;
}

std::string lock_holder_text(const std::string& save_id) {
  std::string job;
  for (const char* v : {"HYPER_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"}) {
    const char* s = std::getenv(v);
    if (s != nullptr && *s != '\0') {
      job = str_cat(", job ", s);
      break;
    }
  }
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char when[32];
  std::strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return str_cat("pid ", ::getpid(), " on host ", host_name(), job, ", save ", save_id, ", since ",
                 when);
}

std::string read_lock_file(const std::string& dir) {
  const std::string path = join_path(dir, kLockFileName);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    if (errno == ENOENT || errno == ENOTDIR) return "";
    throw_errno("cannot open the lock file", path);
  }
  std::string s = read_fd(fd);
  ::close(fd);
  return s;
}

}  // namespace hyper::dcp
