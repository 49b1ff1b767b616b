#include "hyper/tensor/dtensor.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <optional>
#include <ostream>
#include <sstream>
#include <utility>

#include "hyper/comm/collectives.h"
#include "hyper/comm/world.h"
#include "hyper/core/errors.h"
#include "hyper/core/internal/text.h"
#include "hyper/tensor/internal/redistribute.h"
#include "hyper/tensor/local_exec.h"

namespace hyper {

using internal::ints_to_string;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

namespace tensor_internal {

Layout grad_layout(const Layout& layout) {
  if (!layout.has_partial()) return layout;
  Placements ps = layout.placements();
  for (auto& p : ps)
    if (p.is_partial()) p = Replicate();
  return Layout(layout.mesh(), ps, layout.shape());
}

double grad_scale(const Layout& layout, const char* what) {
  double s = 1.0;
  const auto& ps = layout.placements();
  for (std::size_t m = 0; m < ps.size(); ++m) {
    if (!ps[m].is_partial()) continue;
    const auto& op = ps[m].reduce_op();
    HYPER_CHECK_IMPLEMENTED(op == "sum" || op == "avg", what, ": the gradient through ",
                            ps[m].to_string(), " (mesh dim ", m, " of ", layout.to_string(),
                            ") is not implemented");
    if (op == "avg") s /= static_cast<double>(layout.mesh().size(static_cast<int64_t>(m)));
  }
  return s;
}

int64_t mesh_index_of(const DeviceMesh& mesh) {
  return mesh.topology().index_of(mesh.get_rank());
}

namespace {

/// How one plan's non-local pieces travel: a group and, per mesh index, its rank in that
/// group (-1 where the index is not in this rank's group).
struct Route {
  comm::Group group;
  std::vector<int> group_rank;  ///< per mesh index
  std::string what;
};

Route choose_route(const RedistributePlan& plan, const DeviceMesh& mesh) {
  const MeshTopology& topo = mesh.topology();
  const int64_t n = topo.size();
  const int64_t nd = topo.ndim();
  const auto me = topo.coordinate_of(mesh.get_rank());
  // Mesh dims along which some piece travels.
  std::vector<bool> moves(static_cast<std::size_t>(nd), false);
  for (const auto& p : plan.pieces) {
    if (p.is_local()) continue;
    const auto a = topo.coordinate_at(p.src), b = topo.coordinate_at(p.dst);
    for (int64_t d = 0; d < nd; ++d) moves[d] = moves[d] || a[d] != b[d];
  }
  int64_t count = 0, dim = 0;
  for (int64_t d = 0; d < nd; ++d)
    if (moves[d]) ++count, dim = d;
  Route r;
  r.group_rank.assign(static_cast<std::size_t>(n), -1);
  if (count <= 1) {
    // Every piece stays inside a group along `dim`: one all_to_all_v per such group.
    r.group = mesh.get_group(dim);
    for (int64_t j = 0; j < n; ++j) {
      const auto c = topo.coordinate_at(j);
      bool same = true;
      for (int64_t d = 0; d < nd; ++d) same = same && (d == dim || c[d] == me[d]);
      if (same) r.group_rank[j] = static_cast<int>(c[dim]);
    }
    r.what = "all_to_all_v on mesh dim " + std::to_string(dim);
    return r;
  }
  // Pieces cross several mesh dims: one all_to_all_v over the whole mesh's group.
  r.group = mesh.get_mesh_group();
  const auto& granks = r.group.ranks();
  for (int64_t j = 0; j < n; ++j) {
    const int g = topo.ranks()[j];
    for (std::size_t k = 0; k < granks.size(); ++k)
      if (granks[k] == g) r.group_rank[j] = static_cast<int>(k);
  }
  r.what = "all_to_all_v on the mesh group";
  return r;
}

/// True when `plan` (a pure Partial -> Replicate) can run as all_reduces: the comm layer's
/// all_reduce agrees with the pieces' reduction for this dtype and op (integer avg
/// truncates in the plan; comm refuses it).
bool use_all_reduce(const RedistributePlan& plan, const at::Tensor& local) {
  if (plan.all_reduce_dims.empty()) return false;
  if (plan.reduce_op == "avg" && !at::isFloatingType(local.scalar_type()) &&
      !at::isComplexType(local.scalar_type()))
    return false;
  return true;
}

/// A gather plan: one mesh dim goes from Shard(0) or RaggedShard to Replicate, every other
/// mesh dim is Replicate in both layouts. The local storages along that dim are then
/// consecutive flat ranges of the global tensor in coordinate order, so the target is
/// their all_gather_v (no pack, no unpack: the received buffer is the result). Used above
/// all_gather_v's ring threshold, where it is point-to-point and moves exactly the
/// plan's bytes. Returns the mesh dim, or -1.
int64_t gather_dim(const RedistributePlan& plan, int64_t out_bytes) {
  if (out_bytes <= 64 * 1024 || !plan.zero_fill.empty()) return -1;
  const auto& a = plan.src.placements();
  const auto& b = plan.dst.placements();
  int64_t dim = -1;
  for (std::size_t m = 0; m < a.size(); ++m) {
    if (a[m].is_replicate() && b[m].is_replicate()) continue;
    const bool gathers = b[m].is_replicate() &&
                         ((a[m].is_shard() && a[m].dim() == 0) || a[m].is_ragged_shard());
    if (!gathers || dim >= 0) return -1;
    dim = static_cast<int64_t>(m);
  }
  return dim;
}

}  // namespace


void PendingState::wait() {
  std::lock_guard<std::mutex> lock(mu);
  if (!done) {
    done = true;
    std::function<void()> f = std::move(finish);
    finish = nullptr;
    ++runs;
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
    std::vector<std::function<void()>> callbacks = std::move(on_done);
    on_done.clear();
    for (auto& cb : callbacks) cb();
  }
  if (error) std::rethrow_exception(error);
}

void PendingState::add_on_done(std::function<void()> callback) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!done) {
      on_done.push_back(std::move(callback));
      return;
    }
  }
  callback();
}

