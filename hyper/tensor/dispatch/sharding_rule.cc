// Torch-free sharding rules of the DTensor dispatch key (see sharding_rule.h).
#include "hyper/tensor/dispatch/sharding_rule.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/matmul_rules.h"
#include "hyper/tensor/dispatch/pointwise_rules.h"
#include "hyper/tensor/dispatch/view_rules.h"

namespace hyper::dispatch {
namespace {

using PR = PartialRule;

OpRule of_kind(RuleKind k) {
  OpRule r;
  r.kind = k;
  r.tensor_args = {0};
  return r;
}


const std::map<std::string, OpRule>& registry() {
  static const std::map<std::string, OpRule> m = [] {
    std::map<std::string, OpRule> r;
    add_pointwise_rules(r);  // pointwise_rules.h
    // Reductions: sum(self, dtype) and sum.dim_IntList(self, dim, keepdim, dtype).
    r["aten::sum"] = reduction_rule(-1, -1, "sum");
    r["aten::sum.dim_IntList"] = reduction_rule(1, 2, "sum");
    r["aten::amax"] = reduction_rule(1, 2, "max");  // amax(self, dim, keepdim)
    r["aten::amin"] = reduction_rule(1, 2, "min");
    for (const char* op : {"ones_like", "zeros_like", "empty_like", "full_like"})
      r[std::string("aten::") + op] = of_kind(RuleKind::kLike);
    // new_empty_strided(self, size, stride, ...) with size == self's global shape (autograd's
    // gradient accumulation makes its buffer so): self's layout, Partial -> Replicate.
    r["aten::new_empty_strided"] = of_kind(RuleKind::kLike);
    r["aten::new_empty_strided"].size_arg = 1;
    r["aten::new_empty_strided"].stride_arg = 2;
    r["aten::expand"] = of_kind(RuleKind::kExpand);
    r["aten::expand"].size_arg = 1;  // expand(self, size, implicit)
    r["aten::alias"] = of_kind(RuleKind::kAlias);
    r["aten::detach"] = of_kind(RuleKind::kAlias);
    // The matmul family (matmul_rules.h): (A, B) or (bias, A, B, beta, alpha).
    r["aten::mm"] = matmul_rule({0, 1}, 0, false);
    r["aten::bmm"] = matmul_rule({0, 1}, 1, false);
    r["aten::addmm"] = matmul_rule({0, 1, 2}, 0, true);
    r["aten::baddbmm"] = matmul_rule({0, 1, 2}, 1, true);
    add_view_rules(r);  // view_rules.h
    return r;
  }();
  return m;
}

}  // namespace

OpRule elementwise_rule(std::vector<int> args, PartialRule partial, std::vector<int> linear,
                        bool inplace) {
  OpRule r;
  r.kind = RuleKind::kElementwise;
  r.tensor_args = std::move(args);
  r.partial = partial;
  r.linear_args = std::move(linear);
  r.inplace = inplace;
  return r;
}

OpRule reduction_rule(int dims_arg, int keepdim_arg, const char* reduce_op) {
  OpRule r = of_kind(RuleKind::kReduction);
  r.dims_arg = dims_arg;
  r.keepdim_arg = keepdim_arg;
  r.reduce_op = reduce_op;
  return r;
}

OpRule matmul_rule(std::vector<int> args, int batch_dims, bool has_bias) {
  OpRule r = of_kind(RuleKind::kMatmul);
  r.tensor_args = std::move(args);
  r.batch_dims = batch_dims;
  r.has_bias = has_bias;
  return r;
}

Layout layout_or_replicate(const ArgLayout& a, const Layout& like, const std::string& what,
                           const std::function<std::string()>& where) {
  if (!a.layout)
    return Layout(like.mesh(), Placements(like.placements().size(), Replicate()), a.shape);
  HYPER_CHECK_IMPLEMENTED(!a.layout->is_ragged(), where(), ": ", what, " is a RaggedShard "
                          "DTensor (fail-closed: only elementwise ops and full reductions)");
  HYPER_CHECK_VALUE(a.layout->mesh() == like.mesh(), where(), ": DTensor operands on different "
                    "meshes");
  return *a.layout;
}

const OpRule* find_rule(const std::string& op_name) {
  const auto& r = registry();
  auto it = r.find(op_name);
  return it == r.end() ? nullptr : &it->second;
}

std::vector<std::string> rule_names() {
  std::vector<std::string> v;
  for (const auto& [k, _] : registry()) v.push_back(k);
  return v;
}

bool linear_partial(const Placement& p) {
  return p.is_partial() && (p.reduce_op() == "sum" || p.reduce_op() == "avg");
}

std::string describe_args(const std::string& op_name, const std::vector<ArgLayout>& args) {
  std::ostringstream os;
  os << op_name << "(";
  for (size_t i = 0; i < args.size(); ++i) {
    os << (i ? "; " : "") << "arg " << i << ": ";
    if (args[i].layout)
      os << args[i].layout->to_string();
    else
      os << "plain tensor shape=" << shape_to_string(args[i].shape);
  }
  os << ")";
  return os.str();
}

Propagation propagate_elementwise(const std::string& op_name, const OpRule& rule,
                                  const std::vector<ArgLayout>& args) {
  auto where = [&] { return describe_args(op_name, args); };  // built only on an error
  // The mesh and the broadcast shape.
  const Layout* first = nullptr;
  for (const auto& a : args)
    if (a.layout) {
      if (!first) first = &*a.layout;
      HYPER_CHECK_VALUE(a.layout->mesh() == first->mesh(), where(),
                        ": DTensor operands on different meshes");
    }
  HYPER_CHECK_INTERNAL(first != nullptr, where(), ": no DTensor operand");
  size_t rank = 0;
  for (const auto& a : args) rank = std::max(rank, a.shape.size());
  Shape out(rank, 1);
  for (const auto& a : args) {
    const size_t lead = rank - a.shape.size();
    for (size_t d = 0; d < a.shape.size(); ++d) {
      const int64_t s = a.shape[d];
      int64_t& o = out[lead + d];
      HYPER_CHECK_VALUE(s == o || s == 1 || o == 1, where(), ": shapes do not broadcast (size ",
                        s, " against ", o, " at dim ", lead + d, ")");
      if (o == 1) o = s;
    }
  }
  if (rule.inplace) {
    HYPER_CHECK_IMPLEMENTED(args[0].layout.has_value(), where(),
                            ": in-place op on a plain tensor with a DTensor operand");
    HYPER_CHECK_VALUE(args[0].shape == out, where(), ": in-place result shape ", shape_to_string(out),
                      " differs from argument 0's ", shape_to_string(args[0].shape));
  }

  // RaggedShard (ragged_operand.h): the output takes the ragged layout of argument 0, else of
  // the first ragged operand, of the output's shape; every operand with dims is moved to it
  // (R and plain: cut locally; S: all_to_all; P: reduced onto it; another ragged layout: moved;
  // a smaller shape: made Replicate, broadcast and cut), a 0-dim one is Replicate. No ragged
  // operand of the output's shape, or an in-place op on a non-ragged argument 0: the ragged
  // operands are Replicate values for the rules below (gathered or moved to their targets).
  const ArgLayout* rag = nullptr;
  for (const auto& a : args)
    if (!rag && a.layout && a.layout->is_ragged() && a.shape == out &&
        !(rule.inplace && !args[0].layout->is_ragged()))
      rag = &a;
  if (rag) {
    const Layout target(rag->layout->mesh(), rag->layout->placements(), out);
    Propagation p{std::vector<std::optional<Layout>>(args.size()), target};
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].shape.empty())
        p.inputs[i] = target;
      else if (args[i].layout)
        p.inputs[i] = Layout(first->mesh(), Placements(first->mesh().ndim(), Replicate()), {});
    }
    p.output = target;
    return p;
  }

  const int64_t ndim = first->mesh().ndim();
  // Each DTensor operand's placement on each mesh dim, Shard dims in output coordinates (a
  // sharded broadcast dim: Replicate, gathered first), and the distinct Shards they offer, in
  // argument order.
  std::vector<std::vector<std::optional<Placement>>> in_of(
      ndim, std::vector<std::optional<Placement>>(args.size()));
  std::vector<std::vector<Placement>> shards(ndim);
  for (int64_t m = 0; m < ndim; ++m)
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].layout) continue;
      Placement q = args[i].layout->placements()[m];
      if (q.is_shard()) {
        const int64_t d = q.dim() + static_cast<int64_t>(rank - args[i].shape.size());
        q = args[i].shape[q.dim()] == out[d] ? Placement(Shard(d)) : Placement(Replicate());
        if (q.is_shard() && std::find(shards[m].begin(), shards[m].end(), q) == shards[m].end())
          shards[m].push_back(q);
      }
      in_of[m][i] = q;
    }
  auto is_linear_arg = [&](size_t i) {
    return std::find(rule.linear_args.begin(), rule.linear_args.end(), static_cast<int>(i)) !=
           rule.linear_args.end();
  };
  // The operands that may stay Partial on each mesh dim (every other Partial one is reduced).
  // kLinearIn (mul, div): the linear Partial(sum/avg) operands. kAddLinear (addcmul, addcdiv:
  // self + v * t1 * t2): the output takes self's Partial(sum/avg), else the first linear
  // operand's; the linear operands holding that Partial may keep it (the others are reduced).
  std::vector<std::vector<size_t>> keepers(ndim);
  for (int64_t m = 0; m < ndim && rule.partial == PR::kLinearIn && !rule.inplace; ++m)
    for (size_t i = 0; i < args.size(); ++i)
      if (in_of[m][i] && linear_partial(*in_of[m][i]) && is_linear_arg(i)) keepers[m].push_back(i);
  for (int64_t m = 0; m < ndim && rule.partial == PR::kAddLinear; ++m) {
    const std::vector<std::optional<Placement>>& in = in_of[m];
    std::optional<Placement> o;
    if (in[0] && linear_partial(*in[0])) o = in[0];
    const bool self_other_partial = in[0] && in[0]->is_partial() && !linear_partial(*in[0]);
    for (size_t i = 0; i < args.size() && !o && !self_other_partial; ++i)
      if (in[i] && linear_partial(*in[i]) && is_linear_arg(i)) o = in[i];
    for (size_t i = 0; i < args.size() && o; ++i)
      if (is_linear_arg(i) && in[i] && *in[i] == *o) keepers[m].push_back(i);
  }
  // The choices on mesh dim m: which offered Shard the output keeps, or, with none, which
  // Partial operand stays Partial.
  auto choices = [&](int64_t m) {
    return !shards[m].empty() ? shards[m].size() : std::max<size_t>(keepers[m].size(), 1);
  };
  // The propagation where mesh dim m keeps shards[m][choice[m]] (where it has any), else
  // keepers[m][choice[m]] Partial.
  auto decide = [&](const std::vector<size_t>& choice) {
    Propagation p{std::vector<std::optional<Layout>>(args.size()), *first};
    std::vector<Placements> targets(args.size(), Placements(ndim, Replicate()));
    Placements out_ps(ndim, Replicate());
    // Tensor dim of argument `i` that maps to output dim `d` and is not broadcast, or -1.
    auto arg_dim = [&](size_t i, int64_t d) -> int64_t {
      const int64_t k = d - static_cast<int64_t>(rank - args[i].shape.size());
      if (k < 0 || args[i].shape[k] != out[d]) return -1;
      return k;
    };
    for (int64_t m = 0; m < ndim; ++m) {
      const std::optional<Placement> shard =
          shards[m].empty() ? std::nullopt : std::optional<Placement>(shards[m][choice[m]]);
      const std::vector<std::optional<Placement>>& in = in_of[m];
      std::optional<size_t> keeper;  // kLinearIn: the operand that stays Partial
      Placement o = Replicate();
      if (rule.inplace) {
        o = args[0].layout->placements()[m];
        if (o.is_partial()) {
          const bool ok = linear_partial(o) &&
                          (rule.partial == PR::kAdditive || rule.partial == PR::kAddLinear ||
                           (rule.partial == PR::kLinearIn && is_linear_arg(0)));
          HYPER_CHECK_IMPLEMENTED(ok, where(), ": in-place op would change argument 0's ",
                                  o.to_string(), " on mesh dim ", m,
                                  " (redistribute it to Replicate first)");
          keeper = 0;
        }
      } else if (shard) {
        o = *shard;
      } else if (rule.partial == PR::kAdditive) {
        std::optional<Placement> pp;
        bool same = true;
        for (const auto& q : in)
          if (q && q->is_partial()) {
            if (!pp) pp = *q;
            same = same && *q == *pp && linear_partial(*q);
          }
        if (pp && same) o = *pp;
      } else if (rule.partial == PR::kLinearIn) {
        if (!keepers[m].empty()) {
          keeper = keepers[m][choice[m]];
          o = *in[*keeper];
        }
      } else if (rule.partial == PR::kAddLinear) {
        // Partial when self or a linear arg is Partial(sum/avg); a P(max/min) self: reduced.
        if (in[0] && linear_partial(*in[0])) o = *in[0];
        const bool self_other_partial = in[0] && in[0]->is_partial() && !linear_partial(*in[0]);
        for (size_t i = 0; i < args.size() && !o.is_partial() && !self_other_partial; ++i)
          if (in[i] && linear_partial(*in[i]) && is_linear_arg(i)) o = *in[i];
      }
      if (rule.partial == PR::kAddLinear && o.is_partial()) {
        // The keeper: the chosen linear arg already holding o, else the first that is not
        // another Partial (made Partial locally); none (every linear arg another Partial):
        // everything reduced.
        keeper.reset();
        if (!keepers[m].empty()) keeper = keepers[m][choice[m]];
        for (size_t i = 0; i < args.size() && !keeper; ++i)
          if (is_linear_arg(i) && !(in[i] && in[i]->is_partial())) keeper = i;
        HYPER_CHECK_IMPLEMENTED(keeper || !rule.inplace, where(), ": in-place op would change "
                                "argument 0's ", o.to_string(), " on mesh dim ", m,
                                " (redistribute it to Replicate first)");
        if (!keeper) o = Replicate();
      }
      out_ps[m] = o;
      for (size_t i = 0; i < args.size(); ++i) {
        Placement t = Replicate();
        if (o.is_shard()) {
          const int64_t k = arg_dim(i, o.dim());
          if (k >= 0) t = Shard(k);  // a plain operand (Replicate) is sliced locally
        } else if (o.is_partial()) {
          if (rule.partial == PR::kAdditive || (keeper && *keeper == i)) t = o;
          if (rule.partial == PR::kAddLinear && i == 0) t = o;
        }
        targets[i][m] = t;
      }
    }
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i].layout) {
        p.inputs[i] = with_placements(*args[i].layout, targets[i]);
      } else {
        bool any = false;
        for (auto& t : targets[i]) {
          if (t.is_partial() && t.reduce_op() != "sum") t = Replicate();  // avg: keep everywhere
          any = any || !t.is_replicate();
        }
        if (any) p.inputs[i] = Layout(first->mesh(), targets[i], args[i].shape);
      }
    }
    p.output = Layout(first->mesh(), out_ps, out);
    return p;
  };
  // Operands sharded on different dims of one mesh dim, or several Partial operands of a
  // product: every combination is costed (the bytes the redistributions move,
  // matmul_rules.h), the cheapest wins, ties to argument order. (Always the first
  // operand's would make `b + a` with b a [n] S(0) and a an [n, n] S(0) move a whole ([n, n] to
  // S(1)) where gathering b suffices, and `s * x` with both P(sum) all-reduce x, not s.)
  std::vector<size_t> choice(ndim, 0), best = choice;
  size_t combos = 1;
  for (int64_t m = 0; m < ndim; ++m) combos *= choices(m);
  if (rule.inplace || combos == 1) return decide(choice);
  std::optional<int64_t> best_cost;
  while (true) {
    const Propagation p = decide(choice);
    std::optional<int64_t> cost = 0;
    for (size_t i = 0; i < args.size() && cost; ++i) {
      if (!args[i].layout || !p.inputs[i]) continue;
      try {
        *cost += redistribution_cost(*args[i].layout, *p.inputs[i]) * args[i].element_size;
      } catch (const NotImplementedError&) {
        cost.reset();
      }
    }
    if (cost && (!best_cost || *cost < *best_cost)) {
      best_cost = cost;
      best = choice;
    }
    int64_t m = ndim - 1;  // odometer: the last mesh dim varies fastest
    while (m >= 0 && ++choice[m] >= choices(m)) choice[m--] = 0;
    if (m < 0) break;
  }
  return decide(best);
}

