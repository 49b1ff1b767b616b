"""Per-op cost from Python, side by side in one run: the plain op, hyper's DTensor and PyTorch's
DTensor, on [16, 16] float32 (docs/python.md). Run under torchrun:

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 2 \\
        bench/python_ops.py [--reps 2000] [--rounds 5]

Each op runs `reps` times per round, the three forms interleaved round by round; the median
round's microseconds per call are printed on rank 0 with hyper / PyTorch DTensor (target: at
most 0.5).
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
from torch.distributed.tensor import Replicate as TR, Shard as TS, distribute_tensor as tdist

import hyper
from hyper import Replicate, Shard, distribute_tensor


def per_call_us(fn, reps):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    hm = hyper.init_device_mesh("cpu", (world,))
    tm = torch_mesh("cpu", (world,))
    torch.manual_seed(0)
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    h = {"aR": distribute_tensor(a, hm, (Replicate(),)), "bR": distribute_tensor(b, hm, (Replicate(),)),
         "aS": distribute_tensor(a, hm, (Shard(0),))}
    t = {"aR": tdist(a, tm, [TR()]), "bR": tdist(b, tm, [TR()]), "aS": tdist(a, tm, [TS(0)])}
    ops = {
        "add R+R": lambda d, x, y: d["aR"] + d["bR"] if d is not None else x + y,
        "mm S(0)xR": lambda d, x, y: torch.mm(d["aS"], d["bR"]) if d is not None else torch.mm(x, y),
        "view R": lambda d, x, y: d["aR"].view(256) if d is not None else x.view(256),
        "relu S(0)": lambda d, x, y: torch.relu(d["aS"]) if d is not None else torch.relu(x),
        "sum R": lambda d, x, y: d["aR"].sum() if d is not None else x.sum(),
    }
    rows = []
    for name, op in ops.items():
        runs = {"plain": [], "hyper": [], "torch": []}
        for _ in range(args.rounds):
            runs["plain"].append(per_call_us(lambda: op(None, a, b), args.reps))
            runs["hyper"].append(per_call_us(lambda: op(h, None, None), args.reps))
            runs["torch"].append(per_call_us(lambda: op(t, None, None), args.reps))
        med = {k: statistics.median(v) for k, v in runs.items()}
        rows.append((name, med))
    if dist.get_rank() == 0:
        print(f"per-op cost from Python, {world} ranks, [16, 16] float32, median of "
              f"{args.rounds} rounds x {args.reps} calls (us per call)")
        print(f"{'op':<12} {'plain':>7} {'hyper':>7} {'torch DT':>9} {'hyper/torch':>12}")
        for name, m in rows:
            print(f"{name:<12} {m['plain']:7.2f} {m['hyper']:7.2f} {m['torch']:9.2f} "
                  f"{m['hyper'] / m['torch']:12.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