namespace {
// Per thread: CPU backward runs on the thread that called backward(), and thread-mode
// tests run one rank per thread.
thread_local int64_t t_backward_in_flight = 0;
}  // namespace

int64_t backward_collectives_in_flight() { return t_backward_in_flight; }
void note_backward_collective(int64_t delta) { t_backward_in_flight += delta; }

bool PendingState::pending() {
  std::lock_guard<std::mutex> lock(mu);
  return !done;
}

int64_t PendingState::run_count() {
  std::lock_guard<std::mutex> lock(mu);
  return runs;
}

namespace {

/// The async form of run_plan: issues the plan's single collective and returns the
/// function that waits for it and produces run_plan's result. Returns an empty function
/// (nothing issued) when the plan is not one collective.
std::function<at::Tensor()> issue_plan(const std::shared_ptr<const RedistributePlan>& planp,
                                       const DeviceMesh& mesh, const at::Tensor& local,
                                       bool alias_input = false) {
  const RedistributePlan& plan = *planp;
  const int64_t idx = mesh_index_of(mesh);
  auto context = [planp](const std::string& what, const std::exception& e) {
    return comm::CommError(internal::str_cat("redistribute ", planp->src.to_string(), " -> ",
                                             planp->dst.to_string(), ": ", what, ": ", e.what()));
  };
  if (use_all_reduce(plan, local)) {
    if (plan.all_reduce_dims.size() != 1) return {};
    const int64_t d = plan.all_reduce_dims[0];
    const std::string what = internal::str_cat("all_reduce on mesh dim ", d);
    comm::Work w;
    try {
      w = comm::all_reduce_async(local, comm::reduce_op_from_string(plan.reduce_op),
                                 mesh.get_group(d));
    } catch (const std::exception& e) {
      throw context(what, e);
    }
    return [w, what, context]() {
      try {
        return w.wait().contiguous();
      } catch (const std::exception& e) {
        throw context(what, e);
      }
    };
  }
  if (plan.total_sent() == 0) return {};
  const int64_t gdim = gather_dim(plan, plan.dst.numel() * local.element_size());
  if (gdim >= 0) {
    const MeshTopology& topo = mesh.topology();
    const comm::Group group = mesh.get_group(gdim);
    auto coord = topo.coordinate_of(mesh.get_rank());
    std::vector<int64_t> sizes(static_cast<std::size_t>(group.size()));
    for (int j = 0; j < group.size(); ++j) {
      coord[gdim] = j;
      sizes[j] = plan.src.local_numel(topo.index_at(coord));
    }
    const std::string what = internal::str_cat("all_gather_v on mesh dim ", gdim);
    comm::Work w;
    try {
      w = comm::all_gather_v_async(local.reshape({-1}), group, sizes);
    } catch (const std::exception& e) {
      throw context(what, e);
    }
    return [w, what, context, planp]() {
      try {
        return w.wait().view(planp->dst.shape());
      } catch (const std::exception& e) {
        throw context(what, e);
      }
    };
  }
  const Route route = choose_route(plan, mesh);
  const int gsize = route.group.size();
  const auto sc = plan.send_counts(idx), rc = plan.recv_counts(idx);
  const int64_t n = plan.src.mesh().size();
  std::vector<int64_t> in_splits(static_cast<std::size_t>(gsize), 0), out_splits(in_splits);
  for (int64_t j = 0; j < n; ++j) {
    if (sc[j] == 0 && rc[j] == 0) continue;
    HYPER_CHECK_VALUE(route.group_rank[j] >= 0, "redistribute: internal routing error: mesh index ",
                      idx, " exchanges data with mesh index ", j, " outside its group");
    in_splits[route.group_rank[j]] = sc[j];
    out_splits[route.group_rank[j]] = rc[j];
  }
  // The all_to_all_v moves, per peer in group-rank order, the pieces between this rank and
  // that peer in plan order (pack and unpack's layout). Where those pieces are consecutive
  // runs of one storage, that storage takes part directly: the local storage is the send
  // buffer (only when the caller finishes at once: an async caller may write to its input
  // before the wait) and the result is the receive buffer. Ragged <-> ragged and row-block
  // changes are like that; others pack and unpack.
  std::vector<int64_t> by_group(static_cast<std::size_t>(gsize), -1);
  for (int64_t j = 0; j < n; ++j)
    if (route.group_rank[j] >= 0) by_group[route.group_rank[j]] = j;
  auto run_of = [&](bool sending, const at::Tensor& flat, const std::vector<FlatBox>& regions)
      -> std::optional<std::pair<int64_t, int64_t>> {
    int64_t begin = -1, next = -1;
    for (int64_t j : by_group) {
      if (j < 0) continue;
      for (const auto& piece : plan.pieces) {
        if (piece.is_local() || piece.numel() == 0) continue;
        if (sending ? (piece.src != idx || piece.dst != j) : (piece.dst != idx || piece.src != j))
          continue;
        const at::Tensor v = region_view(flat, regions, sending ? piece.src_region : piece.dst_region,
                                         piece.box);
        if (!v.is_contiguous()) return std::nullopt;
        const int64_t off = v.storage_offset() - flat.storage_offset();
        if (begin < 0) begin = next = off;
        if (off != next) return std::nullopt;
        next += piece.numel();
      }
    }
    if (begin < 0) begin = next = 0;
    return std::make_pair(begin, next);
  };
  at::Tensor send;
  if (alias_input && local.is_contiguous() && local.numel() == plan.src.local_numel(idx)) {
    const at::Tensor flat = local.view({-1});
    if (auto r = run_of(true, flat, plan.src.local_region(idx)))
      send = flat.narrow(0, r->first, r->second - r->first);
  }
  if (!send.defined()) send = pack(plan, idx, local);
  at::Tensor out;
  std::optional<std::pair<int64_t, int64_t>> recv_run;
  if (!plan.src.has_partial() && !plan.is_zero_fill(idx)) {
    out = at::empty({plan.dst.local_numel(idx)}, local.options());
    recv_run = run_of(false, out, plan.dst.local_region(idx));
  }
  std::optional<at::Tensor> recv_into;
  if (recv_run) recv_into = out.narrow(0, recv_run->first, recv_run->second - recv_run->first);
  comm::Work w;
  try {
    w = comm::all_to_all_v_async(send, in_splits, out_splits, route.group, recv_into);
  } catch (const std::exception& e) {
    throw context(route.what, e);
  }
  std::vector<int> group_rank = route.group_rank;
  const std::string what = route.what;
  if (recv_run) {
    // What stays on this rank is copied while the exchange is in flight (disjoint parts).
    const at::Tensor flat = local.contiguous().view({-1});
    const auto src_regions = plan.src.local_region(idx);
    const auto dst_regions = plan.dst.local_region(idx);
    for (const auto& piece : plan.pieces) {
      if (piece.dst != idx || !piece.is_local() || piece.numel() == 0) continue;
      region_view(out, dst_regions, piece.dst_region, piece.box)
          .copy_(region_view(flat, src_regions, piece.src_region, piece.box));
    }
    return [w, what, context, planp, idx, out]() {
      try {
        w.wait();
      } catch (const std::exception& e) {
        throw context(what, e);
      }
      return out.view(planp->dst.local_shape(idx));
    };
  }
  return [w, what, context, planp, idx, local, rc, out_splits, group_rank, gsize, n]() {
    at::Tensor recv;
    try {
      recv = w.wait();
    } catch (const std::exception& e) {
      throw context(what, e);
    }
    std::vector<int64_t> offset(static_cast<std::size_t>(gsize), 0);
    for (int g = 1; g < gsize; ++g) offset[g] = offset[g - 1] + out_splits[g - 1];
    std::vector<at::Tensor> per_peer(static_cast<std::size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      per_peer[j] = rc[j] == 0 ? at::empty({0}, local.options())
                               : recv.narrow(0, offset[group_rank[j]], rc[j]);
    }
    return unpack_per_peer(*planp, idx, local, per_peer);
  };
}

/// The gradient of an async redistribute's input, in flight between the redistribute's
/// backward (which issues it) and the GradWaitNode before it (which waits).
struct GradPending {
  std::mutex mu;
  std::function<at::Tensor()> finish;
};

/// Autograd node placed between an async redistribute and its input. Its backward waits
/// for the gradient collective the redistribute's backward issued. Sequence number 0: the
/// engine runs ready nodes highest sequence number first, so this one runs only when no
/// other ready node is left, leaving the collective in flight as long as there is
/// independent gradient work to do.
class GradWaitNode : public torch::autograd::Node {
 public:
  explicit GradWaitNode(std::shared_ptr<GradPending> p) : Node(/*sequence_nr=*/0), p_(std::move(p)) {}
  variable_list apply(variable_list&& grads) override {
    std::function<at::Tensor()> f;
    {
      std::lock_guard<std::mutex> lock(p_->mu);
      f = std::move(p_->finish);
      p_->finish = nullptr;
    }
    if (!f) return {grads.at(0)};  // the backward ran synchronously (or got no gradient)
    return {f()};
  }
  std::string name() const override { return "hyper::GradWaitBackward"; }