Propagation propagate_reduction(const std::string& op_name, const ArgLayout& in,
                                std::vector<int64_t> dims, bool keepdim,
                                const std::string& reduce_op, bool fill_empty) {
  const bool linear = reduce_op == "sum";
  auto where = [&] { return describe_args(op_name, {in}); };
  const Layout& l = *in.layout;
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) {
    const int64_t k = normalized_dim(d, rank, where);
    if (rank > 0) reduced[k] = true;
  }
  const bool full = std::all_of(reduced.begin(), reduced.end(), [](bool b) { return b; });
  Shape out;
  std::vector<int64_t> new_dim(rank, -1);
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d] && !keepdim) continue;
    new_dim[d] = static_cast<int64_t>(out.size());
    out.push_back(reduced[d] ? 1 : l.shape()[d]);
  }
  Placements src = l.placements();
  Placements dst = l.placements();
  for (size_t m = 0; m < src.size(); ++m) {
    const Placement& q = src[m];
    if (q.is_ragged_shard()) {
      HYPER_CHECK_IMPLEMENTED(full, where(), ": a RaggedShard DTensor reduces only over all dims "
                              "(fail-closed)");
      dst[m] = Partial(reduce_op);
    } else if (q.is_shard()) {
      dst[m] = reduced[q.dim()] ? Partial(reduce_op) : Shard(new_dim[q.dim()]);
    } else if (q.is_partial() && (linear ? !linear_partial(q) : q.reduce_op() != reduce_op)) {
      src[m] = Replicate();
      dst[m] = Replicate();
    }
  }
  if (!linear && !fill_empty) {
    // amax/amin of an empty local region fails in ATen: refused when any rank would hold none
    // of a sharded reduced region (decided from the layout, the same on every rank).
    const Layout s = with_placements(l, src);
    bool sharded_reduced = false;
    for (const auto& q : src)
      sharded_reduced = sharded_reduced || q.is_ragged_shard() || (q.is_shard() && reduced[q.dim()]);
    if (sharded_reduced && numel(l.shape()) > 0)
      for (int64_t i = 0; i < l.mesh().size(); ++i)
        HYPER_CHECK_IMPLEMENTED(numel(s.local_shape(i)) > 0, where(), ": ", reduce_op,
                                " over a sharded dim where rank ", i, " holds no elements (",
                                "an empty shard: redistribute first)");
  }
  return Propagation{{with_placements(l, src)}, Layout(l.mesh(), dst, out)};
}

