// Random fills and random *_like factories of the DTensor dispatch key (see random_kernels.h).
#include "hyper/tensor/dispatch/random_kernels.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/MathConstants.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <string>

#include "hyper/core/errors.h"
#include "hyper/core/format.h"
#include "hyper/tensor/dispatch/sharding_rule.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/internal/dispatch_args.h"
#include "hyper/tensor/internal/op_registry.h"
#include "hyper/tensor/random.h"

namespace hyper::dispatch {
namespace {

enum class Kind { kUniform, kNormal, kLogNormal, kExponential, kCauchy, kGeometric, kBernoulli, kRandom };

/// A distribution and its parameters (a, b: from/to, mean/std, lambd, median/sigma, p, low/high).
struct Draw {
  Kind kind;
  double a = 0, b = 0;
  /// Uniforms per element (Box-Muller takes two).
  int64_t per_element() const { return kind == Kind::kNormal || kind == Kind::kLogNormal ? 2 : 1; }
};

/// The arguments of a boxed call, by schema name.
class Args {
 public:
  Args(const c10::OperatorHandle& op, std::vector<c10::IValue> a)
      : schema_(op.schema()), a_(std::move(a)) {}
  const c10::IValue* find(const char* name) const {
    const auto& args = schema_.arguments();
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i].name() == name) return &a_[i];
    return nullptr;
  }
  const c10::IValue& operator[](size_t i) const { return a_[i]; }
  double real(const char* name, double fallback) const {
    const c10::IValue* v = find(name);
    return v == nullptr || v->isNone() ? fallback : v->toDouble();
  }
  std::optional<int64_t> integer(const char* name) const {
    const c10::IValue* v = find(name);
    if (v == nullptr || v->isNone()) return std::nullopt;
    return v->isInt() ? v->toInt() : v->toSymInt().expect_int();
  }
  const c10::IValue* data() const { return a_.data(); }
  size_t size() const { return a_.size(); }

 private:
  const c10::FunctionSchema& schema_;
  std::vector<c10::IValue> a_;
};

std::string where(const std::string& name, const Args& a) {
  return describe_args(name, arg_layouts(a.data(), a.size()));
}

/// The values of `draw` at the counters offset + per_element * i (+ 1) for the global indices
/// `index` (double, index's shape).
at::Tensor values_of(const Draw& draw, const at::Tensor& index, const RngState& r) {
  if (draw.per_element() == 2) {
    const at::Tensor twice = index * 2;
    const at::Tensor radius = at::log1p(-uniform_at(twice, r.seed, r.offset)).mul_(-2.0).sqrt_();
    at::Tensor z = uniform_at(twice + 1, r.seed, r.offset).mul_(2.0 * c10::pi<double>).cos_();
    z.mul_(radius).mul_(draw.b).add_(draw.a);
    return draw.kind == Kind::kLogNormal ? z.exp_() : z;
  }
  at::Tensor u = uniform_at(index, r.seed, r.offset);
  switch (draw.kind) {
    case Kind::kUniform: return u.mul_(draw.b - draw.a).add_(draw.a);
    case Kind::kExponential: return u.neg_().log1p_().div_(-draw.a);
    case Kind::kCauchy: return u.sub_(0.5).mul_(c10::pi<double>).tan_().mul_(draw.b).add_(draw.a);
    case Kind::kGeometric: return u.neg_().log1p_().div_(std::log1p(-draw.a)).floor_().add_(1.0);
    case Kind::kBernoulli: return u.lt(draw.a).to(at::kDouble);
    case Kind::kRandom: return u.mul_(draw.b - draw.a).floor_().add_(draw.a);
    default: break;
  }
  HYPER_CHECK_INTERNAL(false, "random_kernels: no formula for this kind");
  return u;
}

/// Fills `local` (rank mesh_index's local of `layout`) with `draw`, as random_kernels.h says:
/// the tracker of `mesh` advances on every rank; a rank off coordinate 0 of a Partial(sum) mesh
/// dim writes zeros. Below ADInplaceOrView; the local's version is bumped.
void fill_local(at::Tensor& local, const Layout& layout, int64_t mesh_index,
                const DeviceMesh& mesh, const Draw& draw) {
  const RngState r = draw_rng(mesh, draw.per_element() * layout.numel());
  {
    at::AutoDispatchBelowADInplaceOrView below;
    at::NoGradGuard no_grad;
    if (layout.holds_partial_zeros(mesh_index)) {
      local.zero_();
    } else {
      const at::Tensor index = global_linear_index(layout, mesh_index, local.options());
      local.copy_(values_of(draw, index, r).view(local.sizes()));
    }
  }
  bump_local_version(local);
}

