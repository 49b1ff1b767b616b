#include "hyper/tp/style.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <any>
#include <sstream>
#include <utility>

#include "hyper/comm/collectives.h"
#include "hyper/core/errors.h"
#include "hyper/nn/hookable.h"
#include "hyper/nn/modules.h"
#include "hyper/tensor/dtensor.h"
#include "hyper/tensor/redistribute.h"
#include "hyper/tp/internal/sharding.h"
#include "hyper/trace/observer.h"

namespace hyper::tp {
namespace {

using nn::Tensors;

/// "hyper::nn::Linear" from the module's text form.
std::string type_label(const torch::nn::Module& m) {
  std::ostringstream os;
  m.pretty_print(os);
  std::string s = os.str();
  const auto paren = s.find('(');
  return paren == std::string::npos ? s : s.substr(0, paren);
}

std::string bool_str(bool b) { return b ? "true" : "false"; }

Placement normalize(const Placement& p, int64_t ndim) {
  if (p.is_shard() && p.dim() < 0) return Shard(p.dim() + ndim);
  return p;
}

/// torch.chunk rows of rank r: [start, end).
std::pair<int64_t, int64_t> chunk_range(int64_t size, int64_t n, int64_t r) {
  const int64_t chunk = (size + n - 1) / n;
  const int64_t start = std::min(size, r * chunk);
  return {start, std::min(size, start + chunk)};
}

void check_local_output(bool use_local_output, const std::string& style, const std::string& name) {
  HYPER_CHECK_IMPLEMENTED(use_local_output, style, " on '", name,
                          "': use_local_output=false is not available in C++ (module "
                          "forwards return at::Tensor, so outputs are always local tensors)");
}

/// The global shape of `local` sharded as `p` (Shard of a dim before the last) when it is not
/// known: one rank's local size along that dim says nothing of the others' under uneven
/// (torch.chunk) shards, and ranks inferring "even" would disagree, so the sizes are
/// exchanged (one all_gather_v of an int64 per rank over the 1-D mesh). std::nullopt for
/// other placements (their shape is known or inferred alike on every rank).
std::optional<std::vector<int64_t>> exchanged_shape(const at::Tensor& local, const Placement& p,
                                                    const DeviceMesh& mesh) {
  if (!p.is_shard() || p.dim() >= local.dim() - 1) return std::nullopt;
  const comm::Group group = mesh.get_group(0);
  const at::Tensor mine = at::full({1}, local.size(p.dim()), at::kLong);
  const at::Tensor all = comm::all_gather_v(
      mine, group, std::vector<int64_t>(static_cast<std::size_t>(group.size()), 1));
  auto shape = local.sizes().vec();
  shape[p.dim()] = all.sum().item<int64_t>();
  return shape;
}

/// `local` laid out as `from` → `to` on the mesh, as a local tensor. `shape` is the global
/// shape when known (uneven shards); `grad_placements` as DTensor::to_local.
at::Tensor relayout(const at::Tensor& local, const StyleContext& ctx, const Placement& from_in,
                    const Placement& to_in, std::optional<std::vector<int64_t>> shape,
                    bool async_op, std::optional<Placements> grad_placements,
                    const char* boundary) {
  const Placement from = normalize(from_in, local.dim());
  const Placement to = normalize(to_in, local.dim());
  if (from == to && !grad_placements) return local;  // nothing to move, default gradient
  if (!shape && !(from == to)) shape = exchanged_shape(local, from, ctx.mesh);
  DTensor dt = DTensor::from_local(local, ctx.mesh, {from}, std::move(shape));
  if (!(from == to)) {
    // The region spans issue to completion: it ends when the (possibly pending) result is
    // waited for, wherever that happens.
    auto region = std::make_shared<trace::Region>(trace::Region::collective(
        ctx.observer, ctx.name + ": " + boundary + " " + from.to_string() + "->" + to.to_string(),
        ctx.mesh.get_rank()));
    dt = dt.redistribute(ctx.mesh, {to}, async_op);
    dt.on_ready([region] { region->end(); });
  }
  return dt.to_local(std::move(grad_placements));
}

/// Global shape of a local tensor sharded as `p` when the sharded dim is the last one and
/// its global size is `last_dim_size`; std::nullopt (even shards inferred) otherwise.
std::optional<std::vector<int64_t>> shape_if_last(const at::Tensor& local, const Placement& p,
                                                  std::optional<int64_t> last_dim_size) {
  const Placement n = normalize(p, local.dim());
  if (!last_dim_size || !n.is_shard() || n.dim() != local.dim() - 1) return std::nullopt;
  auto shape = local.sizes().vec();
  shape.back() = *last_dim_size;
  return shape;
}

internal::ModuleSharding& sharding_of(nn::HookableModule& module, const std::string& style) {
  if (module.attribute(internal::kParamShardingKey) == nullptr) {
    internal::ModuleSharding s;
    s.style = style;
    module.set_attribute(internal::kParamShardingKey, std::move(s));
  }
  // std::any_cast on a non-const pointer gives mutable access.
  auto* any = const_cast<std::any*>(module.attribute(internal::kParamShardingKey));
  return *std::any_cast<internal::ModuleSharding>(any);
}

/// Replaces parameter `name` by its local shard under `placement` (in place) and records
/// the sharding. Absent parameters (bias=false) are skipped.
void shard_parameter(nn::HookableModule& module, const std::string& style, const std::string& name,
                     const Placement& placement, const DeviceMesh& mesh) {
  auto params = module.as_module().named_parameters(/*recurse=*/false);
  const at::Tensor* param = params.find(name);
  if (param == nullptr || !param->defined()) return;
  at::NoGradGuard no_grad;
  const at::Tensor full = param->detach();
  internal::ParamSharding rec{mesh, {placement}, full.sizes().vec()};
  if (!placement.is_replicate()) {
    at::Tensor local = distribute_tensor(full, mesh, {placement}).to_local().clone();
    module.set_parameter_data(name, local);
  }
  sharding_of(module, style).params[name] = std::move(rec);
}

// ------------------------------------------------------------------ fused Colwise Linear

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// What one ColwiseParallel Linear call needs in its autograd node.
struct ColwiseLinearState : torch::CustomClassHolder {
  StyleContext ctx;
  Layout in;       ///< the input as it arrives (global shape)
  Layout rep;      ///< Replicate: what the matmul uses
  Layout partial;  ///< Partial(sum): each rank's input gradient
  bool async_op = true;
  bool input_requires_grad = false;
  bool has_bias = false;  ///< without one, the node gets an empty placeholder tensor
  ColwiseLinearState(StyleContext c, Layout i, Layout r, Layout p, bool a, bool g, bool b)
      : ctx(std::move(c)), in(std::move(i)), rep(std::move(r)), partial(std::move(p)),
        async_op(a), input_requires_grad(g), has_bias(b) {}
};

/// y = linear(x as Replicate, weight shard, bias shard). Backward (Megatron-style): the
/// input gradient's partial sums are computed first and their collective (all_reduce for
/// a Replicate input, reduce-scatter for Shard(seq)) is issued; the weight and bias
/// gradients are computed while it is in flight; then it is waited for. With async_op
/// false the collective completes before the weight gradient: same operations, same values.
struct ColwiseLinearFn : public torch::autograd::Function<ColwiseLinearFn> {
  static at::Tensor forward(AutogradContext* actx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, c10::intrusive_ptr<ColwiseLinearState> st) {
    const StyleContext& c = st->ctx;
    actx->saved_data["state"] = c10::IValue::make_capsule(st);
    actx->saved_data["has_bias"] = st->has_bias;
    auto linear = [&](const at::Tensor& in) {
      return st->has_bias ? at::linear(in, weight, bias) : at::linear(in, weight);
    };
    if (st->in == st->rep) {
      actx->save_for_backward({x, weight});
      return linear(x);
    }
    const int rank = c.mesh.get_rank();
    const Placement& p = st->in.placements()[0];
    auto region = trace::Region::collective(c.observer, c.name + ": input " + p.to_string() + "->R",
                                            rank);
    comm::Work finish = redistribute_local_async(x, c.mesh, st->in, st->rep);
    // Input sharded along a leading dim (sequence parallel): this rank's rows of the output
    // need only its own rows of the input, so they are computed while the gather of the
    // others' rows is in flight (a collective matmul); the other rows follow the wait. With
    // async_op false the gather completes first; the operations, hence values, are the same.
    const bool split = p.is_shard() && p.dim() < x.dim() - 1;
    if (!split || !st->async_op) {
      at::Tensor xr_sync = finish.wait();
      region.end();
      actx->save_for_backward({xr_sync, weight});
      if (!split) return linear(xr_sync);
      // This rank's rows from its own input rows: the same operation the async path runs.
      return assemble_rows(xr_sync, linear(x), p.dim(), st, linear);
    }
    at::Tensor y_own;
    {
      auto compute = trace::Region::compute(c.observer, c.name + ": own rows", rank);
      y_own = linear(x);
    }
    at::Tensor xr = finish.wait();
    region.end();
    actx->save_for_backward({xr, weight});
    return assemble_rows(xr, y_own, p.dim(), st, linear);
  }

