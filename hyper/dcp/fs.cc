#include "hyper/dcp/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string>

#include "hyper/core/errors.h"

namespace hyper::dcp {

using internal::str_cat;

namespace {

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  const int e = errno;
  throw IOError(str_cat(what, " '", path, "': ", std::strerror(e)));
}

std::atomic<uint64_t> g_tmp_counter{0};

}  // namespace

// ---------------------------------------------------------------- ReadFile

ReadFile::ReadFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw_errno("cannot open", path);
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw_errno("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw ValueError(str_cat("'", path, "' is not a regular file"));
  }
  size_ = static_cast<int64_t>(st.st_size);
}

ReadFile::ReadFile(ReadFile&& o) noexcept : fd_(o.fd_), size_(o.size_), path_(std::move(o.path_)) {
  o.fd_ = -1;
}

ReadFile& ReadFile::operator=(ReadFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

ReadFile::~ReadFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadFile::pread_exact(void* buf, int64_t n, int64_t offset) const {
  HYPER_CHECK_VALUE(fd_ >= 0, "pread on a closed file");
  HYPER_CHECK_VALUE(n >= 0 && offset >= 0 && offset <= size_ && n <= size_ - offset,
                    "byte range [", offset, ", ", offset + n, ") is past the end of '", path_,
                    "' (", size_, " bytes)");
  char* p = static_cast<char*>(buf);
  while (n > 0) {
    const size_t step = static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30));
    const ssize_t r = ::pread(fd_, p, step, static_cast<off_t>(offset));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot read", path_);
    }
    if (r == 0)
      throw ValueError(str_cat("unexpected end of file in '", path_, "' at byte ", offset,
                               " (the file was truncated while open?)"));
    p += r;
    n -= r;
    offset += r;
  }
}

// ---------------------------------------------------------------- AtomicFileWriter

AtomicFileWriter::AtomicFileWriter(std::string path, const char* fault, int fault_rank)
    : path_(std::move(path)), fault_(fault), fault_rank_(fault_rank) {
  const std::string dir = parent_dir(path_);
  const auto slash = path_.find_last_of('/');
  const std::string base = slash == std::string::npos ? path_ : path_.substr(slash + 1);
  tmp_ = join_path(dir, str_cat(".", base, ".tmp-", ::getpid(), "-", g_tmp_counter++));
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd_ < 0) throw_errno("cannot create", tmp_);
}

AtomicFileWriter::~AtomicFileWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void AtomicFileWriter::write(const void* data, int64_t n) {
  HYPER_CHECK_VALUE(!committed_ && fd_ >= 0, "write to committed file '", path_, "'");
  if (fault_ != nullptr && n > 0) {
    if (const int e = fault_errno(fault_, fault_rank_); e != 0) {
      errno = e;
      throw_errno("cannot write", tmp_);
    }
  }
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const size_t step = static_cast<size_t>(std::min<int64_t>(n, int64_t{1} << 30));
    const ssize_t r = ::write(fd_, p, step);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno("cannot write", tmp_);
    }
    p += r;
    n -= r;
    written_ += r;
  }
}

void AtomicFileWriter::commit() {
  HYPER_CHECK_VALUE(!committed_, "file '", path_, "' committed twice");
  if (::fsync(fd_) != 0) throw_errno("cannot fsync", tmp_);
  if (::close(fd_) != 0) {
    fd_ = -1;
    throw_errno("cannot close", tmp_);
  }
  fd_ = -1;
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) throw_errno("cannot rename onto", path_);
  committed_ = true;
  fsync_dir(parent_dir(path_));
}

void write_file_atomic(const std::string& path, const std::string& contents, const char* fault,
                       int fault_rank) {
  AtomicFileWriter w(path, fault, fault_rank);
  w.write(contents.data(), static_cast<int64_t>(contents.size()));
  w.commit();
}

std::string read_small_file(const std::string& path, int64_t max_bytes) {
  ReadFile f(path);
  HYPER_CHECK_VALUE(f.size() <= max_bytes, "'", path, "' has ", f.size(),
                    " bytes, more than the limit of ", max_bytes);
  std::string out(static_cast<size_t>(f.size()), '\0');
  f.pread_exact(out.data(), f.size(), 0);
  return out;
}

