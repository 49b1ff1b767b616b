"""DTensor on mindspore.Tensor: a local tensor plus (mesh, placements, global shape).

The layout arithmetic and redistribution plans are hyper's C++ core (hyper._core); the data
moves through _comm's exchange. Local storage follows the core's convention: a Shard /
Replicate / Partial local tensor has the layout's local shape; a RaggedShard local tensor is
this rank's contiguous 1-D flat interval.

Autograd (PyNative mode): redistribute, full_tensor, distribute_tensor and to_local /
full_tensor with ``grad_placements`` are Cells with a ``bprop``, so ``mindspore.grad`` reaches
the local tensors. The backward of redistribute(A -> B) is redistribute(B' -> A') of the
gradient, where ' turns Partial into Replicate (PyTorch DTensor's convention: the gradient of
the program equals the single-device program's). In GRAPH_MODE the same calls run eagerly,
without gradients through them.
"""

import json

import numpy as np
import mindspore as ms
from mindspore import nn

from .. import _core
from ..placement import _from_c, _to_c
from . import _comm
from .mesh import DeviceMesh

__all__ = ["DTensor", "distribute_tensor"]


# ---- numpy <-> mindspore ------------------------------------------------------------------

def _np(t):
    """The values of a mindspore Tensor as numpy (bfloat16: float32 values, exact)."""
    if t.dtype == ms.bfloat16:
        return t.astype(ms.float32).asnumpy()
    return t.asnumpy()


def _ms(a, dtype):
    """A mindspore Tensor of `dtype` holding the numpy array `a`."""
    t = ms.Tensor.from_numpy(np.ascontiguousarray(a))
    return t.astype(dtype) if t.dtype != dtype else t


