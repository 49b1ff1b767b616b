// libFuzzer target for resolve_inside (hyper/dcp/fs.h), the check every chunk file name of a
// .metadata passes before the reader opens it. A checkpoint directory is made once per process
// (tmpfs when there is one) with files, a subdirectory and symlinks that stay inside (`in` ->
// sub, `sub/up` -> ..) or leave it (`out` -> the parent, `abs` -> /etc, `sub/up2` -> ../..,
// `loop` -> itself); the parent holds `secret`. The input is the relative name; its first byte
// picks how the directory is spelt (plain, with a trailing slash, relative to the working
// directory, through a symlink to it).
//
// Invariant: resolve_inside returns a path whose real path lies strictly inside the real path
// of the directory, or throws hyper::ValueError / hyper::IOError. Anything else (another
// exception, a crash, a sanitizer report, a path that leaves) is a bug.
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/dcp/fs.h"

namespace {

std::string g_root, g_dir, g_real;

void cleanup() {
  for (const char* f : {"ckpt/sub/up", "ckpt/sub/up2", "ckpt/sub/b", "ckpt/a", "ckpt/in",
                        "ckpt/out", "ckpt/abs", "ckpt/loop", "ckpt/.metadata", "secret", "dirlink"})
    ::unlink((g_root + "/" + f).c_str());
  ::rmdir((g_root + "/ckpt/sub").c_str());
  ::rmdir((g_root + "/ckpt").c_str());
  ::rmdir(g_root.c_str());
}

void setup() {
  if (!g_root.empty()) return;
  std::string tmpl = (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
  tmpl += "/hyper-path-fuzz-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) __builtin_trap();
  g_root = buf.data();
  g_dir = g_root + "/ckpt";
  std::atexit(cleanup);
  hyper::dcp::make_dirs(g_dir + "/sub");
  for (const char* f : {"ckpt/a", "ckpt/sub/b", "ckpt/.metadata", "secret"})
    hyper::dcp::write_file_atomic(g_root + "/" + f, "x");
  const std::pair<const char*, const char*> links[] = {
      {"sub", "ckpt/in"},    {"..", "ckpt/out"},    {"/etc", "ckpt/abs"},   {"loop", "ckpt/loop"},
      {"..", "ckpt/sub/up"}, {"../..", "ckpt/sub/up2"}, {"ckpt", "dirlink"}};
  for (const auto& [target, name] : links)
    if (::symlink(target, (g_root + "/" + name).c_str()) != 0) __builtin_trap();
  char real[PATH_MAX];
  if (::realpath(g_dir.c_str(), real) == nullptr) __builtin_trap();
  g_real = std::string(real) + "/";
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
