"""A Llama-style model's training step with hyper.fsdp.fully_shard beside PyTorch's FSDP2
(torch.distributed.fsdp.fully_shard): the same model, seeds, buckets (one per block, then the
root) and batches, in one process, timed round-robin (docs/fsdp.md). Run under torchrun:

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 2 \\
        bench/python_fsdp.py [--dim 256] [--layers 4] [--steps 3] [--rounds 5] [--bf16] [--tp 2]

`--tp T`: data parallel x tensor parallel on the mesh [world / T, T]: the blocks are tensor
parallel (hyper.tp on hyper's side, torch.distributed.tensor.parallel on FSDP2's, the same
plan), then fully_shard over the dp sub-mesh on both sides; each dp rank trains on its rows.

Prints on rank 0, for each side and as hyper / FSDP2 ratios:
- the median step (forward + backward + AdamW) in ms (target: ratio at most 0.8);
- the peak of live tensor bytes above the step's start, from the profiler's allocation events
  (every thread; the highest of three steps), and the persistent state (sharded parameters
  and optimizer state); the ratio compares their sums;
- bytes received per rank and step by the all-gathers and reduce-scatters (FSDP2's padded
  shards included; not the tensor-parallel collectives);
- bytes copied per step outside the collectives and outside the model's own computation:
  every copy op (copy_, _to_copy, cat, clone, split_with_sizes_copy, chunk_cat, the all-gather
  copy-in, ...) counted by a TorchDispatchMode outside the collective calls, minus what the
  same model's single-device step on the same rows copies.
Both sides' losses are checked against each other first (FSDP2 is the oracle here; the tests
check both against one device).
"""

import argparse
import copy
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy as TorchMP
import torch.distributed.tensor.parallel as torch_tp
from torch.distributed.fsdp import fully_shard as torch_fully_shard
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

import hyper
import hyper.tp
from hyper import _C
from hyper.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python",
                                "tests"))
from llama import Llama, batch, loss_of, tensor_parallel  # noqa: E402

# ---- counting ------------------------------------------------------------------------------

_COPY_OPS = {"aten::copy_", "aten::_to_copy", "aten::cat", "aten::clone", "aten::_chunk_cat",
             "aten::split_with_sizes_copy", "aten::_foreach_copy_", "aten::contiguous",
             "fsdp::split_with_sizes_copy", "fsdp::chunk_cat", "fsdp::all_gather_copy_in"}


def _nbytes(x):
    if isinstance(x, torch.Tensor):
        return x.numel() * x.element_size()
    if isinstance(x, (list, tuple)):
        return sum(_nbytes(t) for t in x)
    return 0


class Counter:
    """Bytes copied outside collectives, and bytes received by collectives."""

    def __init__(self):
        self.copied = 0
        self.received = 0
        self.inside = 0   # > 0 while a collective call runs


class CopyMode(TorchDispatchMode):
    def __init__(self, counter):
        super().__init__()
        self.c = counter

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = func._schema.name
        if name in _COPY_OPS and self.c.inside == 0:
            if name == "fsdp::all_gather_copy_in":
                self.c.copied += _nbytes(out[0])       # the copy-in; out[1] is the buffer
            elif "out" in kwargs:
                self.c.copied += _nbytes(kwargs["out"])
            elif name in ("aten::copy_", "aten::_foreach_copy_"):
                self.c.copied += _nbytes(args[0])
            else:
                self.c.copied += _nbytes(out)
        return out


COUNTER = Counter()


def _collective(fn, received):
    def wrapped(*args, **kwargs):
        COUNTER.received += received(*args, **kwargs)
        COUNTER.inside += 1
        try:
            return fn(*args, **kwargs)
        finally:
            COUNTER.inside -= 1
    return wrapped


