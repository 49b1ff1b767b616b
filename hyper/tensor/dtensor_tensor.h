#pragma once
/// \file dtensor_tensor.h
/// The DTensor as an at::Tensor, and the bridges between it and its hyper::DTensor handle
/// (docs/dtensor.md "One DTensor, two handles").
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
/// Both directions are differentiable (grad mode on), as PyTorch's from_local / to_local:
/// - `as_tensor(dt)` of a DTensor whose local tensor requires grad continues its history: the
///   wrapper is not a leaf, and gradients reaching it flow on into dt's local tensor (and so to
///   the tensor from_local / distribute_tensor made it from).
/// - `as_dtensor(t)` of a tensor that requires grad returns a handle whose local tensor (an
///   alias of t's local storage) continues t's history: to_local(), full_tensor(),
///   redistribute() (async too) and hyper::ops on it backpropagate into t's graph.
///
///   at::Tensor w = torch::nn::Linear(...)(x);           // a parallelized module's output
///   at::Tensor loss = hyper::as_dtensor(w).full_tensor().pow(2).sum();
///   loss.backward();                                     // reaches the module's parameters
///
///   hyper::DTensor h = hyper::DTensor::from_local(local.requires_grad_(), mesh, {Shard(0)});
///   (hyper::as_tensor(h) * 2).sum().backward();          // local.grad() == 2 (its rows)
///
/// Gradient convention at the bridge: a handle's local gradient is its layout's (dtensor.h:
/// Partial read as Replicate, divided by the mesh dim size for Partial(avg)); a wrapper's
/// gradient is a DTensor tensor of any layout holding the logical gradient.

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKey.h>

#include <exception>

#include "hyper/tensor/dtensor.h"

namespace hyper {

/// The at::Tensor form of `dt` (shares dt's local storage). Differentiable: when dt's local
/// tensor requires grad and grad mode is on, the result continues dt's history (not a leaf).
/// The first call registers hyper's kernels for the dispatch key; it throws hyper::ValueError
/// when another library already registered a fallback for that key. Throws ValueError for an
/// undefined DTensor.
at::Tensor as_tensor(const DTensor& dt);
/// True iff `t` is a defined tensor made by as_tensor (or by an op on one).
bool is_dtensor(const at::Tensor& t);
/// The DTensor handle of `t` (same local storage). Differentiable: when `t` requires grad and
/// grad mode is on, the handle's local tensor is a new alias whose gradient flows into `t`
/// (so its grad() is not where a leaf `t`'s gradient accumulates: read `t.grad()`); otherwise
/// it is the local tensor `t` holds. Does not wait for a pending async redistribute. Throws
/// ValueError naming what `t` is (undefined, or its device, dtype and sizes) when it is not a
/// DTensor tensor.
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

/// For language bindings: `hook` sees each error leaving hyper's dispatcher kernels toward
/// their caller outside them (an op called by the program, or by autograd's engine) and may
/// throw another exception in its place; when it returns, the error propagates unchanged.
/// The Python package throws there what Python should raise (ValueError, NotImplementedError,
/// hyper.CommError, ...); C++ programs set none. Null removes it. Thread-safe.
using KernelErrorHook = void (*)(std::exception_ptr error);
void set_kernel_error_hook(KernelErrorHook hook);

}  // namespace hyper
