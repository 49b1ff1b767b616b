// .metadata JSON round trip, hostile metadata, physical key allocation (torch-free).
#include "hyper/dcp/metadata.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <malloc.h>

#include <chrono>
#include <cstring>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "hyper/core/errors.h"

namespace hyper::dcp {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

Metadata sample() {
  Metadata m;
  TensorMeta w;
  w.dtype = DType::BF16;
  w.shape = {4, 6};
  ChunkMeta a;
  a.box = Box({0, 0}, {2, 6});
  a.file = "__0_00.safetensors";
  a.key = "w.__dcp_chunk_0";
  a.byte_range = std::make_pair(int64_t{64}, int64_t{64 + 24});
  a.checksum = 0x0123456789abcdefULL;
  a.block_size = 10;
  a.block_checksums = {1, 2, 3};
  a.header_checksum = 0xfeedULL;
  a.leaves = LeafChecksums{"w.__dcp_chunk_0.__dcp_leaves", 8, 2, {4, 5}};
  ChunkMeta b = a;
  b.box = Box({2, 0}, {2, 6});
  b.key = "w.__dcp_chunk_1";
  b.byte_range = std::make_pair(int64_t{88}, int64_t{112});
  b.block_size = 0;
  b.block_checksums.clear();
  b.leaves.reset();
  w.chunks = {a, b};
  m.tensors["w"] = w;
  TensorMeta s;
  s.dtype = DType::I64;
  ChunkMeta sc;
  sc.box = Box({}, {});
  sc.file = "__1_00.safetensors";  // no key, range or checksum: an "older" chunk
  s.chunks = {sc};
  m.tensors["scalar"] = s;
  TensorMeta e;
  e.dtype = DType::F32;
  e.shape = {0, 3};
  m.tensors["empty"] = e;
  m.values["step"] = int64_t{7};
  m.values["lr"] = 0.25;
  m.values["flag"] = true;
  m.values["name"] = std::string("run \"1\"");
  m.values["big"] = std::numeric_limits<int64_t>::min();
  m.values["inf"] = std::numeric_limits<double>::infinity();
  return m;
}

TEST(Metadata, JsonRoundTrip) {
  const Metadata m = sample();
  const std::string text = m.to_json();
  const Metadata back = Metadata::from_json(text);
  EXPECT_EQ(back, m) << text;
  EXPECT_THAT(text, HasSubstr("\"checksum\": \"0123456789abcdef\""));
  EXPECT_TRUE(back.checksummed);
  EXPECT_FALSE(Metadata::from_json(text.substr(0, text.rfind(",\n \"metadata_checksum\"")) + "}")
                   .checksummed);
  // NaN survives as a string.
  Metadata n;
  n.values["nan"] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(std::isnan(std::get<double>(Metadata::from_json(n.to_json()).values.at("nan"))));
}

struct Bad {
  const char* name;
  std::function<void(json&)> edit;
  const char* error;
};

// `j` dumped in the order hyper writes (format, version, ..., and per tensor dtype, shape,
// chunks): the streaming reader converts each chunk as it closes. (json.dump() sorts keys, so
// "chunks" comes before "dtype" and the chunks are held until the tensor closes.)
std::string canonical_dump(const json& j) {
  nlohmann::ordered_json root = nlohmann::ordered_json::object();
  for (const char* k : {"format", "version", "checksum_algorithm"})
    if (j.contains(k)) root[k] = j[k];
  if (j.contains("tensors") && j["tensors"].is_object()) {
    nlohmann::ordered_json tensors = nlohmann::ordered_json::object();
    for (auto it = j["tensors"].begin(); it != j["tensors"].end(); ++it) {
      nlohmann::ordered_json t = nlohmann::ordered_json::object();
      for (const char* k : {"dtype", "shape", "chunks"})
        if (it.value().contains(k)) t[k] = it.value()[k];
      for (auto f = it.value().begin(); f != it.value().end(); ++f)
        if (!t.contains(f.key())) t[f.key()] = f.value();
      tensors[it.key()] = std::move(t);
    }
    root["tensors"] = std::move(tensors);
  }
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!root.contains(it.key())) root[it.key()] = it.value();
  return root.dump(1);
}

