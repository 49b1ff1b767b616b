// Thread-mode multi-rank tests of every collective against the locally computed oracle,
// world sizes 1-4, zero-row ranks, several dtypes, async handles, byte counters, errors.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/comm/testing/test_data.h"
#include "hyper/core/testing_errors.h"

namespace hyper::comm {
namespace {

using testing::pattern;
using testing::rows_all;
using testing::rows_of;
using testing::run_threads;
using testing::same;
using hyper::testing::error_of;
using ::testing::HasSubstr;

const std::vector<at::ScalarType> kDtypes = {at::kFloat,    at::kDouble, at::kBFloat16,
                                             at::kHalf,     at::kLong,   at::kInt,
                                             at::kBool,     at::kByte,   at::kComplexFloat};

testing::HarnessOptions fast() {
  testing::HarnessOptions o;
  o.timeout = std::chrono::seconds(5);
  o.deadline = std::chrono::seconds(120);
  return o;
}

/// A caller's output buffer: rows [1, 1 + rows) of a tensor filled with -7, whose rows around
/// the buffer a collective writing into it must leave alone.
struct Framed {
  at::Tensor big, into;
  Framed(std::vector<int64_t> shape, at::ScalarType dtype) {
    shape[0] += 2;
    big = at::full(shape, -7, at::TensorOptions(dtype));
    into = big.narrow(0, 1, shape[0] - 2);
  }
  bool untouched_around() const {
    return at::all(big[0] == -7).item<bool>() && at::all(big[big.size(0) - 1] == -7).item<bool>();
  }
};

class WorldSizes : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(N, WorldSizes, ::testing::Values(1, 2, 3, 4));

TEST_P(WorldSizes, AllGatherVEveryDtypeBothRoutes) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (AllGatherRoute route :
         {AllGatherRoute::kPointToPoint, AllGatherRoute::kGlooRing, AllGatherRoute::kAuto}) {
      set_all_gather_route(g, route);
      for (auto dtype : kDtypes) {
        std::vector<at::Tensor> pieces;
        for (int r = 0; r < n; ++r) pieces.push_back(pattern(r, rows_of(r), 3, dtype));
        at::Tensor expected = at::cat(pieces, 0);
        // Without sizes (exchange) and with sizes.
        at::Tensor got = all_gather_v(pieces[rank], g);
        EXPECT_TRUE(same(got, expected)) << "dtype " << dtype << " route " << int(route);
        at::Tensor got2 = all_gather_v(pieces[rank], g, rows_all(n));
        EXPECT_TRUE(same(got2, expected)) << "dtype " << dtype;
      }
      // 1-D and 3-D inputs.
      at::Tensor v = at::arange(rows_of(rank), at::kFloat) + 10 * rank;
      std::vector<at::Tensor> vs;
      for (int r = 0; r < n; ++r) vs.push_back(at::arange(rows_of(r), at::kFloat) + 10 * r);
      EXPECT_TRUE(same(all_gather_v(v, g), at::cat(vs)));
      at::Tensor c = pattern(rank, rows_of(rank) * 4, 5, at::kFloat).reshape({rows_of(rank), 4, 5});
      std::vector<at::Tensor> cs;
      for (int r = 0; r < n; ++r)
        cs.push_back(pattern(r, rows_of(r) * 4, 5, at::kFloat).reshape({rows_of(r), 4, 5}));
      EXPECT_TRUE(same(all_gather_v(c, g), at::cat(cs)));
    }
  }, fast());
}

TEST_P(WorldSizes, AllGatherVAllRanksEmpty) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    at::Tensor got = all_gather_v(at::empty({0, 2}), mesh.get_group(0));
    EXPECT_EQ(got.sizes(), (std::vector<int64_t>{0, 2}));
  }, fast());
}

TEST_P(WorldSizes, AllToAllVEveryDtype) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (auto dtype : kDtypes) {
      const auto c = testing::all_to_all_case(rank, n, 2, dtype);
      at::Tensor got = all_to_all_v(c.input, c.in_splits, c.out_splits, g);
      EXPECT_TRUE(same(got, c.expected)) << "dtype " << dtype;
    }
  }, fast());
}

