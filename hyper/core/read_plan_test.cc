// Tests of hyper/core/read_plan.h: checkpoint chunks x target regions -> reads.
//
// A "chunk store" holds each saved chunk's elements row-major, taken from a known global
// array by brute force; executing the read runs into each rank's local storage must give
// the brute-force oracle of that rank's storage (internal/test_catalogue.h).

#include "hyper/core/read_plan.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <algorithm>
#include <map>
#include <chrono>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/internal/test_catalogue.h"
#include "hyper/core/layout.h"
#include "hyper/core/plan_executor.h"

namespace hyper {
namespace {

using testutil::box_flat_indices;
using testutil::throws_with;

using testutil::arange;
constexpr auto* L = &testutil::layout_from_text;

/// Each chunk's elements of `global`, row-major.
std::vector<std::vector<double>> chunk_store(const Shape& shape, const std::vector<Box>& chunks,
                                             const std::vector<double>& global) {
  std::vector<std::vector<double>> store;
  for (const auto& c : chunks) {
    std::vector<double> data;
    for (auto f : box_flat_indices(shape, c)) data.push_back(global[f]);
    store.push_back(std::move(data));
  }
  return store;
}

/// Executes runs into a local storage of `n` elements; checks bounds and that every
/// element is written exactly once. Returns "" or the problem.
std::string execute_runs(const std::vector<ReadRun>& runs,
                         const std::vector<std::vector<double>>& store, int64_t n,
                         std::vector<double>* out) {
  out->assign(static_cast<std::size_t>(n), -1.0);
  std::vector<int> writes(static_cast<std::size_t>(n), 0);
  for (const auto& r : runs) {
    if (r.chunk < 0 || r.chunk >= static_cast<int64_t>(store.size())) return "bad chunk index";
    const auto& data = store[r.chunk];
    if (r.length <= 0) return "empty run";
    if (r.src_offset < 0 || r.src_offset + r.length > static_cast<int64_t>(data.size()))
      return "run reads past its chunk";
    if (r.dst_offset < 0 || r.dst_offset + r.length > n) return "run writes past the storage";
    for (int64_t k = 0; k < r.length; ++k) {
      (*out)[r.dst_offset + k] = data[r.src_offset + k];
      ++writes[r.dst_offset + k];
    }
  }
  for (int64_t i = 0; i < n; ++i)
    if (writes[i] != 1)
      return "element " + std::to_string(i) + " written " + std::to_string(writes[i]) + " times";
  return "";
}

/// No two consecutive runs could have been one.
std::string check_merged(const std::vector<ReadRun>& runs) {
  for (std::size_t i = 1; i < runs.size(); ++i) {
    const auto& a = runs[i - 1];
    const auto& b = runs[i];
    if (a.chunk == b.chunk && a.src_offset + a.length == b.src_offset &&
        a.dst_offset + a.length == b.dst_offset)
      return "runs " + std::to_string(i - 1) + " and " + std::to_string(i) + " not merged";
  }
  return "";
}

/// Chunks of a saved layout: every rank's region boxes, replicas de-duplicated.
std::vector<Box> saved_chunks(const Layout& saved) {
  std::vector<Box> chunks;
  for (int64_t r = 0; r < saved.mesh().size(); ++r)
    for (const auto& fb : saved.local_region(r)) {
      bool dup = false;
      for (const auto& c : chunks) dup = dup || c == fb.box;
      if (!dup) chunks.push_back(fb.box);
    }
  return chunks;
}

// ---------------------------------------------------------------------------------

TEST(ReadPlan, CheckpointReshardCaseFromRaggedCases) {
  const Shape shape{6, 4, 8};
  const std::vector<Box> chunks = {Box({0, 0, 0}, {1, 4, 8}), Box({1, 0, 0}, {1, 2, 8}),
                                   Box({1, 2, 0}, {1, 2, 8}), Box({2, 0, 0}, {4, 4, 8})};
  // The chunks are what RS((0,1),(1,3)) saves on a 2-mesh.
  EXPECT_EQ(saved_chunks(L({2}, "[RS((0,1),(1,3))]", shape)), chunks);
  EXPECT_NO_THROW(check_chunks_tile(shape, chunks));
  const Layout target = L({2}, "[RS((0,1),(3,1))]", shape);
  const auto r0 = target.local_region(0), r1 = target.local_region(1);
  ASSERT_EQ(r0.size(), 2u);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r0[0].box, Box({0, 0, 0}, {4, 4, 8}));
  EXPECT_EQ(r0[1].box, Box({4, 0, 0}, {1, 2, 8}));
  EXPECT_EQ(r1[0].box, Box({4, 2, 0}, {1, 2, 8}));
  EXPECT_EQ(r1[1].box, Box({5, 0, 0}, {1, 4, 8}));

  const auto store = chunk_store(shape, chunks, arange(0, 192));
  std::vector<double> out;
  const auto runs0 = read_runs(chunks, r0);
  EXPECT_EQ(execute_runs(runs0, store, 144, &out), "");
  EXPECT_EQ(out, arange(0, 144));
  const auto runs1 = read_runs(chunks, r1);
  EXPECT_EQ(execute_runs(runs1, store, 48, &out), "");
  EXPECT_EQ(out, arange(144, 192));
  // Rank 0 reads chunks 0, 1, 2 whole and the first 80 elements of chunk 3: each is
  // contiguous on both sides, so one run per chunk; rank 1 reads one run from chunk 3.
  EXPECT_EQ(runs0, (std::vector<ReadRun>{{0, 0, 0, 32}, {1, 0, 32, 16}, {2, 0, 48, 16},
                                         {3, 0, 64, 80}}));
  EXPECT_EQ(runs1, (std::vector<ReadRun>{{3, 80, 0, 48}}));

