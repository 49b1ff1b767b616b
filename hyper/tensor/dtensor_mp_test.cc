// Multi-rank tests of DTensor (ranks as threads, Gloo over loopback): from_local checks,
// distribute_tensor (local and source-rank modes), redistribute of every pair of a
// layout catalogue against slicing the global tensor, byte counters against the plan,
// full_tensor, zero-unit ranks, gradients against the single-device computation, and
// elementwise ops with their fail-closed errors.

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <chrono>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/comm/device_mesh.h"
#include "hyper/comm/testing/harness.h"
#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/redistribute.h"
#include "hyper/tensor/local_exec.h"
#include "hyper/tensor/ops.h"
#include "hyper/tensor/testing_catalogue.h"
#include "hyper/tensor/testing_locals.h"

namespace hyper {
namespace {

using comm::testing::HarnessOptions;
using comm::testing::run_threads;

HarnessOptions long_run() {
  return comm::testing::with_timeouts(std::chrono::seconds(30), std::chrono::seconds(600));
}

/// Runs `fn(mesh)` on every rank of a fresh world of prod(shape) ranks.
void on_mesh(const std::vector<int64_t>& shape, const std::function<void(const DeviceMesh&)>& fn,
             const HarnessOptions& options = {}) {
  comm::testing::run_on_mesh(shape, fn, options);
}

int64_t my_index(const DeviceMesh& mesh) { return mesh.topology().index_of(mesh.get_rank()); }

std::vector<at::Tensor> all_locals(const Layout& layout, const at::Tensor& global) {
  return testing::partial_locals(layout, global);
}

// --- redistribute every pair ----------------------------------------------------------

void every_pair(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& shape) {
  on_mesh(
      mesh_shape,
      [&](const DeviceMesh& mesh) {
        const int64_t idx = my_index(mesh);
        const at::Tensor global = at::arange(numel(shape), at::kDouble).view(shape);
        const auto cat = testing::layout_catalogue(mesh_shape, shape);
        ASSERT_GE(cat.size(), 8u);
        int64_t pairs = 0;
        for (const auto& src : cat) {
          const auto locals = all_locals(src, global);
          const DTensor dt = DTensor::from_local_with_layout(locals[idx], mesh, src);
          if (!src.has_partial()) {
            ASSERT_TRUE(at::equal(dt.full_tensor(), global)) << src.to_string();
          }
          for (const auto& dst : cat) {
            std::optional<RedistributePlan> maybe;
            try {
              maybe = plan_redistribute(src, dst);
            } catch (const NotImplementedError&) {
              EXPECT_THROW(dt.redistribute(mesh, dst.placements()), NotImplementedError);
              continue;
            }
            const RedistributePlan& plan = *maybe;
            const auto expected = execute_plan_locally(plan, locals);
            comm::reset_stats(mesh);
            const DTensor out = dt.redistribute(mesh, dst.placements());
            const auto st = comm::stats(mesh);
            ASSERT_EQ(out.placements(), dst.placements());
            ASSERT_EQ(out.shape(), shape);
            ASSERT_TRUE(at::equal(out.to_local(), expected[idx]))
                << src.to_string() << " -> " << dst.to_string() << " rank " << idx;
            if (!src.has_partial() && !dst.has_partial()) {
              ASSERT_TRUE(at::equal(out.to_local(), slice_local(global, dst, idx)));
            }
            const auto& tr = plan.traffic[idx];
            if (!plan.all_reduce_dims.empty()) {
              // Pure Partial -> Replicate: one all_reduce per reduced mesh dim, never more
              // bytes than the direct plan.
              EXPECT_EQ(st[comm::CollectiveKind::kAllReduce].calls,
                        static_cast<int64_t>(plan.all_reduce_dims.size()))
                  << src.to_string() << " -> " << dst.to_string();
              EXPECT_EQ(st.calls(), static_cast<int64_t>(plan.all_reduce_dims.size()));
              EXPECT_LE(st.bytes_sent(), tr.sent * 8) << src.to_string() << " -> " << dst.to_string();
              EXPECT_LE(st.bytes_received(), tr.received * 8);
              ++pairs;
              continue;
            }
            EXPECT_EQ(st.bytes_sent(), tr.sent * 8) << src.to_string() << " -> " << dst.to_string();
            EXPECT_EQ(st.bytes_received(), tr.received * 8);
            if (!src.has_partial()) {
              EXPECT_EQ(tr.received, tr.lower_bound);
            }
            ++pairs;
            EXPECT_LE(st.calls(), 1) << "one all_to_all_v per plan";
          }
        }
        if (idx == 0) {
          std::cout << "mesh " << shape_to_string(mesh_shape) << ": " << cat.size()
                    << " layouts, " << pairs << " pairs redistributed\n";
        }
      },
      long_run());
}

TEST(DTensorRedistribute, EveryPairMesh2) { every_pair({2}, {6, 4}); }
TEST(DTensorRedistribute, EveryPairMesh3) { every_pair({3}, {6, 4}); }
TEST(DTensorRedistribute, EveryPairMesh4) { every_pair({4}, {6, 4}); }
TEST(DTensorRedistribute, EveryPairMesh4Uneven) { every_pair({4}, {5, 3}); }
TEST(DTensorRedistribute, EveryPairMesh2x2) { every_pair({2, 2}, {6, 4}); }

TEST(DTensorRedistribute, SeedCase) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor global = at::arange(192, at::kFloat).view({6, 4, 8});
    comm::reset_stats(mesh);
    const DTensor scattered = distribute_tensor(global, mesh, {RaggedShard({0, 1}, {1, 2})}, 0);
    EXPECT_EQ(comm::stats(mesh).bytes_received(), r == 0 ? 0 : 128 * 4);
    EXPECT_TRUE(at::equal(scattered.to_local(), r == 0 ? at::arange(64, at::kFloat)
                                                       : at::arange(64, 192, at::kFloat)));
    const DTensor dt = distribute_tensor(global, mesh, {RaggedShard({0, 1}, {1, 2})});
    EXPECT_EQ(dt.local_shape(), (std::vector<int64_t>{r == 0 ? 64 : 128}));
    comm::reset_stats(mesh);
    const DTensor moved = dt.redistribute(mesh, {RaggedShard({0, 1}, {2, 1})});
    const auto st = comm::stats(mesh);
    if (r == 0) {
      EXPECT_TRUE(at::equal(moved.to_local(), at::arange(128, at::kFloat)));
      EXPECT_EQ(st.bytes_sent(), 0);
      EXPECT_EQ(st.bytes_received(), 64 * 4);
    } else {
      EXPECT_TRUE(at::equal(moved.to_local(), at::arange(128, 192, at::kFloat)));
      EXPECT_EQ(st.bytes_sent(), 64 * 4);
    }
    EXPECT_TRUE(at::equal(moved.full_tensor(), global));
    EXPECT_TRUE(at::equal(dt.redistribute(mesh, {Replicate()}).to_local(), global));
    EXPECT_TRUE(at::equal(dt.redistribute(mesh, {Shard(0)}).to_local(),
                          global.chunk(2, 0)[r]));
    // The plan cache is shared by derived DTensors.
    moved.redistribute(mesh, {RaggedShard({0, 1}, {1, 2})});
    EXPECT_GE(dt.plan_cache()->misses(), 1);
  });
}

