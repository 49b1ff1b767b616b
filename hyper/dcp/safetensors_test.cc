// safetensors writer and hostile-input header reader (torch-free).
#include "hyper/dcp/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"
#include "hyper/dcp/checksum.h"
#include "hyper/dcp/fs.h"

// The reference: xxHash's portable build (this file is compiled for the baseline target).
#define XXH_INLINE_ALL
#include <xxhash.h>

namespace hyper::dcp {
namespace {

using ::testing::HasSubstr;
using hyper::testing::error_of;

std::string temp_dir() {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_st_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

TEST(Checksum, Xxh3MatchesTheReference) {
  // xxh3_64 may take an AVX2 path for long inputs (checksum.cc): same values as the
  // portable XXH3_64bits for every length around the short/medium/long and stripe/block
  // boundaries, at unaligned addresses, and for a large block.
  std::mt19937_64 rng(11);
  std::vector<unsigned char> buf((3 << 20) + 64);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  EXPECT_EQ(xxh3_64(buf.data(), 0), 0x2D06800538D394C2ull);  // XXH3-64 of the empty input
  std::vector<int64_t> lengths;
  for (int64_t n = 0; n <= 2100; ++n) lengths.push_back(n);
  for (int64_t n : {4095, 4096, 4097, 65535, 65536, 65537, 1 << 20, (1 << 20) + 7, 3 << 20})
    lengths.push_back(n);
  for (int64_t n : lengths)
    for (int64_t off : {0, 1, 13}) {
      const unsigned char* p = buf.data() + off;
      ASSERT_EQ(xxh3_64(p, n), XXH3_64bits(p, static_cast<size_t>(n))) << n << " at +" << off;
    }
  EXPECT_EQ(block_checksums(buf.data(), 5 << 10, 2 << 10),
            (std::vector<uint64_t>{XXH3_64bits(buf.data(), 2 << 10),
                                   XXH3_64bits(buf.data() + (2 << 10), 2 << 10),
                                   XXH3_64bits(buf.data() + (4 << 10), 1 << 10)}));
}

TEST(Checksum, Xxh3StreamMatchesTheReferenceInAnyPieces) {
  // Xxh3Stream::update may take an AVX2 path (checksum.cc): fed in pieces of any sizes
  // (below and across the 1 KiB stripe blocks and the 256-byte internal buffer), the digest
  // is the portable one-shot XXH3_64bits of the whole input.
  std::mt19937_64 rng(12);
  std::vector<unsigned char> buf((5 << 20) + 3);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{240}, int64_t{241}, int64_t{1024},
                    int64_t{65537}, int64_t{(2 << 20) + 5}, static_cast<int64_t>(buf.size())})
    for (int64_t piece : {int64_t{1}, int64_t{7}, int64_t{256}, int64_t{1000}, int64_t{2} << 20}) {
      if (piece == 1 && n > 65537) continue;  // byte by byte: long enough at 64 KiB
      Xxh3Stream s;
      for (int64_t lo = 0; lo < n; lo += piece)
        s.update(buf.data() + lo, std::min(piece, n - lo));
      ASSERT_EQ(s.digest(), XXH3_64bits(buf.data(), static_cast<size_t>(n)))
          << n << " bytes in pieces of " << piece;
    }
}

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return s;
}

// A file: length prefix + header + data.
std::string file_bytes(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Safetensors, DTypeNamesAndSizes) {
  EXPECT_EQ(all_dtypes().size(), 10u);
  for (DType d : all_dtypes()) {
    EXPECT_EQ(dtype_from_name(dtype_name(d)), d);
    EXPECT_GT(dtype_size(d), 0);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2);
  EXPECT_EQ(dtype_size(DType::BOOL), 1);
  EXPECT_FALSE(dtype_from_name("F8_E4M3").has_value());
}

