#include "hyper/dcp/reader.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>
#include <memory>
#include <optional>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/read_plan.h"
#include "hyper/dcp/checksum.h"

namespace hyper::dcp {

using hyper::internal::str_cat;

namespace {

// Verification hashes the file's bytes through views (ReadFile::view: mappings of the page
// cache) of at most kViewBytes, so its memory is bounded whatever the load's size; a load
// copies into its targets only after every byte verified (a second pass over the page cache,
// CheckpointReader::copy_verified). verify_chunk reads pieces of at most kBouncePieceBytes.
constexpr int64_t kViewBytes = int64_t{8} << 20;
constexpr int64_t kBouncePieceBytes = int64_t{8} << 20;

/// `checksum mismatch in '<path>', tensor '<name>' chunk <ci>, bytes [lo, hi): expected X,
/// got Y (<why>)` (absolute file offsets).
ValueError chunk_mismatch(const std::string& path, const std::string& name, size_t ci,
                          int64_t lo, int64_t hi, uint64_t expected, uint64_t got,
                          const char* why) {
  return ValueError(str_cat("checksum mismatch in '", path, "', tensor '", name, "' chunk ", ci,
                            ", bytes [", lo, ", ", hi, "): expected ", checksum_hex(expected),
                            ", got ", checksum_hex(got), " (", why, ")"));
}

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
  HYPER_CHECK_VALUE(meta_.checksummed || !options_.verify_checksums ||
                        options_.allow_unchecksummed,
                    path, " carries no checksum (format version ", meta_.version,
                    ", no \"metadata_checksum\"): a checkpoint without checksums cannot be "
                    "verified; pass allow_unchecksummed (hyper-dcp verify "
                    "--allow-unchecksummed) to read it anyway");
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
  if (options_.verify_checksums) {
    HYPER_CHECK_VALUE((c.checksum && c.header_checksum) || options_.allow_unchecksummed, what,
                      " (file '", f.file.path(), "') carries no ",
                      c.checksum ? "header checksum" : "checksum",
                      ": refusing to read it unverified (pass allow_unchecksummed to read it "
                      "anyway)");
    if (c.header_checksum) {
      if (!f.header_hash) {
        std::string head(static_cast<size_t>(f.header.data_start), '\0');
        f.file.pread_exact(head.data(), f.header.data_start, 0);
        f.header_hash = xxh3_64(head.data(), f.header.data_start);
      }
      HYPER_CHECK_VALUE(*f.header_hash == *c.header_checksum, "header checksum mismatch in '",
                        f.file.path(), "' (", what, "): expected ",
                        checksum_hex(*c.header_checksum), ", got ", checksum_hex(*f.header_hash),
                        " (the file header was edited or is corrupted)");
    }
    if (c.leaves) {
      const TensorInfo* li = f.header.find(c.leaves->key);
      const int64_t want = c.leaves->leaves_for(info->nbytes()) * 8;
      HYPER_CHECK_VALUE(li != nullptr && li->dtype == DType::U8 && li->nbytes() == want, "'",
                        f.file.path(), "': the leaf checksums '", c.leaves->key, "' of ", what,
                        " are missing or are not ", want, " bytes of U8");
    }
  }
  return {info->begin, info->end};
}

struct CheckpointReader::ChunkRead {
  size_t ci = 0;
  int64_t begin = 0, end = 0;  // the chunk's absolute byte range in its file
  std::vector<ReadRun> runs;   // sorted by src_offset
};

void CheckpointReader::read_leaf_sums(const std::string& name, const TensorMeta& t, size_t ci,
                                      int64_t g0, int64_t g1, std::vector<uint64_t>& sums) {
  const ChunkMeta& c = t.chunks[ci];
  const LeafChecksums& l = *c.leaves;
  const OpenFile& f = *files_.at(c.file);
  const TensorInfo* li = f.header.find(l.key);  // validated by chunk_range
  const int64_t n_leaves = li->nbytes() / 8;
  const int64_t lo = g0 * l.group_leaves, hi = std::min(g1 * l.group_leaves, n_leaves);
  std::vector<unsigned char> buf(static_cast<size_t>((hi - lo) * 8));
  f.file.pread_exact(buf.data(), (hi - lo) * 8, li->begin + lo * 8);
  bytes_read_ += (hi - lo) * 8;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t glo = g * l.group_leaves, ghi = std::min(glo + l.group_leaves, n_leaves);
    const uint64_t expected = l.group_checksums[static_cast<size_t>(g)];
    const uint64_t got = xxh3_64(buf.data() + (glo - lo) * 8, (ghi - glo) * 8);
    HYPER_CHECK_VALUE(got == expected, "checksum mismatch in '", f.file.path(), "', tensor '",
                      name, "' chunk ", ci, ", leaf checksums '", l.key, "' of bytes [",
                      glo * l.leaf_size, ", ", ghi * l.leaf_size, ") of the chunk: expected ",
                      checksum_hex(expected), ", got ", checksum_hex(got),
                      " (the file is corrupted)");
  }
  sums.resize(static_cast<size_t>(hi - lo));
  for (int64_t k = 0; k < hi - lo; ++k) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | buf[static_cast<size_t>(k * 8 + b)];
    sums[static_cast<size_t>(k)] = v;
  }
}


