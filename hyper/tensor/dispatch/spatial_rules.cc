// Torch-free sharding rule of aten::convolution (see spatial_rules.h).
#include "hyper/tensor/dispatch/spatial_rules.h"

#include <limits>
#include <map>
#include <mutex>
#include <utility>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/matmul_rules.h"

namespace hyper::dispatch {
namespace {

struct Strategy {
  Placement in, w, bias, out;
};

/// `v` of one element expanded to `k` (ATen's expand_param_if_needed), else checked to have k.
std::vector<int64_t> expanded(const std::string& where, const char* name,
                              const std::vector<int64_t>& v, int64_t k) {
  if (v.size() == 1) return std::vector<int64_t>(static_cast<size_t>(k), v[0]);
  HYPER_CHECK_VALUE(static_cast<int64_t>(v.size()) == k, where, ": ", name, " has ", v.size(),
                    " values, expected ", k, " (one per spatial dim) or 1");
  return v;
}

std::string key_of(const std::string& op, const std::vector<ArgLayout>& args, const ConvParams& c) {
  std::string key = op;
  for (const auto& a : args)
    key += "|" + (a.layout ? a.layout->to_string() : "plain " + shape_to_string(a.shape));
  auto list = [&](const std::vector<int64_t>& v) { key += "|" + shape_to_string(v); };
  list(c.stride);
  list(c.padding);
  list(c.dilation);
  list(c.output_padding);
  key += c.transposed ? "|T" : "|N";
  key += "|" + std::to_string(c.groups);
  return key;
}

Propagation compute(const std::string& op_name, const std::vector<ArgLayout>& given,
                    const ConvParams& c) {
  auto where = [&] { return describe_args(op_name, given); };
  std::vector<ArgLayout> args = given;
  const Layout* mesh_of = nullptr;
  for (const auto& x : args)
    if (x.layout && !mesh_of) mesh_of = &*x.layout;
  HYPER_CHECK_INTERNAL(mesh_of != nullptr, where(), ": no DTensor operand");
  const MeshTopology mesh = mesh_of->mesh();
  for (auto& x : args) {
    if (!x.layout) x.layout = Layout(mesh, Placements(mesh.ndim(), Replicate()), x.shape);
    HYPER_CHECK_IMPLEMENTED(!x.layout->is_ragged(), where(),
                            ": RaggedShard operands of a convolution are not implemented "
                            "(fail-closed)");
    HYPER_CHECK_VALUE(x.layout->mesh() == mesh, where(), ": DTensor operands on different meshes");
  }
  const Shape& si = args[0].shape;
  const Shape& sw = args[1].shape;
  const Shape out = conv_output_shape(where(), si, sw, c);
  if (args.size() == 3) {  // ATen checks the bias in each rank's local convolution: too late
    const Shape& sb = args[2].shape;
    const int64_t cout = out[si.size() == sw.size() ? 1 : 0];
    HYPER_CHECK_VALUE(sb.size() == 1 && sb[0] == cout, where(), ": given weight of size ",
                      shape_to_string(sw), ", expected bias to be 1-dimensional with ", cout,
                      " elements, but got bias of size ", shape_to_string(sb));
  }
  const bool batched = si.size() == sw.size();
  const int64_t ch = batched ? 1 : 0;               // the channel dim of input and output
  const int64_t w_out = c.transposed ? 1 : 0;       // the weight's output-channel dim
  const int64_t w_in = c.transposed ? 0 : 1;        // the weight's input-channel dim
  const bool has_bias = args.size() == 3;
  const int64_t ndim = mesh.ndim();

  std::vector<std::vector<Strategy>> cand(static_cast<size_t>(ndim));
  for (int64_t m = 0; m < ndim; ++m) {
    auto& s = cand[static_cast<size_t>(m)];
    s.push_back({Replicate(), Replicate(), Replicate(), Replicate()});
    if (batched) s.push_back({Shard(0), Replicate(), Replicate(), Shard(0)});
    if (c.groups == 1) {
      s.push_back({Replicate(), Shard(w_out), Shard(0), Shard(ch)});
      s.push_back({Shard(ch), Shard(w_in), Partial("sum"), Partial("sum")});
    } else {  // whole groups per rank: the weight's dim 0 is grouped in both forms
      s.push_back({Shard(ch), Shard(0), Shard(0), Shard(ch)});
    }
    const Placement& pi = args[0].layout->placements()[static_cast<size_t>(m)];
    if (pi.is_partial() && pi.reduce_op() == "sum")
      s.push_back({pi, Replicate(), Partial("sum"), Partial("sum")});
  }

  // Memoised cost of bringing argument i to placements ps (nullopt: the plan is refused).
  std::vector<std::map<std::string, std::optional<int64_t>>> memo(args.size());
  auto cost_of = [&](size_t i, const Placements& ps) -> std::optional<int64_t> {
    const Layout& from = *args[i].layout;
    const Layout to(mesh, ps, from.shape());
    auto [it, fresh] = memo[i].emplace(to.to_string(), std::nullopt);
    if (fresh) {
      try {
        it->second = redistribution_cost(from, to) * args[i].element_size;
      } catch (const NotImplementedError&) {
        it->second = std::nullopt;
      }
    }
    return it->second;
  };
  // Every rank's local channels must convolve with its local groups (conv_local_groups):
  // whole groups, the same groups in input, weight and output (their chunks are cut
  // separately: 3 input channels of 3 groups on 2 ranks are 2 + 1, 12 output channels 6 + 6,
  // which splits group 1), and not 0 channels, which ATen refuses.
  const int64_t per_group = si[static_cast<size_t>(ch)] / c.groups;
  const int64_t out_per_group = out[static_cast<size_t>(ch)] / c.groups;
  auto convolves = [&](const Placements& ti, const Placements& tw, const Placements& to) {
    const Layout li(mesh, ti, si), lw(mesh, tw, sw), lo(mesh, to, out);
    for (int64_t r = 0; r < mesh.size(); ++r) {
      const Box bi = li.local_box(r), bw = lw.local_box(r), bo = lo.local_box(r);
      const Shape& a = bi.sizes;
      const Shape& w = bw.sizes;
      const Shape& o = bo.sizes;
      if (c.groups > 1) {
        if (per_group == 0 || a[ch] % per_group != 0 || bi.offsets[ch] % per_group != 0) return false;
        const int64_t first = bi.offsets[ch] / per_group, g = a[ch] / per_group;
        // The output's (and a non-transposed weight's) channels: the same groups.
        if (bo.offsets[ch] != first * out_per_group || o[ch] != g * out_per_group) return false;
        if (!c.transposed && (bw.offsets[0] != bo.offsets[ch] || w[0] != o[ch])) return false;
        if (c.transposed && (bw.offsets[0] != bi.offsets[ch] || w[0] != a[ch])) return false;
      }
      const int64_t g = conv_local_groups(c.groups, a[ch], per_group);
      const int64_t cin = c.transposed ? w[0] : w[1] * g;
      const int64_t cout = c.transposed ? w[1] * g : w[0];
      if (g == 0 || a[ch] != cin || o[ch] != cout || cin == 0 || cout == 0) return false;
    }
    return true;
  };
  auto targets = [&](const std::vector<size_t>& pick) {
    std::vector<Placements> t(4, Placements(static_cast<size_t>(ndim)));
    for (int64_t m = 0; m < ndim; ++m) {
      const Strategy& s = cand[static_cast<size_t>(m)][pick[static_cast<size_t>(m)]];
      t[0][m] = s.in;
      t[1][m] = s.w;
      t[2][m] = s.bias;
      t[3][m] = s.out;
    }
    return t;
  };
  std::vector<size_t> pick(static_cast<size_t>(ndim), 0), best;
  std::pair<int64_t, int64_t> best_cost{std::numeric_limits<int64_t>::max(), 0};
  while (true) {
    const std::vector<Placements> t = targets(pick);
    std::optional<int64_t> total = 0;
    int64_t collectives = 0;
    for (size_t i = 0; i < args.size() && total; ++i) {
      const auto k = cost_of(i, t[i]);
      total = k ? std::optional<int64_t>(*total + *k) : std::nullopt;
      if (k && *k > 0) ++collectives;
    }
    if (total && std::make_pair(*total, collectives) < best_cost && convolves(t[0], t[1], t[3])) {
      best_cost = {*total, collectives};
      best = pick;
    }
    int64_t m = ndim - 1;  // odometer: the last mesh dim varies fastest
    while (m >= 0 && ++pick[static_cast<size_t>(m)] == cand[static_cast<size_t>(m)].size())
      pick[static_cast<size_t>(m--)] = 0;
    if (m < 0) break;
  }
  HYPER_CHECK_INTERNAL(!best.empty(), where(), ": no strategy can redistribute the operands");
  const std::vector<Placements> t = targets(best);
  Propagation p{std::vector<std::optional<Layout>>(args.size()), Layout(mesh, t[3], out)};
  p.inputs[0] = Layout(mesh, t[0], si);
  p.inputs[1] = Layout(mesh, t[1], sw);
  if (has_bias) p.inputs[2] = Layout(mesh, t[2], args[2].shape);
  return p;
}

}  // namespace

int64_t conv_local_groups(int64_t groups, int64_t local_in_channels, int64_t per_group) {
  return groups == 1 ? 1 : local_in_channels / per_group;
}

Shape conv_output_shape(const std::string& where, const Shape& in, const Shape& w,
                        const ConvParams& c) {
  const int64_t wd = static_cast<int64_t>(w.size());
  HYPER_CHECK_VALUE(wd >= 3, where, ": the weight ", shape_to_string(w),
                    " needs at least 3 dims (out channels, in channels, kernel)");
  const int64_t k = wd - 2;
  const int64_t id = static_cast<int64_t>(in.size());
  HYPER_CHECK_VALUE(id == wd || id == wd - 1, where, ": expected a ", wd - 1, "-D (unbatched) or ",
                    wd, "-D (batched) input for a weight of ", wd, " dims, got ",
                    shape_to_string(in));
  const bool batched = id == wd;
  const int64_t ch = batched ? 1 : 0;
  HYPER_CHECK_VALUE(c.groups > 0, where, ": groups must be positive, got ", c.groups);
  const std::vector<int64_t> stride = expanded(where, "stride", c.stride, k);
  const std::vector<int64_t> padding = expanded(where, "padding", c.padding, k);
  const std::vector<int64_t> dilation = expanded(where, "dilation", c.dilation, k);
  const std::vector<int64_t> out_pad =
      c.transposed ? expanded(where, "output_padding", c.output_padding, k)
                   : std::vector<int64_t>(static_cast<size_t>(k), 0);
  int64_t cout = 0;
  if (c.transposed) {
    HYPER_CHECK_VALUE(w[0] % c.groups == 0, where, ": the weight's ", w[0],
                      " input channels are not divisible by groups=", c.groups);
    HYPER_CHECK_VALUE(in[ch] == w[0], where, ": the input has ", in[ch],
                      " channels, the transposed weight ", shape_to_string(w), " expects ", w[0]);
    cout = w[1] * c.groups;
  } else {
    HYPER_CHECK_VALUE(w[0] % c.groups == 0, where, ": the weight's ", w[0],
                      " output channels are not divisible by groups=", c.groups);
    HYPER_CHECK_VALUE(in[ch] == w[1] * c.groups, where, ": the input has ", in[ch],
                      " channels, the weight ", shape_to_string(w), " with groups=", c.groups,
                      " expects ", w[1] * c.groups);
    cout = w[0];
  }
  Shape out;
  if (batched) out.push_back(in[0]);
  out.push_back(cout);
  for (int64_t d = 0; d < k; ++d) {
    const auto u = static_cast<size_t>(d);
    HYPER_CHECK_VALUE(stride[u] > 0 && dilation[u] > 0 && padding[u] >= 0, where,
                      ": stride ", stride[u], ", dilation ", dilation[u], " and padding ",
                      padding[u], " of spatial dim ", d, " must be > 0, > 0 and >= 0");
    const int64_t i = in[static_cast<size_t>(ch + 1 + d)];
    const int64_t span = dilation[u] * (w[static_cast<size_t>(2 + d)] - 1) + 1;
    int64_t o = 0;
    if (c.transposed) {
      HYPER_CHECK_VALUE(out_pad[u] >= 0 && (out_pad[u] < stride[u] || out_pad[u] < dilation[u]),
                        where, ": output_padding ", out_pad[u], " of spatial dim ", d,
                        " must be smaller than stride ", stride[u], " or dilation ", dilation[u]);
      o = (i - 1) * stride[u] - 2 * padding[u] + span + out_pad[u];
    } else {
      HYPER_CHECK_VALUE(i + 2 * padding[u] >= span, where, ": the kernel spans ", span,
                        " elements of spatial dim ", d, ", more than the padded input's ",
                        i + 2 * padding[u]);
      o = (i + 2 * padding[u] - span) / stride[u] + 1;
    }
    HYPER_CHECK_VALUE(o > 0, where, ": the output of spatial dim ", d, " would have size ", o);
    out.push_back(o);
  }
  return out;
}

Propagation propagate_convolution(const std::string& op_name, const ArgLayout& input,
                                  const ArgLayout& weight, const std::optional<ArgLayout>& bias,
                                  const ConvParams& params) {
  std::vector<ArgLayout> args = {input, weight};
  if (bias) args.push_back(*bias);
  // The choice costs a few plans per candidate; the same call repeats in a training loop.
  static std::mutex mu;
  static std::map<std::string, Propagation> cache;
  const std::string key = key_of(op_name, args, params);
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  Propagation p = compute(op_name, args, params);
  std::lock_guard<std::mutex> g(mu);
  if (cache.size() >= 4096) cache.clear();
  cache.emplace(key, p);
  return p;
}

}  // namespace hyper::dispatch
