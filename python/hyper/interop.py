"""Conversions between hyper and torch.distributed: meshes and DTensors whose layouts both can
express (Shard, Replicate, Partial). The local tensors are shared, not copied; the conversions
are differentiable (each side's from_local / to_local)."""

import torch
import torch.distributed as dist

from . import _C
from . import mesh as _mesh
from .dtensor import DTensor, is_dtensor
from .placement import Partial, RaggedShard, Replicate, Shard

__all__ = ["mesh_from_torch", "from_torch", "to_torch"]

# torch meshes made for to_torch, by (device type, shape, names).
_torch_meshes = {}


def _row_major(torch_mesh):
    ranks = torch_mesh.mesh.flatten().tolist()
    return ranks == list(range(len(ranks)))


def mesh_from_torch(torch_mesh):
    """The hyper DeviceMesh of a torch DeviceMesh, on the torch mesh's own process groups
    (``torch_mesh.get_group(d)`` for each mesh dim: no new group, no rendezvous; their
    timeouts apply): the same hyper mesh for the same torch mesh, else a new one (collective,
    as making a mesh is). NotImplementedError for a torch mesh whose ranks are not 0..n-1 in
    row-major order."""
    if not _row_major(torch_mesh):
        raise NotImplementedError(f"hyper: a torch DeviceMesh over ranks "
                                  f"{torch_mesh.mesh.tolist()} (hyper meshes are row-major over "
                                  "ranks 0..n-1)")
    for tm, hm in _from_torch_meshes:
        if tm is torch_mesh:
            return hm
    shape = list(torch_mesh.mesh.shape)
    names = list(torch_mesh.mesh_dim_names) if torch_mesh.mesh_dim_names else []
    rank = dist.get_rank()
    coord = [int(c) for c in (torch_mesh.mesh == rank).nonzero()[0].tolist()]
    groups, lines = [], []
    for d in range(len(shape)):
        index = list(coord)
        index[d] = slice(None)
        lines.append([int(r) for r in torch_mesh.mesh[tuple(index)].tolist()])
        groups.append(torch_mesh.get_group(d))
    mesh = _C.mesh_from_process_groups(_mesh._world(None), torch_mesh.device_type, shape, names,
                                       groups, lines)
    _mesh._live_meshes.append(mesh)
    _from_torch_meshes.append((torch_mesh, mesh))
    return mesh


# (torch DeviceMesh, the hyper mesh on its groups), so that one torch mesh gives one hyper mesh.
_from_torch_meshes = []


def _torch_mesh(mesh):
    key = (mesh.device_type, tuple(mesh.shape), tuple(mesh.mesh_dim_names or ()))
    if key not in _torch_meshes:
        from torch.distributed.device_mesh import init_device_mesh
        _torch_meshes[key] = init_device_mesh(mesh.device_type, tuple(mesh.shape),
                                              mesh_dim_names=mesh.mesh_dim_names and
                                              tuple(mesh.mesh_dim_names))
    return _torch_meshes[key]


def _placement_from_torch(p):
    from torch.distributed.tensor import Partial as TP, Replicate as TR, Shard as TS
    if type(p) is TS:
        return Shard(p.dim)
    if type(p) is TR:
        return Replicate()
    if type(p) is TP:
        return Partial(p.reduce_op)
    raise NotImplementedError(f"hyper: the torch placement {p!r} has no hyper equivalent")


def from_torch(torch_dtensor, device_mesh=None):
    """The hyper DTensor of a torch DTensor (same local tensor, same layout), on `device_mesh`
    or mesh_from_torch(its mesh)."""
    from torch.distributed.tensor import DTensor as TorchDTensor
    if not isinstance(torch_dtensor, TorchDTensor):
        raise TypeError(f"from_torch: not a torch DTensor: {type(torch_dtensor).__name__}")
    mesh = device_mesh if device_mesh is not None else mesh_from_torch(torch_dtensor.device_mesh)
    placements = tuple(_placement_from_torch(p) for p in torch_dtensor.placements)
    return DTensor.from_local(torch_dtensor.to_local(), mesh, placements,
                              shape=tuple(torch_dtensor.shape))


def to_torch(dtensor, device_mesh=None):
    """The torch DTensor of a hyper DTensor (same local tensor, same layout), on the torch
    mesh `device_mesh` or one made once per hyper mesh shape (collective the first time).
    ValueError for RaggedShard (PyTorch's DTensor cannot express it)."""
    from torch.distributed.tensor import DTensor as TorchDTensor
    from torch.distributed.tensor import Partial as TP, Replicate as TR, Shard as TS
    if not is_dtensor(dtensor):
        raise TypeError(f"to_torch: not a hyper DTensor: {type(dtensor).__name__}")
    placements = []
    for p in dtensor.placements:
        if isinstance(p, RaggedShard):
            raise ValueError(f"to_torch: {p!r} cannot be expressed by PyTorch's DTensor; "
                             "redistribute to Shard / Replicate first")
        placements.append(TS(p.dim) if isinstance(p, Shard) else
                          TP(p.reduce_op) if isinstance(p, Partial) else TR())
    tmesh = device_mesh if device_mesh is not None else _torch_mesh(dtensor.device_mesh)
    shape = tuple(dtensor.shape)
    stride = torch.empty(shape, device="meta").stride()
    return TorchDTensor.from_local(dtensor.to_local(), tmesh, placements, run_check=False,
                                   shape=shape, stride=stride)

