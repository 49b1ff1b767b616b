// gather / index_select / scatter / scatter_add (and in place) / sort / topk / cumprod of
// DTensor tensors (dispatch/index_kernels.h, dispatch/index_rules.h): values and
// gradients against the same op on the full tensors on one device, on 2 and 4 ranks (even
// and uneven shards, an empty shard) and a 2x2 mesh, for every combination of R, S(0), S(1),
// P(sum), P(max) self and R, S(0), S(1), plain indices; the placements the rules promise (no
// bytes where shards line up, a masked Partial that moves the output's size, never self's);
// the errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <ATen/TensorIndexing.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/index_rules.h"
#include "hyper/tensor/dispatch/testing_case.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/dtensor_tensor.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch::ArgLayout;
using dispatch_testing::bytes_of;
using dispatch_testing::error_of;
using dispatch_testing::expect_close;
using dispatch_testing::full;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;
using dispatch_testing::Case;
using dispatch_testing::check;
using dispatch_testing::name_of;
using dispatch_testing::operand;

/// Indices into a [S0, S1] tensor along `d`, of shape `shape`, distinct along d (scatter's
/// overwrite is then order-free): 2i + j mod S0 along 0, i + j mod S1 along 1.
at::Tensor index_for(const std::vector<int64_t>& self, const std::vector<int64_t>& shape, int64_t d) {
  const at::Tensor i = at::arange(shape[0], at::kLong).unsqueeze(1);
  const at::Tensor j = at::arange(shape[1], at::kLong).unsqueeze(0);
  return d == 0 ? at::remainder(2 * i + j, self[0]) : at::remainder(i + j, self[1]);
}

const std::vector<Placements>& self_catalogue(int64_t mesh_ndim) {
  static const std::vector<Placements> one = {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()},
                                              {Partial("max")}};
  static const std::vector<Placements> two = {{Shard(0), Shard(1)}, {Shard(1), Shard(0)},
                                              {Shard(0), Shard(0)}, {Partial(), Shard(1)},
                                              {Replicate(), Shard(0)}};
  return mesh_ndim == 1 ? one : two;
}
const std::vector<Placements>& index_catalogue(int64_t mesh_ndim) {
  static const std::vector<Placements> one = {{}, {Replicate()}, {Shard(0)}, {Shard(1)}};
  static const std::vector<Placements> two = {{}, {Shard(0), Shard(1)}, {Shard(1), Replicate()},
                                              {Replicate(), Shard(0)}};
  return mesh_ndim == 1 ? one : two;
}

void gather_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  const at::Tensor X = global_a(S);
  for (int64_t d : {0, 1})
    for (int64_t narrow : {0, 1}) {
      // An index as long as self along the other dim (its shards can line up), or shorter.
      std::vector<int64_t> I = S;
      I[d] = 3;
      if (narrow) I[1 - d] -= 1;
      const at::Tensor idx = index_for(S, I, d);
      for (const auto& ps : self_catalogue(mesh.ndim()))
        for (const auto& pi : index_catalogue(mesh.ndim()))
          check(mesh, {"gather " + shape_to_string(S) + " " + to_string(ps) + " dim " +
                           std::to_string(d) + " index " + shape_to_string(I) + " " + name_of(pi),
                       {X, idx}, {ps, pi},
                       [d](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::gather(a[0], d, a[1])}; }});
    }
}

void index_select_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  const at::Tensor X = global_a(S);
  for (int64_t d : {0, 1}) {
    // Repeats and every order; 2 picks (fewer than the dim: masked) and 7 (more: gathered).
    for (const at::Tensor& idx : {at::tensor(std::vector<int64_t>{S[d] - 1, 0}, at::kLong),
                                  at::remainder(at::arange(7, at::kLong) * 3 + 1, S[d])}) {
      const std::vector<Placements> pis =
          mesh.ndim() == 1 ? std::vector<Placements>{{}, {Replicate()}, {Shard(0)}}
                           : std::vector<Placements>{{}, {Shard(0), Replicate()}, {Replicate(), Shard(0)}};
      for (const auto& ps : self_catalogue(mesh.ndim()))
        for (const auto& pi : pis)
          check(mesh, {"index_select " + shape_to_string(S) + " " + to_string(ps) + " dim " +
                           std::to_string(d) + " index [" + std::to_string(idx.numel()) + "] " + name_of(pi),
                       {X, idx}, {ps, pi},
                       [d](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::index_select(a[0], d, a[1])}; }});
    }
  }
}

void scatter_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  const at::Tensor X = global_a(S);
  for (int64_t d : {0, 1}) {
    std::vector<int64_t> I = S;
    I[d] = 3;
    const at::Tensor idx = index_for(S, I, d);
    const at::Tensor Y = global_b(I) - 0.7;
    for (const auto& ps : self_catalogue(mesh.ndim()))
      for (const auto& pi : index_catalogue(mesh.ndim()))
        for (const auto& pq : {Placements(), ps, pi.empty() ? ps : pi}) {
          const std::string what = shape_to_string(S) + " " + to_string(ps) + " dim " +
                                   std::to_string(d) + " index " + name_of(pi) + " src " + name_of(pq);
          check(mesh, {"scatter " + what, {X, idx, Y}, {ps, pi, pq},
                       [d](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::scatter(a[0], d, a[1], a[2])}; }});
          check(mesh, {"scatter_add " + what, {X, idx, Y}, {ps, pi, pq},
                       [d](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::scatter_add(a[0], d, a[1], a[2])}; }});
        }
    // scatter_reduce: every reduce, with and without self (a plain src: the layouts of src
    // were covered above).
    const std::pair<const char*, bool> reduces[] = {
        {"sum", true}, {"sum", false}, {"prod", false}, {"mean", true}, {"amax", true}, {"amin", false}};
    for (const auto& ps : self_catalogue(mesh.ndim()))
      for (const auto& pi : index_catalogue(mesh.ndim()))
        for (const auto& [reduce, self_in] : reduces)
          check(mesh, {std::string("scatter_reduce ") + reduce + (self_in ? " " : " exclude self ") +
                           shape_to_string(S) + " " + to_string(ps) + " dim " + std::to_string(d) +
                           " index " + name_of(pi),
                       {X, idx, Y}, {ps, pi, Placements()},
                       [d, r = std::string(reduce), self_in = self_in](const std::vector<at::Tensor>& a) {
                         return std::vector<at::Tensor>{at::scatter_reduce(a[0], d, a[1], a[2], r, self_in)};
                       }});
    for (const auto& ps : self_catalogue(mesh.ndim()))
      for (const auto& pi : index_catalogue(mesh.ndim()))
        check(mesh, {"scatter.value " + shape_to_string(S) + " " + to_string(ps) + " dim " +
                         std::to_string(d) + " index " + name_of(pi),
                     {X, idx}, {ps, pi},
                     [d](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::scatter(a[0], d, a[1], 2.5)}; }});
  }
}

void along_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  const at::Tensor X = global_b(S);  // distinct values: sort's order has no ties
  for (const auto& ps : self_catalogue(mesh.ndim()))
    for (int64_t d : {0, 1, -1}) {
      const std::string what = shape_to_string(S) + " " + to_string(ps) + " dim " + std::to_string(d);
      using V = std::vector<at::Tensor>;
      const auto outs = check(mesh, {"sort " + what, {X}, {ps}, [d](const V& a) {
                                       auto [v, i] = at::sort(a[0], d, /*descending=*/true);
                                       return V{v, i};
                                     }});
      // The sorted dim is whole on every rank; a Shard of the other dim is kept.
      const int64_t other = d == 0 ? 1 : 0;
      for (size_t m = 0; m < ps.size() && !outs.empty(); ++m) {
        if (ps[m].is_shard() && ps[m].dim() == other) {
          EXPECT_EQ(as_dtensor(outs[1]).placements()[m], ps[m]) << "sort " << what;
        }
      }
      check(mesh, {"sort stable " + what, {X}, {ps}, [d](const V& a) {
                     auto [v, i] = at::sort(a[0], /*stable=*/true, d, false);
                     return V{v, i};
                   }});
      check(mesh, {"topk " + what, {X}, {ps}, [d](const V& a) {
                     auto [v, i] = at::topk(a[0], 2, d);
                     return V{v, i};
                   }});
      check(mesh, {"topk smallest " + what, {X}, {ps}, [d](const V& a) {
                     auto [v, i] = at::topk(a[0], 1, d, /*largest=*/false);
                     return V{v, i};
                   }});
      check(mesh, {"argsort " + what, {X}, {ps}, [d](const V& a) { return V{at::argsort(a[0], d)}; }});
      check(mesh, {"cumprod " + what, {X}, {ps}, [d](const V& a) { return V{at::cumprod(a[0], d)}; }});
      check(mesh, {"logcumsumexp " + what, {X}, {ps}, [d](const V& a) { return V{at::logcumsumexp(a[0], d)}; }});
      check(mesh, {"cummax " + what, {X}, {ps}, [d](const V& a) {
                     auto [v, i] = at::cummax(a[0], d);
                     return V{v, i};
                   }});
      check(mesh, {"cummin " + what, {X}, {ps}, [d](const V& a) {
                     auto [v, i] = at::cummin(a[0], d);
                     return V{v, i};
                   }});
      for (bool keep : {false, true}) {
        const std::string k = keep ? " keepdim " : " ";
        check(mesh, {"kthvalue" + k + what, {X}, {ps}, [d, keep](const V& a) {
                       auto [v, i] = at::kthvalue(a[0], 2, d, keep);
                       return V{v, i};
                     }});
        check(mesh, {"median" + k + what, {X}, {ps}, [d, keep](const V& a) {
                       auto [v, i] = at::median(a[0], d, keep);
                       return V{v, i};
                     }});
        check(mesh, {"nanmedian" + k + what, {X}, {ps}, [d, keep](const V& a) {
                       auto [v, i] = at::nanmedian(a[0], d, keep);
                       return V{v, i};
                     }});
      }
    }
  // mode: values with repeats (the most frequent one; ties: ATen's choice, the same locally).
  const at::Tensor M = at::remainder(at::arange(S[0] * S[1], at::kDouble) * 7, 3).reshape(S);
  for (const auto& ps : self_catalogue(mesh.ndim()))
    for (int64_t d : {0, 1})
      if (std::find(ps.begin(), ps.end(), Partial()) == ps.end())  // P(sum) shares round
        check(mesh, {"mode " + to_string(ps) + " dim " + std::to_string(d), {M}, {ps},
                     [d](const std::vector<at::Tensor>& a) {
                       auto [v, i] = at::mode(a[0], d);
                       return std::vector<at::Tensor>{v, i};
                     }});
  // cumprod through zeros (its backward's hard case: ATen's local formula handles it).
  const at::Tensor Z = global_a(S).round();
  for (const auto& ps : self_catalogue(mesh.ndim()))
    check(mesh, {"cumprod zeros " + to_string(ps), {Z}, {ps},
                 [](const std::vector<at::Tensor>& a) { return std::vector<at::Tensor>{at::cumprod(a[0], 1)}; }});
}

