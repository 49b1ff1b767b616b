// Distributed checkpoint of DTensors (ranks as threads, Gloo over loopback): round trips of
// every layout kind, reshards across layouts, meshes and world sizes (values against
// slicing the global tensor), no communication but the metadata exchange, bytes read,
// replicated tensors written once with spread writers, Partial reduced on save, async save
// with staging, values and plain tensors, load in place, errors, a crashed rank
// (process mode, HYPER_DCP_FAULT) leaving the previous checkpoint loadable, and the save
// faults of docs/checkpoint.md ("Faults"): directory lock, different directories, slow
// writer, ENOSPC (injected and on a real tmpfs), deaths around the commit.
#include "hyper/dcp/state_dict.h"

#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/testing_errors.h"
#include "hyper/dcp/checkpoint.h"
#include "hyper/dcp/dir_lock.h"
#include "hyper/dcp/fs.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

namespace hyper::dcp {
namespace {

using comm::testing::HarnessOptions;
using comm::testing::run_threads;
using hyper::testing::error_of;
using ::testing::HasSubstr;
using nlohmann::json;

HarnessOptions opts() {
  HarnessOptions o;
  o.timeout = std::chrono::seconds(30);
  o.deadline = std::chrono::seconds(300);
  return o;
}

std::string temp_dir() {
  std::string tmpl = ::testing::TempDir() + "hyper_dcp_sd_XXXXXX";
  char* d = ::mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

at::Tensor global_tensor(const std::vector<int64_t>& shape, int seed,
                         at::ScalarType t = at::kFloat) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return at::arange(n, at::kDouble).add(seed * 100000).reshape(shape).to(t);
}

/// A final collective on every mesh dim so no rank tears its Gloo pairs down while a peer
/// is still connecting (see dtensor_mp_test.cc).
void settle(const DeviceMesh& mesh) {
  for (int64_t d = 0; d < mesh.ndim(); ++d)
    comm::all_reduce(at::zeros({1}), comm::ReduceOp::kSum, mesh.get_group(d));
}

int prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (auto x : v) p *= x;
  return static_cast<int>(p);
}

struct Spec {
  std::vector<int64_t> mesh;
  Placements placements;
};

/// Saves `global` laid out as `src` (on prod(src.mesh) ranks) into `dir`.
void save_as(const std::string& dir, const at::Tensor& global, const Spec& src,
             const SaveOptions& so = {}) {
  run_threads(
      prod(src.mesh),
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", src.mesh);
        StateDict sd = {{"w", distribute_tensor(global, mesh, src.placements)},
                        {"step", int64_t{7}}};
        save(sd, dir, so);
        settle(mesh);
      },
      opts());
}

/// Loads `dir` into a zero DTensor laid out as `dst` and checks it equals slicing `global`;
/// `check` sees each rank's stats.
void load_as(const std::string& dir, const at::Tensor& global, const Spec& dst,
             const LoadOptions& lo = {},
             const std::function<void(const LoadStats&)>& check = nullptr) {
  run_threads(
      prod(dst.mesh),
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", dst.mesh);
        DTensor target = distribute_tensor(at::zeros_like(global), mesh, dst.placements);
        const at::Tensor handle = target.to_local();  // taken before load
        StateDict sd = {{"w", target}, {"step", int64_t{0}}};
        const LoadStats st = load(sd, dir, lo);
        const at::Tensor expected = distribute_tensor(global, mesh, dst.placements).to_local();
        EXPECT_TRUE(at::equal(handle, expected))
            << "rank " << world.rank() << " of " << to_string(dst.placements);
        EXPECT_EQ(std::get<int64_t>(sd.at("step")), 7);
        if (check) check(st);
        settle(mesh);
      },
      opts());
}

void reshard(const std::vector<int64_t>& shape, const Spec& src, const Spec& dst, int seed) {
  SCOPED_TRACE(to_string(src.placements) + " -> " + to_string(dst.placements));
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor g = global_tensor(shape, seed);
  save_as(dir, g, src);
  load_as(dir, g, dst);
}

TEST(DcpStateDict, RoundTripEveryLayoutKindOnFourRanks) {
  const std::vector<int64_t> shape = {8, 6, 4};
  const std::vector<Spec> specs = {
      {{4}, {Shard(0)}},
      {{4}, {Shard(1)}},
      {{4}, {Replicate()}},
      {{4}, {RaggedShard({0, 1}, {1, 2, 0, 1})}},
      {{2, 2}, {Shard(0), Shard(1)}},
  };
  int seed = 1;
  for (const auto& s : specs) reshard(shape, s, s, seed++);
}

TEST(DcpStateDict, UnevenShardsRoundTrip) {
  // 7 rows over 4 ranks: torch.chunk gives 2,2,2,1; 5 columns over 4: 2,2,1,0 (empty box).
  reshard({7, 5}, {{4}, {Shard(0)}}, {{4}, {Shard(0)}}, 3);
  reshard({7, 5}, {{4}, {Shard(1)}}, {{2}, {Shard(0)}}, 4);
}

TEST(DcpStateDict, RaggedReshards) {
  const std::vector<int64_t> shape = {6, 4, 8};
  // The API example: saved RS((0,1),(1,3)) on 2 ranks, loaded as RS((0,1),(3,1)).
  reshard(shape, {{2}, {RaggedShard({0, 1}, {1, 3})}}, {{2}, {RaggedShard({0, 1}, {3, 1})}}, 5);
  // Ragged <-> Shard(0) / Shard(1) / Replicate.
  const Spec ragged = {{4}, {RaggedShard({0, 1}, {1, 2, 0, 1})}};
  for (const Spec& other : std::vector<Spec>{{{4}, {Shard(0)}}, {{4}, {Shard(1)}},
                                             {{4}, {Replicate()}}}) {
    reshard(shape, ragged, other, 6);
    reshard(shape, other, ragged, 7);
  }
  // Ragged dims change.
  reshard(shape, {{2}, {RaggedShard({0, 1}, {1, 3})}}, {{2}, {RaggedShard({0}, {1, 2})}}, 8);
  reshard(shape, {{3}, {RaggedShard({0}, {1, 1, 1})}},
          {{2}, {RaggedShard({0, 1, 2}, {5, 3})}}, 9);
}

