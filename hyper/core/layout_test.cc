// Tests of hyper::Layout: validation (seed 000 §3.1 / §9.3), the three views of §4.2,
// tensor_map, every rank's local region (torch.chunk Shard semantics and RaggedShard
// flat intervals, §3.2), the text form, value semantics and every error.

#include "hyper/core/layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_util.h"
#include "hyper/core/geometry.h"
#include "hyper/core/redistribute_plan.h"


namespace hyper {
namespace {

using I = std::vector<int64_t>;
using TensorMap = std::vector<std::vector<int64_t>>;

Layout L(const I& mesh, const Placements& ps, const Shape& shape) {
  return Layout(MeshTopology(mesh), ps, shape);
}

// ---------------------------------------------------------------------------------
// Independent oracles.

// Size of piece i of torch.chunk(n, k) (DTensor pads missing pieces with empty ones):
// chunk = ceil(n / k); piece i holds clamp(n - i * chunk, 0, chunk) elements.
int64_t chunk_size_oracle(int64_t n, int64_t k, int64_t i) {
  const int64_t chunk = n == 0 ? 0 : (n - 1) / k + 1;
  const int64_t left = n - i * chunk;
  return left <= 0 ? 0 : (left < chunk ? left : chunk);
}
int64_t chunk_start_oracle(int64_t n, int64_t k, int64_t i) {
  int64_t s = 0;
  for (int64_t j = 0; j < i; ++j) s += chunk_size_oracle(n, k, j);
  return s;
}

// The box of a non-ragged layout's rank: for each tensor dim, apply the Shards of the
// mesh dims that shard it in mesh-dim order, each a torch.chunk of the current piece.
Box box_oracle(const I& mesh, const Placements& ps, const Shape& shape, const I& coord) {
  I lo(shape.size(), 0), len = shape;
  for (std::size_t m = 0; m < ps.size(); ++m) {
    if (!ps[m].is_shard()) continue;
    int64_t d = ps[m].dim();
    if (d < 0) d += static_cast<int64_t>(shape.size());
    lo[d] += chunk_start_oracle(len[d], mesh[m], coord[m]);
    len[d] = chunk_size_oracle(len[d], mesh[m], coord[m]);
  }
  return Box(lo, len);
}

// Seed §3.2, written out literally.
Interval ragged_oracle(const Shape& shape, std::size_t k, const I& units, std::size_t r) {
  int64_t prefix_cells = 1, suffix_numel = 1, total = 0, before = 0;
  for (std::size_t d = 0; d < shape.size(); ++d) (d < k ? prefix_cells : suffix_numel) *= shape[d];
  for (std::size_t i = 0; i < units.size(); ++i) {
    total += units[i];
    if (i < r) before += units[i];
  }
  const int64_t cells_per_unit = prefix_cells / total;
  const int64_t prefix_start = before * cells_per_unit;
  const int64_t local_prefix = units[r] * cells_per_unit;
  return {prefix_start * suffix_numel, (prefix_start + local_prefix) * suffix_numel};
}

// Row-major flat indices of the elements of a box inside `shape`.
std::vector<int64_t> flat_indices(const Shape& shape, const Box& b) {
  std::vector<int64_t> out;
  if (b.empty()) return out;
  I idx(b.sizes.size(), 0);
  while (true) {
    int64_t f = 0;
    for (std::size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + b.offsets[d] + idx[d];
    out.push_back(f);
    int64_t d = static_cast<int64_t>(idx.size()) - 1;
    while (d >= 0 && ++idx[d] == b.sizes[d]) idx[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

// A ragged local region, checked without decompose_interval: its boxes (none empty),
// read in order and row-major, are exactly the flat elements [iv.start, iv.end) of the
// global tensor, and their local ranges run 0, 1, ... without gaps.
void expect_region_is_interval(const std::vector<FlatBox>& region, const Shape& shape,
                               const Interval& iv) {
  std::vector<int64_t> flat;
  int64_t local = 0;
  for (const auto& fb : region) {
    EXPECT_FALSE(fb.box.empty()) << fb.box.to_string();
    EXPECT_EQ(fb.local_start, local);
    local = fb.local_end();
    for (int64_t f : flat_indices(shape, fb.box)) flat.push_back(f);
  }
  std::vector<int64_t> expect;
  for (int64_t f = iv.start; f < iv.end; ++f) expect.push_back(f);
  EXPECT_EQ(flat, expect) << "interval [" << iv.start << ", " << iv.end << ")";
}

// ---------------------------------------------------------------------------------
// Validation.

TEST(LayoutTest, ValidLayoutsBuild) {
  EXPECT_NO_THROW(L({2, 2}, {Shard(0), Shard(1)}, {4, 6}));
  EXPECT_NO_THROW(L({2, 2}, {Shard(0), Shard(0)}, {7}));
  EXPECT_NO_THROW(L({2, 2}, {Partial(), Replicate()}, {3}));
  EXPECT_NO_THROW(L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8}));
  EXPECT_NO_THROW(L({2, 2}, {Replicate(), RaggedShard({0, 1}, {1, 2})}, {6, 4, 8}));
  EXPECT_NO_THROW(L({4}, {RaggedShard({0, 1}, {2, 3, 0, 5})}, {10, 4}));
  EXPECT_NO_THROW(L({2}, {RaggedShard({0, 1}, {1, 1})}, {3, 2}));  // dims == whole rank
  EXPECT_NO_THROW(L({2}, {Replicate()}, {}));                        // 0-D tensor
  EXPECT_NO_THROW(L({2}, {Shard(0)}, {0, 3}));                       // empty tensor
}

TEST(LayoutTest, PlacementCountMustMatchMeshNdim) {
  EXPECT_THROW_MSG(L({2, 2}, {Shard(0)}, {4}), ValueError,
                   "layout has 1 placements [S(0)] for a 2-D mesh [2,2]");
  EXPECT_THROW_MSG(L({2}, {Shard(0), Replicate(), Replicate()}, {4}), ValueError,
                   "layout has 3 placements [S(0),R,R] for a 1-D mesh [2]");
  EXPECT_THROW_MSG(L({2}, {}, {4}), ValueError, "layout has 0 placements [] for a 1-D mesh");
}

TEST(LayoutTest, ShardDimOutOfRange) {
  EXPECT_THROW_MSG(L({2}, {Shard(2)}, {4, 4}), ValueError,
                   "Shard(2) on mesh dim 0 is out of range for a tensor of shape [4,4]");
  EXPECT_THROW_MSG(L({2, 2}, {Replicate(), Shard(-3)}, {4, 4}), ValueError,
                   "Shard(-3) on mesh dim 1 is out of range for a tensor of shape [4,4]");
  EXPECT_THROW_MSG(L({2}, {Shard(0)}, {}), ValueError, "Shard(0) on mesh dim 0");
  EXPECT_THROW_MSG(L({2}, {Shard(-1)}, {}), ValueError, "shape []");
  EXPECT_THROW_MSG(L({2}, {Shard(5)}, {4}), std::invalid_argument, "Shard(5)");
}

TEST(LayoutTest, RaggedShardCombinationErrors) {
  // Two RaggedShards.
  EXPECT_THROW_MSG(
      L({2, 2}, {RaggedShard({0}, {1, 2}), RaggedShard({0}, {1, 1})}, {6, 4}), ValueError,
      "at most one RaggedShard; got [RS((0,), (1, 2)),RS((0,), (1, 1))]");
  // RaggedShard beside Partial.
  EXPECT_THROW_MSG(L({2, 2}, {RaggedShard({0}, {1, 2}), Partial()}, {6, 4}), ValueError,
                   "must be Replicate or Shard; mesh dim 1 is P(sum) in [RS((0,), (1, 2)),P(sum)]");
  EXPECT_THROW_MSG(L({2, 2, 2}, {Replicate(), RaggedShard({0}, {1, 2}), Partial("avg")},
                     {6, 4}),
                   ValueError, "mesh dim 2 is P(avg)");
  // Dims past the tensor's rank.
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0, 1}, {1, 1})}, {4}), ValueError,
                   "shards dims (0, 1) but the tensor of shape [4] has only 1 dims");
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0}, {1, 1})}, {}), ValueError, "has only 0 dims");
  // len(local_units) != mesh dim size (ragged_cases.json).
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0}, {1, 1, 1})}, {6, 4, 8}), ValueError,
                   "RS((0,), (1, 1, 1)) has 3 local_units but its mesh dim has 2 ranks");
  EXPECT_THROW_MSG(L({3, 2}, {Replicate(), RaggedShard({0}, {1, 1, 1})}, {6, 4, 8}), ValueError,
                   "has 3 local_units but its mesh dim has 2 ranks");
  // Prefix cells not divisible by sum(units) (ragged_cases.json).
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0}, {1, 2})}, {5, 2}), ValueError,
                   "5 prefix cells are not divisible by 3 total units");
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0}, {1, 2})}, {5, 2}), ValueError, "shape [5,2]");
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0, 1}, {1, 4})}, {3, 3, 2}), ValueError,
                   "9 prefix cells are not divisible by 5");
  EXPECT_THROW_MSG(L({2}, {RaggedShard({0}, {1, 2})}, {5, 2}), std::invalid_argument,
                   "not divisible");
}