def _wire(a, dtype):
    """What moves on the wire for values `a` of mindspore `dtype`: bfloat16 travels as its 16
    bits (the float32 values' high halves), everything else as itself."""
    if dtype == ms.bfloat16:
        return (np.ascontiguousarray(a, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return a


def _wire_dtype(dtype):
    return np.dtype(np.uint16) if dtype == ms.bfloat16 else np.dtype(ms.dtype_to_nptype(dtype))


def _unwire(a, dtype):
    if dtype == ms.bfloat16:
        return (a.astype(np.uint32) << 16).view(np.float32)
    return a


# ---- plans ----------------------------------------------------------------------------------

_plans = {}


def _runs(take, put):
    """(take, put) index pairs as runs [take start, put start, length] where both advance by
    one, or None when runs would not pay: a slice costs about what 400 elements of numpy's
    index arrays do here, so runs are used when they average 512 elements or more."""
    if take.size == 0:
        return np.zeros((0, 3), np.int64)
    breaks = np.flatnonzero((np.diff(take) != 1) | (np.diff(put) != 1)) + 1
    if (breaks.size + 1) * 512 > take.size:
        return None
    starts = np.concatenate([[0], breaks])
    lengths = np.diff(np.concatenate([starts, [take.size]]))
    return np.stack([take[starts], put[starts], lengths], axis=1)


def _place(out, put, src, take, runs):
    """out[put] = src[take], by slices when `runs` is given."""
    if runs is None:
        out[put] = src[take]
        return
    for t, p, n in runs.tolist():
        out[p:p + n] = src[t:t + n]


def _plan(mesh_shape, src, dst, shape, index):
    """The core's exchange_plan, cached, with its assign part split by where the elements come
    from (the received rows or this rank's storage) and as runs where those pay."""
    key = (mesh_shape, src, dst, shape, index)
    p = _plans.get(key)
    if p is None:
        p = _core.exchange_plan(list(mesh_shape), src, dst, list(shape), index)
        na, split = p["n_assign"], len(p["send_totals"]) * p["max_send"]
        take, put = p["take_idx"][:na], p["dst_idx"][:na]
        rows = take < split
        for name, mask, base in (("assign_rows", rows, 0), ("assign_local", ~rows, split)):
            t, d = take[mask] - base, put[mask]
            p[name] = (t, d, _runs(t, d))
        send = p["send_idx"]
        p["send_runs"] = _runs(send, np.arange(send.size, dtype=np.int64))
        _plans[key] = p
    return p


def _hashable(keys):
    return tuple(tuple(tuple(x) if isinstance(x, list) else x for x in k) for k in keys)


def _layout(mesh, placements, shape):
    """The core's layout_info for this rank; its "placements" normalised and hashable."""
    info = _core.layout_info(list(mesh.shape), placements, list(shape), mesh.get_rank())
    info["placements"] = _hashable(info["placements"])
    return info


def _normal_grad(keys):
    """Placements of a gradient: Partial becomes Replicate."""
    return tuple(("R",) if k[0] == "P" else k for k in keys)


def _execute(mesh, src, dst, shape, local):
    """Redistributes this rank's `local` (mindspore Tensor laid out as `src`) to `dst`."""
    if src == dst:
        return local
    plan = _plan(mesh.shape, src, dst, tuple(shape), mesh.get_rank())
    dtype = local.dtype
    out_shape = tuple(plan["dst_local_shape"])
    values = _np(local).reshape(-1)
    reduces = plan["reduce_op"] != "" or plan["all_reduce_world"]
    if plan["all_reduce_world"] and plan["reduce_op"] == "sum" and values.dtype in (
            np.float32, np.float16):
        return _ms(_comm.all_reduce_sum(values).reshape(out_shape), dtype)
    wire = values if reduces else _wire(values, dtype)
    send_idx = plan["send_idx"]
    packed = np.empty(send_idx.size, wire.dtype)
    _place(packed, np.arange(send_idx.size), wire, send_idx, plan["send_runs"])
    rows = _comm.exchange(packed, plan["send_totals"], plan["max_send"]).reshape(-1)
    out = np.zeros(int(np.prod(out_shape, dtype=np.int64)), dtype=wire.dtype)
    if not plan["zero_fill"]:
        t, d, runs = plan["assign_rows"]
        _place(out, d, rows, t, runs)
        t, d, runs = plan["assign_local"]
        _place(out, d, wire, t, runs)
        take, put, na = plan["take_idx"], plan["dst_idx"], plan["n_assign"]
        if take.size > na:
            virtual = np.concatenate([rows, wire])
            vals, where = virtual[take[na:]], put[na:]
            op = plan["reduce_op"]
            if op in ("sum", "avg"):
                np.add.at(out, where, vals)
            elif op == "max":
                np.maximum.at(out, where, vals)
            else:
                np.minimum.at(out, where, vals)
        if plan["reduce_op"] == "avg" and plan["reduce_count"] > 1:
            c = plan["reduce_count"]
            out = (out / c).astype(out.dtype) if out.dtype.kind in "fc" else np.trunc(
                out / c).astype(out.dtype)
    if not reduces:
        out = _unwire(out, dtype)
    return _ms(out.reshape(out_shape), dtype)


def _pynative():
    return ms.get_context("mode") == ms.PYNATIVE_MODE


class _Move(nn.Cell):
    """local (laid out `src`) -> local laid out `dst`; backward: the gradient laid out
    `gsrc` -> `gdst`."""

    def __init__(self, mesh, shape, src, dst, gsrc, gdst):
        super().__init__()
        self.mesh, self.shape = mesh, tuple(shape)
        self.src, self.dst, self.gsrc, self.gdst = src, dst, gsrc, gdst

    def construct(self, x):
        return _execute(self.mesh, self.src, self.dst, self.shape, x)

    def bprop(self, x, out, dout):
        return (_execute(self.mesh, self.gsrc, self.gdst, self.shape, dout),)


def _move(local, mesh, shape, src, dst, gsrc, gdst):
    if not _pynative():
        return _execute(mesh, src, dst, shape, local)
    return _Move(mesh, shape, src, dst, gsrc, gdst)(local)


class _Reshape(nn.Cell):
    """A reshape whose backward gives the gradient the input's shape (a Cell, so the local
    storage conventions never meet MindSpore's view tracking)."""

    def __init__(self, shape):
        super().__init__()
        self.shape = tuple(shape)

    def construct(self, x):
        return x.reshape(self.shape)

    def bprop(self, x, out, dout):
        return (dout.reshape(x.shape),)


# ---- DTensor --------------------------------------------------------------------------------

def _check_mesh(mesh):
    if not isinstance(mesh, DeviceMesh):
        raise TypeError(f"expected a hyper.mindspore.DeviceMesh, got {type(mesh).__name__}")


def _is_ragged(keys):
    return any(k[0] == "RS" for k in keys)


class DTensor:
    """A mindspore.Tensor laid out over a DeviceMesh. Made by ``DTensor.from_local`` or
    ``distribute_tensor``; ``shape`` is the global shape."""

    __slots__ = ("_local", "_mesh", "_keys", "_shape")

    def __init__(self, *args, **kwargs):
        raise TypeError("hyper.mindspore.DTensor is made by DTensor.from_local(...) or "
                        "hyper.mindspore.distribute_tensor(...), not by its constructor")

    @classmethod
    def _make(cls, local, mesh, keys, shape):
        self = object.__new__(cls)
        object.__setattr__(self, "_local", local)
        object.__setattr__(self, "_mesh", mesh)
        object.__setattr__(self, "_keys", tuple(keys))
        object.__setattr__(self, "_shape", tuple(int(s) for s in shape))
        return self

    def __setattr__(self, name, value):
        raise AttributeError(f"hyper.mindspore.DTensor has no settable attribute '{name}'")

    # -- construction ---------------------------------------------------------------------

    @staticmethod
    def from_local(local_tensor, device_mesh, placements, shape=None, run_check=False):
        """This rank's ``local_tensor`` as its part of a DTensor (no communication unless
        ``run_check``). RaggedShard: ``shape`` (the global shape) is required and the local
        tensor is this rank's contiguous 1-D flat interval. Others: ``shape`` gives uneven
        shards, else even shards are assumed. ``run_check``: every rank's mesh, placements and
        shape compared (one small all-gather), the same ValueError on every rank on a
        mismatch. Gradients reach ``local_tensor``."""
        _check_mesh(device_mesh)
        if not isinstance(local_tensor, ms.Tensor):
            raise TypeError(f"from_local: expected a mindspore.Tensor, got "
                            f"{type(local_tensor).__name__}")
        keys = _to_c(placements)
        if len(keys) != device_mesh.ndim:
            raise ValueError(f"from_local: {len(keys)} placements {_from_c(keys)} for a "
                             f"{device_mesh.ndim}-D mesh {device_mesh}")
        local_shape = tuple(local_tensor.shape)
        if shape is None:
            if _is_ragged(keys):
                raise ValueError("from_local with a RaggedShard needs shape= (the global shape): "
                                 "a flat local interval does not tell it")
            shape = list(local_shape)
            for m, k in enumerate(keys):
                if k[0] == "S":
                    d = k[1] + len(shape) if k[1] < 0 else k[1]
                    if not 0 <= d < len(shape):
                        raise ValueError(f"from_local: Shard({k[1]}) of a {len(shape)}-D local "
                                         "tensor")
                    shape[d] *= device_mesh.shape[m]
        shape = tuple(int(s) for s in shape)
        try:
            info = _check_local(local_tensor, device_mesh, keys, shape)
        except ValueError as e:
            if not run_check:
                raise
            info, local_error = None, str(e)
        else:
            local_error = ""
        if run_check:
            _run_check(device_mesh, keys, shape, local_tensor.dtype, local_error)
        return DTensor._make(local_tensor, device_mesh, info["placements"], shape)

    # -- properties -----------------------------------------------------------------------

    @property
    def placements(self):
        return _from_c(self._keys)

    @property
    def device_mesh(self):
        return self._mesh

    @property
    def shape(self):
        return self._shape

    @property
    def dtype(self):
        return self._local.dtype

    @property
    def ndim(self):
        return len(self._shape)

    @property
    def is_pending(self):
        return False

    def size(self, dim=None):
        return self._shape if dim is None else self._shape[dim]

    def numel(self):
        return int(np.prod(self._shape, dtype=np.int64))

    # -- the DTensor API ------------------------------------------------------------------

    def to_local(self, *, grad_placements=None):
        """This rank's local tensor. ``grad_placements``: the layout of the gradient that will
        reach it (e.g. Partial: summed over the ranks on the way back)."""
        if grad_placements is None:
            return self._local
        g = _grad_keys(self._mesh, grad_placements, self._shape)
        return _move(self._local, self._mesh, self._shape, self._keys, self._keys, g,
                     _normal_grad(self._keys))

    def full_tensor(self, *, grad_placements=None):
        """The global tensor on every rank (collective). Backward: the gradient, laid out as
        ``grad_placements`` (default Replicate), redistributed to this DTensor's layout."""
        rep = (("R",),) * self._mesh.ndim
        g = rep if grad_placements is None else _grad_keys(self._mesh, grad_placements,
                                                           self._shape)
        full = _move(self._local, self._mesh, self._shape, self._keys, rep, g,
                     _normal_grad(self._keys))
        return full if tuple(full.shape) == self._shape else _Reshape(self._shape)(full)

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False):
        """The same values laid out as ``placements`` on the same mesh; each element a rank
        needs comes from a rank that holds it (docs/mindspore.md for what MindSpore's CPU
        collectives make of that). ``async_op`` is accepted and runs synchronously: MindSpore's
        CPU collectives block."""
        mesh = self._mesh if device_mesh is None else device_mesh
        _check_mesh(mesh)
        if mesh != self._mesh:
            raise ValueError(f"redistribute: target mesh {mesh} differs from the DTensor's "
                             f"{self._mesh}")
        if placements is None:
            raise ValueError("redistribute: placements are required")
        dst = _layout(mesh, _to_c(placements), self._shape)["placements"]
        local = _move(self._local, mesh, self._shape, self._keys, dst, _normal_grad(dst),
                      _normal_grad(self._keys))
        return DTensor._make(local, mesh, dst, self._shape)

    def wait(self):
        return self

    def __repr__(self):
        return (f"DTensor(local_tensor={self._local!r}, device_mesh={self._mesh!r}, "
                f"placements={self.placements!r}, shape={self._shape})")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"hyper.mindspore: '{name}' is not supported on a DTensor (fail-closed: the "
            "elementwise ops of hyper.mindspore.ops, +, -, *, /, ** and unary -, "
            "redistribute, full_tensor and to_local are)")