// prod over every element and along a dim (keepdim or not), of R / S / P / 2x2 layouts,
// through zeros (one zero, several zeros in one shard, a whole zero shard) and an integer
// dtype: values and gradients vs one device; a sharded reduced dim sends the candidates only.
void prod_cases(const DeviceMesh& mesh, const at::Tensor& X) {
  using V = std::vector<at::Tensor>;
  for (const auto& ps : self_catalogue(mesh.ndim())) {
    const std::string what = shape_to_string(X.sizes().vec()) + " " + to_string(ps);
    check(mesh, {"prod " + what, {X}, {ps}, [](const V& a) { return V{at::prod(a[0])}; }});
    for (int64_t d : {0, 1, -1})
      for (bool keep : {false, true})
        check(mesh, {"prod dim " + std::to_string(d) + (keep ? " keepdim " : " ") + what, {X}, {ps},
                     [d, keep](const V& a) { return V{at::prod(a[0], d, keep)}; }});
  }
}

TEST(IndexOps, ProdOn2And4RanksAnd2x2) {
  // Values near 1 (the products stay moderate); zeros placed in the tensor's first rows.
  const at::Tensor X = global_b({5, 6}) * 0.6;
  at::Tensor Z = X.clone();
  Z.index_put_({0, 1}, 0.0);
  at::Tensor ZZ = X.clone();
  ZZ.index_put_({1, 2}, 0.0);
  ZZ.index_put_({1, 4}, 0.0);
  ZZ.index_put_({3, 2}, 0.0);
  at::Tensor zero_rows = X.clone();
  zero_rows.narrow(0, 0, 2).zero_();
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}, std::vector<int64_t>{2, 2}})
    run_on_mesh(shape, [&](const DeviceMesh& mesh) {
      for (const at::Tensor& t : {X, Z, ZZ, zero_rows}) prod_cases(mesh, t);
      if (mesh.ndim() == 1) prod_cases(mesh, global_b({3, 4}));  // an empty shard on 4 ranks
    });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    // An integer dtype (ATen's prod gives int64) and a dtype argument.
    const at::Tensor I = at::remainder(at::arange(30, at::kLong), 3).reshape({5, 6}) + 1;
    for (const Placements& ps : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()}}) {
      const at::Tensor i = make(I, mesh, ps).as_tensor();
      EXPECT_TRUE(at::equal(full(at::prod(i, 0)), at::prod(I, 0))) << to_string(ps);
      EXPECT_TRUE(at::equal(full(at::prod(i)), at::prod(I))) << to_string(ps);
      expect_close(full(at::prod(make(global_b({5, 6}), mesh, ps).as_tensor(), 1, false, at::kFloat)).to(at::kDouble),
                   at::prod(global_b({5, 6}), 1, false, at::kFloat).to(at::kDouble), "prod dtype " + to_string(ps));
    }
    // Along a sharded dim only the candidates move: [64, 32] S(0) over dim 0 sends at most
    // 32 doubles per peer (4 ranks: 3 x 32 x 8 bytes), not the tensor (16 KiB).
    const at::Tensor x = make(global_b({64, 32}), mesh, {Shard(0)}).as_tensor();
    at::Tensor p;
    const int64_t sent = bytes_of(mesh, [&] { p = at::prod(x, 0); });
    EXPECT_LE(sent, 3 * 32 * 8) << sent;
    EXPECT_EQ(as_dtensor(p).placements(), Placements{Replicate()});
    expect_close(full(p), at::prod(global_b({64, 32}), 0), "prod [64,32] S(0)");
    EXPECT_EQ(as_dtensor(at::prod(x, 1)).placements(), Placements{Shard(0)});
  });
}

TEST(IndexOps, GatherOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { gather_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    gather_cases(mesh, {5, 6});
    gather_cases(mesh, {3, 4});  // an empty shard
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { gather_cases(mesh, {5, 6}); });
}

TEST(IndexOps, IndexSelectOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { index_select_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    index_select_cases(mesh, {5, 6});
    index_select_cases(mesh, {3, 4});
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { index_select_cases(mesh, {5, 6}); });
}

TEST(IndexOps, ScatterOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { scatter_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) { scatter_cases(mesh, {5, 6}); });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { scatter_cases(mesh, {5, 6}); });
}

TEST(IndexOps, SortTopkCumprodOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { along_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    along_cases(mesh, {5, 6});
    along_cases(mesh, {3, 4});
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { along_cases(mesh, {5, 6}); });
}

using Indices = c10::List<std::optional<at::Tensor>>;

/// `t` at position `d` of an index list (None before it).
Indices at_dim(int64_t d, const at::Tensor& t) {
  Indices l;
  for (int64_t k = 0; k < d; ++k) l.push_back(std::nullopt);
  l.push_back(t);
  return l;
}