TEST_P(WorldSizes, AllToAllVIntoAGivenOutput) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto c = testing::all_to_all_case(rank, n, 2, at::kFloat);
    const int64_t rows = c.expected.size(0);
    const Framed out({rows, 2}, at::kFloat);
    at::Tensor got = all_to_all_v_async(c.input, c.in_splits, c.out_splits, g, out.into).wait();
    EXPECT_EQ(got.data_ptr(), out.into.data_ptr());
    EXPECT_TRUE(same(out.into, c.expected));
    EXPECT_TRUE(out.untouched_around());
  }, fast());
}

TEST_P(WorldSizes, AllGatherVIntoAGivenOutput) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (AllGatherRoute route : {AllGatherRoute::kPointToPoint, AllGatherRoute::kGlooRing}) {
      set_all_gather_route(g, route);
      for (bool with_sizes : {true, false}) {
        std::vector<at::Tensor> pieces;
        for (int r = 0; r < n; ++r) pieces.push_back(pattern(r + 3 * with_sizes, rows_of(r), 3, at::kDouble));
        const at::Tensor expected = at::cat(pieces, 0);
        const int64_t rows = expected.size(0);
        const Framed out({rows, 3}, at::kDouble);
        auto sizes = with_sizes ? std::optional<std::vector<int64_t>>(rows_all(n)) : std::nullopt;
        at::Tensor got = all_gather_v_async(pieces[rank], g, sizes, out.into).wait();
        EXPECT_EQ(got.data_ptr(), out.into.data_ptr()) << "route " << int(route);
        EXPECT_TRUE(same(out.into, expected)) << "route " << int(route) << " sizes " << with_sizes;
        EXPECT_TRUE(out.untouched_around());
      }
    }
  }, fast());
}

TEST_P(WorldSizes, AllReduceIntoAGivenOutput) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    // Native (float, avg divides in place), fallback (bfloat16 on Gloo), empty, 0-dim.
    for (auto dtype : {at::kFloat, at::kBFloat16}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        at::Tensor mine = pattern(rank, 3, 4, dtype);
        std::vector<at::Tensor> all;
        for (int r = 0; r < n; ++r) all.push_back(pattern(r, 3, 4, at::kDouble));
        at::Tensor want = at::stack(all);
        want = op == ReduceOp::kSum ? want.sum(0) : op == ReduceOp::kAvg ? want.mean(0) : std::get<0>(want.max(0));
        const Framed out({3, 4}, dtype);
        at::Tensor got = all_reduce_async(mine, op, g, out.into).wait();
        EXPECT_EQ(got.data_ptr(), out.into.data_ptr());
        EXPECT_TRUE(at::allclose(out.into.to(at::kDouble), want, 1e-2, 1e-2)) << dtype << " " << to_string(op);
        EXPECT_TRUE(same(mine, pattern(rank, 3, 4, dtype)));  // the input is not modified
        EXPECT_TRUE(out.untouched_around());
      }
    }
    at::Tensor scalar_out = at::zeros({});
    EXPECT_EQ(all_reduce_async(at::full({}, 1.0f), ReduceOp::kSum, g, scalar_out).wait().item<float>(), float(n));
    EXPECT_EQ(scalar_out.item<float>(), float(n));
    at::Tensor empty_out = at::zeros({0, 2});
    EXPECT_EQ(all_reduce_async(at::zeros({0, 2}), ReduceOp::kSum, g, empty_out).wait().data_ptr(),
              empty_out.data_ptr());
  }, fast());
}

TEST_P(WorldSizes, ScatterVFromEverySource) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kBool, at::kLong}) {
      for (int src = 0; src < n; ++src) {
        std::vector<at::Tensor> pieces;
        for (int r = 0; r < n; ++r) pieces.push_back(pattern(src * 10 + r, rows_of(r), 3, dtype));
        at::Tensor input = rank == src ? at::cat(pieces) : at::empty({0, 3}, at::TensorOptions(dtype));
        at::Tensor got = scatter_v(input, rows_all(n), src, g);
        EXPECT_TRUE(same(got, pieces[rank])) << "src " << src << " dtype " << dtype;
      }
    }
  }, fast());
}