TEST(DcpStateDict, MeshAndWorldSizeChanges) {
  const std::vector<int64_t> shape = {8, 6, 4};
  // A (2,2) mesh to a 1-D mesh, and back with a ragged shard beside Replicate.
  reshard(shape, {{2, 2}, {Shard(0), Shard(1)}}, {{4}, {Shard(1)}}, 10);
  reshard(shape, {{4}, {Shard(0)}}, {{2, 2}, {RaggedShard({0}, {1, 3}), Replicate()}}, 11);
  // Saved on 4 ranks, loaded on 2 and on 3, into the same directory.
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor g = global_tensor(shape, 12);
  save_as(dir, g, {{4}, {RaggedShard({0, 1}, {1, 2, 0, 1})}});
  load_as(dir, g, {{2}, {Shard(0)}});
  load_as(dir, g, {{3}, {Shard(1)}});
  load_as(dir, g, {{3}, {RaggedShard({0}, {2, 1, 1})}});
  load_as(dir, g, {{2}, {Replicate()}});
}

TEST(DcpStateDict, RaggedSaveCommunicatesOnlyMetadata) {
  const at::Tensor g = global_tensor({6, 4, 8}, 13);
  const std::string dir = temp_dir() + "/ck";
  run_threads(
      4,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {4});
        StateDict sd = {{"w", distribute_tensor(g, mesh, {RaggedShard({0, 1}, {1, 2, 0, 1})})}};
        save(sd, dir);  // creates the checkpoint group
        reset_stats_of(world);
        save(sd, dir);
        const comm::CommStats s = stats_of(world);
        for (auto k : {comm::CollectiveKind::kAllToAllV, comm::CollectiveKind::kAllReduce,
                       comm::CollectiveKind::kScatterV, comm::CollectiveKind::kReduceScatterV}) {
          EXPECT_EQ(s[k].bytes_sent, 0) << comm::to_string(k) << ": " << s.to_string();
          EXPECT_EQ(s[k].bytes_received, 0) << comm::to_string(k) << ": " << s.to_string();
        }
        EXPECT_EQ(s[comm::CollectiveKind::kAllGatherV].calls, 1) << s.to_string();
        // The records are far smaller than the tensor (6*4*8 floats = 768 bytes per rank
        // would be a data exchange; the gather carries JSON of a few chunk records).
        EXPECT_GE(s[comm::CollectiveKind::kBroadcast].calls, 1) << s.to_string();
        settle(mesh);
      },
      opts());
}

TEST(DcpStateDict, ReshardReadsAtMostTheNeededBytes) {
  const std::vector<int64_t> shape = {64, 64, 16};  // 256 KiB of floats
  const at::Tensor g = global_tensor(shape, 14);
  const std::string dir = temp_dir() + "/ck";
  SaveOptions so;
  so.checksum_block_size = 4096;
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"w", distribute_tensor(g, mesh, {RaggedShard({0, 1}, {1, 3})})},
                        {"step", int64_t{7}}};
        save(sd, dir, so);
        settle(mesh);
      },
      opts());
  auto within = [](const LoadStats& st) {
    EXPECT_GT(st.bytes_needed, 0);
    EXPECT_LE(static_cast<double>(st.bytes_read), 1.05 * static_cast<double>(st.bytes_needed))
        << st.bytes_read << " read for " << st.bytes_needed << " needed";
  };
  load_as(dir, g, {{2}, {RaggedShard({0, 1}, {3, 1})}}, {}, within);
  load_as(dir, g, {{4}, {Shard(0)}}, {}, within);
  LoadOptions exact;
  exact.verify_checksums = false;
  load_as(dir, g, {{2}, {RaggedShard({0, 1}, {3, 1})}}, exact,
          [](const LoadStats& st) { EXPECT_EQ(st.bytes_read, st.bytes_needed); });
}

TEST(DcpStateDict, ReplicatedTensorsWrittenOnceWithSpreadWriters) {
  const std::string dir = temp_dir() + "/ck";
  const std::vector<std::string> names = {"a", "b", "c", "d", "e", "f", "g", "h"};
  run_threads(
      4,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {4});
        const DeviceMesh mesh2 = init_device_mesh(world, "cpu", {2, 2});
        StateDict sd;
        int seed = 20;
        for (const auto& n : names)
          sd[n] = distribute_tensor(global_tensor({4, 3}, seed++), mesh, {Replicate()});
        sd["rs"] = distribute_tensor(global_tensor({4, 3}, seed++), mesh2, {Replicate(), Shard(0)});
        sd["plain"] = global_tensor({5}, seed++);
        save(sd, dir);
        settle(mesh);
        settle(mesh2);
      },
      opts());
  const json meta = json::parse(read_small_file(dir + "/.metadata", 1 << 20));
  std::set<std::string> writers;
  for (const auto& n : names) {
    const auto& chunks = meta["tensors"][n]["chunks"];
    ASSERT_EQ(chunks.size(), 1u) << n;
    const std::string file = chunks[0]["file"];
    EXPECT_EQ(file.rfind("__" + std::to_string(replica_owner(n, 4)) + "_", 0), 0u) << n << " " << file;
    writers.insert(file);
  }
  EXPECT_GT(writers.size(), 1u) << "every replicated tensor was written by the same rank";
  // [R, S(0)] on (2,2): two boxes, each written once, by the owner replica along dim 0.
  EXPECT_EQ(meta["tensors"]["rs"]["chunks"].size(), 2u);
  const int64_t owner = replica_owner("rs", 2);
  for (const auto& c : meta["tensors"]["rs"]["chunks"]) {
    const std::string file = c["file"];
    const int64_t col = c["offsets"][0].get<int64_t>() == 0 ? 0 : 1;
    EXPECT_EQ(file.rfind("__" + std::to_string(owner * 2 + col) + "_", 0), 0u) << file;
  }
  EXPECT_EQ(meta["tensors"]["plain"]["chunks"].size(), 1u);
  // Across all data files, every key is referenced once (nothing written twice).
  size_t keys = 0;
  for (const auto& f : list_dir(dir)) {
    if (f == ".metadata" || f == ".lock") continue;
    keys += read_safetensors_header(dir + "/" + f).tensors.size();
  }
  EXPECT_EQ(keys, names.size() + 2 + 1);
}

TEST(DcpStateDict, PartialIsReducedOnSave) {
  const std::string dir = temp_dir() + "/ck";
  run_threads(
      2,
      [&](int rank, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        const at::Tensor local = at::full({3, 2}, static_cast<double>(rank + 1), at::kFloat);
        StateDict sd = {{"p", DTensor::from_local(local, mesh, {Partial()})}};
        save(sd, dir);
        DTensor target = distribute_tensor(at::zeros({3, 2}), mesh, {Shard(0)});
        StateDict back = {{"p", target}};
        load(back, dir);
        EXPECT_TRUE(at::equal(target.full_tensor(), at::full({3, 2}, 3.0f)));
        // Loading into a Partial(sum) target keeps the logical value.
        DTensor partial = DTensor::from_local(at::zeros({3, 2}), mesh, {Partial()});
        StateDict back2 = {{"p", partial}};
        load(back2, dir);
        EXPECT_TRUE(at::equal(partial.full_tensor(), at::full({3, 2}, 3.0f)));
        settle(mesh);
      },
      opts());
}