// The distribution each op draws, read off its arguments by schema name, with ATen's argument
// checks (ValueError naming the values). `dtype`: the filled tensor's.
using DrawOf = Draw (*)(const std::string& name, const Args& a, at::ScalarType dtype);

void check_floating(const std::string& name, const Args& a, at::ScalarType dtype) {
  HYPER_CHECK_VALUE(at::isFloatingType(dtype), where(name, a), ": ", short_name(name),
                    " fills floating point tensors only, not ", c10::toString(dtype));
}
void check_real(const std::string& name, const Args& a, at::ScalarType dtype) {
  HYPER_CHECK_VALUE(!at::isComplexType(dtype), where(name, a), ": ", short_name(name),
                    " of a complex tensor is not implemented on a DTensor");
}

/// uniform_(from, to), rand_like.
Draw uniform_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_floating(name, a, dtype);
  const Draw d{Kind::kUniform, a.real("from", 0.0), a.real("to", 1.0)};
  HYPER_CHECK_VALUE(d.a <= d.b, where(name, a), ": ", short_name(name),
                    " expects to return a [from, to) range, but found from=", d.a, " > to=", d.b);
  return d;
}
/// normal_(mean, std), randn_like; log_normal_(mean, std) (`log`).
template <bool log>
Draw normal_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_floating(name, a, dtype);
  const Draw d{log ? Kind::kLogNormal : Kind::kNormal, a.real("mean", log ? 1.0 : 0.0),
               a.real("std", log ? 2.0 : 1.0)};
  HYPER_CHECK_VALUE(log ? d.b > 0 : d.b >= 0, where(name, a), ": ", short_name(name), " expects std ",
                    log ? "> 0.0" : ">= 0.0", ", but found std=", d.b);
  return d;
}
Draw exponential_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_floating(name, a, dtype);
  const Draw d{Kind::kExponential, a.real("lambd", 1.0)};
  HYPER_CHECK_VALUE(d.a > 0, where(name, a), ": exponential_ expects lambd > 0.0, but found lambd=", d.a);
  return d;
}
Draw cauchy_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_floating(name, a, dtype);
  const Draw d{Kind::kCauchy, a.real("median", 0.0), a.real("sigma", 1.0)};
  HYPER_CHECK_VALUE(d.b > 0, where(name, a), ": cauchy_ expects sigma > 0.0, but found sigma=", d.b);
  return d;
}
Draw geometric_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_real(name, a, dtype);
  const Draw d{Kind::kGeometric, a.real("p", 0.5)};
  HYPER_CHECK_VALUE(d.a > 0 && d.a < 1, where(name, a),
                    ": geometric_ expects p to be in (0, 1), but found p=", d.a);
  return d;
}
/// bernoulli_.float(p), bernoulli.p(p).
Draw bernoulli_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_real(name, a, dtype);
  const Draw d{Kind::kBernoulli, a.real("p", 0.5)};
  HYPER_CHECK_VALUE(d.a >= 0 && d.a <= 1, where(name, a), ": ", short_name(name),
                    " expects p to be in [0, 1], but found p=", d.a);
  return d;
}
/// random_(from, to) / random_(to) / random_(): integers in [from, to); randint_like(high) /
/// randint_like(low, high), `high` an int or a one-element integer tensor: [low, high).
Draw integer_draw(const std::string& name, const Args& a, at::ScalarType dtype) {
  check_real(name, a, dtype);
  const std::string op = short_name(name);
  const std::optional<int64_t> low = a.integer(a.find("from") != nullptr ? "from" : "low");
  const c10::IValue* bound = a.find("to") != nullptr ? a.find("to") : a.find("high");
  std::optional<int64_t> high;
  if (bound != nullptr && bound->isTensor()) {
    const at::Tensor h = bound->toTensor();
    HYPER_CHECK_VALUE(h.numel() == 1 && !at::isFloatingType(h.scalar_type()), where(name, a),
                      ": high must be a one-element integer tensor, got shape ",
                      shape_to_string(h.sizes().vec()), " ", c10::toString(h.scalar_type()));
    high = (is_dtensor(h) ? dtensor_of(h).full_tensor() : h).item<int64_t>();
  } else if (bound != nullptr && !bound->isNone()) {
    high = bound->isInt() ? bound->toInt() : bound->toSymInt().expect_int();
  }
  HYPER_CHECK_IMPLEMENTED(bound != nullptr, where(name, a),
                          ": random_ without bounds (the dtype's whole range) is not implemented "
                          "on a DTensor; give random_(from, to) or random_(to)");
  HYPER_CHECK_IMPLEMENTED(high.has_value(), where(name, a),
                          ": random_(from, None) (up to the dtype's limit) is not implemented on a "
                          "DTensor; give 'to'");
  const int64_t lo = low.value_or(0);
  HYPER_CHECK_VALUE(lo < *high, where(name, a), ": ", op,
                    " expects 'from' to be less than 'to', but got from=", lo, " >= to=", *high);
  HYPER_CHECK_VALUE(*high - lo <= (int64_t{1} << 53), where(name, a), ": ", op, " of a range of ",
                    *high - lo, " integers is not implemented on a DTensor (at most 2^53: the "
                    "draw is floor(u * range) of a 53-bit uniform u)");
  return Draw{Kind::kRandom, static_cast<double>(lo), static_cast<double>(*high)};
}

