#include "hyper/tensor/ops.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>
#include <unordered_map>

#include "hyper/comm/c10_errors.h"
#include "hyper/core/errors.h"
#include "hyper/tensor/dtensor_tensor.h"
#include "hyper/tensor/redistribute.h"

namespace hyper::ops {

namespace {

using UnaryFn = std::function<at::Tensor(const at::Tensor&)>;
using BinaryFn = std::function<at::Tensor(const at::Tensor&, const at::Tensor&)>;
using TensorScalarFn = std::function<at::Tensor(const at::Tensor&, const at::Scalar&)>;
using ScalarTensorFn = std::function<at::Tensor(const at::Scalar&, const at::Tensor&)>;

/// `s` as the 0-dim "wrapped number" ATen makes for `scalar op tensor` (type promotion treats it
/// as a scalar; the sharding rules as a plain Replicate operand).
at::Tensor scalar_like(const at::Scalar& s, const at::Tensor& t) {
  at::Tensor r = at::scalar_tensor(s, at::TensorOptions().dtype(s.type()).device(t.device()));
  r.unsafeGetTensorImpl()->set_wrapped_number(true);
  return r;
}

const std::unordered_map<std::string, UnaryFn>& unary_table() {
  static const std::unordered_map<std::string, UnaryFn> t = {
      {"abs", [](const at::Tensor& x) { return at::abs(x); }},
      {"absolute", [](const at::Tensor& x) { return at::abs(x); }},
      {"clone", [](const at::Tensor& x) { return x.clone(at::MemoryFormat::Contiguous); }},
      {"cos", [](const at::Tensor& x) { return at::cos(x); }},
      {"exp", [](const at::Tensor& x) { return at::exp(x); }},
      {"gelu", [](const at::Tensor& x) { return at::gelu(x); }},
      {"isinf", [](const at::Tensor& x) { return at::isinf(x); }},
      {"isnan", [](const at::Tensor& x) { return at::isnan(x); }},
      {"log", [](const at::Tensor& x) { return at::log(x); }},
      {"neg", [](const at::Tensor& x) { return at::neg(x); }},
      {"negative", [](const at::Tensor& x) { return at::neg(x); }},
      {"relu", [](const at::Tensor& x) { return at::relu(x); }},
      {"rsqrt", [](const at::Tensor& x) { return at::rsqrt(x); }},
      {"sigmoid", [](const at::Tensor& x) { return at::sigmoid(x); }},
      {"silu", [](const at::Tensor& x) { return at::silu(x); }},
      {"sin", [](const at::Tensor& x) { return at::sin(x); }},
      {"sqrt", [](const at::Tensor& x) { return at::sqrt(x); }},
      {"square", [](const at::Tensor& x) { return at::square(x); }},
  };
  return t;
}

struct BinaryEntry {
  BinaryFn tt;
  TensorScalarFn ts;
  ScalarTensorFn st;
};

const std::unordered_map<std::string, BinaryEntry>& binary_table() {
  static const std::unordered_map<std::string, BinaryEntry> t = {
      {"add",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::add(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::add(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) { return at::add(b, a); }}},
      {"sub",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::sub(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::sub(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) { return at::sub(scalar_like(a, b), b); }}},
      {"mul",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::mul(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::mul(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) { return at::mul(b, a); }}},
      {"div",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::div(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::div(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) { return at::div(scalar_like(a, b), b); }}},
      {"true_divide",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::true_divide(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::true_divide(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) {
          return at::true_divide(scalar_like(a, b), b);
        }}},
      {"pow",
       {[](const at::Tensor& a, const at::Tensor& b) { return at::pow(a, b); },
        [](const at::Tensor& a, const at::Scalar& b) { return at::pow(a, b); },
        [](const at::Scalar& a, const at::Tensor& b) { return at::pow(a, b); }}},
  };
  return t;
}

std::vector<std::string> sorted_keys(const std::vector<std::string>& v) {
  auto out = v;
  std::sort(out.begin(), out.end());
  return out;
}

void check_defined(const std::string& name, const DTensor& x) {
  HYPER_CHECK_VALUE(x.defined(), "hyper::ops::", name, " on an undefined DTensor");
}

[[noreturn]] void not_whitelisted(const std::string& name, const DTensor& x) {
  check_defined(name, x);
  throw NotImplementedError(internal::str_cat("hyper::ops::", name, " is not one of hyper::ops' "
                                              "elementwise ops (", x.layout().to_string(),
                                              "): call the at:: op on hyper::as_tensor(x)"));
}

/// `hyper::ops::<name>: ` before the message of an error of `f` (hyper's types kept; a c10
/// error becomes hyper's as at the LibTorch boundary, docs/errors.md).
template <typename F>
DTensor dispatched(const std::string& name, F&& f) {
  const std::string ctx = "hyper::ops::" + name + ": ";
  auto with_ctx = [&ctx](const std::exception& e) {
    const std::string m = e.what();
    return m.rfind(ctx, 0) == 0 ? m : ctx + m;
  };
  try {
    return as_dtensor(with_c10_errors<ValueError>("hyper::ops::" + name, std::forward<F>(f)));
  } catch (const ValueError& e) {
    throw ValueError(with_ctx(e));
  } catch (const NotImplementedError& e) {
    throw NotImplementedError(with_ctx(e));
  } catch (const CommError& e) {
    throw CommError(with_ctx(e));
  }
}

void check_mesh_pair(const std::string& name, const DTensor& a, const DTensor& b) {
  check_defined(name, a);
  check_defined(name, b);
  HYPER_CHECK_VALUE(a.device_mesh() == b.device_mesh(), "hyper::ops::", name,
                    ": operands on different meshes: ", a.device_mesh().to_string(), " and ",
                    b.device_mesh().to_string());
}

}  // namespace

const std::vector<std::string>& unary_ops() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> k;
    for (const auto& e : unary_table()) k.push_back(e.first);
    return sorted_keys(k);
  }();
  return v;
}