/// Advanced indexing with one integer index tensor (advanced_index_kernels.h): x.index({..., idx})
/// of every self layout by 1-D (negative entries, repeats), 2-D and 0-dim indices of every
/// layout; index_put (functional, accumulate or not) with full-shape and broadcast values;
/// index_add (alpha), index_copy, index_fill. Values and gradients vs one device.
void advanced_index_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  const at::Tensor X = global_a(S);
  using V = std::vector<at::Tensor>;
  for (int64_t d : {0, 1}) {
    const int64_t n = S[d];
    const std::string on = shape_to_string(S) + " dim " + std::to_string(d);
    const at::Tensor i1 = at::tensor(std::vector<int64_t>{n - 1, 0, -1, 1}, at::kLong);
    const at::Tensor i2 = at::tensor(std::vector<int64_t>{0, 2, 1, -2}, at::kLong).reshape({2, 2});
    const at::Tensor i0 = at::tensor(int64_t{-2}, at::kLong);
    const std::vector<Placements> pis =
        mesh.ndim() == 1 ? std::vector<Placements>{{}, {Replicate()}, {Shard(0)}}
                         : std::vector<Placements>{{}, {Shard(0), Replicate()}, {Replicate(), Shard(0)}};
    for (const auto& ps : self_catalogue(mesh.ndim())) {
      for (const auto& pi : pis) {
        const std::string what = on + " " + to_string(ps) + " index " + name_of(pi);
        check(mesh, {"index [4] " + what, {X, i1}, {ps, pi},
                     [d](const V& a) { return V{a[0].index(at_dim(d, a[1]))}; }});
        check(mesh, {"index [2,2] " + what, {X, i2}, {ps, pi},
                     [d](const V& a) { return V{a[0].index(at_dim(d, a[1]))}; }});
        // Distinct indices (the overwrite is order-free); values [4, rest] and broadcast.
        const at::Tensor distinct = at::tensor(std::vector<int64_t>{n - 1, 0, -2}, at::kLong);
        std::vector<int64_t> vs = S;
        vs[d] = 3;
        for (bool acc : {false, true}) {
          const std::string a = std::string(acc ? " accumulate " : " ") + what;
          check(mesh, {"index_put" + a, {X, acc ? i1 : distinct, global_b(acc ? std::vector<int64_t>{} : vs)},
                       {ps, pi, Placements()},
                       [d, acc](const V& a) { return V{at::index_put(a[0], at_dim(d, a[1]), a[2], acc)}; }});
        }
        check(mesh, {"index_put values " + name_of(ps) + " " + what,
                     {X, distinct, global_b(vs)}, {ps, pi, ps},
                     [d](const V& a) { return V{at::index_put(a[0], at_dim(d, a[1]), a[2], false)}; }});
        std::vector<int64_t> ss = S;
        ss[d] = 4;
        check(mesh, {"index_add " + what, {X, i1.remainder(n), global_b(ss)}, {ps, pi, ps},
                     [d](const V& a) { return V{at::index_add(a[0], d, a[1], a[2], 2.5)}; }});
        check(mesh, {"index_copy " + what, {X, distinct.remainder(n), global_b(vs)}, {ps, pi, Placements()},
                     [d](const V& a) { return V{at::index_copy(a[0], d, a[1], a[2])}; }});
        check(mesh, {"index_fill " + what, {X, i1}, {ps, pi},
                     [d](const V& a) { return V{at::index_fill(a[0], d, a[1], -3.5)}; }});
        for (const char* r : {"amax", "mean", "prod"})
          check(mesh, {std::string("index_reduce ") + r + " " + what, {X, i1.remainder(n), global_b(ss)},
                       {ps, pi, ps}, [d, r = std::string(r)](const V& a) {
                         return V{at::index_reduce(a[0], d, a[1], a[2], r, /*include_self=*/r != "mean")};
                       }});
      }
      check(mesh, {"index 0-dim " + on + " " + to_string(ps), {X, i0}, {ps, {}},
                   [d](const V& a) { return V{a[0].index(at_dim(d, a[1]))}; }});
    }
  }
  // A 0-dim self (dim 0 or -1): one index, a 0-dim source (OpInfo's samples; it crashed).
  const at::Tensor X0 = global_a({}), s0 = global_b({});
  const at::Tensor one = at::tensor(std::vector<int64_t>{0}, at::kLong);
  const Placements r0(static_cast<size_t>(mesh.ndim()), Replicate());
  for (int64_t d : {0, -1}) {
    const std::string on = " of a 0-dim self, dim " + std::to_string(d);
    check(mesh, {"index_copy" + on, {X0, one, s0}, {r0, {}, r0},
                 [d](const V& a) { return V{at::index_copy(a[0], d, a[1], a[2])}; }});
    check(mesh, {"index_add" + on, {X0, one, s0}, {r0, {}, r0},
                 [d](const V& a) { return V{at::index_add(a[0], d, a[1], a[2], 2.5)}; }});
    check(mesh, {"index_fill" + on, {X0, one}, {r0, {}},
                 [d](const V& a) { return V{at::index_fill(a[0], d, a[1], -3.5)}; }});
    check(mesh, {"index_reduce amax" + on, {X0, one, s0}, {r0, {}, r0},
                 [d](const V& a) { return V{at::index_reduce(a[0], d, a[1], a[2], "amax")}; }});
  }
}

/// Several index tensors and masks (advanced_index_kernels.h, general advanced indexing): every self
/// layout by indices plain / R / S(0): two 1-D indices, the loss idiom x[arange, target],
/// broadcast [3,1] x [1,2] indices, a row mask and a full mask; a 3-D self indexed on dims
/// 0 and 2 with a slice between (the broadcast dims go first) and on dims 1, 2 (adjacent).
void general_index_cases(const DeviceMesh& mesh, const std::vector<int64_t>& S) {
  using V = std::vector<at::Tensor>;
  const at::Tensor X = global_a(S);
  const at::Tensor i0 = at::tensor(std::vector<int64_t>{S[0] - 1, 0, 1}, at::kLong);
  const at::Tensor i1 = at::tensor(std::vector<int64_t>{-1, 2, 0}, at::kLong);
  const at::Tensor ar = at::arange(S[0]);
  const at::Tensor tgt = at::remainder(at::arange(S[0]) * 5 + 1, S[1]);
  const at::Tensor b0 = at::tensor(std::vector<int64_t>{2, 0, -1}, at::kLong).reshape({3, 1});
  const at::Tensor b1 = at::tensor(std::vector<int64_t>{1, S[1] - 1}, at::kLong).reshape({1, 2});
  const at::Tensor rmask = X.select(1, 0).gt(0.5), fmask = X.gt(0.4);
  const std::vector<Placements> pis =
      mesh.ndim() == 1 ? std::vector<Placements>{{}, {Replicate()}, {Shard(0)}}
                       : std::vector<Placements>{{}, {Shard(0), Replicate()}};
  for (const auto& ps : self_catalogue(mesh.ndim()))
    for (const auto& pi : pis) {
      const std::string what = shape_to_string(S) + " " + to_string(ps) + " indices " + name_of(pi);
      check(mesh, {"two indices " + what, {X, i0, i1}, {ps, pi, pi}, [](const V& a) { return V{a[0].index({a[1], a[2]})}; }});
      check(mesh, {"x[arange, target] " + what, {X, ar, tgt}, {ps, pi, pi}, [](const V& a) { return V{a[0].index({a[1], a[2]})}; }});
      check(mesh, {"row mask " + what, {X, rmask}, {ps, pi}, [](const V& a) { return V{a[0].index({a[1]})}; }});
      check(mesh, {"full mask " + what, {X, fmask}, {ps, pi}, [](const V& a) { return V{a[0].index({a[1]})}; }});
      if (pi.empty() || mesh.ndim() == 1 || pi[0].is_replicate())  // 2-D indices: plain or R
        check(mesh, {"broadcast indices " + what, {X, b0, b1}, {ps, pi.empty() ? pi : Placements(pi.size(), Replicate()),
                                                                pi.empty() ? pi : Placements(pi.size(), Replicate())},
                     [](const V& a) { return V{a[0].index({a[1], a[2]})}; }});
    }
  const at::Tensor T = global_a({4, 5, 6});
  const std::vector<Placements> ts =
      mesh.ndim() == 1 ? std::vector<Placements>{{Replicate()}, {Shard(0)}, {Shard(1)}, {Shard(2)}, {Partial()}}
                       : std::vector<Placements>{{Shard(0), Shard(2)}, {Shard(1), Partial()}};
  const at::Tensor j0 = at::tensor(std::vector<int64_t>{3, 0, 1}, at::kLong);
  const at::Tensor j2 = at::tensor(std::vector<int64_t>{5, 5, -6}, at::kLong);
  for (const auto& ps : ts) {
    check(mesh, {"3-D dims 0, 2 apart " + to_string(ps), {T, j0, j2}, {ps, {}, {}},
                 [](const V& a) { return V{a[0].index({a[1], at::indexing::Slice(), a[2]})}; }});
    check(mesh, {"3-D dims 1, 2 adjacent " + to_string(ps), {T, j0, j2}, {ps, {}, {}},
                 [](const V& a) { return V{a[0].index({at::indexing::Slice(), a[1], a[2]})}; }});
  }
}

TEST(IndexOps, GeneralAdvancedIndexOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { general_index_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    general_index_cases(mesh, {5, 6});
    general_index_cases(mesh, {3, 4});  // an empty shard
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { general_index_cases(mesh, {5, 6}); });
}

TEST(IndexOps, AdvancedIndexOn2And4RanksAnd2x2) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) { advanced_index_cases(mesh, {5, 6}); });
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    advanced_index_cases(mesh, {5, 6});
    advanced_index_cases(mesh, {3, 4});  // an empty shard
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) { advanced_index_cases(mesh, {5, 6}); });
}

