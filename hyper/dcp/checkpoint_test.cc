// Local checkpoint: save/load round trips, reshard of ragged chunks, bytes read, hostile
// metadata against real files, atomicity under injected crashes (re-exec'd children),
// an independent safetensors reader (the safetensors package).
#include "hyper/dcp/checkpoint.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/stat.h>

#include <chrono>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/testing_safetensors_reader.h"

extern char** environ;

namespace hyper::dcp {
namespace {

using hyper::testing::error_of;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using nlohmann::json;

std::string temp_dir() {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_ck_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

at::Tensor sample(at::ScalarType t, std::vector<int64_t> shape, int seed) {
  at::manual_seed(seed);
  if (t == at::kBool) return at::randint(0, 2, shape, at::kLong).to(at::kBool);
  if (at::isFloatingType(t)) return at::randn(shape, at::kDouble).mul(100).to(t);
  return at::randint(-100, 100, shape, at::kLong).to(t == at::kByte ? at::kByte : t);
}

/// what() of the SaveError `f()` throws; "(no error)" or "(not a SaveError) <what>" otherwise.
template <typename F>
std::string save_error_of(F&& f) {
  try {
    f();
  } catch (const SaveError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("(not a SaveError) ") + e.what();
  }
  return "(no error)";
}

json read_json(const std::string& path) { return json::parse(read_small_file(path, 1 << 30)); }
/// Writes edited metadata sealed with a fresh "metadata_checksum" (as a writer would).
void write_json(const std::string& path, json j) {
  j.erase("metadata_checksum");
  write_file_atomic(path, seal_metadata_text(j.dump(1)));
}

std::vector<std::string> data_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& n : list_dir(dir))
    if (n != ".metadata" && n != ".lock") out.push_back(n);
  return out;
}

/// "t.<dtype>" -> a [3, 5] sample of each of the ten storable dtypes.
std::map<std::string, at::Tensor> one_of_every_dtype() {
  const std::vector<at::ScalarType> types = {at::kDouble, at::kFloat, at::kHalf, at::kBFloat16,
                                             at::kLong,   at::kInt,   at::kShort, at::kChar,
                                             at::kByte,   at::kBool};
  std::map<std::string, at::Tensor> out;
  int seed = 0;
  for (auto t : types) out[std::string("t.") + c10::toString(t)] = sample(t, {3, 5}, seed++);
  return out;
}

TEST(Checkpoint, RoundTripEveryDTypeAndValues) {
  const std::string dir = temp_dir() + "/ck";
  std::map<std::string, at::Tensor> saved = one_of_every_dtype();
  saved["scalar"] = at::tensor(int64_t{42});
  saved["empty"] = at::zeros({0, 4});
  saved["strided"] = at::arange(12, at::kFloat).reshape({3, 4}).t();  // non-contiguous source
  const std::map<std::string, Value> values = {{"step", int64_t{7}},
                                               {"lr", 0.5},
                                               {"done", false},
                                               {"tag", std::string("x")}};
  save_local(saved, values, dir);
  std::map<std::string, at::Tensor> loaded;
  for (const auto& [n, t] : saved) loaded[n] = at::zeros_like(t).contiguous();
  // A handle taken before loading sees the loaded values (in place).
  const at::Tensor alias = loaded["t.Float"];
  std::map<std::string, Value> got_values;
  load_local(loaded, dir, &got_values);
  for (const auto& [n, t] : saved) EXPECT_TRUE(at::equal(loaded[n], t)) << n;
  EXPECT_TRUE(at::equal(alias, saved["t.Float"]));
  EXPECT_EQ(got_values, values);
  EXPECT_EQ(data_files(dir).size(), 1u);
}

TEST(Checkpoint, LoadIntoNonContiguousDestination) {
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4});
  save_local({{"w", w}}, {}, dir);
  at::Tensor base = at::zeros({4, 3});
  at::Tensor dst = base.t();  // (3, 4) view with strides (1, 3)
  load_local({{"w", dst}}, dir);
  EXPECT_TRUE(at::equal(dst, w));
  EXPECT_TRUE(at::equal(base, w.t()));
}

TEST(Checkpoint, LoadErrors) {
  const std::string dir = temp_dir();
  save_local({{"w", at::ones({2, 3})}}, {}, dir);
  EXPECT_THAT(error_of([&] { load_local({{"w", at::zeros({2, 3}, at::kDouble)}}, dir); }),
              HasSubstr("tensor 'w' was saved as F32, cannot load it into F64"));
  EXPECT_THAT(error_of([&] { load_local({{"w", at::zeros({3, 2})}}, dir); }),
              HasSubstr("target shape [3,2] differs from the saved shape [2,3]"));
  EXPECT_THAT(error_of([&] { load_local({{"v", at::zeros({3, 2})}}, dir); }),
              HasSubstr("tensor 'v' is not in checkpoint"));
  EXPECT_THAT(error_of([&] { save_local({{"c", at::zeros({2}, at::kComplexFloat)}}, {}, dir); }),
              HasSubstr("cannot be stored in a safetensors checkpoint"));
  EXPECT_THAT(error_of([&] { save_local({{"w", at::zeros({2})}}, {{"w", int64_t{1}}}, dir); }),
              HasSubstr("'w' is both a tensor and a value"));
  EXPECT_THAT(error_of([&] {
                write_chunks(dir, "f.safetensors", {{"w", {4}, Box({2}, {3}), at::zeros({3})}});
              }),
              HasSubstr("lies outside global shape [4]"));
  EXPECT_THAT(error_of([&] {
                write_chunks(dir, "f.safetensors", {{"w", {4}, Box({0}, {3}), at::zeros({2})}});
              }),
              HasSubstr("data has 2 elements, the box 3"));
  EXPECT_THAT(error_of([&] { write_chunks(dir, "../f", {}); }), HasSubstr("invalid data file name"));
  EXPECT_THAT(error_of([&] {
                auto r = write_chunks(dir, "f.safetensors", {{"w", {4}, Box({0}, {3}), at::zeros({3})}});
                build_metadata(r, {});
              }),
              HasSubstr("1 missing"));
}

TEST(Checkpoint, IncompleteCheckpoint) {
  const std::string dir = temp_dir();
  EXPECT_EQ(error_of([&] { CheckpointReader r(dir); }), "incomplete checkpoint (no .metadata): " + dir);
  EXPECT_THAT(error_of([&] { CheckpointReader r(dir + "/nope"); }),
              HasSubstr("checkpoint directory does not exist"));
}

// ragged_cases.json "checkpoint_reshard": arange(192).reshape(6,4,8) saved as ragged boxes
// with units (1,3), loaded as units (3,1). Rank 1's saved chunks share one file, so they
// get physical keys.
TEST(Checkpoint, MetadataSizeLimit) {
  const std::string dir = temp_dir();
  save_local({{"w", at::zeros({4})}}, {}, dir);
  ReadOptions ro;
  EXPECT_EQ(ro.max_metadata_bytes, int64_t{64} << 20);
  ro.max_metadata_bytes = 10;
  EXPECT_THAT(error_of([&] { CheckpointReader r(dir, ro); }),
              HasSubstr("bytes, more than the limit of 10 (ReadOptions::max_metadata_bytes)"));
  ro.max_metadata_bytes = 0;
  EXPECT_THAT(error_of([&] { CheckpointReader r(dir, ro); }),
              HasSubstr("ReadOptions::max_metadata_bytes is 0, expected 1.."));
  ro.max_metadata_bytes = 1 << 20;
  CheckpointReader r(dir, ro);
  EXPECT_EQ(r.metadata().tensors.size(), 1u);
}

