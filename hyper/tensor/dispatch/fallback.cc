// The boxed fallback of hyper's dispatch key (PrivateUse3) and its per-op registrations:
// look the op's rule up (sharding_rule.h), redistribute the DTensor inputs to the layouts the
// rule chose, run the op on the local tensors below autograd, wrap the outputs. An op without a
// rule throws NotImplementedError naming the op and every tensor input's layout.
#include <ATen/ATen.h>
#include <c10/core/AutogradState.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "hyper/comm/c10_errors.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/internal/dtensor_access.h"
#include "hyper/tensor/internal/dtensor_impl.h"
#include "hyper/tensor/dispatch/matmul_kernels.h"
#include "hyper/tensor/dispatch/linear_kernels.h"
#include "hyper/tensor/dispatch/loss_kernels.h"
#include "hyper/tensor/dispatch/core_dims_kernels.h"
#include "hyper/tensor/dispatch/dim_local_kernels.h"
#include "hyper/tensor/dispatch/advanced_index_kernels.h"
#include "hyper/tensor/dispatch/index_kernels.h"
#include "hyper/tensor/dispatch/dot_kernels.h"
#include "hyper/tensor/dispatch/dropout_kernels.h"
#include "hyper/tensor/dispatch/random_kernels.h"
#include "hyper/tensor/dispatch/pointwise_losses.h"
#include "hyper/tensor/dispatch/decompositions.h"
#include "hyper/tensor/dispatch/matmul_rules.h"
#include "hyper/tensor/dispatch/maxdim_kernels.h"
#include "hyper/tensor/dispatch/nn_kernels.h"
#include "hyper/tensor/dispatch/nn_rules.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/dispatch/out_kernels.h"
#include "hyper/tensor/dispatch/partial_fill_kernels.h"
#include "hyper/tensor/dispatch/shape_kernels.h"
#include "hyper/tensor/dispatch/spatial_kernels.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dispatch/tensor_split_kernels.h"
#include "hyper/tensor/dispatch/view_rules.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/dispatch/ragged_operand.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::dispatch {
namespace {

[[noreturn]] void refuse(const std::string& name, const std::vector<ArgLayout>& all,
                         bool tensor_list) {
  throw NotImplementedError(internal::str_cat(
      "hyper DTensor dispatch: no sharding rule for ", describe_args(name, all),
      tensor_list ? " (with a tensor-list argument)" : "",
      ": the op is refused rather than run on local shards (rules: docs/dtensor.md)"));
}

struct Decision;

/// The last decision of one op on this thread, by its DTensor arguments' Layout objects (kept
/// alive here, so the same address is the same layout): outputs made from one decision share its
/// output Layout object, so a loop repeating a call finds it without hashing a layout.
struct LastDecision {
  int64_t idx = -1;
  c10::SmallVector<std::shared_ptr<const Layout>, 4> layouts;
  c10::SmallVector<at::ScalarType, 4> dtypes;
  std::shared_ptr<const Decision> decision;
  /// Per argument, whether the decision relays it out (its target is not its layout): the fast
  /// path (Fast) reads the local of the others as it is.
  c10::SmallVector<bool, 4> relaid;
};

/// An op's schema name, rule and device argument, looked up once per op and thread (the rule
/// registry is immutable after its first use; an OperatorHandle's schema lives as long as the
/// op is registered), so a call does not build the name string, search the registry or scan
/// the argument names again.
struct OpEntry {
  std::string name;
  const OpRule* rule;
  std::optional<size_t> device_arg;  ///< the index of a `device` argument (factories)
  mutable LastDecision last;         ///< decide()'s
};
const OpEntry& op_entry(const c10::OperatorHandle& op) {
  thread_local std::unordered_map<const void*, OpEntry> cache;
  const void* key = &op.schema();
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::string name = op_name_of(op);
  const OpRule* rule = find_rule(name);
  return cache.emplace(key, OpEntry{std::move(name), rule, op.schema().argumentIndexWithName("device"), {}})
      .first->second;
}

/// The identity of max (`is_max`) or min over `t`'s values: -inf / +inf for floating dtypes,
/// the lowest / highest value for integral ones, false / true for bool.
at::Scalar max_min_identity(at::ScalarType t, bool is_max) {
  if (t == at::kBool) return at::Scalar(!is_max);
  if (at::isFloatingType(t)) {
    const double inf = std::numeric_limits<double>::infinity();
    return at::Scalar(is_max ? -inf : inf);
  }
  at::Scalar r;
  AT_DISPATCH_INTEGRAL_TYPES(t, "max_min_identity", [&] {
    r = at::Scalar(is_max ? std::numeric_limits<scalar_t>::lowest()
                          : std::numeric_limits<scalar_t>::max());
  });
  return r;
}

/// A call's DTensor arguments (null for a plain tensor argument), without copies.
using DTensorPtrs = c10::SmallVector<const DTensor*, 4>;

/// What a rule decided, in the form the fallback uses: the inputs' target layouts, the output
/// layout as one shared immutable object (every output DTensor made from a remembered decision
/// shares it: no Layout copy per call), and this rank's local output shape.
struct Decision {
  std::vector<std::optional<Layout>> inputs;
  std::shared_ptr<const Layout> output;
  Shape out_local_shape;  ///< non-ragged outputs; the flat {numel} for ragged ones
  ViewRewrite view;       ///< kViewOp: the rule's argument rewrites
};

std::shared_ptr<const Decision> make_decision(Propagation p, int64_t idx, ViewRewrite view) {
  auto d = std::make_shared<Decision>();
  d->view = std::move(view);
  d->inputs = std::move(p.inputs);
  d->out_local_shape = p.output.local_shape(idx);
  d->output = std::make_shared<const Layout>(std::move(p.output));
  return d;
}

/// What a rule's decision depends on, for remembering it (per thread: ranks as threads each
/// have theirs, so has the autograd engine's thread): the op, the rank's mesh index, every
/// tensor argument's layout (DTensor; compared by value, identical objects at once) or shape
/// (plain), and, for rules that read them (reductions, views, expand), the other arguments
/// (ints, int lists, bools, None) and the dtype.
struct DecisionQuery {
  const OpEntry* op;
  int64_t idx;
  const DTensorPtrs* dts;  ///< per tensor argument: its DTensor, or null for a plain tensor
  const std::vector<int>* tensor_args;
  const c10::IValue* args;
  std::vector<int64_t> scalars;
  size_t key = 0;  ///< hash(), set once the query is complete

