"""Device meshes: ranks arranged in an N-D grid, one process group per mesh dim."""

import torch.distributed as dist

from . import _C

__all__ = ["DeviceMesh", "init_device_mesh"]

DeviceMesh = _C.DeviceMesh


# hyper's Worlds over torch.distributed's store, one per timeout, in creation order (the same
# on every rank: meshes are made collectively), with the store they were made on.
_worlds = {}
_worlds_store = None


def _world(timeout):
    global _worlds_store
    if not (dist.is_available() and dist.is_initialized()):
        return _C.init_world_from_env(timeout)
    store = dist.distributed_c10d._get_default_store()
    if store is not _worlds_store:  # a new torch.distributed job
        _worlds.clear()
        _worlds_store = store
        # Its default group's workers are drained at exit too (hyper/__init__.py).
        _C.track_gloo_workers(dist.distributed_c10d._get_default_group())
    if timeout not in _worlds:
        _worlds[timeout] = _C.make_world(store, f"hyper/world{len(_worlds)}", dist.get_rank(),
                                         dist.get_world_size(), timeout)
    return _worlds[timeout]


def init_device_mesh(device_type, mesh_shape, *, mesh_dim_names=None, timeout=None):
    """A mesh of ``mesh_shape`` over all ranks (row-major), collective over every rank.

    Under ``torchrun`` after ``torch.distributed.init_process_group``, the mesh's groups meet
    through torch's own store (no second rendezvous); otherwise hyper joins the job from
    torchrun's / hyperrun's environment (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
    ``WORLD_SIZE``) once per process. ``device_type``: ``"cpu"`` (Gloo) or ``"cuda"`` (NCCL).
    ``timeout`` (seconds, default 300): the collectives' and rendezvous' limit; a peer that
    never arrives raises hyper.CommError after it (without torch.distributed, the first
    call's timeout holds for the process). Raises ValueError when the product of
    ``mesh_shape`` is not the world size, or names are repeated or of another count.
    """
    shape = [int(s) for s in mesh_shape]
    names = [str(n) for n in mesh_dim_names] if mesh_dim_names is not None else []
    mesh = _C.init_device_mesh(_world(timeout), device_type, shape, names)
    _live_meshes.append(mesh)
    return mesh


# Every mesh this process made, oldest first: an unpickled DTensor is placed on the newest one
# of its device type, shape and dim names (_find_mesh).
_live_meshes = []


def _find_mesh(device_type, shape, names):
    for mesh in reversed(_live_meshes):
        if (mesh.device_type == device_type and list(mesh.shape) == list(shape)
                and mesh.mesh_dim_names == names):
            return mesh
    raise ValueError(f"hyper: no DeviceMesh('{device_type}', {list(shape)}, mesh_dim_names="
                     f"{names}) in this process to place the unpickled DTensor on; make it "
                     "with hyper.init_device_mesh first")