// index_put with several index tensors (x[i, j] = v, x[mask] = values, a mask beside an integer
// index; adjacent and apart indexed dims, broadcast indices, negative entries, duplicates when
// accumulating), in place and out of place, plain and DTensor indices and values: the
// single-device result on 2 ranks, 4 ranks (uneven) and 2x2, for every self layout; gradients
// of self and values; errors naming the values, nothing written.
TEST(IndexOps, IndexPutWithSeveralIndices) {
  const auto L = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong); };
  struct Put {
    std::string name;
    std::vector<int64_t> shape;
    std::function<Indices(bool)> idx;  // global index list (bool: as DTensors where it can)
    std::vector<int64_t> vshape;       // the values' shape ({}: one element)
  };
  auto cases = [&](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const Placements s0 = mesh.ndim() == 1 ? Placements{Shard(0)} : Placements{Replicate(), Shard(0)};
    auto dt = [&](const at::Tensor& t, bool as_dt) -> std::optional<at::Tensor> {
      return as_dt ? make(t, mesh, s0).as_tensor() : t;
    };
    const at::Tensor M = global_a({5, 6}).gt(0.2), rows = at::arange(5).remainder(2).eq(1);
    const int64_t true_count = M.sum().item<int64_t>();
    const int64_t odd_rows = rows.sum().item<int64_t>();
    const std::vector<Put> puts = {
        {"x[i, j]", {5, 6}, [&](bool d) { return Indices{dt(L({4, 0, -1, 2}), d), dt(L({5, 1, 0, -6}), d)}; }, {4}},
        {"x[i, j] broadcast", {5, 6}, [&](bool d) { return Indices{dt(L({1, 3}).unsqueeze(1), d), L({0, 2, 5})}; }, {2, 3}},
        {"x[:, i, j] adjacent", {4, 5, 6}, [&](bool d) { return Indices{std::nullopt, dt(L({0, 4, 2}), d), dt(L({1, 1, 5}), d)}; }, {4, 3}},
        {"x[i, :, j] apart", {4, 5, 6}, [&](bool d) { return Indices{dt(L({3, 0, 1}), d), std::nullopt, dt(L({2, 5, 0}), d)}; }, {3, 5}},
        {"x[mask] = values", {5, 6}, [&](bool d) { return Indices{dt(M, d)}; }, {true_count}},
        {"x[rows, j]", {5, 6}, [&](bool d) { return Indices{dt(rows, d), L({3, 1})}; }, {odd_rows}},
        {"x[i, j] = scalar", {5, 6}, [&](bool d) { return Indices{dt(L({0, 2, 4}), d), L({1})}; }, {}},
    };
    for (const Put& p : puts)
      for (const Placements& ps : cat) {
        for (bool dt_idx : {false, true})
          for (bool accumulate : {false, true}) {
            const std::string what = p.name + (dt_idx ? " DTensor indices " : " ") +
                                     (accumulate ? "accumulate " : "") + to_string(ps) + " on " +
                                     mesh.to_string();
            const at::Tensor X = global_a(p.shape);
            const at::Tensor V = global_b(p.vshape.empty() ? std::vector<int64_t>{1} : p.vshape)
                                     .reshape(p.vshape);
            // Duplicates only when accumulating (an overwrite's winner is unspecified).
            Indices gi = p.idx(false);
            if (accumulate && p.name == "x[i, j]") gi = Indices{L({4, 0, 4, 2}), L({5, 1, -1, -6})};
            Indices di = dt_idx ? p.idx(true) : gi;
            if (accumulate && p.name == "x[i, j]")
              di = Indices{dt(L({4, 0, 4, 2}), dt_idx), dt(L({5, 1, -1, -6}), dt_idx)};
            const at::Tensor want = at::index_put(X, gi, V, accumulate);
            // Out of place, values plain and as a Replicate DTensor.
            const at::Tensor x = make(X, mesh, ps).as_tensor();
            expect_close(full(at::index_put(x, di, V, accumulate)), want, what + " index_put");
            expect_close(full(x), X, what + " self unchanged");
            const Placements rep(ps.size(), Replicate());
            expect_close(full(at::index_put(x, di, make(V, mesh, rep).as_tensor(), accumulate)),
                         want, what + " DTensor values");
            // Contiguous locals, as ATen's result (the permuted form of indexed dims apart).
            EXPECT_TRUE(as_dtensor(at::index_put(x, di, V, accumulate)).to_local().is_contiguous()) << what;
            // In place: self keeps its layout (a Partial stays a Partial of the same value).
            at::Tensor y = make(X, mesh, ps).as_tensor();
            y.index_put_(di, V, accumulate);
            EXPECT_EQ(as_dtensor(y).placements(), ps) << what;
            expect_close(full(y), want, what + " index_put_");
          }
      }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}});
  });
  // Gradients of self and values through the out-of-place put and through an in-place put on
  // a non-leaf, against one device.
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 5, 6}), V = global_b({3, 5}), W = global_b({4, 5, 6}).cos();
    const Indices gi{L({3, 0, 1}), std::nullopt, L({2, 5, 0})};
    for (const Placements& ps : {Placements{Shard(0)}, Placements{Shard(2)}, Placements{Replicate()}})
      for (bool accumulate : {false, true}) {
        const std::string what = to_string(ps) + (accumulate ? " accumulate" : "");
        const at::Tensor xw = X.clone().requires_grad_(), vw = V.clone().requires_grad_();
        at::Tensor zw = xw * 2.0;
        zw.index_put_(gi, vw * 3.0, accumulate);
        ((at::index_put(xw, gi, vw, accumulate) + zw) * W).sum().backward();
        const at::Tensor xd = make(X, mesh, ps).as_tensor().requires_grad_();
        const at::Tensor vd = make(V, mesh, {Shard(1)}).as_tensor().requires_grad_();
        at::Tensor zd = xd * 2.0;
        zd.index_put_(gi, vd * 3.0, accumulate);
        ((at::index_put(xd, gi, vd, accumulate) + zd) * W).sum().backward();
        expect_close(full(xd.grad()), xw.grad(), "grad self " + what);
        expect_close(full(vd.grad()), vw.grad(), "grad values " + what);
      }
    // Errors: ValueError naming the values; nothing written.
    const at::Tensor X2 = global_a({5, 6});
    at::Tensor x = make(X2, mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { at::index_put_(x, Indices{L({0, 5}), L({1, 1})}, at::ones({2}, at::kDouble)); });
    EXPECT_NE(m.find("aten::index_put_(arg 0: mesh=[2] placements=[S(0)] shape=[5,6]"), std::string::npos) << m;
    EXPECT_NE(m.find("index 5 is out of bounds for dim 0 of size 5"), std::string::npos) << m;
    m = error_of<ValueError>([&] { at::index_put_(x, Indices{L({0, 1}), L({-7, 1})}, at::ones({2}, at::kDouble)); });
    EXPECT_NE(m.find("index -7 is out of bounds for dim 1 of size 6"), std::string::npos) << m;
    m = error_of<ValueError>([&] { at::index_put_(x, Indices{L({0, 1}), L({0, 1, 2})}, at::ones({3}, at::kDouble)); });
    EXPECT_NE(m.find("the index tensors' shapes cannot be broadcast together ([2] and [3] at dim 1)"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] {
      at::index_put_(x, Indices{L({0}), L({0}), L({0})}, at::ones({1}, at::kDouble));
    });
    EXPECT_NE(m.find("3 indexed dims for a tensor of 2 dims (too many indices)"), std::string::npos) << m;
    m = error_of<ValueError>([&] { at::index_put_(x, Indices{L({0}), at::zeros({1}, at::kDouble)}, at::ones({1}, at::kDouble)); });
    EXPECT_NE(m.find("an index tensor must be int64, int32, bool or uint8, got Double"), std::string::npos) << m;
    m = error_of<ValueError>([&] { at::index_put_(x, Indices{at::ones({5, 6}, at::kBool)}, at::ones({7}, at::kDouble)); });
    EXPECT_NE(m.find("aten::index_put_"), std::string::npos) << m;  // 30 positions, 7 values
    EXPECT_TRUE(at::equal(full(x), X2));
  });
}