TEST(Checkpoint, RaggedReshardCase) {
  const std::string dir = temp_dir();
  const at::Tensor global = at::arange(192, at::kLong).reshape({6, 4, 8});
  auto chunk = [&](std::vector<int64_t> o, std::vector<int64_t> s) {
    at::Tensor v = global;
    for (size_t d = 0; d < 3; ++d) v = v.narrow(static_cast<int64_t>(d), o[d], s[d]);
    return ChunkData{"w", {6, 4, 8}, Box(o, s), v};
  };
  auto r0 = write_chunks(dir, "__0_a.safetensors", {chunk({0, 0, 0}, {1, 4, 8})});
  auto r1 = write_chunks(dir, "__1_a.safetensors",
                         {chunk({1, 0, 0}, {1, 2, 8}), chunk({1, 2, 0}, {1, 2, 8}),
                          chunk({2, 0, 0}, {4, 4, 8})});
  EXPECT_EQ(r0[0].chunk.key, "w");
  EXPECT_EQ(r1[0].chunk.key, "w.__dcp_chunk_0");
  EXPECT_EQ(r1[2].chunk.key, "w.__dcp_chunk_2");
  r0.insert(r0.end(), r1.begin(), r1.end());
  commit_metadata(dir, build_metadata(r0, {}));

  CheckpointReader reader(dir);
  at::Tensor rank0 = at::full({144}, -1, at::kLong);
  read_into(reader, "w",
            {FlatBox{Box({0, 0, 0}, {4, 4, 8}), 0}, FlatBox{Box({4, 0, 0}, {1, 2, 8}), 128}}, rank0);
  EXPECT_TRUE(at::equal(rank0, at::arange(144, at::kLong)));
  at::Tensor rank1 = at::full({48}, -1, at::kLong);
  read_into(reader, "w",
            {FlatBox{Box({4, 2, 0}, {1, 2, 8}), 0}, FlatBox{Box({5, 0, 0}, {1, 4, 8}), 16}}, rank1);
  EXPECT_TRUE(at::equal(rank1, at::arange(144, 192, at::kLong)));
  reader.verify_all();
}

TEST(Checkpoint, PhysicalKeysAgainstLiteralNames) {
  // ragged_cases.json "physical_keys": logical {"weight","weight","weight.__dcp_chunk_0"}.
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(8, at::kFloat);
  const at::Tensor lit = at::full({3}, 5.0);
  auto recs = write_chunks(dir, "__0_k.safetensors",
                           {{"weight", {8}, Box({0}, {4}), w.narrow(0, 0, 4)},
                            {"weight", {8}, Box({4}, {4}), w.narrow(0, 4, 4)},
                            {"weight.__dcp_chunk_0", {3}, Box({0}, {3}), lit}});
  EXPECT_EQ(recs[2].chunk.key, "weight.__dcp_chunk_0");
  const auto h = read_safetensors_header(dir + "/__0_k.safetensors");
  EXPECT_EQ(h.tensors.size(), 3u);
  const Metadata m = build_metadata(recs, {});
  EXPECT_EQ(m.tensors.size(), 2u);  // logical names in the metadata
  commit_metadata(dir, m);
  at::Tensor a = at::zeros({8}), b = at::zeros({3});
  load_local({{"weight", a}, {"weight.__dcp_chunk_0", b}}, dir);
  EXPECT_TRUE(at::equal(a, w));
  EXPECT_TRUE(at::equal(b, lit));
}

TEST(Checkpoint, OldMetadataWithoutKeysLoadsByName) {
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(6, at::kInt).reshape({2, 3});
  save_local({{"w", w}}, {}, dir);
  json j = read_json(dir + "/.metadata");
  for (auto& c : j["tensors"]["w"]["chunks"]) {
    c.erase("key");
    c.erase("byte_range");
    c.erase("checksum");
  }
  write_json(dir + "/.metadata", j);
  at::Tensor out = at::zeros({2, 3}, at::kInt);
  EXPECT_THAT(error_of([&] { load_local({{"w", out}}, dir); }), HasSubstr("carries no checksum"));
  ReadOptions ro;
  ro.allow_unchecksummed = true;
  load_local({{"w", out}}, dir, nullptr, ro);
  EXPECT_TRUE(at::equal(out, w));
}

TEST(Checkpoint, ReadsOnlyTheNeededBytes) {
  const std::string dir = temp_dir();
  const at::Tensor w = at::randn({1024, 1024});  // 4 MiB, rows of 4 KiB
  WriteOptions wo;
  wo.checksum_block_size = 16 << 10;  // 256 blocks; a partial verified read adds <= 2 per stretch
  // Saved as 4 row chunks of 256 rows.
  std::vector<ChunkData> chunks;
  for (int64_t i = 0; i < 4; ++i)
    chunks.push_back({"w", {1024, 1024}, Box({i * 256, 0}, {256, 1024}), w.narrow(0, i * 256, 256)});
  make_dirs(dir);
  commit_metadata(dir, build_metadata(write_chunks(dir, "__0_r.safetensors", chunks, wo), {}));

  auto check = [&](const Box& box, bool verify, double max_ratio) {
    ReadOptions ro;
    ro.verify_checksums = verify;
    CheckpointReader reader(dir, ro);
    at::Tensor out = at::zeros({box.numel()});
    read_into(reader, "w", {FlatBox{box, 0}}, out);
    at::Tensor expect = w.narrow(0, box.offsets[0], box.sizes[0]).narrow(1, box.offsets[1], box.sizes[1]);
    EXPECT_TRUE(at::equal(out.view(expect.sizes()), expect));
    const double needed = static_cast<double>(box.numel() * 4);
    EXPECT_LE(reader.bytes_read(), needed * max_ratio) << box.to_string() << " verify=" << verify;
    EXPECT_GE(reader.bytes_read(), needed);
    return reader.bytes_read();
  };
  // Rows 100..900 cross three chunk boundaries; verified reads add at most a block per end.
  check(Box({100, 0}, {800, 1024}), true, 1.05);
  check(Box({100, 0}, {800, 1024}), false, 1.0);
  // A box inside one chunk reads from that chunk only.
  check(Box({300, 0}, {200, 1024}), true, 1.05);
  // Half the columns: unverified reads are exact; verified ones read the touched leaves
  // (here exactly the needed ones) plus every leaf sum (8 bytes per KiB of the chunks).
  check(Box({0, 0}, {1024, 512}), false, 1.0);
  EXPECT_EQ(check(Box({0, 0}, {1024, 512}), true, 1.1), (2 << 20) + (4 << 20) / 1024 * 8);
}