TEST(DcpStateDict, AsyncSaveStagesBeforeReturning) {
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor g = global_tensor({8, 6, 4}, 30);
  const at::Tensor p = global_tensor({5}, 31);
  run_threads(
      4,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {4});
        DTensor dt = distribute_tensor(g, mesh, {RaggedShard({0, 1}, {1, 2, 0, 1})});
        DTensor rep = distribute_tensor(g, mesh, {Replicate()});
        at::Tensor plain = p.clone();
        StateDict sd = {{"w", dt}, {"r", rep}, {"p", plain}, {"step", int64_t{3}}};
        AsyncSaveHandle h = async_save(sd, dir);
        // Modify everything at once: the checkpoint must hold the old values.
        dt.to_local().fill_(-1);
        rep.to_local().fill_(-1);
        plain.fill_(-1);
        // A collective of the caller meanwhile (on the mesh group) does not interleave.
        comm::all_reduce(at::ones({4}), comm::ReduceOp::kSum, mesh.get_group(0));
        // A second async save right behind the first waits for it.
        StateDict sd2 = {{"w", dt}};
        AsyncSaveHandle h2 = async_save(sd2, dir + "2");
        h.wait();
        EXPECT_TRUE(h.done());
        h2.wait();

        DTensor t = distribute_tensor(at::zeros_like(g), mesh, {Shard(1)});
        DTensor tr = distribute_tensor(at::zeros_like(g), mesh, {Shard(0)});
        at::Tensor tp = at::zeros({5});
        StateDict back = {{"w", t}, {"r", tr}, {"p", tp}, {"step", int64_t{0}}};
        load(back, dir);
        EXPECT_TRUE(at::equal(t.to_local(), distribute_tensor(g, mesh, {Shard(1)}).to_local()));
        EXPECT_TRUE(at::equal(tr.to_local(), distribute_tensor(g, mesh, {Shard(0)}).to_local()));
        EXPECT_TRUE(at::equal(tp, p));
        EXPECT_EQ(std::get<int64_t>(back.at("step")), 3);
        StateDict back2 = {{"w", t}};
        load(back2, dir + "2");
        EXPECT_TRUE(at::equal(t.to_local(), at::full_like(t.to_local(), -1)));
        settle(mesh);
      },
      opts());
}

TEST(DcpStateDict, VerifiedShard1ReshardReadsAtMost1_1xAtDefaults) {
  // Rows of 4 KiB saved as Shard(0) on 4 ranks with default options, loaded as Shard(1) on
  // 4 ranks: every rank needs a quarter of every row (1 KiB stretches). Verified reads stay
  // within 1.1x of the needed bytes (1 KiB leaves + their sums), unverified ones are exact.
  const at::Tensor g = global_tensor({256, 1024}, 15);
  const std::string dir = temp_dir() + "/ck";
  save_as(dir, g, {{4}, {Shard(0)}});
  load_as(dir, g, {{4}, {Shard(1)}}, {}, [](const LoadStats& st) {
    EXPECT_GT(st.bytes_needed, 0);
    EXPECT_LE(static_cast<double>(st.bytes_read), 1.1 * static_cast<double>(st.bytes_needed))
        << st.bytes_read << " read for " << st.bytes_needed << " needed";
  });
  LoadOptions exact;
  exact.verify_checksums = false;
  load_as(dir, g, {{4}, {Shard(1)}}, exact,
          [](const LoadStats& st) { EXPECT_EQ(st.bytes_read, st.bytes_needed); });
}

TEST(DcpStateDict, FailedLoadLeavesEveryTargetUnchanged) {
  // Three DTensors saved by 2 ranks; a byte of the last chunk of the last tensor is flipped.
  // A verified load into Shard(1) (every rank reads every chunk) fails on every rank and
  // leaves every target, and the value, as it was.
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor ga = global_tensor({8, 256}, 60), gb = global_tensor({8, 256}, 61),
                   gz = global_tensor({8, 256}, 62);
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"a", distribute_tensor(ga, mesh, {Shard(0)})},
                        {"b", distribute_tensor(gb, mesh, {Shard(0)})},
                        {"z", distribute_tensor(gz, mesh, {Shard(0)})},
                        {"step", int64_t{7}}};
        save(sd, dir);
        settle(mesh);
      },
      opts());
  {
    CheckpointReader r(dir);
    const ChunkMeta& c = r.metadata().tensors.at("z").chunks.back();
    const std::string path = dir + "/" + c.file;
    std::string bytes = read_small_file(path, 1 << 20);
    bytes[static_cast<size_t>(c.byte_range->second - 1)] ^= 0x10;
    write_file_atomic(path, bytes);
  }
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        const at::Tensor before = at::full({8, 256}, -7.0f);
        DTensor ta = distribute_tensor(before, mesh, {Shard(1)});
        DTensor tb = distribute_tensor(before, mesh, {Replicate()});
        DTensor tz = distribute_tensor(before, mesh, {Shard(1)});
        StateDict sd = {{"a", ta}, {"b", tb}, {"z", tz}, {"step", int64_t{0}}};
        EXPECT_THAT(error_of([&] { load(sd, dir); }), HasSubstr("checksum mismatch"));
        for (const DTensor& t : {ta, tb, tz})
          EXPECT_TRUE(at::equal(t.to_local(), at::full_like(t.to_local(), -7.0f)))
              << "rank " << world.rank();
        EXPECT_EQ(std::get<int64_t>(sd.at("step")), 0);
        settle(mesh);
      },
      opts());
}

/// Sets HYPER_DCP_FAULT for the scope (before any rank thread starts, unset after they end).
struct FaultEnv {
  explicit FaultEnv(const std::string& spec) { ::setenv("HYPER_DCP_FAULT", spec.c_str(), 1); }
  ~FaultEnv() { ::unsetenv("HYPER_DCP_FAULT"); }
};

/// Flips one byte of `path` in place at `offset`.
void flip_byte(const std::string& path, int64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(offset);
  const char c = static_cast<char>(f.get());
  f.seekp(offset);
  f.put(static_cast<char>(c ^ 0x10));
}

