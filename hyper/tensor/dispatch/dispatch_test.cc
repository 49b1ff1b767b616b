// DTensor as an at::Tensor (dtensor_tensor.h): at:: ops on DTensor tensors equal the same op on
// the full tensors on one device (the oracle), for Shard / uneven Shard / Replicate / Partial /
// RaggedShard inputs on 2 and 4 ranks (threads) and a 2x2 mesh; gradients equal the
// single-device gradients; ops without a rule are refused naming op and layouts.
#include "hyper/tensor/dtensor_tensor.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/internal/dtensor_impl.h"

namespace hyper {
namespace {

using comm::testing::run_on_mesh;
using dispatch_testing::global_a;
using dispatch_testing::global_b;
using dispatch_testing::make;
using dispatch_testing::full;
using dispatch_testing::expect_close;
using dispatch_testing::error_of;





std::vector<Placements> catalogue_1d() {
  return {{Replicate()}, {Shard(0)}, {Shard(1)}, {Partial()}};
}


TEST(DTensorTensor, MetadataIsGlobalAndRoundTripKeepsTheLocal) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const DTensor dt = make(global_a({5, 6}), mesh, {Shard(0)});
    const at::Tensor t = dt.as_tensor();
    EXPECT_TRUE(is_dtensor(t));
    EXPECT_EQ(t.sizes(), (std::vector<int64_t>{5, 6}));
    EXPECT_EQ(t.strides(), (std::vector<int64_t>{6, 1}));
    EXPECT_EQ(t.dim(), 2);
    EXPECT_EQ(t.numel(), 30);
    EXPECT_EQ(t.scalar_type(), at::kDouble);
    EXPECT_TRUE(t.device().is_cpu());
    EXPECT_TRUE(t.is_contiguous());
    EXPECT_TRUE(t.key_set().has(dtensor_dispatch_key()));
    EXPECT_EQ(as_dtensor(t).to_local().unsafeGetTensorImpl(), dt.to_local().unsafeGetTensorImpl());
    EXPECT_EQ(as_dtensor(t).layout(), dt.layout());
    // No storage: a clear c10 error naming the impl.
    try {
      (void)t.storage();
      ADD_FAILURE() << "storage() did not throw";
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what()).find("hyper::DTensorImpl"), std::string::npos) << e.what();
    }
    // detach (the aten::detach rule): same layout, the local detached, storage shared.
    const at::Tensor d = t.detach();
    EXPECT_EQ(as_dtensor(d).layout(), dt.layout());
    EXPECT_EQ(as_dtensor(d).to_local().data_ptr(), dt.to_local().data_ptr());
    // Shallow copies (what autograd's SavedVariable and set_requires_grad make) keep the DTensor.
    const at::Tensor v = at::Tensor(t.unsafeGetTensorImpl()->shallow_copy_and_detach(
        c10::VariableVersion(0), false));
    EXPECT_EQ(as_dtensor(v).to_local().unsafeGetTensorImpl(), dt.to_local().unsafeGetTensorImpl());
    EXPECT_EQ(v.sizes(), t.sizes());
    // set_data would replace the impl's metadata: refused.
    at::Tensor u = dt.as_tensor();
    const std::string m = error_of<NotImplementedError>([&] { u.set_data(dt.as_tensor()); });
    EXPECT_NE(m.find("set_data / shallow_copy_from on a DTensor tensor is not implemented"),
              std::string::npos) << m;
  });
}

TEST(DTensorTensor, AsDTensorOfAPlainTensorIsAValueError) {
  const std::string m = error_of<ValueError>([] { as_dtensor(at::zeros({2, 3})); });
  EXPECT_NE(m.find("hyper::as_dtensor: got a plain tensor (cpu, Float, sizes [2, 3])"),
            std::string::npos) << m;
  EXPECT_NE(error_of<ValueError>([] { as_dtensor(at::Tensor()); }).find("undefined tensor"),
            std::string::npos);
  EXPECT_FALSE(is_dtensor(at::zeros({2})));
  EXPECT_FALSE(is_dtensor(at::Tensor()));
  EXPECT_NE(error_of<ValueError>([] { as_tensor(DTensor()); }).find("undefined"), std::string::npos);
}

using Binary = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;

void binary_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat,
                  const std::vector<int64_t>& sa, const std::vector<int64_t>& sb) {
  const std::vector<std::pair<std::string, Binary>> ops = {
      {"add", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); }},
      {"add alpha", [](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b, 0.5); }},
      {"sub", [](const at::Tensor& a, const at::Tensor& b) { return a - b; }},
      {"mul", [](const at::Tensor& a, const at::Tensor& b) { return a * b; }},
      {"div", [](const at::Tensor& a, const at::Tensor& b) { return a / b; }},
  };
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor A = global_a(sa), B = global_b(sb);
    for (const auto& pa : cat)
      for (const auto& pb : cat) {
        if (pa.size() == 1 && pa[0].is_shard() && pa[0].dim() >= static_cast<int64_t>(sa.size())) continue;
        if (pb.size() == 1 && pb[0].is_shard() && pb[0].dim() >= static_cast<int64_t>(sb.size())) continue;
        const at::Tensor a = make(A, mesh, pa).as_tensor(), b = make(B, mesh, pb).as_tensor();
        for (const auto& [name, f] : ops) {
          const std::string what = name + " " + to_string(pa) + " " + to_string(pb);
          const at::Tensor y = f(a, b);
          ASSERT_TRUE(is_dtensor(y)) << what;
          expect_close(full(y), f(A, B), what);
        }
      }
  });
}