  const auto items = plan_read(chunks, r1);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0].chunk, 3);
  EXPECT_EQ(items[0].box, Box({4, 2, 0}, {1, 2, 8}));
  EXPECT_EQ(items[0].src, Box({2, 2, 0}, {1, 2, 8}));
  EXPECT_EQ(items[0].dst_region, 0);
  EXPECT_EQ(items[0].dst, Box({0, 0, 0}, {1, 2, 8}));
  EXPECT_EQ(items[1].dst_region, 1);
  EXPECT_EQ(items[1].to_string(),
            "chunk 3 ((5, 0, 0), (1, 4, 8)) (in chunk ((3, 0, 0), (1, 4, 8))) -> region 1 "
            "((0, 0, 0), (1, 4, 8))");
}

TEST(ReadPlan, AdjacentRunsMerge) {
  // One whole chunk, a target interval spanning several rows and two boxes: one run.
  const Shape shape{6, 4, 8};
  const std::vector<Box> whole = {Box::full(shape)};
  const auto region = L({2}, "[RS((0,1),(1,3))]", shape).local_region(1);  // [48, 192)
  ASSERT_EQ(region.size(), 2u);
  EXPECT_EQ(read_runs(whole, region), (std::vector<ReadRun>{{0, 48, 0, 144}}));
  // Full rows of a row-sharded chunk into a row-sharded target: one run.
  const std::vector<Box> halves = {Box({0, 0}, {2, 6}), Box({2, 0}, {2, 6})};
  EXPECT_EQ(read_runs(halves, {FlatBox{Box({0, 0}, {2, 6}), 0}}),
            (std::vector<ReadRun>{{0, 0, 0, 12}}));
  // Columns cannot merge: one run per row.
  EXPECT_EQ(read_runs(halves, {FlatBox{Box({0, 1}, {2, 2}), 0}}),
            (std::vector<ReadRun>{{0, 1, 0, 2}, {0, 7, 2, 2}}));
  // Rows of two chunks never merge across chunks.
  EXPECT_EQ(read_runs(halves, {FlatBox{Box({1, 0}, {2, 6}), 0}}),
            (std::vector<ReadRun>{{0, 6, 0, 6}, {1, 0, 6, 6}}));
  // The target storage offset (local_start) is honoured.
  EXPECT_EQ(read_runs(halves, {FlatBox{Box({3, 0}, {1, 6}), 10}}),
            (std::vector<ReadRun>{{1, 6, 10, 6}}));
}

TEST(ReadPlan, RankZeroTensor) {
  const std::vector<Box> chunks = {Box()};
  EXPECT_NO_THROW(check_chunks_tile({}, chunks));
  EXPECT_EQ(read_runs(chunks, {FlatBox{Box(), 0}}), (std::vector<ReadRun>{{0, 0, 0, 1}}));
}

TEST(ReadPlan, EverySavedLayoutIntoEveryTargetLayout) {
  // Group the catalogue by global shape: a checkpoint loads into any mesh.
  std::map<Shape, std::vector<Layout>> by_shape;
  for (const auto& g : testutil::catalogue())
    for (const auto& l : g.layouts)
      if (!l.has_partial()) by_shape[l.shape()].push_back(l);
  int64_t combos = 0, reads = 0;
  for (const auto& [shape, layouts] : by_shape) {
    const int64_t n = testutil::prod(shape);
    std::vector<double> global(static_cast<std::size_t>(n));
    for (int64_t i = 0; i < n; ++i) global[i] = static_cast<double>(i) * 1.5 + 2.0;
    for (const auto& saved : layouts) {
      const auto chunks = saved_chunks(saved);
      ASSERT_NO_THROW(check_chunks_tile(shape, chunks)) << saved;
      const auto store = chunk_store(shape, chunks, global);
      for (const auto& target : layouts) {
        ++combos;
        for (int64_t r = 0; r < target.mesh().size(); ++r) {
          SCOPED_TRACE(saved.to_string() + " -> " + target.to_string() + " rank " +
                       std::to_string(r));
          const auto region = target.local_region(r);
          const auto runs = read_runs(chunks, region);
          std::vector<double> out;
          ASSERT_EQ(execute_runs(runs, store, target.local_numel(r), &out), "");
          std::vector<double> want;
          for (auto f : testutil::owned_flat(target, r)) want.push_back(global[f]);
          ASSERT_EQ(out, want);
          EXPECT_EQ(slice_local(target, r, global), want);
          EXPECT_EQ(check_merged(runs), "");
          int64_t total = 0;
          for (const auto& run : runs) total += run.length;
          EXPECT_EQ(total, target.local_numel(r));  // only the needed elements are read
          // The items behind the runs: boxes inside both sides, relative boxes consistent.
          int64_t item_total = 0;
          for (const auto& item : plan_read(chunks, region)) {
            const Box& c = chunks[item.chunk];
            const Box& t = region[item.dst_region].box;
            EXPECT_TRUE(c.contains(item.box) && t.contains(item.box)) << item.to_string();
            for (std::size_t d = 0; d < shape.size(); ++d) {
              EXPECT_EQ(item.src.offsets[d] + c.offsets[d], item.box.offsets[d]);
              EXPECT_EQ(item.dst.offsets[d] + t.offsets[d], item.box.offsets[d]);
            }
            EXPECT_EQ(item.src.sizes, item.box.sizes);
            EXPECT_EQ(item.dst.sizes, item.box.sizes);
            item_total += item.box.numel();
          }
          EXPECT_EQ(item_total, target.local_numel(r));
          ++reads;
        }
        if (HasFailure()) return;
      }
    }
  }
  std::cout << "[ read plan ] " << combos << " saved x target layout pairs, " << reads
            << " rank reads checked\n";
  EXPECT_GT(combos, 1000);
}