TEST(DcpStateDict, FailureInTheLastPieceOfABigLoadLeavesEveryTargetUnchanged) {
  // Two tensors of 9 MiB chunks (more than one 8 MiB verification view each) saved by 2
  // ranks; the last byte of the last chunk of the last tensor is flipped. Loads into the same
  // layout (a chunk needed whole: streamed whole-chunk checksum, then leaves to name the
  // bytes) and into Shard(1) (leaves) fail in the last piece on the rank that needs it and
  // leave every one of its targets as it was.
  const std::string dir = temp_dir() + "/ck";
  const std::vector<int64_t> shape = {4608, 1024};
  const at::Tensor ga = global_tensor(shape, 63), gz = global_tensor(shape, 64);
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"a", distribute_tensor(ga, mesh, {Shard(0)})},
                        {"z", distribute_tensor(gz, mesh, {Shard(0)})}};
        save(sd, dir);
        settle(mesh);
      },
      opts());
  int64_t last_end = 0;
  {
    CheckpointReader r(dir);
    const ChunkMeta& c = r.metadata().tensors.at("z").chunks.back();
    ASSERT_GT(c.byte_range->second - c.byte_range->first, int64_t{8} << 20);
    last_end = c.byte_range->second;
    flip_byte(dir + "/" + c.file, last_end - 1);
  }
  for (const Placement& target : {Placement(Shard(0)), Placement(Shard(1))}) {
    run_threads(
        2,
        [&](int rank, int, const World& world) {
          const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
          const at::Tensor before = at::full(shape, -7.0f);
          DTensor ta = distribute_tensor(before, mesh, {target});
          DTensor tz = distribute_tensor(before, mesh, {target});
          StateDict sd = {{"a", ta}, {"z", tz}};
          const std::string err = error_of([&] { load(sd, dir); });
          // The flipped byte is in the last row's last column: only rank 1 needs it (its
          // rows under Shard(0), its columns under Shard(1)). Rank 0's load succeeds.
          if (rank == 1) {
            EXPECT_THAT(err, HasSubstr("checksum mismatch"));
            EXPECT_THAT(err, HasSubstr(", " + std::to_string(last_end) + "): expected"))
                << "names the last leaf";
          } else {
            EXPECT_EQ(err, "(no error)");
          }
          for (const auto& [t, g] : {std::pair{ta, ga}, std::pair{tz, gz}})
            EXPECT_TRUE(at::equal(t.to_local(),
                                  rank == 1 ? at::full_like(t.to_local(), -7.0f)
                                            : g.slice(target.dim(), 0, shape[target.dim()] / 2)))
                << "rank " << rank << " target " << target.to_string();
          settle(mesh);
        },
        opts());
  }
}

/// Saves {"w": values as Shard(0)} to `dir` from 2 ranks (threads, their own world).
void save_w(const std::string& dir, const at::Tensor& values) {
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"w", distribute_tensor(values, mesh, {Shard(0)})}};
        save(sd, dir);
        settle(mesh);
      },
      opts());
}

TEST(DcpStateDict, DataFileWrittenInPlaceDuringALoadIsRefusedBeforeAnyTargetChanges) {
  // Every target verified, the load pauses (fault point load_between_passes); meanwhile
  // another writer changes a data file in place. The copy would read bytes that were never
  // verified: the load refuses, naming the file, and every target is as it was.
  const std::string dir = temp_dir() + "/ck";
  save_w(dir, global_tensor({8, 256}, 65));
  std::string file;
  int64_t offset = 0;
  {
    CheckpointReader r(dir);
    const ChunkMeta& c = r.metadata().tensors.at("w").chunks.front();
    file = dir + "/" + c.file;
    offset = c.byte_range->first;
  }
  const FaultEnv fault("load_between_passes:*:sleep=600");
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    flip_byte(file, offset);
  });
  run_threads(
      2,
      [&](int rank, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        DTensor t = distribute_tensor(at::full({8, 256}, -7.0f), mesh, {Shard(1)});
        StateDict sd = {{"w", t}};
        EXPECT_THAT(error_of([&] { load(sd, dir); }),
                    HasSubstr(file + "' changed while it was read"));
        EXPECT_TRUE(at::equal(t.to_local(), at::full_like(t.to_local(), -7.0f))) << rank;
        settle(mesh);
      },
      opts());
  writer.join();
}

TEST(DcpStateDict, ALoadCompletesWhileANewerSaveReplacesTheCheckpoint) {
  // Every target verified, the load pauses (load_between_passes); meanwhile another job saves
  // new values into the same directory, which commits and removes the old data files. The
  // load reads the files it opened (unlinked, unchanged) and completes with the old values.
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor g = global_tensor({8, 256}, 66);
  save_w(dir, g);
  std::thread saver;
  {
    const FaultEnv fault("load_between_passes:*:sleep=1500");
    saver = std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      save_w(dir, g + 1);  // its own ranks (threads), its own world
    });
    run_threads(
        2,
        [&](int rank, int, const World& world) {
          const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
          DTensor t = distribute_tensor(at::full({8, 256}, -7.0f), mesh, {Shard(1)});
          StateDict sd = {{"w", t}};
          EXPECT_EQ(error_of([&] { load(sd, dir); }), "(no error)") << rank;
          EXPECT_TRUE(at::equal(t.full_tensor(), g)) << rank;
          settle(mesh);
        },
        opts());
    saver.join();
  }
  // The directory now holds the newer save.
  at::Tensor back = at::zeros({8, 256});
  StateDict sd = {{"w", back}};
  load(sd, dir);
  EXPECT_TRUE(at::equal(back, g + 1));
}

TEST(DcpStateDict, ValuesAndPlainTensorsInPlace) {
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor p = global_tensor({3, 5}, 40, at::kDouble);
  run_threads(
      3,
      [&](int, int, const World& world) {
        SaveOptions so;
        so.world = world;  // no DTensor: say which world
        StateDict sd = {{"p", p.clone()},
                        {"scalar", at::scalar_tensor(42, at::kLong)},
                        {"empty", at::zeros({0, 4})},
                        {"step", int64_t{9}},
                        {"lr", 0.25},
                        {"done", true},
                        {"tag", std::string("run-3")}};
        save(sd, dir, so);
        at::Tensor tp = at::zeros({3, 5}, at::kDouble);
        at::Tensor alias = tp.view({15});
        at::Tensor ts = at::zeros({}, at::kLong);
        StateDict back = {{"p", tp},          {"scalar", ts},       {"empty", at::zeros({0, 4})},
                          {"step", int64_t{0}}, {"lr", 0.0},         {"done", false},
                          {"tag", std::string()}};
        load(back, dir);
        EXPECT_TRUE(at::equal(alias.view({3, 5}), p));
        EXPECT_EQ(ts.item<int64_t>(), 42);
        EXPECT_EQ(std::get<int64_t>(back.at("step")), 9);
        EXPECT_EQ(std::get<double>(back.at("lr")), 0.25);
        EXPECT_EQ(std::get<bool>(back.at("done")), true);
        EXPECT_EQ(std::get<std::string>(back.at("tag")), "run-3");
        comm::all_reduce(at::zeros({1}), comm::ReduceOp::kSum, world.group());
      },
      opts());
}