TEST(LayoutTest, ShapeErrors) {
  EXPECT_THROW_MSG(L({2}, {Replicate()}, {4, -1}), ValueError,
                   "global shape [4,-1] has negative size -1 at dim 1");
  EXPECT_THROW_MSG(L({2}, {Shard(0)}, {-3}), ValueError, "negative size -3 at dim 0");
  EXPECT_THROW_MSG(L({2}, {Replicate()}, {int64_t{1} << 31, int64_t{1} << 31, 4}), ValueError,
                   "too many elements");
}

TEST(LayoutTest, NegativeShardDimsAreNormalised) {
  Layout a = L({2}, {Shard(-1)}, {4, 6, 8});
  EXPECT_EQ(a.placements(), (Placements{Shard(2)}));
  EXPECT_EQ(a, L({2}, {Shard(2)}, {4, 6, 8}));
  EXPECT_EQ(a.hash(), L({2}, {Shard(2)}, {4, 6, 8}).hash());
  EXPECT_EQ(a.to_string(), "mesh=[2] placements=[S(2)] shape=[4,6,8]");
  Layout b = L({2, 2}, {Shard(-2), Shard(-1)}, {4, 6});
  EXPECT_EQ(b.placements(), (Placements{Shard(0), Shard(1)}));
  EXPECT_EQ(L({2}, {Shard(-1)}, {5}).placements(), (Placements{Shard(0)}));
}

// ---------------------------------------------------------------------------------
// Views.

TEST(LayoutTest, ThreeViewsOfARaggedLayout) {
  const Placement rs = RaggedShard({0}, {1, 2});
  Layout l = L({2, 2}, {Replicate(), rs}, {6, 4, 8});
  EXPECT_EQ(l.placements(), (Placements{Replicate(), rs}));  // lossless
  ASSERT_TRUE(l.ragged().has_value());
  EXPECT_TRUE(l.is_ragged());
  EXPECT_EQ(l.ragged()->mesh_dim, 1);
  EXPECT_EQ(l.ragged()->placement, rs);
  EXPECT_EQ(*l.ragged(), (RaggedInfo{1, rs}));
  EXPECT_EQ(l.normal_placements(), (Placements{Replicate(), Replicate()}));
  Layout n = l.normal_layout();
  EXPECT_FALSE(n.is_ragged());
  EXPECT_FALSE(n.ragged().has_value());
  EXPECT_EQ(n, L({2, 2}, {Replicate(), Replicate()}, {6, 4, 8}));
  EXPECT_EQ(n.mesh(), l.mesh());
  EXPECT_EQ(n.shape(), l.shape());
  EXPECT_TRUE(n.is_replicated());
  EXPECT_FALSE(l.is_replicated());
  EXPECT_FALSE(l.has_partial());
  EXPECT_EQ(l.numel(), 192);

  Layout r0 = L({2}, {RaggedShard({0, 1}, {1, 2})}, {6, 4, 8});
  EXPECT_EQ(r0.ragged()->mesh_dim, 0);
  EXPECT_EQ(r0.normal_placements(), (Placements{Replicate()}));
}