TEST(Checkpoint, ChunkReadWholeIsVerifiedByItsWholeChecksum) {
  // A chunk needed whole by one run is verified in one pass of its whole-chunk checksum (no
  // leaf sums read). On a mismatch the leaves name the corrupted bytes; if every leaf
  // matches, the whole checksum's mismatch is the error; a chunk of one leaf has no leaves.
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(1024 * 256, at::kFloat).view({1024, 256});  // 1 MiB
  const at::Tensor small = at::arange(16, at::kFloat);                        // 64 bytes
  make_dirs(dir);
  commit_metadata(dir, build_metadata(write_chunks(dir, "__0_w.safetensors",
                                                   {{"w", {1024, 256}, Box::full({1024, 256}), w},
                                                    {"s", {16}, Box::full({16}), small}}),
                                      {}));
  auto load_all = [&](const std::string& name, int64_t numel, int64_t* bytes = nullptr) {
    CheckpointReader reader(dir);
    at::Tensor out = at::full({numel}, -1.0f);
    const Shape shape = reader.tensor(name).shape;
    reader.read(name, {FlatBox{Box::full(shape), 0}}, DType::F32, out.data_ptr(), numel * 4);
    if (bytes) *bytes = reader.bytes_read();
    return out;
  };
  int64_t bytes = 0;
  EXPECT_TRUE(at::equal(load_all("w", 1024 * 256, &bytes), w.reshape({-1})));
  EXPECT_EQ(bytes, 1 << 20);  // the chunk's bytes only: no leaf sums
  EXPECT_TRUE(at::equal(load_all("s", 16, &bytes), small));
  EXPECT_EQ(bytes, 64);

  // The whole checksum altered (sealed again, leaves intact): its mismatch is named.
  json j = read_json(dir + "/.metadata");
  json& wc = j["tensors"]["w"]["chunks"][0];
  const std::string good = wc["checksum"];
  wc["checksum"] = "0123456789abcdef";
  write_json(dir + "/.metadata", j);
  EXPECT_THAT(error_of([&] { load_all("w", 1024 * 256); }),
              HasSubstr("tensor 'w' chunk 0, bytes ["));
  EXPECT_THAT(error_of([&] { load_all("w", 1024 * 256); }),
              HasSubstr("expected 0123456789abcdef, got " + good +
                        " (the file is corrupted or changed while read)"));
  wc["checksum"] = good;
  write_json(dir + "/.metadata", j);

  // A flipped byte at 300 KiB + 5: the leaf [300 KiB, 301 KiB) is named.
  const std::string path = dir + "/__0_w.safetensors";
  const auto header = read_safetensors_header(path);
  int64_t wbegin = -1, sbegin = -1;
  for (const auto& t : header.tensors) {
    if (t.key == "w") wbegin = t.begin;
    if (t.key == "s") sbegin = t.begin;
  }
  ASSERT_GE(wbegin, 0);
  ASSERT_GE(sbegin, 0);
  std::string data = read_small_file(path, 8 << 20);
  data[static_cast<size_t>(wbegin + (300 << 10) + 5)] ^= 0x01;
  data[static_cast<size_t>(sbegin + 3)] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
  EXPECT_THAT(error_of([&] { load_all("w", 1024 * 256); }),
              HasSubstr("tensor 'w' chunk 0, bytes [" + std::to_string(wbegin + (300 << 10)) +
                        ", " + std::to_string(wbegin + (301 << 10)) + "): expected "));
  EXPECT_THAT(error_of([&] { load_all("s", 16); }),
              HasSubstr("tensor 's' chunk 0, bytes [" + std::to_string(sbegin) + ", " +
                        std::to_string(sbegin + 64) + "): expected "));
}

TEST(Checkpoint, VerifiedReadsDirectAndBounced) {
  // Verified reads go straight into the destination for blocks inside one run and through a
  // bounce buffer for blocks only partly needed; both are checked here, with exact bytes
  // read, and a corrupted block is caught on either path.
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(1024 * 256, at::kFloat).view({1024, 256});  // rows of 1 KiB
  WriteOptions wo;
  wo.checksum_block_size = 4 << 10;  // 4 rows per leaf, 256 leaves, one per group
  wo.checksum_leaf_size = 4 << 10;
  make_dirs(dir);
  const std::string file = "__0_r.safetensors";
  commit_metadata(dir, build_metadata(write_chunks(dir, file, {{"w", {1024, 256},
                                                                Box::full({1024, 256}), w}}, wo),
                                      {}));
  auto read_box = [&](const std::vector<FlatBox>& region, int64_t numel, int64_t* bytes) {
    CheckpointReader reader(dir);
    at::Tensor out = at::full({numel}, -1.0f);
    reader.read("w", region, DType::F32, out.data_ptr(), numel * 4);
    *bytes = reader.bytes_read();
    return out;
  };
  int64_t bytes = 0;
  // Rows 1..1022: the first and last blocks are partial (bounced), 254 blocks direct.
  at::Tensor a = read_box({FlatBox{Box({1, 0}, {1022, 256}), 0}}, 1022 * 256, &bytes);
  EXPECT_TRUE(at::equal(a, w.narrow(0, 1, 1022).reshape({-1})));
  EXPECT_EQ(bytes, 1024 * 1024 + 256 * 8);  // + the leaf sums
  // Two boxes, the second first in the destination; one starts mid-block.
  at::Tensor b = read_box({FlatBox{Box({6, 0}, {10, 256}), 4 * 256},
                           FlatBox{Box({100, 0}, {4, 256}), 0}},
                          14 * 256, &bytes);
  EXPECT_TRUE(at::equal(b.narrow(0, 0, 4 * 256), w.narrow(0, 100, 4).reshape({-1})));
  EXPECT_TRUE(at::equal(b.narrow(0, 4 * 256, 10 * 256), w.narrow(0, 6, 10).reshape({-1})));
  EXPECT_EQ(bytes, (4 + 12) * 1024 + 4 * 8);  // leaf 25 whole; rows 4..15 = leaves 1..3
  // Columns: every block partly needed, all bounced.
  at::Tensor c = read_box({FlatBox{Box({0, 8}, {1024, 8}), 0}}, 1024 * 8, &bytes);
  EXPECT_TRUE(at::equal(c, w.narrow(1, 8, 8).reshape({-1})));
  EXPECT_EQ(bytes, 1024 * 1024 + 256 * 8);

  // Corrupt a byte of row 500 (block 125): a direct read and a bounced read both fail.
  const std::string path = dir + "/" + file;
  std::string data = read_small_file(path, 8 << 20);
  const auto header = read_safetensors_header(path);
  const int64_t at_byte = header.tensors.at(0).begin + 500 * 1024 + 17;
  data[static_cast<size_t>(at_byte)] ^= 0x20;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
  EXPECT_THAT(error_of([&] { read_box({FlatBox{Box({0, 0}, {1024, 256}), 0}}, 1024 * 256, &bytes); }),
              HasSubstr("checksum mismatch in '" + path + "', tensor 'w' chunk 0, bytes [" +
                        std::to_string(header.tensors.at(0).begin + 125 * 4096)));
  EXPECT_THAT(error_of([&] { read_box({FlatBox{Box({499, 3}, {2, 5}), 0}}, 10, &bytes); }),
              HasSubstr("checksum mismatch"));
  // Rows of other blocks still load.
  at::Tensor d = read_box({FlatBox{Box({0, 0}, {500 - 4, 256}), 0}}, 496 * 256, &bytes);
  EXPECT_TRUE(at::equal(d, w.narrow(0, 0, 496).reshape({-1})));
}

// Edits the metadata of a fresh one-tensor checkpoint and returns load's error.
std::string load_error_after(const std::function<void(const std::string& dir, json& meta)>& edit,
                             bool verify = true) {
  const std::string dir = temp_dir();
  save_local({{"w", at::arange(64, at::kFloat)}}, {}, dir);
  json j = read_json(dir + "/.metadata");
  edit(dir, j);
  write_json(dir + "/.metadata", j);
  ReadOptions ro;
  ro.verify_checksums = verify;
  return error_of([&] { load_local({{"w", at::zeros({64})}}, dir, nullptr, ro); });
}

