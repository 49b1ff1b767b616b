"""torch_peer.py: the PyTorch 2.x side ("the real peer") of the hyper vs PyTorch benchmark.

It runs the cases of bench/torch_peer_bench.cc with PyTorch's own machinery -- DTensor
redistribute, c10d collectives on Gloo and torch.distributed.checkpoint (DCP) -- and writes
the same JSON, so that a combiner can pair the two sides case by case.

Launch (torchrun's environment: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT):

  <launcher> -n 4 -- .venv/bin/python bench/py/torch_peer.py --suite redistribute
      [--mib 64] [--reps 3] [--warmup 1] [--out FILE]
  <launcher> -n 4 -- .venv/bin/python bench/py/torch_peer.py --suite dcp [--mib 64]
      [--dir DIR] [--keep DIR]                     (dcp.save + dcp.load, same layout)
  <launcher> -n 2 -- .venv/bin/python bench/py/torch_peer.py --suite dcp --mode reshard
      --from DIR                                   (a checkpoint saved on 4 ranks, loaded on 2)
  <launcher> -n 2 -- .venv/bin/python bench/py/torch_peer.py --suite overlap [--mib 8]
  <launcher> -n 2 -- .venv/bin/python bench/py/torch_peer.py --suite tp [--reps 9]

e.g. .venv/bin/torchrun --standalone --nproc-per-node 4 bench/py/torch_peer.py --suite ...

Suite redistribute (--mib: MiB of the float32 global tensor, n ranks, 1-D CPU mesh):
  s0_to_r.uneven   [13, X] Shard(0) -> Replicate     s0_to_s1.uneven  [13, X] Shard(0) -> Shard(1)
  p_to_r.even      [R, 1024] Partial(sum) -> Replicate
  s0_to_r.even     [R, 1024] Shard(0) -> Replicate
  floor.all_gather_into_tensor / floor.all_to_all_single: bare c10d on the even shard.
Suite dcp (--mib per rank): layers.{0..3}.w of [n*rows, 1024], Shard(0); dcp.save,
  dcp.load (same layout) or dcp.load_reshard (--mode reshard, --from DIR).
Suite overlap (--mib: the float32 global [R, 1024], even Shard(0)): DTensor redistribute
  Shard(0) -> Replicate (the gather) and this rank's rows times a [1024, 256] weight (the
  product): overlap.gather, overlap.product alone, overlap.sequential (one then the other),
  overlap.concurrent (redistribute with async_op=True, the product, then the wait).
Suite tp (--mib unused): one training step (forward, backward, SGD lr 0) of the transformer block
  of bench/torch_peer_bench.cc (hidden 512, 8 heads, ffn 2048, causal attention, GELU, biases,
  pre-norm LayerNorms; batch [2, 256, 512], MSE against a random target) parallelized with
  torch.distributed.tensor.parallel.parallelize_module under sequence parallelism (norms
  SequenceParallel, q/k/v and w1 ColwiseParallel(input_layouts=Shard(1)), o and w2
  RowwiseParallel(output_layouts=Shard(1)): hyper's sequence_parallel_plan). tp.step.async: the
  styles as PyTorch ships them (their redistributes pass async_op=True); tp.step.sync: the same
  with DTensor.redistribute's async_op forced off. PyTorch has one path, plain nn modules, so
  its tp.step.plain_async / plain_sync (paired with hyper's plain-module block) time the same
  two steps again. The four are timed round-robin; values: the loss against the single-device
  block's, async and sync bit-identical.

Timing (both sides): per call barrier, t0, the operation until its result is complete, then
the slowest rank's time (all_reduce MAX, untimed); a case's time is the median of --reps calls
after --warmup calls; "cpu_s": the call's CPU time, every thread of every rank summed
(time.process_time), median over the calls; "caller_cpu_s": the same for the calling thread
alone (time.thread_time). Every result is checked once, untimed, against
the global tensor sliced locally; a wrong value raises. One intra-op thread per rank.
"""

import argparse
import datetime
import json
import math
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed._functional_collectives import AsyncCollectiveTensor
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import MetadataIndex
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