def install_counters(ranks):
    # FSDP2's collectives (torch 2.15 calls them through the torch.distributed module).
    dist.all_gather_single = _collective(
        dist.all_gather_single, lambda out, inp, **kw: _nbytes(out) - _nbytes(inp))
    dist.reduce_scatter_single = _collective(
        dist.reduce_scatter_single,
        lambda output=None, input=None, **kw: (ranks - 1) * _nbytes(output))
    # hyper's: the bucket's all-gather and reduce-scatter, and the waits that finish them.
    FB = _C.FlatBucket

    def ag_bytes(self, output=None, source=None):
        elem = (source if source is not None else self.shard).element_size()
        return (self.numel - self.shard.numel()) * elem

    def rs_bytes(self, grads, op, output=None):
        elem = next(g for g in grads if g is not None).element_size()
        return (ranks - 1) * self.shard.numel() * elem

    FB.unshard_async = _collective(FB.unshard_async, ag_bytes)
    FB.reduce_scatter_grads_async = _collective(FB.reduce_scatter_grads_async, rs_bytes)
    _C.Work.wait = _collective(_C.Work.wait, lambda self: 0)


# ---- the step ------------------------------------------------------------------------------


def step(model, opt, tokens):
    loss = loss_of(model, tokens)
    loss.backward()
    opt.step()
    opt.zero_grad()
    return loss.detach().full_tensor() if hyper.is_dtensor(loss) else loss.detach()


def timed_ms(model, opt, rows, steps, first):
    t0 = time.perf_counter()
    for s in range(steps):
        step(model, opt, rows(first + s))
    return (time.perf_counter() - t0) / steps * 1e3


