// hyper-dcp: inspects, verifies and consolidates hyper checkpoints
// (docs/checkpoint_format.md).
//
//   hyper-dcp list [--chunks] DIR          tensors, values and files of a checkpoint
//   hyper-dcp verify [--allow-unchecksummed] DIR
//                                          reads every chunk once and checks its checksums
//   hyper-dcp consolidate [--allow-unchecksummed] DIR OUT.safetensors
//                                          one ordinary safetensors file, every tensor at
//                                          its global shape under its logical name
//
// Exit status: 0 success, 1 a bad or incomplete checkpoint (or an I/O failure), 2 usage.
// consolidate streams each tensor slab by slab through a fixed buffer (--buffer-bytes,
// default 64 MiB), so its memory does not grow with the checkpoint, and writes the output
// atomically (temporary file + rename). It shows a progress bar on stderr when stderr is a
// terminal.

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <limits>
#include <string>
#include <variant>
#include <vector>

#include "hyper/core/format.h"
#include "hyper/core/geometry.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/safetensors.h"
#include "tools/cli/args.h"

namespace {

using hyper::Box;
using hyper::FlatBox;
using hyper::Shape;
using hyper::shape_to_string;
namespace dcp = hyper::dcp;

constexpr int kExitBad = 1;
constexpr int kExitUsage = 2;
constexpr int64_t kDefaultBufferBytes = int64_t{64} << 20;

const char* kUsage =
    "usage: hyper-dcp list [--chunks] [--max-metadata-bytes N] DIR\n"
    "       hyper-dcp verify [--allow-unchecksummed] [--max-metadata-bytes N] DIR\n"
    "       hyper-dcp consolidate [--buffer-bytes N] [--allow-unchecksummed]\n"
    "                             [--max-metadata-bytes N] DIR OUT.safetensors\n"
    "  list         tensors (name, dtype, global shape, chunks, bytes), values and files;\n"
    "               --chunks also prints every chunk (offsets, sizes, file, key)\n"
    "  verify       reads every chunk once and checks its checksums (exit 1 if any is bad);\n"
    "               a checkpoint without checksums (format version 1, stripped fields) is\n"
    "               refused unless --allow-unchecksummed (then what is present is checked)\n"
    "  consolidate  writes one safetensors file holding every tensor at its global shape\n"
    "               under its logical name (streamed through a buffer of N bytes,\n"
    "               default 64 MiB; written atomically)\n"
    "  --max-metadata-bytes N  the largest .metadata read (default 64 MiB, at most 1 GiB);\n"
    "               a larger one is refused before it is read\n";

using hyper::cli::UsageError;

int64_t tensor_bytes(const dcp::TensorMeta& t) {
  return hyper::numel(t.shape) * dcp::dtype_size(t.dtype);
}

std::string value_str(const dcp::Value& v) {
  std::ostringstream os;
  if (auto* i = std::get_if<int64_t>(&v)) {
    os << "int " << *i;
  } else if (auto* d = std::get_if<double>(&v)) {
    os.precision(17);
    os << "float " << *d;
  } else if (auto* b = std::get_if<bool>(&v)) {
    os << "bool " << (*b ? "true" : "false");
  } else {
    os << "str \"" << std::get<std::string>(v) << "\"";
  }
  return os.str();
}

/// Calls fn(slab) for consecutive sub-boxes of `box` whose row-major contents, concatenated,
/// are the box's row-major contents, each at most max(buffer_bytes, one element) bytes.
/// Splits along the outermost dim whose inner block fits in the buffer.
void for_each_slab(const Box& box, int64_t elem_size, int64_t buffer_bytes,
                   const std::function<void(const Box&)>& fn) {
  if (box.empty()) return;
  const int64_t rank = box.rank();
  if (rank == 0) {
    fn(box);
    return;
  }
  // inner[d] = bytes of one index step along dim d (product of the sizes after d).
  std::vector<int64_t> inner(static_cast<size_t>(rank));
  int64_t acc = elem_size;
  for (int64_t d = rank - 1; d >= 0; --d) {
    inner[static_cast<size_t>(d)] = acc;
    acc *= box.sizes[static_cast<size_t>(d)];
  }
  int64_t split = rank - 1;  // the innermost dim always qualifies (one element)
  for (int64_t d = 0; d < rank; ++d) {
    if (inner[static_cast<size_t>(d)] <= buffer_bytes) {
      split = d;
      break;
    }
  }
  const size_t s = static_cast<size_t>(split);
  const int64_t step = std::max<int64_t>(1, buffer_bytes / inner[s]);
  std::vector<int64_t> idx(s, 0);  // odometer over the dims before `split`
  while (true) {
    for (int64_t start = 0; start < box.sizes[s]; start += step) {
      Box slab = box;
      for (size_t d = 0; d < s; ++d) {
        slab.offsets[d] = box.offsets[d] + idx[d];
        slab.sizes[d] = 1;
      }
      slab.offsets[s] = box.offsets[s] + start;
      slab.sizes[s] = std::min(step, box.sizes[s] - start);
      fn(slab);
    }
    size_t d = s;
    while (d > 0) {
      --d;
      if (++idx[d] < box.sizes[d]) break;
      idx[d] = 0;
      if (d == 0) return;
    }
    if (s == 0) return;
  }
}

// ---------------------------------------------------------------------------------- list

int cmd_list(const std::string& dir, bool chunks, dcp::ReadOptions ro) {
  // Lists what .metadata says without reading data: an unsealed one (format version 1) is
  // listed too; verify and consolidate check it.
  ro.allow_unchecksummed = true;
  dcp::CheckpointReader reader(dir, ro);
  const dcp::Metadata& meta = reader.metadata();
  std::cout << "checkpoint " << dir << " (format version " << meta.version << ")\n";
  int64_t total = 0;
  std::cout << "tensors: " << meta.tensors.size() << "\n";
  for (const auto& [name, t] : meta.tensors) {
    const int64_t bytes = tensor_bytes(t);
    total += bytes;
    std::cout << "  " << name << "  " << dcp::dtype_name(t.dtype) << "  "
              << shape_to_string(t.shape, ", ") << "  chunks=" << t.chunks.size() << "  bytes=" << bytes << "\n";
    if (!chunks) continue;
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const dcp::ChunkMeta& c = t.chunks[i];
      std::cout << "    chunk " << i << ": offsets=" << shape_to_string(c.box.offsets, ", ")
                << " sizes=" << shape_to_string(c.box.sizes, ", ") << " file=" << c.file
                << " key=" << (c.key.empty() ? name : c.key);
      if (c.byte_range) {
        std::cout << " byte_range=[" << c.byte_range->first << ", " << c.byte_range->second
                  << ")";
      }
      std::cout << "\n";
    }
  }
  std::cout << "tensor bytes: " << total << "\n";
  std::cout << "values: " << meta.values.size() << "\n";
  for (const auto& [name, v] : meta.values) std::cout << "  " << name << " = " << value_str(v) << "\n";

