"""hyper.mindspore.dcp: hyper's distributed checkpoint for MindSpore (docs/mindspore.md).

    hm.dcp.save({"w": dt, "b": tensor, "step": 7}, "ckpt/7")
    hm.dcp.load({"w": dt2, "b": tensor2, "step": 0}, "ckpt/7")   # in place, resharded

The format, the writer and the save protocol are hyper's C++ ones (through hyper._core), so a
checkpoint saved by hyper on PyTorch loads here and the other way round, across world sizes
and layouts: chunks are N-D boxes (a RaggedShard's flat interval as its boxes), a load reads
only the bytes its boxes need, every byte read is verified against its checksum first, and a
failed load changes nothing.

- save: DTensors write their boxes (replicas once; Partial is reduced to Replicate first, a
  collective), plain mindspore.Tensors are written whole by one rank, bool / int / float / str
  values by rank 0. Atomic: .metadata is renamed in last; raises hyper.mindspore.SaveError
  naming whether nothing was committed or the commit state is unknown.
- load: every entry of ``state_dict`` must be in the checkpoint with the same dtype and global
  shape (ValueError naming it otherwise); DTensors and tensors are written in place
  (Tensor.assign_value: the same objects, Parameters included), values replaced in the dict.
  No communication.
"""

import os

import numpy as np
import mindspore as ms
from mindspore import communication

from .. import _core
from ..placement import Replicate
from .._statedict import unflatten_values
from . import _comm
from .dtensor import DTensor, _np, _unwire, _wire, _wire_dtype

__all__ = ["save", "load", "SaveError", "IOError"]

SaveError = _core.SaveError
IOError = _core.IOError  # noqa: A001  (hyper's name, as hyper.IOError)

_DTYPES = {ms.float64: "F64", ms.float32: "F32", ms.float16: "F16", ms.bfloat16: "BF16",
           ms.int64: "I64", ms.int32: "I32", ms.int16: "I16", ms.int8: "I8", ms.uint8: "U8",
           ms.bool_: "BOOL"}


def _dtype_name(name, dtype):
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"checkpoint entry '{name}': dtype {dtype} is not stored "
                                  f"(hyper stores {sorted(_DTYPES.values())})") from None


def _world():
    from mindspore.communication.management import GlobalComm
    if GlobalComm.INITED:
        return communication.get_rank(), communication.get_group_size()
    return 0, 1


class _Channel:
    """save_protocol.h's three collectives on MindSpore's world (_comm)."""

    def broadcast_text(self, text):
        size = self.broadcast_code(len(text))
        if size == 0:
            return b""
        return bytes(_comm.broadcast_bytes(np.frombuffer(text, np.uint8), size, 0))

    def all_gather_text(self, text):
        return b"".join(_comm.all_gather_texts(text))

    def broadcast_code(self, code):
        got = _comm.broadcast_bytes(np.array([code], np.int64).view(np.uint8), 8, 0)
        return int(np.ascontiguousarray(got).view(np.int64)[0])

    def failure(self, what, message):
        return (f"{what} failed (a rank died or a MindSpore collective failed; MindSpore's CPU "
                f"collectives have no timeout, hyper.mindspore.run stops the ranks): {message}")


def _stage_dtensor(name, dt, chunks):
    dtype = _dtype_name(name, dt.dtype)  # on every rank, before any collective
    keys = dt._keys
    if any(k[0] == "P" for k in keys):
        # Reduce first: Partial -> Replicate on those mesh dims (collective over the mesh).
        dt = dt.redistribute(dt.device_mesh, _replicate_partial(dt.placements))
        keys = dt._keys
    mesh = dt.device_mesh
    coord = mesh.get_coordinate()
    replicas, replica = 1, 0
    for m, k in enumerate(keys):
        if k[0] == "R":
            replica = replica * mesh.shape[m] + coord[m]
            replicas *= mesh.shape[m]
    if replica != _core.replica_owner(name, replicas):
        return
    shape = dt.shape
    info = _core.layout_info(list(mesh.shape), keys, list(shape), mesh.get_rank())
    if dt.numel() == 0:
        if all(k[0] == "R" or c == 0 for k, c in zip(keys, coord)):
            chunks.append((name, list(shape), [0] * len(shape), list(shape), dtype,
                           np.zeros(0, _wire_dtype(dt.dtype))))
        return
    flat = np.ascontiguousarray(_wire(_np(dt.to_local()).reshape(-1), dt.dtype))
    for offsets, sizes, start in info["region"]:
        n = int(np.prod(sizes, dtype=np.int64))
        if n:
            chunks.append((name, list(shape), list(offsets), list(sizes), dtype,
                           np.ascontiguousarray(flat[start:start + n])))


def _check_value(name, v):
    if isinstance(v, int) and not isinstance(v, bool) and not -2**63 <= v < 2**63:
        raise ValueError(f"save: value '{name}' = {v} does not fit in int64")
    if isinstance(v, str):
        try:
            v.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"save: value '{name}' is not valid UTF-8 text: {e}") from None


def _replicate_partial(placements):
    return [Replicate() if p.is_partial() else p for p in placements]


def _flatten(state, prefix="", out=None):
    """Nested dicts flattened with "." (as hyper.dcp)."""
    out = {} if out is None else out
    for k, v in state.items():
        if not isinstance(k, str) or not k:
            raise ValueError(f"state dict names are non-empty str, got {k!r}")
        if isinstance(v, dict):
            _flatten(v, f"{prefix}{k}.", out)
        else:
            out[f"{prefix}{k}"] = v
    return out


