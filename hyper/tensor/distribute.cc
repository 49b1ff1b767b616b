// distribute_tensor: local slicing (differentiable) or scatter/broadcast from a source rank.
#include <ATen/ATen.h>

#include "hyper/comm/collectives.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/internal/autograd.h"
#include "hyper/tensor/internal/checks.h"
#include "hyper/tensor/redistribute.h"

namespace hyper {

using namespace tensor_internal;

namespace {

/// Source-rank mode: mesh dim by mesh dim, scatter shards and broadcast replicas from the
/// rank at coordinate k. Returns this rank's storage under `layout` with Partial treated
/// as Replicate.
at::Tensor scatter_from(const at::Tensor& global, const DeviceMesh& mesh, const Layout& layout,
                        int k) {
  const MeshTopology& topo = mesh.topology();
  const auto& ps = layout.placements();
  const auto me = topo.coordinate_of(mesh.get_rank());
  // Non-source ranks never read (or write) the caller's tensor.
  bool src_all = true;
  for (int64_t d = 0; d < topo.ndim(); ++d) src_all = src_all && me[d] == k;
  at::Tensor cur = src_all ? global.detach().contiguous() : at::empty(global.sizes(), global.options());
  // The RaggedShard's mesh dim goes last: it splits the box the Shards leave (layout.h).
  std::vector<int64_t> order;
  for (int64_t d = 0; d < topo.ndim(); ++d)
    if (!ps[d].is_ragged_shard()) order.push_back(d);
  if (layout.is_ragged()) order.push_back(layout.ragged()->mesh_dim);
  for (const int64_t d : order) {
    const auto& p = ps[d];
    const comm::Group group = mesh.get_group(d);
    const int64_t n = topo.size(d);
    if (p.is_replicate() || p.is_partial()) {
      if (n > 1) cur = comm::broadcast(cur.clone(), k, group);
      continue;
    }
    if (p.is_shard()) {
      const int64_t t = p.dim();
      const at::Tensor rows = cur.transpose(0, t).contiguous();
      std::vector<int64_t> splits;
      for (int64_t i = 0; i < n; ++i) splits.push_back(chunk_range(rows.size(0), n, i).size());
      cur = comm::scatter_v(rows, splits, k, group).transpose(0, t).contiguous();
      continue;
    }
    // RaggedShard: `cur` is this rank's Shard box.
    std::vector<int64_t> splits;
    for (const auto& iv : ragged_intervals(cur.sizes().vec(), p)) splits.push_back(iv.size());
    cur = comm::scatter_v(cur.reshape({-1}), splits, k, group);
  }
  return cur;
}

}  // namespace

DTensor distribute_tensor(const at::Tensor& global, const DeviceMesh& mesh,
                          const Placements& placements, std::optional<int> src_data_rank) {
  check_mesh(mesh, "distribute_tensor");
  check_device(global, mesh, "distribute_tensor");
  auto layout = std::make_shared<const Layout>(mesh.topology(), placements, global.sizes().vec());
  const std::shared_ptr<PlanCache>& plans = mesh.plan_cache();
  const int64_t idx = mesh_index_of(mesh);
  if (!src_data_rank) {
    at::Tensor local = distribute_local(global, mesh, *layout, plans);
    return DTensor::from_local_with_layout(local, mesh, *layout, plans);
  }
  const int k = *src_data_rank;
  for (int64_t d = 0; d < mesh.ndim(); ++d) {
    HYPER_CHECK_VALUE(k >= 0 && k < mesh.size(d), "distribute_tensor: src_data_rank ", k,
                      " is not a rank of mesh dim ", d, " (size ", mesh.size(d), ") of ",
                      mesh.to_string());
  }
  at::Tensor local = scatter_from(global, mesh, *layout, k);
  if (layout->has_partial()) {
    Layout rep(layout->mesh(), Placements(placements.size(), Replicate()), layout->shape());
    if (plans->get(rep, *layout)->is_zero_fill(idx)) local.zero_();
  }
  local = local.view(layout->local_shape(idx)).detach();
  if (global.requires_grad()) local.requires_grad_(true);
  return DTensor::from_local_with_layout(local, mesh, *layout, plans);
}

}  // namespace hyper