TEST(DTensorTensor, BinaryOpsEveryPairOn2Ranks) { binary_cases({2}, catalogue_1d(), {4, 6}, {4, 6}); }
TEST(DTensorTensor, BinaryOpsEveryPairOn4RanksUneven) {
  binary_cases({4}, catalogue_1d(), {5, 6}, {5, 6});
}
TEST(DTensorTensor, BinaryOpsBroadcasting) {
  binary_cases({2}, catalogue_1d(), {5, 6}, {1, 6});
  binary_cases({4}, {{Replicate()}, {Shard(0)}, {Partial()}}, {5, 6}, {6});
}
TEST(DTensorTensor, BinaryOpsWithPartialAvgAndMax) {
  binary_cases({2}, {{Replicate()}, {Shard(0)}, {Partial("avg")}, {Partial("max")}}, {4, 6}, {4, 6});
}
TEST(DTensorTensor, BinaryOps2x2Mesh) {
  binary_cases({2, 2},
               {{Shard(0), Shard(1)}, {Replicate(), Partial()}, {Partial(), Shard(0)},
                {Shard(0), Shard(0)}},
               {5, 6}, {5, 6});
}

TEST(DTensorTensor, ScalarsAndWrappedNumbers) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    for (const auto& p : catalogue_1d()) {
      const at::Tensor a = make(A, mesh, p).as_tensor();
      const std::string what = to_string(p);
      expect_close(full(a * 2), A * 2, "a*2 " + what);
      expect_close(full(a + 2), A + 2, "a+2 " + what);  // Partial: 2 added once, not 4 times
      expect_close(full(2 - a), 2 - A, "2-a " + what);
      expect_close(full(a / 4), A / 4, "a/4 " + what);
      expect_close(full(at::add(a, 3, 2)), at::add(A, 3, 2), "add.Scalar alpha " + what);
      if (p[0].is_partial()) {
        EXPECT_TRUE(as_dtensor(a * 2).placements()[0].is_partial());
      }
    }
  });
}

TEST(DTensorTensor, UnaryOps) {
  const std::vector<std::pair<std::string, std::function<at::Tensor(const at::Tensor&)>>> ops = {
      {"neg", [](const at::Tensor& x) { return -x; }},
      {"relu", [](const at::Tensor& x) { return at::relu(x); }},
      {"exp", [](const at::Tensor& x) { return at::exp(x); }},
      {"tanh", [](const at::Tensor& x) { return at::tanh(x); }},
      {"gelu", [](const at::Tensor& x) { return at::gelu(x); }},
      {"gelu tanh", [](const at::Tensor& x) { return at::gelu(x, "tanh"); }},
      {"clone", [](const at::Tensor& x) { return x.clone(); }},
  };
  for (std::vector<int64_t> ms : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(ms, [&](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({5, 6});
      for (const auto& p : catalogue_1d())
        for (const auto& [name, f] : ops) {
          const at::Tensor y = f(make(A, mesh, p).as_tensor());
          expect_close(full(y), f(A), name + " " + to_string(p));
          // relu(Partial) is reduced first (the result is Replicate); neg keeps Partial.
          if (p[0].is_partial() && name == "relu") {
            EXPECT_TRUE(as_dtensor(y).placements()[0].is_replicate());
          }
          if (p[0].is_partial() && name == "neg") {
            EXPECT_TRUE(as_dtensor(y).placements()[0].is_partial());
          }
        }
    });
}

TEST(DTensorTensor, InPlaceOps) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6}), B = global_b({5, 6});
    for (const auto& pa : catalogue_1d())
      for (const auto& pb : catalogue_1d()) {
        const std::string what = to_string(pa) + " " + to_string(pb);
        at::Tensor a = make(A, mesh, pa).as_tensor();
        const at::Tensor b = make(B, mesh, pb).as_tensor();
        const DTensor before = as_dtensor(a);
        at::Tensor& r = a.add_(b);
        EXPECT_EQ(r.unsafeGetTensorImpl(), a.unsafeGetTensorImpl()) << what;
        EXPECT_EQ(as_dtensor(a).layout(), before.layout()) << what;
        expect_close(full(a), A + B, "add_ " + what);
        a.mul_(b);
        expect_close(full(a), (A + B) * B, "mul_ " + what);
        a.neg_();
        expect_close(full(a), -(A + B) * B, "neg_ " + what);
        a.mul_(3);
        expect_close(full(a), -(A + B) * B * 3, "mul_ scalar " + what);
        if (!pa[0].is_partial()) {
          a.relu_();
          expect_close(full(a), at::relu(-(A + B) * B * 3), "relu_ " + what);
        } else {
          const std::string m = error_of<NotImplementedError>([&] { a.relu_(); });
          EXPECT_NE(m.find("in-place op would change argument 0's P(sum) on mesh dim 0"),
                    std::string::npos) << m;
        }
      }
  });
}