TEST_P(WorldSizes, AllReduceEveryOpAndDtype) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kLong, at::kInt,
                       at::kBool, at::kShort}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        const bool integral = !at::isFloatingType(dtype);
        at::Tensor mine = pattern(rank, 4, 3, dtype);
        if (op == ReduceOp::kAvg && integral) {
          EXPECT_THROW(all_reduce(mine, op, g), ValueError);
          continue;
        }
        at::Tensor acc = pattern(0, 4, 3, dtype).clone();
        for (int r = 1; r < n; ++r) {
          at::Tensor p = pattern(r, 4, 3, dtype);
          if (op == ReduceOp::kMax) acc = at::maximum(acc, p);
          else if (op == ReduceOp::kMin) acc = at::minimum(acc, p);
          else if (dtype == at::kBool) acc = at::logical_or(acc, p);
          else acc = acc + p;
        }
        if (op == ReduceOp::kAvg) acc = acc / n;
        at::Tensor got = all_reduce(mine, op, g);
        EXPECT_EQ(got.scalar_type(), dtype);
        EXPECT_TRUE(at::allclose(got.to(at::kDouble), acc.to(at::kDouble), 1e-2, 1e-2))
            << "dtype " << dtype << " op " << to_string(op) << "\n" << got << "\n" << acc;
        EXPECT_TRUE(same(mine, pattern(rank, 4, 3, dtype))) << "input modified";
      }
    }
  }, fast());
}

TEST_P(WorldSizes, ReduceScatterVEveryOp) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto seen = testing::rows_seen_by(rank, n);
    const auto& splits = seen.rows;
    const int64_t total = seen.total, offset = seen.offset;
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong, at::kBool}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        if (op == ReduceOp::kAvg && !at::isFloatingType(dtype)) continue;
        at::Tensor acc = pattern(0, total, 3, dtype).narrow(0, offset, splits[rank]).clone();
        for (int r = 1; r < n; ++r) {
          at::Tensor p = pattern(r, total, 3, dtype).narrow(0, offset, splits[rank]);
          if (op == ReduceOp::kMax) acc = at::maximum(acc, p);
          else if (op == ReduceOp::kMin) acc = at::minimum(acc, p);
          else if (dtype == at::kBool) acc = at::logical_or(acc, p);
          else acc.add_(p);
        }
        if (op == ReduceOp::kAvg) acc.div_(n);
        at::Tensor got = reduce_scatter_v(pattern(rank, total, 3, dtype), splits, op, g);
        EXPECT_TRUE(same(got, acc)) << "dtype " << dtype << " op " << to_string(op);
      }
    }
  }, fast());
}