TEST(LayoutTest, ViewsOfANormalLayout) {
  Layout l = L({2, 2}, {Partial("max"), Shard(-1)}, {4, 6});
  EXPECT_FALSE(l.is_ragged());
  EXPECT_FALSE(l.ragged().has_value());
  EXPECT_EQ(l.normal_placements(), l.placements());
  EXPECT_EQ(l.normal_placements(), (Placements{Partial("max"), Shard(1)}));
  EXPECT_EQ(l.normal_layout(), l);
  EXPECT_TRUE(l.has_partial());
  EXPECT_FALSE(l.is_replicated());
  EXPECT_EQ(l.numel(), 24);
  EXPECT_EQ(l.mesh(), MeshTopology({2, 2}));
  EXPECT_EQ(l.shape(), (Shape{4, 6}));
  EXPECT_TRUE(L({3}, {Replicate()}, {2}).is_replicated());
  EXPECT_EQ(L({3}, {Replicate()}, {}).numel(), 1);
  EXPECT_EQ(L({3}, {Replicate()}, {0, 5}).numel(), 0);
}

TEST(LayoutTest, TensorMapFollowsTheSeedConvention) {
  EXPECT_EQ(L({2, 2}, {Shard(0), Shard(1)}, {4, 4}).tensor_map(), (TensorMap{{1}, {0}}));
  EXPECT_EQ(L({2, 2}, {Shard(1), Shard(0)}, {4, 4}).tensor_map(), (TensorMap{{0}, {1}}));
  EXPECT_EQ(L({2, 2}, {Shard(0), Shard(0)}, {4, 4}).tensor_map(), (TensorMap{{1, 0}, {-1}}));
  EXPECT_EQ(L({2, 2}, {Replicate(), Shard(0)}, {4, 4}).tensor_map(), (TensorMap{{0}, {-1}}));
  EXPECT_EQ(L({2, 2}, {Shard(1), Replicate()}, {4, 4}).tensor_map(), (TensorMap{{-1}, {1}}));
  EXPECT_EQ(L({2, 2}, {Partial(), Shard(-1)}, {4, 4}).tensor_map(), (TensorMap{{-1}, {0}}));
  EXPECT_EQ(L({2, 2}, {Replicate(), Replicate()}, {4, 4}).tensor_map(),
            (TensorMap{{-1}, {-1}}));
  EXPECT_EQ(L({2}, {Shard(-1)}, {2, 3, 4}).tensor_map(), (TensorMap{{-1}, {-1}, {0}}));
  EXPECT_EQ(L({2, 2, 2}, {Shard(0), Replicate(), Shard(0)}, {8, 2, 2}).tensor_map(),
            (TensorMap{{2, 0}, {-1}, {-1}}));
  EXPECT_EQ(L({2, 2, 2}, {Shard(2), Shard(0), Shard(1)}, {4, 4, 4}).tensor_map(),
            (TensorMap{{1}, {0}, {2}}));
  EXPECT_EQ(L({2}, {Replicate()}, {}).tensor_map(), TensorMap{});
  // Ragged: built from the normal view, so the ragged mesh dim is not a Shard.
  EXPECT_EQ(L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8}).tensor_map(),
            (TensorMap{{-1}, {-1}, {-1}}));
  EXPECT_EQ(L({2}, {RaggedShard({0, 1}, {1, 2})}, {6, 4, 8}).tensor_map(),
            (TensorMap{{-1}, {-1}, {-1}}));
}

// ---------------------------------------------------------------------------------
// Local regions of Shard layouts (torch.chunk semantics).

TEST(LayoutTest, ChunkOracleSanity) {
  // The oracle itself against hand-written torch.chunk sizes.
  EXPECT_EQ((I{chunk_size_oracle(5, 4, 0), chunk_size_oracle(5, 4, 1), chunk_size_oracle(5, 4, 2),
               chunk_size_oracle(5, 4, 3)}),
            (I{2, 2, 1, 0}));
  EXPECT_EQ((I{chunk_size_oracle(2, 4, 0), chunk_size_oracle(2, 4, 1), chunk_size_oracle(2, 4, 2),
               chunk_size_oracle(2, 4, 3)}),
            (I{1, 1, 0, 0}));
  EXPECT_EQ(chunk_size_oracle(0, 3, 0), 0);
  EXPECT_EQ(chunk_size_oracle(7, 3, 2), 1);  // 3, 3, 1
}

TEST(LayoutTest, ShardLocalShapesUneven) {
  auto sizes = [](int64_t n, int64_t k) {
    Layout l = L({k}, {Shard(0)}, {n, 3});
    I out;
    for (int64_t i = 0; i < k; ++i) {
      EXPECT_EQ(l.local_shape(i)[1], 3);
      out.push_back(l.local_shape(i)[0]);
    }
    return out;
  };
  EXPECT_EQ(sizes(5, 4), (I{2, 2, 1, 0}));
  EXPECT_EQ(sizes(2, 4), (I{1, 1, 0, 0}));
  EXPECT_EQ(sizes(0, 4), (I{0, 0, 0, 0}));
  EXPECT_EQ(sizes(8, 4), (I{2, 2, 2, 2}));
  EXPECT_EQ(sizes(7, 3), (I{3, 3, 1}));
  EXPECT_EQ(sizes(1, 1), (I{1}));

  Layout l = L({4}, {Shard(0)}, {5});
  EXPECT_EQ(l.local_box(0), Box({0}, {2}));
  EXPECT_EQ(l.local_box(1), Box({2}, {2}));
  EXPECT_EQ(l.local_box(2), Box({4}, {1}));
  EXPECT_EQ(l.local_box(3).sizes, (I{0}));
  EXPECT_EQ(l.local_numel(3), 0);
  EXPECT_TRUE(l.local_region(3).empty());
  ASSERT_EQ(l.local_region(2).size(), 1u);
  EXPECT_EQ(l.local_region(2)[0], (FlatBox{Box({4}, {1}), 0}));
}