TEST(Checkpoint, HostileMetadataAgainstFiles) {
  auto chunk0 = [](json& j) -> json& { return j["tensors"]["w"]["chunks"][0]; };
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { chunk0(j)["file"] = "../x.safetensors"; }),
              HasSubstr("leaves the checkpoint directory"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { chunk0(j)["file"] = "/etc/passwd"; }),
              HasSubstr("file '/etc/passwd' of chunk 0 of tensor 'w' leaves the checkpoint directory"));
  EXPECT_THAT(load_error_after([&](const std::string& dir, json& j) {
                const std::string outside = temp_dir();
                const std::string f = chunk0(j)["file"];
                ::rename((dir + "/" + f).c_str(), (outside + "/" + f).c_str());
                ASSERT_EQ(::symlink((outside + "/" + f).c_str(), (dir + "/" + f).c_str()), 0);
              }),
              HasSubstr("is a symbolic link"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) {
                chunk0(j)["byte_range"] = {int64_t{1} << 40, (int64_t{1} << 40) + 256};
              }),
              HasSubstr("is past the end of"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) {
                const int64_t b = chunk0(j)["byte_range"][0];
                chunk0(j)["byte_range"] = {b - 8, b + 248};
              }),
              HasSubstr("disagrees with the header"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { j["tensors"]["w"]["dtype"] = "I32"; }),
              AnyOf(HasSubstr("has dtype F32 but the metadata says I32"), HasSubstr("saved as I32")));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { chunk0(j)["key"] = "nope"; }),
              HasSubstr("has no tensor 'nope'"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { chunk0(j)["file"] = "missing.safetensors"; }),
              HasSubstr("cannot open (chunk 0 of tensor 'w')"));
  EXPECT_THAT(load_error_after([&](const std::string&, json& j) { j["tensors"]["w"]["shape"] = {63}; }),
              HasSubstr("lies outside the shape"));
  // The dtype check against the header also fires when the target asks for the lie.
  {
    const std::string dir = temp_dir();
    save_local({{"w", at::arange(64, at::kFloat)}}, {}, dir);
    json j = read_json(dir + "/.metadata");
    j["tensors"]["w"]["dtype"] = "I32";
    write_json(dir + "/.metadata", j);
    EXPECT_THAT(error_of([&] { load_local({{"w", at::zeros({64}, at::kInt)}}, dir); }),
                HasSubstr("has dtype F32 but the metadata says I32"));
  }
}

/// `f()`'s error message ("(no error)" when it returns) if it returns within 10 s; else
/// "HANG: did not return within 10 s", after `unblock()` freed it (so the test reports a hang
/// instead of hanging).
std::string error_within_deadline(const std::function<void()>& f,
                                  const std::function<void()>& unblock) {
  std::promise<std::string> done;
  std::future<std::string> result = done.get_future();
  std::thread th([&] { done.set_value(error_of(f)); });
  if (result.wait_for(std::chrono::seconds(10)) == std::future_status::ready) {
    th.join();
    return result.get();
  }
  unblock();
  th.join();
  return "HANG: did not return within 10 s";
}