TEST(DTensorRedistribute, SubMeshAcrossDimsUsesTheMeshGroup) {
  run_threads(8, [](int, int, const World& world) {
    const DeviceMesh mesh = init_device_mesh(world, "cpu", {2, 2, 2}, {"a", "b", "c"});
    const DeviceMesh sub = mesh.sub_mesh({"a", "b"});
    const int64_t idx = my_index(sub);
    const at::Tensor g = at::arange(24, at::kFloat).view({6, 4});
    const DTensor dt = distribute_tensor(g, sub, {Shard(0), Shard(1)});
    // Pieces that travel along one mesh dim use that dim's group.
    const DTensor r = dt.redistribute(sub, {Replicate(), Shard(1)});
    EXPECT_TRUE(at::equal(r.full_tensor(), g));
    // Across both dims of a sub-mesh that does not span the world: the sub-mesh's group
    // (made on first use by its 4 ranks; each of the two sub-meshes has its own).
    const DTensor t = dt.redistribute(sub, {Shard(1), Shard(0)});
    const Layout tl(sub.topology(), {Shard(1), Shard(0)}, {6, 4});
    EXPECT_TRUE(at::equal(t.to_local(), slice_local(g, tl, idx)));
    EXPECT_TRUE(at::equal(t.full_tensor(), g));
    const comm::Group mg = sub.get_mesh_group();
    EXPECT_EQ(mg.size(), 4);
    // Another sub-mesh object over the same ranks reuses the group.
    EXPECT_EQ(mesh.sub_mesh({"b", "a"}).get_mesh_group(), mg);
    EXPECT_EQ(mesh.get_mesh_group().size(), 8);
    // Another mesh.
    EXPECT_THROW(dt.redistribute(mesh.sub_mesh({"a", "c"}), {Replicate(), Replicate()}),
                 NotImplementedError);
  });
}

TEST(DTensorRedistribute, MeshOverPartOfTheWorldMakesItsGroupEagerly) {
  // World of 5; a (2,2) mesh over ranks 4,2,3,1 (not in order); rank 0 is not a member.
  run_threads(5, [](int rank, int, const World& world) {
    if (rank == 0) {
      world.next_mesh_id();  // stays in step with the members' mesh construction
      return;
    }
    const DeviceMesh mesh(world, "cpu", MeshTopology({2, 2}, {"x", "y"}, {4, 2, 3, 1}));
    const comm::Group mg = mesh.get_mesh_group();
    EXPECT_EQ(mg.ranks(), (std::vector<int>{4, 2, 3, 1}));
    const int64_t idx = my_index(mesh);
    const at::Tensor g = at::arange(40, at::kDouble).view({5, 8});
    const DTensor dt = distribute_tensor(g, mesh, {Shard(0), Shard(1)});
    for (const Placements& ps : {Placements{Shard(1), Shard(0)}, Placements{Shard(1), Replicate()},
                                 Placements{RaggedShard({0}, {3, 2}), Replicate()},
                                 Placements{Replicate(), Replicate()}}) {
      const DTensor t = dt.redistribute(mesh, ps);
      const Layout tl(mesh.topology(), ps, {5, 8});
      EXPECT_TRUE(at::equal(t.to_local(), slice_local(g, tl, idx))) << tl.to_string();
      EXPECT_TRUE(at::equal(t.full_tensor(), g)) << tl.to_string();
    }
    // Partial on both dims -> Replicate: one all_reduce per mesh dim.
    const DTensor p = DTensor::from_local(at::full({5, 8}, static_cast<double>(rank)), mesh,
                                          {Partial(), Partial()});
    EXPECT_TRUE(at::equal(p.full_tensor(), at::full({5, 8}, 10.0)));
  });
}

TEST(DTensorRedistribute, PlanCacheIsPerMesh) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor g = at::arange(24, at::kFloat).view({6, 4});
    const DTensor a = DTensor::from_local(g.chunk(2, 0)[r].clone(), mesh, {Shard(0)});
    const DTensor b = DTensor::from_local(g.chunk(2, 0)[r].clone() * 2, mesh, {Shard(0)});
    EXPECT_EQ(a.plan_cache(), mesh.plan_cache());
    EXPECT_EQ(b.plan_cache(), mesh.plan_cache());
    EXPECT_EQ(mesh[0].plan_cache(), mesh.plan_cache());
    const DTensor ra = a.redistribute(mesh, {Shard(1)});
    const int64_t misses = mesh.plan_cache()->misses();
    const int64_t hits = mesh.plan_cache()->hits();
    EXPECT_GE(misses, 1);
    const DTensor rb = b.redistribute(mesh, {Shard(1)});
    EXPECT_EQ(mesh.plan_cache()->misses(), misses) << "second DTensor replans";
    EXPECT_GT(mesh.plan_cache()->hits(), hits);
    EXPECT_TRUE(at::equal(rb.full_tensor(), g * 2));
    EXPECT_TRUE(at::equal(ra.full_tensor(), g));
  });
}

// --- async redistribute ---------------------------------------------------------------

