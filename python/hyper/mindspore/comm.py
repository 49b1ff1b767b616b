"""The seed's differentiable variable-length collectives (§4.5) on MindSpore, with its split
semantics: splits count dim-0 rows (a 1-D tensor: elements), one entry per world rank.

- ``variable_all_gather(x, output_splits)``: every rank's ``x`` (``output_splits[r]`` rows on
  rank r) concatenated in rank order on every rank. Backward: a reduce-scatter: the gradients
  of every rank summed, each rank keeping its own rows.
- ``all_to_all_single(x, input_splits, output_splits)``: rank r sends ``input_splits[q]`` rows
  of ``x`` (in order) to rank q and receives ``output_splits[q]`` rows from q, concatenated in
  rank order. Backward: the same exchange with the splits swapped.

Both run on _comm's exchange (one AllGather of the padded packed buffers; MindSpore's CPU has no
AllGatherV / AlltoAllV / ReduceScatter kernels: docs/mindspore.md) in PyNative mode, where
they are Cells with a bprop; in GRAPH_MODE they run eagerly without gradients. Splits that
disagree with the tensors raise ValueError naming them.
"""

import numpy as np
import mindspore as ms
from mindspore import nn
from mindspore.communication import get_group_size, get_rank

from . import _comm
from .dtensor import _np, _ms, _pynative, _unwire, _wire

__all__ = ["variable_all_gather", "all_to_all_single"]


def _rows(x):
    return int(x.shape[0]) if x.ndim else 1


def _row_numel(x):
    n = 1
    for s in tuple(x.shape)[1:]:
        n *= int(s)
    return n


def _check_splits(name, splits, what):
    n = get_group_size()
    splits = [int(s) for s in splits]
    if len(splits) != n or any(s < 0 for s in splits):
        raise ValueError(f"{name}: {what} {splits} must hold {n} non-negative row counts "
                         "(one per rank)")
    return splits


def _table(values):
    """Every rank's int64 vector `values` (the same length on every rank): [world, len]."""
    mine = np.asarray(values, np.int64)
    got = _comm.all_gather_bytes(mine.view(np.uint8), mine.nbytes)
    return np.ascontiguousarray(got).view(np.int64).reshape(get_group_size(), mine.size)


def _gather(x, splits):
    n = get_group_size()
    row = _row_numel(x)
    # Every rank checks every rank's arguments, so a bad one fails all ranks alike.
    table = _table([_rows(x), row, *splits])
    splits0 = [int(v) for v in table[0, 2:]]
    for r in range(n):
        if list(table[r, 2:]) != splits0:
            raise ValueError(f"variable_all_gather: rank {r}'s output_splits "
                             f"{[int(v) for v in table[r, 2:]]} differ from rank 0's {splits0}")
    for r in range(n):
        if table[r, 0] != splits0[r]:
            raise ValueError(f"variable_all_gather: rank {r} holds {table[r, 0]} rows but "
                             f"output_splits {splits0} give it {splits0[r]}")
        if table[r, 1] != table[0, 1]:
            raise ValueError(f"variable_all_gather: rank {r}'s rows have {table[r, 1]} "
                             f"elements, rank 0's {table[0, 1]}")
    wire = _wire(_np(x).reshape(-1), x.dtype)
    counts = [s * row for s in splits]
    rows = _comm.exchange(wire, counts, max(1, max(counts)))
    flat = np.concatenate([rows[r, : counts[r]] for r in range(n)])
    return _ms(_unwire(flat, x.dtype).reshape((sum(splits),) + tuple(x.shape)[1:]), x.dtype)


def _reduce_scatter(dout, splits):
    me = get_rank()
    total = _comm.all_reduce_sum(_np(dout))
    start = sum(splits[:me])
    return _ms(total[start:start + splits[me]], dout.dtype)


def _all_to_all(x, input_splits, output_splits):
    me, n = get_rank(), get_group_size()
    row = _row_numel(x)
    # Every rank checks every rank's arguments, so a bad one fails all ranks alike.
    table = _table([_rows(x), row, *input_splits, *output_splits])
    ins, outs = table[:, 2:2 + n], table[:, 2 + n:]
    for r in range(n):
        if table[r, 0] != ins[r].sum():
            raise ValueError(f"all_to_all_single: rank {r} holds {table[r, 0]} rows but its "
                             f"input_splits {list(ins[r])} sum to {ins[r].sum()}")
        if table[r, 1] != table[0, 1]:
            raise ValueError(f"all_to_all_single: rank {r}'s rows have {table[r, 1]} elements, "
                             f"rank 0's {table[0, 1]}")
        if list(outs[r]) != list(ins[:, r]):
            raise ValueError(f"all_to_all_single: rank {r}'s output_splits {list(outs[r])} "
                             f"differ from the rows the ranks send it: {list(ins[:, r])}")
    sends = ins * row
    wire = _wire(_np(x).reshape(-1), x.dtype)
    starts = np.concatenate([[0], np.cumsum(sends[me])])
    totals = [int(sends[q].sum() - sends[q, q]) for q in range(n)]
    # This rank's rows for the others, its own segment left out.
    packed = np.concatenate([wire[:starts[me]], wire[starts[me + 1]:]])
    rows = _comm.exchange(packed, totals, max(1, max(totals)))
    parts = []
    for q in range(n):
        if q == me:
            parts.append(wire[starts[me]:starts[me + 1]])
            continue
        off = int(sum(sends[q, p] for p in range(me) if p != q))
        parts.append(rows[q, off:off + int(sends[q, me])])
    flat = np.concatenate(parts) if parts else wire[:0]
    return _ms(_unwire(flat, x.dtype).reshape((sum(output_splits),) + tuple(x.shape)[1:]),
               x.dtype)


class _Gather(nn.Cell):
    def __init__(self, splits):
        super().__init__()
        self.splits = splits

    def construct(self, x):
        return _gather(x, self.splits)

    def bprop(self, x, out, dout):
        return (_reduce_scatter(dout, self.splits),)


class _AllToAll(nn.Cell):
    def __init__(self, input_splits, output_splits):
        super().__init__()
        self.i, self.o = input_splits, output_splits

    def construct(self, x):
        return _all_to_all(x, self.i, self.o)

    def bprop(self, x, out, dout):
        return (_all_to_all(dout, self.o, self.i),)


def variable_all_gather(x, output_splits):
    splits = _check_splits("variable_all_gather", output_splits, "output_splits")
    return _Gather(splits)(x) if _pynative() else _gather(x, splits)


def all_to_all_single(x, input_splits, output_splits):
    i = _check_splits("all_to_all_single", input_splits, "input_splits")
    o = _check_splits("all_to_all_single", output_splits, "output_splits")
    return _AllToAll(i, o)(x) if _pynative() else _all_to_all(x, i, o)