  /// cat(linear(rows before ours), y_own, linear(rows after ours)) along `dim`.
  template <class Linear>
  static at::Tensor assemble_rows(const at::Tensor& xr, const at::Tensor& y_own, int64_t dim,
                                  const c10::intrusive_ptr<ColwiseLinearState>& st,
                                  const Linear& linear) {
    const Box box = st->in.local_box(mesh_index_of(st->ctx.mesh));
    const int64_t lo = box.offsets[dim], hi = lo + box.sizes[dim], n = xr.size(dim);
    std::vector<at::Tensor> parts;
    if (lo > 0) parts.push_back(linear(xr.narrow(dim, 0, lo)));
    parts.push_back(y_own);
    if (hi < n) parts.push_back(linear(xr.narrow(dim, hi, n - hi)));
    return parts.size() == 1 ? y_own : at::cat(parts, dim);
  }

  static variable_list backward(AutogradContext* actx, variable_list grads) {
    auto st = c10::static_intrusive_pointer_cast<ColwiseLinearState>(
        actx->saved_data["state"].toCapsule());
    const bool has_bias = actx->saved_data["has_bias"].toBool();
    const auto saved = actx->get_saved_variables();
    const at::Tensor& xr = saved[0];
    const at::Tensor& weight = saved[1];
    const at::Tensor gy = grads[0];
    if (!gy.defined()) return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const StyleContext& c = st->ctx;
    const int rank = c.mesh.get_rank();
    const std::string what =
        "input grad P->" + st->in.placements()[0].to_string();

    at::Tensor gx;
    std::optional<comm::Work> finish;
    trace::Region region;
    if (st->input_requires_grad) {
      const at::Tensor partial = gy.matmul(weight).contiguous();
      region = trace::Region::collective(c.observer, c.name + ": " + what, rank);
      finish = redistribute_local_async(partial, c.mesh, st->partial, st->in);
      if (!st->async_op) {
        gx = finish->wait();
        finish.reset();
        region.end();
      } else {
        finish = track_backward_collective(*finish);
      }
    }
    at::Tensor gw, gb;
    {
      auto compute = trace::Region::compute(c.observer, c.name + ": weight grad", rank);
      const at::Tensor gy2 = gy.reshape({-1, gy.size(-1)});
      gw = gy2.t().mm(xr.reshape({-1, xr.size(-1)}));
      if (has_bias) gb = gy2.sum(0);
    }
    if (finish) {
      gx = finish->wait();
      region.end();
    }
    return {gx, gw, gb, at::Tensor()};
  }
};

/// The core ColwiseParallel installs on a Linear: `x` arrives in `in` (global last dim
/// `in_global`).
at::Tensor colwise_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                          const StyleContext& c, const Placement& in_placement,
                          int64_t in_global, bool async_op) {
  const Placement in = normalize(in_placement, x.dim());
  auto shape = shape_if_last(x, in, in_global);
  if (!shape) shape = exchanged_shape(x, in, c.mesh);
  const DTensor dx = DTensor::from_local(x.detach(), c.mesh, {in}, shape);
  const Layout& l = dx.layout();
  auto st = c10::make_intrusive<ColwiseLinearState>(
      c, l, Layout(l.mesh(), {Replicate()}, l.shape()), Layout(l.mesh(), {Partial()}, l.shape()),
      async_op, x.requires_grad(), bias.defined());
  // A custom autograd function cannot take an undefined tensor (LibTorch 1.13).
  return ColwiseLinearFn::apply(x, weight, bias.defined() ? bias : at::empty({0}, weight.options()),
                                st);
}

/// Pre/post hooks reporting the module's forward as a compute region (none without an
/// observer).
void record_compute(nn::HookableModule& module, const StyleContext& ctx) {
  if (ctx.observer == nullptr) return;
  auto region = std::make_shared<trace::Region>();
  trace::Observer* observer = ctx.observer;
  const int rank = ctx.mesh.get_rank();
  const std::string name = ctx.name + ": forward";
  // Runs after the style's own pre-hook (registered later, appended) ...
  module.register_forward_pre_hook(
      [region, observer, rank, name](torch::nn::Module&, const Tensors&) -> std::optional<Tensors> {
        *region = trace::Region::compute(observer, name, rank);
        return std::nullopt;
      });
  // ... and before the style's post-hook (prepended).
  module.register_forward_hook(
      [region](torch::nn::Module&, const Tensors&, const at::Tensor&) -> std::optional<at::Tensor> {
        region->end();
        return std::nullopt;
      },
      /*prepend=*/true);
}

}  // namespace