TEST(LayoutTest, NestedShardsSplitInMeshDimOrder) {
  // Dim size 7 on mesh (2,2), [S(0),S(0)]: mesh dim 0 chunks 4,3; then 2,2 / 2,1.
  Layout l = L({2, 2}, {Shard(0), Shard(0)}, {7, 2});
  EXPECT_EQ(l.local_box(0), Box({0, 0}, {2, 2}));
  EXPECT_EQ(l.local_box(1), Box({2, 0}, {2, 2}));
  EXPECT_EQ(l.local_box(2), Box({4, 0}, {2, 2}));
  EXPECT_EQ(l.local_box(3), Box({6, 0}, {1, 2}));
  EXPECT_EQ(l.local_shape(3), (Shape{1, 2}));
  EXPECT_EQ(l.local_numel(3), 2);
  // [S(0),S(1)] on (2,3) mesh.
  Layout m = L({2, 3}, {Shard(0), Shard(1)}, {5, 7});
  EXPECT_EQ(m.local_box(0), Box({0, 0}, {3, 3}));
  EXPECT_EQ(m.local_box(2), Box({0, 6}, {3, 1}));
  EXPECT_EQ(m.local_box(4), Box({3, 3}, {2, 3}));
  EXPECT_EQ(m.local_shape(5), (Shape{2, 1}));
  // Replicate / Partial do not split.
  Layout r = L({2, 2}, {Partial(), Shard(1)}, {3, 5});
  EXPECT_EQ(r.local_box(0), Box({0, 0}, {3, 3}));
  EXPECT_EQ(r.local_box(2), Box({0, 0}, {3, 3}));
  EXPECT_EQ(r.local_box(3), Box({0, 3}, {3, 2}));
  // 0-D tensor: one box with no dims and one element.
  Layout s = L({2}, {Replicate()}, {});
  EXPECT_EQ(s.local_box(1), Box());
  EXPECT_EQ(s.local_shape(1), Shape{});
  EXPECT_EQ(s.local_numel(1), 1);
  ASSERT_EQ(s.local_region(1).size(), 1u);
}

// Exhaustive over small meshes, placements and shapes: boxes against the oracle, and the
// boxes of every rank cover each element exactly (product of non-Shard mesh dims) times.
TEST(LayoutTest, ShardBoxesMatchOracleExhaustively) {
  const std::vector<I> meshes = {{1}, {2}, {3}, {4}, {2, 2}, {2, 3}, {3, 2}, {2, 2, 2}};
  const std::vector<Shape> shapes = {{0}, {1}, {5}, {7}, {2, 3}, {5, 4}, {3, 0}, {2, 3, 5}};
  int checked = 0;
  for (const auto& mesh : meshes) {
    // Options per mesh dim: R, P, S(0), S(1), S(-1).
    const std::vector<Placement> opts = {Replicate(), Partial(), Shard(0), Shard(1), Shard(-1)};
    std::vector<std::size_t> pick(mesh.size(), 0);
    while (true) {
      Placements ps;
      for (auto i : pick) ps.push_back(opts[i]);
      for (const auto& shape : shapes) {
        bool ok = true;
        for (const auto& p : ps)
          if (p.is_shard() && (p.dim() >= static_cast<int64_t>(shape.size()) ||
                               p.dim() < -static_cast<int64_t>(shape.size())))
            ok = false;
        if (!ok) {
          EXPECT_THROW(Layout(MeshTopology(mesh), ps, shape), ValueError);
          continue;
        }
        Layout l(MeshTopology(mesh), ps, shape);
        SCOPED_TRACE(l.to_string());
        int64_t copies = 1;
        for (std::size_t m = 0; m < mesh.size(); ++m)
          if (!ps[m].is_shard()) copies *= mesh[m];
        const int64_t n = l.numel();
        std::vector<int64_t> count(static_cast<std::size_t>(n), 0);
        for (int64_t i = 0; i < l.mesh().size(); ++i) {
          const Box expect = box_oracle(mesh, ps, shape, l.mesh().coordinate_at(i));
          const Box got = l.local_box(i);
          EXPECT_EQ(got.sizes, expect.sizes) << "index " << i;
          if (!expect.empty()) {
            EXPECT_EQ(got.offsets, expect.offsets) << "index " << i;
          }
          EXPECT_EQ(l.local_shape(i), expect.sizes);
          EXPECT_EQ(l.local_numel(i), expect.numel());
          const auto region = l.local_region(i);
          if (expect.empty()) {
            EXPECT_TRUE(region.empty());
          } else {
            ASSERT_EQ(region.size(), 1u);
            EXPECT_EQ(region[0].box, got);
            EXPECT_EQ(region[0].local_start, 0);
          }
          for (int64_t f : flat_indices(shape, got)) ++count[static_cast<std::size_t>(f)];
        }
        for (int64_t f = 0; f < n; ++f) EXPECT_EQ(count[f], copies) << "element " << f;
        ++checked;
      }
      std::size_t d = 0;
      while (d < pick.size() && ++pick[d] == opts.size()) pick[d++] = 0;
      if (d == pick.size()) break;
    }
  }
  EXPECT_GT(checked, 1000);
}

// ---------------------------------------------------------------------------------
// Local regions of RaggedShard layouts.

struct IntervalCase {
  Shape shape;
  I dims, units;
  std::vector<Interval> intervals;
};

// ragged_cases.json "intervals".
const std::vector<IntervalCase>& interval_cases() {
  static const std::vector<IntervalCase> cases = {
      {{6, 4, 8}, {0, 1}, {1, 2}, {{0, 64}, {64, 192}}},
      {{10, 4}, {0, 1}, {2, 3, 0, 5}, {{0, 8}, {8, 20}, {20, 20}, {20, 40}}},
      {{6, 4, 8}, {0, 1}, {1, 3}, {{0, 48}, {48, 192}}},
  };
  return cases;
}