 private:
  std::shared_ptr<GradPending> p_;
};

/// `x` seen through a GradWaitNode (same storage; no copy).
at::Tensor attach_grad_wait(const at::Tensor& x, const std::shared_ptr<GradPending>& p) {
  auto node = c10::make_intrusive<GradWaitNode>(p);
  node->set_next_edges(torch::autograd::collect_next_edges(x));
  at::Tensor out = x.detach();
  torch::autograd::set_history(out, node);
  return out;
}

struct ExecState : torch::CustomClassHolder {
  DeviceMesh mesh;
  std::shared_ptr<const Layout> src;
  std::shared_ptr<const Layout> dst;
  std::shared_ptr<PlanCache> plans;
  bool async_op = false;
  std::shared_ptr<PendingState> pending;  ///< set by an async forward
  /// Set by an async forward whose input requires grad: where the backward leaves the
  /// function that waits for the gradient's collective (run by a GradWaitNode).
  std::shared_ptr<GradPending> grad_pending;
  std::vector<int64_t> input_shape;  ///< of the forward's input (the gradient's shape)
  ExecState(DeviceMesh m, std::shared_ptr<const Layout> s, std::shared_ptr<const Layout> d,
            std::shared_ptr<PlanCache> p)
      : mesh(std::move(m)), src(std::move(s)), dst(std::move(d)), plans(std::move(p)) {}
};

c10::intrusive_ptr<ExecState> state_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<ExecState>(ctx->saved_data["state"].toCapsule());
}