TEST(Metadata, HostileMetadataIsRefused) {
  json good = json::parse(sample().to_json());
  good.erase("metadata_checksum");  // the edits below are parsed unsealed
  const std::vector<Bad> cases = {
      {"format", [](json& j) { j["format"] = "torch"; }, "format is \"torch\""},
      {"version", [](json& j) { j["version"] = 3; }, "format version 3 is not supported"},
      {"version_float", [](json& j) { j["version"] = 1.5; }, "must be a non-negative integer"},
      {"no_tensors", [](json& j) { j.erase("tensors"); }, "lacks \"tensors\""},
      {"checksum_algo", [](json& j) { j["checksum_algorithm"] = "md5"; }, "unknown checksum_algorithm"},
      {"dtype", [](json& j) { j["tensors"]["w"]["dtype"] = "C64"; }, "tensor 'w': unknown dtype 'C64'"},
      {"neg_shape", [](json& j) { j["tensors"]["w"]["shape"][0] = -4; }, "is negative (-4)"},
      {"absurd_shape",
       [](json& j) { j["tensors"]["w"]["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; },
       "tensor 'w': "},
      {"float_size", [](json& j) { j["tensors"]["w"]["chunks"][0]["sizes"][0] = 1e30; },
       "must be a non-negative integer"},
      {"rank", [](json& j) { j["tensors"]["w"]["chunks"][0]["sizes"] = {2}; },
       "chunk 0: offsets/sizes do not have the rank"},
      {"outside", [](json& j) { j["tensors"]["w"]["chunks"][1]["offsets"] = {3, 0}; },
       "chunk 1 ((3, 0), (2, 6)) lies outside the shape"},
      {"overlap", [](json& j) { j["tensors"]["w"]["chunks"][1]["offsets"] = {1, 0};
                                j["tensors"]["w"]["chunks"][1]["sizes"] = {2, 6}; },
       "overlap"},
      {"uncovered", [](json& j) { j["tensors"]["w"]["chunks"].erase(1); }, "12 missing"},
      {"no_file", [](json& j) { j["tensors"]["w"]["chunks"][0].erase("file"); }, "lacks \"file\""},
      {"empty_file", [](json& j) { j["tensors"]["w"]["chunks"][0]["file"] = ""; },
       "file is not a non-empty string"},
      {"range_size", [](json& j) { j["tensors"]["w"]["chunks"][0]["byte_range"] = {64, 80}; },
       "holds 16 bytes, the chunk needs 24"},
      {"range_reversed", [](json& j) { j["tensors"]["w"]["chunks"][0]["byte_range"] = {88, 64}; },
       "is reversed"},
      {"range_neg", [](json& j) { j["tensors"]["w"]["chunks"][0]["byte_range"] = {-24, 0}; },
       "is negative"},
      {"checksum", [](json& j) { j["tensors"]["w"]["chunks"][0]["checksum"] = "xyz"; },
       "checksum must be 16 hex digits"},
      {"blocks", [](json& j) { j["tensors"]["w"]["chunks"][0]["block_checksums"].erase(0); },
       "2 block checksums, expected 3"},
      {"blocks_no_size", [](json& j) { j["tensors"]["w"]["chunks"][0].erase("block_size"); },
       "block_checksums without block_size"},
      {"leaves_count",
       [](json& j) {
         j["tensors"]["w"]["chunks"][0]["leaves"] = {
             {"key", "k"}, {"leaf_size", 8}, {"group_leaves", 2}, {"group_checksums", json::array()}};
       },
       "leaves: 0 group checksums, expected 2 for 3 leaves of 8 bytes in groups of 2"},
      {"leaves_zero",
       [](json& j) {
         j["tensors"]["w"]["chunks"][0]["leaves"] = {
             {"key", "k"}, {"leaf_size", 0}, {"group_leaves", 2}, {"group_checksums", json::array()}};
       },
       "leaf_size and group_leaves must be positive"},
      {"leaves_huge_leaf",  // verify's piece arithmetic divided by leaf_size * group_leaves = 0
       [](json& j) {
         j["tensors"]["w"]["chunks"][0]["leaves"] = {{"key", "k"},
                                                     {"leaf_size", int64_t{1} << 62},
                                                     {"group_leaves", 4},
                                                     {"group_checksums", {"0000000000000000"}}};
       },
       "leaves: leaf_size 4611686018427387904 is larger than the chunk's 24 bytes"},
      {"leaves_group_overflow",  // a 24 MiB chunk: 8 MiB leaves x 2^40 overflows 2^62
       [](json& j) {
         auto& w = j["tensors"]["w"];
         w["shape"] = {(int64_t{1} << 21) + 2, 6};
         w["chunks"][0]["sizes"] = {int64_t{1} << 21, 6};
         w["chunks"][0]["byte_range"] = {64, 64 + (int64_t{1} << 21) * 12};  // F16
         w["chunks"][1]["offsets"] = {int64_t{1} << 21, 0};
         w["chunks"][0].erase("block_size");
         w["chunks"][0].erase("block_checksums");
         w["chunks"][0]["leaves"] = {{"key", "k"},
                                     {"leaf_size", int64_t{1} << 23},
                                     {"group_leaves", int64_t{1} << 40},
                                     {"group_checksums", {"0000000000000000"}}};
       },
       "leaves: groups of 1099511627776 leaves of 8388608 bytes overflow"},
      {"leaves_key",
       [](json& j) { j["tensors"]["w"]["chunks"][0]["leaves"] = {{"key", ""}}; },
       "leaves: key is not a non-empty string"},
      {"header_checksum",
       [](json& j) { j["tensors"]["w"]["chunks"][0]["header_checksum"] = 5; },
       "header_checksum must be a string"},
      {"value_type", [](json& j) { j["values"]["step"] = {{"complex", 1}}; }, "unknown type \"complex\""},
      {"value_bare", [](json& j) { j["values"]["step"] = 7; }, "value 'step' must be an object"},
      {"value_int", [](json& j) { j["values"]["step"] = {{"int", 1.5}}; }, "not a 64-bit integer"},
      {"value_is_tensor", [](json& j) { j["values"]["w"] = {{"int", 1}}; }, "is also a tensor"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    json j = good;
    c.edit(j);
    // Both key orders: sorted (chunks held until the tensor closes) and hyper's own
    // (each chunk converted as it closes); the same error either way.
    for (const std::string& text : {j.dump(), canonical_dump(j)}) {
      try {
        Metadata::from_json(text, "ckpt/.metadata");
        ADD_FAILURE() << c.name << ": no error";
      } catch (const ValueError& e) {
        EXPECT_THAT(e.what(), HasSubstr(c.error));
        EXPECT_THAT(e.what(), HasSubstr("ckpt/.metadata"));
      }
    }
  }
  {
    json j = good;
    EXPECT_EQ(Metadata::from_json(canonical_dump(j)), Metadata::from_json(j.dump()));
    EXPECT_EQ(Metadata::from_json(canonical_dump(j)), sample());
  }
  EXPECT_THROW(Metadata::from_json("{\"format\":", "m"), ValueError);
  EXPECT_THROW(Metadata::from_json("[]", "m"), ValueError);
  EXPECT_THROW(Metadata::from_json(R"({"format":"hyper-dcp","format":"hyper-dcp"})", "m"), ValueError);
}

// Limits the streaming parser enforces while it reads (docs/checkpoint_format.md, "Limits").
TEST(Metadata, StreamingLimitsAreRefused) {
  json good = json::parse(sample().to_json());
  good.erase("metadata_checksum");
  auto error_of = [](const std::string& text) -> std::string {
    try {
      Metadata::from_json(text, "ckpt/.metadata");
    } catch (const ValueError& e) {
      return e.what();
    }
    return "no error";
  };
  // Nesting: 16 levels are fine (in an unknown field, skipped), 17 are refused.
  auto nested = [&](int levels) {
    json j = good;
    json deep = json::array();
    for (int i = 1; i < levels - 1; ++i) deep = json::array({deep});  // root + levels-1 arrays
    j["extra"] = deep;
    return j.dump();
  };
  EXPECT_EQ(error_of(nested(16)), "no error");
  EXPECT_THAT(error_of(nested(17)),
              HasSubstr("invalid JSON in ckpt/.metadata: nested deeper than 16 levels"));
  // A string (a name, a key, a file) longer than 64 KiB.
  {
    json j = good;
    j["tensors"]["w"]["chunks"][0]["file"] = std::string(65537, 'f');
    EXPECT_THAT(error_of(j.dump()),
                HasSubstr("ckpt/.metadata: a string of 65537 bytes, more than the limit of 65536"));
  }
  {
    json j = good;
    j["tensors"][std::string(70000, 'n')] = j["tensors"]["scalar"];
    EXPECT_THAT(error_of(j.dump()),
                HasSubstr("ckpt/.metadata: a key of 70000 bytes, more than the limit of 65536"));
  }
  {
    json j = good;
    j["tensors"]["w"]["chunks"][0]["file"] = std::string(65536, 'f');  // at the limit: parsed
    EXPECT_THAT(error_of(j.dump()), HasSubstr("no error"));
  }
  // More than 64 dims in a shape or a box, refused while the list is read.
  {
    json j = good;
    j["tensors"]["w"]["shape"] = std::vector<int64_t>(65, 1);
    EXPECT_THAT(error_of(j.dump()), HasSubstr("tensor 'w' shape has more than 64 entries"));
    j = good;
    j["tensors"]["w"]["chunks"][1]["offsets"] = std::vector<int64_t>(1000, 0);
    EXPECT_THAT(error_of(j.dump()), HasSubstr("tensor 'w' chunk 1 offsets has more than 64 entries"));
  }
  // A container where a scalar (or a list of scalars) belongs is refused as it opens; an
  // unknown field of a chunk is skipped without being built.
  {
    json j = good;
    j["version"] = json::array({2});
    EXPECT_THAT(error_of(j.dump()), HasSubstr("ckpt/.metadata: \"version\" is a list, expected a number"));
    j = good;
    j["tensors"]["w"]["shape"] = {{{"a", 1}}, 6};
    EXPECT_THAT(error_of(j.dump()), HasSubstr("tensor 'w' shape[0] is an object"));
    j = good;
    j["tensors"]["w"]["chunks"][0]["block_checksums"][1] = json::array();
    EXPECT_THAT(error_of(j.dump()), HasSubstr("tensor 'w' chunk 0 block_checksums[1] is a list"));
    j = good;
    j["values"]["step"] = {{"int", 1}, {"str", "x"}};
    EXPECT_THAT(error_of(j.dump()), HasSubstr("value 'step' must be an object with one of"));
    j = good;
    j["tensors"]["w"]["chunks"][0]["future_field"] = {{"x", json::array({1, 2, 3})}};
    j["tensors"]["w"]["chunks"][0]["leaves"]["future_field"] = "y";
    EXPECT_EQ(error_of(j.dump()), "no error");
  }
  // A "metadata_checksum" that is not the sealed last field is refused before the content
  // is checked (a broken chunk here).
  {
    json j = good;
    j["metadata_checksum"] = "0123456789abcdef";
    j["tensors"]["w"]["chunks"][0]["sizes"] = {2};
    EXPECT_THAT(error_of(j.dump()), HasSubstr("\"metadata_checksum\" must be the last field"));
  }
  // Duplicates: a tensor name, a value name, a chunk field, a root field are refused by name
  // (JSON objects cannot be built with duplicates, so the text is edited).
  const std::string text = good.dump();
  auto dup = [&](const std::string& find, const std::string& insert) {
    std::string t = text;
    const size_t at = t.find(find);
    EXPECT_NE(at, std::string::npos) << find;
    return t.insert(at, insert);
  };
  const std::string scalar = good["tensors"]["scalar"].dump();
  EXPECT_THAT(error_of(dup("\"scalar\":", "\"scalar\":" + scalar + ",")),
              HasSubstr("duplicate key 'scalar' (tensor 'scalar' twice in \"tensors\")"));
  EXPECT_THAT(error_of(dup("\"step\":", "\"step\":{\"int\":8},")),
              HasSubstr("duplicate key 'step' (value 'step' twice in \"values\")"));
  EXPECT_THAT(error_of(dup("\"file\":", "\"file\":\"other.safetensors\",")),
              HasSubstr("duplicate key 'file' (in tensor 'scalar' chunk 0)"));
  EXPECT_THAT(error_of(dup("\"format\":", "\"format\":\"hyper-dcp\",")),
              HasSubstr("duplicate key 'format'"));
  EXPECT_THAT(error_of(dup("\"dtype\":", "\"dtype\":\"F32\",")),
              HasSubstr("duplicate key 'dtype' (in tensor '"));
}

// Large .metadata: peak memory and time of from_json (printed; see the Limits paragraph of
// docs/checkpoint_format.md for the numbers). Peak RSS growth is read from VmHWM after
// resetting it through /proc/self/clear_refs.
int64_t vm_kib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::strlen(field)));
  return -1;
}