// ---------------------------------------------------------------------------------
// Errors

TEST(CheckChunksTile, Errors) {
  const Shape shape{4, 6};
  EXPECT_NO_THROW(check_chunks_tile(shape, {Box({0, 0}, {2, 6}), Box({2, 0}, {2, 6})}));
  // Empty chunks are harmless.
  EXPECT_NO_THROW(
      check_chunks_tile(shape, {Box({0, 0}, {2, 6}), Box({2, 0}, {0, 6}), Box({2, 0}, {2, 6})}));
  EXPECT_EQ(throws_with<ValueError>(
                [&] {
                  check_chunks_tile(shape, {Box({0, 0}, {3, 6}), Box({2, 0}, {2, 6})});
                },
                {"chunks 0", "and 1", "overlap"}),
            "");
  EXPECT_EQ(throws_with<ValueError>(
                [&] { check_chunks_tile(shape, {Box({0, 0}, {2, 6}), Box({2, 0}, {3, 6})}); },
                {"chunk 1", "outside", "[4,6]"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { check_chunks_tile(shape, {Box({0, 0}, {2, 6})}); },
                                    {"12 missing", "12 of the 24"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { check_chunks_tile(shape, {}); }, {"24 missing"}), "");
  EXPECT_EQ(throws_with<ValueError>(
                [&] { check_chunks_tile(shape, {Box({0, 0}, {4, 6}), Box({0}, {1})}); },
                {"chunk 1", "rank"}),
            "");
  EXPECT_EQ(throws_with<ValueError>(
                [&] { check_chunks_tile(shape, {Box({0, 0}, {4, 6}), Box({0, 0}, {-1, 2})}); },
                {"chunk 1", "negative"}),
            "");
  EXPECT_EQ(throws_with<ValueError>(
                [&] { check_chunks_tile(shape, {Box({-1, 0}, {1, 6}), Box({0, 0}, {4, 6})}); },
                {"chunk 0", "negative"}),
            "");
  // Offsets and sizes of different lengths.
  EXPECT_THROW(check_chunks_tile(shape, {Box({0, 0}, {4, 6}), Box({0}, {1, 1})}), ValueError);
  EXPECT_THROW(check_chunks_tile({4, -6}, {}), ValueError);
}

// Found by read_plan_fuzz: chunks of a shape with more than 2^63 elements had numel()
// overflow (UB) when check_chunks_tile skipped empty chunks; two equal 2^64-element chunks
// wrapped to "empty" and their overlap went unreported.
TEST(CheckChunksTile, HugeShapesAreValueErrorsNotOverflow) {
  constexpr int64_t k32 = int64_t{1} << 32;
  const Shape huge{k32, k32};
  const Box whole({0, 0}, {k32, k32});
  EXPECT_EQ(throws_with<ValueError>([&] { check_chunks_tile(huge, {whole, whole}); },
                                    {"chunks 0", "and 1", "overlap"}),
            "");
  EXPECT_EQ(throws_with<ValueError>([&] { check_chunks_tile(huge, {whole}); },
                                    {"shape [4294967296,4294967296]", "too many elements"}),
            "");
  // Disjoint halves whose element counts (2^63 each) do not fit int64_t, nor does their sum.
  EXPECT_EQ(throws_with<ValueError>(
                [&] {
                  check_chunks_tile(huge, {Box({0, 0}, {k32 / 2, k32}),
                                           Box({k32 / 2, 0}, {k32 / 2, k32})});
                },
                {"too many elements"}),
            "");
  // The fuzzer's shape: 36170086419038336^2 elements, one chunk covering it.
  const int64_t big = 36170086419038336;
  EXPECT_THROW(check_chunks_tile({big, big}, {Box({0, 0}, {big, big})}), ValueError);
}

/// A pairwise (quadratic) reference for check_chunks_tile: its message, "" if it passes.
std::string reference_tile_message(const Shape& shape, const std::vector<Box>& chunks) {
  try {
    const Box whole = Box::full(shape);
    int64_t covered = 0;
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      const Box& c = chunks[i];
      HYPER_CHECK_VALUE(c.rank() == whole.rank() && c.offsets.size() == c.sizes.size(), "chunk ",
                        i, " ", c.to_string(), " does not have the rank of shape ",
                        shape_to_string(shape));
      for (std::size_t d = 0; d < c.sizes.size(); ++d)
        HYPER_CHECK_VALUE(c.sizes[d] >= 0 && c.offsets[d] >= 0, "chunk ", i, " ", c.to_string(),
                          " has a negative offset or size");
      HYPER_CHECK_VALUE(whole.contains(c), "chunk ", i, " ", c.to_string(),
                        " lies outside shape ", shape_to_string(shape));
      for (std::size_t j = 0; j < i; ++j)
        HYPER_CHECK_VALUE(!intersect(c, chunks[j]).has_value(), "chunks ", j, " ",
                          chunks[j].to_string(), " and ", i, " ", c.to_string(), " overlap");
      covered += c.numel();
    }
    const int64_t total = numel(shape);
    HYPER_CHECK_VALUE(covered == total, "chunks cover ", covered, " of the ", total,
                      " elements of shape ", shape_to_string(shape), " (",
                      total - covered, " missing)");
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

std::string tile_message(const Shape& shape, const std::vector<Box>& chunks) {
  try {
    check_chunks_tile(shape, chunks);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

/// A g0 x g1 grid of (b0, b1) blocks covering (g0*b0, g1*b1), in a shuffled order.
std::vector<Box> grid_chunks(int64_t g0, int64_t g1, int64_t b0, int64_t b1, uint64_t seed) {
  std::vector<Box> chunks;
  for (int64_t i = 0; i < g0; ++i)
    for (int64_t j = 0; j < g1; ++j) chunks.push_back(Box({i * b0, j * b1}, {b0, b1}));
  std::mt19937_64 rng(seed);
  std::shuffle(chunks.begin(), chunks.end(), rng);
  return chunks;
}

TEST(CheckChunksTile, SameMessagesAsThePairwiseCheck) {
  // Random small chunk lists (valid tilings perturbed: moved, resized, duplicated, dropped,
  // emptied, wrong rank, negative, outside) give exactly the pairwise check's message.
  std::mt19937_64 rng(7);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  int64_t failures_seen = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const std::size_t rank = static_cast<std::size_t>(pick(4));  // 0..3
    Shape shape;
    for (std::size_t d = 0; d < rank; ++d) shape.push_back(1 + pick(5));
    // A grid tiling with random cuts per dim.
    std::vector<std::vector<int64_t>> cuts(rank);
    for (std::size_t d = 0; d < rank; ++d) {
      cuts[d] = {0};
      for (int64_t x = 1; x < shape[d]; ++x)
        if (pick(2)) cuts[d].push_back(x);
      cuts[d].push_back(shape[d]);
    }
    std::vector<Box> chunks = {Box(std::vector<int64_t>(rank), std::vector<int64_t>(rank))};
    for (std::size_t d = 0; d < rank; ++d) {
      std::vector<Box> next;
      for (const auto& b : chunks)
        for (std::size_t k = 0; k + 1 < cuts[d].size(); ++k) {
          Box c = b;
          c.offsets[d] = cuts[d][k];
          c.sizes[d] = cuts[d][k + 1] - cuts[d][k];
          next.push_back(c);
        }
      chunks = next;
    }
    std::shuffle(chunks.begin(), chunks.end(), rng);
    const int edits = static_cast<int>(pick(3));
    for (int e = 0; e < edits && !chunks.empty(); ++e) {
      Box& c = chunks[static_cast<std::size_t>(pick(static_cast<int64_t>(chunks.size())))];
      const std::size_t d = rank ? static_cast<std::size_t>(pick(static_cast<int64_t>(rank))) : 0;
      switch (pick(8)) {
        case 0: if (rank) c.offsets[d] += pick(3) - 1; break;
        case 1: if (rank) c.sizes[d] += pick(3) - 1; break;
        case 2: chunks.push_back(chunks[static_cast<std::size_t>(pick(static_cast<int64_t>(chunks.size())))]); break;
        case 3: chunks.erase(chunks.begin() + pick(static_cast<int64_t>(chunks.size()))); break;
        case 4: if (rank) c.sizes[d] = 0; break;
        case 5: c.offsets.push_back(0), c.sizes.push_back(1); break;
        case 6: if (rank) c.offsets[d] = shape[d] + pick(2); break;
        default: chunks.insert(chunks.begin() + pick(static_cast<int64_t>(chunks.size()) + 1),
                               Box::full(shape)); break;
      }
    }
    const std::string want = reference_tile_message(shape, chunks);
    ASSERT_EQ(tile_message(shape, chunks), want)
        << "shape " << shape_to_string(shape) << " chunks " << chunks.size();
    failures_seen += !want.empty();
  }
  EXPECT_GT(failures_seen, 5000);  // the perturbations do produce errors of every kind
}

TEST(CheckChunksTile, CraftedWideWindowIsNotQuadratic) {
  // Crafted against the sweep's window: one wide chunk and E one-column chunks stay open along
  // dim 0 while N thin chunks pass; comparing each with ~E open chunks would be E * N =
  // 2.4e9 comparisons. A valid tiling of [N + 1, 2E + 1] with 100,002 chunks.
  const int64_t E = 40000, N = 60000;  // N > E: dim 0 has the most distinct offsets
  std::vector<Box> chunks;
  chunks.push_back(Box({0, 0}, {N + 1, E}));                            // wide, open throughout
  for (int64_t i = 0; i < E; ++i) chunks.push_back(Box({0, E + i}, {N + 1, 1}));  // columns
  for (int64_t k = 0; k <= N; ++k) chunks.push_back(Box({k, 2 * E}, {1, 1}));     // thin ones
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message({N + 1, 2 * E + 1}, chunks), "");
  chunks.push_back(Box({N / 2, 2 * E - 1}, {1, 2}));  // overlaps a column and a thin one
  const std::size_t last = chunks.size() - 1;  // the smallest pair: column E-1 (chunk E)
  EXPECT_EQ(tile_message({N + 1, 2 * E + 1}, chunks),
            "chunks " + std::to_string(E) + " " + chunks[E].to_string() + " and " +
                std::to_string(last) + " " + chunks[last].to_string() + " overlap");
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "[ tiling ] crafted 100k-chunk layout checked in " << s << " s\n";
}

TEST(CheckChunksTile, HundredThousandChunks) {
  // 100,000 chunks: a 400 x 250 grid of (2, 4) blocks, shuffled; a (1, N) row of chunks
  // (nothing to sweep along dim 0); a 3-D (1, 1, N) one. A pairwise check would be quadratic
  // (5e9 box intersections); these run in well under a second.
  const auto grid = grid_chunks(400, 250, 2, 4, 1);
  ASSERT_EQ(grid.size(), 100000u);
  EXPECT_EQ(tile_message({800, 1000}, grid), "");
  std::vector<Box> row, col3;
  for (int64_t i = 0; i < 100000; ++i) {
    row.push_back(Box({0, 3 * i}, {1, 3}));
    col3.push_back(Box({0, 0, i}, {1, 1, 1}));
  }
  EXPECT_EQ(tile_message({1, 300000}, row), "");
  EXPECT_EQ(tile_message({1, 1, 100000}, col3), "");
  // Ragged boxes: the flat range of (1000, 100) cut into intervals of 1..250 elements, each
  // decomposed row-major (partial row, full rows, partial row).
  std::vector<Box> ragged;
  {
    const Shape shape{1000, 100};
    std::mt19937_64 rng(3);
    int64_t pos = 0;
    while (pos < 100000) {
      const int64_t end =
          std::min<int64_t>(100000, pos + 1 + static_cast<int64_t>(rng() % 250));
      for (const auto& fb : decompose_interval(shape, Interval{pos, end}))
        ragged.push_back(fb.box);
      pos = end;
    }
    EXPECT_GE(ragged.size(), 1500u);
    EXPECT_EQ(tile_message(shape, ragged), "");
  }

  // One overlap among many: widen one block into its right neighbour. The grid is shuffled,
  // so find both chunks' indices; the message names the pair in (smaller, larger) order.
  auto bad = grid;
  std::size_t k = 0, nb = 0;
  for (std::size_t i = 0; i < bad.size(); ++i) {
    if (bad[i].offsets == std::vector<int64_t>{400, 500}) k = i;
    if (bad[i].offsets == std::vector<int64_t>{400, 504}) nb = i;
  }
  bad[k].sizes[1] = 5;
  const std::size_t lo = std::min(k, nb), hi = std::max(k, nb);
  EXPECT_EQ(tile_message({800, 1000}, bad),
            "chunks " + std::to_string(lo) + " " + bad[lo].to_string() + " and " +
                std::to_string(hi) + " " + bad[hi].to_string() + " overlap");
  // Several overlaps: the one with the smallest larger index is reported, as the pairwise
  // loop did (a duplicate of chunk 5 at the end, and the widened one).
  bad.push_back(bad[5]);
  EXPECT_EQ(tile_message({800, 1000}, bad).rfind("chunks " + std::to_string(lo) + " ", 0), 0u);
  bad[k].sizes[1] = 4;
  bad.back() = bad[5];
  EXPECT_EQ(tile_message({800, 1000}, bad),
            "chunks 5 " + bad[5].to_string() + " and 100000 " + bad[5].to_string() + " overlap");
  // A missing block among many.
  auto missing = grid;
  missing.erase(missing.begin() + 77777);
  EXPECT_EQ(tile_message({800, 1000}, missing),
            "chunks cover 799992 of the 800000 elements of shape [800,1000] (8 missing)");
  // An invalid chunk late in the list: reported unless an overlap comes before it.
  auto outside = grid;
  outside[99999] = Box({799, 999}, {2, 1});
  EXPECT_EQ(tile_message({800, 1000}, outside),
            "chunk 99999 ((799, 999), (2, 1)) lies outside shape [800,1000]");
}

// ---------------------------------------------------------------------------------
// Bounded work on hostile chunk lists (rank 1 and rank >= 3).

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// The overlap message for chunks j < i.
std::string overlap_message(const std::vector<Box>& chunks, std::size_t j, std::size_t i) {
  return "chunks " + std::to_string(j) + " " + chunks[j].to_string() + " and " +
         std::to_string(i) + " " + chunks[i].to_string() + " overlap";
}

/// A valid tiling of [N, N, 2] that defeats the sweep: layer z=0 is one wide chunk (its
/// extent on dim 1 opens the sweep's window to everything); layer z=1 is a staircase of
/// thin rows (i, i, 1)+(N-i, 1, 1) that all stay open along dim 0, with their left parts
/// (0, i, 1)+(i, 1, 1). 2N chunks; the sweep would compare ~N^2 / 2 pairs.
std::vector<Box> crafted_staircase_3d(int64_t N) {
  std::vector<Box> chunks;
  chunks.push_back(Box({0, 0, 0}, {N, N, 1}));
  for (int64_t i = 0; i < N; ++i) {
    chunks.push_back(Box({i, i, 1}, {N - i, 1, 1}));
    if (i > 0) chunks.push_back(Box({0, i, 1}, {i, 1, 1}));
  }
  return chunks;
}

TEST(CheckChunksTile, CraftedRank3SweepKillerIsBounded) {
  const int64_t N = 100000;
  auto chunks = crafted_staircase_3d(N);
  ASSERT_EQ(chunks.size(), 200000u);
  const Shape shape{N, N, 2};
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message(shape, chunks), "");
  std::cout << "[ tiling ] crafted rank-3 staircase, 200,000 chunks, valid: checked in "
            << seconds_since(t0) << " s\n";
  // One more chunk overlapping two thin rows; the reported pair is the first earlier chunk
  // it meets (all earlier ones are disjoint), found here by a linear scan.
  chunks.push_back(Box({N / 2, N / 3, 1}, {2, 2, 1}));
  const std::size_t last = chunks.size() - 1;
  std::size_t j = 0;
  while (!intersect(chunks[j], chunks[last]).has_value()) ++j;
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message(shape, chunks), overlap_message(chunks, j, last));
  std::cout << "[ tiling ] the same with one overlapping chunk: reported in " << seconds_since(t0)
            << " s\n";
  // An early duplicate among them: the smallest later index wins, as in the pairwise loop.
  chunks.insert(chunks.begin() + 1000, chunks[10]);
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message(shape, chunks), overlap_message(chunks, 10, 1000));
  std::cout << "[ tiling ] the same with an early duplicate: reported in " << seconds_since(t0)
            << " s\n";
}