  const at::Tensor& plain(size_t k) const { return args[(*tensor_args)[k]].toTensor(); }
  size_t hash() const {
    size_t h = std::hash<const void*>()(op) ^ (static_cast<size_t>(idx) * 0x9e3779b97f4a7c15ULL);
    auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); };
    for (size_t k = 0; k < dts->size(); ++k) {
      if ((*dts)[k] != nullptr) {
        mix(DTensorAccess::layout_ptr(*(*dts)[k])->hash());
      } else {
        mix(0x5bd1e995);
        for (int64_t s : plain(k).sizes()) mix(std::hash<int64_t>()(s));
      }
    }
    for (int64_t v : scalars) mix(std::hash<int64_t>()(v));
    return h;
  }
};

/// The query of a call whose rule can be remembered, or nullopt: rules that rewrite their
/// arguments from the layouts only (new_empty_strided reads a size) or take an argument of
/// another type are evaluated every time.
std::optional<DecisionQuery> decision_query(const OpEntry& op, const OpRule& rule, int64_t idx,
                                            const DTensorPtrs& dts,
                                            const c10::IValue* args, size_t n,
                                            at::ScalarType dtype) {
  DecisionQuery q{&op, idx, &dts, &rule.tensor_args, args, {}};
  bool reads_other_args = false;
  switch (rule.kind) {
    case RuleKind::kElementwise:  // the layouts, shapes and element sizes
      for (const DTensor* d : dts)
        if (d != nullptr) q.scalars.push_back(static_cast<int64_t>(c10::elementSize(d->scalar_type())));
      break;
    case RuleKind::kMatmul:  // the layouts and shapes only (one dtype)
    case RuleKind::kAlias:
      break;
    case RuleKind::kLike:
      reads_other_args = rule.size_arg >= 0;  // new_empty_strided's size
      break;
    case RuleKind::kReduction:
    case RuleKind::kViewOp:
    case RuleKind::kExpand:
      reads_other_args = true;
      break;
    default:
      return std::nullopt;
  }
  if (reads_other_args) q.scalars.push_back(static_cast<int64_t>(dtype));
  for (size_t i = 0; i < n && reads_other_args; ++i) {
    if (std::find(rule.tensor_args.begin(), rule.tensor_args.end(), static_cast<int>(i)) !=
        rule.tensor_args.end())
      continue;
    const c10::IValue& v = args[i];
    if (v.isInt()) {
      q.scalars.insert(q.scalars.end(), {1, v.toInt()});
    } else if (v.isIntList()) {
      const auto l = v.toIntList();
      q.scalars.insert(q.scalars.end(), {2, static_cast<int64_t>(l.size())});
      for (int64_t x : l) q.scalars.push_back(x);
    } else if (v.isBool()) {
      q.scalars.insert(q.scalars.end(), {3, v.toBool() ? 1 : 0});
    } else if (v.isNone()) {
      q.scalars.push_back(4);
    } else {
      return std::nullopt;
    }
  }
  q.key = q.hash();
  return q;
}

struct Remembered {
  const OpEntry* op;
  int64_t idx;
  std::vector<std::shared_ptr<const Layout>> layouts;  ///< null: a plain argument
  std::vector<Shape> plain_shapes;                     ///< the plain arguments' shapes
  std::vector<int64_t> scalars;
  std::shared_ptr<const Decision> decision;

  bool matches(const DecisionQuery& q) const {
    if (op != q.op || idx != q.idx || layouts.size() != q.dts->size() || scalars != q.scalars)
      return false;
    for (size_t k = 0; k < layouts.size(); ++k) {
      const DTensor* dt = (*q.dts)[k];
      if ((dt != nullptr) != (layouts[k] != nullptr)) return false;
      if (dt != nullptr) {
        const auto& l = DTensorAccess::layout_ptr(*dt);
        if (l != layouts[k] && *l != *layouts[k]) return false;
      } else if (c10::IntArrayRef(plain_shapes[k]) != q.plain(k).sizes()) {
        return false;
      }
    }
    return true;
  }
};
using DecisionCache = std::unordered_multimap<size_t, Remembered>;
DecisionCache& decision_cache() {
  thread_local DecisionCache cache;
  return cache;
}

std::shared_ptr<const Decision> find_decision(const DecisionQuery& q) {
  auto range = decision_cache().equal_range(q.key);
  for (auto it = range.first; it != range.second; ++it)
    if (it->second.matches(q)) return it->second.decision;
  return nullptr;
}

void remember_decision(const DecisionQuery& q, std::shared_ptr<const Decision> decision) {
  auto& cache = decision_cache();
  if (cache.size() >= 4096) cache.clear();  // bounded: a long tail of shapes starts over
  Remembered r{q.op, q.idx, {}, {}, q.scalars, std::move(decision)};
  for (size_t k = 0; k < q.dts->size(); ++k) {
    const DTensor* dt = (*q.dts)[k];
    r.layouts.push_back(dt != nullptr ? DTensorAccess::layout_ptr(*dt) : nullptr);
    r.plain_shapes.push_back(dt != nullptr ? Shape{} : q.plain(k).sizes().vec());
  }
  cache.emplace(q.key, std::move(r));
}