TEST_P(WorldSizes, ReduceScatterPiecesEqualsReduceScatterV) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    // Rank j's part of a flat input of 5 elements per rank plus j, cut the same way on every
    // rank into pieces of 2, 0, 3, ... elements (a piece may be empty; rank 1's part is
    // empty): the pieces are views of the input, read where they lie.
    std::vector<int64_t> splits;
    for (int j = 0; j < n; ++j) splits.push_back(j == 1 ? 0 : 5 + j);
    int64_t total = 0;
    for (int64_t s : splits) total += s;
    for (auto dtype : {at::kFloat, at::kDouble, at::kBFloat16, at::kLong, at::kBool}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
        if (op == ReduceOp::kAvg && !at::isFloatingType(dtype)) continue;
        const at::Tensor input = pattern(rank, total, 1, dtype).view({-1});
        std::vector<std::vector<at::Tensor>> pieces(n);
        int64_t at = 0;
        for (int j = 0; j < n; ++j) {
          const int64_t cut[3] = {2, 0, 3};
          for (int64_t left = splits[j], c = 0; left > 0 || pieces[j].empty(); ++c) {
            const int64_t take = std::min(left, cut[c % 3]);
            pieces[j].push_back(input.narrow(0, at, take));
            at += take;
            left -= take;
          }
        }
        const at::Tensor want = reduce_scatter_v(input, splits, op, g);
        const at::Tensor out = at::full({splits[rank]}, 7, at::TensorOptions(dtype));
        reset_stats(mesh);
        const at::Tensor got = reduce_scatter_pieces_async(pieces, op, g, out).wait();
        // The same bytes as reduce_scatter_v: all but this rank's part out, (n - 1) parts in.
        const CommStats st = stats(mesh);
        const int64_t elem = input.element_size();
        EXPECT_EQ(st[CollectiveKind::kReduceScatterV].calls, 1);
        EXPECT_EQ(st[CollectiveKind::kReduceScatterV].bytes_sent,
                  (total - splits[rank]) * elem);
        EXPECT_EQ(st[CollectiveKind::kReduceScatterV].bytes_received,
                  (n - 1) * splits[rank] * elem);
        EXPECT_TRUE(got.is_same(out));
        EXPECT_TRUE(same(got, want)) << "dtype " << dtype << " op " << to_string(op);
        EXPECT_TRUE(same(reduce_scatter_pieces_async(pieces, op, g).wait(), want));
        if (dtype == at::kBFloat16) {
          // Accumulated in a wider output: the same bits as reducing the pieces cast to it.
          const at::Tensor wide = reduce_scatter_v(input.to(at::kDouble), splits, op, g);
          const at::Tensor got_wide = reduce_scatter_pieces_async(
              pieces, op, g, at::empty({splits[rank]}, at::kDouble)).wait();
          EXPECT_TRUE(same(got_wide, wide)) << "op " << to_string(op);
        }
      }
    }
    // Refusals name the values (no communication happens).
    const at::Tensor x = at::ones({4, 2});
    std::vector<std::vector<at::Tensor>> bad(n, std::vector<at::Tensor>{at::ones({2})});
    EXPECT_THAT(error_of([&] { reduce_scatter_pieces_async({}, ReduceOp::kSum, g); }),
                HasSubstr("0 lists of pieces for a group of " + std::to_string(n)));
    bad[0][0] = x.t()[0];
    EXPECT_THAT(error_of([&] { reduce_scatter_pieces_async(bad, ReduceOp::kSum, g); }),
                HasSubstr("piece 0 for rank 0 must be a contiguous 1-D tensor"));
    bad[0] = {at::ones({2}, at::kDouble), at::ones({2})};
    EXPECT_THAT(error_of([&] { reduce_scatter_pieces_async(bad, ReduceOp::kSum, g); }),
                HasSubstr("piece 1 for rank 0 is Float on cpu, the first piece Double on cpu"));
    bad[0] = {at::ones({2})};
    EXPECT_THAT(error_of([&] { reduce_scatter_pieces_async(bad, ReduceOp::kSum, g, at::ones({3})); }),
                HasSubstr("output must be a contiguous 1-D Float (or wider floating) tensor of 2 elements"));
    EXPECT_THAT(error_of([&] {
                  reduce_scatter_pieces_async(bad, ReduceOp::kSum, g, at::ones({2}, at::kBFloat16));
                }),
                HasSubstr("got CPUBFloat16Type of sizes [2]"));
    bad[0][0] = at::ones({2}, at::kLong);
    for (auto& l : bad) l[0] = at::ones({2}, at::kLong);
    EXPECT_THAT(error_of([&] { reduce_scatter_pieces_async(bad, ReduceOp::kAvg, g); }),
                HasSubstr("avg"));
  }, fast());
}

TEST_P(WorldSizes, BroadcastInPlace) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    for (auto dtype : {at::kFloat, at::kBFloat16, at::kBool, at::kLong, at::kComplexDouble}) {
      for (int src = 0; src < n; ++src) {
        at::Tensor t = rank == src ? pattern(src, 5, 2, dtype) : at::zeros({5, 2}, at::TensorOptions(dtype));
        at::Tensor out = broadcast(t, src, g);
        EXPECT_TRUE(out.is_same(t));
        EXPECT_TRUE(same(t, pattern(src, 5, 2, dtype))) << "src " << src;
      }
      // Non-contiguous destination.
      at::Tensor base = at::zeros({2, 5}, at::TensorOptions(dtype));
      at::Tensor t = base.t();
      if (rank == 0) t.copy_(pattern(7, 5, 2, dtype));
      broadcast(t, 0, g);
      EXPECT_TRUE(same(t.contiguous(), pattern(7, 5, 2, dtype)));
    }
  }, fast());
}

