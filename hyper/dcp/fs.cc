#include "hyper/dcp/fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define HYPER_HAVE_OPENAT2_HEADER 1
#endif

#include <algorithm>
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

[[noreturn]] void throw_errno(const std::string& what, const std::string& path) {
  const int e = errno;
  throw IOError(str_cat(what, " '", path, "': ", std::strerror(e)));
}

namespace {

std::atomic<uint64_t> g_tmp_counter{0};

}  // namespace

// ---------------------------------------------------------------- ReadFile

namespace {

// Read-only, close-on-exec, never blocking in open() (a FIFO without a writer, a tty) and
// never becoming the controlling terminal.
constexpr int kReadOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

int64_t ns_of(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + static_cast<int64_t>(t.tv_nsec);
}

// Checks the opened `fd` (regular file; at most `max_links` links when > 0), clears
// O_NONBLOCK and returns its stat. Closes `fd` and throws on a refusal.
struct stat check_opened(int fd, const std::string& path, const std::string& label,
                         int max_links) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    throw_errno("cannot stat", path);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw ValueError(str_cat(label, " is not a regular file (", file_type_name(st.st_mode), ")"));
  }
  if (max_links > 0 && st.st_nlink > static_cast<nlink_t>(max_links)) {
    ::close(fd);
    throw ValueError(str_cat(label, " has ", st.st_nlink,
                             " hard links (a checkpoint file has exactly one)"));
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    throw_errno("cannot set flags of", path);
  }
  return st;
}

#ifdef HYPER_HAVE_OPENAT2_HEADER
// openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS; -1 with errno set. ENOSYS (kernel
// before 5.6) and EPERM (a seccomp filter refusing the unknown call) mean "not available".
int openat2_beneath(int dirfd, const std::string& rel) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(kReadOpenFlags);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(::syscall(SYS_openat2, dirfd, rel.c_str(), &how, sizeof(how)));
}
#endif

// The same without openat2: each directory component with O_NOFOLLOW | O_DIRECTORY, the last
// with O_NOFOLLOW. `..` components were refused by the caller. -1 with errno set.
int openat_nofollow_walk(int dirfd, const std::string& rel) {
  int cur = dirfd;
  size_t start = 0;
  while (true) {
    size_t end = rel.find('/', start);
    const bool last = end == std::string::npos;
    if (last) end = rel.size();
    const std::string comp = rel.substr(start, end - start);
    start = end + 1;
    if (comp.empty() || comp == ".") {
      if (!last) continue;
      // A trailing '/' or '.': the directory itself, which open refuses as not regular.
    }
    const int flags = last ? (kReadOpenFlags | O_NOFOLLOW)
                           : (O_RDONLY | O_CLOEXEC | O_DIRECTORY | O_NOFOLLOW);
    const int fd = ::openat(cur, comp.empty() ? "." : comp.c_str(), flags);
    const int e = errno;
    if (cur != dirfd) ::close(cur);
    if (fd < 0) {
      // O_DIRECTORY | O_NOFOLLOW on a symlink gives ENOTDIR on some kernels: say ELOOP.
      if (!last && e == ENOTDIR) {
        struct stat st {};
        if (::fstatat(dirfd, rel.substr(0, end).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISLNK(st.st_mode)) {
          errno = ELOOP;
          return -1;
        }
      }
      errno = e;
      return -1;
    }
    if (last) return fd;
    cur = fd;
  }
}

}  // namespace

std::string file_type_name(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFLNK: return "a symbolic link";
    default: return "an unknown file type";
  }
}

ReadFile::ReadFile(int fd, std::string path, const struct ::stat& st)
    : fd_(fd),
      size_(static_cast<int64_t>(st.st_size)),
      mtime_ns_(ns_of(st.st_mtim)),
      path_(std::move(path)) {}

ReadFile::ReadFile(const std::string& path) {
  const int fd = ::open(path.c_str(), kReadOpenFlags);
  if (fd < 0) throw_errno("cannot open", path);
  *this = ReadFile(fd, path, check_opened(fd, path, str_cat("'", path, "'"), 0));
}

ReadFile ReadFile::open_beneath(const std::string& dir, const std::string& relative,
                                const std::string& what) {
  check_relative_path(dir, relative, what);
  const std::string path = join_path(dir, relative);
  const std::string label = str_cat("file '", relative, "' of ", what, " in checkpoint ", dir);
  const int dirfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECTORY);
  if (dirfd < 0) throw_errno("cannot open checkpoint directory", dir);
  int fd = -1;
  bool tried = false;
