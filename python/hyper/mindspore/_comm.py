"""The collectives of hyper.mindspore, built on what MindSpore runs on CPU.

Measured on MindSpore 2.10 (CPU, "mccl"; docs/mindspore.md): AllGather (equal sizes; float32,
float16, float64, int16, int32, int64; a zero-length input is refused), AllReduce (sum only;
float32 and float16) and Broadcast run, on the world group only (a group made by create_group
is refused: "AllGather only support mccl_world_group on CPU"). Send/Receive, AlltoAll,
ReduceScatter and comm_func's variable-length collectives have no CPU kernel. So every exchange
here is one of:

- ``exchange``: every rank's packed buffer of the elements it sends reaches every rank, which
  keeps the parts addressed to it: one AllGather of the buffers padded to the longest (several
  senders) or one Broadcast of the only sender's buffer (exactly its bytes). Bytes travel as
  int32 words, so any dtype moves bit-exactly.
- ``all_reduce_sum``: AllReduce where MindSpore has it (sum of float32 / float16), otherwise an
  exchange of every contribution and a local reduction in rank order.

Each sent element reaches all n-1 other ranks, of which the plan's receiver keeps it: that is
the cost of having only world-group, broadcast-like collectives (the seed's own recipe for
variable lengths, pad-to-max + all-gather + slice, pays the same plus the padding). ``stats()``
counts the bytes this rank put on the wire and received.
"""

import threading

import numpy as np
import mindspore as ms
from mindspore import ops
from mindspore.communication import get_group_size, get_rank

__all__ = ["stats", "reset_stats", "CommError"]


class CommError(RuntimeError):
    """A MindSpore collective failed (the message names the call and MindSpore's error)."""


_lock = threading.Lock()
_stats = {"collectives": 0, "bytes_sent": 0, "bytes_received": 0}
_prims = {}


def stats():
    """A copy of this rank's counters: collectives run, bytes sent and received through them
    (padding included: what crossed the wire)."""
    with _lock:
        return dict(_stats)


def reset_stats():
    with _lock:
        for k in _stats:
            _stats[k] = 0


def _count(sent, received):
    with _lock:
        _stats["collectives"] += 1
        _stats["bytes_sent"] += int(sent)
        _stats["bytes_received"] += int(received)


def _prim(kind, arg=None):
    key = (kind, arg)
    p = _prims.get(key)
    if p is None:
        p = ops.AllGather() if kind == "gather" else (
            ops.AllReduce() if kind == "reduce" else ops.Broadcast(arg))
        _prims[key] = p
    return p


def _run(what, fn):
    try:
        return fn()
    except (RuntimeError, TypeError) as e:
        first = next((l for l in str(e).splitlines() if l.strip() and not l.startswith("-")), "")
        raise CommError(f"hyper.mindspore: {what} failed on rank {get_rank()}: {first}") from e


def _words(nbytes):
    return max(1, (int(nbytes) + 3) // 4)


def _as_words(buf, words):
    """`buf` (bytes-like numpy array) zero-padded into an int32 array of `words` words."""
    out = np.zeros(words, dtype=np.int32)
    raw = np.ascontiguousarray(buf).view(np.uint8).ravel()
    out.view(np.uint8)[: raw.size] = raw
    return out


def all_gather_bytes(buf, max_bytes):
    """Every rank's `buf` (at most `max_bytes` bytes; any dtype) as a uint8 array
    [world, max_bytes]: row r holds rank r's bytes, zero-padded."""
    n = get_group_size()
    words = _words(max_bytes)
    mine = ms.Tensor.from_numpy(_as_words(buf, words))
    out = _run("AllGather", lambda: _prim("gather")(mine).asnumpy())
    _count(words * 4, (n - 1) * words * 4)
    return out.view(np.uint8).reshape(n, words * 4)[:, :max_bytes]


def all_gather_texts(text):
    """Every rank's bytes `text` (any lengths), in rank order: two AllGathers (the lengths, then
    the texts padded to the longest)."""
    lens = all_gather_bytes(np.array([len(text)], np.int64).view(np.uint8), 8)
    sizes = [int(np.ascontiguousarray(r).view(np.int64)[0]) for r in lens]
    rows = all_gather_bytes(np.frombuffer(text, np.uint8), max(sizes))
    return [bytes(rows[r, : sizes[r]]) for r in range(len(sizes))]


def broadcast_bytes(buf, nbytes, root):
    """Rank `root`'s `buf` of `nbytes` bytes on every rank (uint8); others pass any buffer."""
    words = _words(nbytes)
    me = get_rank()
    src = _as_words(buf if me == root else np.zeros(0, np.uint8), words)
    out = _run(f"Broadcast from rank {root}",
               lambda: _prim("bcast", root)((ms.Tensor.from_numpy(src),))[0].asnumpy())
    _count(words * 4 if me == root else 0, 0 if me == root else words * 4)
    return out.view(np.uint8)[:nbytes]


def exchange(send, send_totals, max_send):
    """One exchange: rank r contributes its packed array `send` (send_totals[r] elements, the
    same dtype on every rank). Returns [world, max_send] of that dtype: row r holds rank r's
    packed elements (the rest zeros). One Broadcast when a single rank sends, else one
    AllGather of the buffers padded to max_send."""
    n = get_group_size()
    item = send.dtype.itemsize
    senders = [r for r in range(n) if send_totals[r] > 0]
    if len(senders) <= 1:
        rows = np.zeros((n, max_send), dtype=send.dtype)
        if senders:
            root = senders[0]
            got = broadcast_bytes(send, send_totals[root] * item, root)
            rows[root, : send_totals[root]] = got.view(send.dtype)
        return rows
    got = all_gather_bytes(send, max_send * item)
    return np.ascontiguousarray(got).view(send.dtype).reshape(n, max_send)


def all_reduce_sum(x):
    """The elementwise sum over the world of the numpy array `x` (same shape and dtype on every
    rank). AllReduce for float32 / float16; otherwise every rank's values are gathered and
    summed in rank order (exact for integers, the same order on every rank for floats)."""
    n = get_group_size()
    if x.dtype in (np.float32, np.float16) and x.size > 0:
        t = ms.Tensor.from_numpy(np.ascontiguousarray(x))
        out = _run("AllReduce", lambda: _prim("reduce")(t).asnumpy())
        nbytes = x.nbytes
        _count(nbytes, nbytes)  # a ring moves 2(n-1)/n of it each way; counted as one copy
        return out.reshape(x.shape)
    flat = np.ascontiguousarray(x).ravel()
    rows = exchange(flat, [flat.size] * n, max(1, flat.size))
    return rows[:, : flat.size].sum(axis=0, dtype=x.dtype).reshape(x.shape)


def barrier():
    """Every rank reaches this point (a one-word AllGather)."""
    all_gather_bytes(np.zeros(4, np.uint8), 4)