/// Gradient of a DTensor of layout `from` (its convention) -> gradient of layout `to`.
at::Tensor convert_grad(const at::Tensor& grad, const DeviceMesh& mesh, const Layout& from,
                        const Layout& to, const std::shared_ptr<PlanCache>& plans,
                        const char* what);

/// The differentiable redistribution of a local tensor from state->src to state->dst.
struct RedistributeFn : public torch::autograd::Function<RedistributeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local,
                            c10::intrusive_ptr<ExecState> st) {
    const auto plan = st->plans->get(*st->src, *st->dst);
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    if (st->async_op) {
      std::function<at::Tensor()> fin = issue_plan(plan, st->mesh, local);
      if (fin) {
        const int64_t idx = mesh_index_of(st->mesh);
        const std::vector<int64_t> shape =
            st->dst->is_ragged() ? std::vector<int64_t>{st->dst->local_numel(idx)}
                                 : std::vector<int64_t>(st->dst->local_shape(idx));
        at::Tensor out = at::empty(shape, local.options());
        // Same storage, own version counter: filling it later is invisible to autograd
        // (nothing reads the output before the fill).
        at::Tensor target = out.variable_data();
        auto pending = std::make_shared<PendingState>();
        pending->finish = [fin = std::move(fin), target]() mutable {
          at::NoGradGuard no_grad;
          const at::Tensor r = fin();
          target.copy_(r.reshape(target.sizes()));
        };
        st->pending = std::move(pending);
        return out;
      }
    }
    return run_plan(*plan, st->mesh, local);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    if (st->grad_pending && !torch::autograd::GradMode::is_enabled()) {
      // Issue the gradient's redistribution and hand the GradWaitNode before us a
      // placeholder of the right shape (a broadcast zero: no allocation); it waits.
      const char* what = "redistribute backward";
      const double s_from = grad_scale(*st->dst, what), s_to = grad_scale(*st->src, what);
      if (s_from != 1.0) g = g / s_from;
      auto fin = issue_redistribute(g, st->mesh, grad_layout(*st->dst), grad_layout(*st->src),
                                    st->plans);
      note_backward_collective(+1);
      {
        std::lock_guard<std::mutex> lock(st->grad_pending->mu);
        st->grad_pending->finish = [fin = std::move(fin), s_to]() {
          struct Done {
            ~Done() { note_backward_collective(-1); }
          } done;
          at::Tensor r = fin();
          if (s_to != 1.0) r = r * s_to;
          return r;
        };
      }
      return {at::zeros({}, g.options()).expand(st->input_shape), at::Tensor()};
    }
    return {convert_grad(g, st->mesh, *st->dst, *st->src, st->plans, "redistribute backward"),
            at::Tensor()};
  }
};