TEST(CheckChunksTile, Rank1AndRank3DuplicatesAreBounded) {
  // n copies of one chunk: every pair overlaps, and the sweep compared each new chunk with
  // every open one (n^2 / 2 comparisons). The pair is (0, 1).
  const std::vector<Box> line(200000, Box({0}, {10}));
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message({10}, line), overlap_message(line, 0, 1));
  std::cout << "[ tiling ] 200,000 equal rank-1 chunks: reported in " << seconds_since(t0)
            << " s\n";
  const std::vector<Box> cube(200000, Box({0, 0, 0}, {2, 3, 4}));
  t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message({2, 3, 4}, cube), overlap_message(cube, 0, 1));
  std::cout << "[ tiling ] 200,000 equal rank-3 chunks: reported in " << seconds_since(t0)
            << " s\n";
}

/// A valid tiling of [3N, N, N] on which every dim is costly for both methods: x in [0, N)
/// holds rows thin on x (z=0) and rows thin on y (z=1) under a filler; x in [N, 2N) plates thin
/// on z; x in [2N, 3N) plates thin on x spanning every z. 4N + 1 chunks, ~N^2 work each way.
std::vector<Box> irregular_everywhere_3d(int64_t N) {
  std::vector<Box> chunks;
  for (int64_t i = 0; i < N; ++i) chunks.push_back(Box({i, 0, 0}, {1, N, 1}));
  for (int64_t j = 0; j < N; ++j) chunks.push_back(Box({0, j, 1}, {N, 1, 1}));
  chunks.push_back(Box({0, 0, 2}, {N, N, N - 2}));
  for (int64_t k = 0; k < N; ++k) chunks.push_back(Box({N, 0, k}, {N, N, 1}));
  for (int64_t m = 0; m < N; ++m) chunks.push_back(Box({2 * N + m, 0, 0}, {1, N, N}));
  return chunks;
}