TEST_P(WorldSizes, AsyncHandlesOverlapAndWaitIsIdempotent) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto splits = rows_all(n);
    at::Tensor x = pattern(rank, rows_of(rank), 4, at::kFloat);
    Work w1 = all_gather_v_async(x, g, splits);
    Work w2 = all_reduce_async(x.sum(0, true), ReduceOp::kSum, g);
    Work w3 = broadcast_async(at::full({3}, rank == 0 ? 5.0 : 0.0), 0, g);
    at::Tensor local = at::mm(at::ones({64, 64}), at::ones({64, 64}));  // compute meanwhile
    EXPECT_EQ(local[0][0].item<float>(), 64.f);
    at::Tensor a = w1.wait();
    at::Tensor b = w1.wait();
    EXPECT_TRUE(a.is_same(b));
    EXPECT_TRUE(w1.is_completed());
    std::vector<at::Tensor> pieces;
    for (int r = 0; r < n; ++r) pieces.push_back(pattern(r, rows_of(r), 4, at::kFloat));
    EXPECT_TRUE(same(a, at::cat(pieces)));
    EXPECT_TRUE(at::allclose(w2.wait(), at::cat(pieces).sum(0, true)));
    EXPECT_TRUE(same(w3.wait(), at::full({3}, 5.0)));
    EXPECT_TRUE(w2.wait().is_same(w2.wait()));
    EXPECT_NE(w1.description().find("all_gather_v on group"), std::string::npos);
    Work done;
    EXPECT_FALSE(done.wait().defined());
  }, fast());
}

TEST_P(WorldSizes, ByteCountersPerRank) {
  const int n = GetParam();
  run_threads(n, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    const auto rows = rows_all(n);
    int64_t total = 0;
    for (auto r : rows) total += r;
    const int64_t row_bytes = 3 * 4;  // 3 floats
    reset_stats(mesh);
    EXPECT_EQ(stats(mesh).calls(), 0);
    // Ring route: forwards every piece but the right neighbour's.
    set_all_gather_route(g, AllGatherRoute::kGlooRing);
    all_gather_v(pattern(rank, rows[rank], 3, at::kFloat), g, rows);
    CommStats s = stats(mesh);
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].calls, 1);
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].bytes_sent,
              n == 1 ? 0 : (total - rows[(rank + 1) % n]) * row_bytes);
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].bytes_received, (total - rows[rank]) * row_bytes);
    reset_stats(mesh);
    reset_stats(g);
    // Point-to-point route: own rows to every peer.
    set_all_gather_route(g, AllGatherRoute::kPointToPoint);
    all_gather_v(pattern(rank, rows[rank], 3, at::kFloat), g, rows);
    s = stats(mesh);
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].calls, 1);
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].bytes_sent, rows[rank] * row_bytes * (n - 1));
    EXPECT_EQ(s[CollectiveKind::kAllGatherV].bytes_received, (total - rows[rank]) * row_bytes);
    // all_to_all_v: everything but the block to self.
    std::vector<int64_t> in_s(n), out_s(n);
    int64_t in_rows = 0, sent = 0, recv = 0;
    for (int j = 0; j < n; ++j) {
      in_s[j] = testing::a2a_rows(rank, j);
      out_s[j] = testing::a2a_rows(j, rank);
      in_rows += in_s[j];
      if (j != rank) {
        sent += in_s[j] * row_bytes;
        recv += out_s[j] * row_bytes;
      }
    }
    all_to_all_v(at::zeros({in_rows, 3}), in_s, out_s, g);
    s = stats(g);
    EXPECT_EQ(s[CollectiveKind::kAllToAllV].bytes_sent, sent);
    EXPECT_EQ(s[CollectiveKind::kAllToAllV].bytes_received, recv);
    // reduce_scatter_v: all but own piece out, (n-1) copies of own piece in.
    reduce_scatter_v(at::zeros({total, 3}), rows, ReduceOp::kSum, g);
    s = stats(mesh);
    EXPECT_EQ(s[CollectiveKind::kReduceScatterV].bytes_sent, (total - rows[rank]) * row_bytes);
    EXPECT_EQ(s[CollectiveKind::kReduceScatterV].bytes_received, (n - 1) * rows[rank] * row_bytes);
    EXPECT_EQ(s[CollectiveKind::kAllToAllV].calls, 1) << "reduce_scatter_v is not double counted";
    // broadcast from 0 and scatter_v from 0.
    broadcast(at::zeros({10}), 0, g);
    scatter_v(at::zeros({rank == 0 ? total : 0, 3}), rows, 0, g);
    s = stats(mesh);
    EXPECT_EQ(s[CollectiveKind::kBroadcast].bytes_sent, rank == 0 ? 40 * (n - 1) : 0);
    EXPECT_EQ(s[CollectiveKind::kBroadcast].bytes_received, rank == 0 ? 0 : (n > 1 ? 40 : 0));
    EXPECT_EQ(s[CollectiveKind::kScatterV].bytes_sent, rank == 0 ? (total - rows[0]) * row_bytes : 0);
    EXPECT_EQ(s[CollectiveKind::kScatterV].bytes_received, rank == 0 ? 0 : rows[rank] * row_bytes);
    EXPECT_EQ(stats(mesh).bytes_sent(), stats(g).bytes_sent());
    EXPECT_NE(stats(mesh).to_string().find("all_gather_v: calls=1"), std::string::npos);
    reset_stats(mesh);
    EXPECT_EQ(stats(mesh), CommStats{});
  }, fast());
}

