// Tests of the hyper-dcp tool: it runs as a subprocess (fork + exec) on checkpoints written
// in a temporary directory with the storage layer (write_chunks + build_metadata +
// commit_metadata: sharded layouts, several chunks per tensor and per file).

#include <ATen/ATen.h>
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdlib>
#include <thread>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hyper/dcp/checkpoint.h"
#include "hyper/dcp/fs.h"
#include "hyper/dcp/metadata.h"
#include "hyper/dcp/safetensors.h"
#include "hyper/dcp/testing_safetensors_reader.h"

#ifndef HYPER_DCP_PATH
#error "HYPER_DCP_PATH must name the hyper-dcp binary"
#endif

namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using hyper::Box;
namespace dcp = hyper::dcp;

/// Temporary directories, removed when the test program ends.
std::vector<std::string>& temp_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

class RemoveTempDirs : public ::testing::Environment {
 public:
  void TearDown() override {
    if (std::getenv("HYPER_DCP_TEST_KEEP") != nullptr) return;  // for debugging
    for (const std::string& d : temp_dirs()) {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  }
};
const auto* const kRemoveTempDirs = ::testing::AddGlobalTestEnvironment(new RemoveTempDirs);

std::string temp_dir() {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_tool_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  temp_dirs().push_back(tmpl);
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Result {
  int code = -1;
  std::string out, err;
};

/// Runs hyper-dcp with `args`, stdout and stderr captured through files. A run that has not
/// ended after `deadline_s` seconds is killed (SIGKILL) and reported as code -2 with
/// err "HANG": a hang fails the test instead of hanging it.
Result run_tool(const std::vector<std::string>& args, int deadline_s = 120) {
  const std::string d = temp_dir();
  const std::string out_path = d + "/out", err_path = d + "/err";
  pid_t pid = ::fork();
  if (pid < 0) std::abort();
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (o < 0 || e < 0) ::_exit(98);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    std::vector<std::string> argv = {HYPER_DCP_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargs;
    for (auto& a : argv) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    ::execv(cargs[0], cargs.data());
    std::perror("execv");
    ::_exit(99);
  }
  int status = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(deadline_s);
  while (true) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) std::abort();
    if (std::chrono::steady_clock::now() > until) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0) {
      }
      Result hung;
      hung.code = -2;
      hung.err = "HANG: hyper-dcp did not end within " + std::to_string(deadline_s) + " s";
      return hung;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  Result r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out_path);
  r.err = slurp(err_path);
  return r;
}

at::Tensor narrow_box(const at::Tensor& g, const Box& b) {
  at::Tensor t = g;
  for (int64_t d = 0; d < b.rank(); ++d) t = t.narrow(d, b.offsets[d], b.sizes[d]);
  return t.contiguous();
}

/// A checkpoint of several tensors saved as two "ranks'" files with ragged chunks.
struct Fixture {
  std::string dir;
  std::map<std::string, at::Tensor> globals;
  dcp::Metadata meta;
};

Fixture make_checkpoint() {
  Fixture f;
  f.dir = temp_dir();
  at::manual_seed(3);
  f.globals["model.w"] = at::randn({6, 4, 8});
  f.globals["b"] = at::randint(-100, 100, {5}, at::kLong);
  f.globals["h"] = at::randn({3, 7}).to(at::kBFloat16);
  f.globals["s"] = at::randn({}, at::kDouble);
  f.globals["e"] = at::zeros({0, 3});
  f.globals["big"] = at::randn({300, 100});
  auto chunk = [&](const std::string& n, Box b) {
    const at::Tensor& g = f.globals[n];
    return dcp::ChunkData{n, g.sizes().vec(), b, narrow_box(g, b)};
  };
  // rank 0: a ragged shard of model.w (row 0, half of row 1), b, half of h, s, e, big[0:150)
  std::vector<dcp::ChunkData> r0 = {
      chunk("model.w", Box({0, 0, 0}, {1, 4, 8})), chunk("model.w", Box({1, 0, 0}, {1, 2, 8})),
      chunk("b", Box({0}, {5})),                   chunk("h", Box({0, 0}, {3, 3})),
      chunk("s", Box({}, {})),                     chunk("e", Box({0, 0}, {0, 3})),
      chunk("big", Box({0, 0}, {150, 100}))};
  std::vector<dcp::ChunkData> r1 = {
      chunk("model.w", Box({1, 2, 0}, {1, 2, 8})), chunk("model.w", Box({2, 0, 0}, {4, 4, 8})),
      chunk("h", Box({0, 3}, {3, 4})), chunk("big", Box({150, 0}, {150, 100}))};
  dcp::WriteOptions o0, o1;
  o0.checksum_block_size = o1.checksum_block_size = 4096;  // block checksums on big chunks
  o1.rank = 1;
  auto recs = dcp::write_chunks(f.dir, "__0_00000000000000aa.safetensors", r0, o0);
  auto recs1 = dcp::write_chunks(f.dir, "__1_00000000000000bb.safetensors", r1, o1);
  recs.insert(recs.end(), recs1.begin(), recs1.end());
  f.meta = dcp::build_metadata(recs, {{"step", int64_t{7}}, {"tag", std::string("run-3")}});
  dcp::commit_metadata(f.dir, f.meta);
  return f;
}