at::Tensor apply_redistribute(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst, const std::shared_ptr<PlanCache>& plans) {
  if (src == dst) return local;
  auto st = c10::make_intrusive<ExecState>(mesh, std::make_shared<const Layout>(src),
                                           std::make_shared<const Layout>(dst), plans);
  return RedistributeFn::apply(local, st);
}

at::Tensor convert_grad(const at::Tensor& grad, const DeviceMesh& mesh, const Layout& from,
                        const Layout& to, const std::shared_ptr<PlanCache>& plans,
                        const char* what) {
  const double s_from = grad_scale(from, what), s_to = grad_scale(to, what);
  at::Tensor g = grad;
  if (s_from != 1.0) g = g / s_from;
  g = apply_redistribute(g, mesh, grad_layout(from), grad_layout(to), plans);
  if (s_to != 1.0) g = g * s_to;
  return g;
}

/// to_local(grad_placements): identity forward; the backward converts a gradient declared
/// in `src` (the grad placements) into the convention of `dst` (the DTensor's layout).
struct ToLocalFn : public torch::autograd::Function<ToLocalFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local,
                            c10::intrusive_ptr<ExecState> st) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return local.view_as(local);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    const double s = grad_scale(*st->dst, "to_local backward");
    g = apply_redistribute(g, st->mesh, *st->src, grad_layout(*st->dst), st->plans);
    if (s != 1.0) g = g * s;
    return {g, at::Tensor()};
  }
};