void refuse_generator(const std::string& name, const Args& a) {
  const c10::IValue* g = a.find("generator");
  HYPER_CHECK_IMPLEMENTED(g == nullptr || g->isNone() || !g->toGenerator().defined(), where(name, a),
                          ": an explicit generator is not used for a DTensor: its draws come from "
                          "the mesh's RNG tracker (hyper::manual_seed(mesh, seed) seeds it), so "
                          "every layout holds the same values; drop the generator argument");
}

/// bernoulli_.Tensor / bernoulli / bernoulli.Tensor: u_i < p_i with ops that have rules (p
/// broadcast, a Partial p reduced by lt's rule), the uniforms from rand_like.
at::Tensor bernoulli_of(const at::Tensor& like, const at::Tensor& p, at::ScalarType dtype) {
  return at::rand_like(like, like.options().dtype(at::kDouble)).lt(p).to(dtype);
}

/// A random op's call: its name, its arguments (the generator refused), and self, a DTensor.
struct RandomCall {
  std::string name;
  Args a;
  at::Tensor self;
};
RandomCall random_call(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  RandomCall c{op_name_of(op), Args(op, pop_args(op, stack)), {}};
  refuse_generator(c.name, c.a);
  c.self = c.a[0].toTensor();
  HYPER_CHECK_IMPLEMENTED(is_dtensor(c.self), where(c.name, c.a), ": self is a plain tensor and an "
                          "argument a DTensor; draw into a DTensor (hyper::as_tensor) instead");
  return c;
}

/// An in-place fill (uniform_, normal_, random_.from, ...): self keeps its layout.
template <DrawOf draw_of>
void fill_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const RandomCall c = random_call(op, stack);
  const DTensor d = dtensor_of(c.self);
  const Draw draw = draw_of(c.name, c.a, c.self.scalar_type());
  check_inplace_reaches_base(c.self, [&] { return where(c.name, c.a); });
  at::Tensor local = d.to_local();
  fill_local(local, d.layout(), d.mesh_index(), d.device_mesh(), draw);
  write_through(c.self);  // a copied slice of a sharded dim writes its base (dispatch_args.h)
  stack->push_back(c.self);
}

/// A factory like self (rand_like, randint_like, bernoulli.p, ...): a new DTensor in self's
/// layout with Partials Replicate, of the `dtype` argument when given.
template <DrawOf draw_of>
void like_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const RandomCall c = random_call(op, stack);
  const std::string& name = c.name;
  const Args& a = c.a;
  const DTensor d = dtensor_of(c.self);
  at::TensorOptions opts = d.to_local().options();
  if (const c10::IValue* dt = a.find("dtype"); dt != nullptr && !dt->isNone())
    opts = opts.dtype(dt->toScalarType());
  if (const c10::IValue* dev = a.find("device"))
    check_same_device([&] { return where(name, a); }, c.self.device(), *dev);
  if (const c10::IValue* lay = a.find("layout")) check_strided([&] { return where(name, a); }, *lay);
  const Draw draw = draw_of(name, a, c10::typeMetaToScalarType(opts.dtype()));
  const Layout out = partials_replicated(d.layout());
  at::Tensor local;
  {
    at::AutoDispatchBelowADInplaceOrView below;
    local = at::empty(out.local_shape(d.mesh_index()), opts);
  }
  fill_local(local, out, d.mesh_index(), d.device_mesh(), draw);
  stack->push_back(wrap(local, d, out));
}