bool reset_peak() {
  malloc_trim(0);
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.close();
  return static_cast<bool>(f);
}

TEST(Metadata, LargeMetadataPeakMemory) {
  // One BF16 tensor tiled by a 400 x 330 grid of 132k chunks (a 63 MiB text), v2 fields on every chunk.
  constexpr int64_t kRows = 400, kCols = 330, kR = 4, kC = 8;
  Metadata m;
  TensorMeta& t = m.tensors["w"];
  t.dtype = DType::BF16;
  t.shape = {kRows * kR, kCols * kC};
  t.chunks.reserve(kRows * kCols);
  for (int64_t r = 0; r < kRows; ++r)
    for (int64_t c = 0; c < kCols; ++c) {
      ChunkMeta ch;
      ch.box = Box({r * kR, c * kC}, {kR, kC});
      ch.file = "__" + std::to_string(r % 64) + "_00.safetensors";
      ch.key = "w.__dcp_chunk_" + std::to_string(r * kCols + c);
      const int64_t at = 1024 + (r * kCols + c) * 64;
      ch.byte_range = std::make_pair(at, at + 64);
      ch.checksum = 0x0123456789abcdefULL + static_cast<uint64_t>(r * kCols + c);
      ch.header_checksum = 0xfeedULL;
      ch.leaves = LeafChecksums{ch.key + ".__dcp_leaves", 64, 1024, {0x42}};  // one 64-byte leaf
      t.chunks.push_back(std::move(ch));
    }
  m.values["step"] = int64_t{7};
  const std::string text = m.to_json();
  const double mib = static_cast<double>(text.size()) / (1 << 20);
  ASSERT_TRUE(reset_peak()) << "cannot reset VmHWM";
  const int64_t base = vm_kib("VmRSS:");
  auto t0 = std::chrono::steady_clock::now();
  Metadata back = Metadata::from_json(text);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t peak = vm_kib("VmHWM:") - base;
  const int64_t held = vm_kib("VmRSS:") - base;
  EXPECT_TRUE(back == m);
  EXPECT_TRUE(back.checksummed);
  back = Metadata();
  // Reference: a whole-text DOM of the same text (nlohmann::json::parse).
  ASSERT_TRUE(reset_peak());
  const int64_t base2 = vm_kib("VmRSS:");
  t0 = std::chrono::steady_clock::now();
  {
    json dom = json::parse(text);
    EXPECT_TRUE(dom.is_object());
  }
  const double dom_secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t dom_peak = vm_kib("VmHWM:") - base2;
  std::printf("[ large .metadata ] %.1f MiB text, %zu chunks: from_json %.2f s, peak RSS growth "
              "%.1f MiB (%.2fx the text), result holds %.1f MiB; a whole-text DOM alone: %.2f s, "
              "%.1f MiB (%.2fx)\n",
              mib, t.chunks.size(), secs, peak / 1024.0, peak / 1024.0 / mib, held / 1024.0,
              dom_secs, dom_peak / 1024.0, dom_peak / 1024.0 / mib);
  // Measured: the streaming parse peaks at the result (1.7x the text here); a whole-text DOM
  // parse peaks at 5.9x (the DOM, then the result next to it). A generous bound:
  EXPECT_LT(static_cast<double>(peak) / 1024.0, 3.0 * mib) << "peak RSS growth of from_json";
}