/// distribute_tensor without a source rank: slice forward, gather backward.
struct DistributeFn : public torch::autograd::Function<DistributeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& global,
                            c10::intrusive_ptr<ExecState> st) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    const int64_t idx = mesh_index_of(st->mesh);
    at::Tensor out = slice_local(global, *st->dst, idx);
    if (st->dst->has_partial() && st->plans->get(*st->src, *st->dst)->is_zero_fill(idx))
      out.zero_();
    return out;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = grads[0];
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    return {convert_grad(g, st->mesh, *st->dst, *st->src, st->plans, "distribute_tensor backward")
                .view(st->src->shape()),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor run_plan(const RedistributePlan& plan, const DeviceMesh& mesh, const at::Tensor& local) {
  const int64_t idx = mesh_index_of(mesh);
  if (use_all_reduce(plan, local)) {
    // One all_reduce per reduced mesh dim over that dim's group (a ring moves 2(k-1)/k of
    // the tensor per rank, where the direct pieces move k-1 tensors). avg of avgs over
    // equal-sized groups is the avg over all.
    const comm::ReduceOp op = comm::reduce_op_from_string(plan.reduce_op);
    at::Tensor out = local;
    for (int64_t d : plan.all_reduce_dims) {
      try {
        out = comm::all_reduce(out, op, mesh.get_group(d));
      } catch (const std::exception& e) {
        throw comm::CommError(internal::str_cat("redistribute ", plan.src.to_string(), " -> ",
                                                plan.dst.to_string(), ": all_reduce on mesh dim ",
                                                d, ": ", e.what()));
      }
    }
    return out.contiguous();
  }
  if (plan.total_sent() == 0)
    return unpack(plan, idx, local, at::empty({0}, local.options()));
  // Otherwise the plan is one collective: issue it and finish at once. The plan outlives
  // the call, so a non-owning pointer serves issue_plan.
  return issue_plan(std::shared_ptr<const RedistributePlan>(&plan, [](const RedistributePlan*) {}),
                    mesh, local, /*alias_input=*/true)();
}

at::Tensor redistribute_local(const at::Tensor& local, const DeviceMesh& mesh, const Layout& src,
                              const Layout& dst, const std::shared_ptr<PlanCache>& plans) {
  return apply_redistribute(local, mesh, src, dst, plans);
}

at::Tensor redistribute_local_async(const at::Tensor& local, const DeviceMesh& mesh,
                                    const Layout& src, const Layout& dst,
                                    const std::shared_ptr<PlanCache>& plans,
                                    std::shared_ptr<PendingState>* pending) {
  pending->reset();
  if (src == dst) return local;
  auto st = c10::make_intrusive<ExecState>(mesh, std::make_shared<const Layout>(src),
                                           std::make_shared<const Layout>(dst), plans);
  st->async_op = true;
  at::Tensor in = local;
  if (local.requires_grad() && torch::autograd::GradMode::is_enabled()) {
    st->grad_pending = std::make_shared<GradPending>();
    st->input_shape = local.sizes().vec();
    in = attach_grad_wait(local, st->grad_pending);
  }
  at::Tensor out = RedistributeFn::apply(in, st);
  *pending = std::move(st->pending);
  return out;
}

std::function<at::Tensor()> issue_redistribute(const at::Tensor& local, const DeviceMesh& mesh,
                                               const Layout& src, const Layout& dst,
                                               const std::shared_ptr<PlanCache>& plans) {
  if (src == dst) return [local]() { return local; };
  const auto plan = plans->get(src, dst);
  if (auto fin = issue_plan(plan, mesh, local)) return fin;
  at::Tensor r = run_plan(*plan, mesh, local);
  return [r]() { return r; };
}

at::Tensor to_local_with_grad(const at::Tensor& local, const DeviceMesh& mesh,
                              const Layout& layout, const Layout& grad_layout_in,
                              const std::shared_ptr<PlanCache>& plans) {
  auto st = c10::make_intrusive<ExecState>(mesh, std::make_shared<const Layout>(grad_layout_in),
                                           std::make_shared<const Layout>(layout), plans);
  return ToLocalFn::apply(local, st);
}

at::Tensor distribute_local(const at::Tensor& global, const DeviceMesh& mesh, const Layout& layout,
                            const std::shared_ptr<PlanCache>& plans) {
  Layout rep(layout.mesh(), Placements(layout.placements().size(), Replicate()), layout.shape());
  auto st = c10::make_intrusive<ExecState>(mesh, std::make_shared<const Layout>(std::move(rep)),
                                           std::make_shared<const Layout>(layout), plans);
  return DistributeFn::apply(global, st);
}

}  // namespace tensor_internal

using namespace tensor_internal;

// ---------------------------------------------------------------------------------------
// DTensor

DTensor::DTensor(at::Tensor local, DeviceMesh mesh, std::shared_ptr<const Layout> layout,
                 std::shared_ptr<PlanCache> plans, std::shared_ptr<PendingState> pending)
    : local_(std::move(local)),
      mesh_(std::move(mesh)),
      layout_(std::move(layout)),
      plans_(plans ? std::move(plans) : mesh_.plan_cache()),
      pending_(std::move(pending)) {}

bool DTensor::is_pending() const { return pending_ != nullptr && pending_->pending(); }

const DTensor& DTensor::wait() const {
  if (pending_) pending_->wait();
  return *this;
}

int64_t DTensor::wait_count() const { return pending_ ? pending_->run_count() : 0; }

void DTensor::on_ready(std::function<void()> callback) const {
  if (pending_) {
    pending_->add_on_done(std::move(callback));
  } else {
    callback();
  }
}

void DTensor::check_defined(const char* what) const {
  HYPER_CHECK_VALUE(layout_ != nullptr, "DTensor::", what, " on an undefined DTensor");
}

namespace {

void check_mesh(const DeviceMesh& mesh, const char* what) {
  HYPER_CHECK_VALUE(mesh.defined(), what, ": undefined DeviceMesh");
}

void check_device(const at::Tensor& local, const DeviceMesh& mesh, const char* what) {
  HYPER_CHECK_VALUE(local.defined(), what, ": undefined local tensor");
  HYPER_CHECK_VALUE(local.device().type() == mesh.device_type(), what, ": the tensor is on ",
                    local.device().str(), " but the mesh is ", mesh.to_string());
}

}  // namespace