// masked_fill (what a causal attention mask calls): the mask broadcasts like an operand and
// is sliced for a Shard; a Partial self is reduced first (the fill value is not linear);
// the gradient (grad.masked_fill(mask, 0)) equals the single-device one.
TEST(DTensorTensor, MaskedFillBroadcastsTheMaskAndReducesPartial) {
  for (const std::vector<int64_t>& mesh_shape : {std::vector<int64_t>{2}, std::vector<int64_t>{4}})
    run_on_mesh(mesh_shape, [](const DeviceMesh& mesh) {
      const at::Tensor A = global_a({3, 5, 5});
      const at::Tensor M = at::ones({5, 5}, at::kBool).triu(1);
      for (const Placements& pa : {Placements{Replicate()}, Placements{Shard(0)},
                                   Placements{Shard(1)}, Placements{Shard(2)}, Placements{Partial()}})
        for (const Placements& pm : {Placements{Replicate()}, Placements{Shard(0)}, Placements{Shard(1)}}) {
          const std::string what = "masked_fill " + to_string(pa) + " mask " + to_string(pm);
          const at::Tensor a = make(A, mesh, pa).as_tensor().requires_grad_();
          const at::Tensor m = distribute_tensor(M, mesh, pm).as_tensor();
          const at::Tensor y = a.masked_fill(m, -7.5);
          expect_close(full(y), A.masked_fill(M, -7.5), what);
          if (pa[0].is_shard()) {
            EXPECT_EQ(as_dtensor(y).layout().placements(), pa) << what;
          }
          (y * y).sum().backward();
          expect_close(full(a.grad()), (2 * A.masked_fill(M, -7.5)).masked_fill(M, 0.0), what + " grad");
          // In place: self keeps its layout; a Partial self is filled share by share (1.0 on
          // coordinate 0, 0 elsewhere: partial_fill_kernels.h).
          at::Tensor b = make(A, mesh, pa).as_tensor();
          b.masked_fill_(m, 1.0);
          EXPECT_EQ(as_dtensor(b).layout().placements(), pa) << what;
          expect_close(full(b), A.masked_fill(M, 1.0), what + " in place");
        }
    });
}

TEST(DTensorTensor, SumIsPartialAndEqualsTheFullSum) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 6});
    auto cat = catalogue_1d();
    cat.push_back({Partial("avg")});
    cat.push_back({Partial("max")});
    for (const auto& p : cat) {
      const at::Tensor s = make(A, mesh, p).as_tensor().sum();
      EXPECT_EQ(s.dim(), 0);
      const DTensor d = as_dtensor(s);
      // Sharded -> P(sum); P(sum/avg) kept; P(max) reduced first (R).
      const bool partial = p[0].is_shard() || (p[0].is_partial() && p[0].reduce_op() != "max");
      EXPECT_EQ(d.placements()[0].is_partial(), partial) << to_string(p);
      expect_close(full(s), A.sum(), "sum " + to_string(p));
      for (int64_t dim : {0, 1, -1})
        for (bool keep : {false, true}) {
          const at::Tensor sd = make(A, mesh, p).as_tensor().sum(dim, keep);
          expect_close(full(sd), A.sum(dim, keep),
                       "sum dim " + std::to_string(dim) + " " + to_string(p));
        }
    }
  });
}

