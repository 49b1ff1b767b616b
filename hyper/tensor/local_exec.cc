#include "hyper/tensor/local_exec.h"

#include <ATen/ATen.h>

#include <string>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper {

namespace {

/// 1-D contiguous view of a storage, after checking its numel.
at::Tensor flat_storage(const at::Tensor& local, int64_t expected, const Layout& layout,
                        int64_t index, const char* what) {
  HYPER_CHECK_VALUE(local.defined(), what, ": undefined local tensor on mesh index ", index);
  HYPER_CHECK_VALUE(local.numel() == expected, what, ": local tensor of mesh index ", index,
                    " has ", local.numel(), " elements but ", layout.to_string(), " gives it ",
                    expected);
  return local.contiguous().view({-1});
}

at::Tensor narrow_to(at::Tensor v, const Box& rel) {
  for (int64_t d = 0; d < rel.rank(); ++d) {
    if (rel.offsets[d] != 0 || rel.sizes[d] != v.size(d)) v = v.narrow(d, rel.offsets[d], rel.sizes[d]);
  }
  return v;
}

void combine_into(at::Tensor& slot, const at::Tensor& data, const std::string& op) {
  if (op == "max") {
    slot.copy_(at::maximum(slot, data));
  } else if (op == "min") {
    slot.copy_(at::minimum(slot, data));
  } else {  // sum, avg (divided at the end)
    if (slot.scalar_type() == at::kBool)
      slot.logical_or_(data);
    else
      slot.add_(data);
  }
}

}  // namespace

at::Tensor slice_local(const at::Tensor& global, const Layout& layout, int64_t index) {
  HYPER_CHECK_VALUE(global.defined(), "slice_local: undefined global tensor");
  HYPER_CHECK_VALUE(global.sizes().vec() == layout.shape(), "slice_local: global tensor of shape ",
                    shape_to_string(global.sizes().vec()), " does not match ",
                    layout.to_string());
  if (layout.is_ragged()) {
    const Interval iv = layout.ragged_interval(index);
    return narrow_to(global, layout.ragged_box(index))
        .reshape({-1})
        .narrow(0, iv.start, iv.size())
        .clone(at::MemoryFormat::Contiguous);
  }
  const Box box = layout.local_box(index);
  return narrow_to(global, box).clone(at::MemoryFormat::Contiguous);
}

at::Tensor region_view(const at::Tensor& local, const std::vector<FlatBox>& regions,
                       int64_t region, const Box& box) {
  HYPER_CHECK_VALUE(region >= 0 && region < static_cast<int64_t>(regions.size()),
                    "region index ", region, " out of range (", regions.size(), " regions)");
  const FlatBox& fb = regions[region];
  HYPER_CHECK_VALUE(fb.box.contains(box), "box ", box.to_string(), " is not inside region ",
                    fb.to_string());
  at::Tensor v = local.view({-1}).narrow(0, fb.local_start, fb.box.numel()).view(fb.box.sizes);
  return narrow_to(v, relative_to(box, fb.box));
}

at::Tensor pack(const RedistributePlan& plan, int64_t index, const at::Tensor& local) {
  const int64_t n = plan.src.mesh().size();
  const at::Tensor flat =
      flat_storage(local, plan.src.local_numel(index), plan.src, index, "redistribute pack");
  const auto counts = plan.send_counts(index);
  std::vector<int64_t> cursor(static_cast<std::size_t>(n), 0);
  int64_t total = 0;
  for (int64_t p = 0; p < n; ++p) {
    cursor[p] = total;
    total += counts[p];
  }
  at::Tensor buffer = at::empty({total}, flat.options());
  if (total == 0) return buffer;
  const auto regions = plan.src.local_region(index);
  for (const auto& piece : plan.pieces) {
    if (piece.src != index || piece.is_local()) continue;
    const int64_t k = piece.numel();
    if (k == 0) continue;
    buffer.narrow(0, cursor[piece.dst], k)
        .view(piece.box.sizes)
        .copy_(region_view(flat, regions, piece.src_region, piece.box));
    cursor[piece.dst] += k;
  }
  return buffer;
}

std::vector<at::Tensor> pack_per_peer(const RedistributePlan& plan, int64_t index,
                                      const at::Tensor& local) {
  const at::Tensor buffer = pack(plan, index, local);
  const auto counts = plan.send_counts(index);
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (int64_t c : counts) {
    out.push_back(buffer.narrow(0, at, c));
    at += c;
  }
  return out;
}

