"""Distributed checkpoints: the C++ hyper::dcp format (safetensors chunks + JSON metadata,
atomic, checksummed, resharded on load), so a checkpoint saved from Python loads in C++ and
the other way round, on any number of ranks.

    hyper.dcp.save(model.state_dict(), "ckpt/7")        # collective
    handle = hyper.dcp.async_save(sd, "ckpt/8"); handle.wait()
    hyper.dcp.load(model.state_dict(), "ckpt/7")        # in place, resharded to each target

A state dict maps names to tensors, hyper DTensors, torch DTensors (as hyper.from_torch gives
them: the same files), bool, int, float and str; nested dicts
(an optimizer's state_dict()) are flattened with "." between the keys, as PyTorch's DCP does.
save raises hyper.SaveError on every rank when any rank fails (nothing committed), load raises
ValueError naming what does not match and changes nothing when verification fails.
"""

import os

from . import _C
from ._statedict import unflatten_values
from . import mesh as _mesh
from .dtensor import is_dtensor
from .interop import from_torch

__all__ = ["save", "async_save", "load"]


def _flatten(state, prefix="", out=None):
    """Nested dicts flattened with "."; torch DTensors as the hyper DTensors on their local
    tensors (hyper.from_torch), so load writes into them in place."""
    from torch.distributed.tensor import DTensor as TorchDTensor

    out = {} if out is None else out
    for k, v in state.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            _flatten(v, name + ".", out)
        elif isinstance(v, TorchDTensor):
            out[name] = from_torch(v.detach())
        else:
            out[name] = v
    return out


def _world(flat):
    """The world the save is collective over: the DTensors' own (None lets C++ read it off
    them), else that of this process's newest mesh (plain tensors in a multi-rank job)."""
    if any(is_dtensor(v) for v in flat.values()) or not _mesh._live_meshes:
        return None
    return _C.mesh_world(_mesh._live_meshes[-1])


def save(state_dict, checkpoint_id):
    """Saves `state_dict` to the directory `checkpoint_id` (created if needed). Collective."""
    flat = _flatten(state_dict)
    _C.dcp_save(flat, os.fspath(checkpoint_id), _world(flat))


def async_save(state_dict, checkpoint_id):
    """Like save, but returns once this rank's data is staged in host memory (the tensors
    may be changed at once); writing and the commit continue in the background. Returns a
    handle: wait() blocks until committed (raising the save's error), done() polls."""
    flat = _flatten(state_dict)
    return _C.dcp_async_save(flat, os.fspath(checkpoint_id), _world(flat))


def load(state_dict, checkpoint_id, *, verify_checksums=True):
    """Loads `checkpoint_id` into `state_dict` in place: tensors and DTensors keep their
    storage (optimizers holding them see the values), each DTensor resharded to its layout;
    bool / int / float / str entries are replaced. Not collective. Returns (bytes read, bytes
    the targets needed)."""
    flat = _flatten(state_dict)
    stats = _C.dcp_load(flat, os.fspath(checkpoint_id), bool(verify_checksums))
    unflatten_values(state_dict, flat, lambda v: hasattr(v, "shape"))
    return stats