TEST(DcpStateDict, LoadErrors) {
  const std::string dir = temp_dir() + "/ck";
  const at::Tensor g = global_tensor({4, 6}, 50);
  save_as(dir, g, {{2}, {Shard(0)}});
  run_threads(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict missing = {{"w", distribute_tensor(g, mesh, {Shard(0)})},
                             {"nope", int64_t{1}},
                             {"also_missing", at::zeros({2})}};
        const std::string m = error_of([&] { load(missing, dir); });
        EXPECT_THAT(m, HasSubstr("'also_missing'"));
        EXPECT_THAT(m, HasSubstr("'nope'"));
        StateDict dtype = {{"w", distribute_tensor(g.to(at::kDouble), mesh, {Shard(0)})}};
        EXPECT_THAT(error_of([&] { load(dtype, dir); }), HasSubstr("target dtype F64 differs from the saved dtype F32"));
        StateDict shape = {{"w", distribute_tensor(at::zeros({4, 5}), mesh, {Shard(1)})}};
        EXPECT_THAT(error_of([&] { load(shape, dir); }),
                    HasSubstr("target global shape [4, 5] differs from the saved global shape [4, 6]"));
        StateDict kind = {{"step", at::zeros({1})}};
        EXPECT_THAT(error_of([&] { load(kind, dir); }), HasSubstr("holds a value, the target is a tensor"));
        make_dirs(dir + "/none");
        EXPECT_THAT(error_of([&] { load(missing, dir + "/none"); }), HasSubstr("incomplete checkpoint"));
        // LoadOptions::max_metadata_bytes reaches the reader: a smaller limit refuses the
        // .metadata (its size and the limit named), the target unchanged; a limit of 0 is
        // refused; at the file's size the load works.
        const int64_t msize = static_cast<int64_t>(read_small_file(dir + "/.metadata", 1 << 20).size());
        DTensor target = distribute_tensor(at::zeros({4, 6}), mesh, {Shard(0)});
        StateDict small = {{"w", target}};
        LoadOptions lo;
        lo.max_metadata_bytes = msize - 1;
        EXPECT_THAT(error_of([&] { load(small, dir, lo); }),
                    HasSubstr("has " + std::to_string(msize) + " bytes, more than the limit of " +
                              std::to_string(msize - 1)));
        EXPECT_TRUE(at::equal(target.to_local(), at::zeros({2, 6})));
        lo.max_metadata_bytes = 0;
        EXPECT_THAT(error_of([&] { load(small, dir, lo); }), HasSubstr("max_metadata_bytes is 0"));
        lo.max_metadata_bytes = msize;
        load(small, dir, lo);
        EXPECT_TRUE(at::equal(target.to_local(), g.narrow(0, 2 * world.rank(), 2)));
        settle(mesh);
      },
      opts());
}

// A saved value does not change the target's type on load: an int64 target stays int64 (a
// saved float or string is refused, naming both types), and so on for every pair.
TEST(DcpStateDict, SavedValueMustHaveTheTargetsType) {
  const std::string dir = temp_dir() + "/ck";
  save_local({}, {{"step", int64_t{9}}, {"lr", 0.25}, {"done", true}, {"tag", std::string("x")}},
             dir);
  StateDict as_double = {{"step", 0.0}};
  EXPECT_THAT(error_of([&] { load(as_double, dir); }),
              HasSubstr("loading 'step': the checkpoint holds an int, the target is a float"));
  EXPECT_TRUE(std::holds_alternative<double>(as_double.at("step")));  // untouched
  StateDict as_int = {{"lr", int64_t{0}}};
  EXPECT_THAT(error_of([&] { load(as_int, dir); }),
              HasSubstr("loading 'lr': the checkpoint holds a float, the target is an int"));
  StateDict str_to_int = {{"tag", int64_t{0}}};
  EXPECT_THAT(error_of([&] { load(str_to_int, dir); }),
              HasSubstr("loading 'tag': the checkpoint holds a string, the target is an int"));
  StateDict bool_to_str = {{"done", std::string()}};
  EXPECT_THAT(error_of([&] { load(bool_to_str, dir); }),
              HasSubstr("loading 'done': the checkpoint holds a bool, the target is a string"));
  StateDict same = {{"step", int64_t{0}}, {"lr", 0.0}, {"done", false}, {"tag", std::string()}};
  load(same, dir);
  EXPECT_EQ(std::get<int64_t>(same.at("step")), 9);
  EXPECT_EQ(std::get<double>(same.at("lr")), 0.25);
  EXPECT_EQ(std::get<bool>(same.at("done")), true);
  EXPECT_EQ(std::get<std::string>(same.at("tag")), "x");
}

TEST(DcpStateDict, SaveErrorSurfacesOnEveryRank) {
  const std::string dir = temp_dir() + "/ck";
  // A complex plain tensor: only its owner rank fails to write it; every rank throws.
  const int64_t owner = replica_owner("bad", 3);
  run_threads(
      3,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {3});
        StateDict sd = {{"w", distribute_tensor(at::ones({3, 3}), mesh, {Shard(0)})},
                        {"bad", at::zeros({2}, at::kComplexFloat)}};
        const std::string e = error_of([&] { save(sd, dir); });
        EXPECT_THAT(e, HasSubstr("save to '" + dir + "' failed: rank " + std::to_string(owner) + ": "));
        EXPECT_THAT(e, HasSubstr("cannot be stored"));
        // Nothing was committed; a later save on the same world works.
        EXPECT_FALSE(path_exists(dir + "/.metadata"));
        sd.erase("bad");
        save(sd, dir);
        EXPECT_TRUE(path_exists(dir + "/.metadata"));
        settle(mesh);
      },
      opts());
}