Layout partials_replicated(const Layout& l) {
  Placements ps = l.placements();
  for (auto& q : ps)
    if (q.is_partial()) q = Replicate();
  return with_placements(l, std::move(ps));
}

Propagation propagate_like(const std::string& /*op_name*/, const ArgLayout& in) {
  return Propagation{{*in.layout}, partials_replicated(*in.layout)};
}

Propagation propagate_expand(const std::string& op_name, const ArgLayout& in,
                             const std::vector<int64_t>& size) {
  auto where = [&] { return describe_args(op_name, {in}) + " to size " + shape_to_string(size); };
  const Layout& l = *in.layout;
  HYPER_CHECK_IMPLEMENTED(!l.is_ragged(), where(), ": expand of a RaggedShard DTensor (fail-closed)");
  const int64_t rank = static_cast<int64_t>(l.shape().size());
  const int64_t n = static_cast<int64_t>(size.size());
  HYPER_CHECK_VALUE(n >= rank, where(), ": fewer sizes than the tensor's ", rank, " dims");
  Shape out(size.begin(), size.end());
  for (int64_t d = 0; d < n; ++d) {
    const int64_t k = d - (n - rank);
    if (k < 0) {
      HYPER_CHECK_VALUE(out[d] >= 0, where(), ": size ", out[d], " for a new leading dim");
      continue;
    }
    if (out[d] == -1) out[d] = l.shape()[k];
    HYPER_CHECK_VALUE(out[d] == l.shape()[k] || l.shape()[k] == 1, where(), ": size ", out[d],
                      " at dim ", d, " does not match ", l.shape()[k]);
  }
  Placements ps = l.placements();
  for (auto& q : ps)
    if (q.is_shard()) {
      const int64_t d = q.dim() + (n - rank);
      HYPER_CHECK_IMPLEMENTED(out[d] == l.shape()[q.dim()], where(), ": expand of sharded dim ",
                              q.dim(), " is not implemented");
      q = Shard(d);
    }
  return Propagation{{l}, Layout(l.mesh(), ps, out)};
}


}  // namespace hyper::dispatch
