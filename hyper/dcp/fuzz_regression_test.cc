// Regression tests for inputs the fuzz targets (hyper/dcp/fuzz/, scripts/fuzz.sh) found: each
// failed (or crashed, or was undefined behaviour under UBSan) before its fix. Most build
// checkpoints with the torch-free storage API the fuzzers use (format-1 style); the format-2
// case writes through write_chunks (at::Tensor data), as a save does.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <stdlib.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hyper/core/testing_errors.h"
#include "hyper/dcp/checkpoint.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/reader.h"
#include "hyper/dcp/safetensors.h"

namespace hyper::dcp {
namespace {

using hyper::testing::error_of;
using ::testing::HasSubstr;

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

/// Reading options for small_checkpoint(): it is written format-1 style (an unsealed .metadata,
/// a whole-chunk checksum, no header checksum), which a reader refuses by default since format 2.
ReadOptions v1_options(bool verify = true) {
  ReadOptions ro;
  ro.verify_checksums = verify;
  ro.allow_unchecksummed = true;
  return ro;
}

/// A checkpoint of one tensor "t" of `dtype` and `shape` in one chunk holding `data`
/// (`nbytes` bytes), format-1 style (v1_options reads it).
std::string one_chunk_checkpoint(DType dtype, const Shape& shape, const void* data,
                                 int64_t nbytes) {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_fuzzreg_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  const auto w = write_safetensors(join_path(tmpl, "f.st"), {{"t", dtype, shape, data, nbytes}});
  Metadata m;
  TensorMeta& t = m.tensors["t"];
  t.dtype = dtype;
  t.shape = shape;
  ChunkMeta c;
  c.box = Box(Shape(shape.size(), 0), shape);
  c.file = "f.st";
  c.key = "t";
  c.byte_range = std::make_pair(w[0].begin, w[0].end);
  c.checksum = w[0].checksum;
  t.chunks.push_back(c);
  write_file_atomic(join_path(tmpl, kMetadataFileName), m.to_json());
  return tmpl;
}

/// A checkpoint of one F32 tensor "t" of shape [4, 4] (values 0..15) in one chunk.
std::string small_checkpoint() {
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  return one_chunk_checkpoint(DType::F32, {4, 4}, v.data(), 64);
}

// chunk_reader_fuzz: a target box with negative sizes passed the "inside the shape" check
// (offset + size <= dim) and was read as nothing (or, with sizes whose product overflows,
// was undefined behaviour); now it is refused as lying outside the saved shape.
TEST(FuzzRegression, ReadRefusesMalformedTargetBoxes) {
  const std::string dir = small_checkpoint();
  CheckpointReader r(dir, v1_options());
  std::vector<float> out(16, -1.f);
  for (const Box& b : {Box({0, 0}, {-5, 4}), Box({0, 0}, {-1, -1}), Box({0, 0}, {kMin, kMin}),
                       Box({kMax, 0}, {kMax, 1}), Box({kMin, 0}, {1, 1})}) {
    EXPECT_THAT(error_of([&] { r.read("t", {FlatBox{b, 0}}, DType::F32, out.data(), 64); }),
                HasSubstr("lies outside the saved shape [4,4]"))
        << b.to_string();
  }
  EXPECT_EQ(out, std::vector<float>(16, -1.f));  // nothing written
}

// chunk_reader_fuzz: a local start near INT64_MAX overflowed local_start + numel, passed the
// destination check and wrote far outside the buffer (SIGSEGV).
TEST(FuzzRegression, ReadRefusesLocalRangesPastTheDestination) {
  const std::string dir = small_checkpoint();
  CheckpointReader r(dir, v1_options());
  std::vector<float> out(16, -1.f);
  for (const int64_t start : {kMax, kMax - 1, kMax / 4 + 1, int64_t{13}, int64_t{-1}, kMin}) {
    EXPECT_THAT(
        error_of([&] { r.read("t", {FlatBox{Box({0, 0}, {2, 2}), start}}, DType::F32, out.data(), 64); }),
        HasSubstr("exceeds the destination (16 elements)"))
        << start;
  }
  EXPECT_EQ(out, std::vector<float>(16, -1.f));
  // The largest valid start still reads.
  r.read("t", {FlatBox{Box({2, 2}, {2, 2}), 12}}, DType::F32, out.data(), 64);
  EXPECT_EQ(std::vector<float>(out.begin() + 12, out.end()), (std::vector<float>{10, 11, 14, 15}));
}

// chunk_reader_fuzz: target boxes that overlap in global coordinates (one element read into
// several places of the destination). A verified read read the shared blocks straight into the
// first run's destination and never copied them to the others, which kept whatever they held;
// an unverified read filled them all.
TEST(FuzzRegression, VerifiedReadFillsEveryRunOfSharedBlocks) {
  const std::string dir = small_checkpoint();
  for (const bool verify : {true, false}) {
    CheckpointReader r(dir, v1_options(verify));
    std::vector<float> out(32, -1.f);
    // The whole tensor twice (its one checksum block is then read straight into the first).
    r.read("t", {FlatBox{Box({0, 0}, {4, 4}), 0}, FlatBox{Box({0, 0}, {4, 4}), 16}}, DType::F32,
           out.data(), 128);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], i % 16) << "verify=" << verify << " at " << i;
  }
}