TEST(Safetensors, RoundTripEveryDType) {
  const std::string dir = temp_dir();
  const std::string path = dir + "/a.safetensors";
  std::mt19937 rng(1);
  std::vector<std::string> buffers;
  std::vector<TensorToWrite> in;
  int i = 0;
  for (DType d : all_dtypes()) {
    const Shape shape = {2, 3 + i};
    std::string bytes(static_cast<size_t>(6 + 2 * i) * static_cast<size_t>(dtype_size(d)), '\0');
    for (auto& c : bytes) c = static_cast<char>(d == DType::BOOL ? rng() % 2 : rng() % 256);
    buffers.push_back(bytes);
    ++i;
  }
  i = 0;
  for (DType d : all_dtypes()) {
    in.push_back({std::string("t_") + dtype_name(d), d, {2, 3 + i}, buffers[static_cast<size_t>(i)].data(),
                  static_cast<int64_t>(buffers[static_cast<size_t>(i)].size())});
    ++i;
  }
  in.push_back({"scalar", DType::F64, {}, buffers[0].data(), 8});
  in.push_back({"empty", DType::F32, {0, 5}, nullptr, 0});
  SafetensorsWriteOptions opt;
  opt.metadata = {{"format", "pt"}};
  opt.checksum_block_size = 16;
  const auto written = write_safetensors(path, in, opt);
  ASSERT_EQ(written.size(), in.size());

  ReadFile f(path);
  const auto h = read_safetensors_header(f);
  EXPECT_EQ(h.data_start % 8, 0);
  EXPECT_EQ(h.metadata.at("format"), "pt");
  EXPECT_EQ(h.tensors.size(), in.size());
  for (size_t k = 0; k < in.size(); ++k) {
    const TensorInfo* t = h.find(in[k].key);
    ASSERT_NE(t, nullptr) << in[k].key;
    EXPECT_EQ(t->dtype, in[k].dtype);
    EXPECT_EQ(t->shape, in[k].shape);
    EXPECT_EQ(t->begin, written[k].begin);
    EXPECT_EQ(t->end, written[k].end);
    std::string got(static_cast<size_t>(t->nbytes()), '\0');
    f.pread_exact(got.data(), t->nbytes(), t->begin);
    EXPECT_EQ(got, std::string(static_cast<const char*>(in[k].data) ? static_cast<const char*>(in[k].data) : "",
                               static_cast<size_t>(in[k].nbytes)));
    EXPECT_EQ(written[k].checksum, xxh3_64(in[k].data, in[k].nbytes));
    EXPECT_EQ(written[k].block_checksums, block_checksums(in[k].data, in[k].nbytes, 16));
  }
  // The file is exactly header + packed data (no holes: any safetensors reader accepts it).
  EXPECT_EQ(h.tensors.back().end, f.size());
  // No temporary file left behind.
  EXPECT_EQ(list_dir(dir).size(), 1u);
}

TEST(Safetensors, WriterRefusesBadInput) {
  const std::string dir = temp_dir();
  const std::string p = dir + "/x.safetensors";
  float v[2] = {1, 2};
  auto expect_err = [&](std::vector<TensorToWrite> in, const std::string& msg) {
    try {
      write_safetensors(p, in);
      ADD_FAILURE() << "no error, expected " << msg;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(msg));
    }
  };
  expect_err({{"a", DType::F32, {2}, v, 8}, {"a", DType::F32, {2}, v, 8}}, "duplicate key");
  expect_err({{"__metadata__", DType::F32, {2}, v, 8}}, "reserved");
  expect_err({{"", DType::F32, {2}, v, 8}}, "empty tensor key");
  expect_err({{"a", DType::F32, {3}, v, 8}}, "8 bytes given but dtype F32 x shape [3] needs 12");
  expect_err({{"a", DType::F32, {-1}, v, 8}}, "negative size");
  expect_err({{"a", DType::F32, {2}, nullptr, 8}}, "null data");
  EXPECT_FALSE(path_exists(p));
  EXPECT_TRUE(list_dir(dir).empty());  // the temporary file is gone too
}