// amax / amin over dims (keepdim or not, and over all dims): a sharded reduced dim gives
// Partial(max/min); P(max) stays for amax, P(sum)/P(min) are reduced first; values equal the
// op on the full tensor on 4 ranks (uneven [7,7]: chunks 2,2,2,1) and a 2x2 mesh. A reduced dim with an empty
// shard gives that rank the dtype's identity as its share (below).
TEST(DTensorTensor, AmaxAminArePartialMaxMin) {
  run_on_mesh({4}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({7, 7}) * at::cos(at::arange(49, at::kDouble)).view({7, 7});
    auto cat = catalogue_1d();
    cat.push_back({Partial("max")});
    cat.push_back({Partial("min")});
    for (const auto& p : cat)
      for (const std::vector<int64_t>& dims : std::vector<std::vector<int64_t>>{{0}, {1}, {-1}, {0, 1}, {}})
        for (bool keep : {false, true}) {
          const std::string what = to_string(p) + " dims " + std::to_string(dims.size()) +
                                   (dims.empty() ? "" : " first " + std::to_string(dims[0])) +
                                   (keep ? " keepdim" : "");
          const at::Tensor mx = make(A, mesh, p).as_tensor().amax(dims, keep);
          expect_close(full(mx), A.amax(dims, keep), "amax " + what);
          const at::Tensor mn = make(A, mesh, p).as_tensor().amin(dims, keep);
          expect_close(full(mn), A.amin(dims, keep), "amin " + what);
          if (p[0].is_shard() && (dims.empty() || dims.size() == 2 || (dims[0] + 2) % 2 == p[0].dim())) {
            EXPECT_EQ(as_dtensor(mx).placements()[0], Partial("max")) << what;
            EXPECT_EQ(as_dtensor(mn).placements()[0], Partial("min")) << what;
          }
        }
    // [3,6] S(0) on 4 ranks: rank 3 holds no row. A floating amax/amin over dim 0 gives that
    // rank the identity (-inf / +inf) as its share of the Partial(max/min); the gradient
    // equals one device's.
    const at::Tensor A3 = global_a({3, 6});
    const at::Tensor e = make(A3, mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor emx = e.amax({0});
    expect_close(full(emx), A3.amax({0}), "amax with an empty shard");
    EXPECT_EQ(as_dtensor(emx).placements()[0], Partial("max"));
    expect_close(full(e.amin({0, 1})), A3.amin(), "amin with an empty shard, all dims");
    (emx * global_b({6})).sum().backward();
    const at::Tensor Ar = A3.clone().requires_grad_();
    (Ar.amax({0}) * global_b({6})).sum().backward();
    expect_close(full(e.grad()), Ar.grad(), "amax gradient with an empty shard");
    // An integer tensor: the empty shard's share is the dtype's lowest / highest value;
    // more dtypes in empty_shard_test.cc.
    const at::Tensor L3 = (A3 * 10).to(at::kLong);
    const at::Tensor lmx = make(L3, mesh, {Shard(0)}).as_tensor().amax({0});
    EXPECT_TRUE(at::equal(full(lmx), L3.amax({0}))) << full(lmx);
    // Gradients of amax / amin: nn_ops_test.cc (NnOps.AmaxAminGradientsEqualOneDevice).
    // Over the unsharded dim 1: the local op (the empty shard stays an empty Shard(0)).
    expect_close(full(make(global_a({3, 6}), mesh, {Shard(0)}).as_tensor().amax({1})),
                 global_a({3, 6}).amax({1}), "amax over the unsharded dim");
  });
  run_on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({4, 6}) * at::cos(at::arange(24, at::kDouble)).view({4, 6});
    for (const Placements& p : std::vector<Placements>{{Shard(0), Shard(1)}, {Shard(1), Partial("max")},
                                                        {Partial("sum"), Shard(0)}}) {
      expect_close(full(make(A, mesh, p).as_tensor().amax({0})), A.amax({0}), "2x2 amax " + to_string(p));
      expect_close(full(make(A, mesh, p).as_tensor().amin({1}, true)), A.amin({1}, true),
                   "2x2 amin " + to_string(p));
    }
  });
}

TEST(DTensorTensor, RaggedShardElementwiseAndSumOnly) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({6, 4}), B = global_b({6, 4});
    const Placements rs = {RaggedShard({0}, {1, 2})};
    const at::Tensor a = make(A, mesh, rs).as_tensor(), b = make(B, mesh, rs).as_tensor();
    expect_close(full(a * b + a), A * B + A, "ragged a*b+a");
    expect_close(full(at::relu(a) * 2), at::relu(A) * 2, "ragged relu*2");
    expect_close(full((a * b).sum()), (A * B).sum(), "ragged sum");
    EXPECT_TRUE(as_dtensor(a.sum()).placements()[0].is_partial());
    at::Tensor c = make(A, mesh, rs).as_tensor();
    c.add_(b);
    expect_close(full(c), A + B, "ragged add_");
    // A Replicate operand is cut to the ragged layout (more: ragged_grad_test.cc).
    const at::Tensor r = make(B, mesh, {Replicate()}).as_tensor();
    EXPECT_EQ(as_dtensor(a + r).layout(), as_dtensor(a).layout());
    expect_close(full(a + r), A + B, "ragged + R");
    const std::string m = error_of<NotImplementedError>([&] { (void)a.sum(0); });
    EXPECT_NE(m.find("aten::sum.dim_IntList(arg 0: mesh=[2] placements=[RS((0,), (1, 2))] "
                     "shape=[6,4]): a RaggedShard DTensor reduces only over all dims"),
              std::string::npos) << m;
  });
}

TEST(DTensorTensor, OpsWithoutARuleAreRefusedNamingOpAndLayouts) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    // (mm has a rule: matmul_test.cc; dot and 1-D matmul have a kernel: dot_test.cc.)
    std::string m = error_of<NotImplementedError>([&] { (void)at::unique_consecutive(a); });
    EXPECT_NE(m.find("no sharding rule for aten::unique_consecutive(arg 0: mesh=[2] placements=[S(0)] "
                     "shape=[4,6])"), std::string::npos) << m;
    // (A plain tensor beside a DTensor is Replicate: optim_test.cc.)
    expect_close(full(a + at::ones({4, 6}, at::kDouble)), global_a({4, 6}) + 1, "a + plain");
    // A composite without a rule that reads the wrapper's data pointer (quantile) fails with
    // hyper's message, not c10's "doesn't have storage".
    for (const auto& f : std::vector<std::function<void()>>{[&] { (void)at::quantile(a, 0.5); }}) {
      m = error_of<c10::Error>(f);
      EXPECT_NE(m.find("hyper DTensor (hyper::DTensorImpl): an ATen kernel read the data pointer (or storage) of a "
                       "DTensor tensor, which has none"), std::string::npos) << m;
    }
    m = error_of<NotImplementedError>([&] { (void)at::complex(a, a); });
    EXPECT_NE(m.find("no sharding rule for aten::complex(arg 0: mesh=[2] placements=[S(0)]"),
              std::string::npos) << m;
  });
}