/// The op's local result as a DTensor of the decided output layout (shared, not copied). A
/// local of another shape than the layout's box (a rule bug) gets from_local_with_layout's
/// ValueError naming both.
DTensor wrap_output(const at::Tensor& out_local, const DeviceMesh& mesh, const Decision& d,
                    const std::shared_ptr<PlanCache>& plans) {
  if (d.output->is_ragged() || out_local.sizes() != c10::IntArrayRef(d.out_local_shape))
    return DTensor::from_local_with_layout(out_local, mesh, *d.output, plans);
  return DTensorAccess::make_unchecked(out_local, mesh, d.output, plans);
}

// View replay. Autograd's ADInplaceOrView kernel of a view op records how to replay the view
// (a view_func: slice(base, dim, start, end, step)) only when the input does not support
// as_strided or the thread's view-replay flag is set, which it reads *after* the op's kernel
// returns; otherwise autograd replays a view with as_strided on the wrapper's (contiguous,
// global) geometry: the backward of an in-place op through a view (CopySlices) and a view's
// regenerated grad_fn would call as_strided, which a DTensor has not. So a view op on a DTensor
// sets the flag for the ADInplaceOrView kernel that called it, and the next DTensor op clears
// it again unless the user had set it (views of plain tensors made in between record a
// view_func too: the same values, replayed instead of as_strided).
thread_local bool replay_set_here = false;

void request_view_replay() {
  c10::AutogradState& s = c10::AutogradState::get_tls_state();
  if (s.get_view_replay_enabled()) return;
  s.set_view_replay_enabled(true);
  replay_set_here = true;
}

void end_view_replay() {
  // Ownership stays with hyper once taken: a scope that saves and restores the whole
  // AutogradState (InferenceMode, the autograd engine's ThreadLocalStateGuard) may put the
  // flag hyper set back after hyper cleared it.
  if (replay_set_here) c10::AutogradState::get_tls_state().set_view_replay_enabled(false);
}

// ---- the executor: unwrap, decide, relayout, call, wrap ----------------------------------------

/// One call of the fallback: the op, its arguments on the stack, and what each stage leaves for
/// the next (the stages below, in the order dtensor_fallback runs them).
struct Call {
  const c10::OperatorHandle& op;
  torch::jit::Stack* stack;
  const OpEntry& entry;
  size_t n;     ///< the schema's argument count
  size_t base;  ///< the first argument's position on the stack
  const OpRule* rule = nullptr;
  DTensorPtrs dts;  ///< per rule tensor argument: its DTensor (in `wrappers`), null if plain
  c10::SmallVector<at::Tensor, 4> wrappers;  ///< the DTensor arguments, alive for the call
  const DTensor* ref = nullptr;  ///< the first DTensor argument
  at::Tensor self_wrapper;       ///< argument 0 as given (an in-place op writes and returns it)
  const DTensorImpl* self_impl = nullptr;  ///< self_wrapper's, when it is a DTensor tensor

  Call(const c10::OperatorHandle& o, torch::jit::Stack* s)
      : op(o), stack(s), entry(op_entry(o)), n(o.schema().arguments().size()),
        base(s->size() - n) {}
  c10::IValue& arg(size_t i) { return (*stack)[base + i]; }
  const std::string& name() const { return entry.name; }
  /// Every defined tensor argument's layout, for a message (built only on an error).
  std::vector<ArgLayout> layouts() {
    std::vector<ArgLayout> v;
    for (size_t i = 0; i < n; ++i)
      if (arg(i).isTensor() && arg(i).toTensor().defined()) v.push_back(arg_layout(arg(i).toTensor()));
    return v;
  }
  /// The op and every tensor argument's layout.
  std::string where() { return describe_args(name(), layouts()); }
  bool dtensor_self() const { return self_impl != nullptr; }
  /// self's local tensor as stored (read after relayout, which waited for a pending one).
  const at::Tensor& self_local() const { return DTensorAccess::raw_local(self_impl->dtensor()); }
};

/// Stage 1, unwrap: the op's rule (an op without one is refused naming every layout), a stale
/// copied view refused, the DTensor behind each of the rule's tensor arguments, a device
/// argument other than the DTensors' refused.
void unwrap(Call& c) {
  // A view whose local is a copy, read after its base was written (plain torch: the view sees
  // the write; here the copy would not): refused, the same on every rank (the version counter
  // is the wrapper's, not a shard's).
  check_no_stale_copy(c.name(), &c.arg(0), c.n);  // dispatch_args.h
  c.rule = c.entry.rule;
  if (c.rule == nullptr) {
    bool tensor_list = false;
    for (size_t i = 0; i < c.n; ++i) tensor_list = tensor_list || c.arg(i).isTensorList();
    refuse(c.name(), c.layouts(), tensor_list);
  }
  const OpRule& rule = *c.rule;
  c.dts.assign(rule.tensor_args.size(), nullptr);
  for (size_t k = 0; k < rule.tensor_args.size(); ++k) {
    const c10::IValue& v = c.arg(rule.tensor_args[k]);
    HYPER_CHECK_INTERNAL(v.isTensor() && v.toTensor().defined(), c.name(), ": argument ",
                         rule.tensor_args[k], " is not a tensor");
    const at::Tensor& t = v.toTensor();
    if (is_dtensor(t)) {
      c.wrappers.push_back(t);
      c.dts[k] = &static_cast<const DTensorImpl*>(t.unsafeGetTensorImpl())->dtensor();
      if (!c.ref) c.ref = c.dts[k];
    }
  }
  HYPER_CHECK_INTERNAL(c.ref != nullptr, c.name(), ": no DTensor argument");
  c.self_wrapper = c.arg(0).isTensor() ? c.arg(0).toTensor() : at::Tensor();
  if (c.self_wrapper.defined() && is_dtensor(c.self_wrapper))
    c.self_impl = static_cast<const DTensorImpl*>(c.self_wrapper.unsafeGetTensorImpl());
  // A device argument (the *_like factories, new_empty_strided) other than the DTensor's would
  // put the local on another device than the mesh's: refused (as _to_copy, shape_kernels.h).
  if (c.entry.device_arg && !c.arg(*c.entry.device_arg).isNone())
    check_same_device([&] { return c.where(); }, c.ref->to_local().device(),
                      c.arg(*c.entry.device_arg));
}