TEST(DTensorAsync, PendingUntilFirstReadAndWaitsOnce) {
  std::atomic<bool> rank0_returned{false}, peer_gave_up{false};
  on_mesh({2}, [&](const DeviceMesh& mesh) {
    const int64_t idx = my_index(mesh);
    const at::Tensor g = at::arange(24, at::kDouble).view({6, 4});
    const DTensor a = distribute_tensor(g, mesh, {Shard(0)});
    const DTensor sync = a.redistribute(mesh, {Shard(1)});
    // The peer issues its side only once rank 0's call has returned, so rank 0's collective
    // cannot have completed: a blocking redistribute would make the peer give up (10 s).
    if (idx != 0) {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (!rank0_returned && std::chrono::steady_clock::now() < give_up)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (!rank0_returned) peer_gave_up = true;
    }
    const DTensor b = a.redistribute(mesh, {Shard(1)}, /*async_op=*/true);
    if (idx == 0) rank0_returned = true;
    EXPECT_TRUE(b.is_pending());
    EXPECT_EQ(b.wait_count(), 0);
    EXPECT_EQ(b.shape(), (std::vector<int64_t>{6, 4}));
    EXPECT_EQ(b.placements(), (Placements{Shard(1)}));
    EXPECT_EQ(b.local_shape(), (std::vector<int64_t>{6, 2}));
    EXPECT_EQ(b.layout(), sync.layout());
    EXPECT_EQ(b.scalar_type(), at::kDouble);
    const DTensor copy = b;  // copies share the pending state
    EXPECT_TRUE(b.is_pending());
    EXPECT_TRUE(copy.is_pending());
    EXPECT_EQ(b.wait_count(), 0);
    const at::Tensor l = b.to_local();
    EXPECT_FALSE(b.is_pending());
    EXPECT_FALSE(copy.is_pending());
    EXPECT_EQ(b.wait_count(), 1);
    EXPECT_TRUE(at::equal(l, sync.to_local()));
    EXPECT_TRUE(at::equal(ops::exp(b).to_local(), ops::exp(sync).to_local()));
    b.wait();
    copy.wait();
    EXPECT_TRUE(at::equal(copy.to_local(), sync.to_local()));
    EXPECT_TRUE(at::equal(b.full_tensor(), g));
    EXPECT_EQ(b.wait_count(), 1);
    EXPECT_EQ(copy.wait_count(), 1);
    // An op or an explicit wait() as the first read; a further redistribute of a pending one.
    const DTensor c = a.redistribute(mesh, {Shard(1)}, true);
    EXPECT_TRUE(c.is_pending());
    EXPECT_TRUE(at::equal(ops::exp(c).to_local(), ops::exp(sync).to_local()));
    EXPECT_FALSE(c.is_pending());
    EXPECT_EQ(c.wait_count(), 1);
    const DTensor d = a.redistribute(mesh, {Shard(1)}, true);
    EXPECT_TRUE(d.detach().is_pending());
    d.wait();
    d.wait();
    EXPECT_FALSE(d.is_pending());
    EXPECT_EQ(d.wait_count(), 1);
    const DTensor e = a.redistribute(mesh, {Shard(1)}, true);
    const DTensor f = e.redistribute(mesh, {Replicate()}, true);
    EXPECT_FALSE(e.is_pending());
    EXPECT_EQ(e.wait_count(), 1);
    EXPECT_TRUE(f.is_pending());
    EXPECT_TRUE(at::equal(f.to_local(), g));
    EXPECT_EQ(f.wait_count(), 1);
    // Synchronous results are never pending.
    EXPECT_FALSE(sync.is_pending());
    EXPECT_EQ(sync.wait_count(), 0);
  });
  EXPECT_FALSE(peer_gave_up) << "rank 0's async redistribute waited for its peer";
}

void async_every_pair(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& shape) {
  on_mesh(
      mesh_shape,
      [&](const DeviceMesh& mesh) {
        const int64_t idx = my_index(mesh);
        const at::Tensor global = at::arange(numel(shape), at::kDouble).view(shape);
        const auto cat = testing::layout_catalogue(mesh_shape, shape);
        int64_t pending = 0;
        for (const auto& src : cat) {
          const auto locals = all_locals(src, global);
          const DTensor dt = DTensor::from_local_with_layout(locals[idx], mesh, src);
          for (const auto& dst : cat) {
            try {
              plan_redistribute(src, dst);
            } catch (const NotImplementedError&) {
              EXPECT_THROW(dt.redistribute(mesh, dst.placements(), true), NotImplementedError);
              continue;
            }
            const DTensor out = dt.redistribute(mesh, dst.placements(), true);
            pending += out.is_pending() ? 1 : 0;
            ASSERT_EQ(out.layout(), dst);
            const DTensor ref = dt.redistribute(mesh, dst.placements());
            ASSERT_TRUE(at::equal(out.to_local(), ref.to_local()))
                << src.to_string() << " -> " << dst.to_string() << " rank " << idx;
            ASSERT_LE(out.wait_count(), 1);
          }
        }
        EXPECT_GT(pending, 0);
      },
      long_run());
}

TEST(DTensorAsync, EveryPairMatchesSyncMesh2) { async_every_pair({2}, {6, 4}); }
TEST(DTensorAsync, EveryPairMatchesSyncMesh3Uneven) { async_every_pair({3}, {5, 3}); }
TEST(DTensorAsync, EveryPairMatchesSyncMesh2x2) { async_every_pair({2, 2}, {6, 4}); }

TEST(DTensorAsync, GradientsMatchSync) {
  const at::Tensor w = at::linspace(-1, 2, 24, at::kDouble).view({6, 4});
  on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    const int64_t idx = my_index(mesh);
    const at::Tensor base = at::linspace(0, 1, 24, at::kDouble).view({6, 4});
    const std::vector<Placements> chain = {
        {Shard(0), Shard(1)}, {RaggedShard({0}, {1, 2}), Replicate()}, {Shard(1), Shard(0)},
        {Replicate(), Shard(0)}, {Replicate(), RaggedShard({0, 1}, {2, 1})}};
    for (const auto& from : chain) {
      for (const auto& to : chain) {
        const Layout lf(mesh.topology(), from, {6, 4});
        at::Tensor grads[2], outs[2];
        for (int async = 0; async < 2; ++async) {
          at::Tensor leaf = slice_local(base, lf, idx).requires_grad_(true);
          const DTensor a = DTensor::from_local_with_layout(leaf, mesh, lf);
          const DTensor b = a.redistribute(mesh, to, async == 1);
          const DTensor c = ops::exp(b);
          outs[async] = c.full_tensor();
          (outs[async] * w).sum().backward();
          ASSERT_TRUE(leaf.grad().defined());
          grads[async] = leaf.grad();
        }
        EXPECT_TRUE(at::equal(outs[0], outs[1])) << to_string(from) << " -> " << to_string(to);
        EXPECT_TRUE(at::equal(grads[0], grads[1])) << to_string(from) << " -> " << to_string(to);
      }
    }
  });
}

TEST(DTensorAsync, BackwardCollectiveOverlapsIndependentGradients) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor g = at::arange(48, at::kDouble).view({8, 6});
    const at::Tensor wa = at::linspace(-1, 1, 48, at::kDouble).view({8, 6});
    at::Tensor grads[2], cgrads[2];
    int64_t seen[2] = {-1, -1};
    for (int async = 0; async < 2; ++async) {
      // Branch B is recorded first, so its backward nodes rank below branch A's redistribute
      // and run after A's backward has issued its collective (all_to_all_v S(1) -> S(0)).
      at::Tensor c = at::full({3}, 1.0 + r, at::kDouble).requires_grad_(true);
      at::Tensor c2 = c * 2;
      c2.register_hook([&seen, async](const at::Tensor& grad) {
        seen[async] = backward_collectives_in_flight();
        return grad;
      });
      const at::Tensor yb = (c2 * c2).sum();
      at::Tensor leaf = g.chunk(2, 0)[r].clone().requires_grad_(true);
      const DTensor a = DTensor::from_local(leaf, mesh, {Shard(0)});
      const DTensor b = a.redistribute(mesh, {Shard(1)}, async == 1);
      const at::Tensor ya = (b.to_local() * wa.chunk(2, 1)[r]).sum();
      (ya + yb).backward();
      grads[async] = leaf.grad();
      cgrads[async] = c.grad();
      EXPECT_EQ(backward_collectives_in_flight(), 0);
    }
    EXPECT_EQ(seen[0], 0) << "synchronous backward: nothing in flight";
    EXPECT_GE(seen[1], 1) << "async backward: A's gradient collective in flight while B ran";
    EXPECT_TRUE(at::equal(grads[0], grads[1]));
    EXPECT_TRUE(at::equal(grads[0], wa.chunk(2, 0)[r]));  // d(sum(x * w))/dx = w, re-sharded
    EXPECT_TRUE(at::equal(cgrads[0], cgrads[1]));
  });
}