// The kernel error hook (dtensor_tensor.h): called once per error leaving hyper's kernels
// toward their caller, however deeply the failing kernel was nested; a hook that returns
// leaves the error as it was, one that throws replaces it.
std::atomic<int> g_hook_calls{0};
void counting_hook(std::exception_ptr) { ++g_hook_calls; }
void replacing_hook(std::exception_ptr e) {
  ++g_hook_calls;
  try {
    std::rethrow_exception(e);
  } catch (const NotImplementedError& n) {
    throw std::runtime_error(std::string("replaced: ") + n.what());
  }
}

TEST(DTensorTensor, KernelErrorHookSeesEachErrorOnceAtTheOutermostKernel) {
  run_on_mesh({1}, [](const DeviceMesh& mesh) {  // one rank: the hook is process-wide
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    g_hook_calls = 0;
    set_kernel_error_hook(&counting_hook);
    std::string msg = error_of<NotImplementedError>([&] { (void)at::unique_consecutive(a); });
    EXPECT_NE(msg.find("no sharding rule for aten::unique_consecutive"), std::string::npos) << msg;
    EXPECT_EQ(g_hook_calls, 1);
    // A kernel composed of others (index_put_ of a bool mask, as nonzero + index_put) failing
    // inside a nested kernel: still one call, the outer op named first.
    at::Tensor b = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    g_hook_calls = 0;
    msg = error_of<ValueError>([&] { b.index_put_({at::tensor({7})}, at::zeros({6}, at::kDouble)); });
    EXPECT_EQ(g_hook_calls, 1) << msg;
    // No hook call for a success.
    g_hook_calls = 0;
    (void)(a + a);
    EXPECT_EQ(g_hook_calls, 0);

    set_kernel_error_hook(&replacing_hook);
    msg = error_of<std::runtime_error>([&] { (void)at::unique_consecutive(a); });
    EXPECT_EQ(msg.rfind("replaced: ", 0), 0u) << msg;
    set_kernel_error_hook(nullptr);
    (void)error_of<NotImplementedError>([&] { (void)at::unique_consecutive(a); });
    EXPECT_EQ(g_hook_calls, 1);
  });
}

// An error of one of hyper's backward functions (autograd's engine calls them from outside any
// kernel) goes through the hook once per rank too: amax over the sharded dim gives a P(max),
// whose reduction has no gradient.
TEST(DTensorTensor, KernelErrorHookSeesBackwardErrors) {
  g_hook_calls = 0;
  set_kernel_error_hook(&counting_hook);
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor().requires_grad_();
    const at::Tensor m = at::amax(a, {0});
    EXPECT_EQ(as_dtensor(m).placements(), Placements{Partial("max")});
    const at::Tensor whole = as_dtensor(m).full_tensor();
    const std::string msg = error_of<NotImplementedError>([&] { whole.sum().backward(); });
    EXPECT_NE(msg.find("the gradient through P(max)"), std::string::npos) << msg;
  });
  set_kernel_error_hook(nullptr);
  EXPECT_EQ(g_hook_calls, 2);
}

TEST(DTensorTensor, ErrorPathsOfTheRules) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    at::Tensor a = make(global_a({4, 6}), mesh, {Shard(0)}).as_tensor();
    const at::Tensor row = make(global_b({1, 6}), mesh, {Replicate()}).as_tensor();
    // In-place result larger than argument 0.
    at::Tensor r = make(global_b({1, 6}), mesh, {Replicate()}).as_tensor();
    std::string m = error_of<ValueError>([&] { r.add_(a); });
    EXPECT_NE(m.find("in-place result shape [4,6] differs from argument 0's [1,6]"),
              std::string::npos) << m;
    // In-place on a plain tensor with a DTensor operand.
    at::Tensor plain = at::zeros({}, at::kDouble);
    m = error_of<NotImplementedError>([&] { plain.add_(a.sum()); });
    EXPECT_NE(m.find("in-place op on a plain tensor with a DTensor operand"), std::string::npos) << m;
    // new_empty_strided of another size.
    m = error_of<NotImplementedError>([&] { (void)a.new_empty_strided({2, 2}, {2, 1}); });
    EXPECT_NE(m.find("new_empty_strided of a size other than the DTensor's global shape"),
              std::string::npos) << m;
    // expand of a sharded dim; reduction dim out of range.
    const at::Tensor col = make(global_b({4, 1}), mesh, {Shard(0)}).as_tensor();
    EXPECT_NO_THROW((void)col.expand({4, 3}));
    expect_close(full(col.expand({4, 3})), global_b({4, 1}).expand({4, 3}), "expand S(0)");
    const at::Tensor s1 = make(global_b({1, 6}), mesh, {Shard(1)}).as_tensor();
    expect_close(full(s1.expand({3, 6})), global_b({1, 6}).expand({3, 6}), "expand S(1)");
    // A size-1 dim sharded over 2 ranks cannot be expanded locally.
    m = error_of<NotImplementedError>([&] {
      (void)make(global_b({1, 6}), mesh, {Shard(0)}).as_tensor().expand({4, 6});
    });
    EXPECT_NE(m.find("aten::expand(arg 0: mesh=[2] placements=[S(0)] shape=[1,6]) to size [4,6]: "
                     "expand of sharded dim 0 is not implemented"), std::string::npos) << m;
    m = error_of<ValueError>([&] { (void)a.sum(2); });
    EXPECT_NE(m.find("dim 2 out of range [-2, 1] for a tensor of 2 dims"), std::string::npos) << m;
    (void)row;
  });
}

