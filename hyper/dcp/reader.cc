#include "hyper/dcp/reader.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/read_plan.h"
#include "hyper/dcp/checksum.h"

namespace hyper::dcp {

using hyper::internal::str_cat;

namespace {

// Verified reads of one chunk are done in pieces of whole checksum blocks. A piece that lies
// inside one run (contiguous in the chunk and in the destination: a chunk read whole, as in a
// same-layout load) is read straight into the destination and verified there, up to
// kDirectPieceBytes per pread: small enough that the checksum reads the piece from the CPU
// cache right after the copy (64 MiB pieces: verified read 1.6x a plain read; 1-4 MiB: 1.45x,
// measured with AVX2 XXH3). Other pieces go through a bounce buffer of at most
// kBouncePieceBytes (uninitialised, reused by the chunks of one read call) and only the needed
// runs are copied out. (The previous 64 MiB zero-filled buffer per chunk cost more in page
// faults than the read itself: a verified same-layout load took 20x a plain read.)
constexpr int64_t kDirectPieceBytes = int64_t{2} << 20;
constexpr int64_t kBouncePieceBytes = int64_t{8} << 20;

}  // namespace

CheckpointReader::CheckpointReader(std::string dir, ReadOptions options)
    : dir_(std::move(dir)), options_(options) {
  HYPER_CHECK_VALUE(options_.max_metadata_bytes > 0 &&
                        options_.max_metadata_bytes <= kMaxMetadataBytes,
                    "ReadOptions::max_metadata_bytes is ", options_.max_metadata_bytes,
                    ", expected 1..", kMaxMetadataBytes);
  const std::string path = join_path(dir_, kMetadataFileName);
  if (!path_exists_no_follow(path)) {
    HYPER_CHECK_VALUE(path_exists(dir_), "checkpoint directory does not exist: ", dir_);
    throw ValueError(str_cat("incomplete checkpoint (no .metadata): ", dir_));
  }
  // Opened beneath the directory: no symlink, no FIFO (would block), no hard link.
  const ReadFile f = ReadFile::open_beneath(dir_, kMetadataFileName, "the checkpoint metadata");
  HYPER_CHECK_VALUE(f.size() <= options_.max_metadata_bytes, "'", path, "' has ", f.size(),
                    " bytes, more than the limit of ", options_.max_metadata_bytes,
                    " (ReadOptions::max_metadata_bytes)");
  const std::string text = read_whole_file(f, options_.max_metadata_bytes);
  meta_ = Metadata::from_json(text, path);
}

const TensorMeta& CheckpointReader::tensor(const std::string& name) const {
  auto it = meta_.tensors.find(name);
  HYPER_CHECK_VALUE(it != meta_.tensors.end(), "tensor '", name, "' is not in checkpoint ", dir_);
  return it->second;
}

CheckpointReader::OpenFile& CheckpointReader::open_file(const std::string& rel,
                                                        const std::string& what) {
  auto it = files_.find(rel);
  if (it != files_.end()) return *it->second;
  auto f = std::make_unique<OpenFile>();
  f->file = ReadFile::open_beneath(dir_, rel, what);
  f->header = read_safetensors_header(f->file);
  return *files_.emplace(rel, std::move(f)).first->second;
}

std::pair<int64_t, int64_t> CheckpointReader::chunk_range(const std::string& name,
                                                          const TensorMeta& t, size_t ci) {
  const ChunkMeta& c = t.chunks[ci];
  const std::string what = str_cat("chunk ", ci, " of tensor '", name, "'");
  OpenFile& f = open_file(c.file, what);
  const std::string key = c.key.empty() ? name : c.key;
  const TensorInfo* info = f.header.find(key);
  HYPER_CHECK_VALUE(info != nullptr, "'", f.file.path(), "' has no tensor '", key, "' (", what,
                    ")");
  HYPER_CHECK_VALUE(info->dtype == t.dtype, "'", f.file.path(), "': tensor '", key, "' has dtype ",
                    dtype_name(info->dtype), " but the metadata says ", dtype_name(t.dtype),
                    " (", what, ")");
  HYPER_CHECK_VALUE(info->shape == c.box.sizes, "'", f.file.path(), "': tensor '", key,
                    "' has shape ", shape_to_string(info->shape), " but ", what, " has sizes ",
                    shape_to_string(c.box.sizes));
  if (c.byte_range) {
    HYPER_CHECK_VALUE(c.byte_range->second <= f.file.size(), what, ": byte range [",
                      c.byte_range->first, ", ", c.byte_range->second,
                      ") is past the end of '", f.file.path(), "' (", f.file.size(), " bytes)");
    HYPER_CHECK_VALUE(c.byte_range->first == info->begin && c.byte_range->second == info->end,
                      what, ": byte range [", c.byte_range->first, ", ", c.byte_range->second,
                      ") disagrees with the header of '", f.file.path(), "' ([", info->begin,
                      ", ", info->end, "))");
  }
  return {info->begin, info->end};
}

void CheckpointReader::read(const std::string& name, const std::vector<FlatBox>& region,
                            DType dtype, void* dst, int64_t dst_bytes) {
  const TensorMeta& t = tensor(name);
  HYPER_CHECK_VALUE(dtype == t.dtype, "tensor '", name, "' was saved as ", dtype_name(t.dtype),
                    ", cannot load it into ", dtype_name(dtype));
  const int64_t esize = dtype_size(dtype);
  for (const auto& fb : region) {
    HYPER_CHECK_VALUE(fb.box.rank() == static_cast<int64_t>(t.shape.size()), "tensor '", name,
                      "': target box ", fb.box.to_string(), " does not have the rank of shape ",
                      shape_to_string(t.shape));
    HYPER_CHECK_VALUE(Box::full(t.shape).contains(fb.box), "tensor '", name, "': target box ",
                      fb.box.to_string(), " lies outside the saved shape ",
                      shape_to_string(t.shape));
    HYPER_CHECK_VALUE(fb.local_start >= 0 && fb.local_end() <= dst_bytes / esize, "tensor '", name,
                      "': target box ", fb.to_string(), " exceeds the destination (",
                      dst_bytes / esize, " elements)");
  }
  std::vector<Box> boxes;
  for (const auto& c : t.chunks) boxes.push_back(c.box);
  std::vector<ReadRun> runs;
  try {
    runs = read_runs(boxes, region);
  } catch (const ValueError& e) {
    throw ValueError(str_cat("tensor '", name, "' in ", dir_, ": ", e.what()));
  }
  // Group by chunk (stable: keeps each chunk's runs in plan order).
  std::stable_sort(runs.begin(), runs.end(),
                   [](const ReadRun& a, const ReadRun& b) { return a.chunk < b.chunk; });
  char* out = static_cast<char*>(dst);
  std::unique_ptr<char[]> bounce;  // verified reads of blocks only partly needed
  int64_t bounce_bytes = 0;
  size_t i = 0;
  while (i < runs.size()) {
    size_t j = i;
    while (j < runs.size() && runs[j].chunk == runs[i].chunk) ++j;
    const size_t ci = static_cast<size_t>(runs[i].chunk);
    const ChunkMeta& c = t.chunks[ci];
    const std::pair<int64_t, int64_t> range = chunk_range(name, t, ci);
    const int64_t begin = range.first, end = range.second;  // (lambdas below capture begin)
    const int64_t nbytes = end - begin;
    const ReadFile& file = files_.at(c.file)->file;
    const bool verify = options_.verify_checksums && (c.checksum || c.block_size > 0);
    if (!verify) {
      for (size_t k = i; k < j; ++k) {
        const ReadRun& r = runs[k];
        file.pread_exact(out + r.dst_offset * esize, r.length * esize, begin + r.src_offset * esize);
        bytes_read_ += r.length * esize;
      }
      i = j;
      continue;
    }
    // Verified read: whole blocks around the needed byte ranges.
    const int64_t bsize = c.block_size > 0 ? c.block_size : std::max<int64_t>(nbytes, 1);
    std::vector<std::pair<int64_t, int64_t>> spans;  // needed blocks [b0, b1)
    std::vector<ReadRun> sorted(runs.begin() + static_cast<std::ptrdiff_t>(i),
                                runs.begin() + static_cast<std::ptrdiff_t>(j));
    std::sort(sorted.begin(), sorted.end(),
              [](const ReadRun& a, const ReadRun& b) { return a.src_offset < b.src_offset; });
    for (const auto& r : sorted) {
      const int64_t b0 = r.src_offset * esize / bsize;
      const int64_t b1 = ((r.src_offset + r.length) * esize + bsize - 1) / bsize;
      if (!spans.empty() && b0 <= spans.back().second)
        spans.back().second = std::max(spans.back().second, b1);
      else
        spans.emplace_back(b0, b1);
    }
    const int64_t direct_blocks = std::max<int64_t>(1, kDirectPieceBytes / bsize);
    const int64_t bounce_blocks = std::max<int64_t>(1, kBouncePieceBytes / bsize);
    auto verify_blocks = [&](const char* data, int64_t lo, int64_t p0, int64_t p1) {
      for (int64_t b = p0; b < p1; ++b) {
        const int64_t blo = b * bsize;
        const int64_t bhi = std::min(blo + bsize, nbytes);
        const uint64_t expected = c.block_size > 0 ? c.block_checksums[static_cast<size_t>(b)]
                                                   : *c.checksum;
        const uint64_t got = xxh3_64(data + (blo - lo), bhi - blo);
        HYPER_CHECK_VALUE(got == expected, "checksum mismatch in '", file.path(), "', tensor '",
                          name, "' chunk ", ci, ", bytes [", begin + blo, ", ", begin + bhi,
                          "): expected ", checksum_hex(expected), ", got ", checksum_hex(got),
                          " (the file is corrupted)");
      }
    };
    // Blocks from b on (at most `limit`) that lie inside one run, and that run; 0 if block b
    // does not. Blocks are asked in increasing order, so the run pointer only moves forward.
    size_t kc = 0;
    auto inside_one_run = [&](int64_t b, int64_t limit) -> std::pair<int64_t, size_t> {
      const int64_t blo = b * bsize;
      while (kc < sorted.size() && (sorted[kc].src_offset + sorted[kc].length) * esize <= blo)
        ++kc;
      if (kc == sorted.size() || sorted[kc].src_offset * esize > blo) return {0, kc};
      const int64_t run_end = (sorted[kc].src_offset + sorted[kc].length) * esize;
      const int64_t last = run_end >= nbytes ? (nbytes + bsize - 1) / bsize : run_end / bsize;
      return {std::max<int64_t>(0, std::min(last - b, limit)), kc};
    };
    size_t first = 0;  // first sorted run that may still overlap the current piece
    for (const auto& [s0, s1] : spans) {
      for (int64_t p0 = s0; p0 < s1;) {
        const int64_t lo = p0 * bsize;
        const auto [direct, k] = inside_one_run(p0, std::min(s1 - p0, direct_blocks));
        if (direct > 0) {
          // Read into the destination and verify in place (on a mismatch the destination
          // holds the unverified bytes; the load throws).
          const int64_t p1 = p0 + direct;
          const ReadRun& r = sorted[k];
          const int64_t hi = std::min(p1 * bsize, nbytes);
          char* dst_piece = out + r.dst_offset * esize + (lo - r.src_offset * esize);
          file.pread_exact(dst_piece, hi - lo, begin + lo);
          bytes_read_ += hi - lo;
          verify_blocks(dst_piece, lo, p0, p1);
          p0 = p1;
          continue;
        }
        // Bounce the blocks up to the next one that can be read directly.
        int64_t p1 = p0 + 1;
        while (p1 < s1 && p1 - p0 < bounce_blocks && inside_one_run(p1, 1).first == 0) ++p1;
        const int64_t hi = std::min(p1 * bsize, nbytes);
        if (bounce_bytes < hi - lo) {
          bounce_bytes = std::max(hi - lo, std::min(bounce_blocks * bsize, nbytes));
          bounce.reset(new char[static_cast<size_t>(bounce_bytes)]);
        }
        file.pread_exact(bounce.get(), hi - lo, begin + lo);
        bytes_read_ += hi - lo;
        verify_blocks(bounce.get(), lo, p0, p1);
        while (first < sorted.size() &&
               (sorted[first].src_offset + sorted[first].length) * esize <= lo)
          ++first;
        for (size_t q = first; q < sorted.size() && sorted[q].src_offset * esize < hi; ++q) {
          const ReadRun& r = sorted[q];
          const int64_t rlo = std::max(r.src_offset * esize, lo);
          const int64_t rhi = std::min((r.src_offset + r.length) * esize, hi);
          if (rhi <= rlo) continue;
          std::memcpy(out + r.dst_offset * esize + (rlo - r.src_offset * esize),
                      bounce.get() + (rlo - lo), static_cast<size_t>(rhi - rlo));
        }
        p0 = p1;
      }
    }
    i = j;
  }
}

void CheckpointReader::verify_all() {
  for (const auto& [name, t] : meta_.tensors) {
    for (size_t ci = 0; ci < t.chunks.size(); ++ci) {
      const Box& box = t.chunks[ci].box;
      if (box.empty()) {
        chunk_range(name, t, ci);
        continue;
      }
      std::vector<char> tmp(static_cast<size_t>(box.numel() * dtype_size(t.dtype)));
      read(name, {FlatBox{box, 0}}, t.dtype, tmp.data(), static_cast<int64_t>(tmp.size()));
    }
  }
}

}  // namespace hyper::dcp