TEST(DTensorAsync, OnReadyRunsAtTheWaitOrAtOnce) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const DTensor a = distribute_tensor(at::arange(24, at::kFloat).view({6, 4}), mesh, {Shard(0)});
    int calls = 0;
    a.on_ready([&calls] { ++calls; });
    EXPECT_EQ(calls, 1) << "not pending: runs at once";
    const DTensor b = a.redistribute(mesh, {Shard(1)}, /*async_op=*/true);
    ASSERT_TRUE(b.is_pending());
    b.on_ready([&calls] { ++calls; });
    EXPECT_EQ(calls, 1) << "pending: queued";
    b.wait();
    EXPECT_EQ(calls, 2);
    b.wait();
    (void)b.to_local();
    EXPECT_EQ(calls, 2) << "runs once";
    b.on_ready([&calls] { ++calls; });
    EXPECT_EQ(calls, 3) << "done: runs at once";
  });
}

TEST(DTensorAsync, LargeGatherAndAllReduceRoutes) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    // all_gather_v route (> 64 KiB output), with gradients.
    const at::Tensor g = at::arange(256 * 100, at::kFloat).view({256, 100});
    for (const Placements& ps : {Placements{Shard(0)}, Placements{RaggedShard({0}, {1, 3})}}) {
      at::Tensor grads[2];
      for (int async = 0; async < 2; ++async) {
        at::Tensor leaf = g.clone().requires_grad_(true);
        const DTensor dt = distribute_tensor(leaf, mesh, ps);
        const DTensor out = dt.redistribute(mesh, {Replicate()}, async == 1);
        EXPECT_EQ(out.is_pending(), async == 1);
        EXPECT_TRUE(at::equal(out.to_local(), g));
        (out.to_local() * out.to_local()).sum().backward();
        grads[async] = leaf.grad();
      }
      EXPECT_TRUE(at::equal(grads[0], grads[1]));
    }
    // all_reduce route.
    const at::Tensor local = at::arange(64, at::kFloat).view({8, 8}) + 10.0 * r;
    for (const char* op : {"sum", "avg", "max"}) {
      const DTensor p = DTensor::from_local(local, mesh, {Partial(op)});
      const DTensor s = p.redistribute(mesh, {Replicate()});
      const DTensor a = p.redistribute(mesh, {Replicate()}, true);
      EXPECT_TRUE(a.is_pending()) << op;
      EXPECT_TRUE(at::equal(a.to_local(), s.to_local())) << op;
      EXPECT_EQ(a.wait_count(), 1);
    }
  });
}

TEST(DTensorRedistribute, LargeGatherToReplicateIsOneAllGatherV) {
  on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const int64_t idx = my_index(mesh);
    // 100 KiB of float32, above all_gather_v's ring threshold (point-to-point, exact bytes).
    const at::Tensor g = at::arange(256 * 100, at::kFloat).view({256, 100});
    for (const Placements& ps :
         {Placements{Replicate(), Shard(0)}, Placements{Shard(0), Replicate()},
          Placements{RaggedShard({0}, {1, 3}), Replicate()}}) {
      const DTensor dt = distribute_tensor(g, mesh, ps);
      const Placements rep{Replicate(), Replicate()};
      const auto plan = plan_redistribute(dt.layout(), Layout(mesh.topology(), rep, {256, 100}));
      comm::reset_stats(mesh);
      const DTensor out = dt.redistribute(mesh, rep);
      const auto st = comm::stats(mesh);
      EXPECT_TRUE(at::equal(out.to_local(), g)) << dt.layout().to_string();
      EXPECT_EQ(st[comm::CollectiveKind::kAllGatherV].calls, 1) << dt.layout().to_string();
      EXPECT_EQ(st.calls(), 1);
      EXPECT_EQ(st.bytes_sent(), plan.traffic[idx].sent * 4);
      EXPECT_EQ(st.bytes_received(), plan.traffic[idx].received * 4);
    }
  });
}

TEST(DTensorRedistribute, PartialToReplicateUsesAllReduce) {
  on_mesh({4}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const int64_t n = 4, elems = 1024;
    const int64_t bytes = elems * 4;
    const at::Tensor local = at::arange(elems, at::kFloat).view({32, 32}) + 100.0 * r;
    const at::Tensor all = at::stack({local * 0 + at::arange(elems, at::kFloat).view({32, 32}),
                                      at::arange(elems, at::kFloat).view({32, 32}) + 100,
                                      at::arange(elems, at::kFloat).view({32, 32}) + 200,
                                      at::arange(elems, at::kFloat).view({32, 32}) + 300});
    struct Case {
      std::string op;
      at::Tensor expected;
    };
    for (const Case& c : {Case{"sum", all.sum(0)}, Case{"avg", all.sum(0) / 4},
                          Case{"max", std::get<0>(all.max(0))}}) {
      const DTensor p = DTensor::from_local(local, mesh, {Partial(c.op)});
      const auto plan = plan_redistribute(p.layout(), Layout(mesh.topology(), {Replicate()},
                                                             {32, 32}));
      ASSERT_EQ(plan.all_reduce_dims, (std::vector<int64_t>{0}));
      comm::reset_stats(mesh);
      const DTensor out = p.redistribute(mesh, {Replicate()});
      const auto st = comm::stats(mesh);
      EXPECT_TRUE(at::allclose(out.to_local(), c.expected)) << c.op;
      EXPECT_EQ(st[comm::CollectiveKind::kAllReduce].calls, 1) << c.op;
      EXPECT_EQ(st.calls(), 1) << c.op;
      // Ring all_reduce: 2 (n-1)/n N each way, against (n-1) N for the direct plan
      // (n (n-1) N over all ranks).
      EXPECT_EQ(st.bytes_sent(), 2 * (n - 1) * bytes / n) << c.op;
      EXPECT_EQ(st.bytes_received(), 2 * (n - 1) * bytes / n) << c.op;
      EXPECT_EQ(plan.traffic[r].received * 4, (n - 1) * bytes);
      EXPECT_LT(st.bytes_received(), plan.traffic[r].received * 4) << c.op;
    }
  });
}

TEST(DTensorRedistribute, ZeroUnitRanksDoNotHang) {
  for (int n : {2, 3, 4}) {
    on_mesh({n}, [n](const DeviceMesh& mesh) {
      const int64_t r = my_index(mesh);
      std::vector<int64_t> units(n, 0);
      units[n - 1] = 1;
      const at::Tensor global = at::arange(24, at::kFloat).view({6, 4});
      const DTensor dt = distribute_tensor(global, mesh, {RaggedShard({0}, units)});
      EXPECT_EQ(dt.to_local().numel(), r == n - 1 ? 24 : 0);
      EXPECT_TRUE(at::equal(dt.full_tensor(), global));
      std::vector<int64_t> other(n, 0);
      other[0] = 1;
      const DTensor moved = dt.redistribute(mesh, {RaggedShard({0}, other)});
      EXPECT_EQ(moved.to_local().numel(), r == 0 ? 24 : 0);
      EXPECT_TRUE(at::equal(moved.full_tensor(), global));
      const DTensor y = ops::sigmoid(dt) * 2.0;
      EXPECT_TRUE(at::allclose(y.full_tensor(), at::sigmoid(global) * 2.0));
      EXPECT_TRUE(at::equal(dt.redistribute(mesh, {Shard(1)}).full_tensor(), global));
    });
  }
}