TEST(HyperDcp, ListShowsTensorsValuesAndFiles) {
  Fixture f = make_checkpoint();
  Result r = run_tool({"list", f.dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("model.w  F32  [6, 4, 8]  chunks=4  bytes=768"));
  EXPECT_THAT(r.out, HasSubstr("b  I64  [5]  chunks=1  bytes=40"));
  EXPECT_THAT(r.out, HasSubstr("h  BF16  [3, 7]  chunks=2  bytes=42"));
  EXPECT_THAT(r.out, HasSubstr("s  F64  []  chunks=1  bytes=8"));
  EXPECT_THAT(r.out, HasSubstr("e  F32  [0, 3]"));
  EXPECT_THAT(r.out, HasSubstr("step = int 7"));
  EXPECT_THAT(r.out, HasSubstr("tag = str \"run-3\""));
  EXPECT_THAT(r.out, HasSubstr("__0_00000000000000aa.safetensors"));
  EXPECT_THAT(r.out, HasSubstr("__1_00000000000000bb.safetensors"));
  EXPECT_THAT(r.out, Not(HasSubstr("chunk 0:")));

  Result c = run_tool({"list", "--chunks", f.dir});
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_THAT(c.out, HasSubstr("offsets=[1, 2, 0] sizes=[1, 2, 8]"));
  EXPECT_THAT(c.out, HasSubstr("key=model.w.__dcp_chunk_"));
  EXPECT_THAT(c.out, HasSubstr("byte_range=["));
}

TEST(HyperDcp, VerifyOk) {
  Fixture f = make_checkpoint();
  int64_t chunks = 0, bytes = 0;
  for (const auto& [n, t] : f.meta.tensors) {
    chunks += static_cast<int64_t>(t.chunks.size());
    bytes += hyper::numel(t.shape) * dcp::dtype_size(t.dtype);
  }
  Result r = run_tool({"verify", f.dir});
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("ok: " + std::to_string(chunks) + " chunks, " +
                               std::to_string(bytes) + " bytes verified"));
}

/// Flips a byte 5000 bytes into the last chunk of "big" (in rank 1's file).
void flip_byte_of_big(const Fixture& f) {
  const dcp::ChunkMeta& big = f.meta.tensors.at("big").chunks.back();
  ASSERT_EQ(big.file, "__1_00000000000000bb.safetensors");
  ASSERT_TRUE(big.byte_range.has_value());
  const std::string path = f.dir + "/" + big.file;
  std::string bytes = slurp(path);
  bytes[static_cast<size_t>(big.byte_range->first + 5000)] ^= 0x40;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

TEST(HyperDcp, VerifyNamesCorruptedFileAndTensor) {
  Fixture f = make_checkpoint();
  // Flip a byte inside the last chunk of big (file of rank 1, with block checksums) and
  // one inside model.w's chunk in the same file.
  flip_byte_of_big(f);

  Result r = run_tool({"verify", f.dir});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("checksum mismatch"));
  EXPECT_THAT(r.out, HasSubstr("__1_00000000000000bb.safetensors"));
  EXPECT_THAT(r.out, HasSubstr("'big'"));
  EXPECT_THAT(r.out, Not(HasSubstr("'model.w'")));
  EXPECT_THAT(r.out, Not(HasSubstr("ok:")));
  EXPECT_THAT(r.out, HasSubstr("FAILED: 1 bad chunk(s) in 1 file(s)"));
}

