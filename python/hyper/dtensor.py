"""DTensor: a torch.Tensor laid out over a device mesh.

A hyper DTensor is a ``torch.Tensor`` whose values are the ranks' local shards; torch ops on
it run hyper's sharding rules in C++ (no Python on the op path) and return DTensors.
``isinstance(t, hyper.DTensor)`` holds for every such tensor (op results, ``nn.Parameter``s made
from one); ``t.placements``, ``t.device_mesh``, ``t.to_local()``, ``t.full_tensor()`` and
``t.redistribute(...)`` are available on them (and raise AttributeError on plain tensors).
``t.shape`` is the global shape.
"""

import types

import torch

from . import _C
from .placement import _from_c, _to_c

__all__ = ["DTensor", "distribute_tensor", "is_dtensor"]


def is_dtensor(t):
    """Whether ``t`` is a hyper DTensor."""
    return isinstance(t, torch.Tensor) and _C.is_dtensor(t)


class _DTensorMeta(type(torch.Tensor)):
    def __instancecheck__(cls, obj):
        return is_dtensor(obj)


class DTensor(torch.Tensor, metaclass=_DTensorMeta):
    """The type test and constructors of hyper DTensors (never instantiated itself)."""

    def __new__(cls, *args, **kwargs):
        raise TypeError("hyper.DTensor is made by DTensor.from_local(...) or "
                        "hyper.distribute_tensor(...), not by its constructor")

    @staticmethod
    def from_local(local_tensor, device_mesh, placements, shape=None, run_check=False):
        """This rank's ``local_tensor`` as its part of a DTensor (collective-free unless
        ``run_check``). RaggedShard: ``shape`` (the global shape) is required and the local
        tensor is this rank's contiguous 1-D flat interval. Others: ``shape`` gives uneven
        shards, else even shards are assumed. ``run_check``: every rank's arguments compared
        (two small all-gathers), the same ValueError on every rank on a mismatch.
        Differentiable: gradients reach ``local_tensor``."""
        return _C.from_local(local_tensor, device_mesh, _to_c(placements),
                             None if shape is None else [int(s) for s in shape], bool(run_check))


def distribute_tensor(tensor, device_mesh, placements, src_data_rank=None):
    """The DTensor of the global ``tensor`` laid out as ``placements``. ``src_data_rank=None``:
    every rank holds the same ``tensor`` and keeps its part (no communication; differentiable).
    ``src_data_rank=k``: the values of the rank at coordinate k are scattered (the others'
    tensors give shape and dtype only)."""
    return _C.distribute_tensor(tensor, device_mesh, _to_c(placements), src_data_rank)


# ---- the DTensor API on torch.Tensor (present on DTensors only) ----------------------------


def _to_local(self, *, grad_placements=None):
    """This rank's local tensor (differentiable; ``grad_placements`` declares the layout of
    the gradient that will reach it)."""
    return _C.to_local(self, None if grad_placements is None else _to_c(grad_placements))


def _full_tensor(self, *, grad_placements=None):
    """The global tensor on every rank (collective; differentiable)."""
    return _C.full_tensor(self, None if grad_placements is None else _to_c(grad_placements))


def _redistribute(self, device_mesh=None, placements=None, *, async_op=False):
    """The same values laid out as ``placements`` (each element moves at most once).
    ``async_op``: returns at once; the collective is waited for at the first read."""
    mesh = _C.device_mesh(self) if device_mesh is None else device_mesh
    if placements is None:
        raise ValueError("redistribute: placements are required")
    return _C.redistribute(self, mesh, _to_c(placements), bool(async_op))


def _wait(self):
    """Waits for a pending async redistribute (no-op otherwise); returns self."""
    _C.wait(self)
    return self


def _dtensor_method(fn):
    name = fn.__name__.lstrip("_")

    def get(self):
        if not _C.is_dtensor(self):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 "(it is not a hyper DTensor)")
        return types.MethodType(fn, self)

    return property(get, doc=fn.__doc__)


def _dtensor_property(name, fn, doc):
    def get(self):
        if not _C.is_dtensor(self):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 "(it is not a hyper DTensor)")
        return fn(self)

    return property(get, doc=doc)


_ATTRS = {
    "to_local": _dtensor_method(_to_local),
    "full_tensor": _dtensor_method(_full_tensor),
    "redistribute": _dtensor_method(_redistribute),
    "wait": _dtensor_method(_wait),
    "placements": _dtensor_property("placements", lambda t: _from_c(_C.placements(t)),
                                    "The placements, one per mesh dim."),
    "device_mesh": _dtensor_property("device_mesh", _C.device_mesh, "The DeviceMesh."),
    "is_pending": _dtensor_property("is_pending", _C.is_pending,
                                    "Whether an async redistribute is still in flight."),
}

_torch_repr = torch.Tensor.__repr__


def _repr(self, *args, **kwargs):
    if not _C.is_dtensor(self):
        return _torch_repr(self, *args, **kwargs)
    local = _C.to_local(self, None).detach()
    return (f"DTensor(local_tensor={_torch_repr(local)}, device_mesh={_C.device_mesh(self)!r}, "
            f"placements={_from_c(_C.placements(self))!r}, shape={tuple(self.shape)})")


def _install():
    """Adds the DTensor API to torch.Tensor. torch's own DTensor subclass defines the same
    names itself, so its instances are unaffected; on plain tensors they raise
    AttributeError (hasattr is False)."""
    for name, attr in _ATTRS.items():
        existing = torch.Tensor.__dict__.get(name)
        if existing is not None and existing is not attr:
            raise ImportError(f"hyper: torch.Tensor already has an attribute '{name}'")
        setattr(torch.Tensor, name, attr)
    torch.Tensor.__repr__ = _repr


_install()