def _check_local(local_tensor, mesh, keys, shape):
    """from_local's checks of this rank's local tensor against the layout; its layout_info."""
    local_shape = tuple(local_tensor.shape)
    info = _layout(mesh, keys, shape)
    if _is_ragged(keys):
        if local_tensor.ndim != 1:
            raise ValueError(f"from_local: a RaggedShard local tensor is 1-D (this rank's "
                             f"flat interval); got shape {local_shape}")
        if hasattr(local_tensor, "is_contiguous") and not local_tensor.is_contiguous():
            raise ValueError("from_local: a RaggedShard local tensor must be contiguous")
        if local_shape[0] != info["local_numel"]:
            raise ValueError(f"from_local: rank {mesh.get_rank()} holds "
                             f"{local_shape[0]} elements but {info['text']} gives it "
                             f"{info['local_numel']}")
    elif local_shape != tuple(info["local_shape"]):
        raise ValueError(f"from_local: rank {mesh.get_rank()}'s local shape "
                         f"{local_shape} differs from {tuple(info['local_shape'])}, its "
                         f"part of {info['text']}")
    return info


def _grad_keys(mesh, placements, shape):
    return _layout(mesh, _to_c(placements), shape)["placements"]


def _run_check(mesh, keys, shape, dtype, local_error=""):
    """Compares every rank's (mesh, placements, shape, dtype) and reports every rank's failed
    local check: one ValueError, the same on every rank."""
    mine = json.dumps({"args": [mesh.shape, keys, shape, str(dtype)],
                       "error": local_error}).encode()
    texts = [json.loads(t) for t in _comm.all_gather_texts(mine)]
    for r, t in enumerate(texts):
        if t["error"]:
            raise ValueError(f"from_local(run_check=True): rank {r}: {t['error']}")
    bad = [r for r, t in enumerate(texts) if t["args"] != texts[0]["args"]]
    if bad:
        raise ValueError(f"from_local(run_check=True): rank {bad[0]} has {texts[bad[0]]['args']} "
                         f"but rank 0 has {texts[0]['args']} ([mesh, placements, shape, dtype])")