TEST(CheckChunksTile, TooIrregularIsRefusedNamingTheBound) {
  const int64_t N = 2500;
  const auto chunks = irregular_everywhere_3d(N);
  const Shape shape{3 * N, N, N};
  // The layout does tile (the pairwise check, on a smaller copy, agrees).
  EXPECT_EQ(reference_tile_message({3 * 12, 12, 12}, irregular_everywhere_3d(12)), "");
  EXPECT_EQ(tile_message({3 * 12, 12, 12}, irregular_everywhere_3d(12)), "");
  const int64_t n = static_cast<int64_t>(chunks.size());
  const int64_t budget = internal::tile_check_budget(n, 3);
  EXPECT_EQ(budget, 32 * 10001 * 3 + 65536);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(tile_message(shape, chunks),
            "chunk layout of 10001 non-empty boxes in rank 3 too irregular to check within " +
                std::to_string(8 * budget) + " coordinate comparisons for the sweep and " +
                std::to_string(budget) + " for the split method; the tiling of shape "
                "[7500,2500,2500] is not checked, so the chunks are refused");
  std::cout << "[ tiling ] 10,001-chunk irregular layout refused in " << seconds_since(t0)
            << " s\n";
  // Forced budgets: no budget at all refuses two chunks the sweep has to compare...
  EXPECT_EQ(throws_with<ValueError>(
                [&] {
                  internal::check_chunks_tile({2, 2, 2}, {Box({0, 0, 0}, {2, 2, 2}),
                                                          Box({0, 0, 0}, {2, 2, 2})}, 0, 0);
                },
                {"chunk layout of 2 non-empty boxes in rank 3 too irregular",
                 "within 0 coordinate comparisons for the sweep and 0 for the split method",
                 "shape [2,2,2]"}),
            "");
  // ...but not one with a single non-empty chunk (nothing to compare), nor rank 2.
  EXPECT_NO_THROW(internal::check_chunks_tile(
      {2, 2, 2}, {Box({0, 0, 0}, {2, 2, 2}), Box({1, 0, 0}, {0, 2, 2})}, 0, 0));
  EXPECT_NO_THROW(internal::check_chunks_tile({2, 2}, {Box({0, 0}, {1, 2}), Box({1, 0}, {1, 2})},
                                              0, 0));
  // Rank 1: the split method's 1-D case costs nothing from its budget.
  const std::vector<Box> line = {Box({0}, {3}), Box({2}, {2})};
  EXPECT_EQ(throws_with<ValueError>([&] { internal::check_chunks_tile({4}, line, 0, 0); },
                                    {overlap_message(line, 0, 1)}),
            "");
}