const std::vector<std::string>& binary_ops() {
  static const std::vector<std::string> v = [] {
    std::vector<std::string> k;
    for (const auto& e : binary_table()) k.push_back(e.first);
    return sorted_keys(k);
  }();
  return v;
}

DTensor unary(const std::string& name, const DTensor& x) {
  check_defined(name, x);
  const auto it = unary_table().find(name);
  if (it == unary_table().end()) not_whitelisted(name, x);
  return dispatched(name, [&] { return it->second(as_tensor(x)); });
}

DTensor binary(const std::string& name, const DTensor& a, const DTensor& b) {
  check_defined(name, a);
  check_defined(name, b);
  const auto it = binary_table().find(name);
  if (it == binary_table().end()) not_whitelisted(name, a);
  check_mesh_pair(name, a, b);
  return dispatched(name, [&] { return it->second.tt(as_tensor(a), as_tensor(b)); });
}

DTensor binary(const std::string& name, const DTensor& a, const at::Scalar& b) {
  check_defined(name, a);
  const auto it = binary_table().find(name);
  if (it == binary_table().end()) not_whitelisted(name, a);
  return dispatched(name, [&] { return it->second.ts(as_tensor(a), b); });
}

DTensor binary(const std::string& name, const at::Scalar& a, const DTensor& b) {
  check_defined(name, b);
  const auto it = binary_table().find(name);
  if (it == binary_table().end()) not_whitelisted(name, b);
  return dispatched(name, [&] { return it->second.st(a, as_tensor(b)); });
}