// ------------------------------------------------------------------ ColwiseParallel

std::string ColwiseParallel::to_string() const {
  return "ColwiseParallel(input_layouts=" + input_layout_.to_string() +
         ", output_layouts=" + output_layout_.to_string() +
         ", use_local_output=" + bool_str(use_local_output_) + ", async_op=" + bool_str(async_op_) +
         ")";
}

void ColwiseParallel::apply(nn::HookableModule& module, const StyleContext& ctx) const {
  check_local_output(use_local_output_, "ColwiseParallel", ctx.name);
  auto& m = module.as_module();
  int64_t out_global = 0;
  std::optional<int64_t> in_global;
  nn::LinearImpl* linear = dynamic_cast<nn::LinearImpl*>(&m);
  if (linear != nullptr) {
    HYPER_CHECK_VALUE(!linear->has_core(), "ColwiseParallel on '", ctx.name,
                      "': the Linear is already parallelized");
    out_global = linear->options.out_features();
    in_global = linear->options.in_features();
    shard_parameter(module, to_string(), "weight", Shard(0), ctx.mesh);
    shard_parameter(module, to_string(), "bias", Shard(0), ctx.mesh);
  } else if (auto* emb = dynamic_cast<nn::EmbeddingImpl*>(&m)) {
    HYPER_CHECK_IMPLEMENTED(!emb->options.max_norm(), "ColwiseParallel on '", ctx.name,
                            "': Embedding with max_norm renormalizes whole rows, which a "
                            "column shard cannot do");
    out_global = emb->options.embedding_dim();
    shard_parameter(module, to_string(), "weight", Shard(1), ctx.mesh);
  } else {
    throw hyper::ValueError(hyper::internal::str_cat("ColwiseParallel on '", ctx.name,
                                                     "': supports hyper::nn::Linear and ",
                                                     "hyper::nn::Embedding, got ", type_label(m)));
  }
  const StyleContext c = ctx;
  const Placement in = input_layout_;
  const Placement out = output_layout_;
  const bool async = async_op_;
  if (linear != nullptr) {
    // The input's layout change and its gradient collective run inside the layer's own
    // autograd node (ColwiseLinearFn), overlapped with the weight gradient in backward.
    const int64_t in_features = *in_global;
    linear->set_core([c, in, in_features, async](const at::Tensor& x, const at::Tensor& w,
                                                  const at::Tensor& b) {
      return colwise_linear(x, w, b, c, in, in_features, async);
    });
  } else {
    // Embedding: the ids are used whole by every rank (integers: no gradient).
    module.register_forward_pre_hook(
        [c, in, async](torch::nn::Module&, const Tensors& inputs) -> std::optional<Tensors> {
          Tensors result = inputs;
          result[0] = relayout(inputs.at(0), c, in, Replicate(), std::nullopt, async,
                               std::nullopt, "input");
          return result;
        });
  }
  module.register_forward_hook([c, out, out_global, async](torch::nn::Module&, const Tensors&,
                                                          const at::Tensor& y) -> std::optional<at::Tensor> {
    auto shape = y.sizes().vec();
    shape.back() = out_global;
    return relayout(y, c, Shard(-1), out, shape, async, std::nullopt, "output");
  });
  record_compute(module, ctx);
}

