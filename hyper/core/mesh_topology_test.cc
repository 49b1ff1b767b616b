// Tests of hyper::MeshTopology: coordinates, groups and sub-meshes checked against an
// independent row-major computation, the text form, value semantics and every error.

#include "hyper/core/mesh_topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/core/internal/test_util.h"


namespace hyper {
namespace {

using I = std::vector<int64_t>;
using Ranks = std::vector<int>;

// Independent oracle: enumerate every coordinate of `shape` in row-major order by
// incrementing an odometer (last dim fastest).
std::vector<I> all_coords(const I& shape) {
  std::vector<I> out;
  I c(shape.size(), 0);
  while (true) {
    out.push_back(c);
    int64_t d = static_cast<int64_t>(shape.size()) - 1;
    while (d >= 0 && ++c[d] == shape[d]) c[d--] = 0;
    if (d < 0) break;
  }
  return out;
}

const std::vector<I>& sample_shapes() {
  static const std::vector<I> shapes = {{1}, {4}, {2, 2}, {2, 3}, {1, 3}, {3, 1}, {2, 2, 2},
                                        {2, 1, 3}, {7}};
  return shapes;
}

// Non-iota rank list for a mesh of n ranks: 100, 103, 106, ... reversed.
Ranks scattered_ranks(int64_t n) {
  Ranks r;
  for (int64_t i = 0; i < n; ++i) r.push_back(static_cast<int>(100 + 3 * (n - 1 - i)));
  return r;
}

TEST(MeshTopologyTest, BasicProperties) {
  MeshTopology m({2, 3}, {"dp", "tp"});
  EXPECT_EQ(m.ndim(), 2);
  EXPECT_EQ(m.size(), 6);
  EXPECT_EQ(m.size(0), 2);
  EXPECT_EQ(m.size(1), 3);
  EXPECT_EQ(m.size(-1), 3);
  EXPECT_EQ(m.size(-2), 2);
  EXPECT_EQ(m.shape(), (I{2, 3}));
  EXPECT_EQ(m.names(), (std::vector<std::string>{"dp", "tp"}));
  EXPECT_EQ(m.ranks(), (Ranks{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.dim_index("dp"), 0);
  EXPECT_EQ(m.dim_index("tp"), 1);
  EXPECT_EQ(m.normalize_dim(-1), 1);
  EXPECT_EQ(m.normalize_dim(-2), 0);
  EXPECT_EQ(m.normalize_dim(0), 0);
  EXPECT_EQ(m.normalize_dim(1), 1);
  EXPECT_FALSE(m.names().empty());
  EXPECT_TRUE(MeshTopology({4}).names().empty());
}

TEST(MeshTopologyTest, HeaderExample) {
  MeshTopology m({2, 2}, {"dp", "tp"});
  EXPECT_EQ(m.coordinate_of(2), (I{1, 0}));
  EXPECT_EQ(m.group_of(2, m.dim_index("tp")), (Ranks{2, 3}));
  EXPECT_EQ(m.group_of(2, m.dim_index("dp")), (Ranks{0, 2}));
}

TEST(MeshTopologyTest, CoordinatesOfEveryRankMatchRowMajorOracle) {
  for (const auto& shape : sample_shapes()) {
    SCOPED_TRACE(MeshTopology(shape).to_string());
    for (bool custom : {false, true}) {
      const int64_t n = std::accumulate(shape.begin(), shape.end(), int64_t{1},
                                        [](int64_t a, int64_t b) { return a * b; });
      const Ranks ranks = custom ? scattered_ranks(n) : Ranks{};
      MeshTopology m(shape, {}, ranks);
      EXPECT_EQ(m.size(), n);
      const auto coords = all_coords(shape);
      ASSERT_EQ(static_cast<int64_t>(coords.size()), n);
      for (int64_t i = 0; i < n; ++i) {
        const int rank = custom ? ranks[i] : static_cast<int>(i);
        EXPECT_EQ(m.ranks()[i], rank);
        EXPECT_TRUE(m.contains(rank));
        EXPECT_EQ(m.index_of(rank), i);
        EXPECT_EQ(m.coordinate_at(i), coords[i]);
        EXPECT_EQ(m.coordinate_of(rank), coords[i]);
        EXPECT_EQ(m.index_at(coords[i]), i);
        EXPECT_EQ(m.rank_at(coords[i]), rank);
        // Round trips both ways.
        EXPECT_EQ(m.rank_at(m.coordinate_of(rank)), rank);
        EXPECT_EQ(m.coordinate_of(m.rank_at(coords[i])), coords[i]);
      }
      EXPECT_FALSE(m.contains(-1));
      EXPECT_FALSE(m.contains(custom ? 0 : static_cast<int>(n)));
    }
  }
}

TEST(MeshTopologyTest, ExplicitCoordinates) {
  MeshTopology m({2, 2, 2});
  EXPECT_EQ(m.coordinate_of(0), (I{0, 0, 0}));
  EXPECT_EQ(m.coordinate_of(1), (I{0, 0, 1}));
  EXPECT_EQ(m.coordinate_of(2), (I{0, 1, 0}));
  EXPECT_EQ(m.coordinate_of(5), (I{1, 0, 1}));
  EXPECT_EQ(m.coordinate_of(7), (I{1, 1, 1}));
  MeshTopology m23({2, 3});
  EXPECT_EQ(m23.coordinate_of(4), (I{1, 1}));
  EXPECT_EQ(m23.coordinate_of(2), (I{0, 2}));
  EXPECT_EQ(m23.rank_at({1, 2}), 5);
  MeshTopology m13({1, 3});
  EXPECT_EQ(m13.coordinate_of(2), (I{0, 2}));
}

TEST(MeshTopologyTest, CustomRanks) {
  MeshTopology m({2, 2}, {"dp", "tp"}, {4, 5, 6, 7});
  EXPECT_EQ(m.size(), 4);
  EXPECT_EQ(m.ranks(), (Ranks{4, 5, 6, 7}));
  EXPECT_EQ(m.coordinate_of(4), (I{0, 0}));
  EXPECT_EQ(m.coordinate_of(6), (I{1, 0}));
  EXPECT_EQ(m.index_of(7), 3);
  EXPECT_EQ(m.rank_at({0, 1}), 5);
  EXPECT_FALSE(m.contains(0));
  EXPECT_TRUE(m.contains(5));
  EXPECT_EQ(m.groups_along(0), (std::vector<Ranks>{{4, 6}, {5, 7}}));
  EXPECT_EQ(m.groups_along(1), (std::vector<Ranks>{{4, 5}, {6, 7}}));
  EXPECT_EQ(m.group_of(7, 0), (Ranks{5, 7}));
  EXPECT_EQ(m.group_of(6, m.dim_index("tp")), (Ranks{6, 7}));

  MeshTopology perm({4}, {}, {3, 0, 2, 1});
  EXPECT_EQ(perm.coordinate_of(3), (I{0}));
  EXPECT_EQ(perm.coordinate_of(1), (I{3}));
  EXPECT_EQ(perm.groups_along(0), (std::vector<Ranks>{{3, 0, 2, 1}}));
}

TEST(MeshTopologyTest, GroupsAlongEveryDim) {
  MeshTopology m({2, 3});
  EXPECT_EQ(m.groups_along(0), (std::vector<Ranks>{{0, 3}, {1, 4}, {2, 5}}));
  EXPECT_EQ(m.groups_along(1), (std::vector<Ranks>{{0, 1, 2}, {3, 4, 5}}));
  EXPECT_EQ(m.groups_along(-1), m.groups_along(1));
  EXPECT_EQ(m.groups_along(-2), m.groups_along(0));

  MeshTopology c({2, 2, 2});
  EXPECT_EQ(c.groups_along(0), (std::vector<Ranks>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(c.groups_along(1), (std::vector<Ranks>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(c.groups_along(2), (std::vector<Ranks>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));

  EXPECT_EQ(MeshTopology({1}).groups_along(0), (std::vector<Ranks>{{0}}));
  EXPECT_EQ(MeshTopology({4}).groups_along(0), (std::vector<Ranks>{{0, 1, 2, 3}}));
  EXPECT_EQ(MeshTopology({1, 3}).groups_along(0), (std::vector<Ranks>{{0}, {1}, {2}}));
  EXPECT_EQ(MeshTopology({1, 3}).groups_along(1), (std::vector<Ranks>{{0, 1, 2}}));
}

// Oracle for groups: ranks that agree on every coordinate except `dim`, ordered by
// their coordinate on `dim`; groups ordered by the linear index of their first rank.
TEST(MeshTopologyTest, GroupsMatchOracleForAllShapes) {
  for (const auto& shape : sample_shapes()) {
    for (bool custom : {false, true}) {
      MeshTopology base(shape);
      MeshTopology m(shape, {}, custom ? scattered_ranks(base.size()) : Ranks{});
      SCOPED_TRACE(m.to_string());
      const auto coords = all_coords(shape);
      for (int64_t dim = 0; dim < m.ndim(); ++dim) {
        std::vector<Ranks> expected;
        for (std::size_t i = 0; i < coords.size(); ++i) {
          if (coords[i][dim] != 0) continue;
          Ranks g;
          for (std::size_t j = 0; j < coords.size(); ++j) {
            I a = coords[i], b = coords[j];
            a[dim] = b[dim] = 0;
            if (a == b) g.push_back(m.ranks()[j]);  // j increases with coords[j][dim]
          }
          expected.push_back(g);
        }
        EXPECT_EQ(m.groups_along(dim), expected) << "dim " << dim;
        // Every group has the dim's size; the groups partition the ranks.
        Ranks flat;
        for (const auto& g : expected) {
          EXPECT_EQ(static_cast<int64_t>(g.size()), shape[dim]);
          flat.insert(flat.end(), g.begin(), g.end());
        }
        Ranks sorted_all = m.ranks();
        std::sort(flat.begin(), flat.end());
        std::sort(sorted_all.begin(), sorted_all.end());
        EXPECT_EQ(flat, sorted_all);
        // group_of agrees with groups_along for every rank.
        for (int r : m.ranks()) {
          const auto g = m.group_of(r, dim);
          EXPECT_NE(std::find(g.begin(), g.end(), r), g.end());
          EXPECT_NE(std::find(expected.begin(), expected.end(), g), expected.end());
          EXPECT_EQ(g[m.coordinate_of(r)[dim]], r);
          EXPECT_EQ(m.group_of(r, dim - m.ndim()), g);  // negative dim
        }
      }
    }
  }
}

TEST(MeshTopologyTest, GroupOfExamples) {
  MeshTopology m({2, 3}, {"dp", "tp"});
  EXPECT_EQ(m.group_of(4, 0), (Ranks{1, 4}));
  EXPECT_EQ(m.group_of(4, 1), (Ranks{3, 4, 5}));
  EXPECT_EQ(m.group_of(0, m.dim_index("tp")), (Ranks{0, 1, 2}));
  EXPECT_EQ(m.group_of(5, -2), (Ranks{2, 5}));
}

TEST(MeshTopologyTest, SubMeshKeepsRanksNamesAndDimOrder) {
  MeshTopology m({2, 3}, {"dp", "tp"});
  MeshTopology tp = m.sub_mesh(4, {1});
  EXPECT_EQ(tp.shape(), (I{3}));
  EXPECT_EQ(tp.names(), (std::vector<std::string>{"tp"}));
  EXPECT_EQ(tp.ranks(), (Ranks{3, 4, 5}));
  MeshTopology dp = m.sub_mesh(4, {m.dim_index("dp")});
  EXPECT_EQ(dp.shape(), (I{2}));
  EXPECT_EQ(dp.names(), (std::vector<std::string>{"dp"}));
  EXPECT_EQ(dp.ranks(), (Ranks{1, 4}));
  EXPECT_EQ(m.sub_mesh(4, {-1}), tp);

  // All dims in order: the same mesh.
  EXPECT_EQ(m.sub_mesh(0, {0, 1}), m);
  EXPECT_EQ(m.sub_mesh(5, {0, 1}), m);
  // Reversed order: a transposed mesh.
  MeshTopology t = m.sub_mesh(0, {1, 0});
  EXPECT_EQ(t.shape(), (I{3, 2}));
  EXPECT_EQ(t.names(), (std::vector<std::string>{"tp", "dp"}));
  EXPECT_EQ(t.ranks(), (Ranks{0, 3, 1, 4, 2, 5}));

  // 3-D, custom ranks, unnamed.
  MeshTopology c({2, 2, 2}, {}, {10, 11, 12, 13, 14, 15, 16, 17});
  MeshTopology s = c.sub_mesh(15, {0, 2});  // rank 15 at (1, 0, 1)
  EXPECT_EQ(s.shape(), (I{2, 2}));
  EXPECT_TRUE(s.names().empty());
  EXPECT_EQ(s.ranks(), (Ranks{10, 11, 14, 15}));
  MeshTopology s2 = c.sub_mesh(15, {2, 0});
  EXPECT_EQ(s2.ranks(), (Ranks{10, 14, 11, 15}));
  MeshTopology s3 = c.sub_mesh(13, {1});  // (0, 1, 1)
  EXPECT_EQ(s3.ranks(), (Ranks{11, 13}));
  // A 1-D sub-mesh's ranks are the group along that dim.
  for (int r : c.ranks())
    for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(c.sub_mesh(r, {d}).ranks(), c.group_of(r, d));
}

TEST(MeshTopologyTest, ToStringForms) {
  EXPECT_EQ(MeshTopology({2, 2}).to_string(), "[2,2]");
  EXPECT_EQ(MeshTopology({4}).to_string(), "[4]");
  EXPECT_EQ(MeshTopology({2, 2}, {"dp", "tp"}).to_string(), "[dp=2,tp=2]");
  EXPECT_EQ(MeshTopology({2, 2}, {}, {4, 5, 6, 7}).to_string(), "[2,2]@[4,5,6,7]");
  EXPECT_EQ(MeshTopology({2}, {"x"}, {1, 0}).to_string(), "[x=2]@[1,0]");
  EXPECT_EQ(MeshTopology({3}, {}, {0, 1, 2}).to_string(), "[3]");  // iota not printed
}

TEST(MeshTopologyTest, FromStringRoundTrips) {
  const std::vector<MeshTopology> meshes = {
      MeshTopology({1}),
      MeshTopology({4}),
      MeshTopology({2, 2}),
      MeshTopology({2, 3}),
      MeshTopology({1, 3}),
      MeshTopology({2, 2, 2}),
      MeshTopology({2, 2}, {"dp", "tp"}),
      MeshTopology({2, 3}, {"data_parallel", "tp2"}),
      MeshTopology({2, 2}, {}, {4, 5, 6, 7}),
      MeshTopology({2, 2}, {"dp", "tp"}, {7, 6, 5, 4}),
      MeshTopology({3}, {"pp"}, {2, 9, 4}),
      MeshTopology({2, 1, 2}, {"a", "b", "c"}, {0, 2, 1, 3}),
  };
  for (const auto& m : meshes) {
    SCOPED_TRACE(m.to_string());
    MeshTopology p = MeshTopology::from_string(m.to_string());
    EXPECT_EQ(p, m);
    EXPECT_EQ(p.to_string(), m.to_string());
    EXPECT_EQ(p.hash(), m.hash());
  }
  // Lenient spacing; explicit iota ranks parse to the default.
  EXPECT_EQ(MeshTopology::from_string(" [ dp = 2 , tp = 2 ] @ [ 4 , 5 , 6 , 7 ] "),
            MeshTopology({2, 2}, {"dp", "tp"}, {4, 5, 6, 7}));
  EXPECT_EQ(MeshTopology::from_string("[2]@[0,1]"), MeshTopology({2}));
}

TEST(MeshTopologyTest, EqualityAndHash) {
  const std::vector<MeshTopology> distinct = {
      MeshTopology({4}),
      MeshTopology({2, 2}),
      MeshTopology({2, 2}, {"dp", "tp"}),
      MeshTopology({2, 2}, {"tp", "dp"}),
      MeshTopology({2, 2}, {}, {4, 5, 6, 7}),
      MeshTopology({2, 2}, {}, {0, 2, 1, 3}),
      MeshTopology({1, 4}),
      MeshTopology({4, 1}),
  };
  std::unordered_set<MeshTopology> set;
  for (std::size_t i = 0; i < distinct.size(); ++i) {
    for (std::size_t j = 0; j < distinct.size(); ++j) {
      EXPECT_EQ(distinct[i] == distinct[j], i == j) << distinct[i].to_string() << " vs "
                                                    << distinct[j].to_string();
      EXPECT_EQ(distinct[i] != distinct[j], i != j);
    }
    set.insert(distinct[i]);
    set.insert(MeshTopology::from_string(distinct[i].to_string()));
  }
  EXPECT_EQ(set.size(), distinct.size());
  EXPECT_EQ(MeshTopology({2, 2}), MeshTopology({2, 2}, {}, {0, 1, 2, 3}));
  EXPECT_EQ(std::hash<MeshTopology>()(MeshTopology({2, 2})),
            std::hash<MeshTopology>()(MeshTopology({2, 2}, {}, {0, 1, 2, 3})));
}

// Found by placement_fuzz: a mesh parsed from text ("[500000000]", "[720368,408]") allocated
// one rank per device (gigabytes) before anything refused it. A mesh holds at most 2^20
// devices (as many as hyperrun starts); the error names the device count and the limit.
TEST(MeshTopologyTest, SizeLimit) {
  EXPECT_EQ(kMaxMeshSize, int64_t{1} << 20);
  EXPECT_EQ(MeshTopology({int64_t{1} << 20}).size(), int64_t{1} << 20);
  EXPECT_EQ(MeshTopology({1024, 2, 512}).size(), int64_t{1} << 20);
  EXPECT_THROW_MSG(MeshTopology({(int64_t{1} << 20) + 1}), ValueError,
                   "mesh shape [1048577] is too large: 1048577 devices, more than 1048576");
  EXPECT_THROW_MSG(MeshTopology({2, 1 << 20}), ValueError,
                   "mesh shape [2,1048576] is too large: 2097152 devices, more than 1048576");
  EXPECT_THROW_MSG(MeshTopology::from_string("[720368,408]"), ValueError,
                   "[720368,408] is too large: 293910144 devices, more than 1048576");
  EXPECT_THROW_MSG(MeshTopology::from_string("[tp=500000000]"), ValueError,
                   "mesh shape [500000000] is too large: 500000000 devices");
  // A count past int64_t is named as such; a non-positive size is still reported first.
  const int64_t big = int64_t{1} << 40;
  EXPECT_THROW_MSG(MeshTopology({big, big}), ValueError, "more than 2^63 devices");
  EXPECT_THROW_MSG(MeshTopology({big, big, 0}), ValueError, "mesh dim 2 has size 0");
}

TEST(MeshTopologyTest, ConstructionErrors) {
  EXPECT_THROW_MSG(MeshTopology(I{}), ValueError, "at least one dimension");
  EXPECT_THROW_MSG(MeshTopology({2, 0}), ValueError, "mesh dim 1 has size 0 in mesh shape [2,0]");
  EXPECT_THROW_MSG(MeshTopology({-2}), ValueError, "has size -2");
  EXPECT_THROW_MSG(MeshTopology({int64_t{1} << 20, int64_t{1} << 20}), ValueError, "too large");
  EXPECT_THROW_MSG(MeshTopology({2, 2}, {"dp"}), ValueError, "2 dims but 1 dim names");
  EXPECT_THROW_MSG(MeshTopology({2}, {"a", "b", "c"}), ValueError, "1 dims but 3 dim names");
  EXPECT_THROW_MSG(MeshTopology({2, 2}, {"dp", "dp"}), ValueError, "'dp' is repeated");
  EXPECT_THROW_MSG(MeshTopology({2, 2}, {"dp", ""}), ValueError, "must not be empty");
  EXPECT_THROW_MSG(MeshTopology({2, 2}, {"dp", "t p"}), ValueError, "'t p' must be an identifier");
  EXPECT_THROW_MSG(MeshTopology({2}, {"tp-0"}), ValueError, "'tp-0' must be an identifier");
  EXPECT_THROW_MSG(MeshTopology({2}, {"2d"}), ValueError, "'2d' must be an identifier");
  EXPECT_EQ(MeshTopology::from_string(MeshTopology({2}, {"_tp2"}).to_string()).names()[0], "_tp2");
  EXPECT_THROW_MSG(MeshTopology({2, 2}, {}, {0, 1, 2}), ValueError, "holds 4 ranks but 3 ranks");
  EXPECT_THROW_MSG(MeshTopology({2}, {}, {0, 1, 2}), ValueError, "holds 2 ranks but 3");
  EXPECT_THROW_MSG(MeshTopology({2}, {}, {0, -1}), ValueError, "mesh rank -1 is negative");
  EXPECT_THROW_MSG(MeshTopology({3}, {}, {4, 5, 4}), ValueError, "mesh rank 4 appears twice");
  // All are std::invalid_argument.
  EXPECT_THROW_MSG(MeshTopology(I{}), std::invalid_argument, "dimension");
}

TEST(MeshTopologyTest, LookupErrors) {
  MeshTopology m({2, 3}, {"dp", "tp"});
  EXPECT_THROW_MSG(m.dim_index("pp"), ValueError, "no dim named 'pp' (dims: dp, tp)");
  EXPECT_THROW_MSG(MeshTopology({2}).dim_index("dp"), ValueError, "(dims: unnamed)");
  EXPECT_THROW_MSG(m.normalize_dim(2), ValueError, "mesh dim 2 is out of range for a 2-D mesh");
  EXPECT_THROW_MSG(m.normalize_dim(-3), ValueError, "mesh dim -3");
  EXPECT_THROW_MSG(m.size(5), ValueError, "mesh dim 5 is out of range");
  EXPECT_THROW_MSG(m.groups_along(2), ValueError, "mesh dim 2 is out of range");
  EXPECT_THROW_MSG(m.group_of(0, -3), ValueError, "mesh dim -3 is out of range");
  EXPECT_THROW_MSG(m.group_of(6, 0), ValueError, "rank 6 is not part of mesh [dp=2,tp=3]");
  EXPECT_THROW_MSG(m.index_of(-1), ValueError, "rank -1 is not part of mesh");
  EXPECT_THROW_MSG(m.coordinate_of(9), ValueError, "rank 9 is not part of mesh");
  EXPECT_THROW_MSG(MeshTopology({2}, {}, {4, 5}).coordinate_of(0), ValueError,
                   "rank 0 is not part of mesh [2]@[4,5]");
  EXPECT_THROW_MSG(m.coordinate_at(6), ValueError, "mesh index 6 is out of range");
  EXPECT_THROW_MSG(m.coordinate_at(-1), ValueError, "mesh index -1");
  EXPECT_THROW_MSG(m.index_at({2, 0}), ValueError, "coordinate [2,0] is outside mesh");
  EXPECT_THROW_MSG(m.rank_at({0, 3}), ValueError, "coordinate [0,3] is outside");
  EXPECT_THROW_MSG(m.rank_at({0, -1}), ValueError, "coordinate [0,-1]");
  EXPECT_THROW_MSG(m.rank_at({0}), ValueError, "coordinate [0] has 1 entries for a 2-D mesh");
  EXPECT_THROW_MSG(m.sub_mesh(0, {}), ValueError, "at least one mesh dim");
  EXPECT_THROW_MSG(m.sub_mesh(0, {1, -1}), ValueError, "sub_mesh dim -1 is repeated");
  EXPECT_THROW_MSG(m.sub_mesh(0, {2}), ValueError, "mesh dim 2 is out of range");
  EXPECT_THROW_MSG(m.sub_mesh(7, {0}), ValueError, "rank 7 is not part of mesh");
}

TEST(MeshTopologyTest, ParseErrors) {
  EXPECT_THROW_MSG(MeshTopology::from_string("2,2"), ValueError, "cannot parse '2,2'");
  EXPECT_THROW_MSG(MeshTopology::from_string("[]"), ValueError, "cannot parse '[]'");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2,2"), ValueError, "'[2,2'");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2;2]"), ValueError, "expected ','");
  EXPECT_THROW_MSG(MeshTopology::from_string("[dp=2,2]"), ValueError,
                   "either all mesh dims are named or none");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2,tp=2]"), ValueError,
                   "either all mesh dims are named or none");
  EXPECT_THROW_MSG(MeshTopology::from_string("[dp:2]"), ValueError, "expected '='");
  EXPECT_THROW_MSG(MeshTopology::from_string("[dp=x]"), ValueError, "expected an integer");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2]@"), ValueError, "'[2]@'");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2]@[0,1"), ValueError, "'[2]@[0,1'");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2] junk"), ValueError, "trailing");
  // Syntactically fine but invalid: the constructor's errors.
  EXPECT_THROW_MSG(MeshTopology::from_string("[0]"), ValueError, "has size 0");
  EXPECT_THROW_MSG(MeshTopology::from_string("[-2]"), ValueError, "has size -2");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2]@[0,1,2]"), ValueError, "holds 2 ranks");
  EXPECT_THROW_MSG(MeshTopology::from_string("[2]@[3,3]"), ValueError, "appears twice");
  EXPECT_THROW_MSG(MeshTopology::from_string("[a=2,a=2]"), ValueError, "'a' is repeated");
}

}  // namespace
}  // namespace hyper
