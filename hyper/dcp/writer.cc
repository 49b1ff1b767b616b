// The torch-free writing side of the checkpoint (writer.h): raw chunks into a data file,
// the metadata, the commit.
#include "hyper/dcp/writer.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <limits>
#include <random>
#include <set>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/read_plan.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/fs.h"

namespace hyper::dcp {

using hyper::internal::str_cat;

namespace {

bool is_data_file_name(const std::string& n) {
  const std::string suffix = ".safetensors";
  return n.size() > 2 + suffix.size() && n.compare(0, 2, "__") == 0 &&
         n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_temp_name(const std::string& n) {
  return (n.compare(0, 3, ".__") == 0 && n.find(".safetensors.tmp-") != std::string::npos) ||
         n.compare(0, 15, "..metadata.tmp-") == 0;
}

}  // namespace

std::string unique_data_file_name(int rank) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  uint64_t mix[4] = {(uint64_t{rd()} << 32) ^ rd(),
                     static_cast<uint64_t>(
                         std::chrono::steady_clock::now().time_since_epoch().count()),
                     static_cast<uint64_t>(::getpid()), counter++};
  return str_cat("__", rank, "_", checksum_hex(xxh3_64(mix, sizeof(mix))), ".safetensors");
}

std::vector<ChunkRecord> write_raw_chunks(const std::string& dir, const std::string& file_name,
                                          const std::vector<RawChunk>& chunks,
                                          const WriteOptions& options, int64_t* file_bytes) {
  HYPER_CHECK_VALUE(!file_name.empty() && file_name.find('/') == std::string::npos &&
                        file_name != "." && file_name != ".." && file_name != kMetadataFileName,
                    "invalid data file name '", file_name, "'");
  std::vector<std::string> names;
  std::vector<TensorToWrite> to_write;
  std::vector<ChunkRecord> records;
  for (const auto& c : chunks) {
    const std::string what = str_cat("chunk ", c.box.to_string(), " of '", c.name, "'");
    HYPER_CHECK_VALUE(!c.name.empty(), "a chunk has an empty tensor name");
    HYPER_CHECK_VALUE(c.data != nullptr || c.nbytes == 0, what, ": no data");
    check_shape(c.global_shape, "global shape");
    HYPER_CHECK_VALUE(c.box.rank() == static_cast<int64_t>(c.global_shape.size()) &&
                          c.box.offsets.size() == c.box.sizes.size(),
                      what, " does not have the rank of global shape ",
                      shape_to_string(c.global_shape));
    HYPER_CHECK_VALUE(Box::full(c.global_shape).contains(c.box), what,
                      " lies outside global shape ", shape_to_string(c.global_shape));
    HYPER_CHECK_VALUE(c.nbytes == c.box.numel() * dtype_size(c.dtype), what, ": data has ",
                      c.nbytes / dtype_size(c.dtype), " elements, the box ", c.box.numel(),
                      c.nbytes % dtype_size(c.dtype) ? " (and a partial element)" : "");
    ChunkRecord r;
    r.name = c.name;
    r.dtype = c.dtype;
    r.global_shape = c.global_shape;
    r.chunk.box = c.box;
    r.chunk.file = file_name;
    names.push_back(c.name);
    to_write.push_back(TensorToWrite{"", r.dtype, c.box.sizes, c.data, c.nbytes});
    records.push_back(std::move(r));
  }
  HYPER_CHECK_VALUE(options.checksum_leaf_size > 0 && options.checksum_block_size > 0,
                    "checksum leaf size and block size must be positive, got ",
                    options.checksum_leaf_size, " and ", options.checksum_block_size);
  const auto keys = allocate_physical_keys(names);
  std::set<std::string> used(keys.begin(), keys.end());
  for (size_t i = 0; i < keys.size(); ++i) {
    to_write[i].key = keys[i];
    records[i].chunk.key = keys[i];
  }
  // Leaf checksums: one XXH3-64 per leaf, stored little-endian as a U8 tensor after the data
  // (docs/checkpoint_format.md, "Checksums"); .metadata gets one checksum per group of leaves.
  const int64_t leaf = options.checksum_leaf_size;
  const int64_t group_leaves = std::max<int64_t>(1, options.checksum_block_size / leaf);
  std::vector<std::vector<unsigned char>> leaf_bytes(chunks.size());
  const size_t n_chunks = to_write.size();
  for (size_t i = 0; i < n_chunks; ++i) {
    const std::vector<uint64_t> sums = block_checksums(to_write[i].data, to_write[i].nbytes, leaf);
    if (sums.empty()) continue;  // at most one leaf: the whole-chunk checksum covers it
    auto& bytes = leaf_bytes[i];
    bytes.resize(sums.size() * 8);
    for (size_t k = 0; k < sums.size(); ++k)
      for (int b = 0; b < 8; ++b) bytes[k * 8 + b] = static_cast<unsigned char>(sums[k] >> (8 * b));
    std::string key = keys[i] + ".__dcp_leaves";
    while (used.count(key)) key += "_";
    used.insert(key);
    LeafChecksums l;
    l.key = key;
    l.leaf_size = leaf;
    l.group_leaves = group_leaves;
    for (size_t g = 0; g < sums.size(); g += static_cast<size_t>(group_leaves)) {
      const size_t n = std::min(sums.size() - g, static_cast<size_t>(group_leaves));
      l.group_checksums.push_back(xxh3_64(bytes.data() + g * 8, static_cast<int64_t>(n * 8)));
    }
    records[i].chunk.leaves = std::move(l);
    to_write.push_back(TensorToWrite{key, DType::U8, {static_cast<int64_t>(bytes.size())},
                                     bytes.data(), static_cast<int64_t>(bytes.size())});
  }
  SafetensorsWriteOptions so;
  so.checksum_block_size = std::numeric_limits<int64_t>::max();  // leaves replace v1 blocks
  so.fault_rank = options.rank;
  so.metadata = {{"format", "hyper-dcp"}};
  const std::string path = join_path(dir, file_name);
  // The exact header bytes write_safetensors writes (the same function builds them).
  const std::string header = safetensors_header_bytes(path, to_write, so.metadata);
  const uint64_t header_sum = xxh3_64(header.data(), static_cast<int64_t>(header.size()));
  const auto written = write_safetensors(path, to_write, so);
  if (file_bytes) {
    *file_bytes = static_cast<int64_t>(header.size());  // the 8-byte length + JSON
    for (const auto& w : written) *file_bytes = std::max(*file_bytes, w.end);
  }
  for (size_t i = 0; i < n_chunks; ++i) {
    auto& ch = records[i].chunk;
    ch.byte_range = std::make_pair(written[i].begin, written[i].end);
    ch.checksum = written[i].checksum;
    ch.header_checksum = header_sum;
  }
  return records;
}

Metadata build_metadata(const std::vector<ChunkRecord>& records,
                        const std::map<std::string, Value>& values) {
  Metadata m;
  for (const auto& r : records) {
    auto [it, fresh] = m.tensors.try_emplace(r.name);
    TensorMeta& t = it->second;
    if (fresh) {
      t.dtype = r.dtype;
      t.shape = r.global_shape;
    } else {
      HYPER_CHECK_VALUE(t.dtype == r.dtype, "tensor '", r.name, "' saved with dtypes ",
                        dtype_name(t.dtype), " and ", dtype_name(r.dtype));
      HYPER_CHECK_VALUE(t.shape == r.global_shape, "tensor '", r.name,
                        "' saved with global shapes ", shape_to_string(t.shape), " and ",
                        shape_to_string(r.global_shape));
    }
    t.chunks.push_back(r.chunk);
  }
  for (auto& [name, t] : m.tensors) {
    std::vector<Box> boxes;
    for (const auto& c : t.chunks) boxes.push_back(c.box);
    try {
      check_chunks_tile(t.shape, boxes);
    } catch (const ValueError& e) {
      throw ValueError(str_cat("saving tensor '", name, "': ", e.what()));
    }
  }
  for (const auto& [name, v] : values) {
    HYPER_CHECK_VALUE(!m.tensors.count(name), "'", name, "' is both a tensor and a value");
    m.values.emplace(name, v);
  }
  return m;
}

namespace {

/// Confirms every data file `meta` references before the commit: it exists, is a regular file
/// (not followed through a symlink), its safetensors header length fits before its first chunk,
/// it reaches the end of its last chunk and, where `file_sizes` knows it, has exactly the
/// size its writer reported. Throws SaveError naming the file.
void confirm_data_files(const std::string& dir, const Metadata& meta,
                        const std::map<std::string, int64_t>& file_sizes) {
  std::map<std::string, std::pair<int64_t, int64_t>> spans;  // file -> [first begin, last end)
  for (const auto& [name, t] : meta.tensors)
    for (const auto& c : t.chunks) {
      auto [it, fresh] = spans.try_emplace(c.file, INT64_MAX, 0);
      if (c.byte_range) {
        it->second.first = std::min(it->second.first, c.byte_range->first);
        it->second.second = std::max(it->second.second, c.byte_range->second);
      }
    }
  for (const auto& [file_name, span] : spans) {
    const std::string& file = file_name;  // a lambda cannot capture a structured binding (C++17)
    const std::string path = join_path(dir, file);
    auto refuse = [&](const std::string& why) {
      return SaveError(str_cat("cannot commit '", dir, "': data file '", file, "' ", why,
                               "; nothing was committed"));
    };
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0)
      throw refuse(str_cat("referenced by the new metadata is missing (", std::strerror(errno), ")"));
    if (!S_ISREG(st.st_mode)) throw refuse("is not a regular file");
    const int64_t size = static_cast<int64_t>(st.st_size);
    if (auto it = file_sizes.find(file); it != file_sizes.end() && size != it->second)
      throw refuse(str_cat("has ", size, " bytes, expected ", it->second,
                           " (the size its writer reported)"));
    if (size < span.second)
      throw refuse(str_cat("has ", size, " bytes, its chunks end at byte ", span.second));
    if (span.first != INT64_MAX) {
      uint64_t header = 0;
      if (size < 8) throw refuse(str_cat("has no safetensors header (", size, " bytes)"));
      ReadFile f(path);
      f.pread_exact(&header, 8, 0);
      if (header > static_cast<uint64_t>(span.first) ||
          8 + header > static_cast<uint64_t>(span.first))
        throw refuse(str_cat("has a header of ", header, " bytes, overlapping its first chunk at byte ",
                             span.first));
    }
  }
}

}  // namespace

