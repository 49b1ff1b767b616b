"""The demo's Python part (scripts/demo.sh step 7; docs/demo.md): hyper from Python on 2 ranks
under torchrun, after the C++ phases.

  7a. the seed's RaggedShard calls: a [6, 4, 8] tensor as flat intervals [0, 64) and
      [64, 192), redistributed to other units, then ops and autograd on the DTensor;
  7b. the checkpoint the C++ demo saved on 4 ranks, loaded from Python into a hyper Shard(1)
      DTensor and into a PyTorch DTensor (Shard(0)), every value checked;
  7c. a torch.nn MLP block with hyper.tp (ColwiseParallel / RowwiseParallel, asynchronous
      boundaries) trained 3 AdamW steps beside the same block on one device.

    torchrun --standalone --nproc-per-node 2 examples/demo.py --dir build/demo/checkpoint

Rank 0 prints; the exit status is 1 when any value differs from its reference.
"""

import argparse
import sys
import time

import torch
import torch.distributed as dist

import hyper
from hyper import DTensor, RaggedShard, Replicate, Shard, distribute_tensor

failures = 0


def say(text=""):
    if dist.get_rank() == 0:
        print(text, flush=True)


def check(ok, what):
    """Counts a failure on any rank; every rank learns the verdict (a collective)."""
    global failures
    flag = torch.tensor([0 if ok else 1])
    dist.all_reduce(flag)
    if flag.item():
        failures += 1
    return "ok" if flag.item() == 0 else f"MISMATCH on {flag.item()} rank(s)"


def ragged(mesh):
    say("== 7a. The seed's RaggedShard from Python")
    g = torch.arange(192, dtype=torch.float32).reshape(6, 4, 8)
    rank = dist.get_rank()
    lo, hi = ((0, 64), (64, 192))[rank]
    dt = DTensor.from_local(g.reshape(-1)[lo:hi].clone(), mesh, (RaggedShard((0, 1), (1, 2)),),
                            shape=(6, 4, 8))
    say(f"   {dt.placements[0]}: rank 0 holds flat [0, 64), rank 1 [64, 192): "
        f"{check(torch.equal(dt.full_tensor(), g), 'full_tensor')}")
    moved = dt.redistribute(mesh, (RaggedShard((0, 1), (2, 1)),))
    lo2, hi2 = ((0, 128), (128, 192))[rank]
    say(f"   redistributed to units (2, 1): rank 0 [0, 128), rank 1 [128, 192): "
        f"{check(torch.equal(moved.to_local(), g.reshape(-1)[lo2:hi2]), 'redistribute')}")
    x = distribute_tensor(g.reshape(24, 8), mesh, (Shard(0),)).requires_grad_()
    w = torch.linspace(-1, 1, 8 * 3).reshape(8, 3)
    loss = torch.tanh(x @ w).pow(2).sum()  # torch ops on a DTensor: hyper's C++ rules
    loss.backward()
    xr = g.reshape(24, 8).clone().requires_grad_()
    ref = torch.tanh(xr @ w).pow(2).sum()
    ref.backward()
    ok = torch.allclose(loss.full_tensor(), ref) and torch.allclose(x.grad.full_tensor(), xr.grad)
    say(f"   tanh(x @ w).pow(2).sum() on S(0) rows, and its gradient, vs one device: "
        f"{check(ok, 'ops')}")


def checkpoint(mesh, path):
    say(f"== 7b. The C++ demo's checkpoint (saved on 4 ranks) loaded from Python: {path}")
    from torch.distributed.device_mesh import init_device_mesh as torch_mesh
    from torch.distributed.tensor import Shard as TShard, distribute_tensor as tdist

    values = {"config.rows": 0, "config.cols": 0, "layout.param.ragged": ""}
    hyper.dcp.load(values, path)
    rows, cols = values["config.rows"], values["config.cols"]
    want = torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols)
    target = {"param.ragged": distribute_tensor(torch.zeros(rows, cols), mesh, (Shard(1),))}
    t0 = time.perf_counter()
    read, needed = hyper.dcp.load(target, path)
    ms = (time.perf_counter() - t0) * 1e3
    got = target["param.ragged"]
    say(f"   param.ragged saved as {values['layout.param.ragged']} [{rows}, {cols}], loaded as "
        f"hyper S(1): {check(torch.equal(got.full_tensor(), want), 'hyper load')} "
        f"({read / 1024:.0f} KiB read for {needed / 1024:.0f} KiB needed on this rank, "
        f"{ms:.0f} ms)")
    tmesh = torch_mesh("cpu", (dist.get_world_size(),))
    torch_target = {"param.ragged": tdist(torch.zeros(rows, cols), tmesh, [TShard(0)])}
    hyper.dcp.load(torch_target, path)
    t = torch_target["param.ragged"]
    say(f"   the same entry loaded into a PyTorch DTensor S(0): "
        f"{check(torch.equal(t.full_tensor(), want), 'torch load')}")