/// bernoulli_.Tensor(self, p) (`inplace`), bernoulli(self) (p is self: `p_arg` false),
/// bernoulli.Tensor(self, p): u < p through ops with rules (bernoulli_of).
template <bool inplace, bool p_arg>
void bernoulli_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const RandomCall c = random_call(op, stack);
  const std::string& name = c.name;
  const at::Tensor& self = c.self;
  const at::Tensor p = p_arg ? c.a[1].toTensor() : self;
  HYPER_CHECK_VALUE(!at::isComplexType(p.scalar_type()) && !at::isComplexType(self.scalar_type()),
                    where(name, c.a), ": ", short_name(name), " of complex tensors is not implemented");
  if (p.numel() > 0) {  // ATen's check, on the global values (min/max: the same on every rank)
    const double lo = p.min().item<double>(), hi = p.max().item<double>();
    HYPER_CHECK_VALUE(lo >= 0 && hi <= 1, where(name, c.a), ": ", short_name(name),
                      " expects all elements of p to be in [0, 1], but found min ", lo, ", max ", hi);
  }
  if (inplace) {
    check_inplace_reaches_base(self, [&] { return where(name, c.a); });
    at::Tensor s = self;
    s.copy_(bernoulli_of(self, p, self.scalar_type()));
    stack->push_back(self);
  } else {
    stack->push_back(bernoulli_of(self, p, self.scalar_type()));
  }
}

}  // namespace

const KernelFamily& random_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"random", /*serves_out=*/true, {
      HYPER_BOXED_KERNEL("aten::uniform_", K::kDTensor, fill_kernel<uniform_draw>),
      HYPER_BOXED_KERNEL("aten::normal_", K::kDTensor, fill_kernel<normal_draw<false>>),
      HYPER_BOXED_KERNEL("aten::log_normal_", K::kDTensor, fill_kernel<normal_draw<true>>),
      HYPER_BOXED_KERNEL("aten::exponential_", K::kDTensor, fill_kernel<exponential_draw>),
      HYPER_BOXED_KERNEL("aten::cauchy_", K::kDTensor, fill_kernel<cauchy_draw>),
      HYPER_BOXED_KERNEL("aten::geometric_", K::kDTensor, fill_kernel<geometric_draw>),
      HYPER_BOXED_KERNEL("aten::bernoulli_.float", K::kDTensor, fill_kernel<bernoulli_draw>),
      HYPER_BOXED_KERNEL("aten::bernoulli_.Tensor", K::kDTensor, bernoulli_kernel<true, true>),
      HYPER_BOXED_KERNEL("aten::bernoulli", K::kDTensor, bernoulli_kernel<false, false>),
      HYPER_BOXED_KERNEL("aten::bernoulli.p", K::kDTensor, like_kernel<bernoulli_draw>),
      HYPER_BOXED_KERNEL("aten::bernoulli.Tensor", K::kDTensor, bernoulli_kernel<false, true>),
      HYPER_BOXED_KERNEL("aten::random_.from", K::kDTensor, fill_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::random_.to", K::kDTensor, fill_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::random_", K::kDTensor, fill_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::rand_like", K::kDTensor, like_kernel<uniform_draw>),
      HYPER_BOXED_KERNEL("aten::rand_like.generator", K::kDTensor, like_kernel<uniform_draw>),
      HYPER_BOXED_KERNEL("aten::randn_like", K::kDTensor, like_kernel<normal_draw<false>>),
      HYPER_BOXED_KERNEL("aten::randn_like.generator", K::kDTensor, like_kernel<normal_draw<false>>),
      HYPER_BOXED_KERNEL("aten::randint_like", K::kDTensor, like_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::randint_like.generator", K::kDTensor, like_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::randint_like.Tensor", K::kDTensor, like_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::randint_like.Tensor_generator", K::kDTensor, like_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::randint_like.low_dtype", K::kDTensor, like_kernel<integer_draw>),
      HYPER_BOXED_KERNEL("aten::randint_like.low_generator_dtype", K::kDTensor, like_kernel<integer_draw>),
  }};
  return f;
}

}  // namespace hyper::dispatch