std::vector<CheckpointReader::ChunkRead> CheckpointReader::plan(
    const std::string& name, const std::vector<FlatBox>& region, DType dtype,
    int64_t dst_bytes) {
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
    // (The box lies inside the shape, so its numel cannot overflow; local_start may be anything.)
    HYPER_CHECK_VALUE(fb.local_start >= 0 && fb.local_start <= dst_bytes / esize - fb.box.numel(),
                      "tensor '", name, "': target box ", fb.box.to_string(), " at local offset ",
                      fb.local_start, " (", fb.box.numel(), " elements) exceeds the destination (",
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
  std::vector<ChunkRead> out;
  for (size_t i = 0; i < runs.size();) {
    size_t j = i;
    while (j < runs.size() && runs[j].chunk == runs[i].chunk) ++j;
    ChunkRead cr;
    cr.ci = static_cast<size_t>(runs[i].chunk);
    std::tie(cr.begin, cr.end) = chunk_range(name, t, cr.ci);
    cr.runs.assign(runs.begin() + static_cast<std::ptrdiff_t>(i),
                   runs.begin() + static_cast<std::ptrdiff_t>(j));
    std::sort(cr.runs.begin(), cr.runs.end(),
              [](const ReadRun& a, const ReadRun& b) { return a.src_offset < b.src_offset; });
    out.push_back(std::move(cr));
    i = j;
  }
  return out;
}

void CheckpointReader::verify(const std::string& name, const std::vector<FlatBox>& region,
                              DType dtype, int64_t dst_bytes) {
  verify_planned(name, plan(name, region, dtype, dst_bytes), dtype, /*check_bools=*/true);
}

void CheckpointReader::read(const std::string& name, const std::vector<FlatBox>& region,
                            DType dtype, void* dst, int64_t dst_bytes) {
  const std::vector<ChunkRead> p = plan(name, region, dtype, dst_bytes);
  verify_planned(name, p, dtype, /*check_bools=*/false);
  copy_planned(name, p, dtype, static_cast<char*>(dst));
}

void CheckpointReader::read_into_scratch(const std::string& name,
                                         const std::vector<FlatBox>& region, DType dtype,
                                         void* dst, int64_t dst_bytes) {
  read(name, region, dtype, dst, dst_bytes);
}

void CheckpointReader::copy_verified(const std::string& name, const std::vector<FlatBox>& region,
                                     DType dtype, void* dst, int64_t dst_bytes) {
  copy_planned(name, plan(name, region, dtype, dst_bytes), dtype, static_cast<char*>(dst));
}

void CheckpointReader::check_unchanged() const {
  for (const auto& [rel, f] : files_) f->file.check_unchanged();
}

bool CheckpointReader::verifies(const ChunkMeta& c, int64_t nbytes) const {
  return options_.verify_checksums && nbytes > 0 && (c.leaves || c.block_size > 0 || c.checksum);
}

void CheckpointReader::copy_planned(const std::string& name, const std::vector<ChunkRead>& plan,
                                    DType dtype, char* out) {
  const TensorMeta& t = tensor(name);
  const int64_t esize = dtype_size(dtype);
  for (const ChunkRead& cr : plan) {
    const ChunkMeta& c = t.chunks[cr.ci];
    const int64_t nbytes = cr.end - cr.begin;
    const ReadFile& file = files_.at(c.file)->file;
    // Bytes of verified chunks were counted when verified (each file byte counts once).
    const bool count = !verifies(c, nbytes);
    // Runs copied out of views of up to kViewBytes: one mapping serves many small runs (a
    // Shard(1) reshard's 1 KiB pieces of every row) where a pread each costs a system call.
    FileView v;
    int64_t vlo = 0, vhi = 0;  // the view holds chunk bytes [vlo, vhi)
    for (const ReadRun& r : cr.runs) {
      int64_t lo = r.src_offset * esize;
      const int64_t hi = lo + r.length * esize;
      char* d = out + r.dst_offset * esize;
      while (lo < hi) {
        if (lo < vlo || lo >= vhi) {
          vlo = lo;
          vhi = std::min(nbytes, lo + kViewBytes);
          v = file.view(cr.begin + vlo, vhi - vlo);
        }
        const int64_t n = std::min(hi, vhi) - lo;
        std::memcpy(d, v.data() + (lo - vlo), static_cast<size_t>(n));
        d += n;
        lo += n;
      }
      if (count) bytes_read_ += r.length * esize;
    }
  }
}

void CheckpointReader::verify_planned(const std::string& name, const std::vector<ChunkRead>& plan,
                                      DType dtype, bool check_bools) {
  const TensorMeta& t = tensor(name);
  const int64_t esize = dtype_size(dtype);
  std::vector<uint64_t> leaf_sums, group_sums;
  for (const ChunkRead& cr : plan) {
    const size_t ci = cr.ci;
    const ChunkMeta& c = t.chunks[ci];
    const int64_t begin = cr.begin, end = cr.end;  // (lambdas below capture begin)
    const int64_t nbytes = end - begin;
    const ReadFile& file = files_.at(c.file)->file;
    const std::vector<ReadRun>& sorted = cr.runs;
    auto mismatch = [&](int64_t lo, int64_t hi, uint64_t expected, uint64_t got,
                        const char* why) {
      return chunk_mismatch(file.path(), name, ci, begin + lo, begin + hi, expected, got, why);
    };
    if (verifies(c, nbytes)) {
      // A chunk needed whole by one run (a same-layout load), or one with only a whole-chunk
      // checksum: one streamed hash over views of the file (no leaf sums to read).
      const bool whole_run = sorted.size() == 1 && sorted[0].src_offset == 0 &&
                             sorted[0].length * esize == nbytes;
      bool verified = false;
      std::optional<uint64_t> whole_mismatch;
      if (c.checksum && (whole_run || (!c.leaves && c.block_size == 0))) {
        Xxh3Stream stream;
        for (int64_t lo = 0; lo < nbytes; lo += kViewBytes) {
          const int64_t n = std::min(kViewBytes, nbytes - lo);
          const FileView v = file.view(begin + lo, n);
          bytes_read_ += n;
          stream.update(v.data(), n);
        }
        const uint64_t got = stream.digest();
        verified = got == *c.checksum;
        // On a mismatch with leaf sums, check leaf by leaf below to name the corrupted
        // bytes; if every leaf matches, the whole-chunk checksum's mismatch is the error.
        if (!verified) whole_mismatch = got;
        if (!verified && !c.leaves && c.block_size == 0)
          throw mismatch(0, nbytes, *c.checksum, got, "the file is corrupted");
      }
      if (!verified) {
        // Leaves (v2) or blocks (v1): the blocks the runs touch, hashed from views of up to
        // kViewBytes spanning several runs' blocks.
        const int64_t bsize = c.leaves ? c.leaves->leaf_size : c.block_size;
        std::vector<std::pair<int64_t, int64_t>> spans;  // needed blocks [b0, b1)
        for (const auto& r : sorted) {
          const int64_t b0 = r.src_offset * esize / bsize;
          const int64_t b1 = ((r.src_offset + r.length) * esize + bsize - 1) / bsize;
          if (!spans.empty() && b0 <= spans.back().second)
            spans.back().second = std::max(spans.back().second, b1);
          else
            spans.emplace_back(b0, b1);
        }
        if (c.leaves) {
          // The leaf sums of every group the spans touch, verified against .metadata.
          const int64_t gl = c.leaves->group_leaves;
          leaf_sums.assign(static_cast<size_t>(c.leaves->leaves_for(nbytes)), 0);
          std::vector<std::pair<int64_t, int64_t>> groups;
          for (const auto& [b0, b1] : spans) {
            const int64_t g0 = b0 / gl, g1 = (b1 - 1) / gl + 1;
            if (!groups.empty() && g0 <= groups.back().second)
              groups.back().second = std::max(groups.back().second, g1);
            else
              groups.emplace_back(g0, g1);
          }
          for (const auto& [g0, g1] : groups) {
            read_leaf_sums(name, t, ci, g0, g1, group_sums);
            std::copy(group_sums.begin(), group_sums.end(),
                      leaf_sums.begin() + static_cast<std::ptrdiff_t>(g0 * gl));
          }
        }
        const int64_t view_blocks = std::max<int64_t>(1, kViewBytes / bsize);
        FileView v;
        int64_t vlo = 0, vb1 = 0;  // the view starts at chunk byte vlo, holds blocks < vb1
        for (const auto& [s0, s1] : spans) {
          for (int64_t b = s0; b < s1; ++b) {
            if (b >= vb1 || b * bsize < vlo) {
              vlo = b * bsize;
              vb1 = std::min(b + view_blocks, (nbytes + bsize - 1) / bsize);
              v = file.view(begin + vlo, std::min(vb1 * bsize, nbytes) - vlo);
            }
            const int64_t blo = b * bsize, bhi = std::min(blo + bsize, nbytes);
            const uint64_t expected = c.leaves ? leaf_sums[static_cast<size_t>(b)]
                                               : c.block_checksums[static_cast<size_t>(b)];
            const uint64_t got = xxh3_64(v.data() + (blo - vlo), bhi - blo);
            bytes_read_ += bhi - blo;
            if (got != expected) throw mismatch(blo, bhi, expected, got, "the file is corrupted");
          }
        }
        if (whole_mismatch)  // every leaf matched; the whole-chunk checksum did not
          throw mismatch(0, nbytes, *c.checksum, *whole_mismatch,
                         "the file is corrupted or changed while read");
      }
    }
    if (check_bools && dtype == DType::BOOL) {
      // Bytes other than 0 and 1 are not bools (torch would hold invalid values); checksums
      // do not catch them in a crafted checkpoint sealed with valid checksums.
      for (const ReadRun& r : sorted) {
        const FileView v = file.view(begin + r.src_offset * esize, r.length * esize);
        const auto* p = reinterpret_cast<const uint8_t*>(v.data());
        for (int64_t i = 0; i < r.length; ++i)
          HYPER_CHECK_VALUE(p[i] <= 1, "loading '", name, "': BOOL element ",
                            r.dst_offset + i, " holds the byte ", static_cast<int>(p[i]),
                            " (a bool is 0 or 1)");
      }
    }
  }
}

void CheckpointReader::verify_chunk(const std::string& name, size_t ci) {
  const TensorMeta& t = tensor(name);
  HYPER_CHECK_VALUE(ci < t.chunks.size(), "tensor '", name, "' has ", t.chunks.size(),
                    " chunks, no chunk ", ci);
  const ChunkMeta& c = t.chunks[ci];
  // Plain variables, not a structured binding: the lambda below captures them (C++17 clang).
  const std::pair<int64_t, int64_t> range = chunk_range(name, t, ci);
  const int64_t begin = range.first, end = range.second;
  const int64_t nbytes = end - begin;
  const ReadFile& file = files_.at(c.file)->file;
  const bool any = c.checksum || c.leaves || c.block_size > 0;
  HYPER_CHECK_VALUE(any || options_.allow_unchecksummed, "chunk ", ci, " of tensor '", name,
                    "' (file '", file.path(), "') carries no checksum");
  // Pieces of whole leaf groups (or v1 blocks): every byte is read once, memory is bounded.
  const int64_t unit = c.leaves           ? c.leaves->leaf_size * c.leaves->group_leaves
                       : c.block_size > 0 ? c.block_size
                                          : 1;
  const int64_t piece = std::max<int64_t>(unit, kBouncePieceBytes / unit * unit);
  std::unique_ptr<char[]> buf(new char[static_cast<size_t>(std::max<int64_t>(1, std::min(piece, nbytes)))]);
  Xxh3Stream whole;
  std::vector<uint64_t> sums;
  auto check = [&](uint64_t expected, uint64_t got, int64_t lo, int64_t hi) {
    if (got != expected)
      throw chunk_mismatch(file.path(), name, ci, begin + lo, begin + hi, expected, got,
                           "the file is corrupted");
  };
  for (int64_t off = 0; off < nbytes; off += piece) {
    const int64_t n = std::min(piece, nbytes - off);
    file.pread_exact(buf.get(), n, begin + off);
    bytes_read_ += n;
    whole.update(buf.get(), n);
    if (c.leaves) {
      const int64_t leaf = c.leaves->leaf_size, gl = c.leaves->group_leaves;
      const int64_t g0 = off / unit, g1 = (off + n + unit - 1) / unit;
      read_leaf_sums(name, t, ci, g0, g1, sums);
      for (int64_t b = off / leaf; b * leaf < off + n; ++b) {
        const int64_t lo = b * leaf, hi = std::min(lo + leaf, nbytes);
        check(sums[static_cast<size_t>(b - g0 * gl)], xxh3_64(buf.get() + (lo - off), hi - lo),
              lo, hi);
      }
    } else if (c.block_size > 0) {
      for (int64_t lo = off; lo < off + n; lo += c.block_size) {
        const int64_t hi = std::min(lo + c.block_size, nbytes);
        check(c.block_checksums[static_cast<size_t>(lo / c.block_size)],
              xxh3_64(buf.get() + (lo - off), hi - lo), lo, hi);
      }
    }
  }
  if (c.checksum) check(*c.checksum, nbytes > 0 ? whole.digest() : xxh3_64("", 0), 0, nbytes);
}

void CheckpointReader::verify_all() {
  for (const auto& [name, t] : meta_.tensors)
    for (size_t ci = 0; ci < t.chunks.size(); ++ci) verify_chunk(name, ci);
}

}  // namespace hyper::dcp
