"""hyper.mindspore: hyper's placements and DTensor API on ``mindspore.Tensor`` (docs/mindspore.md).

    # python -m hyper.mindspore.run -n 2 prog.py
    import mindspore as ms
    import hyper.mindspore as hm
    from hyper.mindspore import DTensor, RaggedShard, Replicate, Shard, distribute_tensor
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    mesh = hm.init_device_mesh("cpu", (2,))
    dt = distribute_tensor(ms.Tensor(np.arange(192.0).reshape(6, 4, 8)), mesh,
                           (RaggedShard((0, 1), (1, 2)),))
    moved = dt.redistribute(mesh, (RaggedShard((0, 1), (2, 1)),))
    y = hm.ops.relu(moved * 2)
    full = y.full_tensor()
    hm.dcp.save({"y": y}, "ckpt")                 # hyper's checkpoint format (PyTorch reads it)

The placement classes are hyper's own (``hyper.mindspore.Shard is hyper.Shard``); layouts and
redistribution plans are hyper's C++ core, through the torch-free extension hyper._core.
"""

from ..placement import Partial, Placement, RaggedShard, Replicate, Shard
from . import comm, dcp, ops
from ._comm import CommError, reset_stats, stats
from .dcp import IOError, SaveError  # noqa: A004
from .dtensor import DTensor, distribute_tensor, empty, full, ones, zeros
from .mesh import DeviceMesh, init_device_mesh

__all__ = [
    "CommError", "DTensor", "DeviceMesh", "IOError", "Partial", "Placement", "RaggedShard",
    "Replicate", "SaveError", "Shard", "comm", "dcp", "distribute_tensor", "empty", "full",
    "init_device_mesh", "ones", "ops", "reset_stats", "stats", "zeros",
]
