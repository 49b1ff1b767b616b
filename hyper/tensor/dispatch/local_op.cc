// An op computed on local tensors with a local backward (see local_op.h).
#include "hyper/tensor/dispatch/local_op.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/boundary_function.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Locals = std::vector<at::Tensor>;

using Call = LocalOp;

Locals locals_of(const Call& c) {
  Locals l;
  for (size_t i = 0; i < c.ins.size(); ++i) l.push_back(local_as(c.ins[i], c.in[i], c.ref));
  return l;
}

variable_list wrap_all(const Call& c, const Locals& outs) {
  variable_list r;
  for (size_t j = 0; j < outs.size(); ++j) r.push_back(wrap(outs[j].detach(), c.ref, c.out[j]));
  return r;
}

/// The gradient layout of an operand used in `in` (local_op.h).
Layout grad_layout(const Layout& in, const std::vector<Layout>& outs) {
  Placements ps = in.placements();
  for (size_t m = 0; m < ps.size(); ++m) {
    if (ps[m].is_partial()) {
      ps[m] = Replicate();
    } else if (ps[m].is_replicate()) {
      // Each rank's part of the output (a Shard, or a share of a Partial(sum/avg) that a
      // Partial operand carried through a linear op: conv(P(sum) x, R w)) gives its part of
      // the gradient: summed (or averaged) over the ranks.
      for (const Layout& o : outs) {
        const Placement& q = o.placements()[m];
        if (q.is_shard()) ps[m] = Partial("sum");
        if (linear_partial(q) && ps[m].is_replicate()) ps[m] = q;
      }
    }
  }
  return Layout(in.mesh(), ps, in.shape());
}

struct State : torch::CustomClassHolder {
  std::shared_ptr<Call> call;
  Locals leaves;           ///< per operand: the local leaf (undefined: no gradient)
  Locals outs;             ///< the local outputs (their graph reaches the leaves)
  std::vector<bool> is_dt; ///< per operand: a DTensor (else a plain tensor)
  /// Set by a backward that did not keep the graph: the local graph and the outputs are
  /// freed (as PyTorch frees a node's saved tensors), and another backward is refused.
  bool released = false;
};

struct LocalOpFn : public ::hyper::dispatch::BoundaryFunction<LocalOpFn> {
  static variable_list forward(AutogradContext* ctx, at::TensorList ins, std::shared_ptr<Call> c) {
    auto st = c10::make_intrusive<State>();
    Locals use = locals_of(*c);
    st->leaves.resize(ins.size());
    for (size_t i = 0; i < ins.size(); ++i) {
      st->is_dt.push_back(is_dtensor(ins[i]));
      if (ins[i].requires_grad() && (use[i].is_floating_point() || use[i].is_complex())) {
        st->leaves[i] = use[i].detach().requires_grad_(true);
        use[i] = st->leaves[i];
      }
    }
    {
      at::AutoGradMode on(true);
      st->outs = c->f(use);
    }
    variable_list r = wrap_all(*c, st->outs);
    for (size_t j = 0; j < r.size(); ++j)
      if (!c->diff_out[j]) ctx->mark_non_differentiable({r[j]});
    st->call = std::move(c);
    ctx->saved_data["state"] = c10::IValue::make_capsule(st);
    return r;
  }

  static variable_list backward_body(AutogradContext* ctx, variable_list grads) {
    const auto st = c10::static_intrusive_pointer_cast<State>(ctx->saved_data["state"].toCapsule());
    const Call& c = *st->call;
    // The engine's keep_graph (retain_graph): when it is off, this backward is the last one
    // through this node, so the local graph runs once and is freed with the local outputs
    // afterwards: the activations it saved go as backward passes them, not when the whole
    // graph is destroyed.
    const bool keep = torch::autograd::get_current_graph_task_keep_graph();
    HYPER_CHECK_VALUE(!st->released, c.name, " of a DTensor: trying to backward through the "
                      "graph a second time (its saved tensors were freed by the first "
                      "backward); pass retain_graph=True to the first one");
    variable_list result(st->leaves.size() + 1);
    auto where = [&] {
      std::vector<ArgLayout> ls;
      for (const Layout& l : c.in) ls.push_back(ArgLayout::of(l));
      return describe_args(c.name + " backward", ls);
    };
    HYPER_CHECK_IMPLEMENTED(!torch::autograd::GradMode::is_enabled(), where(),
                            ": double backward (create_graph=true) through ", c.name,
                            " of a DTensor is not implemented (its backward runs the local "
                            "op's backward, which autograd would not record)");
    Locals outs, gl, leaves;
    for (size_t j = 0; j < grads.size() && j < st->outs.size(); ++j)
      if (c.diff_out[j] && grads[j].defined() && st->outs[j].requires_grad()) {
        outs.push_back(st->outs[j]);
        gl.push_back(local_as(grads[j], partials_replicated(c.out[j]), c.ref));  // sharding_rule.h
      }
    for (const at::Tensor& l : st->leaves)
      if (l.defined()) leaves.push_back(l);
    Locals g;
    if (!outs.empty() && !leaves.empty())
      g = torch::autograd::grad(outs, leaves, gl, /*retain_graph=*/keep, /*create_graph=*/false,
                                /*allow_unused=*/true);
    for (size_t i = 0, k = 0; i < st->leaves.size(); ++i) {
      if (!st->leaves[i].defined()) continue;
      at::Tensor gi = k < g.size() ? g[k] : at::Tensor();
      ++k;
      // Every rank returns a gradient (an empty shard's is zeros), so that the ranks' later
      // collectives on it match.
      if (!gi.defined()) gi = at::zeros_like(st->leaves[i]);
      const Layout lay = grad_layout(c.in[i], c.out);
      if (st->is_dt[i]) {
        result[i] = wrap(gi, c.ref, lay);
      } else {  // a plain operand's gradient: the global one, on every rank
        const Layout whole(lay.mesh(), Placements(static_cast<size_t>(lay.mesh().ndim()), Replicate()),
                           lay.shape());
        at::NoGradGuard no_grad;
        result[i] = redistribute_local(gi, c.ref.device_mesh(), lay, whole);
      }
    }
    if (!keep) {
      st->released = true;
      st->outs.clear();
      st->leaves.assign(st->leaves.size(), at::Tensor());
    }
    return result;
  }
};

}  // namespace

std::vector<at::Tensor> run_local_op(std::shared_ptr<LocalOp> op, bool record) {
  // Nothing to record when no operand requires grad (inference under grad mode).
  const bool any_grad = std::any_of(op->ins.begin(), op->ins.end(), [](const at::Tensor& t) {
    return t.defined() && t.requires_grad();
  });
  if (!record || !any_grad || !torch::autograd::GradMode::is_enabled()) {
    Locals outs;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      outs = op->f(locals_of(*op));
    }
    return wrap_all(*op, outs);
  }
  const variable_list ins = op->ins;
  // A TensorList (not the vector, which apply() would take as one non-tensor argument).
  return LocalOpFn::apply(at::TensorList(ins), std::move(op));
}

}  // namespace hyper::dispatch
