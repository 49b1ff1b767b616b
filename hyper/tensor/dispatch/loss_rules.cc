// Torch-free sharding rules of nll_loss with the class dim sharded (see loss_rules.h).
#include "hyper/tensor/dispatch/loss_rules.h"

#include <functional>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper::dispatch {
namespace {

}  // namespace

NllLossPropagation propagate_nll_loss(const std::string& op_name, const ArgLayout& input,
                                      const ArgLayout& target,
                                      const std::optional<ArgLayout>& weight, int64_t reduction) {
  const std::function<std::string()> where = [&] {
    std::vector<ArgLayout> all{input, target};
    if (weight) all.push_back(*weight);
    return describe_args(op_name, all) + " reduction=" + std::to_string(reduction);
  };
  HYPER_CHECK_IMPLEMENTED(input.layout.has_value(), where(), ": the input is a plain tensor "
                          "beside a DTensor target or weight (make the input a DTensor)");
  HYPER_CHECK_IMPLEMENTED(!input.layout->is_ragged(), where(), ": the input is a RaggedShard "
                          "DTensor (fail-closed: only elementwise ops and full reductions)");
  HYPER_CHECK_VALUE(reduction >= 0 && reduction <= 2, where(), ": reduction ", reduction,
                    " is not 0 (none), 1 (mean) or 2 (sum)");
  const Layout& in = *input.layout;
  const Shape& xs = in.shape();
  const int64_t rank = static_cast<int64_t>(xs.size());
  HYPER_CHECK_VALUE(rank >= 1, where(), ": the input has no class dim (0 dims)");
  const int64_t c = rank == 1 ? 0 : 1;
  Shape ts = xs;
  ts.erase(ts.begin() + c);
  HYPER_CHECK_VALUE(target.shape == ts, where(), ": target shape ", shape_to_string(target.shape),
                    " does not match the input's ", shape_to_string(xs), " (expected ",
                    shape_to_string(ts), ")");
  if (weight)
    HYPER_CHECK_VALUE(weight->shape == Shape{xs[c]}, where(), ": weight shape ",
                      shape_to_string(weight->shape), " is not [", xs[c], "] (the classes)");
  const Layout tl = layout_or_replicate(target, in, "the target", where);
  std::optional<Layout> wl;
  if (weight) wl = layout_or_replicate(*weight, in, "the weight", where);

  const size_t ndim = in.placements().size();
  NllLossPropagation p{c, in, tl, wl, in, in, {}, {}};
  Placements pin(ndim, Replicate()), pt(ndim, Replicate()), pw(ndim, Replicate()),
      pnone(ndim, Replicate());
  for (size_t m = 0; m < ndim; ++m) {
    const Placement& q = in.placements()[m];
    if (!q.is_shard()) continue;  // Replicate, or a Partial reduced first
    pin[m] = q;
    p.reduce_mesh_dims.push_back(static_cast<int64_t>(m));
    if (q.dim() == c) {
      pw[m] = Shard(0);
      pnone[m] = Partial();
      p.class_mesh_dims.push_back(static_cast<int64_t>(m));
    } else {
      pt[m] = pnone[m] = Shard(q.dim() < c ? q.dim() : q.dim() - 1);
    }
  }
  p.input = Layout(in.mesh(), pin, xs);
  p.target = Layout(in.mesh(), pt, ts);
  if (wl) p.weight = Layout(in.mesh(), pw, wl->shape());
  const Placements rep(ndim, Replicate());
  p.output = reduction == 0 ? Layout(in.mesh(), pnone, ts) : Layout(in.mesh(), rep, Shape{});
  p.total_weight = Layout(in.mesh(), rep, Shape{});
  return p;
}

NllLossBackwardPropagation propagate_nll_loss_backward(
    const std::string& op_name, const ArgLayout& grad_output, const ArgLayout& input,
    const ArgLayout& target, const std::optional<ArgLayout>& weight, int64_t reduction,
    const ArgLayout& total_weight) {
  NllLossPropagation f = propagate_nll_loss(op_name, input, target, weight, reduction);
  const std::function<std::string()> where = [&] {
    std::vector<ArgLayout> all{grad_output, input, target};
    if (weight) all.push_back(*weight);
    all.push_back(total_weight);
    return describe_args(op_name, all) + " reduction=" + std::to_string(reduction);
  };
  HYPER_CHECK_VALUE(grad_output.shape == f.output.shape(), where(), ": grad_output shape ",
                    shape_to_string(grad_output.shape), " is not the loss's ",
                    shape_to_string(f.output.shape()));
  HYPER_CHECK_VALUE(total_weight.shape.empty(), where(), ": total_weight shape ",
                    shape_to_string(total_weight.shape), " is not []");
  (void)layout_or_replicate(grad_output, f.input, "grad_output", where);
  (void)layout_or_replicate(total_weight, f.input, "total_weight", where);
  Layout gl = partials_replicated(f.output);
  return NllLossBackwardPropagation{std::move(f), std::move(gl)};
}

}  // namespace hyper::dispatch