TEST(Collectives, ArgumentErrorsNameTheProblem) {
  run_threads(2, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    auto expect_msg = [](auto&& fn, const std::string& needle) {
      try {
        fn();
        ADD_FAILURE() << "no throw; expected " << needle;
      } catch (const ValueError& e) {
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      }
    };
    expect_msg([&] { all_to_all_v(at::zeros({3, 1}), {1, 1}, {1, 1}, g); },
               "input_splits sum to 2 rows but the input has 3 rows");
    expect_msg([&] { all_to_all_v(at::zeros({2, 1}), {1, 1, 0}, {1, 1}, g); },
               "input_splits has 3 entries but the group has 2 ranks");
    expect_msg([&] { all_gather_v(at::zeros({2, 1}), g, std::vector<int64_t>{1, 1}); },
               "sizes[" + std::to_string(rank) + "] = 1 but the input has 2 rows");
    expect_msg([&] { all_to_all_v(at::zeros({2, 1}), {-1, 3}, {1, 1}, g); }, "is negative");
    expect_msg([&] { all_to_all_v_async(at::zeros({2, 1}), {1, 1}, {1, 1}, g, at::zeros({3, 1})); },
               "output must be a contiguous Float tensor of shape [2, 1], got");
    expect_msg([&] { all_to_all_v_async(at::zeros({2, 1}), {1, 1}, {1, 1}, g, at::zeros({2, 1}, at::kLong)); },
               "output must be a contiguous Float tensor");
    expect_msg([&] { all_to_all_v_async(at::zeros({2, 1}), {1, 1}, {1, 1}, g, at::empty({2, 1}, at::kMeta)); },
               "output is on meta but the input on cpu");
    // all_gather_v into a given output: checked before anything is sent (with sizes) or after
    // the row-count exchange (without); every rank passes the same bad output.
    const std::vector<int64_t> two{1, 1};
    expect_msg([&] { all_gather_v_async(at::zeros({1, 2}), g, two, at::zeros({3, 2})); },
               "all_gather_v on group");
    expect_msg([&] { all_gather_v_async(at::zeros({1, 2}), g, two, at::zeros({3, 2})); },
               "output must be a contiguous Float tensor of shape [2, 2], got");
    expect_msg([&] { all_gather_v_async(at::zeros({1, 2}), g, std::nullopt, at::zeros({2, 2}, at::kInt)); },
               "output must be a contiguous Float tensor of shape [2, 2]");
    expect_msg([&] { all_gather_v_async(at::zeros({1, 2}), g, two, at::zeros({2, 2}).t()); },
               "(not contiguous)");
    expect_msg([&] { all_gather_v_async(at::zeros({1, 2}), g, two, at::empty({2, 2}, at::kMeta)); },
               "output is on meta but the input on cpu");
    {
      at::Tensor buf = at::zeros({2, 2});
      expect_msg([&] { all_gather_v_async(buf.narrow(0, rank, 1), g, two, buf); },
                 "output shares the input's storage");
      expect_msg([&] { all_to_all_v_async(buf, {1, 1}, {1, 1}, g, buf); },
                 "output shares the input's storage");
    }
    expect_msg([&] { all_reduce_async(at::ones({2}), ReduceOp::kSum, g, at::zeros({3})); },
               "output must be a contiguous Float tensor of shape [2], got");
    expect_msg([&] { all_reduce_async(at::ones({2}), ReduceOp::kSum, g, at::zeros({2}, at::kLong)); },
               "output must be a contiguous Float tensor");
    expect_msg([&] { all_reduce_async(at::ones({2}), ReduceOp::kSum, g, at::empty({2}, at::kMeta)); },
               "output is on meta but the tensor on cpu");
    {
      at::Tensor t = at::ones({2});
      expect_msg([&] { all_reduce_async(t, ReduceOp::kSum, g, t); }, "output shares the tensor's storage");
    }
    // Nothing was sent: the group still works.
    EXPECT_TRUE(same(all_gather_v(at::full({1, 2}, float(rank)), g, two),
                     at::tensor({0.f, 0.f, 1.f, 1.f}).view({2, 2})));
    expect_msg([&] { scatter_v(at::zeros({2, 1}), {1, 1}, 5, g); }, "src 5 is not a rank");
    expect_msg([&] { broadcast(at::zeros({2}), -1, g); }, "src -1 is not a rank");
    expect_msg([&] { all_reduce(at::ones({2}, at::kLong), ReduceOp::kAvg, g); },
               "avg is not defined for dtype Long");
    expect_msg([&] { reduce_scatter_v(at::ones({2}, at::kInt), {1, 1}, ReduceOp::kAvg, g); },
               "avg is not defined");
    expect_msg([&] { all_gather_v(at::Tensor(), g); }, "input is undefined");
    expect_msg([&] { all_gather_v(at::zeros({}), g); }, "at least one dimension");
    expect_msg([&] { all_reduce(at::ones({2}), ReduceOp::kSum, Group()); }, "undefined");
    expect_msg([&] { reduce_op_from_string("prod"); }, "unknown reduce op \"prod\"");
    EXPECT_EQ(reduce_op_from_string("avg"), ReduceOp::kAvg);
  }, fast());
}