// ------------------------------------------------------------------ RowwiseParallel

std::string RowwiseParallel::to_string() const {
  return "RowwiseParallel(input_layouts=" +
         (input_layout_ ? input_layout_->to_string() : std::string("default")) +
         ", output_layouts=" + output_layout_.to_string() +
         ", use_local_output=" + bool_str(use_local_output_) + ", async_op=" + bool_str(async_op_) +
         ")";
}

void RowwiseParallel::apply(nn::HookableModule& module, const StyleContext& ctx) const {
  check_local_output(use_local_output_, "RowwiseParallel", ctx.name);
  auto& m = module.as_module();
  const StyleContext c = ctx;
  const Placement out = output_layout_;
  const bool async = async_op_;
  if (auto* lin = dynamic_cast<nn::LinearImpl*>(&m)) {
    const Placement in = input_layout_.value_or(Shard(-1));
    const int64_t in_global = lin->options.in_features();
    const bool has_bias = lin->bias.defined();
    HYPER_CHECK_IMPLEMENTED(!(has_bias && out.is_shard() && (out.dim() == -1)),
                            "RowwiseParallel on '", ctx.name,
                            "': output_layouts Shard(-1) with a bias is not supported");
    shard_parameter(module, to_string(), "weight", Shard(1), ctx.mesh);
    shard_parameter(module, to_string(), "bias", Replicate(), ctx.mesh);
    // The bias is replicated: add it once, after the partial sums are reduced.
    lin->set_defer_bias(has_bias);
    module.register_forward_pre_hook([c, in, in_global, async](torch::nn::Module&,
                                                              const Tensors& inputs) -> std::optional<Tensors> {
      Tensors result = inputs;
      const at::Tensor& x = inputs.at(0);
      result[0] = relayout(x, c, in, Shard(-1), shape_if_last(x, in, in_global), async,
                           std::nullopt, "input");
      return result;
    });
    module.register_forward_hook([c, out, async](torch::nn::Module& mod, const Tensors&,
                                                 const at::Tensor& y) -> std::optional<at::Tensor> {
      at::Tensor r = relayout(y, c, Partial(), out, y.sizes().vec(), async, std::nullopt, "output");
      auto* l = mod.as<nn::LinearImpl>();
      if (l->bias.defined()) {
        at::Tensor bias = l->bias;
        if (!out.is_replicate()) {
          // Added to this rank's shard of the output only: its gradient is a partial sum.
          bias = DTensor::from_local(bias, c.mesh, {Replicate()}).to_local(Placements{Partial()});
        }
        r = r + bias;
      }
      return r;
    });
  } else if (auto* emb = dynamic_cast<nn::EmbeddingImpl*>(&m)) {
    const Placement in = input_layout_.value_or(Replicate());
    HYPER_CHECK_IMPLEMENTED(!emb->options.padding_idx() && !emb->options.max_norm(),
                            "RowwiseParallel on '", ctx.name,
                            "': Embedding with padding_idx or max_norm is not supported "
                            "when its rows are sharded");
    const int64_t n = ctx.mesh.size(0);
    const int64_t rows = emb->options.num_embeddings();
    const auto [start, end] = chunk_range(rows, n, ctx.mesh.get_local_rank(0));
    HYPER_CHECK_VALUE(end > start, "RowwiseParallel on '", ctx.name, "': num_embeddings ", rows,
                      " leaves rank ", ctx.mesh.get_local_rank(0), " of a mesh of ", n,
                      " without rows (torch.chunk semantics)");
    shard_parameter(module, to_string(), "weight", Shard(0), ctx.mesh);
    auto mask = std::make_shared<at::Tensor>();
    const int64_t lo = start, hi = end;
    module.register_forward_pre_hook([c, in, async, mask, lo, hi](torch::nn::Module&,
                                                                 const Tensors& inputs) -> std::optional<Tensors> {
      at::Tensor ids = relayout(inputs.at(0), c, in, Replicate(), std::nullopt, async,
                                std::nullopt, "input");
      *mask = (ids < lo).logical_or(ids >= hi);
      return Tensors{(ids - lo).masked_fill(*mask, 0)};
    });
    module.register_forward_hook([c, out, async, mask](torch::nn::Module&, const Tensors&,
                                                       const at::Tensor& y) -> std::optional<at::Tensor> {
      at::Tensor partial = y.masked_fill(mask->unsqueeze(-1), 0);
      *mask = at::Tensor();
      return relayout(partial, c, Partial(), out, partial.sizes().vec(), async, std::nullopt,
                      "output");
    });
  } else {
    throw hyper::ValueError(hyper::internal::str_cat("RowwiseParallel on '", ctx.name,
                                                     "': supports hyper::nn::Linear and ",
                                                     "hyper::nn::Embedding, got ", type_label(m)));
  }
  record_compute(module, ctx);
}