// ATen refusing a rank's local tensors (a dtype, an index, a value) reaches the caller as
// hyper's type (c10::NotImplementedError -> NotImplementedError; IndexError, TORCH_CHECK ->
// ValueError), naming the op, the global layouts and the rank, ATen's message kept; an
// in-place op that fails leaves its DTensor unchanged. Each path: the fallback, an nn kernel,
// a loss kernel, the max.dim family, an in-place Scalar overload.
TEST(DTensorTensor, ErrorsOfTheLocalAtenOpAreHypersNamingOpLayoutsAndRank) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const std::string on_rank =
        "the local op on rank " + std::to_string(mesh.get_rank()) + "'s shards failed: ";
    const at::Tensor g = at::arange(24, at::kLong).reshape({4, 6});
    at::Tensor ints = make(g, mesh, {Shard(0)}).as_tensor();
    const std::string s0 = "(arg 0: mesh=[2] placements=[S(0)] shape=[4,6])";
    std::string m = error_of<ValueError>([&] { (void)at::pow(ints, -1); });
    EXPECT_NE(m.find("aten::pow.Tensor_Scalar" + s0 + ": " + on_rank +
                     "Integers to negative integer powers are not allowed"),
              std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::layer_norm(ints, {6}); });
    EXPECT_NE(m.find("aten::native_layer_norm" + s0 + ": " + on_rank +
                     "\"LayerNormKernelImpl\" not implemented for 'Long'"),
              std::string::npos) << m;
    m = error_of<NotImplementedError>([&] { (void)at::_softmax(ints, 1, false); });
    EXPECT_NE(m.find("aten::_softmax" + s0 + ": " + on_rank), std::string::npos) << m;
    EXPECT_NE(m.find("not implemented for 'Long'"), std::string::npos) << m;
    const at::Tensor flags = make(g.remainder(3).eq(0), mesh, {Shard(0)}).as_tensor();
    m = error_of<NotImplementedError>([&] { (void)at::argmax(flags, 1); });
    EXPECT_NE(m.find("aten::argmax(arg 0: mesh=[2] placements=[S(0)] shape=[4,6]) dim=1 "
                     "keepdim=false: " + on_rank + "argmax(): does not support bool input"),
              std::string::npos) << m;
    // In place (add_.Scalar rewritten to add_.Tensor with a wrapped number): refused by ATen's
    // cast check on each rank, the DTensor unchanged.
    m = error_of<ValueError>([&] { ints.add_(1.5); });
    EXPECT_NE(m.find("aten::add_.Tensor" + s0.substr(0, s0.size() - 1) +
                     "; arg 1: plain tensor shape=[]): " + on_rank +
                     "result type Float can't be cast to the desired output type Long"),
              std::string::npos) << m;
    EXPECT_TRUE(at::equal(full(ints), g));
    // Plain tensors: LibTorch's own c10::Error, untouched.
    EXPECT_THROW((void)at::pow(g, -1), c10::Error);
  });
}

TEST(DTensorTensor, ACollidingPrivateUse3FallbackIsAValueError) {
  comm::testing::run_processes(1, [](int, int, const World& world) {
    static torch::Library other(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse3,
                                __FILE__, __LINE__);
    other.fallback(torch::CppFunction::makeFallthrough());
    const auto mesh = init_device_mesh(world, "cpu", {1});
    const DTensor dt = distribute_tensor(at::ones({2}), mesh, {Replicate()});
    const std::string m = error_of<ValueError>([&] { (void)dt.as_tensor(); });
    if (m.find("registering hyper's kernels for dispatch key PrivateUse3 failed") ==
        std::string::npos)
      throw std::runtime_error("unexpected: " + m);
  });
}