/// alias / detach of a pending async result (a gradient redistributed by a hook, which
/// AccumulateGrad detaches): the same DTensor, sharing the completion, so the wait stays at the
/// first read of the values. Returns whether the call was served so.
bool serve_pending_alias(Call& c) {
  if (c.rule->kind != RuleKind::kAlias || c.dts[0] == nullptr || !c.dts[0]->is_pending())
    return false;
  const DTensor same = *c.dts[0];
  torch::jit::drop(*c.stack, c.n);
  c.stack->push_back(wrap_dtensor(same));
  return true;
}

/// The rule evaluated on the arguments' layouts, with the other arguments the rule declares.
Propagation propagate(Call& c, ViewRewrite* view) {
  const OpRule& rule = *c.rule;
  std::vector<ArgLayout> in;
  for (size_t k = 0; k < rule.tensor_args.size(); ++k)
    in.push_back(c.dts[k] != nullptr
                     ? ArgLayout::of(c.dts[k]->layout(), c10::elementSize(c.dts[k]->scalar_type()))
                     : ArgLayout::plain(c.arg(rule.tensor_args[k]).toTensor().sizes().vec()));
  switch (rule.kind) {
    case RuleKind::kElementwise:
      return propagate_elementwise(c.name(), rule, in);
    case RuleKind::kReduction: {
      std::vector<int64_t> dims;
      if (rule.dims_arg >= 0 && !c.arg(rule.dims_arg).isNone()) dims = c.arg(rule.dims_arg).toIntVector();
      const bool keepdim = rule.keepdim_arg >= 0 && c.arg(rule.keepdim_arg).toBool();
      // max/min fills an empty shard's result with its identity (call_local): floating and
      // integral dtypes and bool (complex: refused by ATen).
      const at::ScalarType t = c.ref->scalar_type();
      return propagate_reduction(c.name(), in[0], dims, keepdim, rule.reduce_op,
                                 at::isFloatingType(t) || at::isIntegralType(t, /*includeBool=*/true));
    }
    case RuleKind::kLike:
      return propagate_like(c.name(), in[0]);
    case RuleKind::kExpand:
      return propagate_expand(c.name(), in[0], c.arg(rule.size_arg).toIntVector());
    case RuleKind::kAlias:
      return Propagation{{*in[0].layout}, *in[0].layout};
    case RuleKind::kMatmul:
      return propagate_matmul(c.name(), in, rule.batch_dims, rule.has_bias);
    case RuleKind::kViewOp: {
      ViewOpArgs a;
      for (size_t i = 1; i < c.n; ++i) {
        if (c.arg(i).isInt()) a.push_back(std::vector<int64_t>{c.arg(i).toInt()});
        else if (c.arg(i).isIntList()) a.push_back(c.arg(i).toIntVector());
        else a.push_back(std::nullopt);
      }
      ViewRewrite r;
      Propagation p = rule.view(c.name(), in[0], a, &r);
      if (view) *view = r;
      return p;
    }
  }
  HYPER_CHECK_INTERNAL(false, c.name(), ": unknown rule kind");
}

/// Whether `c`'s decision depends on its arguments' layouts and dtypes only, and every argument
/// of the rule is a DTensor (a plain one's shape would count too).
bool by_layouts_only(const Call& c) {
  const RuleKind k = c.rule->kind;
  if (k != RuleKind::kElementwise && k != RuleKind::kMatmul && k != RuleKind::kAlias) return false;
  for (const DTensor* d : c.dts)
    if (d == nullptr) return false;
  return true;
}

/// Stage 2, decide: the rule's decision, remembered per thread for rules that depend only on the
/// arguments' layouts and the arguments they declare (a training loop repeats the same calls).
std::shared_ptr<const Decision> decide(Call& c) {
  LastDecision* last = by_layouts_only(c) ? &c.entry.last : nullptr;
  const int64_t idx = c.ref->mesh_index();
  if (last && last->decision && last->idx == idx && last->layouts.size() == c.dts.size()) {
    bool same = true;
    for (size_t k = 0; k < c.dts.size() && same; ++k)
      same = last->layouts[k].get() == DTensorAccess::layout_ptr(*c.dts[k]).get() &&
             last->dtypes[k] == c.dts[k]->scalar_type();
    if (same) return last->decision;
  }
  const std::optional<DecisionQuery> query =
      decision_query(c.entry, *c.rule, idx, c.dts, &c.arg(0), c.n, c.ref->scalar_type());
  std::shared_ptr<const Decision> decision = query ? find_decision(*query) : nullptr;
  if (!decision) {
    ViewRewrite view;
    Propagation p = propagate(c, &view);
    decision = make_decision(std::move(p), idx, std::move(view));
    if (query) remember_decision(*query, decision);
  }
  if (last) {
    last->idx = idx;
    last->layouts.clear();
    last->dtypes.clear();
    last->relaid.clear();
    for (size_t k = 0; k < c.dts.size(); ++k) {
      const DTensor* d = c.dts[k];
      last->layouts.push_back(DTensorAccess::layout_ptr(*d));
      last->dtypes.push_back(d->scalar_type());
      last->relaid.push_back(decision->inputs[k] && !(*decision->inputs[k] == d->layout()));
    }
    last->decision = decision;
  }
  return decision;
}

/// Whether the call reduces a RaggedShard input (its local is flat: every dim is reduced).
bool ragged_reduction(const Call& c) {
  return c.rule->kind == RuleKind::kReduction && c.dts[0] != nullptr && c.dts[0]->layout().is_ragged();
}

