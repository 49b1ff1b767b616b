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

/// The distribution an op draws, with ATen's argument checks (ValueError naming the values).
Draw draw_of(const std::string& name, const Args& a, at::ScalarType dtype) {
  const std::string op = short_name(name);
  auto floating_only = [&] {
    HYPER_CHECK_VALUE(at::isFloatingType(dtype), where(name, a), ": ", op,
                      " fills floating point tensors only, not ", c10::toString(dtype));
  };
  auto real_only = [&] {
    HYPER_CHECK_VALUE(!at::isComplexType(dtype), where(name, a), ": ", op,
                      " of a complex tensor is not implemented on a DTensor");
  };
  if (op == "uniform_" || op == "rand_like" || op == "rand_like.generator") {
    floating_only();
    const Draw d{Kind::kUniform, a.real("from", 0.0), a.real("to", 1.0)};
    HYPER_CHECK_VALUE(d.a <= d.b, where(name, a), ": ", op,
                      " expects to return a [from, to) range, but found from=", d.a, " > to=", d.b);
    return d;
  }
  if (op == "normal_" || op == "log_normal_" || op == "randn_like" || op == "randn_like.generator") {
    floating_only();
    const bool log = op == "log_normal_";
    const Draw d{log ? Kind::kLogNormal : Kind::kNormal, a.real("mean", log ? 1.0 : 0.0),
                 a.real("std", log ? 2.0 : 1.0)};
    HYPER_CHECK_VALUE(log ? d.b > 0 : d.b >= 0, where(name, a), ": ", op, " expects std ",
                      log ? "> 0.0" : ">= 0.0", ", but found std=", d.b);
    return d;
  }
  if (op == "exponential_") {
    floating_only();
    const Draw d{Kind::kExponential, a.real("lambd", 1.0)};
    HYPER_CHECK_VALUE(d.a > 0, where(name, a), ": exponential_ expects lambd > 0.0, but found lambd=", d.a);
    return d;
  }
  if (op == "cauchy_") {
    floating_only();
    const Draw d{Kind::kCauchy, a.real("median", 0.0), a.real("sigma", 1.0)};
    HYPER_CHECK_VALUE(d.b > 0, where(name, a), ": cauchy_ expects sigma > 0.0, but found sigma=", d.b);
    return d;
  }
  real_only();
  if (op == "geometric_") {
    const Draw d{Kind::kGeometric, a.real("p", 0.5)};
    HYPER_CHECK_VALUE(d.a > 0 && d.a < 1, where(name, a),
                      ": geometric_ expects p to be in (0, 1), but found p=", d.a);
    return d;
  }
  if (op == "bernoulli_.float" || op == "bernoulli.p") {
    const Draw d{Kind::kBernoulli, a.real("p", 0.5)};
    HYPER_CHECK_VALUE(d.a >= 0 && d.a <= 1, where(name, a),
                      ": ", op, " expects p to be in [0, 1], but found p=", d.a);
    return d;
  }
  // random_ and randint_like: integers in [low, high).
  std::optional<int64_t> low = a.integer(op == "random_.from" ? "from" : "low");
  const bool high_tensor = op == "randint_like.Tensor" || op == "randint_like.Tensor_generator";
  std::optional<int64_t> high;
  if (!high_tensor) high = a.integer(op == "random_.from" || op == "random_.to" ? "to" : "high");
  if (high_tensor) {
    const at::Tensor h = (*a.find("high")).toTensor();
    HYPER_CHECK_VALUE(h.numel() == 1 && !at::isFloatingType(h.scalar_type()), where(name, a),
                      ": high must be a one-element integer tensor, got shape ",
                      shape_to_string(h.sizes().vec()), " ", c10::toString(h.scalar_type()));
    high = (is_dtensor(h) ? dtensor_of(h).full_tensor() : h).item<int64_t>();
  }
  HYPER_CHECK_IMPLEMENTED(op != "random_", where(name, a),
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

void random_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const std::string name = op_name_of(op);
  const Args a(op, pop_args(op, stack));
  refuse_generator(name, a);
  const at::Tensor self = a[0].toTensor();
  const std::string op_short = short_name(name);
  HYPER_CHECK_IMPLEMENTED(is_dtensor(self), where(name, a), ": self is a plain tensor and an "
                          "argument a DTensor; draw into a DTensor (hyper::as_tensor) instead");
  if (op_short == "bernoulli_.Tensor" || op_short == "bernoulli" || op_short == "bernoulli.Tensor") {
    const at::Tensor p = op_short == "bernoulli" ? self : a[1].toTensor();
    HYPER_CHECK_VALUE(!at::isComplexType(p.scalar_type()) && !at::isComplexType(self.scalar_type()),
                      where(name, a), ": ", op_short, " of complex tensors is not implemented");
    if (p.numel() > 0) {  // ATen's check, on the global values (min/max: the same on every rank)
      const double lo = p.min().item<double>(), hi = p.max().item<double>();
      HYPER_CHECK_VALUE(lo >= 0 && hi <= 1, where(name, a), ": ", op_short,
                        " expects all elements of p to be in [0, 1], but found min ", lo, ", max ", hi);
    }
    if (op_short == "bernoulli_.Tensor") {
      check_inplace_reaches_base(self, [&] { return where(name, a); });
      at::Tensor s = self;
      s.copy_(bernoulli_of(self, p, self.scalar_type()));
      stack->push_back(self);
    } else {
      stack->push_back(bernoulli_of(self, p, self.scalar_type()));
    }
    return;
  }
  const DTensor d = dtensor_of(self);
  const bool like = op_short.find("_like") != std::string::npos || op_short == "bernoulli.p";
  if (!like) {  // in place: self keeps its layout
    const Draw draw = draw_of(name, a, self.scalar_type());
    check_inplace_reaches_base(self, [&] { return where(name, a); });
    at::Tensor local = d.to_local();
    fill_local(local, d.layout(), d.mesh_index(), d.device_mesh(), draw);
    write_through(self);  // a copied slice of a sharded dim writes its base (dispatch_args.h)
    stack->push_back(self);
    return;
  }
  // A new DTensor in self's layout with Partials Replicate.
  at::TensorOptions opts = d.to_local().options();
  if (const c10::IValue* dt = a.find("dtype"); dt != nullptr && !dt->isNone())
    opts = opts.dtype(dt->toScalarType());
  if (const c10::IValue* dev = a.find("device"))
    check_same_device([&] { return where(name, a); }, self.device(), *dev);
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

}  // namespace

const KernelFamily& random_kernels() {
  using K = KernelKey;
  static const KernelFamily f{"random", /*serves_out=*/true, {
      HYPER_BOXED_KERNEL("aten::uniform_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::normal_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::log_normal_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::exponential_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::cauchy_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::geometric_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::bernoulli_.float", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::bernoulli_.Tensor", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::bernoulli", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::bernoulli.p", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::bernoulli.Tensor", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::random_.from", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::random_.to", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::random_", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::rand_like", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::rand_like.generator", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randn_like", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randn_like.generator", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like.generator", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like.Tensor", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like.Tensor_generator", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like.low_dtype", K::kDTensor, random_kernel),
      HYPER_BOXED_KERNEL("aten::randint_like.low_generator_dtype", K::kDTensor, random_kernel),
  }};
  return f;
}

}  // namespace hyper::dispatch