TEST(DTensorProcesses, SeedCaseInSeparateProcesses) {
  comm::testing::run_processes(2, [](int rank, int, const World& world) {
    const DeviceMesh mesh = init_device_mesh(world, "cpu", {2});
    const at::Tensor global = at::arange(192, at::kFloat).view({6, 4, 8});
    const DTensor dt = distribute_tensor(global, mesh, {RaggedShard({0, 1}, {1, 2})}, 0);
    const DTensor moved = dt.redistribute(mesh, {RaggedShard({0, 1}, {2, 1})});
    const at::Tensor want = rank == 0 ? at::arange(128, at::kFloat) : at::arange(128, 192, at::kFloat);
    if (!at::equal(moved.to_local(), want)) throw std::runtime_error("wrong local shard");
    if (!at::equal(moved.full_tensor(), global)) throw std::runtime_error("wrong full tensor");
  });
}

// --- from_local -------------------------------------------------------------------------

TEST(DTensorFromLocal, RaggedChecks) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const Placements ps = {RaggedShard({0, 1}, {1, 2})};
    const std::vector<int64_t> shape = {6, 4, 8};
    const int64_t n = r == 0 ? 64 : 128;
    at::Tensor local = at::arange(n, at::kFloat);
    const DTensor dt = DTensor::from_local(local, mesh, ps, shape);
    EXPECT_EQ(dt.to_local().data_ptr(), local.data_ptr()) << "stored without a copy";
    EXPECT_EQ(dt.shape(), shape);
    EXPECT_EQ(dt.numel(), 192);
    // A contiguous N-D local tensor is refused (the storage is flat).
    EXPECT_THROW(DTensor::from_local(local.view({-1, 8}), mesh, ps, shape), ValueError);
    // Missing global shape.
    try {
      DTensor::from_local(local, mesh, ps);
      ADD_FAILURE() << "expected ValueError";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("global shape"), std::string::npos) << e.what();
    }
    // Wrong numel: the message names expected and actual.
    try {
      DTensor::from_local(at::zeros({n - 1}), mesh, ps, shape);
      ADD_FAILURE() << "expected ValueError";
    } catch (const std::invalid_argument& e) {
      const std::string want =
          r == 0 ? "local numel 63 does not match rank 0's RaggedShard interval [0, 64) (expected 64)"
                 : "local numel 127 does not match rank 1's RaggedShard interval [64, 192) (expected 128)";
      EXPECT_EQ(std::string(e.what()), want);
    }
    // Non-contiguous.
    EXPECT_THROW(DTensor::from_local(at::zeros({2 * n}).slice(0, 0, 2 * n, 2), mesh, ps, shape),
                 ValueError);
    // Negative global shape.
    EXPECT_THROW(DTensor::from_local(local, mesh, ps, std::vector<int64_t>{6, -4, 8}), ValueError);
    // Prefix cells not divisible by sum(units).
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 3})}, shape), ValueError);
    // len(local_units) != mesh dim size.
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 1, 1})}, shape), ValueError);
    // Dims past the tensor's rank.
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0, 1, 2, 3}, {1, 1})}, shape),
                 ValueError);
    // Non-prefix dims fail at construction.
    EXPECT_THROW(RaggedShard({1}, {1, 2}), std::invalid_argument);
    EXPECT_THROW(RaggedShard({0, 2}, {1, 2}), std::invalid_argument);
    EXPECT_THROW(RaggedShard({0}, {0, 0}), std::invalid_argument);
    // A mesh that is not this DTensor's is refused on redistribute.
  });
}

TEST(DTensorFromLocal, RaggedLayoutChecksOn2DMesh) {
  on_mesh({2, 2}, [](const DeviceMesh& mesh) {
    const std::vector<int64_t> shape = {6, 4};
    at::Tensor local = at::zeros({12});
    // Two RaggedShards in one layout.
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 1}), RaggedShard({0}, {1, 1})},
                                     shape),
                 ValueError);
    // Ragged beside a Shard splits the Shard box: of columns [2t, 2t + 2) (tp coordinate t),
    // dp coordinate d holds rows [3d, 3d + 3), flat; the full tensor is the global one.
    const at::Tensor global = at::arange(24, at::kFloat).reshape({6, 4});
    const auto c = mesh.get_coordinate();
    const at::Tensor mine = global.narrow(0, 3 * c[0], 3).narrow(1, 2 * c[1], 2).reshape({-1});
    const DTensor beside =
        DTensor::from_local(mine.clone(), mesh, {RaggedShard({0}, {1, 1}), Shard(1)}, shape);
    EXPECT_TRUE(at::equal(beside.full_tensor(), global));
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 1}), Shard(1)}, shape),
                 ValueError);  // 12 elements, the interval has 6
    // Ragged beside a Partial.
    EXPECT_THROW(DTensor::from_local(local, mesh, {Partial(), RaggedShard({0}, {1, 1})}, shape),
                 ValueError);
    // Ragged beside Replicate is fine.
    const DTensor ok = DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 1}), Replicate()}, shape);
    EXPECT_EQ(ok.local_shape(), std::vector<int64_t>{12});
    // Wrong placement count.
    EXPECT_THROW(DTensor::from_local(local, mesh, {RaggedShard({0}, {1, 1})}, shape), ValueError);
  });
}

TEST(DTensorFromLocal, ShapeInference) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const DTensor even = DTensor::from_local(at::zeros({3, 4}), mesh, {Shard(0)});
    EXPECT_EQ(even.shape(), (std::vector<int64_t>{6, 4}));
    const DTensor last = DTensor::from_local(at::zeros({3, 4}), mesh, {Shard(-1)});
    EXPECT_EQ(last.shape(), (std::vector<int64_t>{3, 8}));
    EXPECT_EQ(DTensor::from_local(at::zeros({3, 4}), mesh, {Replicate()}).shape(),
              (std::vector<int64_t>{3, 4}));
    EXPECT_EQ(DTensor::from_local(at::zeros({3, 4}), mesh, {Partial()}).shape(),
              (std::vector<int64_t>{3, 4}));
    // Uneven shards need the shape: 5 rows -> 3 + 2.
    const at::Tensor local = at::zeros({r == 0 ? 3 : 2, 4});
    const DTensor uneven = DTensor::from_local(local, mesh, {Shard(0)}, std::vector<int64_t>{5, 4});
    EXPECT_EQ(uneven.shape(), (std::vector<int64_t>{5, 4}));
    // A local shape that is not this rank's box.
    EXPECT_THROW(DTensor::from_local(at::zeros({4, 4}), mesh, {Shard(0)}, std::vector<int64_t>{5, 4}),
                 ValueError);
    EXPECT_THROW(DTensor::from_local(at::zeros({3, 4}), mesh, {Shard(2)}), ValueError);
    EXPECT_THROW(DTensor::from_local(at::Tensor(), mesh, {Shard(0)}), ValueError);
    EXPECT_THROW(DTensor().shape(), ValueError);
  });
}