/// Stage 3, rewrite: the non-tensor arguments the local op gets instead of the global ones (the
/// rule's declared sizes become the rank's box; a ragged reduction reduces every dim of its flat
/// local). Returns how a slice / select cut its output (a copy when the dim is sharded: writable,
/// dtensor_impl.h).
std::optional<SliceOf> rewrite_arguments(Call& c, const Decision& d) {
  const OpRule& rule = *c.rule;
  // Explicit dims ({0, 1}, as max() passes them) would not fit the 1-D local: "every dim" (None
  // where the schema takes an optional list, else the empty list); the local result is reshaped
  // to the output's (wrap_outputs).
  if (ragged_reduction(c) && rule.dims_arg >= 0) {
    const bool optional =
        c.op.schema().arguments()[rule.dims_arg].type()->kind() == c10::TypeKind::OptionalType;
    c.arg(rule.dims_arg) = optional ? c10::IValue() : c10::IValue(std::vector<int64_t>{});
  }
  if (rule.kind == RuleKind::kExpand) c.arg(rule.size_arg) = c10::IValue(d.out_local_shape);
  if (rule.kind == RuleKind::kLike && rule.size_arg >= 0) {
    const std::vector<int64_t> size = c.arg(rule.size_arg).toIntVector();
    HYPER_CHECK_IMPLEMENTED(size == d.output->shape(), c.where(), ": ", c.name(),
                            " of a size other than the DTensor's global shape is not implemented");
    c.arg(rule.size_arg) = c10::IValue(d.out_local_shape);
    if (rule.stride_arg >= 0) c.arg(rule.stride_arg) = c10::IValue(contiguous_strides(d.out_local_shape));
  }
  const std::optional<SliceOf> cut = rule.kind == RuleKind::kViewOp && c.dts[0] != nullptr
                                         ? slice_of(c.name(), c.arg(0).toTensor(), &c.arg(0))
                                         : std::nullopt;
  if (d.view.local_shape_arg >= 0) c.arg(d.view.local_shape_arg) = c10::IValue(d.out_local_shape);
  if (d.view.rewrite_arg >= 0) c.arg(d.view.rewrite_arg) = c10::IValue(d.view.rewrite_value);
  return cut;
}

/// Stage 4, relayout: each of the rule's tensor arguments replaced by its local tensor in the
/// decided layout (a DTensor's redistributed, remembered on the wrapper when that communicates;
/// a plain tensor cut locally: no bytes).
void relayout(Call& c, const Decision& d) {
  const OpRule& rule = *c.rule;
  if (rule.inplace)  // dispatch_args.h
    check_inplace_reaches_base(c.self_wrapper, [&] { return c.where(); });
  const int64_t idx = c.ref->mesh_index();
  // Ops that may write or alias the local they are given never get a remembered one.
  const bool memo = !rule.inplace && rule.kind != RuleKind::kViewOp &&
                    rule.kind != RuleKind::kAlias && rule.kind != RuleKind::kExpand;
  for (size_t k = 0; k < rule.tensor_args.size(); ++k) {
    c10::IValue& v = c.arg(rule.tensor_args[k]);
    const auto& target = d.inputs[k];
    if (c.dts[k] != nullptr) {
      const auto* impl = static_cast<const DTensorImpl*>(v.toTensor().unsafeGetTensorImpl());
      if (target && target->is_ragged() &&
          c10::IntArrayRef(target->shape()) != v.toTensor().sizes()) {  // broadcast beside ragged
        const Shape shape = v.toTensor().sizes().vec();  // the global shape
        v = ragged_cut(impl->local_as(Layout(target->mesh(),
                                             Placements(target->mesh().ndim(), Replicate()), shape),
                                      memo),
                       *target, idx);
      } else {
        v = target ? impl->local_as(*target, memo) : c.dts[k]->to_local();
      }
    } else if (target) {
      v = plain_local(v.toTensor(), *target, idx);  // dispatch_args.h: no bytes move
    }
  }
  if (d.view.local_shape_arg >= 0 && c.arg(0).isTensor()) {
    // The wrapper reports contiguous strides, so view/reshape of a transposed DTensor gets here
    // with a local that may not be viewable: copy it contiguous first (as reshape would). The
    // test is strict row-major strides, size-1 and size-0 dims included, not "viewable":
    // viewability depends on the rank's sizes (an empty or size-1 shard is always viewable),
    // and whether the view aliases must be the same on every rank (an in-place op on a copied
    // view is refused; a refusal on some ranks only would strand the others in collectives).
    const at::Tensor l = c.arg(0).toTensor();
    bool strict = true;
    for (int64_t dim = l.dim() - 1, expect = 1; dim >= 0 && strict; --dim) {
      strict = l.stride(dim) == expect;
      expect *= std::max<int64_t>(l.size(dim), 1);
    }
    if (!strict) c.arg(0) = l.clone(at::MemoryFormat::Contiguous);  // contiguous() may alias
  }
}

/// Stage 5, call: the op on the local tensors, below autograd (the local tensors do not carry
/// PrivateUse3, so the call reaches their backend; an ExcludeDispatchKeyGuard on PrivateUse3
/// would be wrong: DispatchKeySet(PrivateUse3) holds the Dense functionality bit, and excluding
/// it excludes the CPU/CUDA kernels too). An in-place op's local write is then made visible.
void call_local(Call& c, const Decision& d) {
  const OpRule& rule = *c.rule;
  // max/min reductions on a rank whose shard of a (globally non-empty) reduced region is empty:
  // ATen would fail on this rank only; its share of the Partial(max/min) is the identity.
  const bool max_min = rule.kind == RuleKind::kReduction &&
                       (rule.reduce_op == "max" || rule.reduce_op == "min");
  if (max_min && c.arg(0).toTensor().numel() == 0 && c.ref->numel() > 0) {
    const at::Tensor local = c.arg(0).toTensor();
    torch::jit::drop(*c.stack, c.n);
    c.stack->push_back(at::full(d.out_local_shape,
                                max_min_identity(local.scalar_type(), rule.reduce_op == "max"),
                                local.options()));
  } else {
    at::AutoDispatchBelowADInplaceOrView below;
    c.op.callBoxed(c.stack);
  }
  // The local was written below ADInplaceOrView (dispatch_args.h): its version is bumped so
  // that a relayout any wrapper remembered (a parameter's gather) is forgotten.
  if (rule.inplace && c.dtensor_self()) {
    bump_local_version(c.self_local());
    write_through(c.self_wrapper);  // a copied slice of a sharded dim writes its base (dispatch_args.h)
  }
}