DTensor DTensor::from_local(const at::Tensor& local, const DeviceMesh& mesh,
                            const Placements& placements,
                            std::optional<std::vector<int64_t>> shape) {
  check_mesh(mesh, "DTensor::from_local");
  check_device(local, mesh, "DTensor::from_local");
  const MeshTopology& topo = mesh.topology();
  HYPER_CHECK_VALUE(static_cast<int64_t>(placements.size()) == topo.ndim(),
                    "DTensor::from_local: ", placements.size(), " placements ",
                    hyper::to_string(placements), " for the ", topo.ndim(), "-D mesh ", topo.to_string());
  bool ragged = false;
  for (const auto& p : placements) ragged = ragged || p.is_ragged_shard();
  const int64_t idx = mesh_index_of(mesh);
  if (ragged) {
    HYPER_CHECK_VALUE(shape.has_value(), "DTensor::from_local with ", hyper::to_string(placements),
                      " requires the global shape (pass shape=...): a ragged local tensor is "
                      "1-D and does not determine the global shape");
    check_shape(*shape, "global shape");
    Layout layout(topo, placements, *shape);
    const auto& info = *layout.ragged();
    const int64_t pos = topo.coordinate_at(idx)[info.mesh_dim];
    const Interval iv = layout.ragged_interval(idx);
    HYPER_CHECK_VALUE(local.dim() == 1, "DTensor::from_local: a RaggedShard local tensor must be "
                      "1-D (contiguous flat storage), got shape ",
                      ints_to_string(local.sizes().vec()));
    HYPER_CHECK_VALUE(local.is_contiguous(), "DTensor::from_local: a RaggedShard local tensor "
                      "must be contiguous (strides ", ints_to_string(local.strides().vec()), ")");
    HYPER_CHECK_VALUE(local.numel() == iv.size(), "local numel ", local.numel(),
                      " does not match rank ", pos, "'s RaggedShard interval ", iv.to_string(),
                      " (expected ", iv.size(), ")");
    return DTensor(local.view({-1}), mesh, std::make_shared<const Layout>(std::move(layout)),
                   nullptr);
  }
  std::vector<int64_t> global;
  if (shape) {
    global = *shape;
  } else {
    global = local.sizes().vec();
    for (int64_t m = 0; m < topo.ndim(); ++m) {
      const auto& p = placements[m];
      if (!p.is_shard()) continue;
      int64_t d = p.dim();
      if (d < 0) d += local.dim();
      HYPER_CHECK_VALUE(d >= 0 && d < local.dim(), "DTensor::from_local: ", p.to_string(),
                        " is out of range for a local tensor of shape ",
                        ints_to_string(local.sizes().vec()));
      global[d] *= topo.size(m);
    }
  }
  check_shape(global, "global shape");
  Layout layout(topo, placements, global);
  const auto expected = layout.local_shape(idx);
  HYPER_CHECK_VALUE(local.sizes().vec() == expected, "DTensor::from_local: local shape ",
                    ints_to_string(local.sizes().vec()), " does not match mesh index ", idx,
                    "'s box ", ints_to_string(expected), " of ", layout.to_string(),
                    shape ? "" : " (the global shape was inferred assuming even shards; pass "
                                 "shape= for uneven shards)");
  return DTensor(local, mesh, std::make_shared<const Layout>(std::move(layout)), nullptr);
}

DTensor DTensor::from_local_with_layout(const at::Tensor& local, const DeviceMesh& mesh,
                                        const Layout& layout, std::shared_ptr<PlanCache> plans) {
  check_mesh(mesh, "DTensor::from_local_with_layout");
  check_device(local, mesh, "DTensor::from_local_with_layout");
  HYPER_CHECK_VALUE(layout.mesh().shape() == mesh.topology().shape(),
                    "DTensor::from_local_with_layout: layout ", layout.to_string(),
                    " is not on mesh ", mesh.to_string());
  const int64_t idx = mesh_index_of(mesh);
  HYPER_CHECK_VALUE(local.numel() == layout.local_numel(idx), "DTensor::from_local_with_layout: "
                    "local numel ", local.numel(), " does not match mesh index ", idx, "'s ",
                    layout.local_numel(idx), " elements under ", layout.to_string());
  at::Tensor l = local;
  if (layout.is_ragged()) {
    HYPER_CHECK_VALUE(local.is_contiguous(), "DTensor::from_local_with_layout: a ragged local "
                      "tensor must be contiguous");
    l = local.view({-1});
  } else {
    HYPER_CHECK_VALUE(local.sizes().vec() == layout.local_shape(idx),
                      "DTensor::from_local_with_layout: local shape ",
                      ints_to_string(local.sizes().vec()), " is not mesh index ", idx, "'s box ",
                      ints_to_string(layout.local_shape(idx)), " of ", layout.to_string());
  }
  return DTensor(l, mesh, std::make_shared<const Layout>(layout), std::move(plans));
}

