// libFuzzer target for the chunk reader (CheckpointReader::read, verify_all): each input builds a
// small checkpoint on disk (a tmpfs directory made once per process) and reads regions of it.
//
// From the input: a dtype, a shape of rank 0..3 (dims <= 6), a grid of chunks spread over up to
// three safetensors files (after a padding tensor, so chunks start at odd offsets), a checksum
// block size of 1..64 bytes (so chunks span many blocks and end in a partial one), which
// checksum fields the .metadata keeps, and up to three corruptions: a flipped data or header
// byte, a truncated file, a shifted byte range, a changed block size (block checksums resized to
// match, their values wrong), a changed checksum, a chunk pointed at another key or at a file
// that leaves the directory (`../`, an absolute path, a symlink out) or is missing. Then reads of
// 1..3 target boxes (sometimes hostile: negative or huge extents, local starts past the
// destination) into a destination buffer, with verification on or off, sometimes a .metadata
// size limit (ReadOptions::max_metadata_bytes) just below or above the file's size, and
// verify_all.
//
// Invariants: only hyper::ValueError or hyper::IOError is thrown (no crash, no sanitizer
// report: the block arithmetic neither overflows nor reads outside a buffer); an uncorrupted
// checkpoint reads every target exactly (compared with the global tensor's bytes) and passes
// verify_all; with every chunk checksummed and verification on, a read either throws or returns
// exactly the saved bytes, and no byte outside the targets' local ranges is written; a limit
// below the .metadata's size is always refused, one at or above it changes nothing.
#include <fuzzer/FuzzedDataProvider.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/geometry.h"
#include "hyper/dcp/fuzz/fuzz_util.h"
#include <cstdio>
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/safetensors.h"

namespace {

using namespace hyper::dcp;
using hyper::Box;
using hyper::FlatBox;
using hyper::Shape;

void check(bool ok) {
  if (!ok) __builtin_trap();
}

std::string g_root;  // <tmp>/fuzz-XXXXXX, holding ckpt/ and outside.st
std::string g_dir;   // the checkpoint directory

void cleanup() {
  if (g_root.empty()) return;
  for (const char* f : {"f0.st", "f1.st", "f2.st", ".metadata", "link.st"})
    ::unlink((g_dir + "/" + f).c_str());
  ::rmdir(g_dir.c_str());
  ::unlink((g_root + "/outside.st").c_str());
  ::rmdir(g_root.c_str());
}

void setup() {
  if (!g_root.empty()) return;
  g_root = hyper::fuzz::make_temp_root("chunk-fuzz");
  g_dir = g_root + "/ckpt";
  make_dirs(g_dir);
  std::atexit(cleanup);
  // A valid safetensors file outside the checkpoint, reachable through a symlink inside.
  const float x[2] = {1, 2};
  write_safetensors(g_root + "/outside.st", {{"t", DType::F32, {2}, x, 8}});
  if (::symlink("../outside.st", (g_dir + "/link.st").c_str()) != 0) __builtin_trap();
}

using hyper::fuzz::flat;
using hyper::fuzz::for_each_index;

void flip_byte(const std::string& path, int64_t at, uint8_t mask) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return;
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size > 0) {
    const off_t pos = static_cast<off_t>(at % size);
    unsigned char c = 0;
    if (::pread(fd, &c, 1, pos) == 1) {
      c ^= mask ? mask : 1;
      if (::pwrite(fd, &c, 1, pos) != 1) __builtin_trap();
    }
  }
  ::close(fd);
}