/// Stage 6, wrap: each tensor result as a DTensor tensor of the decided layout (an in-place
/// op's: its self), a view's record of how its local relates to its input's.
void wrap_outputs(Call& c, const Decision& d, const std::optional<SliceOf>& cut) {
  const OpRule& rule = *c.rule;
  const DeviceMesh& mesh = c.ref->device_mesh();
  const bool ragged_red = ragged_reduction(c);
  const size_t nret = c.op.schema().returns().size();
  const size_t first = c.stack->size() - nret;
  for (size_t r = first; r < c.stack->size(); ++r) {
    c10::IValue& v = (*c.stack)[r];
    if (!v.isTensor()) continue;
    if (rule.inplace) {
      v = c.self_wrapper;
      continue;
    }
    at::Tensor out_local = ragged_red ? v.toTensor().reshape(d.out_local_shape) : v.toTensor();
    const bool aliasing_view = (rule.kind == RuleKind::kViewOp || rule.kind == RuleKind::kAlias) &&
                               c.op.schema().returns()[r - first].alias_info() && c.dtensor_self();
    // A view whose local is a copy (a slice of a gathered input) is made compact: it would
    // otherwise keep the whole gathered input alive (a select of a [N, M] S(0) holding [N, M]).
    if (aliasing_view && !out_local.is_alias_of(c.self_local()) &&
        out_local.numel() * out_local.element_size() <
            static_cast<int64_t>(out_local.storage().nbytes()))
      out_local = out_local.clone(at::MemoryFormat::Contiguous);
    v = wrap_dtensor(wrap_output(out_local, mesh, d, c.ref->plan_cache()));
    // The output shares the input's version counter (ADInplaceOrView's as_view): a local that
    // is a copy remembers the counter's value (and how to write itself back, for a slice of a
    // sharded dim); one aliasing the input's local (detach() included) shares the input's
    // record (dtensor_impl.h). An expand is a view too, and any output whose local aliases the
    // input's (an `_unsafe_view`) shares the input's record and counter likewise.
    if (aliasing_view ||
        (c.dtensor_self() && (rule.kind == RuleKind::kExpand ||
                              out_local.is_alias_of(c.self_local()))))
      track_copied_view(c.self_wrapper, v.toTensor(), out_local, cut);
    if ((aliasing_view || rule.kind == RuleKind::kExpand) && c.self_wrapper.defined() &&
        !c.self_wrapper.is_inference())
      request_view_replay();
  }
}

/// The boxed fallback: every op on a DTensor tensor without a kernel of its own.
void dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  end_view_replay();
  Call c(op, stack);
  unwrap(c);
  if (serve_pending_alias(c)) return;
  const std::shared_ptr<const Decision> d = decide(c);
  const std::optional<SliceOf> cut = rewrite_arguments(c, *d);
  relayout(c, *d);
  call_local(c, *d);
  wrap_outputs(c, *d, cut);
}


// ---- the fast path of a remembered decision --------------------------------------------------

/// The op's remembered decision when it serves this call as it stands: the op's last decision on
/// this thread (decide()) was made for these very DTensor arguments' layout objects and dtypes on
/// this rank, the rule's tensor arguments are the first `n` arguments in order, and nothing but
/// local ops is left (no argument rewrite, no ragged target). Null otherwise.
const Decision* fast_decision(const OpEntry& e, const DTensorImpl* const* impls, size_t n) {
  const LastDecision& last = e.last;
  if (!last.decision || last.layouts.size() != n || e.rule == nullptr ||
      e.rule->tensor_args.size() != n || e.rule->inplace)
    return nullptr;
  for (size_t k = 0; k < n; ++k) {
    const DTensor& d = impls[k]->dtensor();
    if (static_cast<size_t>(e.rule->tensor_args[k]) != k || last.layouts[k].get() != DTensorAccess::layout_ptr(d).get() ||
        last.dtypes[k] != DTensorAccess::raw_local(d).scalar_type())
      return nullptr;
  }
  if (last.idx != DTensorAccess::mesh_index(impls[0]->dtensor())) return nullptr;
  const Decision& d = *last.decision;
  if (d.view.local_shape_arg >= 0) return nullptr;
  for (const auto& t : d.inputs)
    if (t && t->is_ragged()) return nullptr;
  return &d;
}

thread_local int64_t g_fast_calls = 0;

