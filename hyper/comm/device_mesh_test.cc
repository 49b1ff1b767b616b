// DeviceMesh: coordinates, groups per dim created once, sub-meshes sharing groups, meshes
// from an existing process group, errors.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <thread>

#include "hyper/comm/c10d_interop.h"
#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"

namespace hyper {
namespace {

using comm::testing::run_threads;

TEST(DeviceMesh, TwoByTwo) {
  run_threads(4, [](int rank, int n, const World& world) {
    auto mesh = init_device_mesh(world, "cpu", {2, 2}, {"dp", "tp"});
    EXPECT_EQ(mesh.ndim(), 2);
    EXPECT_EQ(mesh.size(), 4);
    EXPECT_EQ(mesh.size(1), 2);
    EXPECT_EQ(mesh.get_rank(), rank);
    EXPECT_EQ(mesh.device_type(), c10::DeviceType::CPU);
    EXPECT_EQ(mesh.get_coordinate(), (std::vector<int64_t>{rank / 2, rank % 2}));
    EXPECT_EQ(mesh.get_local_rank(0), rank / 2);
    EXPECT_EQ(mesh.get_local_rank("tp"), rank % 2);
    const std::vector<int> tp{rank / 2 * 2, rank / 2 * 2 + 1};
    const std::vector<int> dp{rank % 2, rank % 2 + 2};
    EXPECT_EQ(mesh.get_group("tp").ranks(), tp);
    EXPECT_EQ(mesh.get_group(0).ranks(), dp);
    EXPECT_EQ(mesh.get_group("tp").rank(), rank % 2);
    EXPECT_EQ(mesh.get_group(-1), mesh.get_group(1));
    // Groups are made once and reused.
    EXPECT_EQ(mesh.get_group("dp"), mesh.get_group("dp"));
    // Sub-mesh reuses the parent's group.
    DeviceMesh tp_mesh = mesh["tp"];
    EXPECT_EQ(tp_mesh.ndim(), 1);
    EXPECT_EQ(tp_mesh.size(), 2);
    EXPECT_EQ(tp_mesh.get_group(0), mesh.get_group("tp"));
    EXPECT_EQ(tp_mesh.get_coordinate(), (std::vector<int64_t>{rank % 2}));
    EXPECT_EQ(tp_mesh.topology().ranks(), tp);
    EXPECT_EQ(mesh[0].get_group(0), mesh.get_group("dp"));
    DeviceMesh swapped = mesh.sub_mesh({"tp", "dp"});
    EXPECT_EQ(swapped.get_group(0), mesh.get_group("tp"));
    // The groups work: sum of global ranks along each dim.
    at::Tensor s_tp = comm::all_reduce(at::full({1}, double(rank)), comm::ReduceOp::kSum,
                                       mesh.get_group("tp"));
    EXPECT_EQ(s_tp.item<double>(), tp[0] + tp[1]);
    at::Tensor s_dp = comm::all_reduce(at::full({1}, double(rank)), comm::ReduceOp::kSum,
                                       mesh.get_group("dp"));
    EXPECT_EQ(s_dp.item<double>(), dp[0] + dp[1]);
    // Copies share state.
    DeviceMesh copy = mesh;
    EXPECT_EQ(copy.state(), mesh.state());
    EXPECT_EQ(copy, mesh);
    EXPECT_NE(mesh.to_string().find("[dp=2,tp=2]"), std::string::npos) << mesh.to_string();
    // A second mesh on the same world gets its own groups (distinct rendezvous keys).
    auto mesh2 = init_device_mesh(world, "cpu", {4});
    EXPECT_NE(mesh2.get_group(0), mesh.get_group(0));
    EXPECT_EQ(comm::all_reduce(at::ones({1}), comm::ReduceOp::kSum, mesh2.get_group(0)).item<float>(), 4.f);
  });
}

TEST(DeviceMesh, EveryShapeOfEveryWorldSize) {
  for (int n : {1, 2, 3, 4}) {
    std::vector<std::vector<int64_t>> shapes = {{n}, {1, n}, {n, 1}};
    if (n == 4) shapes.push_back({2, 2});
    run_threads(n, [&shapes](int rank, int n, const World& world) {
      for (const auto& shape : shapes) {
        auto mesh = init_device_mesh(world, "cpu", shape);
        for (int64_t d = 0; d < mesh.ndim(); ++d) {
          auto g = mesh.get_group(d);
          EXPECT_EQ(g.size(), mesh.size(d));
          at::Tensor s = comm::all_reduce(at::ones({1}), comm::ReduceOp::kSum, g);
          EXPECT_EQ(s.item<float>(), float(mesh.size(d)));
        }
      }
    });
  }
}

TEST(DeviceMesh, CustomRankOrderAndErrors) {
  run_threads(4, [](int rank, int n, const World& world) {
    DeviceMesh mesh(world, "cpu", MeshTopology({2, 2}, {"a", "b"}, {3, 2, 1, 0}));
    EXPECT_EQ(mesh.get_coordinate(), mesh.topology().coordinate_of(rank));
    EXPECT_EQ(mesh.get_group("b").ranks(), mesh.topology().group_of(rank, 1));
    EXPECT_THROW(init_device_mesh(world, "cpu", {3}), ValueError);
    EXPECT_THROW(init_device_mesh(world, "tpu", {4}), ValueError);
    EXPECT_THROW(mesh.get_group("c"), ValueError);
    EXPECT_THROW(mesh.size(2), ValueError);
    if (rank >= 2) {
      EXPECT_THROW(DeviceMesh(world, "cpu", MeshTopology({2}, {}, {0, 1})), ValueError)
          << "ranks 2,3 are not in the mesh";
    } else {
      DeviceMesh half(world, "cpu", MeshTopology({2}, {}, {0, 1}));
      EXPECT_EQ(half.get_group(0).ranks(), (std::vector<int>{0, 1}));
    }
  });
}

// A CUDA mesh is refused with a clear error where it cannot work: without NCCL in this
// LibTorch, or (NCCL builds) on a machine with no CUDA device.
TEST(DeviceMesh, CudaMeshNeedsNcclAndADevice) {
#ifdef USE_C10D_NCCL
  if (at::hasCUDA()) GTEST_SKIP() << "this machine has a CUDA device (gpu_check.sh tests it)";
  const std::string expected = "needs a CUDA device";
#else
  const std::string expected = "no NCCL";
#endif
  run_threads(1, [&](int, int, const World& world) {
    try {
      init_device_mesh(world, "cuda", {1});
      ADD_FAILURE() << "expected not-implemented";
    } catch (const NotImplementedError& e) {
      EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
    }
  });
}

TEST(DeviceMesh, UnknownCudaBackendIsRefused) {
  auto o = comm::testing::with_timeouts(std::chrono::seconds(5), std::chrono::seconds(60));
  o.cuda_backend = "mpi";
  comm::testing::run_threads(1, [](int, int, const World& world) {
    try {
      init_device_mesh(world, "cpu", {1});
      ADD_FAILURE() << "expected ValueError";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("ProcessGroupOptions::cuda_backend \"mpi\" is not a "
                                           "backend (expected nccl or gloo)"),
                std::string::npos)
          << e.what();
    }
  }, o);
}

TEST(DeviceMesh, FromAnExistingProcessGroup) {
  const int n = 3;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  std::vector<std::string> errors(n);
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto opts = c10d::ProcessGroupGloo::Options::create(std::chrono::seconds(5));
        opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
        // LibTorch 2.x: a ProcessGroup carrying a Gloo backend for CPU tensors, as
        // torch.distributed makes it.
        auto gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(store, r, n, opts);
        auto pg = c10::make_intrusive<c10d::ProcessGroup>(store, r, n);
        pg->setBackend(c10::DeviceType::CPU, c10d::ProcessGroup::BackendType::GLOO, gloo);
        pg->setDefaultBackend(c10d::ProcessGroup::BackendType::GLOO);
        DeviceMesh mesh = mesh_from_process_group(pg, "cpu", "x");
        EXPECT_EQ(mesh.get_local_rank("x"), r);
        EXPECT_EQ(comm::process_group_of(mesh.get_group(0)).get(), pg.get());
        at::Tensor g = comm::all_gather_v(at::full({r, 2}, double(r)), mesh.get_group("x"));
        EXPECT_EQ(g.size(0), 0 + 1 + 2);
        EXPECT_EQ(comm::stats(mesh)[comm::CollectiveKind::kAllGatherV].calls, 1);
        EXPECT_THROW(comm::set_all_gather_route(mesh.get_group(0), comm::AllGatherRoute::kGlooRing),
                     NotImplementedError);
        EXPECT_THROW(mesh.world().new_group({0, 1, 2}, "x"), ValueError) << "no store";
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST(DeviceMesh, StoreRankWorldConstructor) {
  const int n = 2;
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ProcessGroupOptions o;
      o.timeout = std::chrono::seconds(5);
      DeviceMesh mesh = make_device_mesh(store, r, n, "cpu", {2}, {"tp"}, o);
      EXPECT_EQ(mesh.get_local_rank("tp"), r);
      EXPECT_EQ(comm::all_reduce(at::ones({1}), comm::ReduceOp::kSum, mesh.get_group(0)).item<float>(), 2.f);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace hyper