TEST(LayoutTest, RaggedIntervalsOfTheWorkedCases) {
  for (const auto& c : interval_cases()) {
    const int64_t p = static_cast<int64_t>(c.units.size());
    Layout l = L({p}, {RaggedShard(c.dims, c.units)}, c.shape);
    SCOPED_TRACE(l.to_string());
    for (int64_t r = 0; r < p; ++r) {
      const Interval iv = l.ragged_interval(r);
      EXPECT_EQ(iv, c.intervals[r]) << "rank " << r;
      EXPECT_EQ(iv, ragged_oracle(c.shape, c.dims.size(), c.units, r));
      EXPECT_EQ(l.local_shape(r), (Shape{iv.size()}));
      EXPECT_EQ(l.local_numel(r), iv.size());
      expect_region_is_interval(l.local_region(r), c.shape, iv);
      EXPECT_THROW_MSG(l.local_box(r), ValueError, "not defined for the ragged layout");
    }
  }
}

TEST(LayoutTest, RaggedIntervalDependsOnlyOnTheRaggedCoordinate) {
  for (const auto& c : interval_cases()) {
    const int64_t p = static_cast<int64_t>(c.units.size());
    const Placement rs = RaggedShard(c.dims, c.units);
    // Ragged on mesh dim 1, Replicate on mesh dim 0.
    Layout a = L({2, p}, {Replicate(), rs}, c.shape);
    // Ragged on mesh dim 0, Replicate on mesh dim 1.
    Layout b = L({p, 3}, {rs, Replicate()}, c.shape);
    SCOPED_TRACE(a.to_string());
    for (int64_t i = 0; i < a.mesh().size(); ++i) {
      const int64_t r = a.mesh().coordinate_at(i)[1];
      EXPECT_EQ(a.ragged_interval(i), c.intervals[r]) << "index " << i;
      EXPECT_EQ(a.local_numel(i), c.intervals[r].size());
      expect_region_is_interval(a.local_region(i), c.shape, c.intervals[r]);
    }
    for (int64_t i = 0; i < b.mesh().size(); ++i) {
      const int64_t r = b.mesh().coordinate_at(i)[0];
      EXPECT_EQ(b.ragged_interval(i), c.intervals[r]) << "index " << i;
      EXPECT_EQ(b.local_shape(i), (Shape{c.intervals[r].size()}));
    }
  }
  // The explicit (2,2) example of the brief.
  Layout l = L({2, 2}, {Replicate(), RaggedShard({0, 1}, {1, 2})}, {6, 4, 8});
  EXPECT_EQ(l.ragged_interval(0), (Interval{0, 64}));
  EXPECT_EQ(l.ragged_interval(1), (Interval{64, 192}));
  EXPECT_EQ(l.ragged_interval(2), (Interval{0, 64}));
  EXPECT_EQ(l.ragged_interval(3), (Interval{64, 192}));
  Layout d0 = L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8});
  EXPECT_EQ(d0.ragged_interval(1), (Interval{0, 64}));
  EXPECT_EQ(d0.ragged_interval(2), (Interval{64, 192}));
}

TEST(LayoutTest, RaggedLocalRegionsOfTheCheckpointCase) {
  // ragged_cases.json "interval_boxes": shape (6,4,8), RS((0,1),(1,3)).
  Layout l = L({2}, {RaggedShard({0, 1}, {1, 3})}, {6, 4, 8});
  const auto r0 = l.local_region(0);
  ASSERT_EQ(r0.size(), 2u);
  EXPECT_EQ(r0[0], (FlatBox{Box({0, 0, 0}, {1, 4, 8}), 0}));
  EXPECT_EQ(r0[1], (FlatBox{Box({1, 0, 0}, {1, 2, 8}), 32}));
  EXPECT_EQ(r0[1].local_end(), 48);
  const auto r1 = l.local_region(1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r1[0], (FlatBox{Box({1, 2, 0}, {1, 2, 8}), 0}));
  EXPECT_EQ(r1[1], (FlatBox{Box({2, 0, 0}, {4, 4, 8}), 16}));
  EXPECT_EQ(r1[1].local_end(), 144);
}

