#pragma once
/// \file dispatch/random_kernels.h
/// Random fills and random factories on DTensor tensors (docs/dtensor.md "Random ops
/// and the RNG tracker"), drawn like dropout (dropout_kernels.h) from the mesh's RNG tracker
/// (hyper/tensor/random.h): element i of the GLOBAL tensor (row-major) gets a value computed
/// from u(seed, offset + i) only, so every layout of the same global tensor holds the same
/// values, equal to the draw of the full tensor on a one-rank mesh; each rank computes its own
/// elements (its box, or its RaggedShard interval); Replicate mesh dims draw alike, Shard mesh
/// dims differently. A draw of N global elements advances the tracker by N (normal and
/// log_normal: by 2N, two uniforms per element).
///
///   uniform_(from, to)          from + (to - from) * u_i
///   normal_(mean, std)          mean + std * sqrt(-2 ln(1 - u_2i)) * cos(2 pi u_2i+1)
///   log_normal_(mean, std)      exp(normal_(mean, std))
///   exponential_(lambd)         -ln(1 - u_i) / lambd
///   cauchy_(median, sigma)      median + sigma * tan(pi (u_i - 1/2))
///   geometric_(p)               floor(ln(1 - u_i) / ln(1 - p)) + 1
///   bernoulli_(p), bernoulli_(Tensor p), bernoulli(self = p), bernoulli.p(p)
///                               u_i < p_i (as self's dtype; bernoulli: self's values are p)
///   random_(from, to), random_(to) (integers in [from, to))
///                               from + floor(u_i * (to - from))
///   rand_like / randn_like / randint_like (every overload): a new DTensor in self's layout
///   with Partial mesh dims Replicate, filled as uniform_(0, 1) / normal_(0, 1) /
///   random_(low, high); dtype, layout, device and memory_format arguments as ATen's
///   (another device or a non-strided layout refused).
///
/// In place, self keeps its layout: on a Partial(sum) mesh dim the value goes to coordinate 0
/// and the other shares are written 0 (their sum is the value); Partial(avg/max/min) shares
/// all hold it. A view self writes through to its base (a view whose local is a copy is
/// refused, as every in-place op). torch::nn::init's uniform_ / normal_ / kaiming_* / xavier_*
/// (and so a module's reset_parameters()) therefore work on DTensor parameters, their values
/// independent of the layout.
///
/// Errors: an explicit generator is refused (NotImplementedError: the draws come from the
/// mesh's tracker; hyper::manual_seed seeds it); arguments ATen refuses are refused with
/// ValueError naming them (from > to, std < 0, p outside [0, 1], lambd <= 0, ...), a dtype the
/// op does not fill with ValueError; `random_()` without bounds and `random_(from, None)` are
/// refused (NotImplementedError); in every case nothing is written and the tracker does not
/// advance.

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& random_kernels();

}  // namespace hyper::dispatch