// Process mode: ranks are re-executed processes, so a fault kills only its rank.
TEST(DcpStateDictProcess, CrashedRankLeavesPreviousCheckpointLoadable) {
  using comm::testing::in_rank_process;
  if (!in_rank_process()) {
    const std::string base = temp_dir();
    ::setenv("HYPER_DCP_TEST_CKPT", base.c_str(), 1);
  }
  const std::string base = std::getenv("HYPER_DCP_TEST_CKPT");
  const std::string dir = base + "/ck";
  const std::string fresh = base + "/fresh";
  const std::vector<int64_t> shape = {6, 4, 8};
  auto body = [&](double value, const std::string& into) {
    return [&, value, into](int, int, const World& world) {
      const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
      const at::Tensor g = global_tensor(shape, 0).add(value);
      StateDict sd = {{"w", distribute_tensor(g, mesh, {RaggedShard({0, 1}, {1, 3})})},
                      {"v", value}};
      save(sd, into);
    };
  };
  HarnessOptions o;
  o.timeout = std::chrono::seconds(3);
  o.deadline = std::chrono::seconds(120);
  comm::testing::run_processes(2, body(1.0, dir), o);
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_data_file:1", 1);
  const auto crashed = comm::testing::run_processes_collect(2, body(2.0, dir), o);
  const auto crashed_fresh = comm::testing::run_processes_collect(2, body(2.0, fresh), o);
  if (in_rank_process()) return;
  ::unsetenv("HYPER_DCP_FAULT");
  for (const auto& outcomes : {crashed, crashed_fresh}) {
    ASSERT_EQ(outcomes.size(), 2u);
    EXPECT_FALSE(outcomes[1].ok);
    EXPECT_THAT(outcomes[1].error, HasSubstr(std::to_string(kFaultExitCode)));
    EXPECT_FALSE(outcomes[0].ok);  // rank 0 cannot complete the metadata exchange
  }
  // The previous checkpoint is intact and loads (outside any world: load is local).
  at::Tensor w = at::zeros(shape);
  StateDict back = {{"w", w}, {"v", 0.0}};
  load(back, dir);
  EXPECT_TRUE(at::equal(w, global_tensor(shape, 0).add(1.0)));
  EXPECT_EQ(std::get<double>(back.at("v")), 1.0);
  // The new one in a fresh directory is detectably incomplete.
  EXPECT_THAT(error_of([&] { load(back, fresh); }), HasSubstr("incomplete checkpoint"));
}


// ---------------------------------------------------------------- faults (docs/checkpoint.md)

/// Runs `f`; rethrows a SaveError as std::runtime_error("SaveError: <what>") and anything else
/// as std::runtime_error("<other>: <what>"), so a RankOutcome's error tells the type.
template <typename F>
void typed(F&& f) {
  try {
    f();
  } catch (const SaveError& e) {
    throw std::runtime_error(std::string("SaveError: ") + e.what());
  } catch (const CommError& e) {
    throw std::runtime_error(std::string("CommError: ") + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("other: ") + e.what());
  }
}

/// Names in `dir` that are neither .metadata, .lock nor a data file `.metadata` references:
/// temporary files and data files of failed saves.
std::vector<std::string> leftovers(const std::string& dir) {
  const json meta = json::parse(read_small_file(dir + "/.metadata", 1 << 24));
  std::set<std::string> referenced;
  for (const auto& [name, t] : meta.at("tensors").items())
    for (const auto& c : t.at("chunks")) referenced.insert(c.at("file").get<std::string>());
  std::vector<std::string> out;
  for (const auto& n : list_dir(dir))
    if (n != ".metadata" && n != ".lock" && !referenced.count(n)) out.push_back(n);
  return out;
}

/// A 2-rank thread-mode save of w = global_tensor({4, 6}, 0) + v (Shard(0)) and value v.
std::vector<comm::testing::RankOutcome> save_value(const std::string& dir, double v,
                                                  HarnessOptions o = opts(),
                                                  const std::vector<int64_t>& big = {}) {
  return comm::testing::run_threads_collect(
      2,
      [&](int, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"w", distribute_tensor(global_tensor({4, 6}, 0).add(v), mesh, {Shard(0)})},
                        {"v", v}};
        if (!big.empty()) sd["big"] = distribute_tensor(at::ones(big), mesh, {Shard(0)});
        typed([&] { save(sd, dir); });
        settle(mesh);
      },
      o);
}

/// Loads `dir` locally and checks it holds the save of value v.
void expect_holds(const std::string& dir, double v) {
  at::Tensor w = at::zeros({4, 6});
  StateDict back = {{"w", w}, {"v", 0.0}};
  load(back, dir);
  EXPECT_TRUE(at::equal(w, global_tensor({4, 6}, 0).add(v))) << dir;
  EXPECT_EQ(std::get<double>(back.at("v")), v) << dir;
}

TEST(DcpSaveFaults, ConcurrentSavesIntoOneDirectoryOneWins) {
  const std::string dir = temp_dir() + "/ck";
  // Both jobs write their data and then wait 1.5 s before the record exchange, so their
  // saves overlap; the first to lock the directory wins, the other is refused at once.
  std::vector<comm::testing::RankOutcome> a, b;
  {
    FaultEnv fault("after_data_file:*:sleep=1500");
    std::thread ta([&] { a = save_value(dir, 1.0); });
    std::thread tb([&] { b = save_value(dir, 2.0); });
    ta.join();
    tb.join();
  }
  auto all_ok = [](const auto& o) { return o.size() == 2 && o[0].ok && o[1].ok; };
  EXPECT_TRUE(all_ok(a) != all_ok(b)) << "job 1: " << comm::testing::describe_failures(a)
                                      << "\njob 2: " << comm::testing::describe_failures(b);
  {  // whatever was reported, the directory loads
    StateDict back = {{"w", at::zeros({4, 6})}, {"v", 0.0}};
    ASSERT_EQ(error_of([&] { load(back, dir); }), "(no error)");
  }
  ASSERT_TRUE(all_ok(a) != all_ok(b));
  const auto& loser = all_ok(a) ? b : a;
  for (const auto& o : loser) {
    EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 0: checkpoint directory '" + dir + "' is locked by another save (pid " + std::to_string(::getpid()) + " on host "));
    EXPECT_THAT(o.error, HasSubstr("concurrent saves into one directory are refused"));
  }
  expect_holds(dir, all_ok(a) ? 1.0 : 2.0);
  EXPECT_THAT(leftovers(dir), ::testing::IsEmpty());
}

TEST(DcpSaveFaults, HeldLockRefusesNamingTheHolder) {
  const std::string dir = temp_dir() + "/ck";
  ASSERT_TRUE(save_value(dir, 1.0)[0].ok);
  {
    DirLock other(dir, "pid 4242 on host elsewhere, job j7, save 00ff, since 2026-01-01T00:00:00Z");
    const auto out = save_value(dir, 2.0);
    for (const auto& o : out) {
      EXPECT_FALSE(o.ok);
      EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 0: checkpoint directory '" + dir +
                                     "' is locked by another save (pid 4242 on host elsewhere, job j7, save 00ff, since 2026-01-01T00:00:00Z)"));
    }
    expect_holds(dir, 1.0);
    // async_save: the same refusal, from wait(), as a SaveError.
    const auto async = comm::testing::run_threads_collect(
        2,
        [&](int, int, const World& world) {
          const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
          StateDict sd = {{"w", distribute_tensor(at::ones({4, 6}), mesh, {Shard(0)})}};
          AsyncSaveHandle h = async_save(sd, dir);
          typed([&] { h.wait(); });
          settle(mesh);
        },
        opts());
    for (const auto& o : async)
      EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 0: checkpoint directory '" + dir +
                                     "' is locked by another save (pid 4242 on host elsewhere"));
    expect_holds(dir, 1.0);
  }
  const auto out = save_value(dir, 3.0);  // released: saves again
  EXPECT_TRUE(out[0].ok && out[1].ok) << comm::testing::describe_failures(out);
  expect_holds(dir, 3.0);
  EXPECT_EQ(read_lock_file(dir), "");  // released: emptied
}

