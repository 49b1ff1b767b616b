// GPU tests: CUDA tensors through every layer. Each test needs a CUDA device and reports
// "skipped: no CUDA device" without one (ctest then shows cuda_mp_test as Skipped, not
// Passed); scripts/gpu_check.sh runs them on a machine with a GPU.
//  - CUDA tensors on Gloo across ranks (ranks as threads sharing one GPU; the comm layer
//    stages device memory through the host): every collective, DTensor redistribute between
//    ragged / shard / replicate / partial layouts, async redistribute, autograd;
//  - NCCL with one rank per GPU (as many ranks as this process sees GPUs, at most 4);
//  - async tensor parallelism (Colwise + Rowwise MLP) on CUDA: outputs and gradients equal
//    the single-device module on the same GPU, async on and off identical;
//  - the checkpoint: CUDA DTensors saved (staged to host memory) and loaded into CUDA and CPU
//    targets.
// The oracle everywhere: slicing the global tensor, or the single-device computation.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/DeviceGuard.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/dcp/state_dict.h"
#include "hyper/nn/modules.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tp/parallelize.h"

namespace hyper {
namespace {

using comm::testing::HarnessOptions;

#define SKIP_WITHOUT_CUDA()                                         \
  do {                                                              \
    if (!at::hasCUDA()) GTEST_SKIP() << "skipped: no CUDA device"; \
  } while (0)

HarnessOptions gloo_opts() {
  HarnessOptions o = comm::testing::with_timeouts(std::chrono::seconds(60), std::chrono::seconds(300));
  o.cuda_backend = "gloo";
  return o;
}

HarnessOptions nccl_opts() {
  HarnessOptions o = comm::testing::with_timeouts(std::chrono::seconds(60), std::chrono::seconds(300));
  o.cuda_backend = "nccl";
  return o;
}

/// Runs `fn(mesh)` on n thread ranks of a "cuda" mesh.
void on_cuda_mesh(int n, const HarnessOptions& o, const std::function<void(const DeviceMesh&)>& fn) {
  comm::testing::run_threads(n, [&](int, int size, const World& world) {
    DeviceMesh mesh = init_device_mesh(world, "cuda", {size});
    fn(mesh);
  }, o);
}

at::Tensor cuda(const at::Tensor& t) { return t.to(at::kCUDA); }

at::Tensor slice_box(const at::Tensor& global, const Layout& layout, int64_t index) {
  const Box box = layout.local_box(index);
  at::Tensor t = global;
  for (size_t d = 0; d < box.sizes.size(); ++d)
    t = t.narrow(static_cast<int64_t>(d), box.offsets[d], box.sizes[d]);
  return t;
}

TEST(CudaOnGloo, CollectivesStageDeviceMemory) {
  SKIP_WITHOUT_CUDA();
  on_cuda_mesh(3, gloo_opts(), [](const DeviceMesh& mesh) {
    const int r = static_cast<int>(mesh.get_local_rank(0));
    const auto g = mesh.get_group(0);
    at::Tensor mine = cuda(at::full({r + 1, 4}, static_cast<float>(r)));
    at::Tensor all = comm::all_gather_v(mine, g);
    EXPECT_TRUE(all.is_cuda());
    EXPECT_TRUE(at::equal(all.cpu(), at::cat({at::full({1, 4}, 0.f), at::full({2, 4}, 1.f),
                                              at::full({3, 4}, 2.f)})));
    at::Tensor sum = comm::all_reduce(cuda(at::full({5}, r + 1.0)), comm::ReduceOp::kSum, g);
    EXPECT_TRUE(sum.is_cuda());
    EXPECT_TRUE(at::equal(sum.cpu(), at::full({5}, 6.0)));
    at::Tensor b = cuda(at::full({2, 2}, static_cast<float>(r)));
    comm::broadcast(b, 1, g);
    EXPECT_TRUE(at::equal(b.cpu(), at::full({2, 2}, 1.f)));
    // all_to_all_v: rank r sends j+1 rows of value 10r+j to rank j.
    std::vector<int64_t> in_splits{1, 2, 3}, out_splits(3, r + 1);
    std::vector<at::Tensor> pieces;
    for (int j = 0; j < 3; ++j) pieces.push_back(at::full({j + 1, 2}, 10.f * r + j));
    at::Tensor got = comm::all_to_all_v(cuda(at::cat(pieces)), in_splits, out_splits, g);
    EXPECT_TRUE(got.is_cuda());
    std::vector<at::Tensor> want;
    for (int j = 0; j < 3; ++j) want.push_back(at::full({r + 1, 2}, 10.f * j + r));
    EXPECT_TRUE(at::equal(got.cpu(), at::cat(want)));
    at::Tensor rs = comm::reduce_scatter_v(cuda(at::ones({6, 3})), {1, 2, 3}, comm::ReduceOp::kSum, g);
    EXPECT_TRUE(at::equal(rs.cpu(), at::full({r + 1, 3}, 3.f)));
  });
}

TEST(CudaOnGloo, RedistributeEveryLayoutPairAgainstSlicing) {
  SKIP_WITHOUT_CUDA();
  on_cuda_mesh(4, gloo_opts(), [](const DeviceMesh& mesh) {
    const std::vector<int64_t> shape{12, 10};
    const at::Tensor global = at::arange(120, at::kFloat).view(shape);
    const std::vector<Placements> layouts = {
        {Shard(0)}, {Shard(1)}, {Replicate()}, {RaggedShard({0}, {1, 2, 0, 3})},
        {RaggedShard({0, 1}, {3, 1, 1, 1})}};
    const int64_t idx = mesh.get_local_rank(0);
    for (const auto& from : layouts) {
      const DTensor dt = distribute_tensor(cuda(global), mesh, from);
      EXPECT_TRUE(dt.to_local().is_cuda());
      for (const auto& to : layouts) {
        for (bool async : {false, true}) {
          const DTensor moved = dt.redistribute(mesh, to, async);
          const at::Tensor local = moved.to_local();
          ASSERT_TRUE(local.is_cuda()) << from[0] << " -> " << to[0];
          const Layout dst(mesh.topology(), to, shape);
          at::Tensor want = dst.is_ragged()
                                ? global.reshape({-1}).narrow(0, dst.ragged_interval(idx).start,
                                                              dst.ragged_interval(idx).size())
                                : slice_box(global, dst, idx);
          EXPECT_TRUE(at::equal(local.cpu().reshape(want.sizes()), want))
              << from[0] << " -> " << to[0] << " async " << async;
        }
      }
      EXPECT_TRUE(at::equal(dt.full_tensor().cpu(), global));
    }
    // Partial(sum) -> Replicate and -> Shard(0).
    const DTensor p = DTensor::from_local(cuda(global / 4.0), mesh, {Partial()}, shape);
    EXPECT_TRUE(at::allclose(p.redistribute(mesh, {Replicate()}).to_local().cpu(), global));
    EXPECT_TRUE(at::allclose(p.redistribute(mesh, {Shard(0)}).to_local().cpu(),
                             global.narrow(0, 3 * idx, 3)));
  });
}

TEST(CudaOnGloo, GradientsOfRedistributeEqualSingleDevice) {
  SKIP_WITHOUT_CUDA();
  on_cuda_mesh(2, gloo_opts(), [](const DeviceMesh& mesh) {
    const at::Tensor global = at::arange(24, at::kFloat).view({4, 6}).div(7);
    at::Tensor x = cuda(global).requires_grad_(true);
    DTensor dt = distribute_tensor(x, mesh, {Shard(0)});
    at::Tensor y = dt.redistribute(mesh, {Shard(1)}, /*async_op=*/true).full_tensor();
    (y * y).sum().backward();
    ASSERT_TRUE(x.grad().defined());
    EXPECT_TRUE(x.grad().is_cuda());
    EXPECT_TRUE(at::allclose(x.grad().cpu(), 2 * global));
  });
}

TEST(Nccl, OneRankPerGpu) {
  SKIP_WITHOUT_CUDA();
  const int n = std::min(4, at::detail::getCUDAHooks().getNumGPUs());
  // One rank per GPU: with one GPU every collective would take its single-rank shortcut and
  // NCCL would never run, so that is a skip, not a pass.
  if (n < 2) GTEST_SKIP() << "skipped: NCCL needs 2 GPUs, this machine has " << n;
  comm::testing::run_threads(n, [&](int rank, int size, const World& world) {
    const c10::DeviceGuard on_my_gpu(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(rank)));
    DeviceMesh mesh = init_device_mesh(world, "cuda", {size});
    const std::vector<int64_t> shape{10, 8};
    const at::Tensor global = at::arange(80, at::kFloat).view(shape);
    const at::Device dev(at::kCUDA, static_cast<c10::DeviceIndex>(rank));
    const DTensor dt = distribute_tensor(global.to(dev), mesh, {RaggedShard({0}, std::vector<int64_t>(size, 1))});
    const DTensor rep = dt.redistribute(mesh, {Replicate()});
    EXPECT_TRUE(at::equal(rep.to_local().cpu(), global));
    const DTensor s1 = dt.redistribute(mesh, {Shard(1)}, /*async_op=*/true);
    const Layout dst(mesh.topology(), {Shard(1)}, shape);
    EXPECT_TRUE(at::equal(s1.to_local().cpu(), slice_box(global, dst, rank)));
    // Host tensors on the same groups go through their Gloo backend.
    at::Tensor host = comm::all_gather_v(at::full({1, 2}, static_cast<float>(rank)), mesh.get_group(0));
    EXPECT_TRUE(host.is_cpu());
    EXPECT_EQ(host.size(0), size);
  }, nccl_opts());
}

/// norm -> w1 -> gelu -> w2 (+ residual) with hyper's hookable modules.
struct Mlp : torch::nn::Module {
  Mlp() {
    w1 = register_module("w1", nn::Linear(torch::nn::LinearOptions(16, 32)));
    w2 = register_module("w2", nn::Linear(torch::nn::LinearOptions(32, 16)));
  }
  at::Tensor forward(const at::Tensor& x) { return w2->forward(at::gelu(w1->forward(x))) + x; }
  nn::Linear w1{nullptr}, w2{nullptr};
};

std::shared_ptr<Mlp> make_mlp() {
  auto m = std::make_shared<Mlp>();
  at::NoGradGuard g;
  int i = 0;
  for (auto& p : m->parameters()) {
    p.copy_(at::sin(at::arange(p.numel(), at::kFloat) * 0.37 + i++).view(p.sizes()) * 0.3);
  }
  m->to(at::kCUDA);
  return m;
}

TEST(CudaTensorParallel, AsyncColwiseRowwiseEqualsSingleDevice) {
  SKIP_WITHOUT_CUDA();
  on_cuda_mesh(2, gloo_opts(), [](const DeviceMesh& mesh) {
    auto ref = make_mlp();
    const at::Tensor x0 = cuda(at::cos(at::arange(4 * 16, at::kFloat)).view({4, 16}));
    at::Tensor xr = x0.clone().requires_grad_(true);
    at::Tensor yr = ref->forward(xr);
    yr.pow(2).sum().backward();
    std::vector<at::Tensor> outs;
    for (bool async : {false, true}) {
      auto m = make_mlp();
      tp::parallelize_module(m, mesh, {{"w1", tp::ColwiseParallel().async_op(async)},
                                       {"w2", tp::RowwiseParallel().async_op(async)}});
      at::Tensor x = x0.clone().requires_grad_(true);
      at::Tensor y = m->forward(x);
      EXPECT_TRUE(y.is_cuda());
      y.pow(2).sum().backward();
      EXPECT_TRUE(at::allclose(y.cpu(), yr.detach().cpu(), 1e-5, 1e-5)) << "async " << async;
      EXPECT_TRUE(at::allclose(x.grad().cpu(), xr.grad().cpu(), 1e-5, 1e-5)) << "async " << async;
      auto sd = tp::state_dict(*m);
      auto ref_params = ref->named_parameters();
      for (const auto& [name, dt] : sd) {
        const at::Tensor want =
            distribute_tensor(ref_params[name].grad(), mesh, dt.placements()).to_local().cpu();
        EXPECT_TRUE(at::allclose(m->named_parameters()[name].grad().cpu(), want, 1e-5, 1e-5))
            << name << " async " << async;
      }
      outs.push_back(y.detach().cpu());
    }
    EXPECT_TRUE(at::equal(outs[0], outs[1])) << "async on and off differ";
  });
}

TEST(CudaCheckpoint, SaveFromDeviceLoadIntoDeviceAndHost) {
  SKIP_WITHOUT_CUDA();
  const std::string dir = ::testing::TempDir() + "hyper_cuda_ck_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const at::Tensor global = at::arange(60, at::kFloat).view({6, 10});
  on_cuda_mesh(3, gloo_opts(), [&](const DeviceMesh& mesh) {
    dcp::StateDict sd = {{"w", distribute_tensor(cuda(global), mesh, {RaggedShard({0}, {1, 0, 2})})},
                         {"b", cuda(at::arange(5, at::kDouble))}};
    dcp::save(sd, dir);
    dcp::StateDict into_cuda = {
        {"w", distribute_tensor(cuda(at::zeros({6, 10})), mesh, {Shard(1)})},
        {"b", cuda(at::zeros({5}, at::kDouble))}};
    dcp::load(into_cuda, dir);
    const DTensor w = std::get<DTensor>(into_cuda["w"]);
    EXPECT_TRUE(w.to_local().is_cuda());
    EXPECT_TRUE(at::equal(w.full_tensor().cpu(), global));
    EXPECT_TRUE(at::equal(std::get<at::Tensor>(into_cuda["b"]).cpu(), at::arange(5, at::kDouble)));
    at::Tensor host = at::zeros({6, 10});
    dcp::StateDict into_host = {{"w", host}};
    dcp::load(into_host, dir);
    EXPECT_TRUE(at::equal(host, global));
  });
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hyper