// Every ragged layout of small shapes: the regions' row-major contents concatenate to
// exactly the rank's interval, and the intervals tile [0, numel) in mesh-dim order.
TEST(LayoutTest, RaggedRegionsTileTheTensor) {
  const std::vector<Shape> shapes = {{6}, {6, 2}, {4, 3}, {2, 3, 2}, {0, 4}, {12}};
  const std::vector<I> unit_lists = {{1, 1}, {1, 2}, {0, 3}, {3, 0}, {1, 0, 2}, {2, 2, 2},
                                     {1, 1, 1, 1}, {0, 1, 0, 1}};
  int checked = 0;
  for (const auto& shape : shapes) {
    for (std::size_t k = 1; k <= shape.size(); ++k) {
      I dims;
      for (std::size_t d = 0; d < k; ++d) dims.push_back(static_cast<int64_t>(d));
      int64_t prefix = 1;
      for (std::size_t d = 0; d < k; ++d) prefix *= shape[d];
      for (const auto& units : unit_lists) {
        int64_t total = 0;
        for (auto u : units) total += u;
        const int64_t p = static_cast<int64_t>(units.size());
        if (prefix % total != 0) {
          EXPECT_THROW_MSG(L({p}, {RaggedShard(dims, units)}, shape), ValueError,
                           "prefix cells are not divisible");
          continue;
        }
        Layout l = L({p}, {RaggedShard(dims, units)}, shape);
        SCOPED_TRACE(l.to_string());
        int64_t next = 0;
        for (int64_t r = 0; r < p; ++r) {
          const Interval iv = l.ragged_interval(r);
          EXPECT_EQ(iv, ragged_oracle(shape, k, units, r));
          EXPECT_EQ(iv.start, next);
          next = iv.end;
          SCOPED_TRACE("rank " + std::to_string(r));
          expect_region_is_interval(l.local_region(r), shape, iv);
          EXPECT_EQ(l.local_numel(r), iv.size());
        }
        EXPECT_EQ(next, l.numel());
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

// A RaggedShard beside a Shard splits each rank's Shard box (FSDP over tensor parallelism).
// Mesh [2,2] (dp, tp), shape [6,4], [RS((0,),(1,2)),S(1)]: tp coordinate t holds columns
// [2t, 2t+2) (box [6,2] at (0,2t)); dp coordinate 0 holds that box's first 2 rows, 1 the other 4.
TEST(LayoutTest, RaggedBesideShardSplitsTheShardBox) {
  Layout l = L({2, 2}, {RaggedShard({0}, {1, 2}), Shard(1)}, {6, 4});
  EXPECT_EQ(l.ragged_box(0), Box({0, 0}, {6, 2}));
  EXPECT_EQ(l.ragged_box(1), Box({0, 2}, {6, 2}));
  EXPECT_EQ(l.ragged_box(3), Box({0, 2}, {6, 2}));
  EXPECT_EQ(l.ragged_interval(1), (Interval{0, 4}));
  EXPECT_EQ(l.ragged_interval(3), (Interval{4, 12}));
  EXPECT_EQ(l.local_shape(3), (Shape{8}));
  EXPECT_EQ(l.local_region(1), (std::vector<FlatBox>{FlatBox{Box({0, 2}, {2, 2}), 0}}));
  EXPECT_EQ(l.local_region(2), (std::vector<FlatBox>{FlatBox{Box({2, 0}, {4, 2}), 0}}));
  // Boxes partly cut: [S(0),RS((0,1),(1,2))] on [6,4]: rows [3d, 3d+3), 4 cells per unit.
  Layout m = L({2, 2}, {Shard(0), RaggedShard({0, 1}, {1, 2})}, {6, 4});
  EXPECT_EQ(m.local_region(2), (std::vector<FlatBox>{FlatBox{Box({3, 0}, {1, 4}), 0}}));
  EXPECT_EQ(m.local_region(3), (std::vector<FlatBox>{FlatBox{Box({4, 0}, {2, 4}), 0}}));
  // An uneven Shard: every box must take the units (here 12 and 6 cells, 3 units).
  Layout u = L({2, 2}, {RaggedShard({0, 1}, {1, 2}), Shard(1)}, {6, 3});
  EXPECT_EQ(u.ragged_box(1), Box({0, 2}, {6, 1}));
  EXPECT_EQ(u.local_numel(1), 2);
  EXPECT_EQ(u.local_numel(3), 4);
  EXPECT_EQ(u.local_numel(2), 8);
  EXPECT_THROW_MSG(L({2, 2}, {RaggedShard({0}, {1, 2}), Shard(1)}, {5, 4}), ValueError,
                   "5 prefix cells are not divisible by 3 total units");
  EXPECT_THROW_MSG(L({2, 2}, {RaggedShard({0, 1}, {2, 2}), Shard(1)}, {6, 3}), ValueError,
                   "6 prefix cells are not divisible by 4 total units (sum of local_units) (the Shard box [6,1] of "
                   "mesh index 1 in [RS((0, 1), (2, 2)),S(1)] of shape [6,3])");
  for (const Layout& x : {l, m, u}) {
    // The regions tile the tensor, each element once.
    std::vector<int> hits(static_cast<std::size_t>(x.numel()), 0);
    for (int64_t i = 0; i < x.mesh().size(); ++i) {
      int64_t at = 0;
      for (const auto& fb : x.local_region(i)) {
        EXPECT_EQ(fb.local_start, at);
        at += fb.box.numel();
        for (int64_t r = 0; r < fb.box.sizes[0]; ++r)
          for (int64_t c = 0; c < fb.box.sizes[1]; ++c)
            ++hits[static_cast<std::size_t>((fb.box.offsets[0] + r) * x.shape()[1] +
                                            fb.box.offsets[1] + c)];
      }
      EXPECT_EQ(at, x.local_numel(i));
    }
    for (int h : hits) EXPECT_EQ(h, 1) << x.to_string();
  }
}

TEST(LayoutTest, RegionErrors) {
  Layout n = L({2, 2}, {Shard(0), Replicate()}, {4});
  EXPECT_THROW_MSG(n.ragged_interval(0), ValueError,
                   "layout mesh=[2,2] placements=[S(0),R] shape=[4] has no RaggedShard");
  EXPECT_THROW_MSG(n.local_box(4), ValueError, "mesh index 4 is out of range");
  EXPECT_THROW_MSG(n.local_region(-1), ValueError, "mesh index -1 is out of range");
  EXPECT_THROW_MSG(n.local_shape(9), ValueError, "mesh index 9");
  Layout r = L({2}, {RaggedShard({0}, {1, 2})}, {6, 4, 8});
  EXPECT_THROW_MSG(r.local_box(0), ValueError,
                   "local_box() is not defined for the ragged layout mesh=[2] "
                   "placements=[RS((0,), (1, 2))] shape=[6,4,8]");
  EXPECT_THROW_MSG(r.ragged_interval(2), ValueError, "mesh index 2 is out of range");
  EXPECT_THROW_MSG(r.local_numel(5), ValueError, "mesh index 5");
}

// The Partial(sum) rule, written out by hand: mesh [2,3] has indices 0..5 at coordinates
// (0,0) (0,1) (0,2) (1,0) (1,1) (1,2).
TEST(LayoutTest, HoldsPartialZeros) {
  auto zeros = [](const Layout& l, const Placements* source = nullptr) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < l.mesh().size(); ++i)
      if (source ? l.holds_partial_zeros(i, *source) : l.holds_partial_zeros(i)) out.push_back(i);
    return out;
  };
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Replicate()}, {4})), (I{3, 4, 5}));
  EXPECT_EQ(zeros(L({2, 3}, {Replicate(), Partial("sum")}, {4})), (I{1, 2, 4, 5}));
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Partial()}, {4})), (I{1, 2, 3, 4, 5}));
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Shard(0)}, {6})), (I{3, 4, 5}));
  EXPECT_EQ(zeros(L({2, 3}, {Partial("max"), Partial()}, {4})), (I{1, 2, 4, 5}));
  for (const char* op : {"avg", "max", "min"})
    EXPECT_EQ(zeros(L({2, 3}, {Partial(op), Replicate()}, {4})), I{}) << op;
  EXPECT_EQ(zeros(L({2, 3}, {Shard(0), Replicate()}, {4})), I{});
  // A mesh dim already partial in the source keeps its contributions.
  const Placements from_p0{Partial(), Replicate()};
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Partial()}, {4}), &from_p0), (I{1, 2, 4, 5}));
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Replicate()}, {4}), &from_p0), I{});
  const Placements from_s{Shard(0), Replicate()};
  EXPECT_EQ(zeros(L({2, 3}, {Partial(), Replicate()}, {4}), &from_s), (I{3, 4, 5}));
  // The planner uses the same rule: its zero-filled ranks are these.
  const Layout src = L({2, 3}, {Partial(), Shard(0)}, {6});
  const Layout dst = L({2, 3}, {Partial(), Partial()}, {6});
  EXPECT_EQ(plan_redistribute(src, dst).zero_fill, zeros(dst, &src.placements()));

  const Layout l = L({2, 3}, {Partial(), Replicate()}, {4});
  EXPECT_THROW_MSG(l.holds_partial_zeros(6), ValueError, "mesh index 6 is out of range");
  EXPECT_THROW_MSG(l.holds_partial_zeros(-1, from_s), ValueError, "mesh index -1 is out of range");
  EXPECT_THROW_MSG(l.holds_partial_zeros(0, {Replicate()}), ValueError,
                   "holds_partial_zeros: 1 source placements [R] for the 2 mesh dims of "
                   "mesh=[2,3] placements=[P(sum),R] shape=[4]");
}

