#pragma once
/// \file checkpoint.h
/// The ATen-facing building blocks of the checkpoint, usable in one process: write chunks
/// of tensors to a safetensors file, build and commit the metadata, read a region of a
/// saved tensor in place into a tensor's storage. The distributed save/load of DTensors is
/// built from these.
///
///   hyper::dcp::save_local({{"w", w}, {"b", b}}, {{"step", int64_t{7}}}, "ckpt/step7");
///   hyper::dcp::load_local({{"w", w2}, {"b", b2}}, "ckpt/step7");  // writes into w2, b2
///
/// Atomicity (docs/checkpoint_format.md): data files get fresh unique names
/// (`__<rank>_<id>.safetensors`) and are written atomically; the metadata is written
/// last and atomically (rename over `.metadata`); only then are data files that the new
/// metadata does not reference removed. A crash at any point leaves the previous
/// checkpoint loadable (or, in a fresh directory, no `.metadata`: an incomplete checkpoint).
/// save_local holds the directory lock (dir_lock.h) for the whole save.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "hyper/core/geometry.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/safetensors.h"
#include "hyper/dcp/writer.h"

namespace hyper::dcp {

/// The safetensors dtype of an ATen scalar type. Throws NotImplementedError for types
/// safetensors/hyper does not store (complex, quantized, ...).
DType to_dtype(at::ScalarType t);
/// The ATen scalar type of a DType.
at::ScalarType to_scalar_type(DType d);

/// One chunk to save: the values of `box` of the logical tensor `name` (of global shape
/// `global_shape`). `data` may be any tensor with box.numel() elements (any device or
/// strides); it is copied to contiguous CPU memory if it is not already.
struct ChunkData {
  std::string name;
  Shape global_shape;
  Box box;
  at::Tensor data;
};

/// write_raw_chunks of `chunks` (each copied to contiguous CPU memory first when it is not
/// already). Writes `chunks` into `dir`/`file_name` (atomically; `dir` must exist), giving each a
/// physical key (allocate_physical_keys), and returns their metadata records with byte
/// ranges and checksums: the whole-chunk XXH3-64, the file's header checksum and, for a
/// chunk larger than one leaf, its leaf checksums (a U8 tensor `<key>.__dcp_leaves` in the
/// same file, after the data). Throws ValueError for an empty name, a box outside the global
/// shape or of the wrong rank, data whose numel differs from the box's, an unsupported
/// dtype; IOError when the OS refuses. `file_bytes`, when given, receives the size of the
/// file written (data, leaf checksums and header: what the commit confirms on disk).
std::vector<ChunkRecord> write_chunks(const std::string& dir, const std::string& file_name,
                                      const std::vector<ChunkData>& chunks,
                                      const WriteOptions& options = {},
                                      int64_t* file_bytes = nullptr);

/// Reads `region` of tensor `name` into `dst` in place. `dst` holds the region's elements
/// in the local storage convention (row-major contents of the boxes, concatenated) and has
/// exactly that many elements; its dtype must be the saved one. A contiguous CPU `dst` is
/// read into directly (CheckpointReader::read: verified, then copied); any other is filled
/// through a CPU buffer and copy_. `verified`: the region's verify_region succeeded on this
/// reader, so the bytes are copied without verifying again (CheckpointReader::copy_verified).
/// Throws as CheckpointReader::read, plus a ValueError for a numel mismatch; on such an
/// error `dst` is unchanged.
void read_into(CheckpointReader& reader, const std::string& name,
               const std::vector<FlatBox>& region, const at::Tensor& dst,
               bool verified = false);

/// CheckpointReader::verify of `region` of `name` for the tensor `dst` (its dtype and numel,
/// checked as read_into does): every checksum and BOOL byte, writing nothing.
void verify_region(CheckpointReader& reader, const std::string& name,
                   const std::vector<FlatBox>& region, const at::Tensor& dst);

/// Saves whole tensors and values to `dir` (created if needed) as one data file + metadata.
void save_local(const std::map<std::string, at::Tensor>& tensors,
                const std::map<std::string, Value>& values, const std::string& dir,
                const WriteOptions& options = {});

/// Loads every tensor of `tensors` in place (each must have the saved global shape and
/// dtype) and, if `values` is given, fills it with the saved values. Returns the bytes read
/// from data files. Throws ValueError: incomplete checkpoint, a missing tensor, a shape or
/// dtype mismatch, and every CheckpointReader error. With verification on (the default), a
/// failed load changes nothing: every tensor is read and verified into a CPU staging tensor
/// first and copied into the targets only when all succeeded (extra memory: the bytes
/// loaded). With verification off, targets are read into directly.
int64_t load_local(const std::map<std::string, at::Tensor>& tensors, const std::string& dir,
                   std::map<std::string, Value>* values = nullptr, const ReadOptions& options = {});

}  // namespace hyper::dcp