TEST(Collectives, MismatchedRowSizesAreReported) {
  auto outcomes = testing::run_threads_collect(2, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    all_gather_v(at::zeros({1, rank + 1}), mesh.get_group(0));
  }, fast());
  for (const auto& o : outcomes) {
    EXPECT_FALSE(o.ok);
    EXPECT_NE(o.error.find("has rows of"), std::string::npos) << o.error;
  }
}

// A peer that never joins: the others fail with the collective's context within the
// timeout, on each all_gather_v route (the Gloo ring and point-to-point), with inputs
// small and large (the automatic route switches at kAllGatherRingMaxBytes).
// `silent`: the peer stays connected but sleeps past the timeout (a hung rank), instead of
// leaving (its connections close at once).
void missing_peer_case(AllGatherRoute route, int64_t row_elems, bool silent = false) {
  testing::HarnessOptions opts;
  opts.timeout = std::chrono::seconds(3);
  opts.deadline = std::chrono::seconds(60);
  const auto start = std::chrono::steady_clock::now();
  auto outcomes = testing::run_threads_collect(3, [&](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {n});
    Group g = mesh.get_group(0);
    set_all_gather_route(g, route);
    if (rank == 2) {  // never joins the collective
      if (silent) std::this_thread::sleep_for(std::chrono::seconds(9));
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    Work w = all_gather_v_async(at::ones({1, row_elems}), g, std::vector<int64_t>{1, 1, 1});
    std::string first, second;
    try { w.wait(); } catch (const CommError& e) { first = e.what(); }
    try { w.wait(); } catch (const CommError& e) { second = e.what(); }
    EXPECT_EQ(first, second) << "wait() is idempotent on failure too";
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // A silent peer: the failure comes from the 3 s timeout, not before it, and well
    // before the peer wakes (9 s).
    if (silent) {
      EXPECT_GE(waited, 2.5) << first;
      EXPECT_LT(waited, 8.5) << first;
    }
    throw std::runtime_error(first);
  }, opts);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(secs, 30.0);
  EXPECT_TRUE(outcomes[2].ok);
  for (int r = 0; r < 2; ++r) {
    EXPECT_FALSE(outcomes[r].ok);
    EXPECT_NE(outcomes[r].error.find("all_gather_v on group [0,1,2] (rank " + std::to_string(r) + "): "),
              std::string::npos) << outcomes[r].error;
    EXPECT_LT(outcomes[r].seconds, 20.0);
  }
}