at::Tensor DTensor::to_local(std::optional<Placements> grad_placements) const {
  check_defined("to_local");
  wait();
  if (!grad_placements) return local_;
  Layout g(layout_->mesh(), *grad_placements, layout_->shape());
  const int64_t idx = mesh_index();
  HYPER_CHECK_VALUE(g.local_shape(idx) == layout_->local_shape(idx), "DTensor::to_local: grad "
                    "placements ", hyper::to_string(*grad_placements), " give mesh index ", idx,
                    " a local shape ", ints_to_string(g.local_shape(idx)),
                    " that differs from the DTensor's ", ints_to_string(layout_->local_shape(idx)));
  if (!local_.requires_grad()) return local_;
  if (g == grad_layout(*layout_) && grad_scale(*layout_, "to_local") == 1.0) return local_;
  return to_local_with_grad(local_, mesh_, *layout_, g, plans_);
}

at::Tensor DTensor::full_tensor(std::optional<Placements> grad_placements) const {
  check_defined("full_tensor");
  const DTensor rep = redistribute(mesh_, Placements(layout_->placements().size(), Replicate()));
  return rep.to_local(std::move(grad_placements));
}

DTensor DTensor::redistribute(const DeviceMesh& mesh, const Placements& placements,
                              bool async_op) const {
  check_defined("redistribute");
  check_mesh(mesh, "DTensor::redistribute");
  HYPER_CHECK_IMPLEMENTED(mesh == mesh_, "DTensor::redistribute to another mesh (",
                          mesh.to_string(), " from ", mesh_.to_string(), ") is not implemented");
  auto dst = std::make_shared<const Layout>(layout_->mesh(), placements, layout_->shape());
  if (*dst == *layout_) return *this;
  wait();
  if (async_op) {
    std::shared_ptr<PendingState> pending;
    at::Tensor out = redistribute_local_async(local_, mesh_, *layout_, *dst, plans_, &pending);
    return DTensor(std::move(out), mesh_, std::move(dst), plans_, std::move(pending));
  }
  at::Tensor out = redistribute_local(local_, mesh_, *layout_, *dst, plans_);
  return DTensor(std::move(out), mesh_, std::move(dst), plans_);
}

const std::vector<int64_t>& DTensor::shape() const {
  check_defined("shape");
  return layout_->shape();
}
std::vector<int64_t> DTensor::local_shape() const {
  check_defined("local_shape");
  return local_.sizes().vec();
}
int64_t DTensor::numel() const {
  check_defined("numel");
  return layout_->numel();
}
const Placements& DTensor::placements() const {
  check_defined("placements");
  return layout_->placements();
}
const DeviceMesh& DTensor::device_mesh() const {
  check_defined("device_mesh");
  return mesh_;
}
const Layout& DTensor::layout() const {
  check_defined("layout");
  return *layout_;
}
int64_t DTensor::mesh_index() const {
  check_defined("mesh_index");
  return mesh_index_of(mesh_);
}
at::ScalarType DTensor::scalar_type() const {
  check_defined("scalar_type");
  return local_.scalar_type();
}
at::TensorOptions DTensor::options() const {
  check_defined("options");
  return local_.options();
}
bool DTensor::requires_grad() const {
  check_defined("requires_grad");
  return local_.requires_grad();
}
DTensor& DTensor::requires_grad_(bool requires_grad) {
  check_defined("requires_grad_");
  local_.requires_grad_(requires_grad);
  return *this;
}
at::Tensor DTensor::grad() const {
  check_defined("grad");
  return local_.grad();
}
DTensor DTensor::detach() const {
  check_defined("detach");
  return DTensor(local_.detach(), mesh_, layout_, plans_, pending_);
}

std::string DTensor::to_string() const {
  if (!layout_) return "DTensor(undefined)";
  std::ostringstream os;
  os << "DTensor(local_shape=" << ints_to_string(local_.sizes().vec()) << ", "
     << layout_->to_string() << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const DTensor& dt) { return os << dt.to_string(); }

// ---------------------------------------------------------------------------------------
// distribute_tensor

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
  for (int64_t d = 0; d < topo.ndim(); ++d) {
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
    // RaggedShard (every other mesh dim is Replicate).
    std::vector<int64_t> splits;
    for (const auto& iv : ragged_intervals(layout.shape(), p)) splits.push_back(iv.size());
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