/// Frees a reader blocked opening the FIFO `path` (opens and closes its write end).
void unblock_fifo(const std::string& path) {
  for (int i = 0; i < 100; ++i) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) {
      ::close(fd);
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// A FIFO named as .metadata or as a data file blocked open() forever (no writer). Now it is
// refused at once, by type, from the opened descriptor.
TEST(Checkpoint, FifoAsMetadataOrDataFileFailsFast) {
  const std::string dir = temp_dir();
  save_local({{"w", at::arange(8, at::kFloat)}}, {}, dir);
  const std::string data = dir + "/" + data_files(dir)[0];
  at::Tensor out = at::zeros({8});
  // A FIFO as a data file.
  ASSERT_EQ(::unlink(data.c_str()), 0);
  ASSERT_EQ(::mkfifo(data.c_str(), 0600), 0);
  EXPECT_THAT(error_within_deadline([&] { load_local({{"w", out}}, dir); },
                                    [&] { unblock_fifo(data); }),
              HasSubstr("is not a regular file (a FIFO)"));
  // A FIFO as .metadata.
  const std::string meta = dir + "/.metadata";
  ASSERT_EQ(::unlink(meta.c_str()), 0);
  ASSERT_EQ(::mkfifo(meta.c_str(), 0600), 0);
  const std::string m = error_within_deadline([&] { CheckpointReader r(dir); },
                                              [&] { unblock_fifo(meta); });
  EXPECT_THAT(m, HasSubstr("file '.metadata' of the checkpoint metadata in checkpoint " + dir +
                           " is not a regular file (a FIFO)"));
}

// Files are opened beneath the checkpoint directory without following symlinks (inside or
// out), refusing hard links (another name of a file elsewhere) and directories, all checked
// on the opened descriptor.
TEST(Checkpoint, OpenBeneathRefusesLinksAndNonRegularFiles) {
  auto fresh = [&](std::string* data_name) {
    const std::string dir = temp_dir();
    save_local({{"w", at::arange(8, at::kFloat)}}, {}, dir);
    *data_name = data_files(dir)[0];
    return dir;
  };
  auto load_err = [&](const std::string& dir) {
    at::Tensor out = at::zeros({8});
    return error_of([&] { load_local({{"w", out}}, dir); });
  };
  std::string f;
  {  // A symlink inside the directory (to a file inside): not followed.
    const std::string dir = fresh(&f);
    ASSERT_EQ(::rename((dir + "/" + f).c_str(), (dir + "/real").c_str()), 0);
    ASSERT_EQ(::symlink("real", (dir + "/" + f).c_str()), 0);
    EXPECT_THAT(load_err(dir), HasSubstr("file '" + f + "' of chunk 0 of tensor 'w' in checkpoint " +
                                         dir + " is a symbolic link"));
  }
  {  // .metadata as a symlink to a good copy elsewhere.
    const std::string dir = fresh(&f);
    const std::string outside = temp_dir();
    ASSERT_EQ(::rename((dir + "/.metadata").c_str(), (outside + "/m").c_str()), 0);
    ASSERT_EQ(::symlink((outside + "/m").c_str(), (dir + "/.metadata").c_str()), 0);
    EXPECT_THAT(load_err(dir), HasSubstr("file '.metadata' of the checkpoint metadata in "
                                         "checkpoint " + dir + " is a symbolic link"));
  }
  {  // A directory through a symlinked subdirectory.
    const std::string dir = fresh(&f);
    const std::string outside = temp_dir();
    ASSERT_EQ(::rename((dir + "/" + f).c_str(), (outside + "/" + f).c_str()), 0);
    ASSERT_EQ(::symlink(outside.c_str(), (dir + "/sub").c_str()), 0);
    json j = read_json(dir + "/.metadata");
    j["tensors"]["w"]["chunks"][0]["file"] = "sub/" + f;
    write_json(dir + "/.metadata", j);
    EXPECT_THAT(load_err(dir), HasSubstr("is a symbolic link or passes through one"));
  }
  {  // A hard link: the data file has a second name outside the checkpoint.
    const std::string dir = fresh(&f);
    const std::string outside = temp_dir();
    ASSERT_EQ(::link((dir + "/" + f).c_str(), (outside + "/other").c_str()), 0);
    EXPECT_THAT(load_err(dir), HasSubstr("file '" + f + "' of chunk 0 of tensor 'w' in checkpoint " +
                                         dir + " has 2 hard links"));
    ASSERT_EQ(::unlink((outside + "/other").c_str()), 0);
    at::Tensor out = at::zeros({8});
    load_local({{"w", out}}, dir);  // one link again: loads
    EXPECT_TRUE(at::equal(out, at::arange(8, at::kFloat)));
  }
  {  // A directory where the data file should be.
    const std::string dir = fresh(&f);
    ASSERT_EQ(::unlink((dir + "/" + f).c_str()), 0);
    ASSERT_EQ(::mkdir((dir + "/" + f).c_str(), 0755), 0);
    EXPECT_THAT(load_err(dir), HasSubstr("is not a regular file (a directory)"));
  }
  {  // A directory as .metadata.
    const std::string dir = fresh(&f);
    ASSERT_EQ(::unlink((dir + "/.metadata").c_str()), 0);
    ASSERT_EQ(::mkdir((dir + "/.metadata").c_str(), 0755), 0);
    EXPECT_THAT(load_err(dir), HasSubstr("is not a regular file (a directory)"));
  }
}

// BOOL data bytes other than 0 and 1 are not bools: refused when read (torch would hold an
// invalid bool).
TEST(Checkpoint, BoolBytesOtherThanZeroOrOneAreRefused) {
  const std::string dir = temp_dir();
  const at::Tensor b = at::tensor({1, 0, 1, 1}, at::kLong).to(at::kBool);
  save_local({{"b", b}}, {}, dir);
  const std::string file = dir + "/" + data_files(dir)[0];
  std::string bytes = read_small_file(file, 1 << 20);
  ASSERT_EQ(bytes.substr(bytes.size() - 4), std::string("\x01\x00\x01\x01", 4));
  bytes[bytes.size() - 2] = 2;  // element 2
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  ReadOptions off;
  off.verify_checksums = false;  // the bytes reach the tensor (with checksums: a mismatch)
  at::Tensor out = at::zeros({4}, at::kBool);
  EXPECT_THAT(error_of([&] { load_local({{"b", out}}, dir, nullptr, off); }),
              HasSubstr("loading 'b': BOOL element 2 holds the byte 2 (a bool is 0 or 1)"));
  bytes[bytes.size() - 2] = 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  load_local({{"b", out}}, dir, nullptr, off);
  EXPECT_TRUE(at::equal(out, b));

  // A checkpoint written with the byte 2 (checksums valid: they are not signatures) is
  // refused by the verified, staged load too, and the target keeps its values.
  const std::string dir2 = temp_dir();
  save_local({{"b", at::tensor({1, 0, 2, 1}, at::kByte).view(at::kBool)}}, {}, dir2);
  at::Tensor keep = at::tensor({0, 1, 0, 0}, at::kLong).to(at::kBool);
  EXPECT_THAT(error_of([&] { load_local({{"b", keep}}, dir2); }),
              HasSubstr("loading 'b': BOOL element 2 holds the byte 2 (a bool is 0 or 1)"));
  EXPECT_TRUE(at::equal(keep, at::tensor({0, 1, 0, 0}, at::kLong).to(at::kBool)));
}

TEST(Checkpoint, CorruptedAndTruncatedFiles) {
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(64, at::kFloat);
  save_local({{"w", w}}, {}, dir);
  const std::string file = dir + "/" + data_files(dir)[0];
  std::string bytes = read_small_file(file, 1 << 20);
  // Flip one data byte.
  std::string bad = bytes;
  bad[bad.size() - 3] ^= 0x40;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bad;
  at::Tensor out = at::zeros({64});
  EXPECT_THAT(error_of([&] { load_local({{"w", out}}, dir); }),
              HasSubstr("checksum mismatch in '" + file + "', tensor 'w' chunk 0"));
  ReadOptions off;
  off.verify_checksums = false;
  load_local({{"w", out}}, dir, nullptr, off);  // unverified: loads the corrupted values
  EXPECT_FALSE(at::equal(out, w));
  // Truncate.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 10);
  EXPECT_THAT(error_of([&] { load_local({{"w", out}}, dir); }), HasSubstr("past the end of the file"));
  // Garbage header.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << std::string(64, '\xff');
  EXPECT_THAT(error_of([&] { load_local({{"w", out}}, dir); }), HasSubstr("exceeds the limit"));
}

TEST(Checkpoint, OverwriteReplacesFilesAtomically) {
  const std::string dir = temp_dir();
  save_local({{"w", at::zeros({4})}}, {}, dir);
  const auto first = data_files(dir);
  save_local({{"w", at::ones({4})}}, {}, dir);
  const auto second = data_files(dir);
  ASSERT_EQ(second.size(), 1u);  // the old data file was removed after the commit
  EXPECT_NE(first, second);
  at::Tensor out = at::zeros({4});
  load_local({{"w", out}}, dir);
  EXPECT_TRUE(at::equal(out, at::ones({4})));
}

// The commit confirms every referenced data file before the rename: present, a regular file,
// and exactly the size write_chunks reported (header + data); otherwise SaveError naming the
// file, and nothing is committed (the previous .metadata stays).
TEST(Checkpoint, CommitConfirmsEveryReferencedFile) {
  const std::string dir = temp_dir();
  save_local({{"w", at::zeros({4})}}, {}, dir);
  const std::string before = read_small_file(dir + "/.metadata", 1 << 20);
  auto prepare = [&](std::string* file, int64_t* size) {
    *file = unique_data_file_name(0);
    const auto recs = write_chunks(dir, *file, {{"w", {4}, Box::full({4}), at::ones({4})}});
    *size = recs.at(0).chunk.byte_range->second;
    return build_metadata(recs, {});
  };
  std::string file;
  int64_t size = 0;
  auto unchanged = [&] {
    EXPECT_EQ(read_small_file(dir + "/.metadata", 1 << 20), before);
    at::Tensor out = at::ones({4});
    load_local({{"w", out}}, dir);
    EXPECT_TRUE(at::equal(out, at::zeros({4})));
  };
  {  // missing
    const Metadata m = prepare(&file, &size);
    remove_file(dir + "/" + file);
    const std::string e = save_error_of([&] { commit_metadata(dir, m, 0, {{file, size}}); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "'"));
    EXPECT_THAT(e, HasSubstr("No such file or directory"));
    EXPECT_THAT(e, HasSubstr("nothing was committed"));
    unchanged();
  }
  {  // one byte short
    const Metadata m = prepare(&file, &size);
    ASSERT_EQ(::truncate((dir + "/" + file).c_str(), size - 1), 0);
    const std::string e = save_error_of([&] { commit_metadata(dir, m, 0, {{file, size}}); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "' has " + std::to_string(size - 1) +
                             " bytes, expected " + std::to_string(size)));
    unchanged();
  }
  {  // shorter than its chunks' byte ranges (no expected size known)
    const Metadata m = prepare(&file, &size);
    ASSERT_EQ(::truncate((dir + "/" + file).c_str(), size - 4), 0);
    const std::string e = save_error_of([&] { commit_metadata(dir, m); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "' has " + std::to_string(size - 4) +
                             " bytes, its chunks end at byte " + std::to_string(size)));
    unchanged();
  }
  {  // a header length running into the first chunk
    const Metadata m = prepare(&file, &size);
    const int64_t first = m.tensors.at("w").chunks.at(0).byte_range->first;
    const uint64_t bad = static_cast<uint64_t>(first);  // 8 + bad > first
    const int fd = ::open((dir + "/" + file).c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, &bad, 8, 0), 8);
    ::close(fd);
    const std::string e = save_error_of([&] { commit_metadata(dir, m, 0, {{file, size}}); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "' has a header of " + std::to_string(first) +
                             " bytes, overlapping its first chunk at byte " + std::to_string(first)));
    unchanged();
  }
  {  // shorter than a header
    Metadata m = prepare(&file, &size);
    m.tensors.at("w").chunks.at(0).byte_range = std::make_pair(int64_t{0}, int64_t{4});
    ASSERT_EQ(::truncate((dir + "/" + file).c_str(), 4), 0);
    const std::string e = save_error_of([&] { commit_metadata(dir, m); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "' has no safetensors header (4 bytes)"));
    unchanged();
  }
  {  // a symlink to a good file is not a regular file of the checkpoint
    const Metadata m = prepare(&file, &size);
    const std::string real = dir + "/../" + file + ".elsewhere";
    ASSERT_EQ(::rename((dir + "/" + file).c_str(), real.c_str()), 0);
    ASSERT_EQ(::symlink(real.c_str(), (dir + "/" + file).c_str()), 0);
    const std::string e = save_error_of([&] { commit_metadata(dir, m, 0, {{file, size}}); });
    EXPECT_THAT(e, HasSubstr("data file '" + file + "' is not a regular file"));
    unchanged();
    ::unlink(real.c_str());  // outside the test's directory: nothing else removes it
  }
}