// masked_scatter(_): the True positions of the (broadcast) mask take the source's first
// elements in order; every self layout, plain / DTensor masks and sources, broadcast masks, in
// place (self's layout kept) and out of place, gradients of self and source, errors.
TEST(IndexOps, MaskedScatter) {
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const Placements rep(static_cast<size_t>(mesh.ndim()), Replicate());
    const Placements s0 = mesh.ndim() == 1 ? Placements{Shard(0)} : Placements{Replicate(), Shard(0)};
    const at::Tensor X = global_a({5, 6}), S = global_b({6, 7});
    const std::vector<std::pair<std::string, at::Tensor>> masks = {
        {"full", X.gt(0.1)}, {"rows [5,1]", at::arange(5).remainder(2).eq(0).unsqueeze(1)},
        {"cols [6]", at::arange(6).remainder(3).ne(1)}, {"one True", X.eq(X.max())},
        {"none", X.gt(1e9)}};
    for (const Placements& ps : cat)
      for (const auto& [mname, M] : masks)
        for (int src_kind : {0, 1, 2}) {  // plain, Replicate, Shard(0)
          const std::string what = mname + " src " + std::to_string(src_kind) + " " + to_string(ps) +
                                   " on " + mesh.to_string();
          const at::Tensor src = src_kind == 0 ? S : make(S, mesh, src_kind == 1 ? rep : s0).as_tensor();
          const at::Tensor want = X.masked_scatter(M, S);
          for (bool dt_mask : {false, true}) {
            const at::Tensor m = dt_mask && M.dim() == 2 && M.size(0) == 5
                                     ? make(M, mesh, s0).as_tensor() : M;
            const at::Tensor x = make(X, mesh, ps).as_tensor();
            expect_close(full(at::masked_scatter(x, m, src)), want, what + " masked_scatter");
            at::Tensor y = make(X, mesh, ps).as_tensor();
            y.masked_scatter_(m, src);
            EXPECT_EQ(as_dtensor(y).placements(), ps) << what;
            expect_close(full(y), want, what + " masked_scatter_");
          }
        }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}});
  });
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    // Gradients of self and source (out of place, and in place on a non-leaf).
    const at::Tensor X = global_a({5, 6}), S = global_b({40}), W = global_b({5, 6}).cos();
    const at::Tensor M = X.gt(0.0);
    for (const Placements& ps : {Placements{Shard(0)}, Placements{Shard(1)}, Placements{Replicate()}}) {
      const std::string what = to_string(ps);
      const at::Tensor xw = X.clone().requires_grad_(), sw = S.clone().requires_grad_();
      at::Tensor zw = xw * 2.0;
      zw.masked_scatter_(M, sw * 3.0);
      ((at::masked_scatter(xw, M, sw) + zw) * W).sum().backward();
      const at::Tensor xd = make(X, mesh, ps).as_tensor().requires_grad_();
      const at::Tensor sd = make(S, mesh, {Shard(0)}).as_tensor().requires_grad_();
      at::Tensor zd = xd * 2.0;
      zd.masked_scatter_(M, sd * 3.0);
      ((at::masked_scatter(xd, M, sd) + zd) * W).sum().backward();
      expect_close(full(xd.grad()), xw.grad(), "grad self " + what);
      expect_close(full(sd.grad()), sw.grad(), "grad source " + what);
    }
    // One True position: the source's first element gets the gradient (masked_fill's Scalar
    // would cut it); so does a one-element value of x[mask] = v.
    const at::Tensor one = X.eq(X.max());
    {
      const at::Tensor sw = S.clone().requires_grad_(), vw = at::ones({1}, at::kDouble).requires_grad_();
      ((at::masked_scatter(X, one, sw) + at::index_put(X, Indices{one}, vw * 2.0)) * W).sum().backward();
      const at::Tensor sd = make(S, mesh, {Shard(0)}).as_tensor().requires_grad_();
      const at::Tensor vd = make(at::ones({1}, at::kDouble), mesh, {Replicate()}).as_tensor().requires_grad_();
      const at::Tensor xd = make(X, mesh, {Shard(0)}).as_tensor();
      const Indices oi{one};
      ((at::masked_scatter(xd, one, sd) + at::index_put(xd, oi, vd * 2.0)) * W).sum().backward();
      expect_close(full(sd.grad()), sw.grad(), "grad source, one True position");
      expect_close(full(vd.grad()), vw.grad(), "grad x[mask] = v, one-element v");
    }
    // A 0-dim self and mask.
    const at::Tensor z0 = make(at::scalar_tensor(4.0, at::kDouble), mesh, {Replicate()}).as_tensor();
    expect_close(full(at::masked_scatter(z0, at::scalar_tensor(true, at::kBool), S)), S.select(0, 0), "0-dim True");
    expect_close(full(at::masked_scatter(z0, at::scalar_tensor(false, at::kBool), S)), at::scalar_tensor(4.0, at::kDouble),
                 "0-dim False");
    // Errors naming the values; nothing written.
    at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<ValueError>([&] { x.masked_scatter_(M, at::ones({3}, at::kDouble)); });
    EXPECT_NE(m.find("aten::masked_scatter_(arg 0: mesh=[2] placements=[S(0)] shape=[5,6]"),
              std::string::npos) << m;
    EXPECT_NE(m.find("the source has 3 elements, fewer than the mask's " +
                     std::to_string(M.sum().item<int64_t>()) + " True positions"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { x.masked_scatter_(X.gt(0.0).to(at::kByte), at::ones({40}, at::kDouble)); });
    EXPECT_NE(m.find("masked_scatter only supports boolean masks, got a mask of Byte"), std::string::npos) << m;
    m = error_of<ValueError>([&] { x.masked_scatter_(M, at::ones({40}, at::kFloat)); });
    EXPECT_NE(m.find("expected self and source to have the same dtype, got Double and Float"),
              std::string::npos) << m;
    m = error_of<ValueError>([&] { x.masked_scatter_(at::ones({4}, at::kBool), at::ones({40}, at::kDouble)); });
    EXPECT_NE(m.find("the mask's shape [4] cannot be broadcast to self's [5, 6]"), std::string::npos) << m;
    m = error_of<ValueError>([&] { x.masked_scatter_(at::ones({2, 5, 6}, at::kBool), at::ones({60}, at::kDouble)); });
    EXPECT_NE(m.find("must broadcast to self's [5, 6] without growing it"), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(x), X));
  });
}

// Masks and several index tensors: computed locally when every DTensor operand is
// Replicate, refused otherwise; in place index_put_ / index_add_ / index_copy_ / index_fill_
// keep self's layout; a sharded index along the picked dim keeps its Shard; errors.
TEST(IndexOps, MaskAssignmentKeepsTheLayout) {
  // x[mask] = v and x[mask] += v (index_put(_) with one mask and a one-element value): the
  // single-device result, self's layout kept, for a DTensor or plain mask (whole or after a
  // leading full slice), on 2 and 4 ranks (uneven) and 2x2.
  auto cases = [](const DeviceMesh& mesh, const std::vector<Placements>& cat) {
    const at::Tensor X = global_a({5, 6});
    const at::Tensor M = X.gt(0.3), row = at::arange(6).remainder(2).eq(0);
    for (const Placements& ps : cat) {
      const std::string what = to_string(ps) + " on " + mesh.to_string();
      for (bool dt_mask : {true, false}) {
        // A bool mask laid out S(0) (1-D mesh) or [R, S(0)] (2x2).
        const at::Tensor m = dt_mask ? make(M, mesh, ps.size() == 1 ? Placements{Shard(0)}
                                                                    : Placements{Replicate(), Shard(0)})
                                           .as_tensor()
                                     : M;
        at::Tensor x = make(X, mesh, ps).as_tensor();
        x.index_put_({m}, at::scalar_tensor(-7.0, at::kDouble));
        EXPECT_EQ(as_dtensor(x).placements(), ps) << what;
        expect_close(full(x), X.clone().index_put_({M}, at::scalar_tensor(-7.0, at::kDouble)), "x[m] = v " + what);
        at::Tensor y = make(X, mesh, ps).as_tensor();
        y.index_put_({m}, at::scalar_tensor(2.5, at::kDouble), /*accumulate=*/true);
        expect_close(full(y), X.clone().index_put_({M}, at::scalar_tensor(2.5, at::kDouble), true),
                     "x[m] += v " + what);
        const at::Tensor z = at::index_put(make(X, mesh, ps).as_tensor(), Indices{std::nullopt, row},
                                           at::scalar_tensor(1.0, at::kDouble));
        expect_close(full(z), at::index_put(X, Indices{std::nullopt, row}, at::scalar_tensor(1.0, at::kDouble)),
                     "x[:, m] = v " + what);
      }
    }
  };
  run_on_mesh({2}, [&](const DeviceMesh& mesh) {
    cases(mesh, {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}});
  });
  run_on_mesh({4}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0)}, {Shard(1)}}); });
  run_on_mesh({2, 2}, [&](const DeviceMesh& mesh) { cases(mesh, {{Shard(0), Shard(1)}, {Partial(), Shard(0)}}); });
}

