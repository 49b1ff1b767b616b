#pragma once
/// \file dispatch/nn_kernels.h
/// Per-op kernels of the DTensor dispatch key (PrivateUse3) for nn ops whose layouts the boxed
/// fallback cannot express: they run below autograd (autograd's own formula for the
/// op runs above them, on the wrapper).
/// - native_layer_norm and native_layer_norm_backward (three outputs of different layouts,
///   optional weight / bias): nn_rules.h decides the layouts, the kernel redistributes, runs
///   the ATen op on the local tensors and wraps the outputs.
/// - mean / mean.dim, var.correction, std.correction and linalg_vector_norm decompose into ops
///   that have rules on the wrapper, so a sharded reduced dim gives the right value:
///   mean = sum / global count; var = sum((x - mean(x, keepdim))^2) / max(0, N - correction);
///   std = var^0.5; norm: ord 0 sum(x != 0) (no gradient, as ATen's), ord 1 sum|x|, ord 2
///   sum(x*x)^0.5, ord inf amax|x| (-inf: amin), other p sum(|x|^p)^(1/p). RaggedShard: only
///   over all dims (var / std: refused).
///   Refused (NotImplementedError): a dtype argument other than the input's, complex
///   inputs of var / std / norm. ValueError: a non-floating input (mean: dtype), a dim out of
///   range.
/// - embedding and embedding_dense_backward (a plain index tensor beside the DTensor table):
///   nn_rules.h decides; a row-sharded table is looked up masked (ids outside the rank's rows
///   give 0) for a Partial(sum) output. ValueError: an id outside the table.
/// Like the fallback, every kernel refuses a stale copied view (NotImplementedError).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& nn_kernels();

}  // namespace hyper::dispatch