/// An op served without boxing when fast_decision allows: each DTensor argument relaid out as
/// relayout() would, `local` (the op on the local tensors) run below autograd, the result wrapped
/// as wrap_outputs() would. Otherwise the arguments are boxed and the fallback runs (it
/// remembers the decision the next call reads). `Name`: the op's schema name.
template <const char* Name>
struct Fast {
  static const c10::OperatorHandle& handle() {
    static const c10::OperatorHandle h = operator_handle(Name);
    return h;
  }
  template <size_t N, class B, class F>
  static at::Tensor run(const std::array<const at::Tensor*, N>& tensors, B&& boxed_args, F&& local) {
    end_view_replay();
    thread_local const OpEntry* entry = &op_entry(handle());
    std::array<const DTensorImpl*, N> impls{};
    bool all = true;
    for (size_t k = 0; k < N && all; ++k) {
      all = is_dtensor(*tensors[k]);
      if (all) impls[k] = static_cast<const DTensorImpl*>(tensors[k]->unsafeGetTensorImpl());
    }
    const Decision* d = all ? fast_decision(*entry, impls.data(), N) : nullptr;
    if (d == nullptr) {
      torch::jit::Stack boxed = boxed_args();
      dtensor_fallback(handle(), &boxed);
      return boxed.back().toTensor();
    }
    std::array<at::Tensor, N> locals;
    for (size_t k = 0; k < N; ++k)
      locals[k] = entry->last.relaid[k] ? impls[k]->local_as(*d->inputs[k], /*memo=*/true)
                                        : DTensorAccess::ready_local(impls[k]->dtensor());
    at::Tensor out;
    {
      at::AutoDispatchBelowADInplaceOrView below;
      out = local(locals);
    }
    const DTensor& ref = impls[0]->dtensor();
    at::Tensor w = wrap_dtensor(wrap_output(out, ref.device_mesh(), *d, ref.plan_cache()));
    if (out.is_alias_of(DTensorAccess::raw_local(ref))) track_copied_view(*tensors[0], w, out, std::nullopt);
    ++g_fast_calls;
    return w;
  }
};

using Unary = at::Tensor (*)(const at::Tensor&);
using Binary = at::Tensor (*)(const at::Tensor&, const at::Tensor&);
using BinaryAlpha = at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Scalar&);

/// The kernel of op `Name` whose local op is the ATen function `F` (Fast).
template <const char* Name, Unary F>
at::Tensor fast_unary(const at::Tensor& a) {
  return Fast<Name>::template run<1>({&a}, [&] { return torch::jit::Stack{a}; },
                                     [](const auto& l) { return F(l[0]); });
}
template <const char* Name, Binary F>
at::Tensor fast_binary(const at::Tensor& a, const at::Tensor& b) {
  return Fast<Name>::template run<2>({&a, &b}, [&] { return torch::jit::Stack{a, b}; },
                                     [](const auto& l) { return F(l[0], l[1]); });
}
template <const char* Name, BinaryAlpha F>
at::Tensor fast_binary_alpha(const at::Tensor& a, const at::Tensor& b, const at::Scalar& alpha) {
  return Fast<Name>::template run<2>({&a, &b}, [&] { return torch::jit::Stack{a, b, alpha}; },
                                     [&alpha](const auto& l) { return F(l[0], l[1], alpha); });
}

constexpr char kAdd[] = "aten::add.Tensor", kSub[] = "aten::sub.Tensor", kMul[] = "aten::mul.Tensor",
               kDiv[] = "aten::div.Tensor", kMm[] = "aten::mm", kNeg[] = "aten::neg",
               kRelu[] = "aten::relu", kExp[] = "aten::exp", kTanh[] = "aten::tanh",
               kSigmoid[] = "aten::sigmoid";

// In-place Scalar overloads: LibTorch's composite kernels call the out= overload (which has no
// rule); these call the in-place Tensor overload with a wrapped scalar instead, so the Partial
// algebra sees the scalar (add_(P, 2) adds 2 on one coordinate only).
at::Tensor& add_scalar_(at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return self.add_(wrapped(other), alpha);
}
at::Tensor& sub_scalar_(at::Tensor& self, const at::Scalar& other, const at::Scalar& alpha) {
  return self.sub_(wrapped(other), alpha);
}
at::Tensor& mul_scalar_(at::Tensor& self, const at::Scalar& other) {
  return self.mul_(wrapped(other));
}
at::Tensor& div_scalar_(at::Tensor& self, const at::Scalar& other) {
  return self.div_(wrapped(other));
}

// maximum.out (Adam's amsgrad calls max_out(state, state, exp_avg_sq); max.out is a composite
// calling maximum.out): maximum's rule, then copy_ into `out` (its layout kept, as for in-place
// ops; `out` may alias an input: the result is computed first). A plain `out` with DTensor
// inputs is refused by copy_.
at::Tensor& maximum_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  const at::Tensor r = at::maximum(self, other);
  out.copy_(r);
  return out;
}

// squeeze() and squeeze(dim) become squeeze.dims on the wrapper, whose rule keeps only the
// dims of global size 1 (the local op alone would also squeeze a shard of local size 1).
at::Tensor squeeze_all(const at::Tensor& self) {
  std::vector<int64_t> dims(self.dim());
  for (int64_t d = 0; d < self.dim(); ++d) dims[d] = d;
  return self.squeeze(dims);
}
at::Tensor squeeze_dim(const at::Tensor& self, int64_t dim) {
  return self.squeeze(std::vector<int64_t>{dim});
}


