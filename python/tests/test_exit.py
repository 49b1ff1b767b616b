"""A process that used hyper leaves with its own exit code: the Gloo workers of the groups hyper
holds are drained before the interpreter finalizes (hyper/__init__.py's atexit hook).

Without the drain, this job's ranks aborted at exit ("terminate called without an active
exception", SIGABRT) in 6 to 8 of 10 runs on the 2-core build machine: a Gloo worker dropped
the last reference to a finished all_reduce's tensor, which owns a Python object, while Python
finalized, and taking the GIL there ends the thread inside a destructor."""

import os
import textwrap

from conftest import torchrun

SCRIPT = textwrap.dedent("""
    import os
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    import hyper

    dist.init_process_group("gloo")
    n = dist.get_world_size()
    torch_mesh = init_device_mesh("cpu", (n,))          # keeps the default group alive
    from_torch = hyper.DeviceMesh.from_torch(torch_mesh)  # hyper holds torch's groups
    mesh = hyper.init_device_mesh("cpu", (n,))            # hyper's own groups
    x = hyper.distribute_tensor(torch.ones(1 << 16, 4), mesh, [hyper.Shard(0)])
    x.redistribute(mesh, [hyper.Replicate()], async_op=True)  # never waited on
    y = hyper.distribute_tensor(torch.ones(64, 4), from_torch, [hyper.Shard(0)])
    assert torch.equal(y.full_tensor(), torch.ones(64, 4))
    for _ in range(20):                                   # torch's collectives, Python tensors
        dist.all_reduce(torch.ones(1 << 12))
    dist.destroy_process_group()
    print(f"rank {os.environ['RANK']} done", flush=True)
""")

RUNS = 6


def test_exit_code_is_the_programs(tmp_path):
    script = tmp_path / "leave.py"
    script.write_text(SCRIPT)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    bad = []
    for i in range(RUNS):
        code, log, _ = torchrun(2, [str(script)], 120, env)
        if code != 0 or log.count(" done") != 2:
            bad.append(f"run {i}: exit code {code}\n{log[-2000:]}")
    assert not bad, f"{len(bad)} of {RUNS} runs did not exit cleanly:\n" + "\n".join(bad)