TEST(DTensorFromLocal, RunCheckNamesTheMismatchOnEveryRank) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const auto expect_error = [&](const std::function<void()>& fn,
                                  const std::vector<std::string>& parts) {
      try {
        fn();
        ADD_FAILURE() << "rank " << r << ": expected ValueError";
      } catch (const ValueError& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("DTensor::from_local(run_check): the ranks of mesh"), std::string::npos)
            << what;
        for (const auto& p : parts) EXPECT_NE(what.find(p), std::string::npos) << what;
      }
    };
    // Agreement: the same DTensor as without the check, global shape from rank 1's rows.
    const at::Tensor local = at::arange(12, at::kFloat).view({3, 4}) + 100 * r;
    const DTensor ok = DTensor::from_local(local, mesh, {Shard(0)}, std::nullopt, true);
    EXPECT_EQ(ok.shape(), (std::vector<int64_t>{6, 4}));
    EXPECT_EQ(ok.to_local().data_ptr(), local.data_ptr());
    const at::Tensor want = at::cat({at::arange(12, at::kFloat).view({3, 4}),
                                     at::arange(12, at::kFloat).view({3, 4}) + 100});
    EXPECT_TRUE(at::equal(ok.full_tensor(), want));

    // Different placements with the same local shape: without the check both ranks accept
    // and disagree on the global shape (a wrong result later); with it both ranks fail.
    const Placements mine = r == 0 ? Placements{Shard(0)} : Placements{Shard(1)};
    const DTensor silent = DTensor::from_local(local, mesh, mine);
    EXPECT_EQ(silent.shape(), r == 0 ? (std::vector<int64_t>{6, 4}) : (std::vector<int64_t>{3, 8}));
    expect_error([&] { DTensor::from_local(local, mesh, mine, std::nullopt, true); },
                 {"rank 1 passed placements [S(1)] but rank 0 passed [S(0)]",
                  "rank 1 passed global shape [3,8] but rank 0 passed [6,4]"});

    // Different explicit global shapes, each consistent with its own local rows.
    const std::vector<int64_t> shape = r == 0 ? std::vector<int64_t>{5, 4} : std::vector<int64_t>{6, 4};
    expect_error([&] { DTensor::from_local(local, mesh, {Shard(0)}, shape, true); },
                 {"rank 1 passed global shape [6,4] but rank 0 passed [5,4]"});

    // Different dtypes.
    const at::Tensor typed = r == 0 ? local : local.to(at::kDouble);
    expect_error([&] { DTensor::from_local(typed, mesh, {Shard(0)}, std::nullopt, true); },
                 {"rank 1 passed dtype Double but rank 0 passed Float"});

    // Different meshes over the same ranks: (2) vs the same ranks named differently is
    // the same mesh; a ragged layout with different units is a placements mismatch.
    const Placements ragged = r == 0 ? Placements{RaggedShard({0}, {1, 2})}
                                     : Placements{RaggedShard({0}, {2, 1})};
    const at::Tensor flat = at::zeros({r == 0 ? 8 : 8});
    expect_error([&] { DTensor::from_local(flat, mesh, ragged, std::vector<int64_t>{6, 2}, true); },
                 {"rank 1 passed placements"});

    // One rank's local checks fail: without the check only that rank throws and its peer
    // would wait in its next collective; with it both ranks get the failing rank's error.
    const at::Tensor bad = r == 1 ? at::zeros({4, 4}) : at::zeros({3, 4});
    expect_error([&] { DTensor::from_local(bad, mesh, {Shard(0)}, std::vector<int64_t>{6, 4}, true); },
                 {"rank 1 failed its local checks: DTensor::from_local: local shape [4,4] does not "
                  "match mesh index 1's box [3,4]"});
  });
}

// --- distribute_tensor ------------------------------------------------------------------

void scatter_case(const std::vector<int64_t>& mesh_shape, const std::vector<int64_t>& shape) {
  on_mesh(
      mesh_shape,
      [&](const DeviceMesh& mesh) {
        const int64_t idx = my_index(mesh);
        const at::Tensor global = at::arange(numel(shape), at::kFloat).view(shape);
        const auto me = mesh.get_coordinate();
        for (int k = 0; k < 2; ++k) {
          bool src = true;
          for (auto c : me) src = src && c == k;
          // Only the source rank's data may be read.
          const at::Tensor mine = src ? global.clone() : at::full(shape, -7.0f);
          for (const auto& layout : testing::layout_catalogue(mesh_shape, shape)) {
            if (layout.has_partial()) continue;
            comm::reset_stats(mesh);
            const DTensor dt = distribute_tensor(mine, mesh, layout.placements(), k);
            ASSERT_TRUE(at::equal(dt.to_local(), slice_local(global, layout, idx)))
                << layout.to_string() << " src " << k << " rank " << idx;
            if (!src) {
              EXPECT_TRUE(at::equal(mine, at::full(shape, -7.0f))) << "non-source input untouched";
            }
            // Local mode: no communication.
            comm::reset_stats(mesh);
            const DTensor loc = distribute_tensor(global, mesh, layout.placements());
            EXPECT_EQ(comm::stats(mesh).calls(), 0);
            ASSERT_TRUE(at::equal(loc.to_local(), slice_local(global, layout, idx)));
          }
        }
        EXPECT_THROW(distribute_tensor(global, mesh, {std::vector<Placement>(mesh_shape.size(), Shard(0))}, 9),
                     ValueError);
      },
      long_run());
}

TEST(DTensorDistribute, SourceRankMesh2) { scatter_case({2}, {6, 4}); }
TEST(DTensorDistribute, SourceRankMesh3) { scatter_case({3}, {7, 3}); }
TEST(DTensorDistribute, SourceRankMesh2x2) { scatter_case({2, 2}, {5, 4}); }

TEST(DTensorDistribute, PartialKeepsValueOnCoordinateZero) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor global = at::arange(6, at::kFloat).view({2, 3});
    const DTensor p = distribute_tensor(global, mesh, {Partial()});
    EXPECT_TRUE(at::equal(p.to_local(), r == 0 ? global : at::zeros_like(global)));
    EXPECT_TRUE(at::equal(p.full_tensor(), global));
    const DTensor m = distribute_tensor(global, mesh, {Partial("max")});
    EXPECT_TRUE(at::equal(m.to_local(), global));
    const DTensor s = distribute_tensor(global, mesh, {Partial()}, 0);
    EXPECT_TRUE(at::equal(s.full_tensor(), global));
  });
}

// --- autograd ---------------------------------------------------------------------------