// ------------------------------------------------------------------ SequenceParallel

std::string SequenceParallel::to_string() const {
  return "SequenceParallel(sequence_dim=" + std::to_string(sequence_dim_) + ", input_layouts=" +
         (input_layout_ ? input_layout_->to_string() : Shard(sequence_dim_).to_string()) +
         ", use_local_output=" + bool_str(use_local_output_) + ", async_op=" + bool_str(async_op_) +
         ")";
}

void SequenceParallel::apply(nn::HookableModule& module, const StyleContext& ctx) const {
  check_local_output(use_local_output_, "SequenceParallel", ctx.name);
  HYPER_CHECK_VALUE(module.num_tensor_args() >= 1, "SequenceParallel on '", ctx.name,
                    "': the module's forward takes no tensor");
  // Parameters stay replicated; each rank's gradient covers its sequence shard only, so
  // the gradients are summed over the mesh before they accumulate.
  const DeviceMesh mesh = ctx.mesh;
  for (const auto& item : module.as_module().named_parameters(/*recurse=*/false)) {
    shard_parameter(module, to_string(), item.key(), Replicate(), mesh);
    at::Tensor param = item.value();
    if (!param.requires_grad()) continue;
    param.register_hook([mesh](const at::Tensor& grad) {
      return DTensor::from_local(grad, mesh, {Partial()}).redistribute(mesh, {Replicate()}).to_local();
    });
  }
  const StyleContext c = ctx;
  const Placement seq = Shard(sequence_dim_);
  const Placement in = input_layout_.value_or(seq);
  const bool async = async_op_;
  module.register_forward_pre_hook([c, in, seq, async](torch::nn::Module&,
                                                      const Tensors& inputs) -> std::optional<Tensors> {
    Tensors result = inputs;
    result[0] = relayout(inputs[0], c, in, seq, std::nullopt, async, std::nullopt, "input");
    return result;
  });
  record_compute(module, ctx);
}

