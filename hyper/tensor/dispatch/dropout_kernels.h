#pragma once
/// \file dispatch/dropout_kernels.h
/// Dropout on DTensor tensors (docs/dtensor.md "Dropout and the RNG tracker"): the
/// mask of element i is u(seed, offset + i) >= p with i the GLOBAL linear index and (seed,
/// offset) from the mesh's RNG tracker (hyper/tensor/random.h), so every layout of the same
/// global tensor gets the same result, equal to the 1-rank-mesh dropout of the full tensor.
/// - native_dropout(input, p, train) (PrivateUse3, below autograd): each rank computes its own
///   elements' mask; output = local * mask * 1/(1-p) (scale 0 for p == 1) in the input's
///   layout, mask (bool) in that layout with Partial -> Replicate (the same mask on every
///   share). Partial(sum/avg) stays Partial, no communication (dropout with a fixed mask is
///   linear); Partial(max/min) is reduced to Replicate first (an identity share of -inf times
///   a dropped 0 would be NaN). RaggedShard: the flat interval is the global index range.
///   train == false: a copy and an all-true mask (no draw). Every draw advances the tracker
///   by the global numel.
/// - dropout / dropout_ (AutogradPrivateUse3 and PrivateUse3, replacing ATen's composite,
///   which draws with bernoulli_ on CPU): ATen's semantics (p == 0, train == false or an
///   empty tensor: the input; p == 1: times 0, no draw), else native_dropout.
/// - feature_dropout, alpha_dropout, feature_alpha_dropout (and in-place; both keys): ATen's
///   composite with its noise drawn by global index: keep iff u(seed, offset + i) >= p, i the
///   global index of the noise (alpha: the element; feature: the (sample, channel) pair of a
///   [N, C, 1, ...] noise), the tracker advanced by the noise's global numel. The noise (and
///   alpha's shift) are made locally in the input's layout (Partial -> Replicate; feature: Shards
///   of dims >= 2 Replicate) and applied on the wrapper (`input * noise (+ b)`, rules of mul /
///   add: Partial(sum/avg) stays, b added once). ValueError: feature dropout of < 2 dims;
///   NotImplementedError: feature dropout of a RaggedShard input.
/// ValueError: p outside [0, 1] (naming p), a non-floating input. NotImplementedError: a stale
/// copied view (as the fallback).
/// Autograd: native_dropout's formula calls native_dropout_backward(grad, mask, scale), an
/// elementwise rule (sharding_rule.cc: linear in grad, so Partial grads stay Partial).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& dropout_kernels();

}  // namespace hyper::dispatch
