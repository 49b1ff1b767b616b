// Torch-free sharding rules of the matmul family (see matmul_rules.h).
#include "hyper/tensor/dispatch/matmul_rules.h"

#include <algorithm>
#include <limits>
#include <utility>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/core/redistribute_plan.h"

namespace hyper::dispatch {
namespace {

struct Strategy {
  Placement a, b, out;
};

Propagation compute(const std::string& op_name, const std::vector<ArgLayout>& given,
                    int64_t nb, bool has_bias) {
  auto where = [&] { return describe_args(op_name, given); };
  const size_t want = has_bias ? 3 : 2;
  HYPER_CHECK_INTERNAL(given.size() == want, where(), ": expected ", want, " tensor arguments");
  // A plain operand is Replicate (API.md): every rank holds the global value; a Shard or
  // Partial target is cut from it locally (fallback.cc), so R -> S / R -> P cost nothing.
  std::vector<ArgLayout> args = given;
  const Layout* mesh_of = nullptr;
  for (const auto& x : given)
    if (x.layout && !mesh_of) mesh_of = &*x.layout;
  HYPER_CHECK_INTERNAL(mesh_of != nullptr, where(), ": no DTensor operand");
  for (auto& x : args)
    if (!x.layout)
      x.layout = Layout(mesh_of->mesh(), Placements(mesh_of->mesh().ndim(), Replicate()), x.shape);
  for (const auto& x : args) {
    HYPER_CHECK_IMPLEMENTED(!x.layout->is_ragged(), where(),
                            ": RaggedShard operands of a matmul are not implemented (fail-closed)");
    HYPER_CHECK_VALUE(x.layout->mesh() == args[0].layout->mesh(), where(),
                      ": DTensor operands on different meshes");
  }
  const size_t ia = has_bias ? 1 : 0, ib = ia + 1;
  const Layout& A = *args[ia].layout;
  const Layout& B = *args[ib].layout;
  const Shape& sa = A.shape();
  const Shape& sb = B.shape();
  const size_t r = static_cast<size_t>(nb + 2);
  HYPER_CHECK_VALUE(sa.size() == r && sb.size() == r, where(), ": expects ", r,
                    "-D operands, got ", shape_to_string(sa), " and ", shape_to_string(sb));
  for (int64_t d = 0; d < nb; ++d)
    HYPER_CHECK_VALUE(sa[d] == sb[d], where(), ": batch sizes differ at dim ", d, " (", sa[d],
                      " vs ", sb[d], ")");
  HYPER_CHECK_VALUE(sa[nb + 1] == sb[nb], where(), ": shapes ", shape_to_string(sa), " and ",
                    shape_to_string(sb), " cannot be multiplied (", sa[nb + 1], " vs ", sb[nb], ")");
  Shape out(sa.begin(), sa.begin() + nb);
  out.push_back(sa[nb]);
  out.push_back(sb[nb + 1]);
  if (has_bias) {
    const Shape& s = args[0].shape;
    HYPER_CHECK_VALUE(s.size() <= out.size(), where(), ": the bias ", shape_to_string(s),
                      " has more dims than the result ", shape_to_string(out));
    for (size_t d = 0; d < s.size(); ++d) {
      const int64_t o = out[out.size() - s.size() + d];
      HYPER_CHECK_VALUE(s[d] == o || s[d] == 1, where(), ": the bias ", shape_to_string(s),
                        " does not broadcast to the result ", shape_to_string(out));
    }
  }

  const MeshTopology& mesh = A.mesh();
  const int64_t ndim = mesh.ndim();
  // Candidates per mesh dim, in tie-break order.
  std::vector<std::vector<Strategy>> cand(ndim);
  for (int64_t m = 0; m < ndim; ++m) {
    auto& c = cand[m];
    c.push_back({Replicate(), Replicate(), Replicate()});
    for (int64_t d = 0; d < nb; ++d) c.push_back({Shard(d), Shard(d), Shard(d)});
    c.push_back({Shard(nb), Replicate(), Shard(nb)});
    c.push_back({Replicate(), Shard(nb + 1), Shard(nb + 1)});
    c.push_back({Shard(nb + 1), Shard(nb), Partial("sum")});
    const Placement& pa = A.placements()[m];
    const Placement& pb = B.placements()[m];
    if (linear_partial(pa)) c.push_back({pa, Replicate(), pa});
    if (linear_partial(pb)) c.push_back({Replicate(), pb, pb});
  }
  // The bias's target placement on a mesh dim for an output placement.
  auto bias_target = [&](const Placement& o) -> Placement {
    if (o.is_partial()) return o;
    if (o.is_shard()) {
      const Shape& s = args[0].shape;
      const int64_t k = o.dim() - static_cast<int64_t>(out.size() - s.size());
      if (k >= 0 && s[k] == out[o.dim()]) return Shard(k);
    }
    return Replicate();
  };

  // Memoised cost of bringing argument i to placements ps (nullopt: the plan is refused).
  std::vector<std::map<std::string, std::optional<int64_t>>> memo(args.size());
  auto cost_of = [&](size_t i, const Placements& ps) -> std::optional<int64_t> {
    const Layout& from = *args[i].layout;
    const Layout to(from.mesh(), ps, from.shape());
    auto [it, fresh] = memo[i].emplace(to.to_string(), std::nullopt);
    if (fresh) {
      try {
        it->second = redistribution_cost(from, to);
      } catch (const NotImplementedError&) {
        it->second = std::nullopt;  // e.g. Partial(max) -> Partial(sum): not a candidate
      }
    }
    return it->second;
  };

  // The reduction a Partial output owes when an operand is Partial on that mesh dim already:
  // a candidate that reduces the operand now pays for it, one that leaves the output Partial
  // moves the same reduction to whoever reads the output whole (owed_reduction_cost). Not
  // charged when no operand is Partial: S(1) x S(0) -> P(sum) stays the choice of a Rowwise
  // product, as in PyTorch.
  // The cheapest candidate by (bytes, collectives): bytes sent, including the reduction a
  // Partial output owes (above), then the number of redistributions (each is a collective with its
  // own latency), then candidate order. (Counting the bytes sent now only, `P(sum) x S(1)`
  // (the gradient reaching a Rowwise layer of plain modules) would gather the weight and pass
  // the Partial on (half the bytes now, a full product on every rank, a reduction later)
  // where reducing the Partial input first costs no more bytes in one collective.)
  std::vector<size_t> pick(ndim, 0), best;
  std::pair<int64_t, int64_t> best_cost{std::numeric_limits<int64_t>::max(), 0};
  while (true) {
    Placements ta(ndim), tb(ndim), tc(ndim), to(ndim);
    for (int64_t m = 0; m < ndim; ++m) {
      const Strategy& s = cand[m][pick[m]];
      ta[m] = s.a;
      tb[m] = s.b;
      to[m] = s.out;
      tc[m] = bias_target(s.out);
    }
    std::optional<int64_t> total = 0;
    int64_t collectives = 0;
    auto add = [&](size_t i, const Placements& ps) {
      const auto c = cost_of(i, ps);
      total = (total && c) ? std::optional<int64_t>(*total + *c) : std::nullopt;
      if (c && *c > 0) ++collectives;
    };
    add(ia, ta);
    add(ib, tb);
    if (has_bias && total) add(0, tc);
    std::vector<int64_t> owed;
    for (int64_t m = 0; m < ndim; ++m)
      if (to[m].is_partial() && (A.placements()[m].is_partial() || B.placements()[m].is_partial()))
        owed.push_back(m);
    if (total && !owed.empty()) {
      const int64_t c = owed_reduction_cost(Layout(mesh, to, out), owed);
      *total += c;
      if (c > 0) ++collectives;
    }
    if (total && std::make_pair(*total, collectives) < best_cost) {
      best_cost = {*total, collectives};
      best = pick;
    }
    int64_t m = ndim - 1;  // odometer: the last mesh dim varies fastest
    while (m >= 0 && ++pick[m] == cand[m].size()) pick[m--] = 0;
    if (m < 0) break;
  }
  HYPER_CHECK_INTERNAL(!best.empty(), where(), ": no strategy can redistribute the operands");

  Placements ta(ndim), tb(ndim), to(ndim), tc(ndim);
  for (int64_t m = 0; m < ndim; ++m) {
    const Strategy& s = cand[m][best[m]];
    ta[m] = s.a;
    tb[m] = s.b;
    to[m] = s.out;
    tc[m] = bias_target(s.out);
  }
  Propagation p{std::vector<std::optional<Layout>>(args.size()), Layout(mesh, to, out)};
  p.inputs[ia] = Layout(mesh, ta, sa);
  p.inputs[ib] = Layout(mesh, tb, sb);
  if (has_bias) p.inputs[0] = Layout(mesh, tc, args[0].shape);
  // Every rank's local pieces must multiply to its local piece of the result.
  for (int64_t i = 0; i < mesh.size(); ++i) {
    const Shape la = p.inputs[ia]->local_shape(i), lb = p.inputs[ib]->local_shape(i);
    const Shape lo = p.output.local_shape(i);
    HYPER_CHECK_INTERNAL(la[nb + 1] == lb[nb] && la[nb] == lo[nb] && lb[nb + 1] == lo[nb + 1],
                         where(), ": rank ", i, " local shapes ", shape_to_string(la), " x ",
                         shape_to_string(lb), " -> ", shape_to_string(lo), " do not contract");
  }
  return p;
}

}  // namespace

int64_t redistribution_cost(const Layout& from, const Layout& to) {
  if (from == to) return 0;
  const RedistributePlan plan = plan_redistribute(from, to);
  if (plan.all_reduce_dims.empty()) return plan.total_sent();
  // A pure Partial -> Replicate runs as one all-reduce per reduced mesh dim (plan_steps.h),
  // which the plan's pieces (every contribution sent to every other member: k-1 tensors per
  // rank) overstate for k > 2: a ring all-reduce sends 2(k-1)/k of the local tensor per rank.
  int64_t total = 0;
  for (int64_t i = 0; i < from.mesh().size(); ++i) {
    int64_t local = 1;
    for (const int64_t e : from.local_shape(i)) local *= e;
    for (const int64_t d : plan.all_reduce_dims) {
      const int64_t k = from.mesh().shape()[d];
      total += 2 * (k - 1) * local / k;
    }
  }
  return total;
}

int64_t owed_reduction_cost(const Layout& partial, const std::vector<int64_t>& mesh_dims) {
  Placements reduced = partial.placements();
  const Shape& s = partial.shape();
  for (const int64_t m : mesh_dims) {
    HYPER_CHECK_INTERNAL(m >= 0 && m < static_cast<int64_t>(reduced.size()) && reduced[m].is_partial(),
                         "owed_reduction_cost: mesh dim ", m, " of ", partial.to_string(),
                         " is not Partial");
    const bool scatter = !s.empty() && s[0] >= partial.mesh().shape()[m];
    reduced[m] = scatter ? Placement(Shard(0)) : Placement(Replicate());
  }
  try {
    return redistribution_cost(partial, Layout(partial.mesh(), reduced, s));
  } catch (const NotImplementedError&) {
    return 0;
  }
}

Propagation propagate_matmul(const std::string& op_name, const std::vector<ArgLayout>& args,
                             int64_t batch_dims, bool has_bias) {
  // The choice costs a few plans per candidate; the same call repeats in a training loop.
  static std::mutex mu;
  static std::map<std::string, Propagation> cache;
  std::string key = op_name;
  for (const auto& a : args)
    key += "|" + (a.layout ? a.layout->to_string() : "plain " + shape_to_string(a.shape));
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Propagation p = compute(op_name, args, batch_dims, has_bias);
  std::lock_guard<std::mutex> g(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, p);
  return p;
}

namespace {

/// The batch dims (all but the last two) of `t` that some mesh dim shards.
std::vector<int64_t> sharded_batch_dims(const ArgLayout& t) {
  std::vector<int64_t> out;
  if (!t.layout) return out;
  const int64_t nb = static_cast<int64_t>(t.shape.size()) - 2;
  for (const Placement& p : t.layout->placements())
    if (p.is_shard() && p.dim() < nb && std::find(out.begin(), out.end(), p.dim()) == out.end())
      out.push_back(p.dim());
  return out;
}

}  // namespace

std::vector<int64_t> sharded_batch_dims(const ArgLayout& a, const ArgLayout& b) {
  std::vector<int64_t> sharded = sharded_batch_dims(a);
  for (int64_t d : sharded_batch_dims(b))
    if (std::find(sharded.begin(), sharded.end(), d) == sharded.end()) sharded.push_back(d);
  std::sort(sharded.begin(), sharded.end());
  return sharded;
}

std::vector<int64_t> batched_matmul_order(const ArgLayout& a, const ArgLayout& b) {
  const int64_t rank = static_cast<int64_t>(a.shape.size());
  if (rank < 4 || rank != static_cast<int64_t>(b.shape.size())) return {};
  const int64_t nb = rank - 2;
  for (int64_t d = 0; d < nb; ++d)
    if (a.shape[d] != b.shape[d]) return {};
  const std::vector<int64_t> sharded = sharded_batch_dims(a, b);
  // Only dim 0 sharded: LibTorch's fold keeps that Shard already.
  if (sharded.empty() || (sharded.size() == 1 && sharded[0] == 0)) return {};
  std::vector<int64_t> order = sharded;
  for (int64_t d = 0; d < nb; ++d)
    if (std::find(sharded.begin(), sharded.end(), d) == sharded.end()) order.push_back(d);
  order.push_back(nb);
  order.push_back(nb + 1);
  return order;
}

std::optional<Placements> batch_local_placements(const ArgLayout& a, const ArgLayout& b) {
  const ArgLayout& ref = a.layout ? a : b;
  if (!ref.layout) return std::nullopt;
  const int64_t nb = static_cast<int64_t>(a.shape.size()) - 2;
  const Placements none(static_cast<size_t>(ref.layout->mesh().ndim()), Replicate());
  auto placements = [&](const ArgLayout& t) -> std::optional<Placements> {
    if (!t.layout) return none;
    if (t.layout->is_ragged() || !(t.layout->mesh() == ref.layout->mesh())) return std::nullopt;
    return t.layout->placements();
  };
  const auto pa = placements(a), pb = placements(b);
  if (!pa || !pb) return std::nullopt;
  Placements ps = none;
  for (size_t m = 0; m < ps.size(); ++m) {
    const Placement &x = (*pa)[m], &y = (*pb)[m];
    if (x.is_partial() || y.is_partial()) return std::nullopt;
    if ((x.is_shard() && x.dim() >= nb) || (y.is_shard() && y.dim() >= nb)) return std::nullopt;
    if (x.is_shard() && y.is_shard() && !(x == y)) return std::nullopt;
    if (x.is_shard()) ps[m] = x;
    else if (y.is_shard()) ps[m] = y;
  }
  return ps;
}

}  // namespace hyper::dispatch
