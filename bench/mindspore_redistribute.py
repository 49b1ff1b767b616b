"""hyper.mindspore's redistribute beside the seed's own MindSpore recipe, on this machine's CPU
(docs/mindspore.md). Run with the MindSpore environment:

    PYTHONPATH=build/python .venv-ms/bin/python -m hyper.mindspore.run -n 4 \\
        bench/mindspore_redistribute.py [--numel 1048576] [--rounds 5]

The seed's recipe (its §4.5 / §4.6 on MindSpore): a ragged source is first gathered whole with a
variable all-gather, which MindSpore's CPU runs as pad-to-max + AllGather + trim (AllGatherV
has no CPU kernel), then the target's part is sliced locally; a normal -> ragged move is a local
slice after the normal redistribution. hyper runs the core's plan: each rank packs only the
elements others need (one AllGather of the packed buffers, or one Broadcast when one rank
sends). Both sides are timed round-robin in one process; values are checked equal first.

Prints on rank 0, per redistribution: the median ms of each side and their ratio, the bytes
each rank received (mean over ranks; padding included) and the plan's lower bound (the bytes a
rank needs and does not hold).
"""

import argparse
import os
import statistics
import time

import numpy as np
import mindspore as ms

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")

import hyper.mindspore as hm  # noqa: E402
from hyper import _core  # noqa: E402
from hyper.mindspore import RaggedShard, Replicate, Shard, distribute_tensor  # noqa: E402
from hyper.mindspore import _comm  # noqa: E402


def seed_recipe(dt, dst, mesh):
    """The seed's route: gather the whole tensor (pad-to-max AllGather + trim), then slice the
    target's part (the normal target's local box, or its ragged flat interval)."""
    n = mesh.size()
    local = dt.to_local().asnumpy().reshape(-1)
    counts = [_core.layout_info(list(mesh.shape), dt._keys, list(dt.shape), r)["local_numel"]
              for r in range(n)]
    rows = _comm.exchange(local, counts, max(1, max(counts)))  # pad to max, AllGather
    full = np.concatenate([rows[r, : counts[r]] for r in range(n)]).reshape(dt.shape)
    idx = _core.local_indices(list(mesh.shape), _core.layout_info(
        list(mesh.shape), [p._key() for p in dst], list(dt.shape), mesh.get_rank())["placements"],
        list(dt.shape), mesh.get_rank())
    return full.reshape(-1)[idx]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--numel", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    mesh = hm.init_device_mesh("cpu", (int(os.environ["WORLD_SIZE"]),))
    n, me = mesh.size(), mesh.get_rank()
    rows = max(n * 6, (a.numel // 256) // (n * 6) * (n * 6))
    shape = (rows, 256)
    g = ms.Tensor(np.arange(rows * 256, dtype=np.float32).reshape(shape))
    u1 = tuple(1 + (r % 3) for r in range(n))
    u2 = tuple(reversed(u1))
    while rows % sum(u1):
        u1 = u1[:-1] + (u1[-1] + 1,)
        u2 = tuple(reversed(u1))
    cases = [
        ("ragged units change", (RaggedShard((0,), u1),), (RaggedShard((0,), u2),)),
        ("ragged -> Shard(0)", (RaggedShard((0,), u1),), (Shard(0),)),
        ("ragged -> Shard(1)", (RaggedShard((0,), u1),), (Shard(1),)),
        ("ragged -> Replicate", (RaggedShard((0,), u1),), (Replicate(),)),
        ("ragged dims change", (RaggedShard((0,), u1),), (RaggedShard((0, 1), u2),)),
    ]
    if me == 0:
        print(f"hyper.mindspore redistribute vs the seed's MindSpore recipe: {n} ranks, global "
              f"{shape} float32 ({rows * 256 * 4 / 2**20:.1f} MiB), median of {a.rounds}")
        print(f"{'case':<22} {'hyper ms':>9} {'seed ms':>9} {'ratio':>6}  "
              f"{'hyper recv MiB':>14} {'seed recv MiB':>13} {'lower bound MiB':>15}")
    for name, src, dst in cases:
        dt = distribute_tensor(g, mesh, src)
        want = dt.redistribute(mesh, dst).to_local().asnumpy().reshape(-1)
        got = seed_recipe(dt, dst, mesh)
        assert np.array_equal(want, got), name
        times = {"hyper": [], "seed": []}
        recv = {}
        for _ in range(a.rounds):
            for side in ("hyper", "seed"):
                hm.reset_stats()
                _comm.barrier()
                hm.reset_stats()
                t = time.perf_counter()
                if side == "hyper":
                    dt.redistribute(mesh, dst).to_local().asnumpy()
                else:
                    seed_recipe(dt, dst, mesh)
                times[side].append(time.perf_counter() - t)
                recv[side] = hm.stats()["bytes_received"]
        plan = _core.exchange_plan(list(mesh.shape), dt._keys,
                                   [p._key() for p in dst], list(shape), me)
        mine = np.array([recv["hyper"], recv["seed"], plan["lower_bound"] * 4], np.int64)
        allr = _comm.all_gather_bytes(mine.view(np.uint8), mine.nbytes)
        mean = np.ascontiguousarray(allr).view(np.int64).reshape(n, 3).mean(axis=0) / 2**20
        if me == 0:
            h, s = statistics.median(times["hyper"]) * 1e3, statistics.median(times["seed"]) * 1e3
            print(f"{name:<22} {h:9.1f} {s:9.1f} {h / s:6.2f}  {mean[0]:14.2f} {mean[1]:13.2f} "
                  f"{mean[2]:15.2f}", flush=True)


if __name__ == "__main__":
    main()