class Mlp(torch.nn.Module):
    def __init__(self, dim=64, hidden=256):
        super().__init__()
        gen = torch.Generator().manual_seed(5)
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, hidden)
        self.down = torch.nn.Linear(hidden, dim)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.1)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def tensor_parallel(mesh, steps=3):
    say("== 7c. A torch.nn block with hyper.tp (Colwise up, Rowwise down, async boundaries)")
    from hyper.tp import ColwiseParallel, RowwiseParallel, parallelize_module

    ref, block = Mlp(), Mlp()
    parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    opt = torch.optim.AdamW(block.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(9)
    worst = 0.0
    for step in range(steps):
        x = torch.randn(8, 32, 64, generator=gen)
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = block(x).pow(2).mean()
        loss.backward()
        opt.step()
        ms = (time.perf_counter() - t0) * 1e3
        ref_opt.zero_grad()
        ref_loss = ref(x).pow(2).mean()
        ref_loss.backward()
        ref_opt.step()
        worst = max(worst, abs(loss.item() - ref_loss.item()))
        say(f"   step {step + 1}: loss {loss.item():.6f}, one device {ref_loss.item():.6f} "
            f"({ms:.1f} ms)")
    ok = all(torch.allclose(p.full_tensor() if hyper.is_dtensor(p) else p, q, rtol=1e-4, atol=1e-5)
             for p, q in zip(block.parameters(), ref.parameters()))
    say(f"   up.weight {block.up.weight.placements}, down.weight {block.down.weight.placements}; "
        f"max |loss - one device| {worst:.1e}; every parameter after AdamW equals one device's: "
        f"{check(ok and worst < 1e-4, 'tp')}")


def fully_sharded(mesh, steps=3):
    say("== 7d. The same kind of block, three of them, with hyper.fsdp.fully_shard (flat "
        "RaggedShard buckets)")
    from hyper.fsdp import fully_shard

    ref = torch.nn.Sequential(*(Mlp() for _ in range(3)))
    model = torch.nn.Sequential(*(Mlp() for _ in range(3)))
    for block in model:
        fully_shard(block, mesh=mesh, shard_block=32)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(11)
    r, n = dist.get_rank(), dist.get_world_size()
    worst = 0.0
    for step in range(steps):
        x = torch.randn(8 * n, 16, 64, generator=gen)   # the global batch; each rank its rows
        loss = model(x[8 * r:8 * (r + 1)]).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        ref_loss = ref(x).pow(2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        mean /= n
        worst = max(worst, abs(mean.item() - ref_loss.item()))
        say(f"   step {step + 1}: loss over the ranks {mean.item():.6f}, one device "
            f"{ref_loss.item():.6f}")
    ok = all(torch.allclose(p.full_tensor(), q, rtol=1e-4, atol=1e-5)
             for p, q in zip(model.parameters(), ref.parameters()))
    w = model[0].up.weight
    say(f"   up.weight of block 0: {w.placements} (its local piece: {tuple(w.to_local().shape)}); "
        f"bytes copied outside the collectives: "
        f"{sum(m.fsdp_copied_bytes for m in model.modules() if hasattr(m, 'fsdp_copied_bytes'))}")
    say(f"   max |loss - one device| {worst:.1e}; every parameter after AdamW equals one "
        f"device's: {check(ok and worst < 1e-4, 'fsdp')}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True, help="the checkpoint the C++ demo saved")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    mesh = hyper.init_device_mesh("cpu", (dist.get_world_size(),))
    say(f"hyper demo, Python part on {dist.get_world_size()} ranks (torch {torch.__version__})")
    say()
    ragged(mesh)
    checkpoint(mesh, args.dir)
    tensor_parallel(mesh)
    fully_sharded(mesh)
    say()
    say("   Python part: " + ("ok" if failures == 0 else f"{failures} MISMATCH(ES)"))
    dist.destroy_process_group()
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