F32 = 4  # bytes per float32 element
COLS = 1024


# ---- arguments ---------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description="PyTorch side of the hyper vs PyTorch benchmark")
    p.add_argument("--suite", required=True, choices=["redistribute", "dcp", "overlap", "tp"])
    p.add_argument("--mib", type=float, default=64.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--out", default="")
    p.add_argument("--dir", default="", help="dcp: checkpoints go under DIR (default: /tmp)")
    p.add_argument("--mode", default="save_load", choices=["save_load", "reshard"])
    p.add_argument("--keep", default="", help="dcp save_load: leave a checkpoint in DIR")
    p.add_argument("--from", dest="src", default="", help="dcp reshard: checkpoint to load")
    a = p.parse_args(argv)
    if not a.mib > 0 or a.reps < 1 or a.warmup < 0:
        p.error("need --mib > 0, --reps >= 1, --warmup >= 0")
    if a.suite == "dcp" and a.mode == "reshard" and not a.src:
        p.error("--mode reshard needs --from DIR")
    return a


# ---- helpers -----------------------------------------------------------------------------------
def chunk_bounds(size, n, i):
    """[start, end) of piece i of torch.chunk(size, n) (the DTensor Shard convention)."""
    full = -(-size // n)
    start = min(i * full, size)
    return start, min(start + full, size)


def shard_of(t, dim, n, i):
    s, e = chunk_bounds(t.size(dim), n, i)
    return t.narrow(dim, s, e - s)


def materialize(t):
    """The result complete: wait on a pending functional collective."""
    return t.wait() if isinstance(t, AsyncCollectiveTensor) else t


def status_kib(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return -1


def reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


class Bench:
    def __init__(self, args):
        self.args = args
        self.rank = dist.get_rank()
        self.n = dist.get_world_size()
        self.mesh = init_device_mesh("cpu", (self.n,))
        self.cases = []

    def agree(self, value, op=dist.ReduceOp.MAX):
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, op=op)
        return t.item()

    def check(self, ok, what):
        if self.agree(0.0 if ok else 1.0, dist.ReduceOp.SUM) > 0:
            raise RuntimeError(f"torch_peer: wrong values in {what}")

    def time_call(self, fn, then=None):
        """One call of fn after a barrier: the slowest rank's wall seconds, and the CPU seconds
        of every thread and of the calling thread, each summed over the ranks. `then` runs right
        after the call, before the ranks agree (the peak RSS is read there)."""
        dist.barrier()
        c0 = time.process_time()  # every thread of the process
        k0 = time.thread_time()  # the calling thread
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        dk = time.thread_time() - k0
        dc = time.process_time() - c0
        if then:
            then()
        return (self.agree(dt), self.agree(dc, dist.ReduceOp.SUM),
                self.agree(dk, dist.ReduceOp.SUM))

    @staticmethod
    def case_of(cid, samples):
        times, cpu, caller = ([s[k] for s in samples] for k in range(3))
        return {"id": cid, "s": statistics.median(times), "times": times,
                "cpu_s": statistics.median(cpu), "caller_cpu_s": statistics.median(caller)}

    def time_case(self, cid, fn, rss=False, before=None, after=None):
        """W warm-up + K timed calls of fn; records and returns the case's dict."""
        a = self.args
        samples, peak, base = [], 0.0, None
        for i in range(a.warmup + a.reps):
            if before:
                before()
            rss0 = status_kib("VmRSS")
            if i == a.warmup:
                base = rss0 / 1024.0
            if rss:
                reset_peak_rss()
            read = {}
            sample = self.time_call(fn, then=lambda: read.update(hwm=status_kib("VmHWM")))
            hwm = read["hwm"]
            if i >= a.warmup:
                samples.append(sample)
                peak = max(peak, (hwm - rss0) / 1024.0)
            if after:
                after(i)
        c = self.case_of(cid, samples)
        if rss:
            c["peak_rss_mib"] = self.agree(peak)
            c["rss_base_mib"] = self.agree(base)
        self.cases.append(c)
        return c

    def time_interleaved(self, calls):
        """Several (id, fn) timed round-robin (warm-up rounds, then --reps rounds of one call
        each), so that a drift of the machine's speed reaches every case alike."""
        a = self.args
        samples = [[] for _ in calls]
        for i in range(a.warmup + a.reps):
            for k, (_, fn) in enumerate(calls):
                sample = self.time_call(fn)
                if i >= a.warmup:
                    samples[k].append(sample)
        for (cid, _), ss in zip(calls, samples):
            self.cases.append(self.case_of(cid, ss))


# ---- suite redistribute ------------------------------------------------------------------------
# Wire bytes are derived from the code that runs in torch 2.15 on a 1-D CPU mesh with Gloo:
#  * torch/distributed/tensor/_redistribute.py (redistribute_local_tensor): one transform step;
#    Shard->Replicate calls Shard._to_replicate_tensor, Shard(0)->Shard(1) Shard._to_new_shard_dim,
#    Partial->Replicate Partial._reduce_value; async_op=False waits on the result.
#  * torch/distributed/tensor/placement_types.py: _to_replicate_tensor pads the local shard to
#    the full chunk ceil(size/n) (_maybe_pad_tensor) and calls funcol.all_gather_single;
#    _to_new_shard_dim pads both dims (_pad_for_new_shard_dim) and calls shard_dim_alltoall;
#    Partial._reduce_value calls funcol.all_reduce.
#  * torch/distributed/tensor/_collective_utils.py (shard_dim_alltoall): on a CPU mesh it falls
#    back to all_gather_single of the padded local + a local chunk (no all-to-all).
#  * Gloo (third_party/gloo, built into libtorch_cpu.so): allgather.cc is a ring, every rank
#    forwards n-1 blocks of the per-rank input to its neighbour -> n*(n-1)*block bytes in all;
#    alltoall.cc sends each of the n-1 off-diagonal blocks directly once; allreduce.cc (default
#    algorithm = ring) is a ring reduce-scatter + ring allgather in which, per phase, rank r
#    sends every segment except one rank's chunk -> exactly 2*(n-1)*S bytes for an S-byte tensor.
def make_dtensor(b, global_t, placement):
    if isinstance(placement, Partial):
        local = global_t / b.n  # the sum over the n ranks is the global tensor
    else:
        local = shard_of(global_t, placement.dim, b.n, b.rank).contiguous()
    return DTensor.from_local(local, b.mesh, [placement], run_check=False,
                              shape=global_t.shape, stride=global_t.stride())


def expected_local(b, global_t, placement):
    if isinstance(placement, Shard):
        return shard_of(global_t, placement.dim, b.n, b.rank)
    return global_t


def redistribute_case(b, cid, global_t, src, dst, nbytes, lower):
    dt = make_dtensor(b, global_t, src)

    def call():
        return materialize(dt.redistribute(b.mesh, [dst]).to_local())

    got, want = call(), expected_local(b, global_t, dst)
    ok = torch.allclose(got, want) if isinstance(src, Partial) else torch.equal(got, want)
    b.check(ok, cid)
    del got
    c = b.time_case(cid, call)
    c.update(bytes=int(nbytes), bytes_lower_bound=int(lower), shape=list(global_t.shape))


def case_s0_to_r_uneven(b, g):
    n, (h, x) = b.n, g.shape
    full = -(-h // n)  # every shard padded to ceil(13/n) rows, then a ring allgather
    nbytes = n * (n - 1) * full * x * F32
    lower = (n - 1) * h * x * F32  # every rank lacks the other ranks' rows, once each
    redistribute_case(b, "s0_to_r.uneven", g, Shard(0), Replicate(), nbytes, lower)


def case_s0_to_s1_uneven(b, g):
    n, (h, x) = b.n, g.shape
    # CPU fallback: pad rows to ceil(h/n) and cols to ceil(x/n)*n, ring allgather, chunk.
    padded_local = -(-h // n) * (-(-x // n) * n)
    nbytes = n * (n - 1) * padded_local * F32
    # Lower bound: all elements minus those already on their destination rank (the rows
    # rank r holds intersected with the columns it will hold).
    diag = 0
    for r in range(n):
        rs, re = chunk_bounds(h, n, r)
        cs, ce = chunk_bounds(x, n, r)
        diag += (re - rs) * (ce - cs)
    lower = (h * x - diag) * F32
    redistribute_case(b, "s0_to_s1.uneven", g, Shard(0), Shard(1), nbytes, lower)


def case_p_to_r_even(b, g):
    n, s = b.n, g.numel() * F32
    nbytes = 2 * (n - 1) * s  # Gloo ring allreduce: 2*(n-1)/n*S per rank, n ranks
    # Lower bound 2*(n-1)*S in all (= 2*(n-1)/n*S per rank, Patarasuk & Yuan's allreduce
    # bound): each output element on every rank depends on all n inputs; with transfers of
    # elements or partial sums, letting all n ranks learn the reduction of n values is the
    # one-way gossip problem, which needs 2n-2 one-way transfers per element.
    lower = 2 * (n - 1) * s
    redistribute_case(b, "p_to_r.even", g, Partial("sum"), Replicate(), nbytes, lower)


def case_s0_to_r_even(b, g):
    n, s = b.n, g.numel() * F32
    nbytes = (n - 1) * s  # even: no padding; ring allgather n*(n-1)*(S/n)
    redistribute_case(b, "s0_to_r.even", g, Shard(0), Replicate(), nbytes, (n - 1) * s)


def case_floor_all_gather(b, g):
    n, s = b.n, g.numel() * F32
    local = shard_of(g, 0, n, b.rank).contiguous()
    out = torch.empty_like(g)
    dist.all_gather_into_tensor(out, local)
    b.check(torch.equal(out, g), "floor.all_gather_into_tensor")
    c = b.time_case("floor.all_gather_into_tensor", lambda: dist.all_gather_into_tensor(out, local))
    # Gloo ring allgather of S/n per rank: n*(n-1)*(S/n); lower bound the same.
    c.update(bytes=(n - 1) * s, bytes_lower_bound=(n - 1) * s, shape=list(g.shape))


def case_floor_all_to_all(b, g):
    n, r = b.n, g.size(0)
    rows = r // n  # the even shard [R/n, 1024]
    inp = g.narrow(0, b.rank * rows, rows).contiguous()
    q = rows // n  # even splits; a remainder (R/n not a multiple of n) goes to the last peer
    splits = [q] * n
    splits[-1] += rows - q * n
    even = splits[-1] == q
    out = torch.empty(n * splits[b.rank], COLS)
    in_s, out_s = (None, None) if even else (splits, [splits[b.rank]] * n)

    def call():
        dist.all_to_all_single(out, inp, output_split_sizes=out_s, input_split_sizes=in_s)

    call()
    want = torch.cat([g.narrow(0, j * rows + b.rank * q, splits[b.rank]) for j in range(n)])
    b.check(torch.equal(out, want), "floor.all_to_all_single")
    c = b.time_case("floor.all_to_all_single", call)
    # Gloo alltoall(v): each rank sends its n-1 off-diagonal pieces directly, once; every one
    # of them must move, so the lower bound is the same.
    nbytes = sum(rows - splits[k] for k in range(n)) * COLS * F32
    c.update(bytes=nbytes, bytes_lower_bound=nbytes, shape=list(g.shape))


def redistribute_suite(b):
    n, elems = b.n, b.args.mib * 2**20 / 4
    x = max(n, int(elems // 13) // n * n)
    r = max(n, int(elems // COLS) // n * n)
    uneven = torch.arange(13 * x, dtype=torch.float32).reshape(13, x)
    even = torch.arange(r * COLS, dtype=torch.float32).reshape(r, COLS)
    case_s0_to_r_uneven(b, uneven)
    case_s0_to_s1_uneven(b, uneven)
    del uneven
    case_p_to_r_even(b, even)
    case_s0_to_r_even(b, even)
    case_floor_all_gather(b, even)
    case_floor_all_to_all(b, even)


# ---- suite overlap -----------------------------------------------------------------------------
def overlap_suite(b):
    n = b.n
    r = max(n, int(b.args.mib * 2**20 / 4 // COLS) // n * n)
    g = torch.arange(r * COLS, dtype=torch.float32).reshape(r, COLS).div_(r * COLS)
    w = torch.full((COLS, 256), 0.5)
    dt = make_dtensor(b, g, Shard(0))
    own = dt.to_local().contiguous()

    def gather():
        return materialize(dt.redistribute(b.mesh, [Replicate()]).to_local())

    def product():
        return torch.mm(own, w)

    def concurrent():
        p = dt.redistribute(b.mesh, [Replicate()], async_op=True)
        y = product()
        return materialize(p.to_local()), y

    b.check(torch.equal(gather(), g), "overlap.gather")
    got, y = concurrent()
    b.check(torch.equal(got, g) and torch.allclose(y, torch.mm(own, w)), "overlap.concurrent")
    del got, y
    nbytes = (n - 1) * r * COLS * F32  # Gloo ring allgather, even shards (no padding)

    def sequential():
        gather()
        product()

    for cid, fn in (("overlap.gather", gather), ("overlap.product", product),
                    ("overlap.sequential", sequential), ("overlap.concurrent", concurrent)):
        c = b.time_case(cid, fn)
        moved = 0 if cid == "overlap.product" else nbytes
        c.update(bytes=moved, bytes_lower_bound=moved, shape=[r, COLS])


# ---- suite tp ----------------------------------------------------------------------------------
TP_HIDDEN, TP_HEADS, TP_FFN, TP_SEQ, TP_BATCH = 512, 8, 2048, 256, 2


class TpAttention(torch.nn.Module):
    """q, k, v, o and causal softmax attention over the heads this rank holds."""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v, self.o = (torch.nn.Linear(TP_HIDDEN, TP_HIDDEN) for _ in range(4))

    def forward(self, x):
        b, s, d = x.shape[0], x.shape[1], TP_HIDDEN // TP_HEADS
        heads = lambda t: t.view(b, s, -1, d).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
        return self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, -1))


class TpMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = torch.nn.Linear(TP_HIDDEN, TP_FFN)
        self.w2 = torch.nn.Linear(TP_FFN, TP_HIDDEN)

    def forward(self, x):
        return self.w2(torch.nn.functional.gelu(self.w1(x)))


class TpBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.attn = torch.nn.LayerNorm(TP_HIDDEN), TpAttention()
        self.norm2, self.mlp = torch.nn.LayerNorm(TP_HIDDEN), TpMlp()

    def forward(self, x):
        y = x + self.attn(self.norm1(x))
        return y + self.mlp(self.norm2(y))


def tp_suite(b):
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   SequenceParallel, parallelize_module)
    n, r = b.n, b.rank
    if TP_HEADS % n or TP_SEQ % n:
        raise ValueError(f"suite tp: {n} ranks must divide the {TP_HEADS} heads and the "
                         f"sequence of {TP_SEQ}")
    torch.manual_seed(7)
    block = TpBlock()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(TP_BATCH, TP_SEQ, TP_HIDDEN, generator=g)
    target = torch.randn(TP_BATCH, TP_SEQ, TP_HIDDEN, generator=g)
    with torch.no_grad():
        want = ((block(x) - target) ** 2).mean().item()
    col = lambda: ColwiseParallel(input_layouts=Shard(1))  # noqa: E731
    parallelize_module(block, b.mesh, {
        "norm1": SequenceParallel(), "attn.q": col(), "attn.k": col(), "attn.v": col(),
        "attn.o": RowwiseParallel(output_layouts=Shard(1)), "norm2": SequenceParallel(),
        "mlp.w1": col(), "mlp.w2": RowwiseParallel(output_layouts=Shard(1))})
    sgd = torch.optim.SGD(block.parameters(), lr=0.0)
    x_local, t_local = shard_of(x, 1, n, r).contiguous(), shard_of(target, 1, n, r).contiguous()
    real_redistribute = DTensor.redistribute
    asynchronous = [True]

    def redistribute(self, device_mesh=None, placements=None, *, async_op=False, **kw):
        return real_redistribute(self, device_mesh, placements,
                                 async_op=async_op and asynchronous[0], **kw)

    def step(on):
        asynchronous[0] = on
        sgd.zero_grad()
        y = materialize(block(x_local))
        loss = ((y - t_local) ** 2).sum() / target.numel()  # this rank's part
        loss.backward()
        sgd.step()
        return loss.detach()

    DTensor.redistribute = redistribute
    try:
        l_on, l_off = step(True), step(False)
        b.check(torch.equal(l_on, l_off), "tp.step.async vs tp.step.sync (bit-identical losses)")
        got = b.agree(l_on.item(), dist.ReduceOp.SUM)
        b.check(abs(got - want) <= 1e-4 * abs(want), f"tp.step.async (loss {got} vs {want})")
        b.time_interleaved([("tp.step.async", lambda: step(True)),
                            ("tp.step.sync", lambda: step(False)),
                            ("tp.step.plain_async", lambda: step(True)),
                            ("tp.step.plain_sync", lambda: step(False))])
    finally:
        DTensor.redistribute = real_redistribute
    for c in b.cases:
        c.update(bytes=0, bytes_lower_bound=0, shape=[TP_BATCH, TP_SEQ, TP_HIDDEN])


# ---- suite dcp ---------------------------------------------------------------------------------
NAMES = [f"layers.{i}.w" for i in range(4)]


def local_values(i, start, end):
    """Rows [start, end) of tensor i: arange(rows*1024) + 1000*i (exact via float64)."""
    v = torch.arange(start * COLS, end * COLS, dtype=torch.float64).add_(1000.0 * i)
    return v.to(torch.float32).reshape(end - start, COLS)


def make_state(b, global_rows, zero):
    sd = {}
    for i, name in enumerate(NAMES):
        s, e = chunk_bounds(global_rows, b.n, b.rank)
        local = torch.zeros(e - s, COLS) if zero else local_values(i, s, e)
        sd[name] = DTensor.from_local(local, b.mesh, [Shard(0)], run_check=False,
                                      shape=torch.Size([global_rows, COLS]),
                                      stride=(COLS, 1))
    return sd


def state_ok(b, sd, global_rows):
    s, e = chunk_bounds(global_rows, b.n, b.rank)
    return all(torch.equal(sd[nm].to_local(), local_values(i, s, e)) for i, nm in enumerate(NAMES))


def zero_state(sd):
    for v in sd.values():
        v.to_local().zero_()


def load_bytes(b, ck, sd):
    """(bytes read, bytes needed) over all ranks. FileSystemReader.read_data (filesystem.py)
    issues one ReadItem per (saved chunk, local shard) overlap (planner_helpers.py
    create_read_items_for_chunk_list) and torch.load()s the whole stored item for each, so a
    rank reads the full storage length of every saved chunk its shard overlaps."""
    md = FileSystemReader(ck).read_metadata()
    read = needed = 0
    for name in NAMES:
        local = sd[name].to_local()
        rows = sd[name].shape[0]
        s, e = chunk_bounds(rows, b.n, b.rank)
        needed += local.numel() * F32
        for ch in md.state_dict_metadata[name].chunks:
            cs, ce = ch.offsets[0], ch.offsets[0] + ch.sizes[0]
            if cs < e and s < ce and local.numel() > 0:
                read += md.storage_data[MetadataIndex(name, ch.offsets)].length
    return (int(b.agree(read, dist.ReduceOp.SUM)), int(b.agree(needed, dist.ReduceOp.SUM)))


def data_file_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f != ".metadata" and os.path.isfile(os.path.join(d, f)))


def fresh_dir(b, d):
    if b.rank == 0:
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    dist.barrier()


def case_dcp_save(b, sd, work, global_bytes):
    dirs = []

    def before():
        dirs.append(os.path.join(work, f"save_{len(dirs)}"))
        if b.rank == 0:
            os.makedirs(dirs[-1])

    written = []

    def after(i):  # untimed: count the files of one finished save, then remove it
        if b.rank == 0:
            if not written:
                written.append(data_file_bytes(dirs[-1]))
            shutil.rmtree(dirs[-1], ignore_errors=True)

    c = b.time_case("dcp.save", lambda: dcp.save(sd, checkpoint_id=dirs[-1]), rss=True,
                    before=before, after=after)
    # bytes: the data files of all ranks (one directory; .metadata excluded).
    c.update(bytes=int(b.agree(written[0] if written else 0)), bytes_lower_bound=global_bytes)


def case_dcp_load(b, cid, ck, global_rows):
    sd = make_state(b, global_rows, zero=True)
    dcp.load(sd, checkpoint_id=ck)
    b.check(state_ok(b, sd, global_rows), cid)
    c = b.time_case(cid, lambda: dcp.load(sd, checkpoint_id=ck), rss=True,
                    before=lambda: zero_state(sd))
    nbytes, needed = load_bytes(b, ck, sd)
    c.update(bytes=nbytes, bytes_lower_bound=needed)


def dcp_suite(b):
    a = b.args
    if a.mode == "reshard":
        md = FileSystemReader(a.src).read_metadata()
        global_rows = md.state_dict_metadata[NAMES[0]].size[0]
        case_dcp_load(b, "dcp.load_reshard", a.src, global_rows)
        return
    rows = max(1, int(a.mib * 2**20 / 4 / COLS / 4))
    global_rows = rows * b.n
    obj = [tempfile.mkdtemp(prefix="torch_peer_dcp_", dir=a.dir or None) if b.rank == 0 else None]
    dist.broadcast_object_list(obj, src=0)
    work = obj[0]
    try:
        sd = make_state(b, global_rows, zero=False)
        case_dcp_save(b, sd, work, 4 * global_rows * COLS * F32)
        ck = a.keep or os.path.join(work, "load")
        fresh_dir(b, ck)
        dcp.save(sd, checkpoint_id=ck)  # untimed; with --keep it stays for a reshard run
        del sd
        case_dcp_load(b, "dcp.load", ck, global_rows)
    finally:
        dist.barrier()
        if b.rank == 0:
            shutil.rmtree(work, ignore_errors=True)


# ---- main --------------------------------------------------------------------------------------
def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    try:
        b = Bench(args)
        if args.suite == "redistribute":
            redistribute_suite(b)
        elif args.suite == "overlap":
            overlap_suite(b)
        elif args.suite == "tp":
            tp_suite(b)
        else:
            dcp_suite(b)
        if b.rank == 0:
            out = {"side": "pytorch", "suite": args.suite, "mode": args.mode, "ranks": b.n,
                   "mib": args.mib, "reps": args.reps, "warmup": args.warmup,
                   "torch": torch.__version__,
                   "time_utc": datetime.datetime.now(datetime.timezone.utc)
                   .strftime("%Y-%m-%dT%H:%M:%SZ"),
                   "cases": b.cases}
            print(f"torch_peer (PyTorch {torch.__version__}) {args.suite} on {b.n} ranks, "
                  f"{args.mib:g} MiB:")
            for c in b.cases:
                extra = (f"  peak {c['peak_rss_mib']:8.1f} MiB" if "peak_rss_mib" in c else "")
                print(f"  {c['id']:30s} {c['s'] * 1e3:10.3f} ms  {c['bytes']:>14d} B"
                      f"  (lower {c['bytes_lower_bound']:d}){extra}")
            if args.out:
                parent = os.path.dirname(args.out)
                if parent:
                    os.makedirs(parent, exist_ok=True)
                with open(args.out, "w") as f:
                    json.dump(out, f, indent=1)
                    f.write("\n")
        dist.barrier()
    except BaseException:
        dist.destroy_process_group()
        raise
    # Every rank is done (the barrier above). Exit without tearing down c10d: at interpreter
    # exit a rank whose peer (rank 0 hosts the TCPStore) is already gone can abort in
    # ProcessGroupGloo / TCPStore teardown ("terminate called without an active exception",
    # seen in 2 of 10 runs on 2 ranks), which would fail the run after its results were written.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