def save(state_dict, checkpoint_id, *, checksum_block_size=1 << 20):
    """Saves ``state_dict`` (name -> DTensor, mindspore.Tensor, bool, int, float, str; nested
    dicts flattened with ".") to the directory ``checkpoint_id`` (created if needed).
    Collective: every rank calls it with the same names."""
    checkpoint_id = os.fspath(checkpoint_id)
    if not checkpoint_id:
        raise ValueError("save: empty checkpoint directory")
    rank, size = _world()
    chunks, values = [], {}
    state_dict = _flatten(state_dict)
    # Sorted, as hyper::dcp: the Partial reductions are collectives, in the same order on
    # every rank whatever order each rank's dict has.
    for name in sorted(state_dict):
        v = state_dict[name]
        if isinstance(v, DTensor):
            _stage_dtensor(name, v, chunks)
        elif isinstance(v, ms.Tensor):
            dtype = _dtype_name(name, v.dtype)
            if _core.replica_owner(name, size) == rank:
                shape = list(v.shape)
                chunks.append((name, shape, [0] * len(shape), shape, dtype,
                               np.ascontiguousarray(_wire(_np(v), v.dtype)).reshape(-1)))
        elif isinstance(v, (bool, int, float, str)):
            _check_value(name, v)  # on every rank: rank 0 alone must not fail later
            if rank == 0:
                values[name] = v
        else:
            raise ValueError(f"save: entry '{name}' is a {type(v).__name__}; a state dict "
                             "holds hyper.mindspore DTensors, mindspore.Tensors, bool, int, "
                             "float and str")
    _core.dcp_save(checkpoint_id, rank, size, chunks, values, _Channel(), checksum_block_size)


_VALUE_TYPES = {bool: "bool", int: "int", float: "float", str: "str"}


def load(state_dict, checkpoint_id, *, verify_checksums=True, allow_unchecksummed=False):
    """Loads the checkpoint into ``state_dict`` in place (DTensors and tensors keep their
    objects; bool / int / float / str entries are replaced). Not collective. Returns (bytes
    read, bytes the targets needed). Raises ValueError for an incomplete or corrupt checkpoint,
    a missing entry, a dtype / shape / type mismatch; a failed load changes nothing."""
    verify = bool(verify_checksums)
    nested, state_dict = state_dict, _flatten(state_dict)
    reader = _core.CheckpointReader(os.fspath(checkpoint_id), verify, allow_unchecksummed)
    tensors, values = reader.tensors(), reader.values()
    missing = [n for n in state_dict if n not in tensors and n not in values]
    if missing:
        raise ValueError(f"checkpoint {checkpoint_id} lacks "
                         f"{'entry' if len(missing) == 1 else 'entries'} "
                         + ", ".join(f"'{n}'" for n in missing))
    targets, needed = [], 0
    for name, v in state_dict.items():
        is_tensor = isinstance(v, (DTensor, ms.Tensor))
        if is_tensor != (name in tensors):
            raise ValueError(f"loading '{name}': the checkpoint holds a "
                             f"{'tensor' if name in tensors else 'value'}, the target is a "
                             f"{'tensor' if is_tensor else 'value'}")
        if not is_tensor:
            saved = values[name]
            if type(saved) is not type(v):
                raise ValueError(f"loading '{name}': the checkpoint holds "
                                 f"{_VALUE_TYPES.get(type(saved), type(saved).__name__)}, the "
                                 f"target is {_VALUE_TYPES.get(type(v), type(v).__name__)}")
            continue
        saved_dtype, saved_shape = tensors[name]
        dtype = _dtype_name(name, v.dtype)
        shape = tuple(v.shape)
        if dtype != saved_dtype:
            raise ValueError(f"loading '{name}': target dtype {dtype} differs from the saved "
                             f"dtype {saved_dtype}")
        if shape != tuple(saved_shape):
            raise ValueError(f"loading '{name}': target global shape {shape} differs from the "
                             f"saved global shape {tuple(saved_shape)}")
        if isinstance(v, DTensor):
            mesh = v.device_mesh
            info = _core.layout_info(list(mesh.shape), v._keys, list(shape), mesh.get_rank())
            region = [tuple(r) for r in info["region"]]
            local, zeros = v._local, info["partial_zeros"]
            n = info["local_numel"]
        else:
            region = [([0] * len(shape), list(shape), 0)]
            local, zeros, n = v, False, v.size
        needed += n * _wire_dtype(v.dtype).itemsize
        targets.append((name, region, dtype, local, zeros, np.zeros(n, _wire_dtype(v.dtype))))
    if verify:
        for name, region, dtype, local, zeros, buf in targets:
            if buf.size and not zeros:
                reader.verify(name, region, dtype, buf.nbytes)
    reader.check_unchanged()
    staged = []
    for name, region, dtype, local, zeros, buf in targets:
        n = buf.size
        if n and not zeros:
            reader.read_into(name, region, dtype, buf, verified=verify)
        if buf.dtype == np.bool_:
            buf = buf.view(np.uint8) != 0
        staged.append((local, buf))
    reader.check_unchanged()  # a data file written in place during the copy
    for local, buf in staged:
        value = _unwire(buf, local.dtype).reshape(tuple(local.shape))
        local.assign_value(ms.Tensor(value).astype(local.dtype))
    unflatten_values(nested, values, lambda v: isinstance(v, (DTensor, ms.Tensor)))
    return reader.bytes_read(), needed