TEST(IndexOps, AdvancedIndexMasksInPlaceAndErrors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    using V = std::vector<at::Tensor>;
    const at::Tensor X = global_a({5, 6});
    const at::Tensor mask = X.gt(0.5);
    const at::Tensor r0 = at::tensor(std::vector<int64_t>{4, 0, 1}, at::kLong);
    const at::Tensor r1 = at::tensor(std::vector<int64_t>{5, -1, 2}, at::kLong);
    (void)r1;
    const at::Tensor out = make(X, mesh, {Replicate()}).as_tensor().index({mask});
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Replicate()});
    // The loss idiom logits[arange(N), target] with the classes sharded: a masked Partial,
    // the logits never move (only the [5] output when it is reduced).
    const at::Tensor tgt = at::tensor(std::vector<int64_t>{5, 0, 3, 3, 1}, at::kLong);
    const at::Tensor x1 = make(X, mesh, {Shard(1)}).as_tensor();
    at::Tensor picked2;
    EXPECT_EQ(bytes_of(mesh, [&] { picked2 = x1.index({at::arange(5), tgt}); }), 0);
    EXPECT_EQ(as_dtensor(picked2).placements(), Placements{Partial()});
    EXPECT_TRUE(at::equal(full(picked2), X.index({at::arange(5), tgt})));
    // A Replicate self with indices sharded alike: each rank picks with its own slice of the
    // indices, the output keeps their Shard, no bytes.
    const at::Tensor xr = make(X, mesh, {Replicate()}).as_tensor();
    at::Tensor own;
    EXPECT_EQ(bytes_of(mesh, [&] {
                own = xr.index({make(at::arange(5), mesh, {Shard(0)}).as_tensor(),
                                make(tgt, mesh, {Shard(0)}).as_tensor()});
              }), 0);
    EXPECT_EQ(as_dtensor(own).placements(), Placements{Shard(0)});
    EXPECT_TRUE(at::equal(full(own), X.index({at::arange(5), tgt})));
    // A row mask of a column-sharded self: the columns' Shard kept.
    const at::Tensor rows_kept = x1.index({mask.select(1, 0)});
    EXPECT_EQ(as_dtensor(rows_kept).placements(), Placements{Shard(1)});
    EXPECT_TRUE(at::equal(full(rows_kept), X.index({mask.select(1, 0)})));
    // One integer index along a dim the self is sharded on, the index sharded too: the
    // index's Shard is kept (self gathered), as index_select.
    const at::Tensor i4 = at::tensor(std::vector<int64_t>{4, 0, -1, 1}, at::kLong);
    const at::Tensor picked = make(X, mesh, {Replicate()}).as_tensor().index({make(i4, mesh, {Shard(0)}).as_tensor()});
    EXPECT_EQ(as_dtensor(picked).placements(), Placements{Shard(0)});
    EXPECT_TRUE(at::equal(full(picked), X.index({i4})));
    // A column index into a row-sharded self: the rows' Shard kept, no bytes.
    const at::Tensor xs = make(X, mesh, {Shard(0)}).as_tensor();
    at::Tensor cols;
    EXPECT_EQ(bytes_of(mesh, [&] { cols = xs.index({at::indexing::Slice(), make(i4, mesh, {Replicate()}).as_tensor()}); }), 0);
    EXPECT_EQ(as_dtensor(cols).placements(), Placements{Shard(0)});
    EXPECT_TRUE(at::equal(full(cols), X.index({at::indexing::Slice(), i4})));

    // In place: self's layout kept, values as one device; autograd through index_put_.
    const at::Tensor Y = global_b({5, 3});
    const at::Tensor c3 = at::tensor(std::vector<int64_t>{5, 0, 2}, at::kLong);
    for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Partial()}}) {
      const std::string what = to_string(ps);
      at::Tensor a = make(X, mesh, ps).as_tensor();
      a.index_put_({at::indexing::Slice(), make(c3, mesh, {Replicate()}).as_tensor()}, Y);
      EXPECT_EQ(as_dtensor(a).placements(), ps) << what;
      at::Tensor want = X.clone();
      want.index_put_({at::indexing::Slice(), c3}, Y);
      expect_close(full(a), want, "index_put_ " + what);
      at::Tensor b = make(X, mesh, ps).as_tensor();
      b.index_add_(1, c3, Y, -1.5);
      expect_close(full(b), X.clone().index_add_(1, c3, Y, -1.5), "index_add_ " + what);
      EXPECT_EQ(as_dtensor(b).placements(), ps) << what;
      at::Tensor c = make(X, mesh, ps).as_tensor();
      c.index_copy_(1, c3, Y);
      expect_close(full(c), X.clone().index_copy_(1, c3, Y), "index_copy_ " + what);
      at::Tensor e = make(X, mesh, ps).as_tensor();
      e.index_fill_(1, make(c3, mesh, {Shard(0)}).as_tensor(), 7.0);
      expect_close(full(e), X.clone().index_fill_(1, c3, 7.0), "index_fill_ " + what);
      at::Tensor f = make(X, mesh, ps).as_tensor();
      f.index_put_({at::tensor(std::vector<int64_t>{1, 1, -1}, at::kLong)}, at::ones({6}, at::kDouble), /*accumulate=*/true);
      at::Tensor wf = X.clone();
      wf.index_put_({at::tensor(std::vector<int64_t>{1, 1, -1}, at::kLong)}, at::ones({6}, at::kDouble), true);
      expect_close(full(f), wf, "index_put_ accumulate " + what);
    }
    const at::Tensor base = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor yg = make(Y, mesh, {Shard(0)}).as_tensor().requires_grad_();
    at::Tensor z = base * 2.0;
    z.index_put_({at::indexing::Slice(), c3}, yg);
    (z * global_b({5, 6})).sum().backward();
    at::Tensor xb = X.clone().requires_grad_(), ybb = Y.clone().requires_grad_();
    at::Tensor zb = xb * 2.0;
    zb.index_put_({at::indexing::Slice(), c3}, ybb);
    (zb * global_b({5, 6})).sum().backward();
    expect_close(full(base.grad()), xb.grad(), "index_put_ grad of self");
    expect_close(full(yg.grad()), ybb.grad(), "index_put_ grad of values");

    // out=: index.Tensor_out / index_add.out write into a DTensor out, which keeps its layout.
    at::Tensor o = make(at::zeros({5, 4}, at::kDouble), mesh, {Shard(1)}).as_tensor();
    at::index_out(o, xs, at_dim(1, i4));
    EXPECT_EQ(as_dtensor(o).placements(), Placements{Shard(1)});
    EXPECT_TRUE(at::equal(full(o), X.index({at::indexing::Slice(), i4})));

    // Refused, naming the op and the layouts: a RaggedShard self. ValueError: an index out of
    // range, a float index, a mask of another shape; nothing written.
    const at::Tensor rg = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    std::string m = error_of<NotImplementedError>([&] { (void)rg.index({r0, r0}); });
    EXPECT_NE(m.find("aten::index.Tensor(arg 0: mesh=[2] placements=[RS"), std::string::npos) << m;
    EXPECT_NE(m.find("advanced indexing of a RaggedShard DTensor (fail-closed)"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)xs.index({r0, at::tensor(std::vector<int64_t>{0, 6, 1}, at::kLong)}); });
    EXPECT_NE(m.find("index 6 is out of bounds for dim 1 of size 6"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)xs.index({r0, at::zeros({3}, at::kDouble)}); });
    EXPECT_NE(m.find("an index tensor must be int64, int32, bool or uint8, got Double"), std::string::npos) << m;
    at::Tensor w = make(X, mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] {
      at::index_put_(w, Indices{at::ones({5, 5}, at::kBool)}, at::scalar_tensor(1.0, at::kDouble));
    });
    EXPECT_NE(m.find("the shape of the mask [5, 5] at index 1 does not match the shape of the "
                     "indexed tensor [5, 6] at index 1"), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(w), X));
    // In place along the dim self is sharded on: kept (each rank adds its columns' entries);
    // into a Partial(max) an add would change self's layout: refused, nothing written.
    at::Tensor s1 = make(X, mesh, {Shard(1)}).as_tensor();
    s1.index_add_(1, c3, Y);
    EXPECT_EQ(as_dtensor(s1).placements(), Placements{Shard(1)});
    expect_close(full(s1), X.clone().index_add_(1, c3, Y), "index_add_ along the sharded dim");
    at::Tensor pmax = make(X, mesh, {Partial("max")}).as_tensor();
    m = error_of<NotImplementedError>([&] { pmax.index_add_(1, c3, Y); });
    EXPECT_NE(m.find("aten::index_add_: as aten::scatter_add_(arg 0: mesh=[2] placements=[P(max)] shape=[5,6]"), std::string::npos) << m;
    EXPECT_NE(m.find("in place, self's layout cannot change"), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(pmax), X));
    // Out of range (after the negative wrap) and too many indices: ValueError.
    m = error_of<ValueError>([&] { (void)xs.index({at::tensor(std::vector<int64_t>{0, 5}, at::kLong)}); });
    EXPECT_NE(m.find("index 5 is out of bounds for a dim of size 5"), std::string::npos) << m;
    m = error_of<ValueError>([&] {
      (void)xs.index(Indices({std::nullopt, std::nullopt, at::tensor(std::vector<int64_t>{0}, at::kLong)}));
    });
    EXPECT_NE(m.find("index tensor at position 2 of a tensor of 2 dims (too many indices)"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::index_add(xs, 1, at::zeros({1, 3}, at::kLong), Y); });
    EXPECT_NE(m.find("index must be a 1-D (or 0-dim) int64 / int32 tensor, got 2 dims"), std::string::npos) << m;
  });
}