def peak_bytes(fn):
    """The peak of live tensor bytes above the start while fn() runs (allocation events)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]")
    live = peak = 0
    for _, n in events:
        live += n
        peak = max(peak, live)
    return peak


def persistent_bytes(model, opt):
    """Sharded parameters, their gradients (if kept) and the optimizer state on this rank."""
    local = lambda t: t.to_local() if hasattr(t, "to_local") else t  # hyper's or torch's
    total = 0
    for p in model.parameters():
        total += _nbytes(local(p))
    for st in opt.state.values():
        for v in st.values():
            if isinstance(v, torch.Tensor):
                total += _nbytes(local(v))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=688)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--per-rank", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--bf16", action="store_true", help="param_dtype bf16, reduce_dtype fp32")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (DP x TP)")
    args = ap.parse_args()
    dist.init_process_group("gloo")
    world, rank = dist.get_world_size(), dist.get_rank()
    tp = args.tp
    if tp < 1 or world % tp:
        raise SystemExit(f"--tp {tp} does not divide the {world} ranks")
    dp = world // tp
    install_counters(dp)  # the FSDP collectives run within a dp group
    torch.manual_seed(0)
    dims = dict(vocab=args.vocab, dim=args.dim, heads=args.heads, hidden=args.hidden,
                layers=args.layers, seq=args.seq)
    base = Llama(**dims)
    mp = dict(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if args.bf16 else {}
    ours = copy.deepcopy(base)
    theirs = copy.deepcopy(base)
    if tp > 1:
        mesh2 = hyper.init_device_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"), timeout=600)
        tensor_parallel(ours, mesh2["tp"], hyper.tp,
                        lambda t, m: hyper.distribute_tensor(t, m, [hyper.Replicate()]))
        mesh = mesh2["dp"]
        tm2 = torch_mesh("cpu", (dp, tp), mesh_dim_names=("dp", "tp"))
        tensor_parallel(theirs, tm2["tp"], torch_tp)
        tm = tm2["dp"]
    else:
        mesh = hyper.init_device_mesh("cpu", (world,), timeout=600)
        tm = torch_mesh("cpu", (world,))
    for block in ours.layers:
        fully_shard(block, mesh=mesh, mp_policy=MixedPrecisionPolicy(**mp))
    fully_shard(ours, mesh=mesh, mp_policy=MixedPrecisionPolicy(**mp))
    for block in theirs.layers:
        torch_fully_shard(block, mesh=tm, mp_policy=TorchMP(**mp))
    torch_fully_shard(theirs, mesh=tm, mp_policy=TorchMP(**mp))
    models = {"hyper": ours, "FSDP2": theirs}
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}

    def rows(s):  # a dp rank's rows (its tp ranks share them)
        per = args.per_rank * tp
        d = rank // tp
        return batch(s, world, args.per_rank, seq=args.seq, vocab=args.vocab)[d * per:(d + 1) * per]

    # Agreement first: two steps each from the same start.
    losses = {k: [step(m, opts[k], rows(s)).item() for s in range(2)] for k, m in models.items()}
    for a, b in zip(losses["hyper"], losses["FSDP2"]):
        assert abs(a - b) <= (2e-2 if args.bf16 else 1e-5) * abs(b), losses

    # Copies and wire bytes of one step each, and the single-device step's own copies.
    counts = {}
    for k, m in models.items():
        COUNTER.copied = COUNTER.received = 0
        with CopyMode(COUNTER):
            step(m, opts[k], rows(2))
        counts[k] = (COUNTER.copied, COUNTER.received)
    single = copy.deepcopy(base)
    if args.bf16:
        single = single.to(torch.bfloat16)
    single_opt = torch.optim.AdamW(single.parameters(), lr=1e-3)
    COUNTER.copied = 0
    with CopyMode(COUNTER):
        step(single, single_opt, rows(2))
    own = COUNTER.copied

    # Memory: the highest of three profiled steps each (where a free lands, on a Gloo worker
    # or on this thread, moves one step's peak by a bucket).
    peaks = {k: max(peak_bytes(lambda m=m, k=k, s=s: step(m, opts[k], rows(s))) for s in (3, 4, 5))
             for k, m in models.items()}
    persistent = {k: persistent_bytes(m, opts[k]) for k, m in models.items()}

    # Time: rounds alternate which side goes first.
    times = {k: [] for k in models}
    first = 6
    for r in range(args.rounds):
        order = list(models) if r % 2 == 0 else list(models)[::-1]
        for k in order:
            times[k].append(timed_ms(models[k], opts[k], rows, args.steps, first))
        first += args.steps
    med = {k: statistics.median(v) for k, v in times.items()}
    if rank == 0:
        n = sum(p.numel() for p in base.parameters())
        mib = lambda b: b / 2**20
        print(f"Llama-style model, {n / 1e6:.2f} M parameters ({args.layers} blocks, dim "
              f"{args.dim}, hidden {args.hidden}, vocab {args.vocab}), {world} ranks"
              f"{f' (dp {dp} x tp {tp})' if tp > 1 else ''} x "
              f"{args.per_rank} sequences of {args.seq}, AdamW"
              f"{', bf16 params / fp32 reduce' if args.bf16 else ', fp32'}; median of "
              f"{args.rounds} rounds x {args.steps} steps")
        print(f"{'':8}{'step ms':>10}{'peak MiB':>10}{'state MiB':>10}{'recv MiB':>10}"
              f"{'copied MiB':>12}")
        for k in models:
            print(f"{k:8}{med[k]:10.1f}{mib(peaks[k]):10.2f}{mib(persistent[k]):10.2f}"
                  f"{mib(counts[k][1]):10.2f}{mib(counts[k][0] - own):12.2f}")
        ratio = lambda i: counts["hyper"][i] / counts["FSDP2"][i] if counts["FSDP2"][i] else 0
        print(f"hyper / FSDP2: step {med['hyper'] / med['FSDP2']:.2f} (target <= 0.8), peak "
              f"memory {(peaks['hyper'] + persistent['hyper']) / (peaks['FSDP2'] + persistent['FSDP2']):.2f}"
              f" (target <= 1), bytes received {ratio(1):.3f} (target <= 1); copies outside "
              f"collectives and the model: hyper {counts['hyper'][0] - own} B, FSDP2 "
              f"{counts['FSDP2'][0] - own} B (the model's own: {own} B)")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
