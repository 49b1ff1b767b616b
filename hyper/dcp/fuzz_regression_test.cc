// Regression tests for inputs the fuzz targets (hyper/dcp/fuzz/, scripts/fuzz.sh) found: each
// failed (or crashed, or was undefined behaviour under UBSan) before its fix. Torch-free: they
// build checkpoints with the storage API the fuzzers use.
#include <gtest/gtest.h>
#include <gmock/gmock.h>
#include <stdlib.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "hyper/core/testing_errors.h"
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

/// A checkpoint of one F32 tensor "t" of shape [4, 4] (values 0..15) in one chunk.
std::string small_checkpoint() {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_fuzzreg_XXXXXX";
  EXPECT_NE(::mkdtemp(tmpl.data()), nullptr);
  std::vector<float> v(16);
  for (int i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i);
  const auto w = write_safetensors(join_path(tmpl, "f.st"), {{"t", DType::F32, {4, 4}, v.data(), 64}});
  Metadata m;
  TensorMeta& t = m.tensors["t"];
  t.shape = {4, 4};
  ChunkMeta c;
  c.box = Box({0, 0}, {4, 4});
  c.file = "f.st";
  c.key = "t";
  c.byte_range = std::make_pair(w[0].begin, w[0].end);
  c.checksum = w[0].checksum;
  t.chunks.push_back(c);
  write_file_atomic(join_path(tmpl, kMetadataFileName), m.to_json());
  return tmpl;
}

// chunk_reader_fuzz: a target box with negative sizes passed the "inside the shape" check
// (offset + size <= dim) and was read as nothing (or, with sizes whose product overflows,
// was undefined behaviour); now it is refused as lying outside the saved shape.
TEST(FuzzRegression, ReadRefusesMalformedTargetBoxes) {
  const std::string dir = small_checkpoint();
  CheckpointReader r(dir);
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
  CheckpointReader r(dir);
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
    ReadOptions ro;
    ro.verify_checksums = verify;
    CheckpointReader r(dir, ro);
    std::vector<float> out(32, -1.f);
    // The whole tensor twice (its one checksum block is then read straight into the first).
    r.read("t", {FlatBox{Box({0, 0}, {4, 4}), 0}, FlatBox{Box({0, 0}, {4, 4}), 16}}, DType::F32,
           out.data(), 128);
    for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], i % 16) << "verify=" << verify << " at " << i;
  }
}

}  // namespace
}  // namespace hyper::dcp