// ---------------------------------------------------------------------------------
// Text form, equality, hash.

TEST(LayoutTest, ToStringExactForm) {
  Layout l = L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8});
  EXPECT_EQ(l.to_string(), "mesh=[2,2] placements=[RS((0,), (1, 2)),R] shape=[6,4,8]");
  std::ostringstream os;
  os << l;
  EXPECT_EQ(os.str(), l.to_string());
  EXPECT_EQ(L({2, 2}, {Shard(0), Replicate()}, {10, 6}).to_string(),
            "mesh=[2,2] placements=[S(0),R] shape=[10,6]");
  EXPECT_EQ(Layout(MeshTopology({2, 2}, {"dp", "tp"}, {4, 5, 6, 7}), {Partial("avg"), Shard(1)},
                   {3, 4})
                .to_string(),
            "mesh=[dp=2,tp=2]@[4,5,6,7] placements=[P(avg),S(1)] shape=[3,4]");
  EXPECT_EQ(L({2}, {Replicate()}, {}).to_string(), "mesh=[2] placements=[R] shape=[]");
}

TEST(LayoutTest, FromStringOfTheIssueExample) {
  Layout l = Layout::from_string("mesh=[2,2] placements=[RS((0,),(1,2)),R] shape=[6,4,8]");
  EXPECT_EQ(l, L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8}));
  EXPECT_EQ(l.to_string(), "mesh=[2,2] placements=[RS((0,), (1, 2)),R] shape=[6,4,8]");
  EXPECT_EQ(l.ragged()->mesh_dim, 0);
  EXPECT_EQ(l.ragged_interval(0), (Interval{0, 64}));
  EXPECT_EQ(l.ragged_interval(3), (Interval{64, 192}));
}

std::vector<Layout> sample_layouts() {
  const MeshTopology named({2, 2}, {"dp", "tp"});
  const MeshTopology odd({2, 2}, {}, {4, 5, 6, 7});
  const MeshTopology named_odd({2, 3}, {"dp", "tp"}, {5, 4, 3, 2, 1, 0});
  return {
      L({1}, {Replicate()}, {}),
      L({2}, {Replicate()}, {4}),
      L({2}, {Shard(0)}, {5}),
      L({4}, {Shard(0)}, {2, 3}),
      L({2}, {Partial()}, {3, 3}),
      L({2}, {Partial("avg")}, {3, 3}),
      L({2, 2}, {Shard(0), Shard(1)}, {4, 4}),
      L({2, 2}, {Shard(0), Shard(0)}, {7, 2}),
      L({2, 2}, {Shard(1), Partial("max")}, {3, 5}),
      L({2, 3}, {Replicate(), Shard(-1)}, {2, 3, 4}),
      L({2, 2, 2}, {Shard(0), Replicate(), Shard(2)}, {4, 4, 4}),
      L({2}, {RaggedShard({0, 1}, {1, 2})}, {6, 4, 8}),
      L({2}, {RaggedShard({0, 1}, {1, 3})}, {6, 4, 8}),
      L({2}, {RaggedShard({0}, {1, 2})}, {6, 4, 8}),
      L({4}, {RaggedShard({0, 1}, {2, 3, 0, 5})}, {10, 4}),
      L({2, 2}, {RaggedShard({0}, {1, 2}), Replicate()}, {6, 4, 8}),
      L({2, 2}, {Replicate(), RaggedShard({0, 1}, {1, 2})}, {6, 4, 8}),
      L({2}, {RaggedShard({0, 1, 2}, {0, 1})}, {2, 2, 2}),
      Layout(named, {Shard(0), Replicate()}, {8, 8}),
      Layout(named, {Replicate(), RaggedShard({0}, {1, 1})}, {4}),
      Layout(odd, {Partial(), Shard(0)}, {6}),
      Layout(odd, {RaggedShard({0}, {3, 1}), Replicate()}, {8, 2}),
      Layout(named_odd, {Shard(1), Shard(0)}, {5, 7}),
      L({3}, {Shard(0)}, {0, 4}),
  };
}

TEST(LayoutTest, FromStringRoundTrips) {
  const auto layouts = sample_layouts();
  EXPECT_GE(layouts.size(), 20u);
  for (const auto& l : layouts) {
    SCOPED_TRACE(l.to_string());
    Layout p = Layout::from_string(l.to_string());
    EXPECT_EQ(p, l);
    EXPECT_EQ(p.to_string(), l.to_string());
    EXPECT_EQ(p.hash(), l.hash());
    EXPECT_EQ(p.ragged().has_value(), l.ragged().has_value());
    if (l.ragged()) {
      EXPECT_EQ(*p.ragged(), *l.ragged());
    }
  }
}