TEST(DTensorAutograd, RaggedElementwiseMatchesSingleDevice) {
  const at::Tensor base = at::linspace(-2, 2, 6 * 4 * 8, at::kDouble).view({6, 4, 8});
  at::Tensor ref_x = base.clone().requires_grad_(true);
  (at::sigmoid(ref_x * 1.5 - 0.25) + at::sigmoid(ref_x)).sum().backward();
  const at::Tensor ref_grad = ref_x.grad();
  for (int n : {2, 3, 4}) {
    on_mesh({n}, [&](const DeviceMesh& mesh) {
      // Zero-unit ranks included; sum(units) divides the 24 prefix cells.
      const std::vector<int64_t> units = n == 2   ? std::vector<int64_t>{1, 2}
                                         : n == 3 ? std::vector<int64_t>{0, 1, 2}
                                                  : std::vector<int64_t>{1, 0, 2, 3};
      const Placements ps = {RaggedShard({0, 1}, units)};
      at::Tensor x = base.clone().requires_grad_(true);
      const DTensor dt = distribute_tensor(x, mesh, ps);
      const DTensor y = ops::sigmoid(dt * 1.5 - 0.25) + ops::sigmoid(dt);
      EXPECT_EQ(y.placements(), ps);
      EXPECT_EQ(y.shape(), dt.shape());
      y.full_tensor().sum().backward();
      ASSERT_TRUE(x.grad().defined());
      EXPECT_TRUE(at::allclose(x.grad(), ref_grad)) << "global gradient on every rank";

      // from_local leaf: the local gradient is this rank's slice of the reference.
      const Layout layout(mesh.topology(), ps, {6, 4, 8});
      at::Tensor leaf = slice_local(base, layout, my_index(mesh)).requires_grad_(true);
      const DTensor dl = DTensor::from_local(leaf, mesh, ps, std::vector<int64_t>{6, 4, 8});
      (ops::sigmoid(dl * 1.5 - 0.25) + ops::sigmoid(dl)).full_tensor().sum().backward();
      ASSERT_TRUE(leaf.grad().defined());
      EXPECT_TRUE(at::allclose(leaf.grad(), slice_local(ref_grad, layout, my_index(mesh))));
    });
  }
}

TEST(DTensorAutograd, RedistributeBackwardIsReverse) {
  const at::Tensor w = at::arange(24, at::kDouble).view({6, 4});
  on_mesh({2, 2}, [&](const DeviceMesh& mesh) {
    const int64_t idx = my_index(mesh);
    const at::Tensor base = at::linspace(0, 1, 24, at::kDouble).view({6, 4});
    const std::vector<Placements> chain = {
        {Shard(0), Shard(1)}, {RaggedShard({0}, {1, 2}), Replicate()}, {Shard(1), Shard(0)},
        {Replicate(), Shard(0)}};
    for (const auto& from : chain) {
      for (const auto& to : chain) {
        const Layout lf(mesh.topology(), from, {6, 4});
        at::Tensor leaf = slice_local(base, lf, idx).requires_grad_(true);
        const DTensor a = DTensor::from_local_with_layout(leaf, mesh, lf);
        const DTensor b = a.redistribute(mesh, to);
        (b.full_tensor() * w).sum().backward();
        ASSERT_TRUE(leaf.grad().defined());
        EXPECT_TRUE(at::allclose(leaf.grad(), slice_local(w, lf, idx)))
            << to_string(from) << " -> " << to_string(to);
      }
    }
  });
}

TEST(DTensorAutograd, PartialGradients) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor w = at::arange(6, at::kDouble).view({2, 3});
    // Partial(sum) -> Replicate: each contribution's gradient is the full gradient.
    at::Tensor part = at::full({2, 3}, 1.0 + r, at::kDouble).requires_grad_(true);
    const DTensor p = DTensor::from_local(part, mesh, {Partial()});
    const at::Tensor full = p.full_tensor();
    EXPECT_TRUE(at::equal(full, at::full({2, 3}, 3.0, at::kDouble)));
    (full * w).sum().backward();
    EXPECT_TRUE(at::allclose(part.grad(), w));
    // Partial(avg): the gradient is divided by the mesh dim size.
    at::Tensor avg = at::full({2, 3}, 1.0 + r, at::kDouble).requires_grad_(true);
    (DTensor::from_local(avg, mesh, {Partial("avg")}).full_tensor() * w).sum().backward();
    EXPECT_TRUE(at::allclose(avg.grad(), w / 2));
    // Replicate -> Partial -> Replicate: identity.
    at::Tensor rep = at::ones({2, 3}, at::kDouble).requires_grad_(true);
    const DTensor rp = DTensor::from_local(rep, mesh, {Replicate()}).redistribute(mesh, {Partial()});
    EXPECT_TRUE(at::equal(rp.to_local(), r == 0 ? at::ones({2, 3}, at::kDouble)
                                               : at::zeros({2, 3}, at::kDouble)));
    (rp.full_tensor() * w).sum().backward();
    EXPECT_TRUE(at::allclose(rep.grad(), w));
    // to_local(grad_placements = Partial): the incoming gradients are summed.
    at::Tensor x = at::ones({2, 3}, at::kDouble).requires_grad_(true);
    const DTensor dx = DTensor::from_local(x, mesh, {Replicate()});
    (dx.to_local({{Partial()}}) * w * (1.0 + r)).sum().backward();
    EXPECT_TRUE(at::allclose(x.grad(), w * 3.0));
    // full_tensor(grad_placements) on a sharded DTensor.
    at::Tensor s = at::ones({1, 3}, at::kDouble).requires_grad_(true);
    const DTensor ds = DTensor::from_local(s, mesh, {Shard(0)});
    (ds.full_tensor({{Partial()}}) * w).sum().backward();
    EXPECT_TRUE(at::allclose(s.grad(), 2.0 * w.narrow(0, r, 1)));
    // Backward through Partial(max) is not implemented.
    at::Tensor mx = at::ones({2, 3}, at::kDouble).requires_grad_(true);
    const at::Tensor fm = DTensor::from_local(mx, mesh, {Partial("max")}).full_tensor();
    EXPECT_THROW(fm.sum().backward(), std::exception);
    // Mismatched grad placements (shape) are refused.
    EXPECT_THROW(ds.to_local({{Replicate()}}), ValueError);
  });
}

// --- ops --------------------------------------------------------------------------------