#ifdef HYPER_HAVE_OPENAT2_HEADER
  fd = openat2_beneath(dirfd, relative);
  tried = !(fd < 0 && (errno == ENOSYS || errno == EPERM || errno == E2BIG));
#endif
  if (!tried) fd = openat_nofollow_walk(dirfd, relative);
  const int e = errno;
  ::close(dirfd);
  if (fd < 0) {
    if (e == ELOOP)
      throw ValueError(str_cat(label, " is a symbolic link or passes through one (symbolic "
                               "links are not followed inside a checkpoint)"));
    if (e == EXDEV)
      throw ValueError(str_cat(label, " leaves the checkpoint directory"));
    errno = e;
    throw_errno(str_cat("cannot open (", what, ")"), path);
  }
  return ReadFile(fd, path, check_opened(fd, path, label, 1));
}

ReadFile::ReadFile(ReadFile&& o) noexcept { *this = std::move(o); }

ReadFile& ReadFile::operator=(ReadFile&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = o.fd_;
    size_ = o.size_;
    mtime_ns_ = o.mtime_ns_;
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

FileView::FileView(FileView&& o) noexcept { *this = std::move(o); }

FileView& FileView::operator=(FileView&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = o.data_;
    size_ = o.size_;
    map_ = o.map_;
    map_bytes_ = o.map_bytes_;
    owned_ = std::move(o.owned_);
    o.map_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

FileView::~FileView() { reset(); }

void FileView::reset() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_bytes_);
  map_ = nullptr;
  owned_.reset();
  data_ = nullptr;
  size_ = 0;
}

FileView ReadFile::view(int64_t offset, int64_t n) const {
  HYPER_CHECK_VALUE(fd_ >= 0, "view of a closed file");
  HYPER_CHECK_VALUE(n >= 0 && offset >= 0 && offset <= size_ && n <= size_ - offset,
                    "byte range [", offset, ", ", offset + n, ") is past the end of '", path_,
                    "' (", size_, " bytes)");
  FileView v;
  v.size_ = n;
  if (n == 0) {
    v.data_ = "";
    return v;
  }
  static const int64_t page = ::sysconf(_SC_PAGESIZE);
  const int64_t start = offset / page * page;
  const size_t bytes = static_cast<size_t>(offset + n - start);
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd_, static_cast<off_t>(start));
  if (m != MAP_FAILED) {
    v.map_ = m;
    v.map_bytes_ = bytes;
    v.data_ = static_cast<const char*>(m) + (offset - start);
    return v;
  }
  // A file system without mmap (some FUSE and network ones), or no address space: read.
  v.owned_.reset(new char[static_cast<size_t>(n)]);
  pread_exact(v.owned_.get(), n, offset);
  v.data_ = v.owned_.get();
  return v;
}

void ReadFile::check_unchanged() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) throw_errno("cannot stat", path_);
  const int64_t size = static_cast<int64_t>(st.st_size);
  HYPER_CHECK_VALUE(size == size_ && ns_of(st.st_mtim) == mtime_ns_,
                    "'", path_, "' changed while it was read (size ", size_, " -> ", size,
                    " bytes, modification time ", mtime_ns_, " -> ", ns_of(st.st_mtim),
                    " ns): another process wrote it in place");
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

std::string read_whole_file(const ReadFile& f, int64_t max_bytes) {
  HYPER_CHECK_VALUE(f.size() <= max_bytes, "'", f.path(), "' has ", f.size(),
                    " bytes, more than the limit of ", max_bytes);
  std::string out(static_cast<size_t>(f.size()), '\0');
  f.pread_exact(out.data(), f.size(), 0);
  return out;
}

std::string read_small_file(const std::string& path, int64_t max_bytes) {
  return read_whole_file(ReadFile(path), max_bytes);
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

bool path_exists_no_follow(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
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

namespace {
/// "file 'REL' of WHAT leaves the checkpoint directory DIR (WHY)".
ValueError leaves_dir(const std::string& dir, const std::string& relative,
                      const std::string& what, const char* why) {
  return ValueError(str_cat("file '", relative, "' of ", what, " leaves the checkpoint directory ",
                            dir, " (", why, ")"));
}
}  // namespace

void check_relative_path(const std::string& dir, const std::string& relative,
                         const std::string& what) {
  auto leaves = [&](const char* why) { return leaves_dir(dir, relative, what, why); };
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
}

std::string resolve_inside(const std::string& dir, const std::string& relative,
                           const std::string& what) {
  auto leaves = [&](const char* why) { return leaves_dir(dir, relative, what, why); };
  check_relative_path(dir, relative, what);
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