TEST(Safetensors, HeaderBytesForStreamedWriters) {
  // No data needed: the header of a file whose data a caller streams afterwards.
  const std::vector<TensorToWrite> in = {{"w", DType::F32, {2, 3}, nullptr, 24},
                                         {"b", DType::I64, {}, nullptr, 8}};
  const std::string h = safetensors_header_bytes("out.safetensors", in, {{"format", "pt"}});
  const std::string json =
      "{\"__metadata__\":{\"format\":\"pt\"},"
      "\"w\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
      "\"b\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]}}";
  ASSERT_EQ(h.size() % 8, 0u);
  ASSERT_GE(h.size(), 8 + json.size());
  EXPECT_EQ(h.substr(8, json.size()), json);
  EXPECT_EQ(h.substr(8 + json.size()), std::string(h.size() - 8 - json.size(), ' '));
  uint64_t len = 0;
  for (int i = 7; i >= 0; --i) len = (len << 8) | static_cast<unsigned char>(h[i]);
  EXPECT_EQ(len, h.size() - 8);
  // With the data appended it is a valid file, and write_safetensors writes the same header.
  const std::string file = h + std::string(32, '\x01');
  const SafetensorsHeader parsed = parse_safetensors_bytes(file.data(), file.size(), "mem");
  ASSERT_EQ(parsed.tensors.size(), 2u);
  EXPECT_EQ(parsed.metadata.at("format"), "pt");
  EXPECT_EQ(parsed.find("b")->begin, static_cast<int64_t>(h.size()) + 24);
  const std::string p = temp_dir() + "/x.safetensors";
  const char data[32] = {};
  write_safetensors(p, {{"w", DType::F32, {2, 3}, data, 24}, {"b", DType::I64, {}, data + 24, 8}},
                    SafetensorsWriteOptions{1 << 20, {{"format", "pt"}}, 0});
  std::ifstream f(p, std::ios::binary);
  std::string written((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(written.substr(0, h.size()), h);
  EXPECT_EQ(safetensors_header_bytes("empty", {}), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  try {
    safetensors_header_bytes("out.safetensors", {{"__metadata__", DType::F32, {1}, nullptr, 4}});
    ADD_FAILURE() << "no error for the reserved key";
  } catch (const ValueError& e) {
    EXPECT_STREQ(e.what(), "writing 'out.safetensors': tensor '__metadata__': the key "
                           "__metadata__ is reserved");
  }
}

struct Hostile {
  const char* name;
  std::string bytes;
  const char* error;
};

TEST(Safetensors, HostileHeadersAreRefused) {
  const std::string data16(16, 'x');
  const std::string nest = std::string(200, '[') + std::string(200, ']');
  const std::vector<Hostile> cases = {
      {"short_file", "abcd", "shorter than the 8-byte header length"},
      {"absurd_length", le64(uint64_t{1} << 63) + "{}", "exceeds the limit"},
      {"length_past_end", le64(1000) + "{}      ", "is past the end of the file"},
      {"invalid_json", file_bytes("{\"a\": ", ""), "invalid JSON"},
      {"not_object", file_bytes("[1,2]   ", ""), "is not a JSON object"},
      {"deep_nesting", file_bytes(nest, ""), "nested deeper than 64"},
      {"duplicate_key",
       file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                  "xx"),
       "duplicate key 'a'"},
      {"entry_not_object", file_bytes(R"({"a":5})", ""), "tensor 'a' is not an object"},
      {"missing_field", file_bytes(R"({"a":{"dtype":"F32","shape":[1]}})", ""), "lacks dtype, shape or data_offsets"},
      {"unknown_dtype", file_bytes(R"({"a":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", "x"),
       "tensor 'a': unknown or unsupported dtype 'F8'"},
      {"dtype_not_string", file_bytes(R"({"a":{"dtype":4,"shape":[1],"data_offsets":[0,1]}})", "x"),
       "dtype is not a string"},
      {"negative_shape", file_bytes(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})", "x"),
       "is negative (-1)"},
      {"float_shape", file_bytes(R"({"a":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})", "x"),
       "must be a non-negative integer"},
      {"huge_shape_entry", file_bytes(R"({"a":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,1]}})", "x"),
       "more than"},
      {"overflowing_shape",
       file_bytes(R"({"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,1]}})", "x"),
       "byte size overflows"},
      {"shape_not_list", file_bytes(R"({"a":{"dtype":"U8","shape":1,"data_offsets":[0,1]}})", "x"),
       "shape is not a list"},
      {"offsets_wrong_size", file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", data16),
       "hold 4 bytes but dtype F32 x shape [2] needs 8"},
      {"offsets_reversed", file_bytes(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", data16),
       "are reversed"},
      {"offsets_not_pair", file_bytes(R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0]}})", data16),
       "not a list of two integers"},
      {"offsets_past_end", file_bytes(R"({"a":{"dtype":"U8","shape":[32],"data_offsets":[0,32]}})", data16),
       "past the end of the file (16 data bytes)"},
      {"overlap",
       file_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                  data16),
       "tensors 'a' and 'b' overlap"},
      // An empty tensor sorted between two overlapping ranges does not hide the overlap (a
      // check of neighbours only, skipping pairs with an empty one, would miss it).
      {"overlap_behind_empty",
       file_bytes(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},"b":{"dtype":"U8","shape":[8],"data_offsets":[6,14]}})",
                  data16),
       "tensors 'a' and 'b' overlap"},
      // A long range overlapping a later one past a short one in between.
      {"overlap_past_neighbour",
       file_bytes(R"({"a":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},"m":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},"b":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                  data16),
       "tensors 'a' and 'm' overlap"},
      {"metadata_not_object", file_bytes(R"({"__metadata__":[1]})", ""), "__metadata__ is not an object"},
      {"metadata_value", file_bytes(R"({"__metadata__":{"k":1}})", ""), "__metadata__ value of 'k'"},
  };
  const std::string dir = temp_dir();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string path = dir + "/" + c.name + ".safetensors";
    write_raw(path, c.bytes);
    try {
      read_safetensors_header(path);
      ADD_FAILURE() << c.name << ": no error";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.error));
      EXPECT_THAT(e.what(), HasSubstr(path));  // names the file
    }
    // The in-memory entry point (used by the fuzzer) agrees.
    EXPECT_THROW(parse_safetensors_bytes(c.bytes.data(), static_cast<int64_t>(c.bytes.size()), path),
                 ValueError);
  }
}