// The same on format 2 (leaf checksums, sealed .metadata; the reader's defaults): a 1 MiB chunk
// read whole twice, and two target boxes that share rows, with verification on and off.
TEST(FuzzRegression, VerifiedReadFillsEveryRunOfSharedLeavesFormat2) {
  std::string dir = ::testing::TempDir() + "hyper_dcp_fuzzreg_XXXXXX";
  ASSERT_NE(::mkdtemp(dir.data()), nullptr);
  const at::Tensor w = at::arange(1024 * 256, at::kFloat).view({1024, 256});
  commit_metadata(dir, build_metadata(write_chunks(dir, "__0_w.safetensors",
                                                   {{"w", {1024, 256}, Box::full({1024, 256}), w}}),
                                      {}));
  const int64_t n = 1024 * 256;
  for (const bool verify : {true, false}) {
    ReadOptions ro;
    ro.verify_checksums = verify;
    CheckpointReader r(dir, ro);
    std::vector<float> out(static_cast<size_t>(2 * n), -1.f);
    r.read("w", {FlatBox{Box::full({1024, 256}), 0}, FlatBox{Box::full({1024, 256}), n}},
           DType::F32, out.data(), 8 * n);
    for (int64_t i = 0; i < 2 * n; ++i)
      ASSERT_EQ(out[static_cast<size_t>(i)], static_cast<float>(i % n)) << verify << " at " << i;
    // Rows [0, 600) then rows [300, 1024): rows 300..599 are needed by both runs.
    std::vector<float> two(static_cast<size_t>((600 + 724) * 256), -1.f);
    r.read("w", {FlatBox{Box({0, 0}, {600, 256}), 0}, FlatBox{Box({300, 0}, {724, 256}), 600 * 256}},
           DType::F32, two.data(), static_cast<int64_t>(two.size() * 4));
    for (int64_t i = 0; i < 600 * 256; ++i)
      ASSERT_EQ(two[static_cast<size_t>(i)], static_cast<float>(i)) << verify << " at " << i;
    for (int64_t i = 0; i < 724 * 256; ++i)
      ASSERT_EQ(two[static_cast<size_t>(600 * 256 + i)], static_cast<float>(300 * 256 + i))
          << verify << " at " << i;
  }
}

TEST(FuzzRegression, RawReadCopiesBoolBytesAsStoredAndVerifyRefusesThem) {
  // chunk_reader_fuzz: a BOOL chunk holding the byte 8. CheckpointReader::read copies bytes as
  // stored (the fuzz property: only corrupted or hostile input may throw); verify(), which a
  // load runs before it writes any target, refuses it naming the element.
  const std::vector<uint8_t> v = {1, 0, 1, 8, 0};
  const std::string tmpl = one_chunk_checkpoint(DType::BOOL, {5}, v.data(), 5);
  CheckpointReader r(tmpl, v1_options());
  const std::vector<FlatBox> region = {FlatBox{Box({0}, {5}), 0}};
  std::vector<uint8_t> out(5, 0xee);
  r.read("t", region, DType::BOOL, out.data(), 5);
  EXPECT_EQ(out, v);
  EXPECT_THAT(error_of([&] { r.verify("t", region, DType::BOOL, 5); }),
              HasSubstr("loading 't': BOOL element 3 holds the byte 8 (a bool is 0 or 1)"));
}

}  // namespace
}  // namespace hyper::dcp