  std::set<std::string> referenced;
  for (const auto& [name, t] : meta.tensors) {
    for (const auto& c : t.chunks) referenced.insert(c.file);
  }
  std::cout << "files: " << referenced.size() << "\n";
  for (const std::string& f : referenced) {
    struct stat st {};
    const std::string path = dcp::join_path(dir, f);
    if (::stat(path.c_str(), &st) == 0) {
      std::cout << "  " << f << "  " << static_cast<int64_t>(st.st_size) << " bytes\n";
    } else {
      std::cout << "  " << f << "  MISSING\n";
    }
  }
  for (const std::string& f : dcp::list_dir(dir)) {
    if (f == dcp::kMetadataFileName || f == dcp::kLockFileName || referenced.count(f)) continue;
    struct stat st {};
    const std::string path = dcp::join_path(dir, f);
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
      std::cout << "  " << f << "  " << static_cast<int64_t>(st.st_size)
                << " bytes (not referenced)\n";
    }
  }
  return 0;
}

// -------------------------------------------------------------------------------- verify

int cmd_verify(const std::string& dir, const dcp::ReadOptions& options) {
  dcp::CheckpointReader reader(dir, options);
  const dcp::Metadata& meta = reader.metadata();
  int64_t n_chunks = 0, n_bytes = 0, n_unchecked = 0;
  std::vector<std::string> errors;
  std::set<std::string> bad_files;
  for (const auto& [name, t] : meta.tensors) {
    const int64_t es = dcp::dtype_size(t.dtype);
    for (size_t i = 0; i < t.chunks.size(); ++i) {
      const dcp::ChunkMeta& c = t.chunks[i];
      try {
        // Streams the chunk once through a bounded buffer, checking leaf sums (or v1
        // blocks) and the whole-chunk checksum.
        reader.verify_chunk(name, i);
        ++n_chunks;
        n_bytes += c.box.numel() * es;
        if (!c.checksum && !c.leaves && c.block_checksums.empty() && !c.box.empty()) ++n_unchecked;
      } catch (const std::exception& e) {
        errors.push_back("tensor '" + name + "' chunk " + std::to_string(i) + " (file '" +
                         c.file + "'): " + e.what());
        bad_files.insert(c.file);
      }
    }
  }
  if (!errors.empty()) {
    for (const std::string& e : errors) std::cout << "BAD: " << e << "\n";
    std::cout << "FAILED: " << errors.size() << " bad chunk(s) in " << bad_files.size()
              << " file(s):";
    for (const std::string& f : bad_files) std::cout << " " << f;
    std::cout << "\n";
    return kExitBad;
  }
  std::cout << "ok: " << n_chunks << " chunks, " << n_bytes << " bytes verified";
  if (n_unchecked) std::cout << " (" << n_unchecked << " chunks carry no checksum: read only)";
  std::cout << "\n";
  return 0;
}

