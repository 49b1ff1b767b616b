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

/// The pairwise check check_chunks_tile replaced (quadratic): its message, "" if it passes.
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
  // dim 0 while N thin chunks pass; each used to be compared with ~E open chunks (E * N =
  // 2.4e9 comparisons). A valid tiling of [N + 1, 2E + 1] with 100,002 chunks.
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
  // (nothing to sweep along dim 0); a 3-D (1, 1, N) one. The pairwise check was quadratic
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