TEST(Safetensors, EmptyTensorsMayShareOffsets) {
  const std::string bytes = file_bytes(
      R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})",
      "xy");
  const auto h = parse_safetensors_bytes(bytes.data(), static_cast<int64_t>(bytes.size()), "mem");
  EXPECT_EQ(h.tensors.size(), 2u);
  // An empty tensor inside another's range, or at the end of the data, is harmless.
  const std::string inside = file_bytes(
      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"e":{"dtype":"U8","shape":[0],"data_offsets":[2,2]},"z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})",
      "wxyz");
  EXPECT_EQ(parse_safetensors_bytes(inside.data(), static_cast<int64_t>(inside.size()), "mem").tensors.size(), 3u);
}

TEST(Fs, PreadPastEndAndMissingFile) {
  const std::string dir = temp_dir();
  write_raw(dir + "/f", "0123456789");
  ReadFile f(dir + "/f");
  char buf[8];
  f.pread_exact(buf, 4, 6);
  EXPECT_EQ(std::string(buf, 4), "6789");
  try {
    f.pread_exact(buf, 8, 6);
    ADD_FAILURE();
  } catch (const ValueError& e) {
    EXPECT_THAT(e.what(), HasSubstr("byte range [6, 14) is past the end"));
  }
  EXPECT_THROW(ReadFile(dir + "/missing"), IOError);
  EXPECT_THROW(ReadFile{dir}, ValueError);  // a directory is not a regular file
}

TEST(Fs, ViewsAndChangeDetection) {
  const std::string dir = temp_dir();
  std::string bytes(3 * 4096 + 100, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 + 7);
  write_raw(dir + "/f", bytes);
  ReadFile f(dir + "/f");
  // Views at unaligned offsets, across pages, empty, and to the last byte: the file's bytes.
  for (const auto& [off, n] : std::vector<std::pair<int64_t, int64_t>>{
           {0, 10}, {4095, 2}, {5000, 7000}, {0, static_cast<int64_t>(bytes.size())},
           {static_cast<int64_t>(bytes.size()) - 1, 1}, {123, 0}}) {
    const FileView v = f.view(off, n);
    ASSERT_EQ(v.size(), n);
    EXPECT_EQ(std::string(v.data(), static_cast<size_t>(n)),
              bytes.substr(static_cast<size_t>(off), static_cast<size_t>(n)))
        << off << "+" << n;
  }
  FileView moved = f.view(10, 5);
  FileView other = std::move(moved);
  EXPECT_EQ(std::string(other.data(), 5), bytes.substr(10, 5));
  EXPECT_THAT(error_of([&] { f.view(12000, 500); }),
              HasSubstr("byte range [12000, 12500) is past the end"));
  EXPECT_THROW(f.view(-1, 2), ValueError);
  // Unchanged so far; a write in place (another process's) is detected. (Past the coarse
  // timestamp tick of the file's creation first.)
  f.check_unchanged();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  {
    std::fstream out(dir + "/f", std::ios::in | std::ios::out | std::ios::binary);
    out.seekp(100);
    out.put('x');
  }
  EXPECT_THAT(error_of([&] { f.check_unchanged(); }),
              HasSubstr("/f' changed while it was read (size 12388 -> 12388 bytes"));
}