// The directory lock (dir_lock.h) as save_local meets it: held (named holder, or an unknown
// one while the holder has not written its line yet), a symlinked or non-regular .lock.
TEST(Checkpoint, DirectoryLockRefusals) {
  const std::string dir = temp_dir();
  save_local({{"w", at::zeros({4})}}, {}, dir);
  EXPECT_EQ(read_lock_file(dir), "");  // released: emptied
  {
    DirLock mine(dir, lock_holder_text("ab12"));
    EXPECT_THAT(read_lock_file(dir), ::testing::MatchesRegex("pid " + std::to_string(::getpid()) +
                                                             " on host .+, save ab12, since 20.+Z"));
  }
  {
    const DirLock held(dir, "pid 1 on host h1, job 9, save 01, since 2026-01-01T00:00:00Z");
    EXPECT_EQ(save_error_of([&] { save_local({{"w", at::ones({4})}}, {}, dir); }),
              "checkpoint directory '" + dir + "' is locked by another save (pid 1 on host h1, "
              "job 9, save 01, since 2026-01-01T00:00:00Z); concurrent saves into one directory "
              "are refused");
  }
  {  // a holder that locked but has not written its line yet
    ASSERT_EQ(::truncate((dir + "/.lock").c_str(), 0), 0);
    const int fd = ::open((dir + "/.lock").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::flock(fd, LOCK_EX | LOCK_NB), 0);
    EXPECT_THAT(save_error_of([&] { save_local({{"w", at::ones({4})}}, {}, dir); }),
                HasSubstr("is locked by another save (holder unknown: its lock file stayed empty for 200 ms)"));
    ::close(fd);
  }
  at::Tensor out = at::ones({4});
  load_local({{"w", out}}, dir);
  EXPECT_TRUE(at::equal(out, at::zeros({4})));  // nothing was saved under a held lock
  remove_file(dir + "/.lock");
  ASSERT_EQ(::symlink((dir + "/elsewhere").c_str(), (dir + "/.lock").c_str()), 0);
  EXPECT_THAT(error_of([&] { save_local({{"w", at::ones({4})}}, {}, dir); }),
              HasSubstr("cannot open the lock file '" + dir + "/.lock': Too many levels of symbolic links"));
  EXPECT_THAT(error_of([&] { read_lock_file(dir); }),
              HasSubstr("cannot open the lock file '" + dir + "/.lock': Too many levels of symbolic links"));
  EXPECT_FALSE(path_exists(dir + "/elsewhere"));
  remove_file(dir + "/.lock");
  ASSERT_EQ(::mkfifo((dir + "/.lock").c_str(), 0644), 0);
  EXPECT_THAT(error_of([&] { save_local({{"w", at::ones({4})}}, {}, dir); }),
              HasSubstr("lock file '" + dir + "/.lock' is not a regular file"));
  remove_file(dir + "/.lock");
  save_local({{"w", at::ones({4})}}, {}, dir);  // a fresh lock file
  load_local({{"w", out}}, dir);
  EXPECT_TRUE(at::equal(out, at::ones({4})));
}

// ---------------------------------------------------------------- crash tests
// The child re-executes this binary filtered to DcpCrashChild.Save, which saves
// w = full(4, value) into $HYPER_DCP_CHILD_DIR with HYPER_DCP_FAULT set by the parent.

TEST(DcpCrashChild, Save) {
  const char* dir = std::getenv("HYPER_DCP_CHILD_DIR");
  if (dir == nullptr) GTEST_SKIP() << "only runs as the child of the crash tests";
  const double value = std::atof(std::getenv("HYPER_DCP_CHILD_VALUE"));
  save_local({{"w", at::full({1000}, value)}}, {{"value", value}}, dir);
}

int run_child(const std::string& dir, double value, const std::string& fault) {
  std::vector<std::string> env_s;
  for (char** e = environ; *e; ++e)
    if (std::string(*e).rfind("HYPER_DCP_", 0) != 0) env_s.push_back(*e);
  env_s.push_back("HYPER_DCP_CHILD_DIR=" + dir);
  env_s.push_back("HYPER_DCP_CHILD_VALUE=" + std::to_string(value));
  if (!fault.empty()) env_s.push_back("HYPER_DCP_FAULT=" + fault);
  std::vector<char*> envp;
  for (auto& s : env_s) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string exe = "/proc/self/exe", filter = "--gtest_filter=DcpCrashChild.Save";
  char* argv[] = {exe.data(), filter.data(), nullptr};
  // The child's gtest output goes to a log beside the checkpoint (shown on failure).
  const std::string log = dir + ".child.log";
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid;
  EXPECT_EQ(::posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv, envp.data()), 0);
  posix_spawn_file_actions_destroy(&fa);
  int status = 0;
  EXPECT_EQ(::waitpid(pid, &status, 0), pid);
  const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc != 0 && rc != kFaultExitCode) ADD_FAILURE() << "child exited " << rc << ":\n" << read_small_file(log, 1 << 20);
  return rc;
}

double loaded_value(const std::string& dir) {
  at::Tensor out = at::zeros({1000});
  std::map<std::string, Value> values;
  load_local({{"w", out}}, dir, &values);
  const double v = std::get<double>(values.at("value"));
  EXPECT_TRUE(at::equal(out, at::full({1000}, v)));
  return v;
}

TEST(Checkpoint, CrashMidSaveKeepsPreviousCheckpoint) {
  const std::string dir = temp_dir();
  ASSERT_EQ(run_child(dir, 1.0, ""), 0);
  EXPECT_EQ(loaded_value(dir), 1.0);
  for (const char* point : {"mid_data_file", "after_data_file", "before_metadata"}) {
    SCOPED_TRACE(point);
    EXPECT_EQ(run_child(dir, 2.0, std::string(point) + ":0"), kFaultExitCode);
    EXPECT_EQ(loaded_value(dir), 1.0);  // the previous checkpoint is intact
  }
  // Crash after the metadata commit: the new checkpoint is complete (stale files remain).
  EXPECT_EQ(run_child(dir, 3.0, "after_metadata:0"), kFaultExitCode);
  EXPECT_EQ(loaded_value(dir), 3.0);
  // A fault for another rank does not fire; the next save removes every leftover.
  EXPECT_EQ(run_child(dir, 4.0, "mid_data_file:1"), 0);
  EXPECT_EQ(loaded_value(dir), 4.0);
  EXPECT_EQ(data_files(dir).size(), 1u);
}

TEST(Checkpoint, CrashInFreshDirectoryIsDetectablyIncomplete) {
  for (const char* point : {"mid_data_file:0", "after_data_file:*", "before_metadata:0"}) {
    const std::string dir = temp_dir();
    EXPECT_EQ(run_child(dir, 1.0, point), kFaultExitCode);
    EXPECT_EQ(error_of([&] { loaded_value(dir); }), "incomplete checkpoint (no .metadata): " + dir);
  }
}

