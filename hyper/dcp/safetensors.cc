#include "hyper/dcp/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/internal/json.h"

namespace hyper::dcp {

using hyper::internal::str_cat;
using nlohmann::json;

namespace {

struct DTypeRow {
  DType dtype;
  const char* name;
  int64_t size;
};
constexpr DTypeRow kDTypes[] = {
    {DType::F64, "F64", 8}, {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2}, {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};

// Bytes of a tensor: numel x size with every product checked against 2^62.
int64_t checked_nbytes(const Shape& shape, DType dtype, const std::string& what) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t n = dtype_size(dtype);
  for (int64_t s : shape) {
    HYPER_CHECK_VALUE(s >= 0, what, ": negative size in shape");
    if (s == 0) return 0;
    HYPER_CHECK_VALUE(n <= kLimit / s, what, ": shape is too large (byte size overflows)");
    n *= s;
  }
  return n;
}

uint64_t read_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Checks the length prefix against the file size; returns N.
int64_t check_header_length(uint64_t n, int64_t file_size, const std::string& file) {
  HYPER_CHECK_VALUE(file_size >= 8, "'", file, "' is not a safetensors file: ", file_size,
                    " bytes, shorter than the 8-byte header length");
  HYPER_CHECK_VALUE(n <= static_cast<uint64_t>(kMaxHeaderBytes), "'", file,
                    "': safetensors header length ", n, " exceeds the limit of ",
                    kMaxHeaderBytes, " bytes");
  HYPER_CHECK_VALUE(static_cast<int64_t>(n) <= file_size - 8, "'", file,
                    "': safetensors header length ", n, " is past the end of the file (",
                    file_size, " bytes)");
  HYPER_CHECK_VALUE(n >= 2, "'", file, "': safetensors header length ", n,
                    " is too short for a JSON object");
  return static_cast<int64_t>(n);
}

}  // namespace

int64_t dtype_size(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.size;
  throw ValueError(str_cat("invalid DType ", static_cast<int>(d)));
}

const char* dtype_name(DType d) {
  for (const auto& r : kDTypes)
    if (r.dtype == d) return r.name;
  throw ValueError(str_cat("invalid DType ", static_cast<int>(d)));
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (const auto& r : kDTypes)
    if (name == r.name) return r.dtype;
  return std::nullopt;
}

const std::vector<DType>& all_dtypes() {
  static const std::vector<DType> all = [] {
    std::vector<DType> v;
    for (const auto& r : kDTypes) v.push_back(r.dtype);
    return v;
  }();
  return all;
}

const TensorInfo* SafetensorsHeader::find(const std::string& key) const {
  for (const auto& t : tensors)
    if (t.key == key) return &t;
  return nullptr;
}

SafetensorsHeader parse_safetensors_header(const char* text, int64_t n, int64_t file_size,
                                           const std::string& file) {
  SafetensorsHeader h;
  h.file = file;
  h.file_size = file_size;
  h.data_start = 8 + n;
  HYPER_CHECK_VALUE(n >= 0 && h.data_start <= file_size, "'", file, "': header of ", n,
                    " bytes is past the end of the file (", file_size, " bytes)");
  const std::string label = str_cat("safetensors header of '", file, "'");
  const json j = internal::parse_json_strict(text, static_cast<size_t>(n), label);
  HYPER_CHECK_VALUE(j.is_object(), label, " is not a JSON object");
  const int64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    if (key == "__metadata__") {
      HYPER_CHECK_VALUE(v.is_object(), label, ": __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        HYPER_CHECK_VALUE(m.value().is_string(), label, ": __metadata__ value of '", m.key(),
                          "' is not a string");
        h.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string what = str_cat("'", file, "': tensor '", key, "'");
    HYPER_CHECK_VALUE(v.is_object(), what, " is not an object");
    HYPER_CHECK_VALUE(v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
                      what, " lacks dtype, shape or data_offsets");
    TensorInfo t;
    t.key = key;
    const json& dt = v["dtype"];
    HYPER_CHECK_VALUE(dt.is_string(), what, ": dtype is not a string");
    const auto d = dtype_from_name(dt.get<std::string>());
    HYPER_CHECK_VALUE(d.has_value(), what, ": unknown or unsupported dtype '",
                      dt.get<std::string>(), "'");
    t.dtype = *d;
    const json& sh = v["shape"];
    HYPER_CHECK_VALUE(sh.is_array(), what, ": shape is not a list");
    HYPER_CHECK_VALUE(sh.size() <= 64, what, ": shape has ", sh.size(), " dims (at most 64)");
    for (const json& s : sh) t.shape.push_back(internal::get_count(s, int64_t{1} << 62, what + " shape entry"));
    const int64_t nbytes = checked_nbytes(t.shape, t.dtype, what);
    const json& off = v["data_offsets"];
    HYPER_CHECK_VALUE(off.is_array() && off.size() == 2, what,
                      ": data_offsets is not a list of two integers");
    const int64_t b = internal::get_count(off[0], int64_t{1} << 62, what + " data_offsets[0]");
    const int64_t e = internal::get_count(off[1], int64_t{1} << 62, what + " data_offsets[1]");
    HYPER_CHECK_VALUE(b <= e, what, ": data_offsets [", b, ", ", e, "] are reversed");
    HYPER_CHECK_VALUE(e - b == nbytes, what, ": data_offsets [", b, ", ", e, "] hold ", e - b,
                      " bytes but dtype ", dtype_name(t.dtype), " x shape ",
                      shape_to_string(t.shape), " needs ", nbytes);
    HYPER_CHECK_VALUE(e <= data_size, what, ": data_offsets [", b, ", ", e,
                      "] are past the end of the file (", data_size, " data bytes)");
    t.begin = h.data_start + b;
    t.end = h.data_start + e;
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // Non-empty ranges must be pairwise disjoint. Sorted by begin, each is compared with the
  // non-empty range reaching furthest among those before it (not merely its neighbour: an
  // empty range or a short one in between must not hide an overlap). Empty tensors may sit
  // anywhere inside the data (checked above: begin <= end <= data size).
  const TensorInfo* reach = nullptr;
  for (const auto& c : h.tensors) {
    if (c.nbytes() == 0) continue;
    if (reach != nullptr)
      HYPER_CHECK_VALUE(c.begin >= reach->end, "'", file, "': tensors '", reach->key, "' and '",
                        c.key, "' overlap (bytes [", reach->begin, ", ", reach->end, ") and [",
                        c.begin, ", ", c.end, "))");
    if (reach == nullptr || c.end > reach->end) reach = &c;
  }
  return h;
}

SafetensorsHeader parse_safetensors_bytes(const char* data, int64_t n, const std::string& file) {
  HYPER_CHECK_VALUE(n >= 8, "'", file, "' is not a safetensors file: ", n,
                    " bytes, shorter than the 8-byte header length");
  const int64_t len = check_header_length(read_le64(reinterpret_cast<const unsigned char*>(data)),
                                          n, file);
  return parse_safetensors_header(data + 8, len, n, file);
}

SafetensorsHeader read_safetensors_header(const ReadFile& f) {
  HYPER_CHECK_VALUE(f.size() >= 8, "'", f.path(), "' is not a safetensors file: ", f.size(),
                    " bytes, shorter than the 8-byte header length");
  unsigned char prefix[8];
  f.pread_exact(prefix, 8, 0);
  const int64_t len = check_header_length(read_le64(prefix), f.size(), f.path());
  std::string text(static_cast<size_t>(len), '\0');
  f.pread_exact(text.data(), len, 8);
  return parse_safetensors_header(text.data(), len, f.size(), f.path());
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  ReadFile f(path);
  return read_safetensors_header(f);
}

std::string safetensors_header_bytes(const std::string& path,
                                     const std::vector<TensorToWrite>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  // Header, in data order (ordered_json keeps insertion order).
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = std::move(meta);
  }
  std::set<std::string> keys;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    const std::string what = str_cat("writing '", path, "': tensor '", t.key, "'");
    HYPER_CHECK_VALUE(!t.key.empty(), "writing '", path, "': empty tensor key");
    HYPER_CHECK_VALUE(t.key != "__metadata__", what, ": the key __metadata__ is reserved");
    HYPER_CHECK_VALUE(keys.insert(t.key).second, what, ": duplicate key");
    const int64_t nbytes = checked_nbytes(t.shape, t.dtype, what);
    HYPER_CHECK_VALUE(t.nbytes == nbytes, what, ": ", t.nbytes, " bytes given but dtype ",
                      dtype_name(t.dtype), " x shape ", shape_to_string(t.shape), " needs ",
                      nbytes);
    header[t.key] = {{"dtype", dtype_name(t.dtype)},
                     {"shape", t.shape},
                     {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text = header.dump();
  text.append((8 - (text.size() % 8)) % 8, ' ');  // data starts at a multiple of 8
  std::string out(8, '\0');
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((len >> (8 * i)) & 0xff);
  return out + text;
}

std::vector<WrittenTensor> write_safetensors(const std::string& path,
                                             const std::vector<TensorToWrite>& tensors,
                                             const SafetensorsWriteOptions& options) {
  HYPER_CHECK_VALUE(options.checksum_block_size > 0, "checksum block size must be positive, got ",
                    options.checksum_block_size);
  const std::string header = safetensors_header_bytes(path, tensors, options.metadata);
  const int64_t data_start = static_cast<int64_t>(header.size());
  std::vector<WrittenTensor> out;
  int64_t offset = 0;
  for (const auto& t : tensors) {
    HYPER_CHECK_VALUE(t.nbytes == 0 || t.data != nullptr, "writing '", path, "': tensor '",
                      t.key, "': null data");
    WrittenTensor w;
    w.key = t.key;
    w.begin = offset;
    w.end = offset + t.nbytes;
    out.push_back(std::move(w));
    offset += t.nbytes;
  }

  AtomicFileWriter w(path, "data_write", options.fault_rank);
  w.write(header.data(), data_start);
  const int64_t half = offset / 2;
  int64_t done = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    auto& r = out[i];
    if (done <= half && done + t.nbytes > half && offset > 0) {
      // Crash tests: half of the data on disk, the file not committed.
      w.write(t.data, half - done);
      fault_point("mid_data_file", options.fault_rank);
      w.write(static_cast<const char*>(t.data) + (half - done), t.nbytes - (half - done));
    } else {
      w.write(t.data, t.nbytes);
    }
    done += t.nbytes;
    r.checksum = xxh3_64(t.data, t.nbytes);
    r.block_checksums = block_checksums(t.data, t.nbytes, options.checksum_block_size);
    r.block_size = r.block_checksums.empty() ? 0 : options.checksum_block_size;
    r.begin += data_start;
    r.end += data_start;
  }
  w.commit();
  return out;
}

}  // namespace hyper::dcp
