#pragma once
/// \file dispatch/testing_cases.h
/// The op/layout catalogue tests/pytorch_compare/cases.json on hyper's side, shared by
/// dispatch_cases.cc (the PyTorch comparison: values and placements) and catalogue_test.cc
/// (gtest DispatchCatalogue.*: values and gradients against the single-device op).
/// A case: {"id", "mesh", "op", "args", "inputs": [{"shape", "placements", "values": "a"|"b"|"mask"|[ints],
/// "plain": true (optional)}]}
/// (make_cases.py's docstring). The ops: tests/pytorch_compare/ops.json, the table both sides
/// read. Adding an op to the catalogue: its line in ops.json and its cases in make_cases.py.
#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/accumulate.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::dispatch_testing {

inline std::vector<int64_t> ints(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

/// The op table tests/pytorch_compare/ops.json (its "comment" says the term language): one
/// entry per op name of cases.json, an ATen call tree that compare_dtensor.py runs through
/// torch.ops.aten on PyTorch's side. Loaded once; throws ValueError when unreadable.
inline const nlohmann::json& op_table() {
  static const nlohmann::json table = [] {
    const std::string path = std::string(HYPER_SOURCE_DIR) + "/tests/pytorch_compare/ops.json";
    std::ifstream f(path);
    if (!f) throw ValueError("dispatch_cases: cannot read the op table " + path);
    return nlohmann::json::parse(f).at("ops");
  }();
  return table;
}

/// The number of inputs an op term names: the highest "$k" plus one.
inline size_t inputs_named(const nlohmann::json& term) {
  size_t n = 0;
  if (term.is_string()) {
    const std::string s = term.get<std::string>();
    if (!s.empty() && s[0] == '$') n = std::stoul(s.substr(1)) + 1;
  } else if (term.is_array() || term.is_object()) {
    for (const auto& t : term) n = std::max(n, inputs_named(t));
  }
  return n;
}

/// Evaluates one op of the table on at::Tensors (DTensor tensors, or the plain global tensors
/// for the oracle) through the dispatcher's boxed calls: the same ATen operators, arguments and
/// defaults as torch.ops.aten on PyTorch's side.
class OpTerm {
 public:
  OpTerm(std::string op, const nlohmann::json& args, const std::vector<at::Tensor>& in)
      : op_(std::move(op)), args_(args), in_(in) {}

  at::Tensor run(const nlohmann::json& term) {
    c10::IValue v = value(term, c10::TensorType::get());
    if (!v.isTensor()) throw ValueError(where() + "the op's value is not a tensor");
    return v.toTensor();
  }

 private:
  std::string where() const { return "dispatch_cases: op " + op_ + ": "; }

  const nlohmann::json& arg(const std::string& name) const {
    if (!args_.contains(name)) throw ValueError(where() + "the case has no argument '" + name + "'");
    return args_.at(name);
  }

  /// A term as an IValue of `type` (the schema's type of the argument it fills).
  c10::IValue value(const nlohmann::json& t, const c10::TypePtr& type) {
    if (t.is_string()) {
      const std::string s = t.get<std::string>();
      if (!s.empty() && s[0] == '$') return in_.at(std::stoul(s.substr(1)));
      if (!s.empty() && s[0] == '@') return value(arg(s.substr(1)), type);
      return literal(t, type);
    }
    if (t.is_object()) {
      if (t.contains("call")) return call(t);
      if (t.contains("dtype")) {
        const std::string d = t.at("dtype").get<std::string>();
        if (d == "float32") return c10::IValue(at::kFloat);
        if (d == "float64") return c10::IValue(at::kDouble);
        throw ValueError(where() + "unknown dtype " + d);
      }
      if (t.contains("float")) {
        const nlohmann::json v = resolved(t.at("float"));
        if (v.is_number()) return v.get<double>();
        const std::string s = v.get<std::string>();
        if (s == "inf" || s == "-inf") return s == "inf" ? static_cast<double>(INFINITY) : -static_cast<double>(INFINITY);
        throw ValueError(where() + "not a float: " + v.dump());
      }
      if (t.contains("enum")) {
        const nlohmann::json v = resolved(t.at("enum"));
        const auto& of = t.at("of");
        for (size_t i = 0; i < of.size(); ++i)
          if (of[i] == v) return static_cast<int64_t>(i);
        throw ValueError(where() + v.dump() + " is not one of " + of.dump());
      }
      if (t.contains("index_at")) {
        c10::List<std::optional<at::Tensor>> l;
        for (int64_t k = 0; k < resolved(t.at("index_at")).get<int64_t>(); ++k) l.push_back(std::nullopt);
        l.push_back(value(t.at("index"), c10::TensorType::get()).toTensor());
        return l;
      }
      throw ValueError(where() + "unknown term " + t.dump());
    }
    if (t.is_array() && type->kind() == c10::TypeKind::ListType) {
      const c10::TypePtr elem = type->castRaw<c10::ListType>()->getElementType();
      if (elem->kind() == c10::TypeKind::OptionalType) {  // Tensor?[]
        c10::List<std::optional<at::Tensor>> l;
        for (const auto& e : t) {
          if (e.is_null()) l.push_back(std::nullopt);
          else l.push_back(value(e, c10::TensorType::get()).toTensor());
        }
        return l;
      }
      if (elem->kind() == c10::TypeKind::TensorType) {
        c10::List<at::Tensor> l;
        for (const auto& e : t) l.push_back(value(e, elem).toTensor());
        return l;
      }
    }
    return literal(t, type);
  }

  /// An argument's term when it is a case argument or a literal (a JSON value).
  nlohmann::json resolved(const nlohmann::json& t) const {
    if (t.is_string() && !t.get<std::string>().empty() && t.get<std::string>()[0] == '@')
      return arg(t.get<std::string>().substr(1));
    return t;
  }

  /// A JSON value as an IValue of `type`.
  c10::IValue literal(const nlohmann::json& v, const c10::TypePtr& type) {
    using K = c10::TypeKind;
    switch (type->kind()) {
      case K::OptionalType:
        if (v.is_null()) return c10::IValue();
        return literal(v, type->castRaw<c10::OptionalType>()->getElementType());
      case K::IntType:
      case K::SymIntType:
        if (v.is_number_integer()) return v.get<int64_t>();
        break;
      case K::FloatType:
        if (v.is_number()) return v.get<double>();
        break;
      case K::BoolType:
        if (v.is_boolean()) return v.get<bool>();
        break;
      case K::StringType:
        if (v.is_string()) return v.get<std::string>();
        break;
      case K::NumberType:  // Scalar: the JSON number's own kind
        if (v.is_number_integer()) return c10::Scalar(v.get<int64_t>());
        if (v.is_number()) return c10::Scalar(v.get<double>());
        if (v.is_boolean()) return c10::Scalar(v.get<bool>());
        break;
      case K::ListType: {
        const K elem = type->castRaw<c10::ListType>()->getElementType()->kind();
        if ((elem == K::IntType || elem == K::SymIntType) && v.is_number_integer())
          return c10::List<int64_t>({v.get<int64_t>()});
        if ((elem == K::IntType || elem == K::SymIntType) && v.is_array())
          return c10::List<int64_t>(v.get<std::vector<int64_t>>());
        if (elem == K::FloatType && v.is_array()) return c10::List<double>(v.get<std::vector<double>>());
        break;
      }
      default:
        break;
    }
    throw ValueError(where() + "cannot pass " + v.dump() + " as " + type->str());
  }

  /// {"call": "op.overload", "args", "kwargs", "output"}: the operator aten::op through the
  /// dispatcher (boxed), the schema's defaults for the arguments the term leaves out.
  c10::IValue call(const nlohmann::json& t) {
    const std::string name = t.at("call").get<std::string>();
    const size_t dot = name.find('.');
    const std::string overload = dot == std::string::npos ? "default" : name.substr(dot + 1);
    const std::string base = "aten::" + name.substr(0, dot);
    const auto handle =
        c10::Dispatcher::singleton().findSchema({base, overload == "default" ? "" : overload});
    if (!handle) throw ValueError(where() + "no ATen operator " + name);
    const c10::FunctionSchema& schema = handle->schema();
    const nlohmann::json positional = t.value("args", nlohmann::json::array());
    const nlohmann::json kwargs = t.value("kwargs", nlohmann::json::object());
    if (positional.size() > schema.arguments().size())
      throw ValueError(where() + name + " takes " + std::to_string(schema.arguments().size()) +
                       " arguments, the table gives " + std::to_string(positional.size()));
    size_t used_kwargs = 0;
    torch::jit::Stack stack;
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& a = schema.arguments()[i];
      if (i < positional.size()) {
        stack.push_back(value(positional[i], a.type()));
      } else if (kwargs.contains(a.name())) {
        stack.push_back(value(kwargs.at(a.name()), a.type()));
        ++used_kwargs;
      } else if (a.default_value()) {
        stack.push_back(*a.default_value());
      } else {
        throw ValueError(where() + name + ": no value for its argument " + a.name());
      }
    }
    if (used_kwargs != kwargs.size())
      throw ValueError(where() + name + ": unknown keyword among " + kwargs.dump());
    handle->callBoxed(stack);
    if (!t.contains("output")) {
      if (stack.size() != 1) throw ValueError(where() + name + " returns " + std::to_string(stack.size()) + " values");
      return stack[0];
    }
    std::vector<at::Tensor> outs;
    for (const auto& v : stack) {
      if (v.isTensorList()) for (const at::Tensor& x : v.toTensorVector()) outs.push_back(x);
      else outs.push_back(v.toTensor());
    }
    const nlohmann::json which = resolved(t.at("output"));
    if (which == "sum") {
      at::Tensor s = outs.at(0);
      for (size_t k = 1; k < outs.size(); ++k) s = s + outs[k];
      return s;
    }
    const int64_t k = which.get<int64_t>();
    if (k < 0 || k >= static_cast<int64_t>(outs.size()))
      throw ValueError(where() + "output " + std::to_string(k) + " of " + std::to_string(outs.size()));
    return outs[k];
  }

  std::string op_;
  const nlohmann::json& args_;
  const std::vector<at::Tensor>& in_;
};

