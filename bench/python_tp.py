"""A transformer block's training step with tensor + sequence parallelism, hyper.tp beside
PyTorch's torch.distributed.tensor.parallel (the same module, plan and inputs), side by side
in one run (docs/python.md). Run under torchrun:

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 2 \\
        bench/python_tp.py [--dim 256] [--seq 128] [--batch 4] [--steps 10] [--rounds 3]

Prints on rank 0 the median step (forward + backward + SGD) in ms for each and the ratio
hyper / PyTorch (target: at most 0.8), after checking that both losses equal one device's.
"""

import argparse
import copy
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import hyper
import hyper.tp as htp
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
import torch.distributed.tensor.parallel as ttp
from torch.distributed.tensor import Replicate as TR, Shard as TS


class Attention(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.head_dim = head_dim
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x):
        b, s = x.shape[0], x.shape[1]
        q, k, v = (t.view(b, s, -1, self.head_dim).transpose(1, 2)
                   for t in (self.wq(x), self.wk(x), self.wv(x)))
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w1, self.w2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        return self.w2(F.relu(self.w1(x)))


class Block(nn.Module):
    def __init__(self, dim, head_dim):
        super().__init__()
        self.norm1, self.attn = nn.LayerNorm(dim), Attention(dim, head_dim)
        self.norm2, self.mlp = nn.LayerNorm(dim), MLP(dim)

    def forward(self, x):
        h = x + self.attn(self.norm1(x))
        return h + self.mlp(self.norm2(h))


def plan(tp, R, S):
    return {
        "": tp.PrepareModuleInput(input_layouts=(R(),), desired_input_layouts=(S(1),),
                                  use_local_output=True),
        "norm1": tp.SequenceParallel(), "norm2": tp.SequenceParallel(),
        "attn": tp.PrepareModuleInput(input_layouts=(S(1),), desired_input_layouts=(R(),)),
        "attn.wq": tp.ColwiseParallel(), "attn.wk": tp.ColwiseParallel(),
        "attn.wv": tp.ColwiseParallel(), "attn.wo": tp.RowwiseParallel(output_layouts=S(1)),
        "mlp": tp.PrepareModuleInput(input_layouts=(S(1),), desired_input_layouts=(R(),)),
        "mlp.w1": tp.ColwiseParallel(), "mlp.w2": tp.RowwiseParallel(output_layouts=S(1)),
    }


def apply(tp, module, mesh, R, S):
    p = plan(tp, R, S)
    root = p.pop("")
    tp.parallelize_module(module, mesh, p)
    tp.parallelize_module(module, mesh, root)
    tp.parallelize_module(module, mesh, tp.PrepareModuleOutput(
        output_layouts=(S(1),), desired_output_layouts=(R(),), use_local_output=True))
    return module


def step_ms(model, opt, x, steps):
    t0 = time.perf_counter()
    for _ in range(steps):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    return (time.perf_counter() - t0) / steps * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    world = dist.get_world_size()
    torch.manual_seed(0)
    ref = Block(args.dim, args.head_dim)
    ours = apply(htp, copy.deepcopy(ref), hyper.init_device_mesh("cpu", (world,)),
                 hyper.Replicate, hyper.Shard)
    theirs = apply(ttp, copy.deepcopy(ref), torch_mesh("cpu", (world,)), TR, TS)
    x = torch.randn(args.batch, args.seq, args.dim)
    want = ref(x).pow(2).mean()
    for name, m in (("hyper", ours), ("torch", theirs)):
        got = m(x).pow(2).mean()
        torch.testing.assert_close(got, want, msg=f"{name} loss differs from one device's")
    opts = {"hyper": torch.optim.SGD(ours.parameters(), lr=1e-3),
            "torch": torch.optim.SGD(theirs.parameters(), lr=1e-3)}
    models = {"hyper": ours, "torch": theirs}
    times = {"hyper": [], "torch": []}
    for name in times:
        step_ms(models[name], opts[name], x, 1)  # warm-up
    for _ in range(args.rounds):
        for name in times:
            times[name].append(step_ms(models[name], opts[name], x, args.steps))
    med = {k: statistics.median(v) for k, v in times.items()}
    if dist.get_rank() == 0:
        print(f"transformer block step (fwd + bwd + SGD), TP + SP on {world} ranks, dim "
              f"{args.dim}, seq {args.seq}, batch {args.batch}: median of {args.rounds} rounds "
              f"x {args.steps} steps")
        print(f"hyper.tp {med['hyper']:.2f} ms   torch parallelize_module {med['torch']:.2f} ms"
              f"   hyper / torch {med['hyper'] / med['torch']:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