/// This file's own kernels: ops whose composite would bypass or defeat the rules.
const KernelFamily& fallback_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"fallback", /*serves_out=*/false, {
      HYPER_KERNEL("aten::add_.Scalar", K::kDTensor, add_scalar_),
      HYPER_KERNEL("aten::sub_.Scalar", K::kDTensor, sub_scalar_),
      HYPER_KERNEL("aten::mul_.Scalar", K::kDTensor, mul_scalar_),
      HYPER_KERNEL("aten::div_.Scalar", K::kDTensor, div_scalar_),
      HYPER_KERNEL("aten::squeeze", K::kDTensor, squeeze_all),
      HYPER_KERNEL("aten::squeeze.dim", K::kDTensor, squeeze_dim),
      HYPER_KERNEL("aten::maximum.out", K::kDTensor, maximum_out),
      // The ops of a training loop's hot path, served without boxing once decided (Fast).
      HYPER_KERNEL(kAdd, K::kDTensor, fast_binary_alpha<kAdd, &at::add>),
      HYPER_KERNEL(kSub, K::kDTensor, fast_binary_alpha<kSub, &at::sub>),
      HYPER_KERNEL(kMul, K::kDTensor, fast_binary<kMul, &at::mul>),
      HYPER_KERNEL(kDiv, K::kDTensor, fast_binary<kDiv, &at::div>),
      HYPER_KERNEL(kMm, K::kDTensor, fast_binary<kMm, &at::mm>),
      HYPER_KERNEL(kNeg, K::kDTensor, fast_unary<kNeg, &at::neg>),
      HYPER_KERNEL(kRelu, K::kDTensor, fast_unary<kRelu, &at::relu>),
      HYPER_KERNEL(kExp, K::kDTensor, fast_unary<kExp, &at::exp>),
      HYPER_KERNEL(kTanh, K::kDTensor, fast_unary<kTanh, &at::tanh>),
      HYPER_KERNEL(kSigmoid, K::kDTensor, fast_unary<kSigmoid, &at::sigmoid>),
      // At the autograd key, as the composites they replace, so autograd records their ops.
      HYPER_KERNEL("aten::matmul", K::kAutograd, dtensor_matmul),  // matmul_kernels.h
      HYPER_KERNEL("aten::linear", K::kAutograd, dtensor_linear),  // linear_kernels.h
      HYPER_KERNEL("aten::scaled_dot_product_attention", K::kAutograd, dtensor_sdpa),
  }};
  return f;
}

/// Every family of kernels (op_registry.h): an op is served by at most one.
const std::vector<const KernelFamily*>& kernel_families() {
  static const std::vector<const KernelFamily*> v = {
      &fallback_kernels(),   &nn_kernels(),           &loss_kernels(),
      &shape_kernels(),      &dropout_kernels(),      &random_kernels(),
      &pointwise_loss_kernels(), &decomposition_kernels(), &dot_kernels(),
      &dim_local_kernels(),  &maxdim_kernels(),       &index_kernels(),
      &spatial_kernels(),    &advanced_index_kernels(), &tensor_split_kernels(),
      &partial_fill_kernels(), &core_dims_kernels()};
  return v;
}

}  // namespace

int64_t fast_path_calls() { return g_fast_calls; }

void run_dtensor_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  dtensor_fallback(op, stack);  // partial_fill_kernels.h
}

void register_dtensor_kernels() {
  static const bool done = [] {
    try {
      static torch::Library fallback(torch::Library::IMPL, "_", c10::DispatchKey::PrivateUse3,
                                     __FILE__, __LINE__);
      // Every op without a kernel of its own: the rule, or the refusal. Its local ATen errors
      // become hyper's (dispatch_args.h).
      fallback.fallback(
          torch::CppFunction::makeFromBoxedFunction<&mapping_local_errors<&dtensor_fallback>>());
      static torch::Library aten(torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse3,
                                 __FILE__, __LINE__);
      static torch::Library autograd(torch::Library::IMPL, "aten",
                                     c10::DispatchKey::AutogradPrivateUse3, __FILE__, __LINE__);
      // Every aten op with a CompositeExplicitAutograd(NonFunctional) kernel would run that
      // kernel on the wrapper (allocating plain outputs, reading storage); they reach the
      // fallback instead (their rule, or the refusal). Kept: the out-of-place Scalar overloads,
      // whose composites call the Tensor overload with a wrapped scalar.
      std::set<std::string> names;
      for (const auto& n : rule_names()) names.insert(n);
      auto& d = c10::Dispatcher::singleton();
      // Not the _foreach_* ops: their CompositeExplicitAutograd kernels are ATen's per-tensor
      // loops (what torch.optim's foreach paths and clip_grad_norm_ call), each tensor's op
      // dispatched anew, so a DTensor element reaches its op's rule or refusal.
      for (auto k : {c10::DispatchKey::CompositeExplicitAutograd,
                     c10::DispatchKey::CompositeExplicitAutogradNonFunctional})
        for (const auto& on : d.getAllOpNamesForDispatchKey(k)) {
          if (on.name.rfind("aten::", 0) != 0 || on.name.rfind("aten::_foreach_", 0) == 0) continue;
          names.insert(full_name_of(on));
        }
      for (const char* keep : {"aten::add.Scalar", "aten::sub.Scalar", "aten::mul.Scalar",
                               "aten::div.Scalar"})
        names.erase(keep);
      // The families' ops leave the fallback's list; a family with serves_out has its ops'
      // out= overloads served too (out_kernels.h: computed, then copy_ into out).
      std::vector<std::string> served = rule_names();
      std::set<std::string> claimed;  // one family per op: a second registration would
                                      // silently replace the first (LibTorch only warns)
      for (const KernelFamily* f : kernel_families())
        for (const auto& n : f->names())
          HYPER_CHECK_INTERNAL(claimed.insert(n).second, "hyper dispatch: ", n,
                               " is served by two kernel families (", f->family, ")");
      for (const KernelFamily* f : kernel_families()) {
        const std::vector<std::string> ns = f->names();
        for (const auto& n : ns) names.erase(n);
        f->add_to(aten, autograd);
        if (f->serves_out) served.insert(served.end(), ns.begin(), ns.end());
      }
      const std::vector<std::string> outs = out_kernel_names(served);
      for (const auto& n : outs) names.erase(n);
      register_out_kernels(aten, outs);
      for (const auto& n : names) {
        const auto h = d.findOp(operator_name_of(n));
        if (h && h->hasKernelForDispatchKey(c10::DispatchKey::CompositeImplicitAutograd)) continue;
        aten.impl(short_name(n).c_str(),
                  torch::CppFunction::makeFromBoxedFunction<
                      &mapping_local_errors<&dtensor_fallback>>());
      }
    } catch (const c10::Error& e) {
      rethrow_c10_error<ValueError>(
          e, "hyper::as_tensor: registering hyper's kernels for dispatch key PrivateUse3 "
             "failed (another library registered kernels for PrivateUse3?)");
    }
    return true;
  }();
  (void)done;
}

}  // namespace hyper::dispatch