TEST(DcpSaveFaults, RanksGivenDifferentDirectoriesRefuse) {
  const std::string base = temp_dir();
  const auto out = comm::testing::run_threads_collect(
      2,
      [&](int rank, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"w", distribute_tensor(at::ones({4, 2}), mesh, {Shard(0)})}};
        typed([&] { save(sd, base + "/r" + std::to_string(rank)); });
        settle(mesh);
      },
      opts());
  for (const auto& o : out) {
    EXPECT_FALSE(o.ok);
    EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + base + "/r0' failed: rank 1: checkpoint directory '" +
                                   base + "/r1' is not rank 0's '" + base + "/r0'"));
  }
  EXPECT_FALSE(path_exists(base + "/r0/.metadata"));
  EXPECT_FALSE(path_exists(base + "/r1"));  // not created by the refused rank
  // The same directory under another name (a symlink) is the same directory: accepted.
  make_dirs(base + "/real");
  ASSERT_EQ(::symlink((base + "/real").c_str(), (base + "/alias").c_str()), 0);
  const auto same = comm::testing::run_threads_collect(
      2,
      [&](int rank, int, const World& world) {
        const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
        StateDict sd = {{"w", distribute_tensor(global_tensor({4, 6}, 0).add(5.0), mesh, {Shard(0)})},
                        {"v", 5.0}};
        typed([&] { save(sd, base + (rank == 0 ? "/real" : "/alias")); });
        settle(mesh);
      },
      opts());
  EXPECT_TRUE(same[0].ok && same[1].ok) << comm::testing::describe_failures(same);
  expect_holds(base + "/real", 5.0);
}

