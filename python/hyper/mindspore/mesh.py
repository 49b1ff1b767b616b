"""DeviceMesh for hyper.mindspore: an N-D arrangement of MindSpore's world ranks.

MindSpore's CPU collectives run on the world group only (docs/mindspore.md), so a mesh spans
the whole world, in rank order (mesh index == rank), and its collectives are the world's.
Slicing a sub-mesh (``mesh["dp"]``) is refused with NotImplementedError for that reason.
"""

import keyword
import os

from mindspore import communication

__all__ = ["DeviceMesh", "init_device_mesh"]

_DEVICE_TYPES = ("cpu",)


def _world():
    """(rank, world size), initialising MindSpore's communication when needed (under
    ``python -m hyper.mindspore.run`` or any launcher that sets MindSpore's MS_* variables)."""
    from mindspore.communication.management import GlobalComm
    if GlobalComm.INITED:
        return communication.get_rank(), communication.get_group_size()
    if "MS_ROLE" not in os.environ:
        raise RuntimeError("hyper.mindspore: MindSpore's communication is not initialised and "
                           "MS_ROLE is not set; start the ranks with `python -m "
                           "hyper.mindspore.run -n N script.py`")
    try:
        communication.init()
    except RuntimeError as e:
        raise RuntimeError(
            "hyper.mindspore: mindspore.communication.init() failed; start the ranks with "
            "`python -m hyper.mindspore.run -n N script.py` (it sets MS_ROLE, MS_WORKER_NUM, "
            f"MS_SCHED_HOST, MS_SCHED_PORT and MS_NODE_ID): {str(e).splitlines()[0]}") from e
    return communication.get_rank(), communication.get_group_size()


class DeviceMesh:
    """``DeviceMesh(device_type, mesh_shape, mesh_dim_names=None)`` over the world's ranks."""

    __slots__ = ("device_type", "shape", "mesh_dim_names", "_rank")

    def __init__(self, device_type, mesh_shape, mesh_dim_names=None):
        if device_type not in _DEVICE_TYPES:
            raise ValueError(f"hyper.mindspore: device type {device_type!r}: MindSpore meshes "
                             f"run on {_DEVICE_TYPES} here")
        shape = tuple(int(s) for s in mesh_shape)
        if not shape or any(s < 1 for s in shape):
            raise ValueError(f"hyper.mindspore: mesh shape {shape} must have dims >= 1")
        rank, world = _world()
        size = 1
        for s in shape:
            size *= s
        if size != world:
            raise ValueError(f"hyper.mindspore: mesh shape {shape} holds {size} ranks but the "
                             f"world has {world}; MindSpore's CPU collectives run on the world "
                             "group only, so a mesh spans the whole world")
        names = None
        if mesh_dim_names is not None:
            names = tuple(mesh_dim_names)
            if len(names) != len(shape):
                raise ValueError(f"hyper.mindspore: {len(names)} mesh dim names {names} for a "
                                 f"{len(shape)}-D mesh {shape}")
            if len(set(names)) != len(names) or not all(
                    isinstance(n, str) and n.isidentifier() and not keyword.iskeyword(n)
                    for n in names):
                raise ValueError(f"hyper.mindspore: mesh dim names {names} must be distinct "
                                 "identifiers")
        object.__setattr__(self, "device_type", device_type)
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "mesh_dim_names", names)
        object.__setattr__(self, "_rank", rank)

    def __setattr__(self, name, value):
        raise AttributeError("DeviceMesh is immutable")

    @property
    def ndim(self):
        return len(self.shape)

    def size(self, mesh_dim=None):
        if mesh_dim is None:
            n = 1
            for s in self.shape:
                n *= s
            return n
        return self.shape[self._dim(mesh_dim)]

    def get_rank(self):
        return self._rank

    def get_coordinate(self):
        """This rank's coordinate on every mesh dim (row-major in rank order)."""
        out, r = [], self._rank
        for s in reversed(self.shape):
            out.append(r % s)
            r //= s
        return list(reversed(out))

    def get_local_rank(self, mesh_dim=None):
        if mesh_dim is None:
            if self.ndim != 1:
                raise ValueError("get_local_rank() of a multi-dim mesh needs mesh_dim")
            mesh_dim = 0
        return self.get_coordinate()[self._dim(mesh_dim)]

    def _dim(self, mesh_dim):
        if isinstance(mesh_dim, str):
            if not self.mesh_dim_names or mesh_dim not in self.mesh_dim_names:
                raise ValueError(f"mesh dim {mesh_dim!r} is not one of {self.mesh_dim_names}")
            return self.mesh_dim_names.index(mesh_dim)
        d = int(mesh_dim)
        if not -self.ndim <= d < self.ndim:
            raise ValueError(f"mesh dim {d} outside a {self.ndim}-D mesh")
        return d % self.ndim

    def __getitem__(self, names):
        raise NotImplementedError(
            f"hyper.mindspore: sub-mesh {names!r}: MindSpore's CPU collectives run on the world "
            "group only (a group from create_group is refused), so a mesh cannot be sliced")

    def __eq__(self, other):
        return (isinstance(other, DeviceMesh) and self.device_type == other.device_type and
                self.shape == other.shape and self.mesh_dim_names == other.mesh_dim_names)

    def __hash__(self):
        return hash((self.device_type, self.shape, self.mesh_dim_names))

    def __repr__(self):
        names = "" if self.mesh_dim_names is None else f", mesh_dim_names={self.mesh_dim_names}"
        return f"DeviceMesh('{self.device_type}', {list(self.shape)}{names})"


def init_device_mesh(device_type, mesh_shape, mesh_dim_names=None):
    """The mesh of ``mesh_shape`` over MindSpore's world (its communication initialised here
    when the launcher's environment is set and nobody did it yet)."""
    return DeviceMesh(device_type, mesh_shape, mesh_dim_names)