// ---------------------------------------------------------------- independent reader
// The safetensors package (PyPI, the format's reference implementation) opens every chunk file
// and finds every chunk under its physical key with its dtype, shape and values.
TEST(Checkpoint, SafetensorsPackageOpensChunkFiles) {
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(24, at::kFloat).reshape({4, 6}).div(4);
  const at::Tensor bf = at::arange(6, at::kFloat).reshape({2, 3}).to(at::kBFloat16);
  const at::Tensor b = at::tensor({1, 0, 1}).to(at::kBool);
  const at::Tensor l = at::tensor({int64_t{-5}, int64_t{1} << 40});
  // Rank 0's file: two chunks of w (physical keys) + bf; rank 1's file: the rest.
  auto r = write_chunks(dir, "__0_n.safetensors",
                        {{"w", {4, 6}, Box({0, 0}, {2, 6}), w.narrow(0, 0, 2)},
                         {"w", {4, 6}, Box({2, 0}, {1, 6}), w.narrow(0, 2, 1)},
                         {"bf", {2, 3}, Box({0, 0}, {2, 3}), bf}});
  auto r1 = write_chunks(dir, "__1_n.safetensors",
                         {{"w", {4, 6}, Box({3, 0}, {1, 6}), w.narrow(0, 3, 1)},
                          {"b", {3}, Box({0}, {3}), b},
                          {"l", {2}, Box({0}, {2}), l}});
  r.insert(r.end(), r1.begin(), r1.end());
  commit_metadata(dir, build_metadata(r, {}));
  const json got = testing::read_with_safetensors({dir + "/__0_n.safetensors", dir + "/__1_n.safetensors"});
  ASSERT_FALSE(got.is_null());
  // Every chunk of the metadata is found under its physical key with its dtype, shape, values.
  const Metadata meta = CheckpointReader(dir).metadata();
  int checked = 0;
  for (const auto& [name, t] : meta.tensors) {
    for (const auto& c : t.chunks) {
      ASSERT_TRUE(got[c.file].contains(c.key)) << c.file << " " << c.key;
      const json& e = got[c.file][c.key];
      EXPECT_EQ(e["dtype"], dtype_name(t.dtype));
      EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), c.box.sizes);
      at::Tensor full = name == "w" ? w : name == "bf" ? bf.to(at::kFloat) : name == "b" ? b : l;
      at::Tensor part = full;
      for (size_t d = 0; d < c.box.sizes.size(); ++d)
        part = part.narrow(static_cast<int64_t>(d), c.box.offsets[d], c.box.sizes[d]);
      part = part.reshape({-1});
      ASSERT_EQ(e["values"].size(), static_cast<size_t>(part.numel()));
      for (int64_t i = 0; i < part.numel(); ++i) {
        if (name == "b")
          EXPECT_EQ(e["values"][static_cast<size_t>(i)].get<bool>(), part[i].item<bool>());
        else
          EXPECT_EQ(e["values"][static_cast<size_t>(i)].get<double>(), part[i].item<double>()) << name;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 6);
  EXPECT_TRUE(got["__0_n.safetensors"].contains("w.__dcp_chunk_0"));
  EXPECT_TRUE(got["__0_n.safetensors"].contains("w.__dcp_chunk_1"));
  EXPECT_TRUE(got["__1_n.safetensors"].contains("w"));
}


// A checkpoint written by save_local with every dtype: the package reads each data file and
// every tensor's values equal the saved ones.
TEST(Checkpoint, SafetensorsPackageReadsEveryDType) {
  const std::string dir = temp_dir() + "/ck";
  std::map<std::string, at::Tensor> saved = one_of_every_dtype();
  save_local(saved, {}, dir);
  std::vector<std::string> files;
  for (const auto& f : data_files(dir)) files.push_back(dir + "/" + f);
  ASSERT_EQ(files.size(), 1u);
  const json got = testing::read_with_safetensors(files);
  ASSERT_FALSE(got.is_null());
  const json& file = got[data_files(dir)[0]];
  EXPECT_EQ(file.size(), saved.size());
  for (const auto& [name, t] : saved) {
    ASSERT_TRUE(file.contains(name)) << name;
    const json& e = file[name];
    EXPECT_EQ(e["dtype"], dtype_name(to_dtype(t.scalar_type()))) << name;
    EXPECT_EQ(e["shape"].get<std::vector<int64_t>>(), t.sizes().vec()) << name;
    const at::Tensor flat = t.reshape({-1});
    ASSERT_EQ(e["values"].size(), static_cast<size_t>(flat.numel())) << name;
    for (int64_t i = 0; i < flat.numel(); ++i) {
      const json& v = e["values"][static_cast<size_t>(i)];
      if (t.scalar_type() == at::kBool)
        EXPECT_EQ(v.get<bool>(), flat[i].item<bool>()) << name;
      else
        EXPECT_EQ(v.get<double>(), flat[i].item<double>()) << name << " [" << i << "]";
    }
  }
}


// ---- Required checksums, verify before touch, verified reads without amplification.

