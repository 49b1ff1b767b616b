#pragma once
/// \file ops.h
/// Ops on DTensor handles (hyper::ops) and the arithmetic operators: a thin alias of the
/// dispatcher path. `hyper::ops::sigmoid(x)` is `as_dtensor(at::sigmoid(as_tensor(x)))`: the
/// op's sharding rule decides every layout (hyper/tensor/dtensor_tensor.h, docs/dtensor.md), so
/// the handle and the at::Tensor form give the same values, layouts and gradients.
///   unary:  abs absolute clone cos exp gelu isinf isnan log neg negative relu rsqrt
///           sigmoid silu sin sqrt square
///   binary: add sub mul div true_divide pow (DTensor∘DTensor, DTensor∘scalar,
///           scalar∘DTensor); operators + - * / and unary -.
///   other:  sum mean reshape view flatten matmul.
/// Operands of different layouts are redistributed as the op's rule says (a RaggedShard operand
/// keeps its layout and the other is moved onto it); ops the rules refuse (a view of a ragged
/// DTensor, a matmul of one) throw NotImplementedError naming the op and every layout.
/// Differentiable (through the bridges of dtensor_tensor.h).
///
/// Errors, prefixed `hyper::ops::<op>: `: ValueError for operands on different meshes or an
/// undefined DTensor; NotImplementedError for a name outside the lists above (unary(name),
/// binary(name)), for what the sharding rules refuse, and for factories with a RaggedShard (or
/// Partial) placement. An error of the local ATen op (e.g. gelu of an integer tensor) arrives
/// as hyper's type (NotImplementedError for an unsupported dtype, else ValueError,
/// docs/errors.md).

#include <ATen/core/Tensor.h>
#include <c10/core/Scalar.h>
#include <c10/core/TensorOptions.h>

#include <string>
#include <vector>

#include "hyper/tensor/dtensor.h"

namespace hyper::ops {

/// The op names unary() and binary() accept.
const std::vector<std::string>& unary_ops();
const std::vector<std::string>& binary_ops();

/// Applies the unary op `name` (one of unary_ops()). Any other name throws
/// NotImplementedError naming it.
DTensor unary(const std::string& name, const DTensor& x);
/// Applies the binary op `name` (one of binary_ops()).
DTensor binary(const std::string& name, const DTensor& a, const DTensor& b);
DTensor binary(const std::string& name, const DTensor& a, const at::Scalar& b);
DTensor binary(const std::string& name, const at::Scalar& a, const DTensor& b);

DTensor abs(const DTensor& x);
DTensor absolute(const DTensor& x);
DTensor clone(const DTensor& x);
DTensor cos(const DTensor& x);
DTensor exp(const DTensor& x);
DTensor gelu(const DTensor& x);
DTensor isinf(const DTensor& x);
DTensor isnan(const DTensor& x);
DTensor log(const DTensor& x);
DTensor neg(const DTensor& x);
DTensor negative(const DTensor& x);
DTensor relu(const DTensor& x);
DTensor rsqrt(const DTensor& x);
DTensor sigmoid(const DTensor& x);
DTensor silu(const DTensor& x);
DTensor sin(const DTensor& x);
DTensor sqrt(const DTensor& x);
DTensor square(const DTensor& x);

#define HYPER_DTENSOR_BINARY_DECL(name)                        \
  DTensor name(const DTensor& a, const DTensor& b);            \
  DTensor name(const DTensor& a, const at::Scalar& b);         \
  DTensor name(const at::Scalar& a, const DTensor& b);
HYPER_DTENSOR_BINARY_DECL(add)
HYPER_DTENSOR_BINARY_DECL(sub)
HYPER_DTENSOR_BINARY_DECL(mul)
HYPER_DTENSOR_BINARY_DECL(div)
HYPER_DTENSOR_BINARY_DECL(true_divide)
HYPER_DTENSOR_BINARY_DECL(pow)
#undef HYPER_DTENSOR_BINARY_DECL

/// Through the op's sharding rule (at::sum, at::mean, at::reshape, view, at::flatten,
/// at::matmul of the at::Tensor form); what the rules refuse throws NotImplementedError.
DTensor sum(const DTensor& x);
DTensor mean(const DTensor& x);
DTensor reshape(const DTensor& x, const std::vector<int64_t>& shape);
DTensor view(const DTensor& x, const std::vector<int64_t>& shape);
DTensor flatten(const DTensor& x);
DTensor matmul(const DTensor& a, const DTensor& b);

/// DTensor factories: each rank makes its local storage of the layout.
/// Throw NotImplementedError for a RaggedShard placement (seed §6: ragged factories are
/// fail-closed) and for Partial placements; ValueError for an invalid layout.
/// `rand` draws each rank's storage independently (replicas agree only if every rank's
/// generator was seeded alike).
DTensor empty(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
              const Placements& placements, const at::TensorOptions& options = {});
DTensor zeros(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
              const Placements& placements, const at::TensorOptions& options = {});
DTensor ones(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options = {});
DTensor full(const std::vector<int64_t>& shape, const at::Scalar& value, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options = {});
DTensor rand(const std::vector<int64_t>& shape, const DeviceMesh& mesh,
             const Placements& placements, const at::TensorOptions& options = {});

}  // namespace hyper::ops

namespace hyper {

DTensor operator+(const DTensor& a, const DTensor& b);
DTensor operator+(const DTensor& a, const at::Scalar& b);
DTensor operator+(const at::Scalar& a, const DTensor& b);
DTensor operator-(const DTensor& a, const DTensor& b);
DTensor operator-(const DTensor& a, const at::Scalar& b);
DTensor operator-(const at::Scalar& a, const DTensor& b);
DTensor operator*(const DTensor& a, const DTensor& b);
DTensor operator*(const DTensor& a, const at::Scalar& b);
DTensor operator*(const at::Scalar& a, const DTensor& b);
DTensor operator/(const DTensor& a, const DTensor& b);
DTensor operator/(const DTensor& a, const at::Scalar& b);
DTensor operator/(const at::Scalar& a, const DTensor& b);
DTensor operator-(const DTensor& x);

}  // namespace hyper