TEST(PhysicalKeys, RaggedCasesExample) {
  // /work/shared/cases/ragged_cases.json "physical_keys": three chunks in one file get
  // three distinct keys, and the third keeps its literal name.
  const auto keys = allocate_physical_keys({"weight", "weight", "weight.__dcp_chunk_0"});
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[2], "weight.__dcp_chunk_0");
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), 3u);
  EXPECT_EQ(keys[0], "weight.__dcp_chunk_1");
  EXPECT_EQ(keys[1], "weight.__dcp_chunk_2");
}

TEST(PhysicalKeys, SingleChunksKeepNamesAndReservedIsRenamed) {
  EXPECT_EQ(allocate_physical_keys({"a", "b"}), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(allocate_physical_keys({"__metadata__"}),
            (std::vector<std::string>{"__metadata__.__dcp_chunk_0"}));
  const auto k = allocate_physical_keys(
      {"x", "x.__dcp_chunk_1", "x", "x", "x.__dcp_chunk_0.__dcp_chunk_0", "x.__dcp_chunk_0"});
  EXPECT_EQ(k[1], "x.__dcp_chunk_1");
  EXPECT_EQ(k[4], "x.__dcp_chunk_0.__dcp_chunk_0");
  EXPECT_EQ(k[5], "x.__dcp_chunk_0");
  EXPECT_EQ(std::set<std::string>(k.begin(), k.end()).size(), k.size());
  // Exhaustive-ish: every multiset of names from a small alphabet gets unique keys.
  const std::vector<std::string> alphabet = {"w", "w.__dcp_chunk_0", "w.__dcp_chunk_1",
                                             "w.__dcp_chunk_0.__dcp_chunk_0"};
  for (int mask = 0; mask < 4 * 4 * 4 * 4 * 4; ++mask) {
    std::vector<std::string> names;
    for (int m = mask, i = 0; i < 5; ++i, m /= 4) names.push_back(alphabet[static_cast<size_t>(m % 4)]);
    const auto keys = allocate_physical_keys(names);
    EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()).size(), keys.size());
  }
}

}  // namespace
}  // namespace hyper::dcp