TEST(DTensorOps, WhitelistOnRaggedAndNormal) {
  on_mesh({3}, [](const DeviceMesh& mesh) {
    const at::Tensor g = at::linspace(0.1, 3, 24, at::kDouble).view({6, 4});
    for (const Placements& ps :
         {Placements{RaggedShard({0}, {1, 0, 2})}, Placements{Shard(1)}, Placements{Replicate()}}) {
      const DTensor x = distribute_tensor(g, mesh, ps);
      const DTensor y = distribute_tensor(g * 0.5 + 1, mesh, ps);
      auto check = [&](const DTensor& out, const at::Tensor& want, const std::string& what) {
        EXPECT_EQ(out.placements(), ps) << what;
        EXPECT_TRUE(at::allclose(out.full_tensor().to(at::kDouble), want.to(at::kDouble), 1e-6,
                                 1e-6, true))
            << what << " " << to_string(ps);
      };
      for (const auto& name : ops::unary_ops()) {
        const DTensor out = ops::unary(name, x);
        at::Tensor want;
        if (name == "abs" || name == "absolute") want = at::abs(g);
        else if (name == "clone") want = g;
        else if (name == "cos") want = at::cos(g);
        else if (name == "exp") want = at::exp(g);
        else if (name == "gelu") want = at::gelu(g);
        else if (name == "isinf") want = at::isinf(g);
        else if (name == "isnan") want = at::isnan(g);
        else if (name == "log") want = at::log(g);
        else if (name == "neg" || name == "negative") want = -g;
        else if (name == "relu") want = at::relu(g);
        else if (name == "rsqrt") want = at::rsqrt(g);
        else if (name == "sigmoid") want = at::sigmoid(g);
        else if (name == "silu") want = at::silu(g);
        else if (name == "sin") want = at::sin(g);
        else if (name == "sqrt") want = at::sqrt(g);
        else if (name == "square") want = at::square(g);
        ASSERT_TRUE(want.defined()) << name;
        check(out, want, name);
      }
      const at::Tensor h = g * 0.5 + 1;
      check(x + y, g + h, "+");
      check(x - y, g - h, "-");
      check(x * y, g * h, "*");
      check(x / y, g / h, "/");
      check(ops::pow(x, y), at::pow(g, h), "pow");
      check(ops::true_divide(x, y), g / h, "true_divide");
      check(x + 2.0, g + 2.0, "+s");
      check(2.0 - x, 2.0 - g, "s-");
      check(x - 2.0, g - 2.0, "-s");
      check(3.0 * x, g * 3.0, "s*");
      check(3.0 / x, 3.0 / g, "s/");
      check(x / 4.0, g / 4.0, "/s");
      check(ops::pow(x, 2.0), at::pow(g, 2.0), "pow s");
      check(ops::pow(2.0, x), at::pow(2.0, g), "s pow");
      check(-x, -g, "unary -");
    }
  });
}

TEST(DTensorOps, PartialInputs) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const int64_t r = my_index(mesh);
    const at::Tensor g = at::linspace(-1, 1, 6, at::kDouble).view({2, 3});
    const DTensor p = DTensor::from_local(g * (1.0 + r) / 3.0, mesh, {Partial()});  // sum = g
    const DTensor q = DTensor::from_local(g * (2.0 - r), mesh, {Partial()});        // sum = 3g
    const DTensor sum = p + q;
    EXPECT_TRUE(sum.placements()[0].is_partial()) << "linear op keeps Partial";
    EXPECT_TRUE(at::allclose(sum.full_tensor(), g * 4));
    const DTensor scaled = p * 2.0;
    EXPECT_TRUE(scaled.placements()[0].is_partial());
    EXPECT_TRUE(at::allclose(scaled.full_tensor(), g * 2));
    const DTensor sig = ops::sigmoid(p);
    EXPECT_TRUE(sig.placements()[0].is_replicate()) << "non-linear op reduces first";
    EXPECT_TRUE(at::allclose(sig.full_tensor(), at::sigmoid(g)));
    EXPECT_TRUE(at::allclose((p + 1.0).full_tensor(), g + 1.0));
  });
}

TEST(DTensorOps, FailClosed) {
  on_mesh({2}, [](const DeviceMesh& mesh) {
    const at::Tensor g = at::arange(24, at::kFloat).view({6, 4});
    const DTensor x = distribute_tensor(g, mesh, {RaggedShard({0, 1}, {1, 2})});
    const DTensor s = distribute_tensor(g, mesh, {Shard(0)});
    auto expect_named = [](const std::function<void()>& fn, const std::string& name) {
      try {
        fn();
        ADD_FAILURE() << name << ": expected NotImplementedError";
      } catch (const NotImplementedError& e) {
        EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
      }
    };
    // hyper::ops is the dispatcher path: full reductions of a ragged DTensor and every op of a
    // Shard one run through their rules; a view or matmul of a ragged one is refused there.
    EXPECT_TRUE(at::allclose(ops::sum(x).full_tensor(), g.sum()));
    EXPECT_TRUE(at::allclose(ops::sum(s).full_tensor(), g.sum()));
    EXPECT_TRUE(at::allclose(ops::mean(s).full_tensor(), g.mean()));
    EXPECT_TRUE(at::equal(ops::reshape(s, {24}).full_tensor(), g.reshape({24})));
    EXPECT_TRUE(at::equal(ops::flatten(s).full_tensor(), g.flatten()));
    EXPECT_TRUE(at::allclose(ops::matmul(s, ops::reshape(s, {4, 6})).full_tensor(),
                             at::matmul(g, g.reshape({4, 6}))));
    expect_named([&] { ops::reshape(x, {24}); }, "reshape");
    expect_named([&] { ops::view(x, {24}); }, "view");
    expect_named([&] { ops::flatten(x); }, "flatten");
    expect_named([&] { ops::matmul(x, x); }, "matmul");
    // Names outside the lists.
    expect_named([&] { ops::unary("tanh", x); }, "tanh");
    expect_named([&] { ops::binary("atan2", x, x); }, "atan2");
    expect_named([&] { ops::binary("fmod", x, 2.0); }, "fmod");
    // Operands of different layouts: the Shard one is moved onto the ragged layout.
    const DTensor sum_xs = ops::add(x, s);
    EXPECT_EQ(sum_xs.placements(), x.placements());
    EXPECT_TRUE(at::equal(sum_xs.full_tensor(), g + g));
    const DTensor x2 = distribute_tensor(g, mesh, {RaggedShard({0, 1}, {2, 1})});
    EXPECT_TRUE(at::equal((x * x2).full_tensor(), g * g));
    // Ragged factories.
    for (const char* name : {"zeros", "ones", "empty", "full", "rand"}) {
      const Placements rs = {RaggedShard({0}, {1, 2})};
      expect_named(
          [&] {
            const std::string n = name;
            if (n == "zeros") ops::zeros({6, 4}, mesh, rs);
            if (n == "ones") ops::ones({6, 4}, mesh, rs);
            if (n == "empty") ops::empty({6, 4}, mesh, rs);
            if (n == "full") ops::full({6, 4}, 1.0, mesh, rs);
            if (n == "rand") ops::rand({6, 4}, mesh, rs);
          },
          name);
    }
    // Normal factories work.
    const DTensor z = ops::ones({5, 4}, mesh, {Shard(0)});
    EXPECT_TRUE(at::equal(z.full_tensor(), at::ones({5, 4})));
    EXPECT_EQ(ops::zeros({5, 4}, mesh, {Replicate()}).local_shape(), (std::vector<int64_t>{5, 4}));
    EXPECT_TRUE(at::equal(ops::full({3}, 2.5, mesh, {Shard(0)}).full_tensor(), at::full({3}, 2.5)));
    EXPECT_THROW(ops::zeros({5, 4}, mesh, {Shard(3)}), ValueError);
    // Another mesh on redistribute.
    EXPECT_THROW(x.redistribute(DeviceMesh(), {Replicate()}), ValueError);
  });
}

}  // namespace
}  // namespace hyper