class _Slice(nn.Cell):
    """The local part of a global tensor every rank holds; backward: the local gradient placed
    into zeros of the global shape (the adjoint of the slice)."""

    def __init__(self, idx, shape, zeros):
        super().__init__()
        self.idx, self.shape, self.zeros = idx, tuple(shape), zeros

    def construct(self, x):
        return _slice(x, self.idx, self.shape, self.zeros)

    def bprop(self, x, out, dout):
        g = np.zeros(int(np.prod(x.shape, dtype=np.int64)), dtype=_np(dout).dtype)
        if not self.zeros:
            g[self.idx] = _np(dout).reshape(-1)
        return (_ms(g.reshape(tuple(x.shape)), dout.dtype),)


def _slice(x, idx, local_shape, zeros):
    flat = _np(x).reshape(-1)
    vals = np.zeros(idx.size, flat.dtype) if zeros else flat[idx]
    return _ms(vals.reshape(local_shape), x.dtype)


def distribute_tensor(tensor, device_mesh, placements, src_data_rank=None):
    """The DTensor of the global ``tensor`` laid out as ``placements``. ``src_data_rank=None``:
    every rank holds the same ``tensor`` and keeps its part (no communication; differentiable:
    the gradient reaches ``tensor`` as the local gradient placed in zeros). ``src_data_rank=k``:
    rank k's values are sent (one broadcast of exactly the parts the others need); the others'
    tensors give shape and dtype only."""
    _check_mesh(device_mesh)
    if not isinstance(tensor, ms.Tensor):
        raise TypeError(f"distribute_tensor: expected a mindspore.Tensor, got "
                        f"{type(tensor).__name__}")
    shape = tuple(tensor.shape)
    keys = _to_c(placements)
    if len(keys) != device_mesh.ndim:
        raise ValueError(f"distribute_tensor: {len(keys)} placements {_from_c(keys)} for a "
                         f"{device_mesh.ndim}-D mesh {device_mesh}")
    me = device_mesh.get_rank()
    info = _layout(device_mesh, keys, shape)
    keys = info["placements"]
    local_shape = tuple(info["local_shape"])
    if src_data_rank is None:
        idx = _core.local_indices(list(device_mesh.shape), keys, list(shape), me)
        if _pynative():
            local = _Slice(idx, local_shape, info["partial_zeros"])(tensor)
        else:
            local = _slice(tensor, idx, local_shape, info["partial_zeros"])
        return DTensor._make(local, device_mesh, keys, shape)
    n = device_mesh.size()
    k = int(src_data_rank)
    if not 0 <= k < n:
        raise ValueError(f"distribute_tensor: src_data_rank {k} outside the mesh's {n} ranks")
    # Rank k packs every other rank's local storage in rank order (partial-zero ranks: none).
    parts, counts = [], []
    for r in range(n):
        ri = info if r == me else _core.layout_info(list(device_mesh.shape), keys, list(shape), r)
        count = 0 if (r == k or ri["partial_zeros"]) else ri["local_numel"]
        counts.append(count)
        if me == k and count:
            parts.append(_core.local_indices(list(device_mesh.shape), keys, list(shape), r))
    dtype, wire_dtype = tensor.dtype, _wire_dtype(tensor.dtype)
    total = int(sum(counts))  # the same on every rank: the counts are the layout's
    if me == k:
        flat = _wire(_np(tensor).reshape(-1), dtype)
        idx = _core.local_indices(list(device_mesh.shape), keys, list(shape), me)
        mine = np.zeros(idx.size, wire_dtype) if info["partial_zeros"] else flat[idx]
        if total:
            packed = flat[np.concatenate(parts)]
            _comm.broadcast_bytes(packed, packed.nbytes, k)
    else:
        mine = np.zeros(info["local_numel"], wire_dtype)
        if total:
            got = _comm.broadcast_bytes(np.zeros(0, np.uint8), total * wire_dtype.itemsize, k)
            if counts[me]:
                start = int(sum(counts[:me]))
                mine = np.ascontiguousarray(got).view(wire_dtype)[start:start + counts[me]]
    return DTensor._make(_ms(_unwire(mine, dtype).reshape(local_shape), dtype), device_mesh, keys,
                         shape)


