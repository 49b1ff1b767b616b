#pragma once
/// \file dispatch/testing_cases.h
/// The op/layout catalogue tests/pytorch_compare/cases.json on hyper's side, shared by
/// dispatch_cases.cc (the PyTorch comparison: values and placements) and catalogue_test.cc
/// (gtest DispatchCatalogue.*: values and gradients against the single-device op).
/// A case: {"id", "mesh", "op", "args", "inputs": [{"shape", "placements", "values": "a"|"b"|"mask"|[ints],
/// "plain": true (optional)}]}
/// (make_cases.py's docstring). Adding an op: one line in run_op here, the same op in
/// compare_dtensor.py's run_op table, and its cases in make_cases.py.
#include <ATen/ATen.h>
#include <c10/util/accumulate.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "hyper/core/errors.h"
#include "hyper/tensor/dispatch/testing_dispatch.h"
#include "hyper/tensor/dtensor.h"

namespace hyper::dispatch_testing {

inline std::vector<int64_t> ints(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

/// The op of a case on at::Tensors (DTensor tensors, or the plain global tensors for the
/// oracle). `in` in the order of the case's inputs; ops and argument names as in
/// compare_dtensor.py's run_op. Throws ValueError for an unknown op or a wrong input count.
inline at::Tensor run_op(const std::string& op, const nlohmann::json& args, const std::vector<at::Tensor>& in) {
  auto arity = [&](size_t n) {
    if (in.size() != n)
      throw ValueError("dispatch_cases: op " + op + " takes " + std::to_string(n) + " inputs, got " +
                       std::to_string(in.size()));
  };
  if (op == "add" || op == "sub" || op == "mul" || op == "div" || op == "add_alpha" ||
      op == "mm" || op == "bmm" || op == "matmul" || op == "add_inplace" || op == "mul_inplace")
    arity(2);
  else if (op == "addmm" || op == "baddbmm" || op == "linear" || op == "layer_norm_affine" ||
           op == "addcmul" || op == "addcdiv" || op == "where" || op == "sdpa" || op == "clamp_tensor" ||
           op == "conv2d" || op == "batch_norm" || op == "group_norm" || op == "embedding_bag")
    arity(3);
  else if (op == "maximum" || op == "masked_fill" || op == "embedding" || op == "minimum" ||
           op == "logaddexp" || op == "atan2" || op == "hypot" || op == "fmod" ||
           op == "remainder" || op == "div_floor" || op == "pow" || op == "lerp" ||
           op == "clamp_max_tensor" || op == "gather" || op == "index_select" ||
           op == "scatter_value" || op == "index" || op == "index_fill" || op == "index_mask" ||
           op == "fmax" || op == "fmin" || op == "xlogy" || op == "mse_loss" ||
           op == "smooth_l1_loss" || op == "huber_loss" || op == "bce_with_logits" || op == "dist" ||
           op == "masked_select" || op == "index_put_mask" || op == "cdist")
    arity(2);
  else if (op == "scatter" || op == "scatter_add" || op == "index_put" || op == "index_add" ||
           op == "index_copy" || op == "scatter_reduce" || op == "index_reduce" || op == "index2")
    arity(3);
  else if (op == "index_put2")
    arity(4);
  else
    arity(1);
  const at::Tensor& a = in[0];
  if (op == "add") return at::add(a, in[1]);
  if (op == "add_alpha") return at::add(a, in[1], args.at("alpha").get<double>());
  if (op == "sub") return at::sub(a, in[1]);
  if (op == "mul") return at::mul(a, in[1]);
  if (op == "div") return at::div(a, in[1]);
  if (op == "add_scalar") return at::add(a, args.at("scalar").get<double>());
  if (op == "mul_scalar") return at::mul(a, args.at("scalar").get<double>());
  if (op == "div_scalar") return at::div(a, args.at("scalar").get<double>());
  if (op == "neg") return at::neg(a);
  if (op == "relu") return at::relu(a);
  if (op == "exp") return at::exp(a);
  if (op == "tanh") return at::tanh(a);
  if (op == "gelu") return at::gelu(a);
  if (op == "clone") return a.clone();
  if (op == "sum") return at::sum(a);
  if (op == "sum_dim") return at::sum(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "amax") return at::amax(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "amin") return at::amin(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "mm") return at::mm(a, in[1]);
  if (op == "bmm") return at::bmm(a, in[1]);
  if (op == "matmul") return at::matmul(a, in[1]);
  if (op == "addmm")
    return at::addmm(a, in[1], in[2], args.at("beta").get<double>(), args.at("alpha").get<double>());
  if (op == "baddbmm")
    return at::baddbmm(a, in[1], in[2], args.at("beta").get<double>(), args.at("alpha").get<double>());
  if (op == "view") return a.view(ints(args.at("shape")));
  if (op == "reshape") return a.reshape(ints(args.at("shape")));
  if (op == "permute") return a.permute(ints(args.at("dims")));
  if (op == "transpose") return a.transpose(args.at("dim0").get<int64_t>(), args.at("dim1").get<int64_t>());
  if (op == "t") return a.t();
  if (op == "unsqueeze") return a.unsqueeze(args.at("dim").get<int64_t>());
  if (op == "squeeze") return a.squeeze(args.at("dim").get<int64_t>());
  if (op == "squeeze_all") return a.squeeze();
  if (op == "slice")
    return a.slice(args.at("dim").get<int64_t>(), args.at("start").get<int64_t>(),
                   args.at("end").get<int64_t>(), args.at("step").get<int64_t>());
  if (op == "select") return a.select(args.at("dim").get<int64_t>(), args.at("index").get<int64_t>());
  if (op == "expand") return a.expand(ints(args.at("shape")));
  if (op == "linear") return at::linear(a, in[1], in[2]);
  if (op == "narrow")
    return a.narrow(args.at("dim").get<int64_t>(), args.at("start").get<int64_t>(), args.at("length").get<int64_t>());
  if (op == "flatten") return a.flatten(args.at("start_dim").get<int64_t>(), args.at("end_dim").get<int64_t>());
  // nn and pointwise ops of the nn rules (docs/dtensor.md's rules table).
  if (op == "softmax") return at::softmax(a, args.at("dim").get<int64_t>());
  if (op == "log_softmax") return at::log_softmax(a, args.at("dim").get<int64_t>());
  if (op == "layer_norm") return at::layer_norm(a, ints(args.at("normalized_shape")), {}, {}, 1e-5);
  if (op == "layer_norm_affine") return at::layer_norm(a, ints(args.at("normalized_shape")), in[1], in[2], 1e-5);
  if (op == "mean") return at::mean(a);
  if (op == "mean_dim") return at::mean(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "var" || op == "std") {
    const std::vector<int64_t> dim = ints(args.at("dim"));
    const at::Scalar correction(args.at("correction").get<int64_t>());
    const bool keepdim = args.at("keepdim").get<bool>();
    return op == "var" ? at::var(a, dim, correction, keepdim) : at::std(a, dim, correction, keepdim);
  }
  if (op == "linalg_vector_norm") {  // "ord": a number or "inf"
    const auto& o = args.at("ord");
    const double ord = o.is_string() && o.get<std::string>() == "inf" ? INFINITY : o.get<double>();
    return at::linalg_vector_norm(a, ord, ints(args.at("dim")), args.at("keepdim").get<bool>());
  }
  if (op == "sigmoid") return at::sigmoid(a);
  if (op == "silu") return at::silu(a);
  if (op == "rsqrt") return at::rsqrt(a);
  if (op == "sqrt") return at::sqrt(a);
  if (op == "abs") return at::abs(a);
  if (op == "pow_scalar") return at::pow(a, args.at("exponent").get<double>());
  // More unary pointwise ops (nn_rules.cc): no arguments, or scalar ones.
  if (op == "log") return at::log(a);
  if (op == "log1p") return at::log1p(a);
  if (op == "log2") return at::log2(a);
  if (op == "log10") return at::log10(a);
  if (op == "exp2") return at::exp2(a);
  if (op == "expm1") return at::expm1(a);
  if (op == "sin") return at::sin(a);
  if (op == "cos") return at::cos(a);
  if (op == "tan") return at::tan(a);
  if (op == "atan") return at::atan(a);
  if (op == "sinh") return at::sinh(a);
  if (op == "cosh") return at::cosh(a);
  if (op == "asinh") return at::asinh(a);
  if (op == "erf") return at::erf(a);
  if (op == "erfc") return at::erfc(a);
  if (op == "reciprocal") return at::reciprocal(a);
  if (op == "floor") return at::floor(a);
  if (op == "ceil") return at::ceil(a);
  if (op == "round") return at::round(a);
  if (op == "trunc") return at::trunc(a);
  if (op == "sign") return at::sign(a);
  if (op == "softplus") return at::softplus(a, args.at("beta").get<double>(), args.at("threshold").get<double>());
  if (op == "leaky_relu") return at::leaky_relu(a, args.at("negative_slope").get<double>());
  if (op == "elu") return at::elu(a, args.at("alpha").get<double>());
  if (op == "hardtanh") return at::hardtanh(a, args.at("min_val").get<double>(), args.at("max_val").get<double>());
  if (op == "mish") return at::mish(a);
  if (op == "hardswish") return at::hardswish(a);
  if (op == "hardsigmoid") return at::hardsigmoid(a);
  // isinf / nan_to_num with a float output (so that there is a gradient): the overflowed
  // elements of a * 1e308 pick a, the others 2a; log of the negative elements made 0.
  if (op == "isinf") return at::where(at::isinf(a * 1e308), a, a * 2);
  if (op == "nan_to_num") return at::nan_to_num(at::log(a), 0.0, 7.0, -7.0);
  if (op == "sin_inplace") return a.clone().sin_();
  // More binary pointwise ops.
  if (op == "minimum") return at::minimum(a, in[1]);
  if (op == "logaddexp") return at::logaddexp(a, in[1]);
  if (op == "atan2") return at::atan2(a, in[1]);
  if (op == "hypot") return at::hypot(a, in[1]);
  if (op == "fmod") return at::fmod(a, in[1]);
  if (op == "remainder") return at::remainder(a, in[1]);
  if (op == "div_floor") return at::div(a, in[1], "floor");
  if (op == "pow") return at::pow(a, in[1]);
  if (op == "lerp") return at::lerp(a, in[1], args.at("weight").get<double>());
  // logsumexp; all / any of a comparison, as a float output (so that there is a gradient):
  // the sum over the same dims times the truth value.
  if (op == "logsumexp") return at::logsumexp(a, ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "all_dim" || op == "any_dim") {
    const std::vector<int64_t> dim = ints(args.at("dim"));
    const bool keepdim = args.at("keepdim").get<bool>();
    const at::Tensor cond = a > args.at("threshold").get<double>();
    return at::sum(a, dim, keepdim) * (op == "all_dim" ? at::all(cond, dim, keepdim) : at::any(cond, dim, keepdim));
  }
  if (op == "all") return at::sum(a) * at::all(a > args.at("threshold").get<double>());
  if (op == "cumsum") return at::cumsum(a, args.at("dim").get<int64_t>());
  // gather / index_select / scatter / sort / topk / cumprod (index_kernels.h); sort and topk:
  // the values plus the indices (as double), so that one output checks both.
  const auto dim = [&] { return args.at("dim").get<int64_t>(); };
  if (op == "gather") return at::gather(a, dim(), in[1]);
  if (op == "index_select") return at::index_select(a, dim(), in[1]);
  if (op == "scatter") return at::scatter(a, dim(), in[1], in[2]);
  if (op == "scatter_add") return at::scatter_add(a, dim(), in[1], in[2]);
  if (op == "scatter_value") return at::scatter(a, dim(), in[1], args.at("value").get<double>());
  // advanced indexing and the index_* family (advanced_index.h): one index tensor at `dim`.
  const auto at_dim = [&] {
    c10::List<std::optional<at::Tensor>> l;
    for (int64_t k = 0; k < dim(); ++k) l.push_back(std::nullopt);
    l.push_back(in[1]);
    return l;
  };
  if (op == "index") return a.index(at_dim());
  if (op == "index2") return a.index({in[1], in[2]});  // x[i, j]
  if (op == "index_put2")  // x[i, j] = v (out of place)
    return at::index_put(a, c10::List<std::optional<at::Tensor>>({in[1], in[2]}), in[3],
                         args.at("accumulate").get<bool>());
  if (op == "index_mask") return a.index({in[1]});     // x[mask]
  if (op == "index_put") return at::index_put(a, at_dim(), in[2], args.at("accumulate").get<bool>());
  if (op == "index_add") return at::index_add(a, dim(), in[1], in[2], args.at("alpha").get<double>());
  if (op == "index_copy") return at::index_copy(a, dim(), in[1], in[2]);
  if (op == "index_fill") return at::index_fill(a, dim(), in[1], args.at("value").get<double>());
  if (op == "scatter_reduce" || op == "index_reduce") {
    const std::string reduce = args.at("reduce").get<std::string>();
    const bool include_self = args.at("include_self").get<bool>();
    return op == "scatter_reduce" ? at::scatter_reduce(a, dim(), in[1], in[2], reduce, include_self)
                                  : at::index_reduce(a, dim(), in[1], in[2], reduce, include_self);
  }
  if (op == "sort") {
    auto [v, i] = at::sort(a, dim(), args.at("descending").get<bool>());
    return v + i;
  }
  if (op == "topk") {
    auto [v, i] = at::topk(a, args.at("k").get<int64_t>(), dim(), args.at("largest").get<bool>());
    return v + i;
  }
  if (op == "cumprod") return at::cumprod(a, dim());
  if (op == "logcumsumexp") return at::logcumsumexp(a, dim());
  if (op == "cummax") {
    auto [v, i] = at::cummax(a, dim());
    return v + i;
  }
  if (op == "kthvalue") {
    auto [v, i] = at::kthvalue(a, args.at("k").get<int64_t>(), dim(), args.at("keepdim").get<bool>());
    return v + i;
  }
  if (op == "median_dim") {
    auto [v, i] = at::median(a, dim(), args.at("keepdim").get<bool>());
    return v + i;
  }
  if (op == "prod") return at::prod(a);
  if (op == "prod_dim") return at::prod(a, dim(), args.at("keepdim").get<bool>());
  if (op == "flip") return at::flip(a, ints(args.at("dims")));
  if (op == "roll") return at::roll(a, ints(args.at("shifts")), ints(args.at("dims")));
  if (op == "clamp_min") return at::clamp_min(a, args.at("min").get<double>());
  if (op == "norm") return at::norm(a, args.at("p").get<double>(), ints(args.at("dim")), args.at("keepdim").get<bool>());
  if (op == "dist") return at::dist(a, in[1], args.at("p").get<double>());
  if (op == "repeat") return a.repeat(ints(args.at("repeats")));
  if (op == "constant_pad_nd") return at::constant_pad_nd(a, ints(args.at("pad")), args.at("value").get<double>());
  if (op == "glu") return at::glu(a, args.at("dim").get<int64_t>());
  if (op == "median_all") return a.median();
  if (op == "masked_select") return at::masked_select(a, in[1]);
  if (op == "clamp_tensor") return at::clamp(a, in[1] - 1.0, in[2] + 0.5);
  if (op == "index_put_mask") {  // x[mask] = v on a copy (in place keeps the copy's layout)
    at::Tensor c = a.clone();
    c.index_put_({in[1]}, at::scalar_tensor(args.at("value").get<double>(), a.options()));
    return c;
  }
  if (op == "trace") return at::trace(a);
  if (op == "diagonal")
    return at::diagonal(a, args.at("offset").get<int64_t>(), args.at("dim1").get<int64_t>(),
                        args.at("dim2").get<int64_t>());
  if (op == "diag_embed")
    return at::diag_embed(a, args.at("offset").get<int64_t>(), args.at("dim1").get<int64_t>(),
                          args.at("dim2").get<int64_t>());
  if (op == "cdist") return at::cdist(a, in[1], args.at("p").get<double>());
  if (op == "pixel_shuffle") return at::pixel_shuffle(a, args.at("factor").get<int64_t>());
  if (op == "embedding_bag")  // in[0] the table, in[1] the ids, in[2] the offsets
    return std::get<0>(at::embedding_bag(a, in[1], in[2], false, args.at("mode").get<int64_t>(), false,
                                         std::nullopt, false, std::nullopt));
  if (op == "conv2d") return at::conv2d(a, in[1], in[2], ints(args.at("stride")), ints(args.at("padding")));
  if (op == "max_pool2d") return at::max_pool2d(a, ints(args.at("kernel")), ints(args.at("stride")));
  if (op == "avg_pool2d") return at::avg_pool2d(a, ints(args.at("kernel")), ints(args.at("stride")));
  if (op == "interpolate_bilinear")
    return at::upsample_bilinear2d(a, ints(args.at("size")), false, std::nullopt, std::nullopt);
  if (op == "batch_norm") return at::batch_norm(a, in[1], in[2], {}, {}, true, 0.1, 1e-5, false);
  if (op == "group_norm") return at::group_norm(a, args.at("groups").get<int64_t>(), in[1], in[2], 1e-5);
  if (op == "tril") return at::tril(a, args.at("diagonal").get<int64_t>());
  if (op == "triu") return at::triu(a, args.at("diagonal").get<int64_t>());
  if (op == "lgamma") return at::lgamma(a);
  if (op == "digamma") return at::digamma(a);
  if (op == "polygamma") return at::polygamma(args.at("n").get<int64_t>(), a);
  if (op == "sinc") return at::sinc(a);
  if (op == "frac") return at::frac(a);
  if (op == "logit") return at::logit(a, args.at("eps").get<double>());
  if (op == "fmax") return at::fmax(a, in[1]);
  if (op == "fmin") return at::fmin(a, in[1]);
  if (op == "xlogy") return at::xlogy(a, in[1]);
  auto reduction = [&] {
    const std::string r = args.at("reduction").get<std::string>();
    return r == "none" ? at::Reduction::None : r == "sum" ? at::Reduction::Sum : at::Reduction::Mean;
  };
  if (op == "mse_loss") return at::mse_loss(a, in[1], reduction());
  if (op == "smooth_l1_loss") return at::smooth_l1_loss(a, in[1], reduction(), args.at("beta").get<double>());
  if (op == "huber_loss") return at::huber_loss(a, in[1], reduction(), args.at("delta").get<double>());
  if (op == "bce_with_logits") return at::binary_cross_entropy_with_logits(a, in[1], {}, {}, reduction());
  if (op == "clamp_max_tensor") return at::clamp_max(a, in[1]);
  if (op == "sdpa") return at::scaled_dot_product_attention(a, in[1], in[2], std::nullopt, 0.0, args.at("is_causal").get<bool>());
  if (op == "addcmul") return at::addcmul(a, in[1], in[2], args.at("value").get<double>());
  if (op == "addcdiv") return at::addcdiv(a, in[1], in[2], args.at("value").get<double>());
  if (op == "maximum") return at::maximum(a, in[1]);
  if (op == "where") return at::where(a, in[1], in[2]);
  if (op == "masked_fill") return at::masked_fill(a, in[1], args.at("value").get<double>());
  if (op == "embedding") return at::embedding(a, in[1]);  // in[0] the table, in[1] the ids
  // In-place ops on a clone (a leaf that requires grad cannot be written in place).
  if (op == "add_inplace") return a.clone().add_(in[1]);
  if (op == "mul_inplace") return a.clone().mul_(in[1]);
  // One piece of a split (shape_kernels.h); fill_ on a clone.
  const auto index = [&] { return static_cast<size_t>(args.at("index").get<int64_t>()); };
  if (op == "split")
    return a.split(args.at("split_size").get<int64_t>(), args.at("dim").get<int64_t>()).at(index());
  if (op == "split_with_sizes")
    return a.split_with_sizes(ints(args.at("split_sizes")), args.at("dim").get<int64_t>()).at(index());
  if (op == "chunk")
    return a.chunk(args.at("chunks").get<int64_t>(), args.at("dim").get<int64_t>()).at(index());
  if (op == "unbind") return a.unbind(args.at("dim").get<int64_t>()).at(index());
  // A piece of tensor_split (tensor_split.h); max / min along a dim (maxdim_kernels.h): the
  // values plus the indices (as double), so that one output checks both.
  if (op == "tensor_split")
    return a.tensor_split(args.at("sections").get<int64_t>(), args.at("dim").get<int64_t>()).at(index());
  if (op == "max_dim" || op == "min_dim") {
    const int64_t dim = args.at("dim").get<int64_t>();
    const bool keepdim = args.at("keepdim").get<bool>();
    const auto r = op == "max_dim" ? at::max(a, dim, keepdim) : at::min(a, dim, keepdim);
    return std::get<0>(r) + std::get<1>(r);
  }
  if (op == "fill_inplace") return a.clone().fill_(args.at("value").get<double>());
  if (op == "to_float32_and_back") return a.to(at::kFloat).to(at::kDouble);
  throw ValueError("dispatch_cases: unknown op '" + op + "' in the case file");
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