TEST(Collectives, MissingPeerFailsWithContextWithinTimeout) {
  missing_peer_case(AllGatherRoute::kAuto, 2);  // small: the ring
}
TEST(Collectives, MissingPeerFailsWithinTimeoutOnTheRingRoute) {
  missing_peer_case(AllGatherRoute::kGlooRing, 2);
  missing_peer_case(AllGatherRoute::kGlooRing, 2, /*silent=*/true);
}
TEST(Collectives, MissingPeerFailsWithinTimeoutOnThePointToPointRoute) {
  missing_peer_case(AllGatherRoute::kPointToPoint, 2);
  missing_peer_case(AllGatherRoute::kPointToPoint, 2, /*silent=*/true);
  // 3 x 32 Ki float32 = 384 KiB of output: the automatic route is point-to-point too.
  missing_peer_case(AllGatherRoute::kAuto, 32 * 1024);
}

TEST(Harness, FailingRankIsNamed) {
  try {
    run_threads(3, [](int rank, int, const World&) {
      if (rank == 1) throw std::runtime_error("boom from one");
    });
    ADD_FAILURE() << "expected a throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1: boom from one"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
  }
}

TEST(Harness, FreePortsComeFromTheOs) {
  const int port = testing::free_tcp_port();
  EXPECT_GT(port, 0);
  EXPECT_LE(port, 65535);
  // Every rank gets rank 0's port.
  std::vector<int> got(3, -1);
  run_threads(3, [&](int rank, int, const World& world) {
    got[rank] = testing::free_tcp_port_of_rank0(rank, world, "harness_test/port");
  });
  EXPECT_GT(got[0], 0);
  EXPECT_EQ(got[1], got[0]);
  EXPECT_EQ(got[2], got[0]);
  // A World without a store cannot hand the port on.
  EXPECT_THROW(testing::free_tcp_port_of_rank0(0, make_world(nullptr, 0, 1), "k"), ValueError);
}

TEST(HarnessDeathTest, HungRankAbortsWithItsName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        testing::HarnessOptions o;
        o.deadline = std::chrono::milliseconds(500);
        testing::run_threads_collect(3, [](int rank, int, const World&) {
          if (rank == 2) std::this_thread::sleep_for(std::chrono::seconds(30));
        }, o);
      },
      "ranks \\[2\\] of 3 did not finish");
}

}  // namespace
}  // namespace hyper::comm

namespace hyper::comm {
namespace {

// Each all_gather_v route runs when chosen, and kAuto chooses by output size (the ring up to
// 64 KiB, docs/comm.md). The route is seen in the bytes it sends (the per-route counts of
// docs/comm.md, which differ for every rank when n >= 3 and rank r holds r + 1 rows); the
// result is checked against the concatenation of every rank's rows. (Timings of the two
// routes: comm_bench's row all_gather_v.ring_vs_point_to_point.)
TEST(AllGatherRoutes, EachRouteRunsWhenChosenAndAutoChoosesBySize) {
  for (int n : {3, 4}) {
    for (int64_t row_floats : {int64_t{16}, int64_t{8 * 1024}}) {
      testing::run_threads(n, [&](int rank, int n, const World& world) {
        auto mesh = init_device_mesh(world, "cpu", {n});
        Group g = mesh.get_group(0);
        std::vector<int64_t> rows(n);
        std::vector<at::Tensor> pieces;
        int64_t total = 0;
        for (int r = 0; r < n; ++r) {
          rows[r] = r + 1;
          total += rows[r];
          pieces.push_back(at::full({rows[r], row_floats}, float(r)));
        }
        const int64_t row_bytes = row_floats * 4;
        const int64_t ring_sent = (total - rows[(rank + 1) % n]) * row_bytes;
        const int64_t p2p_sent = (n - 1) * rows[rank] * row_bytes;
        ASSERT_NE(ring_sent, p2p_sent);
        const bool small = total * row_bytes <= 64 * 1024;
        for (auto [route, sent] : {std::pair{AllGatherRoute::kPointToPoint, p2p_sent},
                                   std::pair{AllGatherRoute::kGlooRing, ring_sent},
                                   std::pair{AllGatherRoute::kAuto, small ? ring_sent : p2p_sent}}) {
          set_all_gather_route(g, route);
          reset_stats(g);
          EXPECT_TRUE(same(all_gather_v(pieces[rank], g, rows), at::cat(pieces)))
              << "route " << static_cast<int>(route);
          EXPECT_EQ(stats(g)[CollectiveKind::kAllGatherV].bytes_sent, sent)
              << "route " << static_cast<int>(route) << ", n " << n << ", row " << row_floats;
        }
      });
    }
  }
}

}  // namespace
}  // namespace hyper::comm