void commit_metadata(const std::string& dir, const Metadata& meta, int rank,
                     const std::map<std::string, int64_t>& file_sizes) {
  const std::string text = meta.to_json();
  confirm_data_files(dir, meta, file_sizes);
  fault_point("before_metadata", rank);
  {
    AtomicFileWriter w(join_path(dir, kMetadataFileName), "metadata_write", rank);
    w.write(text.data(), static_cast<int64_t>(text.size()));
    try {
      w.commit();
    } catch (const IOError&) {
      // After the rename the save is committed (readers see the new .metadata); a failing
      // fsync of the directory then only weakens durability and is not a failed save.
      if (!w.committed()) throw;
    }
  }
  fault_point("after_metadata", rank);
  // The new checkpoint is in place: drop data files of earlier saves and leftovers. The
  // caller holds the directory lock, so no other writer's files are in flight here. Best
  // effort: what cannot be removed now is removed by the next commit.
  std::set<std::string> referenced;
  for (const auto& [name, t] : meta.tensors)
    for (const auto& c : t.chunks) referenced.insert(c.file);
  try {
    for (const auto& n : list_dir(dir))
      if ((is_data_file_name(n) && !referenced.count(n)) || is_temp_name(n)) {
        try {
          remove_file(join_path(dir, n));
        } catch (const IOError&) {
        }
      }
  } catch (const IOError&) {
  }
}

int64_t replica_owner(const std::string& name, int64_t replicas) {
  HYPER_CHECK_VALUE(replicas >= 1, "replica_owner: replicas must be >= 1, got ", replicas);
  return static_cast<int64_t>(xxh3_64(name.data(), static_cast<int64_t>(name.size())) %
                              static_cast<uint64_t>(replicas));
}

}  // namespace hyper::dcp