TEST(HyperDcp, VerifyRefusesStrippedChecksums) {
  // Deleting the checksum fields must not make verify pass a corrupted file: exit 1 unless
  // --allow-unchecksummed (which then reads the chunks and says they carry no checksum).
  Fixture f = make_checkpoint();
  nlohmann::json j = nlohmann::json::parse(slurp(f.dir + "/.metadata"));
  j.erase("metadata_checksum");
  for (auto& [n, t] : j["tensors"].items())
    for (auto& c : t["chunks"])
      for (const char* k : {"checksum", "block_size", "block_checksums", "leaves", "header_checksum"})
        c.erase(k);
  std::ofstream(f.dir + "/.metadata", std::ios::binary | std::ios::trunc) << j.dump(1);
  flip_byte_of_big(f);

  Result r = run_tool({"verify", f.dir});
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_THAT(r.err, HasSubstr("carries no checksum"));
  EXPECT_THAT(r.err, HasSubstr("--allow-unchecksummed"));
  Result ok = run_tool({"verify", "--allow-unchecksummed", f.dir});
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  EXPECT_THAT(ok.out, HasSubstr("chunks carry no checksum: read only"));
  // list only shows the metadata: it still works.
  EXPECT_EQ(run_tool({"list", f.dir}).code, 0);
}

TEST(HyperDcp, MaxMetadataBytesRefusesALargerMetadataBeforeReadingIt) {
  // --max-metadata-bytes: every subcommand refuses a larger .metadata (exit 1, its size and
  // the limit named); at or above its size they work.
  Fixture f = make_checkpoint();
  const int64_t size = static_cast<int64_t>(slurp(f.dir + "/.metadata").size());
  const std::string out = f.dir + "/../consolidated.safetensors";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list", "--max-metadata-bytes", std::to_string(size - 1), f.dir},
        {"verify", "--max-metadata-bytes", std::to_string(size - 1), f.dir},
        {"consolidate", "--max-metadata-bytes", std::to_string(size - 1), f.dir, out}}) {
    Result r = run_tool(args);
    EXPECT_EQ(r.code, 1) << args[0] << r.out << r.err;
    EXPECT_THAT(r.err, HasSubstr("has " + std::to_string(size) + " bytes, more than the limit of " +
                                 std::to_string(size - 1)))
        << args[0];
  }
  EXPECT_EQ(run_tool({"list", "--max-metadata-bytes", std::to_string(size), f.dir}).code, 0);
  EXPECT_EQ(run_tool({"verify", "--max-metadata-bytes", std::to_string(size), f.dir}).code, 0);
}

TEST(HyperDcp, VerifyCatchesMetadataAndHeaderEdits) {
  {
    Fixture f = make_checkpoint();
    std::string text = slurp(f.dir + "/.metadata");
    const size_t at = text.find("\"sizes\"");
    ASSERT_NE(at, std::string::npos);
    const size_t digit = text.find_first_of("123456789", at);
    text[digit] = text[digit] == '1' ? '2' : '1';
    std::ofstream(f.dir + "/.metadata", std::ios::binary | std::ios::trunc) << text;
    Result r = run_tool({"verify", f.dir});
    EXPECT_EQ(r.code, 1);
    EXPECT_THAT(r.err, HasSubstr("checksum mismatch in '" + f.dir + "/.metadata'"));
  }
  {
    Fixture f = make_checkpoint();
    const std::string path = f.dir + "/__1_00000000000000bb.safetensors";
    std::string bytes = slurp(path);
    const size_t at = bytes.find("hyper-dcp");
    ASSERT_NE(at, std::string::npos);
    bytes[at + 8] = 'q';
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    Result r = run_tool({"verify", f.dir});
    EXPECT_EQ(r.code, 1);
    EXPECT_THAT(r.out, HasSubstr("header checksum mismatch in '" + path + "'"));
    EXPECT_THAT(r.out, HasSubstr("FAILED"));
  }
}

