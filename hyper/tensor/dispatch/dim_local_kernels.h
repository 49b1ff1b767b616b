#pragma once
/// \file dispatch/dim_local_kernels.h
/// Ops that move elements along some dims only, kernels of the DTensor dispatch key
/// (PrivateUse3): `cumsum` (along `dim`), `flip` (along `dims`), `roll` (along `dims`; with
/// none, the flattened tensor, so every dim). The input is laid out with those dims
/// unsharded (a Shard of one of them gathered on its mesh dim; every other Shard kept, no
/// bytes), the op runs on the local tensor, and the output has that layout. The three are
/// linear in the input, so a Partial(sum/avg) input stays Partial (each share is summed,
/// flipped or rolled alike). Autograd's formulas run above them (cumsum's backward is a flip,
/// a cumsum and a flip; flip's a flip; roll's a roll back). Refused: a RaggedShard input
/// (NotImplementedError); a dim out of range (ValueError), both naming the op and layout.
/// `tril` / `triu` (and in place): every layout but RaggedShard kept, no bytes — each rank
/// takes the triangle of its box with the diagonal shifted by its row and column offsets, and
/// a Partial passes (a zeroed position is 0 in every share). Backward: the same op on the
/// gradient. Refused: RaggedShard (NotImplementedError), < 2 dims (ValueError).

#include <string>
#include <vector>


namespace hyper::dispatch {

struct KernelFamily;
/// The family's kernels, one line per op (op_registry.h): registered by the fallback's
/// registration, which leaves their ops to them.
const KernelFamily& dim_local_kernels();

}  // namespace hyper::dispatch
