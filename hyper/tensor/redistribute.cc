// The executor of redistribution steps: a loop over the core's plan_steps, one function per
// step kind. The decisions (which collective, which group, zero-copy runs) are the core's.
#include "hyper/tensor/redistribute.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "hyper/comm/collectives.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/internal/execute.h"
#include "hyper/tensor/local_exec.h"

namespace hyper {

int64_t mesh_index_of(const DeviceMesh& mesh) { return mesh.topology().index_of(mesh.get_rank()); }

ElementType element_type_of(const at::Tensor& t) {
  return ElementType{static_cast<int64_t>(t.element_size()),
                     at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())};
}

namespace tensor_internal {
namespace {

using Plan = std::shared_ptr<const RedistributePlan>;

/// `all_to_all_v on mesh dim 1`, `all_gather_v on the mesh group`.
std::string label(const PlanStep& s) {
  return std::string(to_string(s.kind)) +
         (s.mesh_dim >= 0 ? " on mesh dim " + std::to_string(s.mesh_dim) : " on the mesh group");
}

comm::Group group_of(const PlanStep& s, const DeviceMesh& mesh) {
  comm::Group g = s.mesh_dim >= 0 ? mesh.get_group(s.mesh_dim) : mesh.get_mesh_group();
  HYPER_CHECK_INTERNAL(g.size() == static_cast<int>(s.group.size()), "the step's group has ",
                       s.group.size(), " members but the mesh's group has ", g.size());
  return g;
}

/// `s` with its members in `group`'s order (the whole mesh's group may order them by global
/// rank): counts permuted; the zero-copy runs, which assume the step's order, dropped.
PlanStep in_group_order(const PlanStep& s, const comm::Group& group, const DeviceMesh& mesh) {
  std::vector<int64_t> order;
  for (int r : group.ranks()) order.push_back(mesh.topology().index_of(r));
  if (order == s.group) return s;
  PlanStep t = s;
  t.group = order;
  t.send_counts.clear();
  t.recv_counts.clear();
  for (int64_t j : order) {
    const auto at = std::find(s.group.begin(), s.group.end(), j) - s.group.begin();
    t.send_counts.push_back(s.send_counts[at]);
    t.recv_counts.push_back(s.recv_counts[at]);
  }
  t.send_run.reset();
  t.recv_run.reset();
  return t;
}

/// The error context of one step: `redistribute <src> -> <dst>: <label>`, formatted only
/// when an error needs it (redistribute is on the training step's hot path).
struct StepContext {
  Plan plan;
  std::string step;  ///< label(s)
  std::string text() const {
    return "redistribute " + plan->src.to_string() + " -> " + plan->dst.to_string() + ": " + step;
  }
};

/// A Work that waits for `w` (adding the step's context to its error), then returns
/// fn(result).
comm::Work finish_after(comm::Work w, const StepContext& context,
                        std::function<at::Tensor(const at::Tensor&)> fn) {
  return comm::Work::deferred(
      context.step,
      [w, context, fn = std::move(fn)]() {
        at::Tensor r;
        try {
          r = w.wait();
        } catch (...) {
          comm::rethrow_with_context(context.text());
        }
        return fn(r);
      },
      [w]() { return w.is_completed(); });
}

/// `into` flattened, when it can hold a step's result of `numel` elements of `in`'s dtype and
/// device (run_steps' `into`: contiguous, not sharing `in`'s storage); nullopt otherwise.
std::optional<at::Tensor> usable_into(const at::Tensor& into, int64_t numel, const at::Tensor& in) {
  if (!into.defined() || !into.is_contiguous() || into.numel() != numel ||
      into.scalar_type() != in.scalar_type() || into.device() != in.device() ||
      (numel > 0 && in.numel() > 0 && into.is_alias_of(in)))
    return std::nullopt;
  return into.view({-1});
}

/// The send buffer of an all_to_all_v in group order: the input's run where the step has
/// one (and the caller finishes before it can write to the input), else packed.
at::Tensor send_buffer(const PlanStep& s, const RedistributePlan& plan, int64_t idx,
                       const at::Tensor& in, bool alias_input) {
  if (alias_input && s.send_run && in.is_contiguous() && in.numel() == plan.src.local_numel(idx))
    return in.view({-1}).narrow(0, s.send_run->begin, s.send_run->size());
  if (std::is_sorted(s.group.begin(), s.group.end())) return pack(plan, idx, in);
  // pack() orders peers by mesh index; the group (the mesh's, by global rank) differs.
  const auto per_peer = pack_per_peer(plan, idx, in);
  std::vector<at::Tensor> parts;
  for (int64_t j : s.group) parts.push_back(per_peer[j]);
  return at::cat(parts);
}

comm::Work issue_all_to_all(const PlanStep& step, const Plan& planp, int64_t idx,
                            const DeviceMesh& mesh, const at::Tensor& in, bool alias_input,
                            const StepContext& context, const at::Tensor& into) {
  const RedistributePlan& plan = *planp;
  const comm::Group group = group_of(step, mesh);
  const PlanStep s = in_group_order(step, group, mesh);
  const at::Tensor send = send_buffer(s, plan, idx, in, alias_input);
  if (s.recv_run) {
    // Received pieces land in their place; what stays here is copied while in flight.
    const int64_t numel = plan.dst.local_numel(idx);
    const auto given = usable_into(into, numel, in);
    at::Tensor out = given ? *given : at::empty({numel}, in.options());
    const at::Tensor recv_into = out.narrow(0, s.recv_run->begin, s.recv_run->size());
    comm::Work w = comm::all_to_all_v_async(send, s.send_counts, s.recv_counts, group, recv_into);
    const at::Tensor flat = in.contiguous().view({-1});
    const auto src_regions = plan.src.local_region(idx);
    const auto dst_regions = plan.dst.local_region(idx);
    for (const auto& piece : plan.pieces) {
      if (piece.dst != idx || !piece.is_local() || piece.numel() == 0) continue;
      region_view(out, dst_regions, piece.dst_region, piece.box)
          .copy_(region_view(flat, src_regions, piece.src_region, piece.box));
    }
    return finish_after(w, context, [planp, idx, out](const at::Tensor&) {
      return out.view(planp->dst.local_shape(idx));
    });
  }
  comm::Work w = comm::all_to_all_v_async(send, s.send_counts, s.recv_counts, group);
  return finish_after(w, context, [planp, idx, in, s](const at::Tensor& recv) {
    const int64_t n = planp->src.mesh().size();
    std::vector<at::Tensor> per_peer(static_cast<std::size_t>(n));
    for (auto& t : per_peer) t = at::empty({0}, in.options());
    int64_t offset = 0;
    for (std::size_t g = 0; g < s.group.size(); ++g) {
      if (s.recv_counts[g] > 0) per_peer[s.group[g]] = recv.narrow(0, offset, s.recv_counts[g]);
      offset += s.recv_counts[g];
    }
    return unpack_per_peer(*planp, idx, in, per_peer);
  });
}

/// Issues one step on `in`; the Work's wait() returns the step's output.
comm::Work issue_step(const PlanStep& s, const Plan& planp, int64_t idx, const DeviceMesh& mesh,
                      const at::Tensor& in, bool alias_input, const StepContext& context,
                      const at::Tensor& into) {
  const RedistributePlan& plan = *planp;
  switch (s.kind) {
    case StepKind::kLocalCopy:
      return comm::Work::completed(unpack(plan, idx, in, at::empty({0}, in.options())),
                                   context.step);
    case StepKind::kAllReduce: {
      const auto given = usable_into(into, in.numel(), in);
      comm::Work w = comm::all_reduce_async(
          in, comm::reduce_op_from_string(s.reduce_op), group_of(s, mesh),
          given ? std::optional<at::Tensor>(given->view(in.sizes())) : std::nullopt);
      return finish_after(w, context, [](const at::Tensor& r) { return r.contiguous(); });
    }
    case StepKind::kAllGatherV: {
      // The members' storages are consecutive ranges of the global tensor: the gathered
      // buffer is the result (no pack, no unpack).
      const at::Tensor flat = in.reshape({-1});
      int64_t total = 0;
      for (int64_t c : s.send_counts) total += c;
      comm::Work w = comm::all_gather_v_async(flat, group_of(s, mesh), s.send_counts,
                                              usable_into(into, total, flat));
      return finish_after(w, context,
                          [planp](const at::Tensor& r) { return r.view(planp->dst.shape()); });
    }
    case StepKind::kAllToAllV:
      return issue_all_to_all(s, planp, idx, mesh, in, alias_input, context, into);
  }
  throw InternalError("redistribute: unknown step kind");
}

}  // namespace

comm::Work run_steps(const Plan& planp, const std::vector<PlanStep>& steps,
                     const DeviceMesh& mesh, const at::Tensor& local, bool async,
                     const at::Tensor& into) {
  const int64_t idx = mesh_index_of(mesh);
  // One collective stays in flight for an async caller; longer programs run here.
  const bool leave_in_flight = async && steps.size() == 1;
  at::Tensor x = local;
  for (const PlanStep& s : steps) {
    const StepContext context{planp, label(s)};
    comm::Work w;
    try {
      w = issue_step(s, planp, idx, mesh, x, /*alias_input=*/!async, context,
                     leave_in_flight ? into : at::Tensor());
    } catch (...) {
      comm::rethrow_with_context(context.text());
    }
    if (leave_in_flight) return w;
    x = w.wait();
  }
  return comm::Work::completed(x, "redistribute");
}

namespace {
/// When `src` -> `dst` reduces Partial mesh dims of different linear ops (sum and avg; e.g.
/// [P(avg), P(sum)] -> R, which the core's plan refuses: one plan reduces one op), the layout
/// after reducing those of the first such op to Replicate; nullopt otherwise. The value does
/// not depend on the order of linear reductions, so src -> this -> dst is exact. A mix with
/// max or min is left to the plan, which refuses it (its value depends on the order).
std::optional<Layout> first_reduction_stage(const Layout& src, const Layout& dst) {
  const Placements& ps = src.placements();
  const Placements& pt = dst.placements();
  std::string first;
  bool mixed = false;
  for (size_t m = 0; m < ps.size(); ++m) {
    if (!ps[m].is_partial() || pt[m].is_partial()) continue;
    const std::string& op = ps[m].reduce_op();
    if (op != "sum" && op != "avg") return std::nullopt;
    if (first.empty()) first = op;
    mixed = mixed || op != first;
  }
  if (!mixed) return std::nullopt;
  Placements mid = ps;
  for (size_t m = 0; m < ps.size(); ++m)
    if (ps[m].is_partial() && !pt[m].is_partial() && ps[m].reduce_op() == first) mid[m] = Replicate();
  return Layout(src.mesh(), mid, src.shape());
}
}  // namespace

comm::Work issue_redistribute(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst, PlanCache& plans, bool async,
                              const at::Tensor& into) {
  if (src == dst) return comm::Work::completed(local);
  if (const auto mid = first_reduction_stage(src, dst)) {
    // Two plans; the first runs to completion (the second reads its result).
    const at::Tensor reduced = issue_redistribute(local, mesh, src, *mid, plans, false).wait();
    return issue_redistribute(reduced, mesh, *mid, dst, plans, async, into);
  }
  const auto plan = plans.get(src, dst);
  const auto steps = plans.steps(src, dst, mesh_index_of(mesh), element_type_of(local));
  return run_steps(plan, *steps, mesh, local, async, into);
}

namespace {
// Per thread: CPU backward runs on the thread that called backward(), and thread-mode
// tests run one rank per thread.
thread_local int64_t t_backward_in_flight = 0;
}  // namespace

}  // namespace tensor_internal

at::Tensor redistribute_local(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst) {
  return tensor_internal::issue_redistribute(local, mesh, src, dst, *mesh.plan_cache(),
                                             /*async=*/false)
      .wait();
}

comm::Work redistribute_local_async(const at::Tensor& local, const DeviceMesh& mesh,
                                    const Layout& src, const Layout& dst) {
  return tensor_internal::issue_redistribute(local, mesh, src, dst, *mesh.plan_cache(),
                                             /*async=*/true);
}

int64_t backward_collectives_in_flight() { return tensor_internal::t_backward_in_flight; }

comm::Work track_backward_collective(comm::Work work) {
  ++tensor_internal::t_backward_in_flight;
  work.add_callback([](const comm::Work&) { --tensor_internal::t_backward_in_flight; });
  return work;
}

}  // namespace hyper