// The placements the rules promise, and what moves.
TEST(IndexOps, LayoutsAndBytes) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({64, 32});
    // Shards that line up: self S(0), index R [64, 3] along dim 1 -> the index is sliced, no bytes.
    const at::Tensor I1 = index_for({64, 32}, {64, 3}, 1);
    const at::Tensor x0 = make(X, mesh, {Shard(0)}).as_tensor();
    at::Tensor out;
    EXPECT_EQ(bytes_of(mesh, [&] { out = at::gather(x0, 1, make(I1, mesh, {Replicate()}).as_tensor()); }), 0);
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Shard(0)});
    // A sharded index along the gather dim keeps its Shard; self is gathered (Replicate here).
    const at::Tensor I0 = index_for({64, 32}, {8, 32}, 0);
    const at::Tensor xr = make(X, mesh, {Replicate()}).as_tensor().requires_grad_();
    out = at::gather(xr, 0, make(I0, mesh, {Shard(0)}).as_tensor());
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Shard(0)});
    (out * 2).sum().backward();
    EXPECT_EQ(as_dtensor(xr.grad()).placements(), Placements{Partial()});  // each rank's rows
    // Self sharded along the gather dim, a small index: a masked Partial, the output's size
    // moves when it is reduced, not self's (64 x 32 doubles = 16 KiB; 8 x 32 = 2 KiB).
    at::Tensor m;
    const int64_t sent = bytes_of(mesh, [&] {
      m = at::gather(x0, 0, make(I0, mesh, {Replicate()}).as_tensor());
      EXPECT_EQ(as_dtensor(m).placements(), Placements{Partial()});
      (void)full(m);
    });
    EXPECT_LT(sent, 64 * 32 * 8 / 2) << sent;
    EXPECT_TRUE(at::equal(full(m), at::gather(X, 0, I0)));
    // index_select of a row-sharded table: masked, P(sum); its gradient stays row-sharded.
    const at::Tensor rows = at::tensor(std::vector<int64_t>{63, 0, 17, 17}, at::kLong);
    const at::Tensor t = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor sel = at::index_select(t, 0, make(rows, mesh, {Replicate()}).as_tensor());
    EXPECT_EQ(as_dtensor(sel).placements(), Placements{Partial()});
    (sel * 3).sum().backward();
    EXPECT_EQ(as_dtensor(t.grad()).placements(), Placements{Shard(0)});
    at::Tensor xg = X.clone().requires_grad_();
    (at::index_select(xg, 0, rows) * 3).sum().backward();
    EXPECT_TRUE(at::equal(full(t.grad()), xg.grad()));
    // sort along the unsharded dim: no bytes, the Shard kept.
    at::Tensor v;
    EXPECT_EQ(bytes_of(mesh, [&] { v = std::get<0>(at::sort(x0, 1)); }), 0);
    EXPECT_EQ(as_dtensor(v).placements(), Placements{Shard(0)});
    // scatter_add of a Partial(sum) src into a Replicate self: stays Partial (self made
    // Partial locally), no bytes.
    const at::Tensor src = make(global_b({64, 3}), mesh, {Partial()}).as_tensor();
    EXPECT_EQ(bytes_of(mesh, [&] {
                out = at::scatter_add(make(X, mesh, {Replicate()}).as_tensor(), 1,
                                      make(I1, mesh, {Replicate()}).as_tensor(), src);
              }), 0);
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Partial()});
    expect_close(full(out), at::scatter_add(X, 1, I1, global_b({64, 3})), "scatter_add P(sum) src");
    // scatter_add into a self sharded along the scatter dim, a small Replicate index and src:
    // self's Shard kept (each rank adds the entries in its rows), no bytes (self is 16 KiB).
    const at::Tensor small = make(global_b({8, 32}), mesh, {Replicate()}).as_tensor();
    EXPECT_EQ(bytes_of(mesh, [&] { out = at::scatter_add(x0, 0, make(I0, mesh, {Replicate()}).as_tensor(), small); }), 0);
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Shard(0)});
    expect_close(full(out), at::scatter_add(X, 0, I0, global_b({8, 32})), "masked scatter_add");
    // index_add of embedding-style rows into a row-sharded table: the same, no bytes.
    const at::Tensor ids = at::tensor(std::vector<int64_t>{63, 0, 17, 17}, at::kLong);
    EXPECT_EQ(bytes_of(mesh, [&] { out = at::index_add(x0, 0, ids, make(global_b({4, 32}), mesh, {Replicate()}).as_tensor()); }), 0);
    EXPECT_EQ(as_dtensor(out).placements(), Placements{Shard(0)});
    expect_close(full(out), at::index_add(X, 0, ids, global_b({4, 32})), "masked index_add");
  });
}

// In place: self's layout kept, the other operands adapt; the writes reach self's local (and
// a view's base), values equal one device; what would change self's layout is refused.
TEST(IndexOps, InPlaceScattersKeepSelfsLayout) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6});
    const at::Tensor I = index_for({5, 6}, {5, 3}, 1);
    const at::Tensor Y = global_b({5, 3});
    for (const Placements& ps : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Partial()},
                                 Placements{Partial("max")}})
      for (const Placements& pi : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(1)}}) {
        const std::string what = to_string(ps) + " index " + to_string(pi);
        at::Tensor a = make(X, mesh, ps).as_tensor();
        a.scatter_(1, make(I, mesh, pi).as_tensor(), make(Y, mesh, pi).as_tensor());
        EXPECT_EQ(as_dtensor(a).placements(), ps) << what;
        expect_close(full(a), X.clone().scatter_(1, I, Y), "scatter_ " + what);
        at::Tensor b = make(X, mesh, ps).as_tensor();
        b.scatter_(1, make(I, mesh, pi).as_tensor(), -4.0);
        expect_close(full(b), X.clone().scatter_(1, I, -4.0), "scatter_.value " + what);
        if (ps[0] == Partial("max")) continue;  // scatter_add is additive: refused below
        at::Tensor c = make(X, mesh, ps).as_tensor();
        c.scatter_add_(1, make(I, mesh, pi).as_tensor(), Y);  // a plain src
        expect_close(full(c), X.clone().scatter_add_(1, I, Y), "scatter_add_ " + what);
      }
    // Autograd through the in-place op (ATen's formulas call gather and scatter.value).
    const at::Tensor base = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor srcg = make(Y, mesh, {Shard(0)}).as_tensor().requires_grad_();
    at::Tensor y = base * 1.0;
    y.scatter_(1, make(I, mesh, {Replicate()}).as_tensor(), srcg);
    (y * global_b({5, 6})).sum().backward();
    at::Tensor xb = X.clone().requires_grad_(), yb = Y.clone().requires_grad_();
    at::Tensor z = xb * 1.0;
    z.scatter_(1, I, yb);
    (z * global_b({5, 6})).sum().backward();
    expect_close(full(base.grad()), xb.grad(), "in-place scatter_ grad of self");
    expect_close(full(srcg.grad()), yb.grad(), "in-place scatter_ grad of src");
    // Self sharded along the scatter dim: kept, each rank writes the entries whose index
    // falls in its columns (masked), no bytes for a Replicate index and src.
    for (const bool add : {false, true}) {
      at::Tensor s1 = make(X, mesh, {Shard(1)}).as_tensor();
      const at::Tensor ir = make(I, mesh, {Replicate()}).as_tensor();
      const at::Tensor yr = make(Y, mesh, {Replicate()}).as_tensor();
      EXPECT_EQ(bytes_of(mesh, [&] { add ? s1.scatter_add_(1, ir, yr) : s1.scatter_(1, ir, yr); }), 0);
      EXPECT_EQ(as_dtensor(s1).placements(), Placements{Shard(1)});
      expect_close(full(s1), add ? X.clone().scatter_add_(1, I, Y) : X.clone().scatter_(1, I, Y),
                   add ? "masked scatter_add_" : "masked scatter_");
      at::Tensor s2 = make(X, mesh, {Shard(1)}).as_tensor();
      s2.scatter_(1, ir, 9.0);
      expect_close(full(s2), X.clone().scatter_(1, I, 9.0), "masked scatter_.value");
      for (const char* r : {"sum", "amin", "mean"}) {
        at::Tensor s3 = make(X, mesh, {Shard(1)}).as_tensor();
        s3.scatter_reduce_(1, ir, yr, r, /*include_self=*/add);
        EXPECT_EQ(as_dtensor(s3).placements(), Placements{Shard(1)});
        expect_close(full(s3), X.clone().scatter_reduce_(1, I, Y, r, add),
                     std::string("masked scatter_reduce_ ") + r);
        at::Tensor s4 = make(X, mesh, {Partial()}).as_tensor();
        if (std::string(r) == "sum") {
          s4.scatter_reduce_(1, ir, yr, r, add);  // additive: the P(sum) kept
          EXPECT_EQ(as_dtensor(s4).placements(), Placements{Partial()});
          expect_close(full(s4), X.clone().scatter_reduce_(1, I, Y, r, add), "scatter_reduce_ sum of P(sum)");
        } else {  // no Partial commutes with amin / mean: in place, refused
          const std::string e = error_of<NotImplementedError>([&] { s4.scatter_reduce_(1, ir, yr, r, add); });
          EXPECT_NE(e.find("would need self's P(sum) reduced"), std::string::npos) << e;
          expect_close(full(s4), X, "refused scatter_reduce_ wrote nothing");  // P(sum) shares round
        }
      }
    }
    // Refused: self's Shard(0) longer than the index along dim 0 (scatter along 1); scatter_add_
    // into a Partial(max).
    at::Tensor s1 = make(X, mesh, {Shard(0)}).as_tensor();
    std::string m = error_of<NotImplementedError>(
        [&] { s1.scatter_(1, I.narrow(0, 0, 3), Y.narrow(0, 0, 3)); });
    EXPECT_NE(m.find("aten::scatter_.src(arg 0: mesh=[2] placements=[S(0)] shape=[5,6]"),
              std::string::npos) << m;
    EXPECT_NE(m.find("in place, self's layout cannot change, and mesh dim 0 would need self "
                     "gathered"), std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(s1), X));  // nothing written
    at::Tensor pm = make(X, mesh, {Partial("max")}).as_tensor();
    m = error_of<NotImplementedError>([&] { pm.scatter_add_(1, I, Y); });
    EXPECT_NE(m.find("would need self's P(max) reduced"), std::string::npos) << m;
  });
}

// The out= overloads (out_kernels.h): the functional op, then copy_ into each out, which
// keeps its layout.
TEST(IndexOps, OutOverloadsWriteIntoDTensorOuts) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_b({5, 6});
    const at::Tensor I = index_for({5, 6}, {5, 3}, 1);
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    at::Tensor g = make(at::zeros({5, 3}, at::kDouble), mesh, {Replicate()}).as_tensor();
    at::gather_out(g, x, 1, I);
    EXPECT_EQ(as_dtensor(g).placements(), Placements{Replicate()});
    EXPECT_TRUE(at::equal(full(g), at::gather(X, 1, I)));
    at::Tensor v = make(at::zeros({5, 2}, at::kDouble), mesh, {Shard(0)}).as_tensor();
    at::Tensor i = make(at::zeros({5, 2}, at::kLong), mesh, {Shard(1)}).as_tensor();
    at::topk_out(v, i, x, 2, 1);
    const auto [tv, ti] = at::topk(X, 2, 1);
    EXPECT_TRUE(at::equal(full(v), tv));
    EXPECT_TRUE(at::equal(full(i), ti));
    EXPECT_EQ(as_dtensor(i).placements(), Placements{Shard(1)});
    at::Tensor c = make(at::zeros({5, 6}, at::kDouble), mesh, {Shard(1)}).as_tensor();
    at::cumprod_out(c, x, 0);
    expect_close(full(c), at::cumprod(X, 0), "cumprod.out");
  });
}