// ------------------------------------------------------------------ PrepareModuleInput/Output

PrepareModuleInput::PrepareModuleInput(std::vector<std::optional<Placement>> input_layouts,
                                       std::vector<std::optional<Placement>> desired_input_layouts,
                                       bool use_local_output)
    : input_layouts_(std::move(input_layouts)),
      desired_input_layouts_(std::move(desired_input_layouts)),
      use_local_output_(use_local_output) {
  HYPER_CHECK_VALUE(input_layouts_.size() == desired_input_layouts_.size(),
                    "PrepareModuleInput: ", input_layouts_.size(), " input_layouts but ",
                    desired_input_layouts_.size(), " desired_input_layouts");
  for (size_t i = 0; i < input_layouts_.size(); ++i) {
    HYPER_CHECK_VALUE(input_layouts_[i].has_value() == desired_input_layouts_[i].has_value(),
                      "PrepareModuleInput: input ", i,
                      " has a layout or a desired layout but not both");
  }
}

std::string PrepareModuleInput::to_string() const {
  auto list = [](const std::vector<std::optional<Placement>>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) {
      s += (i ? ", " : "") + (v[i] ? v[i]->to_string() : std::string("None"));
    }
    return s + ")";
  };
  return "PrepareModuleInput(input_layouts=" + list(input_layouts_) +
         ", desired_input_layouts=" + list(desired_input_layouts_) +
         ", use_local_output=" + bool_str(use_local_output_) + ")";
}

