// Torch-free sharding rules of the nn ops (see nn_rules.h).
#include "hyper/tensor/dispatch/nn_rules.h"

#include <algorithm>
#include <functional>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"

namespace hyper::dispatch {
namespace {

/// The DTensor layout of `a`, refusing plain tensors and RaggedShard (fail-closed).
const Layout& dtensor_layout(const ArgLayout& a, const std::string& what,
                             const std::function<std::string()>& where) {
  HYPER_CHECK_IMPLEMENTED(a.layout.has_value(), where(), ": ", what, " is a plain tensor beside "
                          "a DTensor (make it a DTensor)");
  HYPER_CHECK_IMPLEMENTED(!a.layout->is_ragged(), where(), ": ", what, " is a RaggedShard "
                          "DTensor (fail-closed: only elementwise ops and full reductions)");
  return *a.layout;
}

/// The layout of the first DTensor among `all` (null entries skipped).
const Layout& first_layout(const std::vector<const ArgLayout*>& all,
                           const std::function<std::string()>& where) {
  for (const ArgLayout* b : all)
    if (b != nullptr && b->layout) return *b->layout;
  HYPER_CHECK_INTERNAL(false, where(), ": no DTensor operand");
}

}  // namespace

Propagation propagate_softmax(const std::string& op_name, const std::vector<ArgLayout>& args,
                              int64_t dim) {
  const std::function<std::string()> where = [&] { return describe_args(op_name, args); };
  HYPER_CHECK_INTERNAL(args.size() == 1 || args.size() == 2, where(), ": expected 1 or 2 tensors");
  std::vector<const Layout*> ls;
  for (size_t i = 0; i < args.size(); ++i)
    ls.push_back(&dtensor_layout(args[i], "argument " + std::to_string(i), where));
  const int64_t rank = static_cast<int64_t>(ls[0]->shape().size());
  dim = normalized_dim(dim, rank, where);
  for (const Layout* l : ls) {
    HYPER_CHECK_VALUE(l->shape() == ls[0]->shape(), where(), ": operands of different shapes");
    HYPER_CHECK_VALUE(l->mesh() == ls[0]->mesh(), where(), ": DTensor operands on different meshes");
  }
  const size_t ndim = ls[0]->placements().size();
  // Forward, or the backward's `output`: Partial made Replicate. A Shard of `dim` is kept
  // (loss_parallel: the kernel reduces the row max / sums across it, loss_kernels.h).
  const Layout& y = *ls.back();
  Placements yt = partials_replicated(y).placements();
  if (args.size() == 1) {
    const Layout t = with_placements(y, yt);
    return Propagation{{t}, t};
  }
  const Layout& g = *ls[0];
  Placements gt(ndim, Replicate()), out(ndim, Replicate());
  for (size_t m = 0; m < ndim; ++m) {
    const Placement& gq = g.placements()[m];
    if (yt[m].is_shard()) {
      gt[m] = out[m] = yt[m];
    } else if (gq.is_shard()) {
      gt[m] = yt[m] = out[m] = gq;  // the output is sliced locally
    } else if (linear_partial(gq)) {
      gt[m] = out[m] = gq;
    }
  }
  return Propagation{{with_placements(g, gt), with_placements(y, yt)}, with_placements(y, out)};
}

namespace {

/// Placements of `l` with every Shard of a dim >= axis and every Partial made Replicate.
Placements leading_shards(const Layout& l, int64_t axis) {
  Placements ps = l.placements();
  for (auto& q : ps)
    if (q.is_partial() || (q.is_shard() && q.dim() >= axis)) q = Replicate();
  return ps;
}

Shape stats_shape(const Shape& in, int64_t axis) {
  Shape s(in.begin(), in.begin() + axis);
  s.resize(in.size(), 1);
  return s;
}

int64_t layer_norm_axis(const Layout& in, const std::vector<int64_t>& normalized_shape,
                        const std::function<std::string()>& where) {
  const int64_t rank = static_cast<int64_t>(in.shape().size());
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  HYPER_CHECK_VALUE(k <= rank && std::equal(normalized_shape.begin(), normalized_shape.end(),
                                            in.shape().end() - k),
                    where(), ": normalized_shape ", shape_to_string(normalized_shape),
                    " is not the input's trailing dims");
  return rank - k;
}

/// The Replicate layout of layer_norm's weight or bias on the input's mesh. A plain weight
/// (a LayerNorm whose parameters were not distributed) is Replicate, as every plain operand
/// beside a DTensor: used as it is on every rank.
std::optional<Layout> replicated_param(const std::optional<ArgLayout>& p, const std::string& what,
                                       const std::vector<int64_t>& normalized_shape,
                                       const Layout& input,
                                       const std::function<std::string()>& where) {
  if (!p) return std::nullopt;
  const Layout l = p->layout ? dtensor_layout(*p, what, where)
                             : Layout(input.mesh(), Placements(input.placements().size(), Replicate()),
                                      p->shape);
  HYPER_CHECK_VALUE(l.mesh() == input.mesh(), where(), ": DTensor operands on different meshes");
  HYPER_CHECK_VALUE(l.shape() == normalized_shape, where(), ": ", what, " shape ",
                    shape_to_string(l.shape()), " differs from normalized_shape ",
                    shape_to_string(normalized_shape));
  return with_placements(l, Placements(l.placements().size(), Replicate()));
}

}  // namespace

LayerNormPropagation propagate_layer_norm(const std::string& op_name, const ArgLayout& input,
                                          const std::vector<int64_t>& normalized_shape,
                                          const std::optional<ArgLayout>& weight,
                                          const std::optional<ArgLayout>& bias) {
  const std::function<std::string()> where = [&] {
    std::vector<ArgLayout> all{input};
    if (weight) all.push_back(*weight);
    if (bias) all.push_back(*bias);
    return describe_args(op_name, all) + " normalized_shape=" + shape_to_string(normalized_shape);
  };
  const std::vector<const ArgLayout*> all{&input, weight ? &*weight : nullptr,
                                           bias ? &*bias : nullptr};
  const Layout in = layout_or_replicate(input, first_layout(all, where), "the input", where);
  const int64_t axis = layer_norm_axis(in, normalized_shape, where);
  const Placements ps = leading_shards(in, axis);
  const Layout t = with_placements(in, ps);
  return LayerNormPropagation{t,
                              replicated_param(weight, "weight", normalized_shape, in, where),
                              replicated_param(bias, "bias", normalized_shape, in, where),
                              t,
                              Layout(in.mesh(), ps, stats_shape(in.shape(), axis))};
}

LayerNormBackwardPropagation propagate_layer_norm_backward(
    const std::string& op_name, const ArgLayout& grad_out, const ArgLayout& input,
    const std::vector<int64_t>& normalized_shape, const ArgLayout& mean, const ArgLayout& rstd,
    const std::optional<ArgLayout>& weight, const std::optional<ArgLayout>& bias) {
  const std::function<std::string()> where = [&] {
    std::vector<ArgLayout> all{grad_out, input, mean, rstd};
    if (weight) all.push_back(*weight);
    if (bias) all.push_back(*bias);
    return describe_args(op_name, all) + " normalized_shape=" + shape_to_string(normalized_shape);
  };
  const std::vector<const ArgLayout*> all{&grad_out, &input, &mean, &rstd,
                                           weight ? &*weight : nullptr, bias ? &*bias : nullptr};
  const Layout& like = first_layout(all, where);
  const Layout g = layout_or_replicate(grad_out, like, "grad_out", where);
  const Layout in = layout_or_replicate(input, like, "the input", where);
  const Layout mu = layout_or_replicate(mean, like, "mean", where);
  const Layout rs = layout_or_replicate(rstd, like, "rstd", where);
  const int64_t axis = layer_norm_axis(in, normalized_shape, where);
  HYPER_CHECK_VALUE(g.shape() == in.shape(), where(), ": grad_out shape ", shape_to_string(g.shape()),
                    " differs from the input's ", shape_to_string(in.shape()));
  const Shape st = stats_shape(in.shape(), axis);
  for (const Layout* l : {&mu, &rs})
    HYPER_CHECK_VALUE(l->shape() == st, where(), ": mean/rstd shape ", shape_to_string(l->shape()),
                      " is not ", shape_to_string(st));
  for (const Layout* l : {&g, &mu, &rs})
    HYPER_CHECK_VALUE(l->mesh() == in.mesh(), where(), ": DTensor operands on different meshes");
  const Placements gi = leading_shards(g, axis);
  Placements x = leading_shards(in, axis);
  const size_t ndim = x.size();
  Placements gt(ndim, Replicate()), param(ndim, Replicate());
  for (size_t m = 0; m < ndim; ++m) {
    if (!x[m].is_shard() && gi[m].is_shard()) x[m] = gi[m];
    if (x[m].is_shard()) {
      gt[m] = x[m];
      param[m] = Partial("sum");
    } else if (linear_partial(g.placements()[m])) {
      gt[m] = param[m] = g.placements()[m];
    }
  }
  return LayerNormBackwardPropagation{
      with_placements(g, gt),
      with_placements(in, x),
      Layout(in.mesh(), x, st),
      replicated_param(weight, "weight", normalized_shape, in, where),
      replicated_param(bias, "bias", normalized_shape, in, where),
      with_placements(in, gt),
      Layout(in.mesh(), param, Shape(normalized_shape.begin(), normalized_shape.end()))};
}

namespace {

/// The indices' placements: a plain tensor is Replicate; Partial and RaggedShard are refused.
Placements index_placements(const ArgLayout& indices, const MeshTopology& mesh,
                            const std::function<std::string()>& where) {
  if (!indices.layout) return Placements(mesh.ndim(), Replicate());
  HYPER_CHECK_IMPLEMENTED(!indices.layout->is_ragged(), where(), ": RaggedShard indices "
                          "(fail-closed)");
  HYPER_CHECK_VALUE(indices.layout->mesh() == mesh, where(), ": DTensor operands on different meshes");
  for (const auto& q : indices.layout->placements())
    HYPER_CHECK_IMPLEMENTED(!q.is_partial(), where(), ": Partial indices (a sum of ids is not an id)");
  return indices.layout->placements();
}

}  // namespace

EmbeddingPropagation propagate_embedding(const std::string& op_name, const ArgLayout& weight,
                                         const ArgLayout& indices) {
  const std::function<std::string()> where = [&] { return describe_args(op_name, {weight, indices}); };
  const Layout& w = dtensor_layout(weight, "the weight", where);
  HYPER_CHECK_VALUE(w.shape().size() == 2, where(), ": the weight must be 2-D, got shape ",
                    shape_to_string(w.shape()));
  const Placements ip = index_placements(indices, w.mesh(), where);
  const int64_t nd = static_cast<int64_t>(indices.shape.size());
  Placements wt = w.placements(), out(wt.size(), Replicate());
  bool masked = false;
  for (size_t m = 0; m < wt.size(); ++m) {
    if (ip[m].is_shard()) {
      wt[m] = Replicate();
      out[m] = ip[m];
    } else if (wt[m].is_shard()) {
      masked = masked || wt[m].dim() == 0;
      out[m] = wt[m].dim() == 0 ? Partial("sum") : Shard(nd);
    } else if (linear_partial(wt[m])) {
      out[m] = wt[m];
    } else {
      wt[m] = Replicate();
    }
  }
  Shape os = indices.shape;
  os.push_back(w.shape()[1]);
  EmbeddingPropagation p{with_placements(w, wt), std::nullopt, Layout(w.mesh(), out, os), masked,
                         false};
  if (indices.layout) p.indices = *indices.layout;
  return p;
}

EmbeddingPropagation propagate_embedding_backward(const std::string& op_name,
                                                  const ArgLayout& grad_output,
                                                  const ArgLayout& indices, int64_t num_weights) {
  const std::function<std::string()> where = [&] {
    return describe_args(op_name, {grad_output, indices}) + " num_weights=" + std::to_string(num_weights);
  };
  const Layout& g = dtensor_layout(grad_output, "grad_output", where);
  const Placements ip = index_placements(indices, g.mesh(), where);
  const int64_t nd = static_cast<int64_t>(indices.shape.size());
  HYPER_CHECK_VALUE(static_cast<int64_t>(g.shape().size()) == nd + 1 &&
                        std::equal(indices.shape.begin(), indices.shape.end(), g.shape().begin()),
                    where(), ": grad_output shape ", shape_to_string(g.shape()),
                    " is not the indices' shape ", shape_to_string(indices.shape), " + [E]");
  Placements gt(ip.size(), Replicate()), it(ip.size(), Replicate()), out(ip.size(), Replicate());
  bool rows = false;
  for (size_t m = 0; m < ip.size(); ++m) {
    const Placement& gq = g.placements()[m];
    if (gq.is_shard() && gq.dim() == nd) {
      gt[m] = gq;
      out[m] = Shard(1);
    } else if ((gq.is_shard() && gq.dim() < nd) || ip[m].is_shard()) {
      gt[m] = it[m] = gq.is_shard() ? gq : ip[m];
      out[m] = Partial("sum");
      rows = true;
    } else if (linear_partial(gq)) {
      gt[m] = out[m] = gq;
    }
  }
  return EmbeddingPropagation{with_placements(g, gt), Layout(g.mesh(), it, indices.shape),
                              Layout(g.mesh(), out, Shape{num_weights, g.shape()[nd]}), false,
                              rows};
}

CatPropagation propagate_cat(const std::string& op_name, const std::vector<ArgLayout>& in,
                             int64_t dim) {
  const std::function<std::string()> where = [&] {
    return describe_args(op_name, in) + " dim=" + std::to_string(dim);
  };
  HYPER_CHECK_VALUE(!in.empty(), where(), ": no tensors to concatenate");
  const Layout* first = nullptr;
  for (const auto& a : in)
    if (a.layout && first == nullptr) first = &*a.layout;
  HYPER_CHECK_INTERNAL(first != nullptr, where(), ": no DTensor operand");
  const int64_t rank = static_cast<int64_t>(first->shape().size());
  HYPER_CHECK_VALUE(rank > 0, where(), ": a 0-dim tensor cannot be concatenated");
  const int64_t d = normalized_dim(dim, rank, where);
  Shape out = first->shape();
  out[d] = 0;
  for (const auto& a : in) {
    HYPER_CHECK_VALUE(static_cast<int64_t>(a.shape.size()) == rank, where(),
                      ": operands of different ranks (", shape_to_string(a.shape), " beside ",
                      shape_to_string(first->shape()), ")");
    for (int64_t k = 0; k < rank; ++k)
      HYPER_CHECK_VALUE(k == d || a.shape[k] == first->shape()[k], where(), ": sizes differ off "
                        "the cat dim (", shape_to_string(a.shape), " beside ",
                        shape_to_string(first->shape()), ")");
    out[d] += a.shape[d];
    if (!a.layout) continue;
    dtensor_layout(a, "an operand", where);  // ragged refused
    HYPER_CHECK_VALUE(a.layout->mesh() == first->mesh(), where(), ": DTensor operands on different meshes");
  }
  Placements target = first->placements();
  for (size_t m = 0; m < target.size(); ++m) {
    Placement& q = target[m];
    if (q.is_shard() && q.dim() == d) q = Replicate();
    if (q.is_partial()) {
      bool all = linear_partial(q);
      for (const auto& a : in)
        all = all && (!a.layout || a.layout->placements()[m] == q);
      if (!all) q = Replicate();
    }
  }
  CatPropagation p{{}, Layout(first->mesh(), target, out), d};
  for (const auto& a : in) p.inputs.emplace_back(first->mesh(), target, a.shape);
  return p;
}

}  // namespace hyper::dispatch