TEST(Fs, AtomicWriterLeavesOldFileUntilCommit) {
  const std::string dir = temp_dir();
  write_file_atomic(dir + "/m", "old");
  {
    AtomicFileWriter w(dir + "/m");
    w.write("new", 3);
    EXPECT_EQ(read_small_file(dir + "/m", 100), "old");
  }  // destroyed without commit: nothing changes, temp removed
  EXPECT_EQ(read_small_file(dir + "/m", 100), "old");
  EXPECT_EQ(list_dir(dir).size(), 1u);
  write_file_atomic(dir + "/m", "new");
  EXPECT_EQ(read_small_file(dir + "/m", 100), "new");
  EXPECT_THROW(read_small_file(dir + "/m", 2), ValueError);
}

TEST(Fs, OpenBeneathChecksTheOpenedFile) {
  const std::string dir = temp_dir();
  const std::string outside = temp_dir();
  write_raw(dir + "/ok", "abc");
  ASSERT_EQ(::mkdir((dir + "/sub").c_str(), 0755), 0);
  write_raw(dir + "/sub/f", "xy");
  EXPECT_EQ(ReadFile::open_beneath(dir, "ok", "t").size(), 3);
  EXPECT_EQ(ReadFile::open_beneath(dir, "sub/f", "t").size(), 2);
  EXPECT_EQ(ReadFile::open_beneath(dir, "./sub//f", "t").path(), dir + "/./sub//f");
  ASSERT_EQ(::symlink("ok", (dir + "/inner_link").c_str()), 0);
  ASSERT_EQ(::symlink("sub", (dir + "/sublink").c_str()), 0);
  ASSERT_EQ(::mkfifo((dir + "/fifo").c_str(), 0600), 0);
  write_raw(outside + "/secret", "s");
  ASSERT_EQ(::link((outside + "/secret").c_str(), (dir + "/hard").c_str()), 0);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/etc/passwd", "leaves the checkpoint directory " + dir + " (absolute path)"},
      {"sub/../../x", "('..' component)"},
      {"", "(empty path)"},
      {"inner_link", "file 'inner_link' of w in checkpoint " + dir + " is a symbolic link"},
      {"sublink/f", "is a symbolic link or passes through one"},
      {"fifo", "file 'fifo' of w in checkpoint " + dir + " is not a regular file (a FIFO)"},
      {"sub", "is not a regular file (a directory)"},
      {"hard", "file 'hard' of w in checkpoint " + dir + " has 2 hard links"},
  };
  for (const auto& [rel, why] : bad) {
    SCOPED_TRACE(rel);
    try {
      ReadFile::open_beneath(dir, rel, "w");
      ADD_FAILURE() << "no error";
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
  }
  EXPECT_THAT(error_of([&] { ReadFile::open_beneath(dir, "missing", "w"); }),
              HasSubstr("cannot open (w) '" + dir + "/missing': No such file or directory"));
  EXPECT_THROW(ReadFile::open_beneath(dir, "missing", "w"), IOError);
  // A path the user names (ReadFile(path)) follows symlinks but never blocks on a FIFO.
  EXPECT_EQ(ReadFile(dir + "/inner_link").size(), 3);
  EXPECT_THAT(error_of([&] { ReadFile f(dir + "/fifo"); }), HasSubstr("is not a regular file (a FIFO)"));
}

TEST(Fs, ResolveInsideRefusesEscapes) {
  const std::string dir = temp_dir();
  const std::string outside = temp_dir();
  write_raw(dir + "/ok", "x");
  write_raw(outside + "/secret", "x");
  EXPECT_EQ(resolve_inside(dir, "ok", "t"), dir + "/ok");
  ASSERT_EQ(::symlink((outside + "/secret").c_str(), (dir + "/link").c_str()), 0);
  ASSERT_EQ(::symlink("ok", (dir + "/inner_link").c_str()), 0);
  EXPECT_EQ(resolve_inside(dir, "inner_link", "t"), dir + "/inner_link");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"/etc/passwd", "absolute path"}, {"../x", "'..' component"}, {"a/../../x", "'..' component"},
      {"", "empty path"},               {"link", "resolves to"}};
  for (const auto& [rel, why] : bad) {
    try {
      resolve_inside(dir, rel, "chunk 0 of tensor 'w'");
      ADD_FAILURE() << rel;
    } catch (const ValueError& e) {
      EXPECT_THAT(e.what(), HasSubstr("leaves the checkpoint directory"));
      EXPECT_THAT(e.what(), HasSubstr(why));
      EXPECT_THAT(e.what(), HasSubstr("chunk 0 of tensor 'w'"));
    }
  }
}

}  // namespace
}  // namespace hyper::dcp