TEST(LayoutTest, FromStringIsLenient) {
  const Layout want = L({2, 2}, {Shard(0), Replicate()}, {10, 6});
  EXPECT_EQ(Layout::from_string("mesh=[2,2] placements=[S(0),R] shape=[10,6]"), want);
  EXPECT_EQ(Layout::from_string("  mesh=[2, 2]  placements=[S(0), R]  shape=[10, 6]  "), want);
  // Keys in another order.
  EXPECT_EQ(Layout::from_string("shape=[10,6] mesh=[2,2] placements=[S(0),R]"), want);
  EXPECT_EQ(Layout::from_string("placements=[S(0),R] shape=[10,6] mesh=[2,2]"), want);
  // Negative Shard dims are normalised on parse too.
  EXPECT_EQ(Layout::from_string("mesh=[2] placements=[S(-1)] shape=[3,4]"),
            L({2}, {Shard(1)}, {3, 4}));
}

TEST(LayoutTest, FromStringWithMeshDimsNamedLikeKeys) {
  // Mesh dim names are free-form words; the text form must still round-trip.
  for (const auto& names : std::vector<std::vector<std::string>>{
           {"shape", "mesh"}, {"placements", "x"}, {"mesh", "shape"}}) {
    Layout l(MeshTopology({2, 2}, names), {Shard(0), Replicate()}, {4, 4});
    SCOPED_TRACE(l.to_string());
    EXPECT_EQ(Layout::from_string(l.to_string()), l);
  }
}

TEST(LayoutTest, FromStringErrorsNameTheText) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"garbage", "missing 'mesh='"},
      {"mesh=[2] shape=[4]", "missing 'placements='"},
      {"mesh=[2] placements=[R]", "missing 'shape='"},
      {"mesh=[2] placements=[R] shape=[4,x]", "expected an integer"},
      {"mesh=[2] placements=[R] shape=4", "expected '['"},
      {"mesh=[2] placements=[R] shape=[4] junk", "trailing"},
      {"mesh=[2,x] placements=[R,R] shape=[4]", "expected '='"},
      {"mesh=[2,3x] placements=[R,R] shape=[4]", "expected ','"},
      {"mesh=[2] mesh=[2] placements=[R] shape=[4]", "'mesh=' appears twice"},
      {"mesh=[2]placements=[R] shape=[4]", "trailing"},
      {"mesh=2 placements=[R] shape=[4]", "expected '['"},
      {"mesh=[2] placements=[Q] shape=[4]", "unknown placement 'Q'"},
      {"mesh=[2] placements=[S(0) shape=[4]", "expected"},
      {"mesh=[2] placements=[P(mul)] shape=[4]", "'mul'"},
  };
  for (const auto& [text, what] : cases) {
    SCOPED_TRACE(text);
    EXPECT_THROW_MSG(Layout::from_string(text), ValueError, "cannot parse layout '" + text + "'");
    EXPECT_THROW_MSG(Layout::from_string(text), ValueError, what);
  }
  // Well-formed text describing an invalid layout: the validation errors.
  EXPECT_THROW_MSG(Layout::from_string("mesh=[2,2] placements=[S(0)] shape=[4]"), ValueError,
                   "layout has 1 placements");
  EXPECT_THROW_MSG(Layout::from_string("mesh=[2] placements=[RS((0,),(1,2))] shape=[5,2]"),
                   ValueError, "5 prefix cells are not divisible by 3");
  EXPECT_THROW_MSG(Layout::from_string("mesh=[2] placements=[RS((0,),(1,1,1))] shape=[6,4,8]"),
                   ValueError, "3 local_units but its mesh dim has 2");
  EXPECT_THROW_MSG(Layout::from_string("mesh=[2] placements=[R] shape=[-1]"), ValueError,
                   "negative size -1");
  EXPECT_THROW_MSG(Layout::from_string("mesh=[0] placements=[R] shape=[1]"), ValueError,
                   "has size 0");
}

TEST(LayoutTest, EqualityAndHashIncludeEverything) {
  const auto layouts = sample_layouts();
  std::unordered_set<Layout> set;
  for (std::size_t i = 0; i < layouts.size(); ++i) {
    for (std::size_t j = 0; j < layouts.size(); ++j) {
      EXPECT_EQ(layouts[i] == layouts[j], i == j)
          << layouts[i].to_string() << " vs " << layouts[j].to_string();
      EXPECT_EQ(layouts[i] != layouts[j], i != j);
    }
    set.insert(layouts[i]);
    set.insert(Layout::from_string(layouts[i].to_string()));
  }
  EXPECT_EQ(set.size(), layouts.size());

  // Layouts that differ only in the ragged units.
  Layout a = L({2}, {RaggedShard({0}, {1, 2})}, {6, 4, 8});
  Layout b = L({2}, {RaggedShard({0}, {2, 1})}, {6, 4, 8});
  EXPECT_NE(a, b);
  EXPECT_NE(a.hash(), b.hash());
  EXPECT_NE(std::hash<Layout>()(a), std::hash<Layout>()(b));
  std::unordered_set<Layout> ragged = {a, b, L({2}, {RaggedShard({0}, {1, 2})}, {6, 4, 8})};
  EXPECT_EQ(ragged.size(), 2u);
  // Differ only in ragged dims, in the mesh names / ranks, in the shape.
  EXPECT_NE(a, L({2}, {RaggedShard({0, 1}, {1, 2})}, {6, 4, 8}));
  EXPECT_NE(a, Layout(MeshTopology({2}, {"x"}), {RaggedShard({0}, {1, 2})}, {6, 4, 8}));
  EXPECT_NE(a, Layout(MeshTopology({2}, {}, {1, 0}), {RaggedShard({0}, {1, 2})}, {6, 4, 8}));
  EXPECT_NE(a, L({2}, {RaggedShard({0}, {1, 2})}, {12, 2, 8}));
  // The ragged layout differs from its normal view.
  EXPECT_NE(a, a.normal_layout());
  // Equal layouts built differently hash equal.
  Layout c = L({2}, {Shard(-1)}, {3, 4});
  Layout d = L({2}, {Shard(1)}, {3, 4});
  EXPECT_EQ(c, d);
  EXPECT_EQ(std::hash<Layout>()(c), std::hash<Layout>()(d));
}

}  // namespace
}  // namespace hyper