/// The op of a case on at::Tensors (DTensor tensors, or the plain global tensors for the
/// oracle), `in` in the order of the case's inputs: op_table()'s entry for `op`. Throws
/// ValueError for an unknown op or a wrong input count.
inline at::Tensor run_op(const std::string& op, const nlohmann::json& args, const std::vector<at::Tensor>& in) {
  const nlohmann::json& table = op_table();
  if (!table.contains(op)) throw ValueError("dispatch_cases: unknown op '" + op + "' in the case file");
  const nlohmann::json& term = table.at(op);
  const size_t n = inputs_named(term);
  if (in.size() != n)
    throw ValueError("dispatch_cases: op " + op + " takes " + std::to_string(n) + " inputs, got " +
                     std::to_string(in.size()));
  return OpTerm(op, args, in).run(term);
}

/// The placements of a case input (["S(0)", "P(sum)", "RS((0,), (1, 2))", ...]).
inline Placements placements_of(const nlohmann::json& j) {
  Placements ps;
  for (const auto& s : j) ps.push_back(Placement::from_string(s.get<std::string>()));
  return ps;
}

/// The global (single-device) tensor of a case input: global_a or global_b of its shape,
/// "mask": global_a > 0 (bool), or a list of ints: those values (int64, e.g. embedding ids).
inline at::Tensor case_global(const nlohmann::json& input) {
  const std::vector<int64_t> shape = ints(input.at("shape"));
  const auto& v = input.at("values");
  if (v.is_array()) {
    const std::vector<int64_t> ids = ints(v);
    if (static_cast<int64_t>(ids.size()) != c10::multiply_integers(shape))
      throw ValueError("dispatch_cases: " + std::to_string(ids.size()) + " int values for an input of " +
                       std::to_string(c10::multiply_integers(shape)) + " elements");
    return at::tensor(ids, at::kLong).reshape(shape);
  }
  if (v == "mask") return at::gt(global_a(shape), 0.0);
  if (v == "a") return global_a(shape);
  if (v == "b") return global_b(shape);
  throw ValueError("dispatch_cases: unknown input values " + v.dump());
}

/// The DTensor of a case input on `mesh` (make: Partial with unequal shares).
inline DTensor case_input(const nlohmann::json& input, const DeviceMesh& mesh) {
  return make(case_global(input), mesh, placements_of(input.at("placements")));
}

/// The at::Tensor of a case input on `mesh`: a DTensor tensor, or for "plain": true the plain
/// global tensor (the same on every rank: Replicate beside DTensors).
inline at::Tensor case_tensor(const nlohmann::json& input, const DeviceMesh& mesh) {
  if (input.value("plain", false)) return case_global(input);
  return case_input(input, mesh).as_tensor();
}

}  // namespace hyper::dispatch_testing