// --------------------------------------------------------------------------- consolidate

class Progress {
 public:
  explicit Progress(int64_t total) : total_(total), enabled_(::isatty(STDERR_FILENO) == 1) {}
  void add(int64_t n) {
    done_ += n;
    if (!enabled_) return;
    const int pct = total_ > 0 ? static_cast<int>(done_ * 100 / total_) : 100;
    if (pct == last_) return;
    last_ = pct;
    const int width = 40, fill = pct * width / 100;
    std::fprintf(stderr, "\r[%s%s] %3d%% %.1f/%.1f MiB", std::string(fill, '#').c_str(),
                 std::string(width - fill, ' ').c_str(), pct,
                 static_cast<double>(done_) / (1 << 20), static_cast<double>(total_) / (1 << 20));
    std::fflush(stderr);
  }
  void finish() {
    if (enabled_ && last_ >= 0) std::fprintf(stderr, "\n");
  }

 private:
  int64_t total_, done_ = 0;
  bool enabled_;
  int last_ = -1;
};

int cmd_consolidate(const std::string& dir, const std::string& out_path, int64_t buffer_bytes,
                    const dcp::ReadOptions& options) {
  dcp::CheckpointReader reader(dir, options);
  const dcp::Metadata& meta = reader.metadata();

  // Header: tensors in name order, packed without holes; their data is streamed below.
  std::vector<dcp::TensorToWrite> tensors;
  int64_t total = 0;
  for (const auto& [name, t] : meta.tensors) {
    tensors.push_back({name, t.dtype, t.shape, nullptr, tensor_bytes(t)});
    total += tensors.back().nbytes;
  }
  const std::string header = dcp::safetensors_header_bytes(out_path, tensors, {{"format", "pt"}});

  dcp::AtomicFileWriter out(out_path);
  out.write(header.data(), static_cast<int64_t>(header.size()));

  Progress progress(total);
  std::vector<char> buf;
  for (const auto& [name, t] : meta.tensors) {
    const int64_t es = dcp::dtype_size(t.dtype);
    for_each_slab(Box::full(t.shape), es, buffer_bytes, [&](const Box& slab) {
      const int64_t bytes = slab.numel() * es;
      buf.resize(static_cast<size_t>(bytes));
      reader.read(name, {FlatBox{slab, 0}}, t.dtype, buf.data(), bytes);
      out.write(buf.data(), bytes);
      progress.add(bytes);
    });
  }
  progress.finish();
  out.commit();
  std::cout << "wrote " << out_path << ": " << meta.tensors.size() << " tensors, " << total
            << " bytes of data\n";
  return 0;
}

int run(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing subcommand");
  const std::string cmd = argv[1];
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::cout << kUsage;
    return 0;
  }
  bool chunks = false;
  int64_t buffer_bytes = kDefaultBufferBytes;
  // Each subcommand knows only its own options (an unknown subcommand none).
  hyper::cli::ArgParser parser({"unknown option '{arg}' for '" + cmd + "'"},
                               hyper::cli::Positionals::kInterleaved);
  if (cmd == "list") parser.flag({"--chunks"}, [&] { chunks = true; });
  dcp::ReadOptions read_options;
  if (cmd == "verify" || cmd == "consolidate")
    parser.flag({"--allow-unchecksummed"}, [&] { read_options.allow_unchecksummed = true; });
  if (cmd == "list" || cmd == "verify" || cmd == "consolidate")
    parser.option({"--max-metadata-bytes"}, [&](const std::string& v) {
      read_options.max_metadata_bytes = hyper::cli::parse_integer(
          v, "--max-metadata-bytes", 1, dcp::kMaxMetadataBytes, "a number of bytes");
    });
  if (cmd == "consolidate")
    parser.option({"--buffer-bytes"}, [&](const std::string& v) {
      buffer_bytes = hyper::cli::parse_integer(v, "--buffer-bytes", 1,
                                               std::numeric_limits<int64_t>::max(), "a number of bytes");
    });
  const std::vector<std::string> pos = parser.parse(argc, argv, 2);
  auto want = [&](size_t k) {
    if (pos.size() != k) {
      throw UsageError("'" + cmd + "' takes " + std::to_string(k) + " argument(s), got " +
                       std::to_string(pos.size()));
    }
  };
  if (cmd == "list") {
    want(1);
    return cmd_list(pos[0], chunks, read_options);
  }
  if (cmd == "verify") {
    want(1);
    return cmd_verify(pos[0], read_options);
  }
  if (cmd == "consolidate") {
    want(2);
    return cmd_consolidate(pos[0], pos[1], buffer_bytes, read_options);
  }
  throw UsageError("unknown subcommand '" + cmd + "'");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::cerr << "hyper-dcp: " << e.what() << "\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "hyper-dcp: error: " << e.what() << "\n";
    return kExitBad;
  }
}