void flip_byte(const std::string& path, int64_t at, char mask = 0x40) {
  std::string bytes = read_small_file(path, 1 << 30);
  ASSERT_LT(at, static_cast<int64_t>(bytes.size()));
  bytes[static_cast<size_t>(at)] ^= mask;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

int64_t data_begin(const std::string& path, const std::string& key) {
  const auto h = read_safetensors_header(path);
  const TensorInfo* t = h.find(key);
  EXPECT_NE(t, nullptr) << key;
  return t ? t->begin : 0;
}

TEST(Checkpoint, StrippedChecksumsAreRefused) {
  // Deleting every checksum field from .metadata must not switch verification off: the
  // load refuses the checkpoint (and a flipped data byte goes unnoticed only with the
  // explicit opt-out).
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(64 * 1024, at::kFloat);  // 256 KiB
  save_local({{"w", w}}, {}, dir);
  json j = read_json(dir + "/.metadata");
  j.erase("metadata_checksum");
  for (auto& c : j["tensors"]["w"]["chunks"])
    for (const char* k : {"checksum", "block_size", "block_checksums", "leaves", "header_checksum"})
      c.erase(k);
  write_file_atomic(dir + "/.metadata", j.dump(1));
  const std::string file = dir + "/" + data_files(dir)[0];
  flip_byte(file, data_begin(file, "w") + 1000);
  at::Tensor out = at::zeros({64 * 1024});
  const std::string err = error_of([&] { load_local({{"w", out}}, dir); });
  EXPECT_THAT(err, HasSubstr("no checksum"));
  EXPECT_THAT(err, HasSubstr(".metadata"));
  EXPECT_TRUE(at::equal(out, at::zeros({64 * 1024})));
  // verify_all refuses it too.
  EXPECT_THAT(error_of([&] { CheckpointReader(dir).verify_all(); }), HasSubstr("no checksum"));
  // The explicit opt-out reads it (the flipped byte goes unnoticed: nothing to check it by).
  ReadOptions opt_out;
  opt_out.allow_unchecksummed = true;
  load_local({{"w", out}}, dir, nullptr, opt_out);
  EXPECT_FALSE(at::equal(out, w));
  EXPECT_TRUE(at::equal(out.narrow(0, 0, 250), w.narrow(0, 0, 250)));
  CheckpointReader(dir, opt_out).verify_all();

  // A sealed .metadata whose chunk lacks its checksum: refused naming tensor, chunk, file.
  json k = read_json(dir + "/.metadata");
  k.erase("metadata_checksum");
  write_file_atomic(dir + "/.metadata", seal_metadata_text(k.dump(1)));
  const std::string e2 = error_of([&] { load_local({{"w", out}}, dir); });
  EXPECT_THAT(e2, HasSubstr("chunk 0 of tensor 'w' (file '" + file + "') carries no checksum"));
  k["tensors"]["w"]["chunks"][0]["checksum"] = "0000000000000000";
  write_file_atomic(dir + "/.metadata", seal_metadata_text(k.dump(1)));
  EXPECT_THAT(error_of([&] { load_local({{"w", out}}, dir); }),
              HasSubstr("carries no header checksum"));
}

TEST(Checkpoint, FlippedMetadataByteIsRefused) {
  const std::string dir = temp_dir();
  save_local({{"w", at::arange(64, at::kFloat)}}, {{"step", int64_t{7}}}, dir);
  std::string text = read_small_file(dir + "/.metadata", 1 << 20);
  const size_t at = text.find("\"int\": 7");
  ASSERT_NE(at, std::string::npos) << text;
  text[at + 7] = '8';
  write_file_atomic(dir + "/.metadata", text);
  std::map<std::string, Value> values;
  const std::string err = error_of([&] { load_local({{"w", at::zeros({64})}}, dir, &values); });
  EXPECT_THAT(err, HasSubstr(dir + "/.metadata"));
  EXPECT_THAT(err, HasSubstr("checksum mismatch"));
  EXPECT_TRUE(values.empty());
  // A flipped byte in a chunk's box is caught the same way (before the tiling check).
  save_local({{"w", at::arange(64, at::kFloat)}}, {{"step", int64_t{7}}}, dir);
  text = read_small_file(dir + "/.metadata", 1 << 20);
  const size_t sizes = text.find("64", text.find("\"sizes\""));
  ASSERT_NE(sizes, std::string::npos);
  text[sizes] = '3';
  write_file_atomic(dir + "/.metadata", text);
  EXPECT_THAT(error_of([&] { CheckpointReader r(dir); }),
              HasSubstr("checksum mismatch in '" + dir + "/.metadata'"));
  // The field must close the file in its canonical form.
  text = read_small_file(dir + "/.metadata", 1 << 20);
  write_file_atomic(dir + "/.metadata", text + " ");
  EXPECT_THAT(error_of([&] { CheckpointReader r(dir); }),
              HasSubstr("\"metadata_checksum\" must be the last field"));
}

TEST(Checkpoint, FlippedHeaderByteIsRefused) {
  // A header edit that keeps valid JSON (the __metadata__ format string) is caught by the
  // header checksum recorded in .metadata.
  const std::string dir = temp_dir();
  const at::Tensor w = at::arange(64, at::kFloat);
  save_local({{"w", w}}, {}, dir);
  const std::string file = dir + "/" + data_files(dir)[0];
  const std::string bytes = read_small_file(file, 1 << 20);
  const size_t at = bytes.find("hyper-dcp");
  ASSERT_NE(at, std::string::npos);
  flip_byte(file, static_cast<int64_t>(at + 8), 0x01);  // "hyper-dcp" -> "hyper-dcq"
  at::Tensor out = at::zeros({64});
  const std::string err = error_of([&] { load_local({{"w", out}}, dir); });
  EXPECT_THAT(err, HasSubstr("header checksum mismatch"));
  EXPECT_THAT(err, HasSubstr(file));
  EXPECT_TRUE(at::equal(out, at::zeros({64})));
}

TEST(Checkpoint, FailedLoadLeavesEveryTargetUnchanged) {
  // Three tensors, the last one (in load order) corrupt at its last byte: the load throws
  // and every target still holds what it held before, contiguous or not.
  const std::string dir = temp_dir();
  std::map<std::string, at::Tensor> saved = {{"a", at::randn({64, 1024})},
                                             {"b", at::randn({64, 1024})},
                                             {"c", at::randn({64, 1024})}};
  save_local(saved, {}, dir);
  const std::string file = dir + "/" + data_files(dir)[0];
  flip_byte(file, data_begin(file, "c") + 64 * 1024 * 4 - 1);
  const at::Tensor before = at::full({64, 1024}, -7.0f);
  at::Tensor a = before.clone();
  at::Tensor bt = before.t().clone().t();  // non-contiguous target
  at::Tensor c = before.clone();
  EXPECT_THAT(error_of([&] { load_local({{"a", a}, {"b", bt}, {"c", c}}, dir); }),
              HasSubstr("checksum mismatch"));
  EXPECT_TRUE(at::equal(a, before));
  EXPECT_TRUE(at::equal(bt, before));
  EXPECT_TRUE(at::equal(c, before));

  // One read() over two chunks, the second corrupt: the destination is untouched.
  const std::string dir2 = temp_dir();
  const at::Tensor w = at::randn({512, 256});
  make_dirs(dir2);
  commit_metadata(dir2, build_metadata(write_chunks(dir2, "__0_r.safetensors",
                                                    {{"w", {512, 256}, Box({0, 0}, {256, 256}),
                                                      w.narrow(0, 0, 256)},
                                                     {"w", {512, 256}, Box({256, 0}, {256, 256}),
                                                      w.narrow(0, 256, 256)}}),
                                       {}));
  const std::string f2 = dir2 + "/__0_r.safetensors";
  flip_byte(f2, data_begin(f2, "w.__dcp_chunk_1") + 256 * 256 * 4 - 5);
  CheckpointReader reader(dir2);
  std::vector<float> dst(512 * 256, -1.0f);
  EXPECT_THAT(error_of([&] {
                reader.read("w", {FlatBox{Box::full({512, 256}), 0}}, DType::F32, dst.data(),
                            512 * 256 * 4);
              }),
              HasSubstr("checksum mismatch"));
  EXPECT_TRUE(std::all_of(dst.begin(), dst.end(), [](float x) { return x == -1.0f; }));
}

TEST(Checkpoint, VerifiedColumnReadsAtDefaultsReadAtMost1_1x) {
  // Rows of 4 KiB saved as 4 row chunks at default settings, read by column quarters and
  // halves (a Shard(1) reshard on 4 or 2 ranks): verified reads stay within 1.1x.
  const std::string dir = temp_dir();
  const at::Tensor w = at::randn({1024, 1024});
  std::vector<ChunkData> chunks;
  for (int64_t i = 0; i < 4; ++i)
    chunks.push_back({"w", {1024, 1024}, Box({i * 256, 0}, {256, 1024}), w.narrow(0, i * 256, 256)});
  make_dirs(dir);
  commit_metadata(dir, build_metadata(write_chunks(dir, "__0_r.safetensors", chunks), {}));
  for (const Box& box : {Box({0, 256}, {1024, 256}), Box({0, 512}, {1024, 512}),
                         Box({0, 0}, {1024, 256})}) {
    CheckpointReader reader(dir);
    at::Tensor out = at::zeros({box.numel()});
    read_into(reader, "w", {FlatBox{box, 0}}, out);
    const at::Tensor expect = w.narrow(1, box.offsets[1], box.sizes[1]);
    EXPECT_TRUE(at::equal(out.view(expect.sizes()), expect)) << box.to_string();
    const double needed = static_cast<double>(box.numel() * 4);
    EXPECT_LE(static_cast<double>(reader.bytes_read()), 1.1 * needed) << box.to_string();
  }
}

}  // namespace
}  // namespace hyper::dcp
