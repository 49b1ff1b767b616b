#include "hyper/dcp/checkpoint.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <cstring>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/read_plan.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"

namespace hyper::dcp {

using hyper::internal::str_cat;

DType to_dtype(at::ScalarType t) {
  switch (t) {
    case at::kDouble: return DType::F64;
    case at::kFloat: return DType::F32;
    case at::kHalf: return DType::F16;
    case at::kBFloat16: return DType::BF16;
    case at::kLong: return DType::I64;
    case at::kInt: return DType::I32;
    case at::kShort: return DType::I16;
    case at::kChar: return DType::I8;
    case at::kByte: return DType::U8;
    case at::kBool: return DType::BOOL;
    default: break;
  }
  throw NotImplementedError(str_cat("dtype ", c10::toString(t),
                                    " cannot be stored in a safetensors checkpoint"));
}

at::ScalarType to_scalar_type(DType d) {
  switch (d) {
    case DType::F64: return at::kDouble;
    case DType::F32: return at::kFloat;
    case DType::F16: return at::kHalf;
    case DType::BF16: return at::kBFloat16;
    case DType::I64: return at::kLong;
    case DType::I32: return at::kInt;
    case DType::I16: return at::kShort;
    case DType::I8: return at::kChar;
    case DType::U8: return at::kByte;
    case DType::BOOL: return at::kBool;
  }
  throw ValueError(str_cat("invalid DType ", static_cast<int>(d)));
}

std::vector<ChunkRecord> write_chunks(const std::string& dir, const std::string& file_name,
                                      const std::vector<ChunkData>& chunks,
                                      const WriteOptions& options, int64_t* file_bytes) {
  std::vector<at::Tensor> cpu;  // keeps the contiguous CPU copies alive during the write
  std::vector<RawChunk> raw;
  for (const auto& c : chunks) {
    const std::string what = str_cat("chunk ", c.box.to_string(), " of '", c.name, "'");
    HYPER_CHECK_VALUE(c.data.defined(), what, ": undefined data");
    at::Tensor t = c.data.detach();
    if (!t.device().is_cpu()) t = t.cpu();
    t = t.contiguous();
    raw.push_back(RawChunk{c.name, c.global_shape, c.box, to_dtype(t.scalar_type()), t.data_ptr(),
                           t.numel() * static_cast<int64_t>(t.element_size())});
    cpu.push_back(std::move(t));
  }
  return write_raw_chunks(dir, file_name, raw, options, file_bytes);
}

namespace {
/// Bytes other than 0 and 1 are not bools (torch would hold invalid values); checksums do
/// not catch them in a crafted checkpoint sealed with valid checksums.
void check_bool_bytes(const std::string& name, const void* data, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(data);
  for (int64_t i = 0; i < n; ++i)
    HYPER_CHECK_VALUE(b[i] <= 1, "loading '", name, "': BOOL element ", i, " holds the byte ",
                      static_cast<int>(b[i]), " (a bool is 0 or 1)");
}

/// The elements of `region`, checked to be those of the defined tensor `dst`.
int64_t region_numel(const std::string& name, const std::vector<FlatBox>& region,
                     const at::Tensor& dst) {
  HYPER_CHECK_VALUE(dst.defined(), "loading '", name, "': undefined destination tensor");
  int64_t n = 0;
  for (const auto& fb : region) n += fb.box.numel();
  HYPER_CHECK_VALUE(dst.numel() == n, "loading '", name, "': destination has ", dst.numel(),
                    " elements, the target region ", n);
  return n;
}
}  // namespace

void verify_region(CheckpointReader& reader, const std::string& name,
                   const std::vector<FlatBox>& region, const at::Tensor& dst) {
  const int64_t n = region_numel(name, region, dst);
  reader.verify(name, region, to_dtype(dst.scalar_type()),
                n * static_cast<int64_t>(dst.element_size()));
}

void read_into(CheckpointReader& reader, const std::string& name,
               const std::vector<FlatBox>& region, const at::Tensor& dst, bool verified) {
  const int64_t n = region_numel(name, region, dst);
  const DType dtype = to_dtype(dst.scalar_type());
  const int64_t nbytes = n * static_cast<int64_t>(dst.element_size());
  auto read = [&](void* out) {
    if (verified)
      reader.copy_verified(name, region, dtype, out, nbytes);
    else
      reader.read(name, region, dtype, out, nbytes);
  };
  if (dtype == DType::BOOL) {
    // Bytes other than 0 and 1 are not bools (torch would hold invalid values): read into
    // bytes, check, then copy (a verified read checks them before it writes anything).
    at::Tensor tmp = at::empty({n}, dst.options().device(at::kCPU).dtype(at::kByte));
    read(tmp.data_ptr());
    check_bool_bytes(name, tmp.data_ptr(), n);
    at::NoGradGuard no_grad;
    dst.copy_(tmp.view(dst.sizes()).to(at::kBool));
    return;
  }
  if (dst.device().is_cpu() && dst.is_contiguous() && !dst.is_neg() && !dst.is_conj()) {
    read(dst.data_ptr());
    return;
  }
  at::Tensor tmp = at::empty({n}, dst.options().device(at::kCPU));
  read(tmp.data_ptr());
  at::NoGradGuard no_grad;
  dst.copy_(tmp.view(dst.sizes()));
}

void save_local(const std::map<std::string, at::Tensor>& tensors,
                const std::map<std::string, Value>& values, const std::string& dir,
                const WriteOptions& options) {
  make_dirs(dir);
  const DirLock lock(dir, lock_holder_text(new_save_id()));
  std::vector<ChunkData> chunks;
  for (const auto& [name, t] : tensors) {
    HYPER_CHECK_VALUE(t.defined(), "saving '", name, "': undefined tensor");
    Shape shape(t.sizes().begin(), t.sizes().end());
    chunks.push_back(ChunkData{name, shape, Box::full(shape), t});
  }
  const std::string file = unique_data_file_name(options.rank);
  auto records = write_chunks(dir, file, chunks, options);
  fault_point("after_data_file", options.rank);
  commit_metadata(dir, build_metadata(records, values), options.rank);
}

int64_t load_local(const std::map<std::string, at::Tensor>& tensors, const std::string& dir,
                   std::map<std::string, Value>* values, const ReadOptions& options) {
  CheckpointReader reader(dir, options);
  for (const auto& [name, t] : tensors) {
    const TensorMeta& tm = reader.tensor(name);
    HYPER_CHECK_VALUE(t.defined(), "loading '", name, "': undefined tensor");
    const Shape shape(t.sizes().begin(), t.sizes().end());
    HYPER_CHECK_VALUE(shape == tm.shape, "loading '", name, "': target shape ",
                      shape_to_string(shape), " differs from the saved shape ", shape_to_string(tm.shape));
  }
  // Verify everything, then copy (a failed verification changes nothing).
  auto full = [](const at::Tensor& t) {
    return std::vector<FlatBox>{FlatBox{Box::full(Shape(t.sizes().begin(), t.sizes().end())), 0}};
  };
  if (options.verify_checksums)
    for (const auto& [name, t] : tensors) verify_region(reader, name, full(t), t);
  reader.check_unchanged();
  for (const auto& [name, t] : tensors) read_into(reader, name, full(t), t, /*verified=*/true);
  reader.check_unchanged();
  if (values) *values = reader.metadata().values;
  return reader.bytes_read();
}

}  // namespace hyper::dcp