TEST(IndexOps, Errors) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({4, 6});
    const at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor();
    const at::Tensor I = index_for({4, 6}, {4, 3}, 1);
    std::string m = error_of<NotImplementedError>([&] { (void)at::gather(x, 1, I, /*sparse_grad=*/true); });
    EXPECT_NE(m.find("aten::gather(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: plain tensor shape=[4,3])"),
              std::string::npos) << m;
    EXPECT_NE(m.find("sparse_grad=true is not implemented"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::gather(x, 2, I); });
    EXPECT_NE(m.find("dim 2 out of range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
    // An index outside the dim where self keeps its Shard of it (a masked Partial): no rank's
    // box holds it, so it would pick zeros; refused as ATen refuses it on one device.
    const at::Tensor rows = make(X, mesh, {Shard(0)}).as_tensor();
    m = error_of<ValueError>([&] { (void)at::index_select(rows, 0, at::tensor(std::vector<int64_t>{1, 4}, at::kLong)); });
    EXPECT_NE(m.find("aten::index_select(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]; arg 1: plain tensor "
                     "shape=[2]) dim 0: index 4 is out of bounds for a dim of size 4"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)at::gather(rows, 0, at::full({1, 6}, -1, at::kLong)); });
    EXPECT_NE(m.find("index -1 is out of bounds for a dim of size 4"), std::string::npos) << m;
    // A RaggedShard operand: fail-closed.
    const at::Tensor r = make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::sort(r, 1); });
    EXPECT_NE(m.find("aten::sort"), std::string::npos) << m;
    EXPECT_NE(m.find("RaggedShard"), std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::index_select(r, 0, at::tensor(std::vector<int64_t>{1}, at::kLong)); });
    EXPECT_NE(m.find("RaggedShard"), std::string::npos) << m;
    // An index out of range: ATen's error on every rank whose local op sees it, as hyper's type.
    m = error_of<ValueError>([&] { (void)at::topk(x, 7, 1); });
    EXPECT_NE(m.find("aten::topk(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]): the local op on rank"),
              std::string::npos) << m;
    // Double backward is refused (the local backward is not recorded).
    const at::Tensor xg = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor s = std::get<0>(at::sort(xg, 1)).pow(2).sum();
    m = error_of<NotImplementedError>([&] {
      (void)torch::autograd::grad({s}, {xg}, {}, /*retain_graph=*/true, /*create_graph=*/true);
    });
    EXPECT_NE(m.find("aten::sort backward(arg 0: mesh=[2] placements=[S(0)] shape=[4,6])"),
              std::string::npos) << m;
    EXPECT_NE(m.find("double backward"), std::string::npos) << m;
  });
}

// The rules, torch-free: the layouts for a few cases on a 2x2 mesh.
TEST(IndexRules, GatherAndScatterLayouts) {
  const MeshTopology mesh({2, 2});
  auto L = [&](Placements ps, Shape s) { return ArgLayout::of(Layout(mesh, std::move(ps), std::move(s))); };
  // index [S(0), S(1)] of [8,3] along dim 1 of a [8,6] self [R, R]: self S(0) on mesh dim 0
  // (rows line up), Replicate on mesh dim 1 (the index shards the gather dim there).
  auto g = dispatch::propagate_gather("aten::gather", L({Replicate(), Replicate()}, {8, 6}), 1,
                                      L({Shard(0), Shard(1)}, {8, 3}), true);
  EXPECT_EQ(g.p.inputs[0]->placements(), (Placements{Shard(0), Replicate()}));
  EXPECT_EQ(g.p.output.placements(), (Placements{Shard(0), Shard(1)}));
  // self S(1) [5,6] and index S(0) [3,6] (dim 0) on one mesh dim: the index (fewer bytes)
  // gives up its Shard and lines up with self's S(1); a larger index keeps its Shard.
  const MeshTopology line({4});
  auto L1 = [&](Placement p, Shape s, int64_t size) {
    return ArgLayout::of(Layout(line, {p}, std::move(s)), size);
  };
  g = dispatch::propagate_gather("aten::gather", L1(Shard(1), {5, 6}, 8), 0, L1(Shard(0), {3, 6}, 8), true);
  EXPECT_EQ(g.p.inputs[1]->placements(), Placements{Shard(1)});
  EXPECT_EQ(g.p.output.placements(), Placements{Shard(1)});
  g = dispatch::propagate_gather("aten::gather", L1(Shard(1), {5, 6}, 2), 0, L1(Shard(0), {3, 6}, 8), true);
  EXPECT_EQ(g.p.inputs[0]->placements(), Placements{Replicate()});
  EXPECT_EQ(g.p.output.placements(), Placements{Shard(0)});
  // self [S(1), P(max)] along dim 1 with a Replicate index: masked P(sum) and P(max) kept.
  g = dispatch::propagate_gather("aten::gather", L({Shard(1), Partial("max")}, {8, 6}), 1,
                                 ArgLayout::plain({8, 2}), true);
  EXPECT_EQ(g.p.output.placements(), (Placements{Partial(), Partial("max")}));
  EXPECT_EQ(g.masked, (std::vector<bool>{true, false}));
  g = dispatch::propagate_gather("aten::gather", L({Shard(1), Replicate()}, {8, 6}), 1,
                                 ArgLayout::plain({8, 2}), false);
  EXPECT_EQ(g.p.inputs[0]->placements(), (Placements{Replicate(), Replicate()}));
  // scatter_add: P(sum) self, Replicate src -> src made P(sum) locally; P(max) self reduced.
  auto s = dispatch::propagate_scatter("aten::scatter_add", L({Partial(), Shard(0)}, {8, 6}), 1,
                                       ArgLayout::plain({8, 2}), ArgLayout::plain({8, 2}), true, false);
  EXPECT_EQ(s.p.inputs[2]->placements(), (Placements{Partial(), Shard(0)}));
  EXPECT_EQ(s.p.output.placements(), (Placements{Partial(), Shard(0)}));
  s = dispatch::propagate_scatter("aten::scatter_add", L({Partial("max"), Replicate()}, {8, 6}), 1,
                                  ArgLayout::plain({8, 2}), ArgLayout::plain({8, 2}), true, false);
  EXPECT_EQ(s.p.output.placements(), (Placements{Replicate(), Replicate()}));
  // scatter (overwrite) keeps a P(max) self, the src Replicate (no zeros: max of equal values).
  s = dispatch::propagate_scatter("aten::scatter.src", L({Partial("max"), Replicate()}, {8, 6}), 1,
                                  ArgLayout::plain({8, 2}), ArgLayout::plain({8, 2}), false, false);
  EXPECT_EQ(s.p.output.placements(), (Placements{Partial("max"), Replicate()}));
  EXPECT_EQ(s.p.inputs[2]->placements(), (Placements{Partial("max"), Replicate()}));
  // scatter along the dim self is sharded on (mesh dim 1): kept, masked; index and src whole.
  s = dispatch::propagate_scatter("aten::scatter.src", L({Replicate(), Shard(1)}, {8, 6}), 1,
                                  L({Replicate(), Shard(1)}, {8, 2}), ArgLayout::plain({8, 2}), false, false);
  EXPECT_EQ(s.p.output.placements(), (Placements{Replicate(), Shard(1)}));
  EXPECT_EQ(s.p.inputs[1]->placements(), (Placements{Replicate(), Replicate()}));
  EXPECT_EQ(s.masked, (std::vector<bool>{false, true}));
  // Out of place, an index Shard(0) that lines up moves fewer elements than gathering it:
  // self moves to S(0) instead ([8, 6] self, [8, 6] index and src: 96 elements gathered > 48).
  s = dispatch::propagate_scatter("aten::scatter.src", L({Shard(1), Replicate()}, {8, 6}), 1,
                                  L({Shard(0), Replicate()}, {8, 6}), L({Shard(0), Replicate()}, {8, 6}), false, false);
  EXPECT_EQ(s.p.output.placements(), (Placements{Shard(0), Replicate()}));
  EXPECT_EQ(s.masked, (std::vector<bool>{false, false}));
  // sort along a sharded dim: gathered there; the other Shard kept; a Partial reduced.
  auto a = dispatch::propagate_along_dims("aten::sort", L({Shard(1), Partial()}, {8, 6}), {-1}, false);
  EXPECT_EQ(a.output.placements(), (Placements{Replicate(), Replicate()}));
  a = dispatch::propagate_along_dims("aten::topk", L({Shard(0), Shard(1)}, {8, 6}), {1}, false,
                                     Shape{8, 2});
  EXPECT_EQ(a.output.to_string(), "mesh=[2,2] placements=[S(0),R] shape=[8,2]");
}

}  // namespace
}  // namespace hyper