void PrepareModuleInput::apply(nn::HookableModule& module, const StyleContext& ctx) const {
  check_local_output(use_local_output_, "PrepareModuleInput", ctx.name);
  HYPER_CHECK_VALUE(input_layouts_.size() == module.num_tensor_args(), "PrepareModuleInput on '",
                    ctx.name, "': ", input_layouts_.size(), " input layouts for a forward with ",
                    module.num_tensor_args(), " tensor argument(s)");
  const StyleContext c = ctx;
  const auto ins = input_layouts_;
  const auto want = desired_input_layouts_;
  module.register_forward_pre_hook([c, ins, want](torch::nn::Module&,
                                                 const Tensors& inputs) -> std::optional<Tensors> {
    Tensors result = inputs;
    for (size_t i = 0; i < inputs.size() && i < ins.size(); ++i) {
      if (!ins[i] || !inputs[i].defined()) continue;
      result[i] = relayout(inputs[i], c, *ins[i], *want[i], std::nullopt, /*async_op=*/false,
                           std::nullopt, "input");
    }
    return result;
  });
}

PrepareModuleOutput::PrepareModuleOutput(Placement output_layouts, Placement desired_output_layouts,
                                         bool use_local_output)
    : output_layout_(std::move(output_layouts)),
      desired_output_layout_(std::move(desired_output_layouts)),
      use_local_output_(use_local_output) {}

std::string PrepareModuleOutput::to_string() const {
  return "PrepareModuleOutput(output_layouts=" + output_layout_.to_string() +
         ", desired_output_layouts=" + desired_output_layout_.to_string() +
         ", use_local_output=" + bool_str(use_local_output_) + ")";
}

void PrepareModuleOutput::apply(nn::HookableModule& module, const StyleContext& ctx) const {
  check_local_output(use_local_output_, "PrepareModuleOutput", ctx.name);
  HYPER_CHECK_VALUE(module.forward_returns_tensor(), "PrepareModuleOutput on '", ctx.name,
                    "': the module's forward does not return a single tensor");
  const StyleContext c = ctx;
  const Placement from = output_layout_, to = desired_output_layout_;
  module.register_forward_hook([c, from, to](torch::nn::Module&, const Tensors&,
                                             const at::Tensor& y) -> std::optional<at::Tensor> {
    return relayout(y, c, from, to, std::nullopt, /*async_op=*/false, std::nullopt, "output");
  });
}

}  // namespace hyper::tp
