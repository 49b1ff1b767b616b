"""hyper: distributed tensors for PyTorch (and MindSpore), with RaggedShard, run by a C++ core.

    import torch, torch.distributed as dist, hyper
    from hyper import DTensor, RaggedShard, Replicate, Shard, distribute_tensor
    dist.init_process_group("gloo")                        # under torchrun
    mesh = hyper.init_device_mesh("cpu", (dist.get_world_size(),))
    dt = distribute_tensor(torch.arange(192.).reshape(6, 4, 8), mesh,
                           (RaggedShard((0, 1), (1, 2)),))
    moved = dt.redistribute(mesh, (RaggedShard((0, 1), (2, 1)),))
    y = torch.relu(moved * 2)                              # a DTensor: hyper's sharding rules
    full = y.full_tensor()

The same placements and DTensor API on ``mindspore.Tensor``: ``hyper.mindspore`` (docs/mindspore.md),
which needs no PyTorch: in an environment without torch, ``import hyper`` gives the placements
and ``hyper.mindspore`` only.

Errors: ValueError (bad input), NotImplementedError (valid but unsupported), hyper.CommError
(a peer failed or timed out), hyper.SaveError and hyper.IOError (checkpoints), each with the
C++ library's message.
"""

import importlib.util as _importlib_util

from . import _core
from .placement import Partial, Placement, RaggedShard, Replicate, Shard

if _importlib_util.find_spec("torch") is None:
    # An environment without PyTorch (e.g. MindSpore's): the torch-free part only.
    __all__ = ["Partial", "Placement", "RaggedShard", "Replicate", "Shard"]

    def __getattr__(name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise ImportError(f"hyper.{name} needs PyTorch, which is not installed in this "
                          "environment (hyper.mindspore and the placements work without it)")
else:
    import atexit

    import torch  # noqa: F401  (loads LibTorch before the extension)

    from . import _C
    from . import dcp, fsdp, tp
    from .dtensor import DTensor, _add_method, distribute_tensor, is_dtensor
    from .interop import from_torch, mesh_from_torch, to_torch
    from .mesh import DeviceMesh, init_device_mesh

    DeviceMesh.from_torch = staticmethod(mesh_from_torch)
    _add_method(to_torch)  # dt.to_torch(device_mesh=None)

    # Before the interpreter finalizes, let the Gloo workers of the groups hyper holds (its own
    # and torch's behind hyper meshes) drop the finished works they still hold: the last
    # reference to a tensor that owns a Python object, dropped on a worker thread during
    # finalization, aborts the process. A collective still running after 5 s (a peer gone) is
    # left as it is.
    atexit.register(_C.quiesce_gloo_workers, 5.0)

    CommError = _C.CommError
    SaveError = _C.SaveError
    IOError = _C.IOError

    __all__ = [
        "CommError", "DTensor", "DeviceMesh", "IOError", "Partial", "Placement", "RaggedShard",
        "Replicate", "SaveError", "Shard", "dcp", "distribute_tensor", "from_torch", "fsdp",
        "init_device_mesh", "is_dtensor", "mesh_from_torch", "to_torch", "tp",
    ]