TEST(HyperDcp, IncompleteCheckpointExits1) {
  Fixture f = make_checkpoint();
  dcp::remove_file(f.dir + "/.metadata");
  for (const char* cmd : {"verify", "list"}) {
    Result r = run_tool({cmd, f.dir});
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_THAT(r.err, HasSubstr("incomplete checkpoint")) << cmd;
  }
  Result c = run_tool({"consolidate", f.dir, f.dir + "/out.safetensors"});
  EXPECT_EQ(c.code, 1);
  EXPECT_THAT(c.err, HasSubstr("incomplete checkpoint"));
  EXPECT_FALSE(dcp::path_exists(f.dir + "/out.safetensors"));
}

void check_consolidated(const Fixture& f, const std::string& out) {
  // The safetensors package (independent of our header reader) opens the output: every
  // global tensor under its name with its dtype, shape and values.
  const nlohmann::json got = dcp::testing::read_with_safetensors({out});
  ASSERT_FALSE(got.is_null());
  const nlohmann::json& file = got[std::filesystem::path(out).filename().string()];
  EXPECT_EQ(file.size(), f.globals.size());
  for (const auto& [name, g] : f.globals) {
    ASSERT_TRUE(file.contains(name)) << name;
    EXPECT_EQ(file[name]["dtype"], dcp::dtype_name(dcp::to_dtype(g.scalar_type()))) << name;
    EXPECT_EQ(file[name]["shape"].get<std::vector<int64_t>>(), g.sizes().vec()) << name;
    const at::Tensor flat = g.reshape({-1}).to(at::kDouble);
    ASSERT_EQ(file[name]["values"].size(), static_cast<size_t>(flat.numel())) << name;
    for (int64_t i = 0; i < flat.numel(); ++i)
      EXPECT_EQ(file[name]["values"][static_cast<size_t>(i)].get<double>(), flat[i].item<double>())
          << name << " [" << i << "]";
  }
  dcp::SafetensorsHeader h = dcp::read_safetensors_header(out);
  EXPECT_EQ(h.tensors.size(), f.globals.size());
  const std::string bytes = slurp(out);
  for (const auto& [name, g] : f.globals) {
    const dcp::TensorInfo* ti = h.find(name);
    ASSERT_NE(ti, nullptr) << name;
    EXPECT_EQ(ti->dtype, dcp::to_dtype(g.scalar_type())) << name;
    EXPECT_EQ(ti->shape, g.sizes().vec()) << name;
    at::Tensor c = g.contiguous();
    ASSERT_EQ(ti->nbytes(), static_cast<int64_t>(c.nbytes())) << name;
    if (ti->nbytes() > 0) {
      EXPECT_EQ(std::memcmp(bytes.data() + ti->begin, c.data_ptr(), c.nbytes()), 0) << name;
    }
  }
}

// A FIFO as .metadata blocked list, verify and consolidate forever in open(); a FIFO as a
// data file blocked verify. Now refused at once (run_tool reports a hang instead of hanging).
TEST(HyperDcp, FifoInsteadOfAFileFailsFast) {
  {
    Fixture f = make_checkpoint();
    const std::string meta = f.dir + "/.metadata";
    ASSERT_EQ(::unlink(meta.c_str()), 0);
    ASSERT_EQ(::mkfifo(meta.c_str(), 0600), 0);
    const std::string out = temp_dir() + "/out.safetensors";
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"list", f.dir}, {"verify", f.dir}, {"consolidate", f.dir, out}}) {
      SCOPED_TRACE(args[0]);
      const Result r = run_tool(args, 20);
      EXPECT_NE(r.code, -2) << r.err;
      EXPECT_NE(r.code, 0);
      EXPECT_THAT(r.err, HasSubstr("file '.metadata' of the checkpoint metadata in checkpoint " +
                                   f.dir + " is not a regular file (a FIFO)"));
    }
  }
  {
    Fixture f = make_checkpoint();
    const std::string data = f.dir + "/__1_00000000000000bb.safetensors";
    ASSERT_EQ(::unlink(data.c_str()), 0);
    ASSERT_EQ(::mkfifo(data.c_str(), 0600), 0);
    const Result r = run_tool({"verify", f.dir}, 20);
    EXPECT_NE(r.code, -2) << r.err;
    EXPECT_NE(r.code, 0);
    EXPECT_THAT(r.out + r.err, HasSubstr("file '__1_00000000000000bb.safetensors' of chunk"));
    EXPECT_THAT(r.out + r.err, HasSubstr("is not a regular file (a FIFO)"));
  }
}