at::Tensor unpack_per_peer(const RedistributePlan& plan, int64_t index, const at::Tensor& local,
                           const std::vector<at::Tensor>& received) {
  const int64_t n = plan.src.mesh().size();
  HYPER_CHECK_VALUE(static_cast<int64_t>(received.size()) == n, "redistribute unpack: got ",
                    received.size(), " received buffers for a mesh of ", n, " ranks");
  const at::Tensor flat =
      flat_storage(local, plan.src.local_numel(index), plan.src, index, "redistribute unpack");
  const auto counts = plan.recv_counts(index);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t got = received[p].defined() ? received[p].numel() : 0;
    HYPER_CHECK_VALUE(got == counts[p], "redistribute unpack: mesh index ", index, " received ",
                      got, " elements from mesh index ", p, " but the plan sends ", counts[p]);
  }
  const int64_t out_numel = plan.dst.local_numel(index);
  const bool zero = plan.is_zero_fill(index);
  at::Tensor out = zero ? at::zeros({out_numel}, flat.options()) : at::empty({out_numel}, flat.options());
  if (!zero) {
    const auto src_regions = plan.src.local_region(index);
    const auto dst_regions = plan.dst.local_region(index);
    std::vector<int64_t> cursor(static_cast<std::size_t>(n), 0);
    for (const auto& piece : plan.pieces) {
      if (piece.dst != index) continue;
      const int64_t k = piece.numel();
      if (k == 0) continue;
      at::Tensor data;
      if (piece.is_local()) {
        data = region_view(flat, src_regions, piece.src_region, piece.box);
      } else {
        data = received[piece.src].contiguous().view({-1}).narrow(0, cursor[piece.src], k).view(
            piece.box.sizes);
        cursor[piece.src] += k;
      }
      at::Tensor slot = region_view(out, dst_regions, piece.dst_region, piece.box);
      if (piece.reduce)
        combine_into(slot, data, plan.reduce_op);
      else
        slot.copy_(data);
    }
    if (plan.reduce_op == "avg" && plan.reduce_count > 1) {
      HYPER_CHECK_VALUE(out.scalar_type() != at::kBool,
                        "redistribute: Partial(avg) of a bool tensor cannot be averaged");
      if (at::isFloatingType(out.scalar_type()) || at::isComplexType(out.scalar_type()))
        out.div_(static_cast<double>(plan.reduce_count));
      else
        out = at::div(out, plan.reduce_count, "trunc");
    }
  }
  return out.view(plan.dst.local_shape(index));
}

at::Tensor unpack(const RedistributePlan& plan, int64_t index, const at::Tensor& local,
                  const at::Tensor& received) {
  const auto counts = plan.recv_counts(index);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  const int64_t got = received.defined() ? received.numel() : 0;
  HYPER_CHECK_VALUE(got == total, "redistribute unpack: mesh index ", index, " received ", got,
                    " elements but the plan sends it ", total);
  std::vector<at::Tensor> per_peer;
  const at::Tensor flat = total == 0 ? at::empty({0}, local.options()) : received.contiguous().view({-1});
  int64_t at = 0;
  for (int64_t c : counts) {
    per_peer.push_back(flat.narrow(0, at, c));
    at += c;
  }
  return unpack_per_peer(plan, index, local, per_peer);
}

std::vector<at::Tensor> execute_plan_locally(const RedistributePlan& plan,
                                             const std::vector<at::Tensor>& locals) {
  const int64_t n = plan.src.mesh().size();
  HYPER_CHECK_VALUE(static_cast<int64_t>(locals.size()) == n, "execute_plan_locally got ",
                    locals.size(), " local tensors for a mesh of ", n, " ranks");
  std::vector<std::vector<at::Tensor>> sent(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < n; ++r) sent[r] = pack_per_peer(plan, r, locals[r]);
  std::vector<at::Tensor> out;
  for (int64_t r = 0; r < n; ++r) {
    std::vector<at::Tensor> received;
    for (int64_t p = 0; p < n; ++p) received.push_back(sent[p][r]);
    out.push_back(unpack_per_peer(plan, r, locals[r], received));
  }
  return out;
}

}  // namespace hyper