def _factory(name, fill):
    def make(shape, device_mesh, placements, dtype=ms.float32):
        _check_mesh(device_mesh)
        keys = _to_c(placements)
        if _is_ragged(keys):
            raise NotImplementedError(f"hyper.mindspore.{name}: a RaggedShard factory is not "
                                      "supported (seed §9.3): make the global tensor and "
                                      "distribute_tensor it, or DTensor.from_local")
        shape = tuple(int(s) for s in shape)
        info = _layout(device_mesh, keys, shape)
        local_shape = tuple(info["local_shape"])
        value = 0 if info["partial_zeros"] else fill
        np_dtype = np.float32 if dtype == ms.bfloat16 else ms.dtype_to_nptype(dtype)
        local = ms.Tensor(np.full(local_shape, value, dtype=np_dtype)).astype(dtype)
        return DTensor._make(local, device_mesh, info["placements"], shape)
    make.__name__ = name
    make.__doc__ = (f"A DTensor of global ``shape`` laid out as ``placements`` whose values are "
                    f"{fill} (Partial(sum) dims: the value on coordinate 0, zeros elsewhere); "
                    "RaggedShard raises NotImplementedError (seed §9.3).")
    return make


zeros = _factory("zeros", 0)
ones = _factory("ones", 1)
empty = _factory("empty", 0)


def full(shape, fill_value, device_mesh, placements, dtype=ms.float32):
    return _factory("full", fill_value)(shape, device_mesh, placements, dtype)
