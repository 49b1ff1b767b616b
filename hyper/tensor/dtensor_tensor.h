#pragma once
/// \file dtensor_tensor.h
/// A DTensor as an at::Tensor (issue 14, step 1; docs/dtensor.md "DTensor as an at::Tensor").
///
/// `as_tensor(dt)` returns an at::Tensor whose TensorImpl (hyper::DTensorImpl) holds the DTensor:
/// its sizes, strides (contiguous), dtype and device are the GLOBAL tensor's, it has no storage,
/// and it carries hyper's dispatch key (PrivateUse3; docs/architecture.md "DTensor inside the
/// dispatcher"). at:: ops on it reach a boxed fallback that looks up the op's sharding rule
/// (hyper/tensor/dispatch/sharding_rule.h), redistributes the inputs as the rule says, runs the
/// op on the local tensors and wraps the result. An op without a rule throws
/// hyper::NotImplementedError naming the op and every input's layout. Autograd runs on the
/// wrapper through the ordinary AutogradPrivateUse3 key.
///
///   at::Tensor x = hyper::as_tensor(dt).requires_grad_();
///   at::Tensor y = hyper::as_tensor(dt2);
///   (x * y).sum().backward();
///   at::Tensor g = hyper::as_dtensor(x.grad()).full_tensor();  // == single-device gradient
///
/// The wrapper is an autograd leaf of its own: gradients reaching it do not flow on to
/// dt.to_local() (step 1).

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKey.h>

#include "hyper/tensor/dtensor.h"

namespace hyper {

/// The at::Tensor view of `dt` (shares dt's local tensor; as_dtensor gives dt back). The
/// first call registers hyper's kernels for the dispatch key; it throws hyper::ValueError
/// when another library already registered a fallback for that key. Throws ValueError for
/// an undefined DTensor.
at::Tensor as_tensor(const DTensor& dt);
/// True iff `t` is a defined tensor made by as_tensor (or by an op on one).
bool is_dtensor(const at::Tensor& t);
/// The DTensor inside `t` (same local tensor object). Throws ValueError naming what `t` is
/// (undefined, or its device, dtype and sizes) when it is not a DTensor tensor.
DTensor as_dtensor(const at::Tensor& t);
/// The dispatch key DTensor tensors carry: c10::DispatchKey::PrivateUse3.
c10::DispatchKey dtensor_dispatch_key();

/// Whether at::linear of a DTensor tensor overlaps the gather of its input with the product of
/// this rank's own rows (a collective matmul: the sequence-parallel q/k/v projections; see
/// docs/dtensor.md), on the calling thread (the one that runs the forward); default on. Values,
/// gradients and collectives are the same either way, so ranks may differ; off is the
/// synchronous gather (the benchmark's comparison).
void set_overlap_linear_gather(bool on);
bool overlap_linear_gather();

}  // namespace hyper