/// (x op y).sum().backward() on DTensor tensors vs the same on plain tensors.
void gradient_cases(const std::vector<int64_t>& mesh_shape, const std::vector<Placements>& cat,
                    const std::vector<int64_t>& sy) {
  using Fn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
  const std::vector<std::pair<std::string, Fn>> fns = {
      {"x*y", [](const at::Tensor& x, const at::Tensor& y) { return x * y; }},
      {"x+y", [](const at::Tensor& x, const at::Tensor& y) { return x + y * 3; }},
      {"x/y", [](const at::Tensor& x, const at::Tensor& y) { return x / y - y; }},
      {"relu(x)*y+exp(x)", [](const at::Tensor& x, const at::Tensor& y) {
         return at::relu(x) * y + at::exp(x);
       }},
      {"tanh(x)*gelu(y)", [](const at::Tensor& x, const at::Tensor& y) {
         return -at::tanh(x) * at::gelu(y);
       }},
  };
  run_on_mesh(mesh_shape, [&](const DeviceMesh& mesh) {
    const at::Tensor X = global_a({5, 6}), Y = global_b(sy);
    for (const auto& [name, f] : fns) {
      const at::Tensor xr = X.clone().requires_grad_(), yr = Y.clone().requires_grad_();
      f(xr, yr).sum().backward();
      for (const auto& px : cat)
        for (const auto& py : cat) {
          if (py[0].is_shard() && py[0].dim() >= static_cast<int64_t>(sy.size())) continue;
          const std::string what = name + " x " + to_string(px) + " y " + to_string(py);
          at::Tensor x = make(X, mesh, px).as_tensor().requires_grad_();
          at::Tensor y = make(Y, mesh, py).as_tensor().requires_grad_();
          at::Tensor loss;
          try {
            loss = f(x, y).sum();
            expect_close(full(loss), f(X, Y).sum(), "loss " + what);
            loss.backward();
          } catch (const std::exception& e) {
            throw std::runtime_error(what + ": " + e.what());
          }
          ASSERT_TRUE(x.grad().defined() && y.grad().defined()) << what;
          ASSERT_TRUE(is_dtensor(x.grad()) && is_dtensor(y.grad())) << what;
          expect_close(full(x.grad()), xr.grad(), "grad x " + what);
          expect_close(full(y.grad()), yr.grad(), "grad y " + what);
        }
    }
  });
}

TEST(DTensorTensorAutograd, GradientsEqualSingleDeviceOn2Ranks) {
  gradient_cases({2}, catalogue_1d(), {5, 6});
}
TEST(DTensorTensorAutograd, GradientsEqualSingleDeviceOn4Ranks) {
  gradient_cases({4}, catalogue_1d(), {5, 6});
}
TEST(DTensorTensorAutograd, BroadcastGradientSumsOverTheBroadcastDim) {
  gradient_cases({4}, {{Replicate()}, {Shard(1)}, {Partial()}}, {1, 6});
}

TEST(DTensorTensorAutograd, LeadingBroadcastGradientUsesTheSize1View) {
  gradient_cases({4}, {{Replicate()}, {Shard(1)}, {Partial()}}, {6});
}

TEST(DTensorTensor, ViewsThatInsertOrRemoveSize1Dims) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({5, 1, 6});
    for (const Placements& p : std::vector<Placements>{{Shard(0)}, {Shard(2)}, {Partial()}}) {
      const at::Tensor a = make(A, mesh, p).as_tensor();
      expect_close(full(a.view({5, 6})), A.view({5, 6}), "view [5,6] " + to_string(p));
      expect_close(full(a.view({1, 5, -1, 1})), A.view({1, 5, 6, 1}), "view [1,5,6,1] " + to_string(p));
    }
    // Views beyond size-1 dims follow the general rule (view_rules.h, view_test.cc): the
    // uneven [5,1,6] S(0) -> [30] and a sharded size-1 dim are made Replicate first.
    const at::Tensor a = make(A, mesh, {Shard(0)}).as_tensor();
    expect_close(full(a.view({30})), A.view({30}), "view [30] S(0)");
    EXPECT_TRUE(as_dtensor(a.view({30})).placements()[0].is_replicate());
    const at::Tensor s1 = make(A, mesh, {Shard(1)}).as_tensor();
    expect_close(full(s1.view({5, 6})), A.view({5, 6}), "view [5,6] S(1)");
    const std::string m = error_of<NotImplementedError>([&] {
      (void)make(global_a({6, 4}), mesh, {RaggedShard({0}, {1, 2})}).as_tensor().view({1, 6, 4});
    });
    EXPECT_NE(m.find("view ops of a RaggedShard DTensor are not implemented (fail-closed)"),
              std::string::npos) << m;
  });
}