// ---------------------------------------------------------------- paths

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open directory", dir);
  const int r = ::fsync(fd);
  const int e = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); the rename is then as durable
  // as they can make it.
  if (r != 0 && e != EINVAL) {
    errno = e;
    throw_errno("cannot fsync directory", dir);
  }
}

void make_dirs(const std::string& dir) {
  if (dir.empty()) return;
  std::string cur;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = dir.find('/', pos + 1);
    cur = dir.substr(0, pos);
    if (cur.empty() || cur == "/") continue;
    if (::mkdir(cur.c_str(), 0755) != 0 && errno != EEXIST) throw_errno("cannot create directory", cur);
  }
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) throw_errno("cannot stat", dir);
  if (!S_ISDIR(st.st_mode)) throw IOError(str_cat("'", dir, "' exists and is not a directory"));
}

bool path_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> list_dir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) throw_errno("cannot list directory", dir);
  std::vector<std::string> out;
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") out.push_back(n);
  }
  ::closedir(d);
  return out;
}

void remove_file(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_errno("cannot remove", path);
}

std::string parent_dir(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

std::string resolve_inside(const std::string& dir, const std::string& relative,
                           const std::string& what) {
  auto leaves = [&](const char* why) {
    return ValueError(str_cat("file '", relative, "' of ", what,
                              " leaves the checkpoint directory ", dir, " (", why, ")"));
  };
  if (relative.empty()) throw leaves("empty path");
  if (relative.find('\0') != std::string::npos) throw leaves("NUL in path");
  if (relative.front() == '/') throw leaves("absolute path");
  size_t start = 0;
  while (start <= relative.size()) {
    size_t end = relative.find('/', start);
    if (end == std::string::npos) end = relative.size();
    if (relative.compare(start, end - start, "..") == 0 && end - start == 2)
      throw leaves("'..' component");
    start = end + 1;
  }
  const std::string joined = join_path(dir, relative);
  char buf_dir[PATH_MAX];
  char buf_file[PATH_MAX];
  if (::realpath(dir.c_str(), buf_dir) == nullptr) throw_errno("cannot resolve", dir);
  if (::realpath(joined.c_str(), buf_file) == nullptr) throw_errno("cannot resolve", joined);
  std::string root(buf_dir);
  if (root.back() != '/') root += '/';
  if (std::string(buf_file).compare(0, root.size(), root) != 0)
    throw leaves(str_cat("resolves to ", buf_file).c_str());
  return joined;
}

namespace {

/// The action of the first HYPER_DCP_FAULT spec matching `point` and `rank` ("" = none;
/// "exit" for a spec without action).
std::string fault_action(const char* point, int rank) {
  const char* env = std::getenv("HYPER_DCP_FAULT");
  if (env == nullptr || *env == '\0') return "";
  const std::string all(env);
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(',', start);
    if (end == std::string::npos) end = all.size();
    const std::string spec = all.substr(start, end - start);
    start = end + 1;
    const auto c1 = spec.find(':');
    const std::string name = spec.substr(0, c1);
    if (name != point) continue;
    if (c1 == std::string::npos) return "exit";
    const auto c2 = spec.find(':', c1 + 1);
    const std::string who = spec.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
    if (who != "*" && who != std::to_string(rank)) continue;
    return c2 == std::string::npos ? "exit" : spec.substr(c2 + 1);
  }
  return "";
}

}  // namespace

void fault_point(const char* point, int rank) {
  const std::string action = fault_action(point, rank);
  if (action.empty() || action == "enospc") return;
  if (action.compare(0, 6, "sleep=") == 0) {
    const long ms = std::strtol(action.c_str() + 6, nullptr, 10);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return;
  }
  ::_exit(kFaultExitCode);
}

int fault_errno(const char* point, int rank) {
  return fault_action(point, rank) == "enospc" ? ENOSPC : 0;
}

}  // namespace hyper::dcp