/// The message of the split method alone (sweep budget 0), "" if it passes.
std::string split_message(const Shape& shape, const std::vector<Box>& chunks,
                          int64_t split_budget, int64_t small_group = 8) {
  try {
    internal::check_chunks_tile(shape, chunks, 0, split_budget, small_group);
  } catch (const ValueError& e) {
    return e.what();
  }
  return "";
}

TEST(CheckChunksTile, SplitMethodGivesThePairwiseMessages) {
  // Small random chunk lists of rank 1, 3 and 4 (perturbed grid tilings, and random boxes:
  // empty ones, ones outside the shape or with negative parts, duplicates): the split method
  // alone gives exactly the pairwise check's message; with a small budget it either gives that
  // message too or refuses, never another answer.
  std::mt19937_64 rng(11);
  auto pick = [&](int64_t n) { return static_cast<int64_t>(rng() % static_cast<uint64_t>(n)); };
  int64_t overlaps = 0, passes = 0, refusals = 0, trials = 0;
  for (int trial = 0; trial < 12000; ++trial) {
    const std::size_t rank = trial % 5 == 0 ? 1 : 3 + static_cast<std::size_t>(pick(2));
    Shape shape;
    for (std::size_t d = 0; d < rank; ++d) shape.push_back(1 + pick(4));
    std::vector<Box> chunks;
    if (trial % 2 == 0) {
      // A grid tiling with random cuts, shuffled, then a few edits.
      chunks = {Box(std::vector<int64_t>(rank), std::vector<int64_t>(rank))};
      for (std::size_t d = 0; d < rank; ++d) {
        std::vector<int64_t> cuts = {0};
        for (int64_t x = 1; x < shape[d]; ++x)
          if (pick(2)) cuts.push_back(x);
        cuts.push_back(shape[d]);
        std::vector<Box> next;
        for (const auto& b : chunks)
          for (std::size_t k = 0; k + 1 < cuts.size(); ++k) {
            Box c = b;
            c.offsets[d] = cuts[k];
            c.sizes[d] = cuts[k + 1] - cuts[k];
            next.push_back(c);
          }
        chunks = next;
      }
      std::shuffle(chunks.begin(), chunks.end(), rng);
      const int edits = static_cast<int>(pick(3));
      for (int e = 0; e < edits; ++e) {
        Box& c = chunks[static_cast<std::size_t>(pick(static_cast<int64_t>(chunks.size())))];
        const std::size_t d = static_cast<std::size_t>(pick(static_cast<int64_t>(rank)));
        switch (pick(5)) {
          case 0: c.offsets[d] += pick(3) - 1; break;
          case 1: c.sizes[d] += pick(3) - 1; break;
          case 2: c.sizes[d] = 0; break;
          case 3: chunks.push_back(c); break;
          default: c.offsets[d] = shape[d] + pick(2) - 1; break;
        }
      }
    } else {
      // Random boxes inside the shape (some empty); rarely one reaching past the end or
      // starting at -1.
      const int64_t n = 2 + pick(trial % 4 == 1 ? 10 : 40);
      for (int64_t q = 0; q < n; ++q) {
        Box b{std::vector<int64_t>(rank), std::vector<int64_t>(rank)};
        for (std::size_t d = 0; d < rank; ++d) {
          b.offsets[d] = pick(shape[d]);
          b.sizes[d] = 1 + pick(shape[d] - b.offsets[d]);
        }
        if (pick(10) == 0) b.sizes[static_cast<std::size_t>(pick(static_cast<int64_t>(rank)))] = 0;
        const int64_t odd = pick(80);
        if (odd == 0) b.offsets[0] = -1;
        if (odd == 1) b.sizes[rank - 1] = shape[rank - 1] + 1;
        chunks.push_back(b);
      }
    }
    const std::string want = reference_tile_message(shape, chunks);
    const int64_t unlimited = std::numeric_limits<int64_t>::max() / 2;
    ASSERT_EQ(split_message(shape, chunks, unlimited), want)
        << "shape " << shape_to_string(shape) << " " << chunks.size() << " chunks";
    // Without the pair-by-pair small groups: the splits down to two dims decide everything.
    ASSERT_EQ(split_message(shape, chunks, unlimited, 0), want)
        << "shape " << shape_to_string(shape) << " " << chunks.size() << " chunks";
    ASSERT_EQ(tile_message(shape, chunks), want);
    const std::string tight = split_message(shape, chunks, pick(60), pick(2) * 8);
    if (tight != want) {
      ASSERT_EQ(tight.rfind("chunk layout of ", 0), 0u) << tight << " vs " << want;
      ++refusals;
    }
    ++trials;
    overlaps += want.find("overlap") != std::string::npos;
    passes += want.empty();
  }
  std::cout << "[ tiling ] split method: " << trials << " lists, " << overlaps << " overlaps, "
            << passes << " tilings, " << refusals << " refusals under a tight budget\n";
  EXPECT_GT(overlaps, 4000);
  EXPECT_GT(passes, 1000);
  EXPECT_GT(refusals, 100);
}

