"""DTensor: a torch.Tensor laid out over a device mesh.

A hyper DTensor is a ``torch.Tensor`` whose values are the ranks' local shards; torch ops on
it run hyper's sharding rules in C++ (no Python on the op path) and return DTensors.
``isinstance(t, hyper.DTensor)`` holds for every such tensor (op results, ``nn.Parameter``s made
from one); ``t.placements``, ``t.device_mesh``, ``t.to_local()``, ``t.full_tensor()`` and
``t.redistribute(...)`` are available on them (and raise AttributeError on plain tensors).
``t.shape`` is the global shape.
"""

import copy
import types

import torch

from . import _C
from .mesh import _find_mesh
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


def _dtensor_property(name, fn, doc):
    """A torch.Tensor property `name` that is fn(self) on hyper DTensors and raises
    AttributeError on other tensors (so hasattr is False there)."""
    def get(self):
        if not _C.is_dtensor(self):
            raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}' "
                                 "(it is not a hyper DTensor)")
        return fn(self)

    return property(get, doc=doc)


def _dtensor_method(fn):
    """fn as a DTensor-only method (a _dtensor_property giving the bound method)."""
    name = fn.__name__.lstrip("_")
    return _dtensor_property(name, lambda self: types.MethodType(fn, self), fn.__doc__)


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

def _add_method(fn):
    """Adds `fn` (named as the method) to torch.Tensor as a DTensor-only method."""
    attr = _dtensor_method(fn)
    name = fn.__name__.lstrip("_")
    if name in torch.Tensor.__dict__:
        raise ImportError(f"hyper: torch.Tensor already has an attribute '{name}'")
    setattr(torch.Tensor, name, attr)


_torch_repr = torch.Tensor.__repr__


def _repr(self, *args, **kwargs):
    if not _C.is_dtensor(self):
        return _torch_repr(self, *args, **kwargs)
    local = _C.to_local(self, None).detach()
    return (f"DTensor(local_tensor={_torch_repr(local)}, device_mesh={_C.device_mesh(self)!r}, "
            f"placements={_from_c(_C.placements(self))!r}, shape={tuple(self.shape)})")


def _rebuild_dtensor(local, device_type, mesh_shape, mesh_dim_names, placements, shape,
                     requires_grad):
    """An unpickled DTensor: this rank's local tensor on this process's mesh of the same device
    type, shape and dim names (ValueError when there is none)."""
    mesh = _find_mesh(device_type, mesh_shape, mesh_dim_names)
    t = _C.from_local(local, mesh, tuple(tuple(p) for p in placements), list(shape), False)
    return t.requires_grad_(requires_grad) if requires_grad else t


_torch_reduce_ex = torch.Tensor.__reduce_ex__


def _reduce_ex(self, proto):
    """pickle / torch.save of a DTensor: this rank's local tensor and the layout (as PyTorch's
    DTensor); loading needs a live mesh of the same shape (_rebuild_dtensor)."""
    if not _C.is_dtensor(self):
        return _torch_reduce_ex(self, proto)
    mesh = _C.device_mesh(self)
    return (_rebuild_dtensor, (_C.to_local(self, None).detach(), mesh.device_type,
                               tuple(mesh.shape), mesh.mesh_dim_names, _C.placements(self),
                               tuple(self.shape), self.requires_grad))


_torch_deepcopy = torch.Tensor.__deepcopy__


def _deepcopy(self, memo):
    """copy.deepcopy of a DTensor: a copy of the local tensor (and of the gradient) on the same
    mesh and layout; like torch's, only graph leaves."""
    if not _C.is_dtensor(self):
        return _torch_deepcopy(self, memo)
    if id(self) in memo:
        return memo[id(self)]
    if not self.is_leaf:
        raise RuntimeError("Only DTensors created explicitly by the user (graph leaves) support "
                           "the deepcopy protocol at the moment (as torch.Tensor)")
    local = copy.deepcopy(_C.to_local(self, None).detach(), memo)
    new = _C.from_local(local, _C.device_mesh(self), _C.placements(self), list(self.shape), False)
    if self.requires_grad:
        new.requires_grad_(True)
    if self.grad is not None:
        new.grad = copy.deepcopy(self.grad, memo)
    memo[id(self)] = new
    return new


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
    torch.Tensor.__reduce_ex__ = _reduce_ex
    torch.Tensor.__deepcopy__ = _deepcopy
    # torch.load's default (weights_only) unpickler may rebuild hyper DTensors.
    torch.serialization.add_safe_globals([_rebuild_dtensor])
    _refuse_fake_tensors()


COMPILE_MESSAGE = (
    "torch.compile (and anything else that makes FakeTensors: torch.export, make_fx) cannot "
    "trace a hyper DTensor: its ops run hyper's C++ sharding rules, which the tracer does not "
    "see. Run this code eagerly (hyper's dispatch stays in C++), or compile the local "
    "computation on dt.to_local().")


def _refuse_fake_tensors():
    """torch.compile first turns every input tensor into a FakeTensor through
    torch._subclasses.meta_utils.MetaConverter; a hyper DTensor there raises
    NotImplementedError(COMPILE_MESSAGE) instead of failing later on its missing storage.
    (A private torch API: where it is absent the tracer fails on the storage, as before.)"""
    try:
        from torch._subclasses import meta_utils
    except ImportError:
        return
    convert = getattr(meta_utils.MetaConverter, "__call__", None)
    if convert is None or getattr(convert, "_hyper", False):
        return

    def call(self, t, *args, **kwargs):
        if isinstance(t, torch.Tensor) and _C.is_dtensor(t):
            raise NotImplementedError(COMPILE_MESSAGE)
        return convert(self, t, *args, **kwargs)

    call._hyper = True
    meta_utils.MetaConverter.__call__ = call


_install()