// The fast path (Fast in fallback.cc): a call repeating the last decision of its op with the
// very layout objects it was made for is served without boxing and gives the fallback's values
// and layout; a first call, another layout, a plain operand or a Partial operand that is relaid
// out go through the fallback (or its remembered relayout) with the same results.
TEST(DTensorTensor, FastPathServesRepeatedCallsLikeTheFallback) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor ga = global_a({4, 6}), gb = global_b({4, 6}), gw = global_b({6, 6});
    const at::Tensor a = make(ga, mesh, {Shard(0)}).as_tensor();
    const at::Tensor b = make(gb, mesh, {Shard(0)}).as_tensor();
    const at::Tensor w = make(gw, mesh, {Replicate()}).as_tensor();
    const at::Tensor p = make(gb, mesh, {Partial()}).as_tensor();
    using Case = std::pair<std::function<at::Tensor()>, at::Tensor>;
    const std::vector<std::pair<std::string, Case>> cases = {
        {"add", {[&] { return at::add(a, b, 2); }, at::add(ga, gb, 2)}},
        {"sub", {[&] { return at::sub(a, b); }, at::sub(ga, gb)}},
        {"mul", {[&] { return at::mul(a, b); }, at::mul(ga, gb)}},
        {"div", {[&] { return at::div(a, b); }, at::div(ga, gb)}},
        {"mm", {[&] { return at::mm(a, w); }, at::mm(ga, gw)}},
        {"neg", {[&] { return at::neg(a); }, at::neg(ga)}},
        {"relu", {[&] { return at::relu(a); }, at::relu(ga)}},
        {"exp", {[&] { return at::exp(a); }, at::exp(ga)}},
        {"tanh", {[&] { return at::tanh(a); }, at::tanh(ga)}},
        {"sigmoid", {[&] { return at::sigmoid(a); }, at::sigmoid(ga)}},
        {"add S(0) + P(sum): relaid", {[&] { return at::add(a, p); }, at::add(ga, gb)}},
    };
    for (const auto& [name, c] : cases) {
      const int64_t before = dispatch::fast_path_calls();
      const at::Tensor first = c.first();
      const at::Tensor second = c.first();  // the same layout objects: the fast path
      EXPECT_EQ(dispatch::fast_path_calls(), before + 1) << name;
      expect_close(full(first), c.second, name + " (fallback)");
      expect_close(full(second), c.second, name + " (fast path)");
      EXPECT_EQ(as_dtensor(second).layout().to_string(), as_dtensor(first).layout().to_string()) << name;
    }
    // Not served by the fast path: a plain operand, another layout of the same op.
    const int64_t before = dispatch::fast_path_calls();
    expect_close(full(at::add(a, gb.narrow(0, 0, 4))), ga + gb, "add with a plain operand");
    const at::Tensor r = make(ga, mesh, {Replicate()}).as_tensor();
    expect_close(full(at::add(r, b)), ga + gb, "add R + S(0)");
    EXPECT_EQ(dispatch::fast_path_calls(), before);
    // Under autograd the fast path serves the forward; the gradient is the one-device one.
    const at::Tensor x = make(ga, mesh, {Shard(0)}).as_tensor().requires_grad_();
    for (int i = 0; i < 2; ++i) {
      const at::Tensor y = at::tanh(at::mul(x, x));
      y.sum().backward();
    }
    const at::Tensor gx = ga.clone().requires_grad_();
    for (int i = 0; i < 2; ++i) at::tanh(gx * gx).sum().backward();
    expect_close(full(x.grad()), gx.grad(), "grad through the fast path");
  });
}

// Per-op dispatch overhead on a small tensor (a report, not a limit: docs/dtensor.md quotes it).
// HYPER_OVERHEAD_ITERS=k makes k times the calls (for perf record).
TEST(DTensorTensor, DispatchOverheadReport) {
  run_on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor A = global_a({8, 8}), B = global_b({8, 8});
    const at::Tensor a = make(A, mesh, {Shard(0)}).as_tensor(), b = make(B, mesh, {Shard(0)}).as_tensor();
    const at::Tensor la = as_dtensor(a).to_local(), lb = as_dtensor(b).to_local();
    const int kIters = 2000 * (std::getenv("HYPER_OVERHEAD_ITERS") ? std::atoi(std::getenv("HYPER_OVERHEAD_ITERS")) : 1);
    auto time = [&](const std::function<void()>& f) {
      for (int i = 0; i < 100; ++i) f();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kIters; ++i) f();
      return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / kIters;
    };
    const double plain = time([&] { (void)at::add(la, lb); });
    const double wrapped = time([&] { (void)at::add(a, b); });
    const double wrapped_r = time([&] { (void)(a * 2); });
    EXPECT_TRUE(at::allclose(full(at::add(a, b)), A + B));
    if (mesh.get_coordinate()[0] == 0)
      std::printf("dispatch overhead [8,8] S(0) on 2 ranks: plain at::add %.2f us, DTensor at::add "
                  "%.2f us, DTensor a*2 %.2f us\n", plain, wrapped, wrapped_r);
  });
}

TEST(DTensorTensorAutograd, ProcessesOn2Ranks) {
  comm::testing::run_processes(2, [](int, int n, const World& world) {
    const auto mesh = init_device_mesh(world, "cpu", {n});
    const at::Tensor X = global_a({5, 6}), Y = global_b({5, 6});
    at::Tensor x = make(X, mesh, {Shard(0)}).as_tensor().requires_grad_();
    at::Tensor y = make(Y, mesh, {Partial()}).as_tensor().requires_grad_();
    (x * y).sum().backward();
    expect_close(full(x.grad()), Y, "grad x");
    expect_close(full(y.grad()), X, "grad y");
    if (::testing::Test::HasFailure()) throw std::runtime_error("gradient mismatch");
  });
}

}  // namespace
}  // namespace hyper