/// Chunks a layout saves: every rank's region boxes, replicas de-duplicated (sorted set).
std::vector<Box> saved_chunks_fast(const Layout& saved) {
  std::vector<Box> chunks;
  std::set<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
  for (int64_t r = 0; r < saved.mesh().size(); ++r)
    for (const auto& fb : saved.local_region(r))
      if (seen.insert({fb.box.offsets, fb.box.sizes}).second) chunks.push_back(fb.box);
  return chunks;
}

TEST(CheckChunksTile, LayoutsHyperWritesAreNeverRefused) {
  // Shard/Replicate grids and RaggedShard staircases on meshes up to 1024 ranks, rank 1 to 5,
  // and every layout of the test catalogue: the default check accepts them, and each method
  // alone decides them within 32 n r units (the budget without its constant), so the refusal
  // cannot fire.
  std::mt19937_64 rng(5);
  std::vector<Layout> layouts;
  layouts.push_back(L({1024}, "[S(0)]", {5000}));
  layouts.push_back(L({32, 32}, "[S(0),S(0)]", {3000}));
  layouts.push_back(L({8, 8, 16}, "[S(0),S(1),S(2)]", {100, 37, 50}));
  layouts.push_back(L({8, 8, 16}, "[S(2),S(1),S(2)]", {9, 40, 500}));
  layouts.push_back(L({4, 16, 16}, "[R,S(0),S(3)]", {64, 3, 5, 48}));
  layouts.push_back(L({4, 4, 4, 4, 4}, "[S(0),S(1),S(2),S(3),S(4)]", {7, 9, 4, 5, 13}));
  layouts.push_back(L({2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, "[S(0),S(1),S(2),S(0),S(1),S(2),S(0),S(1),S(2),R]",
                      {33, 17, 64}));
  for (const int64_t ranks : {2, 7, 64, 1000, 1024}) {
    for (const std::vector<int64_t>& dims :
         std::vector<std::vector<int64_t>>{{0}, {0, 1}, {0, 1, 2}}) {
      // One unit is one cell (a [3] row, a [5,3] block or a [7,5,3] slab); units of 0..99
      // cells make each rank's interval a staircase of up to 5 boxes.
      const int64_t cells = dims.size() == 1 ? 1 : dims.size() == 2 ? 7 : 35;
      std::vector<int64_t> units(static_cast<std::size_t>(ranks));
      int64_t sum = 0;
      for (auto& u : units) sum += (u = static_cast<int64_t>(rng() % 100));
      units[0] += cells - sum % cells;
      sum += cells - sum % cells;
      const Shape shape{sum / cells, 7, 5, 3};
      layouts.emplace_back(MeshTopology({ranks}), Placements{RaggedShard(dims, units)}, shape);
      if (dims.size() == 3)
        layouts.emplace_back(MeshTopology({2, ranks}), Placements{Replicate(), RaggedShard(dims, units)},
                             shape);
    }
  }
  for (const auto& g : testutil::catalogue())
    for (const auto& l : g.layouts)
      if (!l.has_partial()) layouts.push_back(l);
  int64_t total = 0, most = 0;
  double slowest = 0;
  for (const auto& layout : layouts) {
    SCOPED_TRACE(layout.to_string());
    const auto chunks = saved_chunks_fast(layout);
    const Shape& shape = layout.shape();
    int64_t non_empty = 0;
    for (const auto& c : chunks) non_empty += !c.empty();
    // The linear part of the budget only (no 2^16 constant): a margin for every such layout.
    const int64_t budget = 32 * non_empty * static_cast<int64_t>(std::max<std::size_t>(shape.size(), 1));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(tile_message(shape, chunks), "");
    EXPECT_NO_THROW(internal::check_chunks_tile(shape, chunks, budget, 0));  // the sweep alone
    EXPECT_EQ(split_message(shape, chunks, budget), "");                     // the split alone
    if (numel(shape) == 0) continue;
    // An overlap added at the end is found by each.
    auto bad = chunks;
    bad.push_back(Box::full(shape));
    std::size_t j = 0;
    while (bad[j].empty()) ++j;
    const std::string want = overlap_message(bad, j, bad.size() - 1);
    EXPECT_EQ(tile_message(shape, bad), want);
    EXPECT_EQ(split_message(shape, bad, budget), want);
    total += static_cast<int64_t>(chunks.size());
    most = std::max(most, static_cast<int64_t>(chunks.size()));
    slowest = std::max(slowest, seconds_since(t0));
  }
  std::cout << "[ tiling ] " << layouts.size() << " layouts written by hyper, " << total
            << " chunks (at most " << most << " in one), slowest " << slowest << " s\n";
  EXPECT_GE(most, 3000);
}

TEST(PlanRead, Errors) {
  const std::vector<Box> chunks = {Box({0, 0}, {2, 6})};  // rows 2..3 missing
  const std::vector<FlatBox> target = {FlatBox{Box({1, 0}, {2, 6}), 0}};
  EXPECT_EQ(throws_with<ValueError>([&] { plan_read(chunks, target); },
                                    {"((1, 0), (2, 6))", "6 of 12", "missing"}),
            "");
  EXPECT_THROW(read_runs(chunks, target), ValueError);
  EXPECT_EQ(throws_with<ValueError>(
                [&] { plan_read(chunks, {FlatBox{Box({0}, {2}), 0}}); }, {"differ in rank"}),
            "");
  // An empty target region reads nothing.
  EXPECT_TRUE(plan_read(chunks, {}).empty());
  EXPECT_TRUE(read_runs(chunks, {}).empty());
}

}  // namespace
}  // namespace hyper
