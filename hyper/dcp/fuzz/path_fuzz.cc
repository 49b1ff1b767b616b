// libFuzzer target for the two ways a chunk file name of a .metadata is turned into a file
// (hyper/dcp/fs.h): ReadFile::open_beneath, which the reader opens every checkpoint file with
// (no symlink followed below the directory, no blocking, regular files with one link), and
// resolve_inside (the older realpath check). A checkpoint directory is made once per process
// (tmpfs when there is one) with files, a subdirectory, symlinks that stay inside (`in` -> sub,
// `sub/up` -> ..) or leave it (`out` -> the parent, `abs` -> /etc, `sub/up2` -> ../.., `loop`
// -> itself, `lnk` -> a), a FIFO (`fifo`, opening it for reading would block), a file with two
// hard links (`h1`, `h2`); the parent holds `secret`. The input is the relative name; its first
// byte picks how the directory is spelt (plain, with a trailing slash, relative to the working
// directory, through a symlink to it) and which function is called.
//
// Invariants: resolve_inside returns a path whose real path lies strictly inside the real path
// of the directory, or throws hyper::ValueError / hyper::IOError. open_beneath returns (without
// blocking) a file reached from the directory through real directories only — no component is
// a symlink, none is '..' — that is a regular file with one link and the size it reports, or
// throws hyper::ValueError / hyper::IOError. Anything else (another exception, a crash, a
// sanitizer report, a path that leaves, a hang past -timeout) is a bug.
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hyper/dcp/fuzz/fuzz_util.h"
#include "hyper/core/errors.h"
#include "hyper/dcp/fs.h"

namespace {

std::string g_root, g_dir, g_real;

void cleanup() {
  for (const char* f : {"ckpt/sub/up", "ckpt/sub/up2", "ckpt/sub/b", "ckpt/a", "ckpt/in",
                        "ckpt/out", "ckpt/abs", "ckpt/loop", "ckpt/lnk", "ckpt/fifo", "ckpt/h1",
                        "ckpt/h2", "ckpt/.metadata", "secret", "dirlink"})
    ::unlink((g_root + "/" + f).c_str());
  ::rmdir((g_root + "/ckpt/sub").c_str());
  ::rmdir((g_root + "/ckpt").c_str());
  ::rmdir(g_root.c_str());
}

void setup() {
  if (!g_root.empty()) return;
  g_root = hyper::fuzz::make_temp_root("path-fuzz");
  g_dir = g_root + "/ckpt";
  std::atexit(cleanup);
  hyper::dcp::make_dirs(g_dir + "/sub");
  for (const char* f : {"ckpt/a", "ckpt/sub/b", "ckpt/.metadata", "ckpt/h1", "secret"})
    hyper::dcp::write_file_atomic(g_root + "/" + f, "x");
  if (::link((g_root + "/ckpt/h1").c_str(), (g_root + "/ckpt/h2").c_str()) != 0) __builtin_trap();
  if (::mkfifo((g_root + "/ckpt/fifo").c_str(), 0600) != 0) __builtin_trap();
  const std::pair<const char*, const char*> links[] = {
      {"sub", "ckpt/in"},    {"..", "ckpt/out"},    {"/etc", "ckpt/abs"},   {"loop", "ckpt/loop"},
      {"..", "ckpt/sub/up"}, {"../..", "ckpt/sub/up2"}, {"ckpt", "dirlink"}, {"a", "ckpt/lnk"}};
  for (const auto& [target, name] : links)
    if (::symlink(target, (g_root + "/" + name).c_str()) != 0) __builtin_trap();
  char real[PATH_MAX];
  if (::realpath(g_dir.c_str(), real) == nullptr) __builtin_trap();
  g_real = std::string(real) + "/";
}

/// The invariant of an accepted open_beneath: every component of `relative` below `dir` is a
/// real directory (the last a regular file with one link and `size` bytes), none is '..'.
void check_beneath(const std::string& dir, const std::string& relative, int64_t size) {
  std::string at = dir;
  size_t start = 0;
  while (true) {
    size_t end = relative.find('/', start);
    const bool last = end == std::string::npos;
    if (last) end = relative.size();
    const std::string part = relative.substr(start, end - start);
    if (part == "..") __builtin_trap();
    if (!part.empty() && part != ".") {
      at += "/" + part;
      struct stat st;
      if (::lstat(at.c_str(), &st) != 0) __builtin_trap();
      if (S_ISLNK(st.st_mode)) __builtin_trap();
      if (last) {
        if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || st.st_size != size) __builtin_trap();
      } else if (!S_ISDIR(st.st_mode)) {
        __builtin_trap();
      }
    } else if (last) {
      __builtin_trap();  // a name ending in '/' or '.' opened as a file
    }
    if (last) return;
    start = end + 1;
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  setup();
  if (size == 0) return 0;
  const std::string relative(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string dir;
  switch (data[0] % 4) {
    case 0: dir = g_dir; break;
    case 1: dir = g_dir + "/"; break;
    case 2: dir = g_root + "/./ckpt"; break;
    case 3: dir = g_root + "/dirlink"; break;
  }
  try {
    if ((data[0] / 4) % 2 == 1) {
      const hyper::dcp::ReadFile f = hyper::dcp::ReadFile::open_beneath(dir, relative, "fuzz");
      if (!f.is_open()) __builtin_trap();
      check_beneath(dir, relative, f.size());
      return 0;
    }
    const std::string path = hyper::dcp::resolve_inside(dir, relative, "fuzz");
    char real[PATH_MAX];
    if (::realpath(path.c_str(), real) == nullptr) __builtin_trap();  // it resolved a moment ago
    if (std::string(real).compare(0, g_real.size(), g_real) != 0) __builtin_trap();
    if (std::string(real).size() <= g_real.size()) __builtin_trap();
  } catch (const hyper::ValueError&) {
  } catch (const hyper::IOError&) {
  }
  return 0;
}