TEST(DcpSaveFaults, SlowWriterPastTheTimeoutGivesSaveErrorEverywhere) {
  const std::string dir = temp_dir() + "/ck";
  HarnessOptions o = opts();
  o.timeout = std::chrono::seconds(2);
  std::vector<comm::testing::RankOutcome> out;
  {
    FaultEnv fault("after_data_file:1:sleep=3500");
    out = save_value(dir, 1.0, o);
  }
  ASSERT_EQ(out.size(), 2u);
  EXPECT_THAT(out[0].error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 0: the record exchange failed"));
  EXPECT_THAT(out[0].error, HasSubstr("nothing was committed"));
  EXPECT_THAT(out[1].error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 1: the record exchange failed"));
  EXPECT_THAT(out[1].error, HasSubstr("the commit state is unknown"));
  EXPECT_FALSE(path_exists(dir + "/.metadata"));
}

TEST(DcpSaveFaults, EnospcDuringDataWriteAndCommit) {
  const std::string dir = temp_dir() + "/ck";
  ASSERT_TRUE(save_value(dir, 1.0)[0].ok);
  for (const char* spec : {"data_write:1:enospc", "metadata_write:0:enospc"}) {
    SCOPED_TRACE(spec);
    std::vector<comm::testing::RankOutcome> out;
    {
      FaultEnv fault(spec);
      out = save_value(dir, 2.0);
    }
    const std::string file = spec[0] == 'd' ? "/__1_" : "/.metadata";
    for (const auto& o : out) {
      EXPECT_FALSE(o.ok);
      EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank "));
      EXPECT_THAT(o.error, HasSubstr("cannot write '" + dir + "/." + file.substr(1)));
      EXPECT_THAT(o.error, HasSubstr("No space left on device"));
    }
    expect_holds(dir, 1.0);
    EXPECT_THAT(leftovers(dir), ::testing::IsEmpty());
  }
}

/// A small tmpfs mounted for the test (root only); skipped where mount is not permitted.
struct SmallTmpfs {
  std::string dir;
  bool mounted = false;
  explicit SmallTmpfs(const std::string& d, const char* size) : dir(d) {
    make_dirs(dir);
    mounted = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, (std::string("size=") + size).c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted) ::umount2(dir.c_str(), MNT_DETACH);
  }
};

TEST(DcpSaveFaults, EnospcOnARealFullFileSystem) {
  SmallTmpfs fs(temp_dir() + "/mnt", "1m");
  if (!fs.mounted)
    GTEST_SKIP() << "mounting a 1 MiB tmpfs is not permitted here (" << std::strerror(errno)
                 << "); the fault-injected ENOSPC test covers the same paths";
  const std::string dir = fs.dir + "/ck";
  ASSERT_TRUE(save_value(dir, 1.0)[0].ok);
  {  // data: 2 MiB of data do not fit in 1 MiB
    const auto out = save_value(dir, 2.0, opts(), {512, 1024});
    for (const auto& o : out) {
      EXPECT_FALSE(o.ok);
      EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank "));
      EXPECT_THAT(o.error, HasSubstr("No space left on device"));
    }
    expect_holds(dir, 1.0);
    EXPECT_THAT(leftovers(dir), ::testing::IsEmpty());
  }
  {  // commit: the file system fills up while rank 0 waits before writing .metadata
    std::atomic<bool> stop{false};
    std::thread filler([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!stop && std::chrono::steady_clock::now() < deadline) {
        int data = 0;
        for (const auto& n : list_dir(dir))
          if (n.compare(0, 2, "__") == 0 && n.find(".tmp-") == std::string::npos) ++data;
        if (data >= 3) break;  // the previous checkpoint's 2 + at least one new one
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // both new files renamed in
      std::ofstream f(fs.dir + "/filler", std::ios::binary);
      const std::string block(4096, 'x');
      while (f.write(block.data(), block.size()) && f.flush()) {
      }
    });
    std::vector<comm::testing::RankOutcome> out;
    {
      FaultEnv fault("before_metadata:0:sleep=1000");
      out = save_value(dir, 3.0);
    }
    stop = true;
    filler.join();
    for (const auto& o : out) {
      EXPECT_FALSE(o.ok);
      EXPECT_THAT(o.error, HasSubstr("SaveError: save to '" + dir + "' failed: rank 0: "));
      EXPECT_THAT(o.error, HasSubstr("cannot write '" + dir + "/..metadata.tmp-"));
      EXPECT_THAT(o.error, HasSubstr("No space left on device"));
    }
    remove_file(fs.dir + "/filler");
    expect_holds(dir, 1.0);
    EXPECT_THAT(leftovers(dir), ::testing::IsEmpty());
  }
}

// Process mode: a rank that dies after the record exchange does not turn rank 0's commit into
// a reported failure; a coordinator that dies after committing leaves its peers a SaveError
// saying the commit state is unknown and how to check it.
TEST(DcpSaveFaultsProcess, DeathsAroundTheCommit) {
  using comm::testing::in_rank_process;
  if (!in_rank_process()) {
    const std::string base = temp_dir();
    ::setenv("HYPER_DCP_TEST_CKPT", base.c_str(), 1);
  }
  const std::string base = std::getenv("HYPER_DCP_TEST_CKPT");
  auto body = [&](double value, const std::string& into) {
    return [&, value, into](int, int, const World& world) {
      const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
      StateDict sd = {{"w", distribute_tensor(global_tensor({4, 6}, 0).add(value), mesh, {Shard(0)})},
                      {"v", value}};
      typed([&] { save(sd, into); });
    };
  };
  HarnessOptions o;
  o.timeout = std::chrono::seconds(3);
  o.deadline = std::chrono::seconds(120);
  const std::string a = base + "/a", b = base + "/b", c = base + "/c";
  comm::testing::run_processes(2, body(1.0, a), o);
  comm::testing::run_processes(2, body(1.0, b), o);
  comm::testing::run_processes(2, body(1.0, c), o);
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_gather:1", 1);
  const auto gather = comm::testing::run_processes_collect(2, body(2.0, a), o);
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_metadata:0", 1);
  const auto commit = comm::testing::run_processes_collect(2, body(2.0, b), o);
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_data_file:1", 1);
  const auto data = comm::testing::run_processes_collect(2, body(2.0, c), o);
  const std::string d = base + "/d";
  if (!in_rank_process()) ::unsetenv("HYPER_DCP_FAULT");
  comm::testing::run_processes(2, body(1.0, d), o);
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "before_metadata:0", 1);
  const auto before = comm::testing::run_processes_collect(2, body(2.0, d), o);
  // Rank 0 dies holding the lock: rank 1 learns nothing was committed; the lock dies with it.
  const std::string e = base + "/e";
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_lock:0", 1);
  const auto lock = comm::testing::run_processes_collect(2, body(2.0, e), o);
  // Rank 1 dies after the exchange and rank 0's commit fails (disk full): rank 0 says so.
  if (!in_rank_process()) ::setenv("HYPER_DCP_FAULT", "after_gather:1,metadata_write:0:enospc", 1);
  const auto both = comm::testing::run_processes_collect(2, body(2.0, d), o);
  if (!in_rank_process()) ::unsetenv("HYPER_DCP_FAULT");
  comm::testing::run_processes(2, body(3.0, e), o);  // the dead holder's lock is free
  if (in_rank_process()) return;
  ::unsetenv("HYPER_DCP_FAULT");
  ASSERT_EQ(gather.size(), 2u);
  ASSERT_EQ(commit.size(), 2u);
  ASSERT_EQ(data.size(), 2u);
  // Rank 1 died after the exchange: rank 0 committed and says so.
  EXPECT_THAT(gather[1].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_TRUE(gather[0].ok) << gather[0].error;
  expect_holds(a, 2.0);
  // Rank 0 died right after committing: rank 1 cannot know; it says so and how to check.
  EXPECT_THAT(commit[0].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_THAT(commit[1].error, HasSubstr("SaveError: save to '" + b + "' failed: rank 1: "));
  EXPECT_THAT(commit[1].error, HasSubstr("the commit state is unknown"));
  EXPECT_THAT(commit[1].error, HasSubstr("hyper-dcp verify"));
  expect_holds(b, 2.0);
  // Rank 1 died before the exchange: rank 0 gets a SaveError, nothing committed.
  EXPECT_THAT(data[1].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_THAT(data[0].error, HasSubstr("SaveError: save to '" + c + "' failed: rank 0: the record exchange failed"));
  EXPECT_THAT(data[0].error, HasSubstr("nothing was committed"));
  expect_holds(c, 1.0);
  // Rank 0 died before committing: rank 1 cannot tell that from a death after it.
  ASSERT_EQ(before.size(), 2u);
  EXPECT_THAT(before[0].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_THAT(before[1].error, HasSubstr("SaveError: save to '" + d + "' failed: rank 1: the status broadcast from rank 0 failed"));
  EXPECT_THAT(before[1].error, HasSubstr("the commit state is unknown"));
  EXPECT_THAT(before[1].error, HasSubstr("references this rank's data file '__1_"));
  expect_holds(d, 1.0);
  ASSERT_EQ(lock.size(), 2u);
  EXPECT_THAT(lock[0].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_THAT(lock[1].error, HasSubstr("SaveError: save to '" + e + "' failed: rank 1: the lock broadcast failed"));
  EXPECT_THAT(lock[1].error, HasSubstr("nothing was committed"));
  expect_holds(e, 3.0);
  ASSERT_EQ(both.size(), 2u);
  EXPECT_THAT(both[1].error, HasSubstr(std::to_string(kFaultExitCode)));
  EXPECT_THAT(both[0].error, HasSubstr("SaveError: save to '" + d + "' failed: rank 0: cannot write '" + d + "/..metadata.tmp-"));
  EXPECT_THAT(both[0].error, HasSubstr("No space left on device; nothing was committed (and the status broadcast failed: "));
  expect_holds(d, 1.0);
}

}  // namespace
}  // namespace hyper::dcp