TEST(HyperDcp, ConsolidateWritesGlobalTensors) {
  Fixture f = make_checkpoint();
  const std::string out = temp_dir() + "/model.safetensors";
  Result r = run_tool({"consolidate", f.dir, out});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // no progress bar: stderr is not a terminal
  check_consolidated(f, out);
  // No temporary file left next to the output.
  for (const std::string& n : dcp::list_dir(dcp::parent_dir(out))) {
    EXPECT_EQ(n, "model.safetensors");
  }
}

TEST(HyperDcp, ConsolidateWithTinyBufferStreamsSlabs) {
  Fixture f = make_checkpoint();
  for (const char* buf : {"1", "24", "100", "4096"}) {
    const std::string out = temp_dir() + "/model.safetensors";
    // Options may stand anywhere, also as --name=value.
    Result r = std::string(buf) == "24"
                   ? run_tool({"consolidate", f.dir, "--buffer-bytes=24", out})
                   : run_tool({"consolidate", "--buffer-bytes", buf, f.dir, out});
    ASSERT_EQ(r.code, 0) << buf << ": " << r.err;
    check_consolidated(f, out);
  }
}

TEST(HyperDcp, ConsolidateOfCorruptCheckpointFailsWithoutOutput) {
  Fixture f = make_checkpoint();
  const dcp::ChunkMeta& c = f.meta.tensors.at("model.w").chunks.front();
  const std::string path = f.dir + "/" + c.file;
  std::string bytes = slurp(path);
  bytes[static_cast<size_t>(c.byte_range->first)] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  const std::string outdir = temp_dir();
  Result r = run_tool({"consolidate", f.dir, outdir + "/m.safetensors"});
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("checksum mismatch"));
  EXPECT_TRUE(dcp::list_dir(outdir).empty());
}

TEST(HyperDcp, UsageErrorsExit2) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"bogus"},
      {"list"},
      {"list", "a", "b"},
      {"verify"},
      {"consolidate", "dir"},
      {"list", "--nope", "dir"},
      {"verify", "--chunks", "dir"},
      {"consolidate", "--buffer-bytes", "0", "a", "b"},
      {"consolidate", "a", "b", "--buffer-bytes"},
      {"consolidate", "--buffer-bytes=x", "a", "b"},
      {"list", "--chunks=1", "dir"},
      {"list", "dir", "--", "--chunks"},
  };
  for (const auto& args : cases) {
    Result r = run_tool(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined;
    EXPECT_THAT(r.err, HasSubstr("usage: hyper-dcp")) << joined;
  }
  // The messages, word for word.
  const std::vector<std::pair<std::vector<std::string>, std::string>> messages = {
      {{}, "missing subcommand"},
      {{"bogus"}, "unknown subcommand 'bogus'"},
      {{"list", "a", "b"}, "'list' takes 1 argument(s), got 2"},
      {{"list", "--nope", "dir"}, "unknown option '--nope' for 'list'"},
      {{"verify", "--chunks", "dir"}, "unknown option '--chunks' for 'verify'"},
      {{"consolidate", "a", "b", "--buffer-bytes"}, "missing value after --buffer-bytes"},
      {{"consolidate", "--buffer-bytes", "0", "a", "b"},
       "invalid value for --buffer-bytes: '0' (expected a number of bytes from 1 to 9223372036854775807)"},
      {{"list", "--max-metadata-bytes", "0", "dir"},
       "invalid value for --max-metadata-bytes: '0' (expected a number of bytes from 1 to 1073741824)"},
      {{"verify", "--max-metadata-bytes", "1073741825", "dir"},
       "invalid value for --max-metadata-bytes: '1073741825' (expected a number of bytes from 1 to 1073741824)"},
      {{"consolidate", "--max-metadata-bytes", "4x", "a", "b"},
       "invalid value for --max-metadata-bytes: '4x' (expected a number of bytes from 1 to 1073741824)"},
      {{"list", "--chunks=1", "dir"}, "option --chunks takes no value (got '--chunks=1')"},
  };
  for (const auto& [args, message] : messages) {
    Result r = run_tool(args);
    EXPECT_EQ(r.err.substr(0, r.err.find('\n')), "hyper-dcp: " + message);
  }
  Result h = run_tool({"--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_THAT(h.out, HasSubstr("usage: hyper-dcp"));
}

}  // namespace
