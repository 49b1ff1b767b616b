// The tensor layer's autograd functions around redistribution: RedistributeFn (sync and
// async forward, overlapping backward), the GradWaitNode that waits for an async backward's
// collective, ToLocalFn (to_local with grad placements), DistributeFn (distribute_tensor) and
// the two bridges between a DTensor handle and its at::Tensor form (FromHandleFn, ToHandleFn).
#include "hyper/tensor/internal/autograd.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <mutex>
#include <optional>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/boundary_function.h"
#include "hyper/tensor/internal/dtensor_access.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/internal/execute.h"
#include "hyper/tensor/local_exec.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::tensor_internal {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Layout grad_layout(const Layout& layout) { return dispatch::partials_replicated(layout); }

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


namespace {

/// A gradient reaching a plain (local) tensor as it arrives: a plain tensor, or a DTensor tensor
/// when the plain tensor was an operand of an op on DTensor tensors (a plain operand is
/// Replicate there, so its gradient is that DTensor's full value: a collective for a Partial or
/// Shard one, as the op's own backward would be on every rank).
at::Tensor plain_grad(const at::Tensor& g) {
  return g.defined() && is_dtensor(g) ? as_dtensor(g).full_tensor() : g;
}

/// The gradient of an async redistribute's input, in flight between the redistribute's
/// backward (which issues it) and the GradWaitNode before it (which waits).
struct GradPending {
  std::mutex mu;
  std::optional<comm::Work> work;
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
    std::optional<comm::Work> w;
    {
      std::lock_guard<std::mutex> lock(p_->mu);
      w = std::move(p_->work);
      p_->work.reset();
    }
    if (!w) return {grads.at(0)};  // the backward ran synchronously (or got no gradient)
    return {w->wait()};
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
  std::optional<comm::Work> pending;  ///< set by an async forward left in flight
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
struct RedistributeFn : public ::hyper::dispatch::BoundaryFunction<RedistributeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local,
                            c10::intrusive_ptr<ExecState> st) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    if (!st->async_op)
      return issue_redistribute(local, st->mesh, *st->src, *st->dst, *st->plans, false).wait();
    // Async: the output is allocated first and handed out at once; a collective left in flight
    // writes straight into it when its output is the result (an all-gather, an all-reduce, an
    // all-to-all whose pieces land in place: internal/execute.h), so the wait copies nothing;
    // else the Work's wait() copies its result in. Same storage, own version counter: filling
    // it later is invisible to autograd (nothing reads the output before the fill).
    const int64_t idx = mesh_index_of(st->mesh);
    const std::vector<int64_t> shape = st->dst->is_ragged()
                                           ? std::vector<int64_t>{st->dst->local_numel(idx)}
                                           : std::vector<int64_t>(st->dst->local_shape(idx));
    at::Tensor out = at::empty(shape, local.options());
    at::Tensor target = out.variable_data();
    comm::Work w =
        issue_redistribute(local, st->mesh, *st->src, *st->dst, *st->plans, true, target);
    if (w.is_finished()) return w.wait();
    st->pending = w.then(w.description(), [target](const at::Tensor& r) mutable {
      if (r.numel() > 0 && r.data_ptr() == target.data_ptr()) return target;  // received in place
      at::NoGradGuard no_grad;
      target.copy_(r.reshape(target.sizes()));
      return target;
    });
    return out;
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = plain_grad(grads[0]);
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    if (st->grad_pending && !torch::autograd::GradMode::is_enabled()) {
      // Issue the gradient's redistribution and hand the GradWaitNode before us a
      // placeholder of the right shape (a broadcast zero: no allocation); it waits.
      const char* what = "redistribute backward";
      const double s_from = grad_scale(*st->dst, what), s_to = grad_scale(*st->src, what);
      if (s_from != 1.0) g = g / s_from;
      comm::Work w = track_backward_collective(issue_redistribute(
          g, st->mesh, grad_layout(*st->dst), grad_layout(*st->src), *st->plans, /*async=*/true));
      {
        std::lock_guard<std::mutex> lock(st->grad_pending->mu);
        st->grad_pending->work =
            s_to == 1.0 ? w : w.then(w.description(), [s_to](const at::Tensor& r) { return r * s_to; });
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
struct ToLocalFn : public ::hyper::dispatch::BoundaryFunction<ToLocalFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local,
                            c10::intrusive_ptr<ExecState> st) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return local.view_as(local);
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = plain_grad(grads[0]);
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    const double s = grad_scale(*st->dst, "to_local backward");
    g = apply_redistribute(g, st->mesh, *st->src, grad_layout(*st->dst), st->plans);
    if (s != 1.0) g = g * s;
    return {g, at::Tensor()};
  }
};