#define HYPER_DTENSOR_UNARY_DEF(name) \
  DTensor name(const DTensor& x) { return unary(#name, x); }
HYPER_DTENSOR_UNARY_DEF(abs)
HYPER_DTENSOR_UNARY_DEF(absolute)
HYPER_DTENSOR_UNARY_DEF(clone)
HYPER_DTENSOR_UNARY_DEF(cos)
HYPER_DTENSOR_UNARY_DEF(exp)
HYPER_DTENSOR_UNARY_DEF(gelu)
HYPER_DTENSOR_UNARY_DEF(isinf)
HYPER_DTENSOR_UNARY_DEF(isnan)
HYPER_DTENSOR_UNARY_DEF(log)
HYPER_DTENSOR_UNARY_DEF(neg)
HYPER_DTENSOR_UNARY_DEF(negative)
HYPER_DTENSOR_UNARY_DEF(relu)
HYPER_DTENSOR_UNARY_DEF(rsqrt)
HYPER_DTENSOR_UNARY_DEF(sigmoid)
HYPER_DTENSOR_UNARY_DEF(silu)
HYPER_DTENSOR_UNARY_DEF(sin)
HYPER_DTENSOR_UNARY_DEF(sqrt)
HYPER_DTENSOR_UNARY_DEF(square)
#undef HYPER_DTENSOR_UNARY_DEF

#define HYPER_DTENSOR_BINARY_DEF(name)                                                      \
  DTensor name(const DTensor& a, const DTensor& b) { return binary(#name, a, b); }          \
  DTensor name(const DTensor& a, const at::Scalar& b) { return binary(#name, a, b); }       \
  DTensor name(const at::Scalar& a, const DTensor& b) { return binary(#name, a, b); }
HYPER_DTENSOR_BINARY_DEF(add)
HYPER_DTENSOR_BINARY_DEF(sub)
HYPER_DTENSOR_BINARY_DEF(mul)
HYPER_DTENSOR_BINARY_DEF(div)
HYPER_DTENSOR_BINARY_DEF(true_divide)
HYPER_DTENSOR_BINARY_DEF(pow)
#undef HYPER_DTENSOR_BINARY_DEF

DTensor sum(const DTensor& x) {
  check_defined("sum", x);
  return dispatched("sum", [&] { return at::sum(as_tensor(x)); });
}
DTensor mean(const DTensor& x) {
  check_defined("mean", x);
  return dispatched("mean", [&] { return at::mean(as_tensor(x)); });
}
DTensor reshape(const DTensor& x, const std::vector<int64_t>& shape) {
  check_defined("reshape", x);
  return dispatched("reshape", [&] { return at::reshape(as_tensor(x), shape); });
}
DTensor view(const DTensor& x, const std::vector<int64_t>& shape) {
  check_defined("view", x);
  return dispatched("view", [&] { return as_tensor(x).view(shape); });
}
DTensor flatten(const DTensor& x) {
  check_defined("flatten", x);
  return dispatched("flatten", [&] { return at::flatten(as_tensor(x)); });
}
DTensor matmul(const DTensor& a, const DTensor& b) {
  check_mesh_pair("matmul", a, b);
  return dispatched("matmul", [&] { return at::matmul(as_tensor(a), as_tensor(b)); });
}

namespace {

DTensor make_factory(const char* name, const std::vector<int64_t>& shape, const DeviceMesh& mesh,
                     const Placements& placements,
                     const std::function<at::Tensor(const std::vector<int64_t>&)>& make) {
  HYPER_CHECK_VALUE(mesh.defined(), "hyper::ops::", name, ": undefined DeviceMesh");
  for (const auto& p : placements) {
    HYPER_CHECK_IMPLEMENTED(!p.is_ragged_shard(), "hyper::ops::", name, " with the ",
                            p.to_string(), " placement is not implemented: ragged DTensor "
                            "factories are fail-closed (make the global tensor and call "
                            "distribute_tensor, or use DTensor::from_local)");
    HYPER_CHECK_IMPLEMENTED(!p.is_partial(), "hyper::ops::", name, " with the ", p.to_string(),
                            " placement is not implemented");
  }
  Layout layout(mesh.topology(), placements, shape);
  const auto idx = mesh_index_of(mesh);
  return DTensor::from_local_with_layout(make(layout.local_shape(idx)), mesh, layout);
}

at::TensorOptions on_mesh(const at::TensorOptions& o, const DeviceMesh& mesh) {
  if (o.has_device()) return o;
  return o.device(mesh.device_type());
}

}  // namespace

DTensor empty(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
              const Placements& placements, const at::TensorOptions& options) {
  return make_factory("empty", shape, mesh, placements,
                      [&](const std::vector<int64_t>& s) { return at::empty(s, on_mesh(options, mesh)); });
}
DTensor zeros(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
              const Placements& placements, const at::TensorOptions& options) {
  return make_factory("zeros", shape, mesh, placements,
                      [&](const std::vector<int64_t>& s) { return at::zeros(s, on_mesh(options, mesh)); });
}
DTensor ones(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options) {
  return make_factory("ones", shape, mesh, placements,
                      [&](const std::vector<int64_t>& s) { return at::ones(s, on_mesh(options, mesh)); });
}
DTensor full(const std::vector<int64_t>& shape, const at::Scalar& value, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options) {
  return make_factory("full", shape, mesh, placements, [&](const std::vector<int64_t>& s) {
    return at::full(s, value, on_mesh(options, mesh));
  });
}
DTensor rand(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options) {
  return make_factory("rand", shape, mesh, placements,
                      [&](const std::vector<int64_t>& s) { return at::rand(s, on_mesh(options, mesh)); });
}

}  // namespace hyper::ops

namespace hyper {

DTensor operator+(const DTensor& a, const DTensor& b) { return ops::add(a, b); }
DTensor operator+(const DTensor& a, const at::Scalar& b) { return ops::add(a, b); }
DTensor operator+(const at::Scalar& a, const DTensor& b) { return ops::add(a, b); }
DTensor operator-(const DTensor& a, const DTensor& b) { return ops::sub(a, b); }
DTensor operator-(const DTensor& a, const at::Scalar& b) { return ops::sub(a, b); }
DTensor operator-(const at::Scalar& a, const DTensor& b) { return ops::sub(a, b); }
DTensor operator*(const DTensor& a, const DTensor& b) { return ops::mul(a, b); }
DTensor operator*(const DTensor& a, const at::Scalar& b) { return ops::mul(a, b); }
DTensor operator*(const at::Scalar& a, const DTensor& b) { return ops::mul(a, b); }
DTensor operator/(const DTensor& a, const DTensor& b) { return ops::div(a, b); }
DTensor operator/(const DTensor& a, const at::Scalar& b) { return ops::div(a, b); }
DTensor operator/(const at::Scalar& a, const DTensor& b) { return ops::div(a, b); }
DTensor operator-(const DTensor& x) { return ops::neg(x); }

}  // namespace hyper
