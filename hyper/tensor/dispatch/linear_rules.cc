// Where at::linear gathers a DTensor input (see linear_rules.h). Torch-free.
#include "hyper/tensor/dispatch/linear_rules.h"

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/matmul_rules.h"
#include "hyper/tensor/dispatch/view_rules.h"

namespace hyper::dispatch {

namespace {

/// The transpose of a 2-D operand's layout (weight [out, in] -> [in, out]).
ArgLayout transposed(const ArgLayout& w) {
  const Shape t{w.shape[1], w.shape[0]};
  if (!w.layout) return ArgLayout::plain(t);
  Placements ps = w.layout->placements();
  for (auto& q : ps)
    if (q.is_shard()) q = Shard(1 - q.dim());
  return ArgLayout::of(Layout(w.layout->mesh(), ps, t));
}

}  // namespace

Layout matmul_input_layout(const ArgLayout& input, const ArgLayout& other,
                           const std::optional<ArgLayout>& bias) {
  HYPER_CHECK_INTERNAL(input.layout.has_value(), "matmul_input_layout: a plain input");
  const Layout& in = *input.layout;
  const Shape& s = in.shape();
  const int64_t rank = static_cast<int64_t>(s.size());
  if (in.is_ragged() || rank < 2 || in.numel() == 0 || other.shape.size() != 2 ||
      (other.layout && (other.layout->is_ragged() || !(other.layout->mesh() == in.mesh()))))
    return in;
  // 1. The fold LibTorch's linear / matmul do for 3+ dims (the view rule's decision).
  Layout before = in, folded = in;
  if (rank >= 3) {
    const Propagation v = propagate_view_groups("aten::view", input, {-1, s[rank - 1]});
    before = *v.inputs[0];
    folded = v.output;
  }
  // 2. The folded matmul's decision for its rows: input [n, k] x other [k, m].
  std::vector<ArgLayout> args;
  if (bias) args.push_back(*bias);
  args.push_back(ArgLayout::of(folded));
  args.push_back(other);
  const Propagation m =
      propagate_matmul(bias ? "aten::addmm" : "aten::mm", args, 0, bias.has_value());
  Layout rows = *m.inputs[bias ? 1 : 0];
  // The matmul rule is greedy per op: where the folded rows are sharded it may gather `other`
  // (the weight) instead, or move both operands to the contracted dim and leave a Partial
  // output whose reduction the next op pays. Gathering the rows is preferred when it moves no
  // more than the rule's choice plus, for a Partial output, its cheapest reduction (a
  // reduce-scatter), and the weight can stay as it is (Replicate or sharded by columns on those
  // mesh dims). Reasons: the weight is the parameter, so kept in its layout its gradient
  // arrives in the parameter's layout (no relayout in the optimizer step); a Colwise
  // projection's output stays sharded by features (heads) for the attention; the rows'
  // gather is remembered on the input and shared by q, k and v (the rule sees one op). This is
  // where PyTorch's ColwiseParallel input hook puts the gather.
  if (other.layout) {
    const Layout& o = *other.layout;
    Placements alt = rows.placements();
    bool differs = false, weight_stays = true;
    for (size_t d = 0; d < alt.size(); ++d) {
      const Placement& f = folded.placements()[d];
      if (!(f.is_shard() && f.dim() == 0) || alt[d].is_replicate()) continue;
      alt[d] = Replicate();
      differs = true;
      const Placement& w = o.placements()[d];
      weight_stays = weight_stays && (w.is_replicate() || (w.is_shard() && w.dim() == 1));
    }
    // The rows alternative: rows Replicate on those dims, as chosen elsewhere; the weight as is.
    for (size_t d = 0; d < alt.size() && differs; ++d)
      if (!(folded.placements()[d].is_shard() && folded.placements()[d].dim() == 0))
        weight_stays = weight_stays && m.inputs[bias ? 2 : 1]->placements()[d] == o.placements()[d];
    if (differs && weight_stays) {
      try {
        int64_t chosen = redistribution_cost(folded, rows) +
                         redistribution_cost(o, *m.inputs[bias ? 2 : 1]);
        if (m.output.has_partial()) {
          std::vector<int64_t> owed;
          for (size_t d = 0; d < m.output.placements().size(); ++d)
            if (m.output.placements()[d].is_partial()) owed.push_back(static_cast<int64_t>(d));
          chosen += owed_reduction_cost(m.output, owed);
        }
        const Layout alt_rows(folded.mesh(), alt, folded.shape());
        if (redistribution_cost(folded, alt_rows) <= chosen) rows = alt_rows;
      } catch (const NotImplementedError&) {
        // a plan the core refuses: keep the rule's choice
      }
    }
  }
  // A mesh dim on which the folded rows are Shard(0) and the matmul wants them Replicate: gather
  // the leading dim the fold mapped to rows, on the unfolded input.
  Placements ps = before.placements();
  for (size_t d = 0; d < ps.size(); ++d) {
    const Placement& f = folded.placements()[d];
    if (f.is_shard() && f.dim() == 0 && rows.placements()[d].is_replicate() && ps[d].is_shard() &&
        ps[d].dim() < rank - 1)
      ps[d] = Replicate();
  }
  return Layout(before.mesh(), ps, s);
}

Layout linear_input_layout(const ArgLayout& input, const ArgLayout& weight,
                           const std::optional<ArgLayout>& bias) {
  HYPER_CHECK_INTERNAL(input.layout.has_value(), "linear_input_layout: a plain input");
  if (weight.shape.size() != 2) return *input.layout;
  return matmul_input_layout(input, transposed(weight), bias);
}

namespace {

bool overlap_shapes(const Layout& a, const ArgLayout& other) {
  return a.mesh().ndim() == 1 && a.mesh().size() >= 2 && !a.is_ragged() && a.shape().size() >= 2 &&
         other.layout && other.shape.size() == 2 && other.layout->mesh() == a.mesh();
}

}  // namespace

std::optional<Layout> overlapped_gather_output(const Layout& a, const Layout& target, const ArgLayout& other) {
  if (!overlap_shapes(a, other)) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(a.shape().size());
  const Placement& p = a.placements()[0];
  if (!p.is_shard() || p.dim() >= rank - 1 || !target.placements()[0].is_replicate()) return std::nullopt;
  const Placement& po = other.layout->placements()[0];
  if (!(po.is_replicate() || (po.is_shard() && po.dim() == 1))) return std::nullopt;
  Shape out = a.shape();
  out.back() = other.shape[1];
  return Layout(a.mesh(), {po.is_shard() ? Placement(Shard(rank - 1)) : Placement(Replicate())}, out);
}

std::optional<Layout> contracted_rowwise_output(const Layout& a, const Layout& target, const ArgLayout& other) {
  if (!(target == a) || !overlap_shapes(a, other)) return std::nullopt;
  const int64_t rank = static_cast<int64_t>(a.shape().size());
  const Placement& pa = a.placements()[0];
  const Placement& pb = other.layout->placements()[0];
  if (!pa.is_shard() || pa.dim() != rank - 1 || !pb.is_shard() || pb.dim() != 0) return std::nullopt;
  // The pieces of k match: both are cut from the same size by the same chunking.
  if (a.shape()[rank - 1] != other.shape[0]) return std::nullopt;
  Shape out = a.shape();
  out.back() = other.shape[1];
  return Layout(a.mesh(), {Partial()}, out);
}

bool bias_add_local(const std::optional<ArgLayout>& bias, const ArgLayout& weight) {
  if (!bias || !bias->layout) return true;
  if (!weight.layout || bias->shape.size() != 1) return false;
  const Placement& pb = bias->layout->placements()[0];
  return pb.is_replicate() || pb == weight.layout->placements()[0];
}

}  // namespace hyper::dispatch