/// distribute_tensor without a source rank: slice forward, gather backward.
struct DistributeFn : public ::hyper::dispatch::BoundaryFunction<DistributeFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& global,
                            c10::intrusive_ptr<ExecState> st) {
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    const int64_t idx = mesh_index_of(st->mesh);
    at::Tensor out = slice_local(global, *st->dst, idx);
    if (st->dst->has_partial() && st->plans->get(*st->src, *st->dst)->is_zero_fill(idx))
      out.zero_();
    return out;
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    auto st = state_of(ctx);
    at::Tensor g = plain_grad(grads[0]);
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    return {convert_grad(g, st->mesh, *st->dst, *st->src, st->plans, "distribute_tensor backward")
                .view(st->src->shape()),
            at::Tensor()};
  }
};

/// The DTensor a bridge crosses from or to. Its value (`dt`, whose local is an activation)
/// serves the forward only and is dropped when the forward is done; the backward reads the
/// layout, mesh and plans, so the bridge keeps no activation alive until the graph dies.
struct BridgeState : torch::CustomClassHolder {
  DTensor dt;
  std::shared_ptr<const Layout> layout;
  DeviceMesh mesh;
  std::shared_ptr<PlanCache> plans;
  explicit BridgeState(DTensor d)
      : dt(std::move(d)),
        layout(DTensorAccess::layout_ptr(dt)),
        mesh(dt.device_mesh()),
        plans(dt.plan_cache()) {}
};

c10::intrusive_ptr<BridgeState> bridge_of(AutogradContext* ctx) {
  return c10::static_intrusive_pointer_cast<BridgeState>(ctx->saved_data["bridge"].toCapsule());
}

/// hyper::as_tensor of a DTensor whose local tensor requires grad: local -> wrapper.
struct FromHandleFn : public ::hyper::dispatch::BoundaryFunction<FromHandleFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& local,
                            c10::intrusive_ptr<BridgeState> st) {
    ctx->saved_data["bridge"] = c10::IValue::make_capsule(st);
    at::Tensor out = dispatch::wrap_dtensor(DTensorAccess::with_local(st->dt, local.detach()));
    st->dt = DTensor();
    return out;
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    const auto st = bridge_of(ctx);
    const at::Tensor& G = grads[0];
    if (!G.defined()) return {at::Tensor(), at::Tensor()};
    const Layout& layout = *st->layout;
    const double s = grad_scale(layout, "as_tensor backward");
    const Placements ps = grad_layout(layout).placements();
    // A plain gradient is the global value on every rank (autograd's zeros for an unused
    // output): the rank's part of it.
    at::Tensor g = is_dtensor(G) ? as_dtensor(G).redistribute(st->mesh, ps).to_local()
                                 : distribute_tensor(G, st->mesh, ps).to_local();
    if (s != 1.0) g = g * s;
    return {g, at::Tensor()};
  }
};

/// hyper::as_dtensor of a DTensor tensor that requires grad: wrapper -> local.
struct ToHandleFn : public ::hyper::dispatch::BoundaryFunction<ToHandleFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& /*wrapper*/,
                            c10::intrusive_ptr<BridgeState> st) {
    ctx->saved_data["bridge"] = c10::IValue::make_capsule(st);
    return DTensorAccess::raw_local(st->dt).detach();
  }
  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    const auto st = bridge_of(ctx);
    const at::Tensor g = plain_grad(grads[0]);
    if (!g.defined()) return {at::Tensor(), at::Tensor()};
    const Layout& layout = *st->layout;
    const double s = grad_scale(layout, "to_local backward");
    // Contiguous: a wrapper gradient may be accumulated in place later (an expanded local
    // cannot be written).
    at::Tensor local = (s != 1.0 ? g / s : g).contiguous();
    return {as_tensor(DTensor::from_local_with_layout(local, st->mesh, grad_layout(layout),
                                                      st->plans)),
            at::Tensor()};
  }
};

}  // namespace

at::Tensor wrap_with_history(const DTensor& dt) {
  auto st = c10::make_intrusive<BridgeState>(dt);
  return FromHandleFn::apply(DTensorAccess::raw_local(dt), st);
}

DTensor unwrap_with_history(const at::Tensor& t, DTensor dt) {
  auto st = c10::make_intrusive<BridgeState>(std::move(dt));
  at::Tensor local = ToHandleFn::apply(t, st);
  DTensor out = DTensorAccess::with_local(st->dt, std::move(local));
  st->dt = DTensor();
  return out;
}

at::Tensor redistribute_autograd(const at::Tensor& local, const DeviceMesh& mesh,
                                 const Layout& src, const Layout& dst,
                                 const std::shared_ptr<PlanCache>& plans) {
  return apply_redistribute(local, mesh, src, dst, plans);
}

at::Tensor redistribute_autograd_async(const at::Tensor& local, const DeviceMesh& mesh,
                                       const Layout& src, const Layout& dst,
                                       const std::shared_ptr<PlanCache>& plans,
                                       std::optional<comm::Work>* pending) {
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

}  // namespace hyper::tensor_internal