void run(FuzzedDataProvider& in) {
  const auto& dtypes = all_dtypes();
  const DType dtype = dtypes[in.ConsumeIntegralInRange<size_t>(0, dtypes.size() - 1)];
  const int64_t esize = dtype_size(dtype);
  const int rank = in.ConsumeIntegralInRange<int>(0, 3);
  Shape shape;
  for (int d = 0; d < rank; ++d) shape.push_back(in.ConsumeIntegralInRange<int64_t>(0, 6));
  const int64_t numel = hyper::numel(shape);

  // The global tensor's bytes: element g's byte k is a function of g, k and a seed.
  const uint8_t seed = in.ConsumeIntegral<uint8_t>();
  std::vector<unsigned char> global(static_cast<size_t>(numel * esize));
  for (size_t i = 0; i < global.size(); ++i)
    global[i] = static_cast<unsigned char>((i * 131u + seed) ^ (i >> 3));

  // Chunks: a grid of split points per dim.
  std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(rank));
  for (int d = 0; d < rank; ++d) {
    cuts[d] = {0, shape[d]};
    const int k = in.ConsumeIntegralInRange<int>(0, 2);
    for (int i = 0; i < k; ++i) cuts[d].push_back(in.ConsumeIntegralInRange<int64_t>(0, shape[d]));
    std::sort(cuts[d].begin(), cuts[d].end());
    cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    if (cuts[d].size() < 2) cuts[d] = {0, 0};
  }
  std::vector<Box> boxes = hyper::fuzz::grid_boxes(cuts);
  // Each chunk's bytes, row-major inside the chunk.
  std::vector<std::vector<unsigned char>> data(boxes.size());
  for (size_t c = 0; c < boxes.size(); ++c)
    for_each_index(boxes[c], [&](const std::vector<int64_t>& idx) {
      const auto g = static_cast<size_t>(flat(idx, shape) * esize);
      data[c].insert(data[c].end(), global.begin() + static_cast<std::ptrdiff_t>(g),
                     global.begin() + static_cast<std::ptrdiff_t>(g) + esize);
    });

  const int nfiles = in.ConsumeIntegralInRange<int>(1, 3);
  std::vector<int> file_of(boxes.size());
  for (auto& f : file_of) f = in.ConsumeIntegralInRange<int>(0, nfiles - 1);
  const int64_t block = in.ConsumeIntegralInRange<int64_t>(1, 64);
  const int64_t pad = in.ConsumeIntegralInRange<int64_t>(0, 13);
  const std::vector<unsigned char> pad_bytes(static_cast<size_t>(pad), 0x5a);
  const bool keep_checksum = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  const bool keep_blocks = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  const bool keep_range = in.ConsumeBool();

  Metadata meta;
  TensorMeta& t = meta.tensors["t"];
  t.dtype = dtype;
  t.shape = shape;
  t.chunks.resize(boxes.size());
  for (int f = 0; f < nfiles; ++f) {
    std::vector<size_t> mine;
    for (size_t c = 0; c < boxes.size(); ++c)
      if (file_of[c] == f) mine.push_back(c);
    std::vector<std::string> logical(mine.size(), "t");
    const std::vector<std::string> keys = allocate_physical_keys(logical);
    std::vector<TensorToWrite> tw;
    tw.push_back({"pad", DType::U8, {pad}, pad_bytes.data(), pad});
    for (size_t k = 0; k < mine.size(); ++k) {
      const size_t c = mine[k];
      tw.push_back({keys[k], dtype, boxes[c].sizes, data[c].data(),
                    static_cast<int64_t>(data[c].size())});
    }
    SafetensorsWriteOptions wo;
    wo.checksum_block_size = block;
    const std::string name = "f" + std::to_string(f) + ".st";
    const std::vector<WrittenTensor> written = write_safetensors(join_path(g_dir, name), tw, wo);
    for (size_t k = 0; k < mine.size(); ++k) {
      const WrittenTensor& w = written[k + 1];
      ChunkMeta& ch = t.chunks[mine[k]];
      ch.box = boxes[mine[k]];
      ch.file = name;
      ch.key = keys[k];
      if (keep_range) ch.byte_range = std::make_pair(w.begin, w.end);
      if (keep_checksum) ch.checksum = w.checksum;
      if (keep_blocks && w.block_size > 0) {
        ch.block_size = w.block_size;
        ch.block_checksums = w.block_checksums;
      }
    }
  }

  // Corruptions.
  bool corrupted = false;
  const int ncorrupt = in.ConsumeIntegralInRange<int>(0, 3) == 0 ? in.ConsumeIntegralInRange<int>(1, 3) : 0;
  for (int k = 0; k < ncorrupt; ++k) {
    const int op = in.ConsumeIntegralInRange<int>(0, 7);
    const std::string file = join_path(g_dir, "f" + std::to_string(in.ConsumeIntegralInRange<int>(0, nfiles - 1)) + ".st");
    ChunkMeta& ch = t.chunks[in.ConsumeIntegralInRange<size_t>(0, t.chunks.size() - 1)];
    corrupted = true;
    switch (op) {
      case 0:
        flip_byte(file, in.ConsumeIntegral<uint16_t>(), in.ConsumeIntegral<uint8_t>());
        break;
      case 1:
        if (::truncate(file.c_str(), in.ConsumeIntegralInRange<off_t>(0, 600)) != 0) {}
        break;
      case 2:
        if (ch.byte_range) {
          // (Wrapping: an earlier corruption may have left any int64 here.)
          const uint64_t delta = static_cast<uint64_t>(in.ConsumeIntegralInRange<int64_t>(-9, 9));
          ch.byte_range->first = static_cast<int64_t>(static_cast<uint64_t>(ch.byte_range->first) + delta);
          ch.byte_range->second = static_cast<int64_t>(static_cast<uint64_t>(ch.byte_range->second) + delta);
        } else {
          ch.byte_range = std::make_pair(in.ConsumeIntegral<int64_t>(), in.ConsumeIntegral<int64_t>());
        }
        break;
      case 3: {
        // Another block size, with a matching number of (wrong) block checksums.
        const int64_t nbytes = ch.box.numel() * esize;
        ch.block_size = in.ConsumeBool() ? in.ConsumeIntegralInRange<int64_t>(1, 70)
                                         : in.ConsumeIntegralInRange<int64_t>(1, int64_t{1} << 62);
        ch.block_checksums.assign(static_cast<size_t>((nbytes + ch.block_size - 1) / ch.block_size),
                                  in.ConsumeIntegral<uint64_t>());
        break;
      }
      case 4:
        ch.checksum = in.ConsumeIntegral<uint64_t>();
        break;
      case 5: {
        static const char* const files[] = {"../outside.st", "/etc/passwd", "missing.st",
                                            "link.st",       "f0.st",       "./f1.st",
                                            "f2.st/",        ".",           "f0.st/../f0.st"};
        ch.file = files[in.ConsumeIntegralInRange<size_t>(0, std::size(files) - 1)];
        break;
      }
      case 6:
        ch.key = in.ConsumeBool() ? "pad" : "t.__dcp_chunk_" + std::to_string(in.ConsumeIntegralInRange<int>(0, 3));
        break;
      case 7:
        ch.block_size = 0;
        ch.block_checksums.clear();
        ch.checksum.reset();
        corrupted = k > 0;
        break;
    }
  }
  write_file_atomic(join_path(g_dir, kMetadataFileName), meta.to_json());
  bool all_checksummed = true;
  for (const auto& ch : t.chunks) all_checksummed &= ch.checksum || ch.block_size > 0;

  const bool verify = in.ConsumeIntegralInRange<int>(0, 3) != 0;
  // Targets: inside the shape with disjoint local ranges, or (rarely) anything.
  std::vector<FlatBox> region;
  bool hostile = false;
  int64_t local = in.ConsumeIntegralInRange<int64_t>(0, 3);
  const int nt = in.ConsumeIntegralInRange<int>(1, 3);
  for (int k = 0; k < nt; ++k) {
    FlatBox fb;
    if (in.ConsumeIntegralInRange<int>(0, 7) == 0) {
      hostile = true;
      for (int d = 0; d < rank; ++d) fb.box.offsets.push_back(in.ConsumeIntegral<int64_t>());
      for (int d = 0; d < rank; ++d) fb.box.sizes.push_back(in.ConsumeIntegral<int64_t>());
      fb.local_start = in.ConsumeIntegral<int64_t>();
    } else {
      for (int d = 0; d < rank; ++d) {
        const int64_t o = in.ConsumeIntegralInRange<int64_t>(0, shape[d]);
        fb.box.offsets.push_back(o);
        fb.box.sizes.push_back(in.ConsumeIntegralInRange<int64_t>(0, shape[d] - o));
      }
      fb.local_start = local;
      local = fb.local_end() + in.ConsumeIntegralInRange<int64_t>(0, 2);
    }
    region.push_back(fb);
  }
  const int64_t dst_elems = local + (in.ConsumeIntegralInRange<int>(0, 7) == 0 ? -1 : 0);
  if (dst_elems < 0) hostile = true;
  if (dst_elems < local) hostile = true;
  const size_t dst_bytes = static_cast<size_t>(std::max<int64_t>(dst_elems, 0) * esize);
  std::vector<unsigned char> dst(dst_bytes, 0xee);
  ReadOptions ro;
  ro.verify_checksums = verify;
  // The checkpoints built here are format-1 style (an unsealed .metadata, whole-chunk and block
  // checksums, some dropped on purpose), which a reader refuses by default since format 2;
  // allow_unchecksummed reads them and verifies whatever checksums are present.
  ro.allow_unchecksummed = true;
  // Sometimes a .metadata size limit around the file's size (ReadOptions::max_metadata_bytes):
  // below it the reader must refuse the checkpoint, at or above it read as without a limit.
  bool refused = false;
  if (in.ConsumeIntegralInRange<int>(0, 15) == 0) {
    struct stat st;
    if (::stat((g_dir + "/.metadata").c_str(), &st) != 0) __builtin_trap();
    ro.max_metadata_bytes = in.ConsumeIntegralInRange<int64_t>(1, 2 * st.st_size + 1);
    refused = ro.max_metadata_bytes < st.st_size;
  }
  bool threw = false;
  try {
    CheckpointReader reader(g_dir, ro);
    reader.read("t", region, dtype, dst.data(), static_cast<int64_t>(dst.size()));
  } catch (const hyper::ValueError& e) {
    threw = true;
    if (std::getenv("HYPER_FUZZ_DEBUG")) fprintf(stderr, "read: %s\n", e.what());
  } catch (const hyper::IOError& e) {
    threw = true;
    if (std::getenv("HYPER_FUZZ_DEBUG")) fprintf(stderr, "read: %s\n", e.what());
  }
  check(!threw || corrupted || hostile || refused);
  check(threw || !refused);
  if (!threw && !hostile && (!corrupted || (verify && all_checksummed))) {
    std::vector<unsigned char> want(dst_bytes, 0xee);
    for (const FlatBox& fb : region) {
      int64_t k = fb.local_start;
      for_each_index(fb.box, [&](const std::vector<int64_t>& idx) {
        std::memcpy(&want[static_cast<size_t>(k * esize)],
                    &global[static_cast<size_t>(flat(idx, shape) * esize)],
                    static_cast<size_t>(esize));
        ++k;
      });
    }
    if (dst != want && std::getenv("HYPER_FUZZ_DEBUG")) {
      fprintf(stderr, "dtype %s shape %s verify %d corrupted %d all_checksummed %d\n%s\n", dtype_name(dtype),
              hyper::shape_to_string(shape).c_str(), verify, corrupted, all_checksummed, meta.to_json().c_str());
      for (const auto& fb : region) fprintf(stderr, "region %s\n", fb.to_string().c_str());
      for (size_t i = 0; i < dst.size(); ++i) fprintf(stderr, "%zu: got %02x want %02x\n", i, dst[i], want[i]);
    }
    check(dst == want);
  }
  // verify_all: passes on an intact checkpoint.
  if (in.ConsumeBool()) {
    bool ok = true;
    try {
      CheckpointReader(g_dir, ro).verify_all();
    } catch (const hyper::ValueError&) {
      ok = false;
    } catch (const hyper::IOError&) {
      ok = false;
    }
    check(ok || corrupted || refused);
    check(!ok || !refused);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  setup();
  FuzzedDataProvider in(data, size);
  run(in);
  return 0;
}
