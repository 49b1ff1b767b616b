// The pointwise ops' sharding rules (see pointwise_rules.h).
#include "hyper/tensor/dispatch/pointwise_rules.h"

namespace hyper::dispatch {

void add_pointwise_rules(std::map<std::string, OpRule>& r) {
  using PR = PartialRule;
  // Binary pointwise: (self, other, [alpha]).
  for (const char* op : {"add", "sub"}) {
    r[std::string("aten::") + op + ".Tensor"] = elementwise_rule({0, 1}, PR::kAdditive);
    r[std::string("aten::") + op + "_.Tensor"] = elementwise_rule({0, 1}, PR::kAdditive, {}, true);
  }
  r["aten::mul.Tensor"] = elementwise_rule({0, 1}, PR::kLinearIn, {0, 1});
  r["aten::mul_.Tensor"] = elementwise_rule({0, 1}, PR::kLinearIn, {0, 1}, true);
  r["aten::div.Tensor"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::div_.Tensor"] = elementwise_rule({0, 1}, PR::kLinearIn, {0}, true);
  // Unary pointwise.
  for (const char* op : {"neg"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kAdditive);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kAdditive, {}, true);
  }
  r["aten::clone"] = elementwise_rule({0}, PR::kAdditive);
  // What torch::optim's SGD / Adam / AdamW call (besides add/mul/div/clone/zeros_like):
  // sqrt, addcmul (self + v*t1*t2), addcdiv (self + v*t1/t2), maximum (amsgrad's max_out:
  // max.out and max.other are composites of maximum.out, a kernel in fallback.cc, and
  // maximum), zero_ (zero_grad(false)).
  r["aten::sqrt"] = elementwise_rule({0}, PR::kReduce);
  r["aten::sqrt_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::addcmul"] = elementwise_rule({0, 1, 2}, PR::kAddLinear, {1, 2});
  r["aten::addcmul_"] = elementwise_rule({0, 1, 2}, PR::kAddLinear, {1, 2}, true);
  r["aten::addcdiv"] = elementwise_rule({0, 1, 2}, PR::kAddLinear, {1});
  r["aten::addcdiv_"] = elementwise_rule({0, 1, 2}, PR::kAddLinear, {1}, true);
  r["aten::maximum"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::zero_"] = elementwise_rule({0}, PR::kAdditive, {}, true);
  // fill_.Tensor(self, value) (fill_.Scalar arrives so, shape_kernels.h): additive, so a
  // Partial(sum) self is filled on coordinate 0 and zeroed elsewhere (P(max/min): refused).
  r["aten::fill_.Tensor"] = elementwise_rule({0, 1}, PR::kAdditive, {}, true);
  for (const char* op : {"relu", "exp", "tanh", "gelu"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  // What autograd calls for them: (grad_output, saved, ...) linear in the gradient.
  r["aten::tanh_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::threshold_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::gelu_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  // native_dropout_backward(grad, mask, scale) (dropout_kernels.h): grad * mask * scale.
  r["aten::native_dropout_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  // copy_(self, src): linear in src, self's layout kept.
  r["aten::copy_"] = elementwise_rule({0, 1}, PR::kAdditive, {}, true);
  // Unary pointwise, not linear: a Partial input is reduced first.
  for (const char* op : {"sigmoid", "silu", "rsqrt", "abs", "sgn"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  // More unary pointwise ops, not linear (a Partial input is reduced first; Shard and
  // Replicate kept): logs and exps, trigonometric and hyperbolic (RoPE's sin / cos), erf,
  // reciprocal, rounding and sign (zero gradients), activations with scalar arguments
  // (softplus, leaky_relu, elu, hardtanh, mish, hardswish, hardsigmoid), isinf, nan_to_num.
  // Their backward formulas call ops of this table (sin's: cos and mul) or the *_backward ops
  // below.
  for (const char* op : {"log", "log1p", "log2", "log10", "exp2", "expm1", "sin", "cos", "tan",
                         "atan", "sinh", "cosh", "asinh", "erf", "erfc", "reciprocal", "floor",
                         "ceil", "round", "trunc", "sign", "leaky_relu", "elu", "hardtanh", "mish",
                         "hardswish", "hardsigmoid", "nan_to_num"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  // Special functions (and what their backward formulas call: digamma for lgamma,
  // polygamma(1, x) for digamma, polygamma(n + 1, x) for polygamma; erfinv's, sinc's and
  // logit's are ops of these tables or logit_backward), not linear.
  for (const char* op : {"lgamma", "digamma", "erfinv", "sinc", "frac", "i0"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  // Inverse trigonometric and hyperbolic functions, angle, sign tests, shrinkage and threshold
  // activations, mvlgamma, round to decimals, frexp (mantissa and exponent, both laid out as
  // self), log_sigmoid_forward (output and buffer), and torch.special's unary functions
  // (their backward formulas: ops of these tables, or the *_backward ops below). Not linear.
  for (const char* op : {"acos", "acosh", "asin", "atanh", "celu", "threshold", "mvlgamma"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  r["aten::round.decimals"] = elementwise_rule({0}, PR::kReduce);
  r["aten::round_.decimals"] = elementwise_rule({0}, PR::kReduce, {}, true);
  for (const char* op : {"angle", "isneginf", "isposinf", "signbit", "hardshrink", "softshrink",
                         "frexp.Tensor", "log_sigmoid_forward", "special_entr", "special_erfcx",
                         "special_i0e", "special_i1", "special_i1e", "special_log_ndtr",
                         "special_ndtri", "special_airy_ai", "special_bessel_j0",
                         "special_bessel_j1", "special_bessel_y0", "special_bessel_y1",
                         "special_modified_bessel_i0", "special_modified_bessel_i1",
                         "special_modified_bessel_k0", "special_modified_bessel_k1",
                         "special_scaled_modified_bessel_k0", "special_scaled_modified_bessel_k1",
                         "special_spherical_bessel_j0"})
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
  // _conj_physical (the conjugate, materialized; _conj is served as it: decompositions.h):
  // linear over the reals, so a Partial stays.
  r["aten::_conj_physical"] = elementwise_rule({0}, PR::kAdditive);
  // deg2rad / rad2deg scale by a constant: linear, a Partial(sum) input stays Partial.
  for (const char* op : {"deg2rad", "rad2deg"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kAdditive);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kAdditive, {}, true);
  }
  // (grad_output, self, [buffer,] lambd): linear in the gradient.
  for (const char* op : {"hardshrink_backward", "softshrink_backward"})
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::log_sigmoid_backward"] = elementwise_rule({0, 1, 2}, PR::kLinearIn, {0});
  // Binary pointwise functions of two tensors (and their forms with one Scalar operand), not
  // linear: floor_divide, heaviside, igamma / igammac, nextafter, logaddexp2, ldexp,
  // xlog1py, zeta and torch.special's orthogonal polynomials of (x, n).
  for (const char* op : {"heaviside", "igamma", "igammac", "nextafter"}) {
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  }
  r["aten::ldexp.Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::ldexp_"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::floor_divide"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::floor_divide_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::floor_divide.Scalar"] = elementwise_rule({0}, PR::kReduce);
  r["aten::floor_divide_.Scalar"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::logaddexp2"] = elementwise_rule({0, 1}, PR::kReduce);
  for (const char* op : {"special_xlog1py", "special_zeta"}) {
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + ".other_scalar"] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + ".self_scalar"] = elementwise_rule({1}, PR::kReduce);
  }
  for (const char* op : {"chebyshev_polynomial_t", "chebyshev_polynomial_u",
                         "chebyshev_polynomial_v", "chebyshev_polynomial_w",
                         "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u",
                         "shifted_chebyshev_polynomial_v", "shifted_chebyshev_polynomial_w",
                         "hermite_polynomial_h", "hermite_polynomial_he",
                         "laguerre_polynomial_l", "legendre_polynomial_p"}) {
    r[std::string("aten::special_") + op] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::special_") + op + ".n_scalar"] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::special_") + op + ".x_scalar"] = elementwise_rule({1}, PR::kReduce);
  }
  // rsub(self, other, alpha) = other - alpha * self: the Tensor form is linear in both (as
  // sub); the Scalar form adds a constant (not linear).
  r["aten::rsub.Tensor"] = elementwise_rule({0, 1}, PR::kAdditive);
  r["aten::rsub.Scalar"] = elementwise_rule({0}, PR::kReduce);
  // lerp with a tensor weight, masked_fill with a 0-dim tensor value, fill with a tensor value:
  // pointwise in all their tensors, not linear.
  r["aten::lerp.Tensor"] = elementwise_rule({0, 1, 2}, PR::kReduce);
  r["aten::lerp_.Tensor"] = elementwise_rule({0, 1, 2}, PR::kReduce, {}, true);
  r["aten::masked_fill.Tensor"] = elementwise_rule({0, 1, 2}, PR::kReduce);
  r["aten::masked_fill_.Tensor"] = elementwise_rule({0, 1, 2}, PR::kReduce, {}, true);
  r["aten::fill.Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::fill.Scalar"] = elementwise_rule({0}, PR::kReduce);
  r["aten::logit"] = elementwise_rule({0}, PR::kReduce);
  r["aten::logit_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::polygamma"] = elementwise_rule({1}, PR::kReduce);  // polygamma(int n, Tensor self)
  r["aten::polygamma_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::logit_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::softplus"] = elementwise_rule({0}, PR::kReduce);
  r["aten::isinf"] = elementwise_rule({0}, PR::kReduce);
  // (grad_output, self, scalars...): linear in the gradient.
  for (const char* op : {"softplus_backward", "leaky_relu_backward", "hardtanh_backward",
                         "mish_backward", "hardswish_backward", "hardsigmoid_backward"})
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  // elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result).
  r["aten::elu_backward"] = elementwise_rule({0, 5}, PR::kLinearIn, {0});
  // Binary pointwise, not linear: minimum, atan2, fmod / remainder (and div with a rounding
  // mode, their backward), pow of two tensors, lerp with a scalar weight, hypot, logaddexp,
  // fmax / fmin (their backward formulas: ops of these tables). Not copysign: autograd makes the
  // gradient of its `other` a plain zeros tensor of the global shape (a full-size plain
  // gradient for a sharded parameter), so it stays refused.
  for (const char* op : {"minimum", "logaddexp", "fmax", "fmin"})
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kReduce);
  // xlogy (kl_div's composite calls it): x * log(y), 0 where x == 0.
  r["aten::xlogy.Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::xlogy_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::xlogy.Scalar_Other"] = elementwise_rule({0}, PR::kReduce);
  r["aten::xlogy_.Scalar_Other"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::xlogy.Scalar_Self"] = elementwise_rule({1}, PR::kReduce);
  for (const char* op : {"atan2", "hypot"}) {
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  }
  for (const char* op : {"fmod", "remainder"}) {
    r[std::string("aten::") + op + ".Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + "_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
    r[std::string("aten::") + op + ".Scalar"] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_.Scalar"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  r["aten::div.Tensor_mode"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::div_.Tensor_mode"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::pow.Tensor_Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::pow_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::lerp.Scalar"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::lerp_.Scalar"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::pow.Tensor_Scalar"] = elementwise_rule({0}, PR::kReduce);
  r["aten::pow.Scalar"] = elementwise_rule({1}, PR::kReduce);  // pow(Scalar self, Tensor exponent)
  r["aten::pow_.Scalar"] = elementwise_rule({0}, PR::kReduce, {}, true);
  // Backward of sigmoid / silu: (grad_output, output or self), linear in the gradient.
  r["aten::sigmoid_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  r["aten::silu_backward"] = elementwise_rule({0, 1}, PR::kLinearIn, {0});
  // What the backward of linalg_vector_norm / std / amax calls: comparisons (bool outputs)
  // and masked_fill_ (Partial self refused: filling every coordinate is not linear).
  r["aten::eq.Scalar"] = elementwise_rule({0}, PR::kReduce);
  r["aten::eq.Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::isnan"] = elementwise_rule({0}, PR::kReduce);
  r["aten::logical_or"] = elementwise_rule({0, 1}, PR::kReduce);
  // Comparisons and where: what maximum's / clamp's backward calls (and user code's masks).
  // Not linear: a Partial operand is reduced first.
  for (const char* op : {"gt", "lt", "ge", "le", "ne"}) {
    r[std::string("aten::") + op + ".Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + ".Scalar"] = elementwise_rule({0}, PR::kReduce);
  }
  r["aten::logical_and"] = elementwise_rule({0, 1}, PR::kReduce);
  // Bitwise ops of masks and integers (xlogy's backward: `(self == 0) & (other <= 0)`).
  for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor"}) {
    r[std::string("aten::") + op + ".Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + "_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
    r[std::string("aten::") + op + ".Scalar"] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_.Scalar"] = elementwise_rule({0}, PR::kReduce, {}, true);
  }
  // In-place logical ops (fmax's backward: `(self >= other).logical_or_(other.isnan())`).
  for (const char* op : {"logical_and_", "logical_or_", "logical_xor_"})
    r[std::string("aten::") + op] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  r["aten::logical_xor"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::logical_not_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::bitwise_not"] = elementwise_rule({0}, PR::kReduce);
  r["aten::bitwise_not_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::logical_not"] = elementwise_rule({0}, PR::kReduce);
  // where(condition, self, other): the three broadcast like operands.
  r["aten::where.self"] = elementwise_rule({0, 1, 2}, PR::kReduce);
  // clamp(self, min?, max?) (clip_grad_norm_'s coefficient, user code), not linear;
  // _local_scalar_dense (item()): a Partial 0-dim tensor is reduced first, the value is the
  // Replicate local's on every rank.
  r["aten::clamp"] = elementwise_rule({0}, PR::kReduce);
  // clamp_min / clamp_max (torch::nn::functional::normalize's clamp_min(eps)), scalar or tensor
  // bound; clamp with tensor bounds.
  for (const char* op : {"clamp_min", "clamp_max"}) {
    r[std::string("aten::") + op] = elementwise_rule({0}, PR::kReduce);
    r[std::string("aten::") + op + "_"] = elementwise_rule({0}, PR::kReduce, {}, true);
    r[std::string("aten::") + op + ".Tensor"] = elementwise_rule({0, 1}, PR::kReduce);
    r[std::string("aten::") + op + "_.Tensor"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
  }
  r["aten::clamp_"] = elementwise_rule({0}, PR::kReduce, {}, true);
  r["aten::_local_scalar_dense"] = elementwise_rule({0}, PR::kReduce);
  r["aten::masked_fill.Scalar"] = elementwise_rule({0, 1}, PR::kReduce);
  r["aten::masked_fill_.Scalar"] = elementwise_rule({0, 1}, PR::kReduce, {}, true);
}

}  // namespace hyper::dispatch
