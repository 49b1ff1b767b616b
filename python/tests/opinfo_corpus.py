"""PyTorch's op corpus through hyper's DTensor and PyTorch's, side by side in one run.

Every OpInfo of the torch wheel's op_db that runs on CPU in float32 (deterministic ones: the
random draws, the ops OpInfo runs under a fixed torch seed and uninitialised factories are
left out, as is any sample that draws from torch's RNG) gives its own sample inputs (OpInfo's
sizes, uneven over the ranks). Each sample runs once per layout combination of its tensor
arguments, through hyper DTensors and through PyTorch DTensors:
- on a 1-D mesh over all ranks: everything Replicate; each tensor argument alone Shard(d) for
  each of its dims; every argument Shard(0);
- with --mesh 2,2 (4 ranks): everything Replicate; each tensor argument alone (Shard(d),
  Replicate) and (Replicate, Shard(d)) for each of its dims, and (Shard(0), Shard(last));
  every argument (Shard(0), Shard(0)).
The outputs' full tensors are compared with the plain op's and, where the OpInfo supports
autograd and the plain op's backward runs, the gradients of every floating tensor argument
(made a DTensor leaf) under the loss sum_i (out_i * W_i).sum(), W_i fixed weights that differ
per element, with the plain op's. Each case is one of:
  correct  every rank's outputs (and gradients) equal the plain op's (rtol 1e-4, atol 1e-4;
           NaN equal NaN)
  refused  every rank raised NotImplementedError or ValueError (a decided refusal), in the op
           or in its backward
  failed   every rank raised another exception
  wrong    no exception, and some rank's output or gradient differs
  hang     a collective timed out, or the ranks disagreed (some raised, others did not: the
           ranks out of step), after which the framework's mesh is made anew

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 4 \\
        python/tests/opinfo_corpus.py --table docs/opinfo_corpus.md [--ops 'add,mul*'] \\
        [--mesh 2,2] [--samples 3] [--timeout 10] [--no-grad] [--json out.json]
"""

import argparse
import datetime
import fnmatch
import json
import math
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

import hyper

SKIP = ("*normal*", "*rand*", "bernoulli*", "cauchy", "exponential", "geometric", "uniform",
        "*dropout*", "multinomial", "*empty*", "nn.functional.rrelu", "item", "to_sparse",
        "sparse.*", "*_like", "new_*", "nonzero_static", "allclose", "equal",
        "*.alpha_dropout")
KINDS = ("correct", "refused", "failed", "wrong", "hang")
# Ops on which PyTorch DTensor leaves the ranks out of step so that Gloo aborts the whole
# process ("Received data size doesn't match expected size. Is there a distributed collective
# mismatch"), by mesh shape: their PyTorch DTensor cases are counted as hangs, not run.
TORCH_ABORTS = {
    (4,): ("squeeze_copy",),
    (2, 2): ("squeeze_copy",),
}


def deterministic(op):
    """Not a random draw: not named so, and not an op OpInfo itself calls under a fixed torch
    seed (wrapper_set_seed: dropout, SDPA, multi-head attention, fractional pooling, ...); hyper's
    DTensors draw from the mesh's RNG tracker instead, so their values differ by design."""
    code = getattr(op.op, "__code__", None)
    if code is not None and "wrapper_set_seed" in code.co_names:
        return False
    return not any(fnmatch.fnmatchcase(op.name, p) for p in SKIP)


def tensor_slots(sample):
    """(container, key) of every tensor argument: the input, positional and keyword args."""
    slots = [("input", None)]
    for i, a in enumerate(sample.args):
        if isinstance(a, torch.Tensor):
            slots.append(("args", i))
    for k, v in sample.kwargs.items():
        if isinstance(v, torch.Tensor):
            slots.append(("kwargs", k))
    return slots


def get(sample, slot):
    where, key = slot
    return sample.input if where == "input" else (sample.args[key] if where == "args"
                                                 else sample.kwargs[key])


def combos(sample, slots, mesh_ndim):
    """Placement choices: per slot, one placement per mesh dim, each ("R",) or ("S", d)."""
    dims = [get(sample, s).dim() for s in slots]
    R = ("R",)
    rep = (R,) * mesh_ndim
    out = [tuple(rep for _ in slots)]
    for i, nd in enumerate(dims):
        alone = []
        for d in range(nd):
            for m in range(mesh_ndim):
                alone.append(tuple(("S", d) if k == m else R for k in range(mesh_ndim)))
        if mesh_ndim == 2 and nd > 0:
            alone.append((("S", 0), ("S", nd - 1)))
        for p in alone:
            c = [rep] * len(slots)
            c[i] = p
            out.append(tuple(c))
    if len(slots) > 1 and all(nd > 0 for nd in dims):
        out.append(tuple((("S", 0),) * mesh_ndim for _ in slots))
    return out


def weights(t):
    """Fixed loss weights of t's shape, different per element and never 0."""
    n = t.numel()
    return ((torch.arange(n, dtype=torch.float64) % 7 + 1) / 4).reshape(t.shape).to(t.dtype)


def differentiable(sample, slots):
    return [s for s in slots if get(sample, s).is_floating_point()]


def plain_grads(op, sample, slots):
    """The plain op's gradients of the floating tensor arguments (None: not differentiable
    here, or its backward raised); a list of tensors, zeros where an argument is unused."""
    leaves = {s: get(sample, s).detach().clone().requires_grad_() for s in
              differentiable(sample, slots)}
    if not leaves:
        return None
    try:
        out = call(op, sample, lambda slot, t: leaves.get(slot, t))
        outs = [o for o in flatten(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if not outs:
            return None
        loss = sum((o * weights(o)).sum() for o in outs)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
    except Exception:  # noqa: BLE001
        return None
    return [torch.zeros_like(x) if g is None else g for x, g in zip(leaves.values(), grads)]


def call(op, sample, convert):
    args = list(sample.args)
    kwargs = dict(sample.kwargs)
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            args[i] = convert(("args", i), a)
    for k, v in kwargs.items():
        if isinstance(v, torch.Tensor):
            kwargs[k] = convert(("kwargs", k), v)
    return op(convert(("input", None), sample.input), *args, **kwargs)


def flatten(out):
    if isinstance(out, (tuple, list)):
        return [x for o in out for x in flatten(o)]
    return [out]


def same(got, want):
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor) or got.shape != want.shape or got.dtype != want.dtype:
            return False
        if want.is_floating_point() or want.is_complex():
            return torch.allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)
        return torch.equal(got, want)
    return got == want


class Framework:
    """One DTensor implementation: its mesh (made anew after a hang), conversion and gather."""

    def __init__(self, name, timeout, shape):
        self.name, self.timeout, self.shape, self.generation = name, timeout, shape, 0
        self.new_mesh()

    def new_mesh(self):
        world = dist.get_world_size()
        shape = list(self.shape)
        if self.name == "hyper":
            store = dist.distributed_c10d._get_default_store()
            w = hyper._C.make_world(store, f"hyper/corpus{self.generation}", dist.get_rank(),
                                    world, float(self.timeout))
            self.mesh = hyper._C.init_device_mesh(w, "cpu", shape, [])
        else:
            from torch.distributed.device_mesh import DeviceMesh
            group = dist.new_group(backend="gloo",
                                   timeout=datetime.timedelta(seconds=self.timeout))
            if len(shape) == 1:
                self.mesh = DeviceMesh.from_group(group, "cpu")
            else:
                # One group per mesh row and column (every rank makes every group, in order).
                ranks = torch.arange(world).reshape(shape)
                mine = [None, None]
                for dim in range(2):
                    lines = ranks if dim == 1 else ranks.t()
                    for line in lines.tolist():
                        g = dist.new_group(line, backend="gloo",
                                           timeout=datetime.timedelta(seconds=self.timeout))
                        if dist.get_rank() in line:
                            mine[dim] = g
                self.mesh = DeviceMesh.from_group(mine, "cpu", mesh=ranks,
                                                  mesh_dim_names=("a", "b"))
        self.generation += 1

    def placements(self, choice):
        if self.name == "hyper":
            return tuple(hyper.Replicate() if c[0] == "R" else hyper.Shard(c[1]) for c in choice)
        from torch.distributed.tensor import Replicate, Shard
        return [Replicate() if c[0] == "R" else Shard(c[1]) for c in choice]

    def convert(self, t, choice):
        if self.name == "hyper":
            return hyper.distribute_tensor(t, self.mesh, self.placements(choice))
        from torch.distributed.tensor import distribute_tensor
        return distribute_tensor(t, self.mesh, self.placements(choice))

    def full(self, x):
        if self.name == "hyper":
            return x.full_tensor() if hyper.is_dtensor(x) else x
        from torch.distributed.tensor import DTensor
        return x.full_tensor() if isinstance(x, DTensor) else x


def run_case(fw, op, sample, choice, slots, want, want_grads):
    """This rank's outcome: ("ok"|"wrong"|"refused"|"failed"|"timeout", detail)."""
    placement = dict(zip(slots, choice))
    stage = "op"
    try:
        leaves = {}
        if want_grads is not None:
            leaves = {s: fw.convert(get(sample, s).detach(), placement[s]).requires_grad_()
                      for s in differentiable(sample, slots)}
        out = call(op, sample, lambda slot, t: leaves[slot] if slot in leaves
                   else fw.convert(t, placement[slot]))
        outs = flatten(out)
        got = [fw.full(o) for o in outs]
        if len(got) != len(want) or not all(same(g, w) for g, w in zip(got, want)):
            return "wrong", "values"
        if not leaves:
            return "ok", ""
        stage = "backward"
        loss = sum((g * weights(g)).sum() for o, g in zip(outs, got)
                   if isinstance(o, torch.Tensor) and o.requires_grad)
        if not isinstance(loss, torch.Tensor):
            return "wrong", "no output requires grad"
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        for x, g, w in zip(leaves.values(), grads, want_grads):
            g = torch.zeros_like(w) if g is None else fw.full(g)
            if not same(g, w):
                return "wrong", "gradients"
        return "ok", ""
    except (NotImplementedError, ValueError) as e:
        return "refused", f"{stage}: {type(e).__name__}: {str(e)[:200]}"
    except Exception as e:  # noqa: BLE001
        text = f"{stage}: {type(e).__name__}: {str(e)[:200]}"
        timed_out = isinstance(e, hyper.CommError) or "timed out" in str(e).lower() or \
            "timeout" in str(e).lower()
        return ("timeout" if timed_out else "failed"), text


def decide(outcomes):
    kinds = {o[0] for o in outcomes}
    if "timeout" in kinds:
        return "hang"
    if len(kinds) > 1 and kinds & {"refused", "failed"} and kinds & {"ok", "wrong"}:
        return "hang"  # out of step: some ranks raised, the others went on
    if "wrong" in kinds:
        return "wrong"
    if kinds == {"ok"}:
        return "correct"
    if kinds == {"refused"}:
        return "refused"
    return "failed"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="*", help="comma-separated fnmatch patterns of op names")
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--mesh", default="", help="mesh shape, e.g. 2,2 (default: 1-D, all ranks)")
    ap.add_argument("--no-grad", action="store_true", help="values only")
    ap.add_argument("--resume", type=int, default=0, help="skip the first N ops")
    ap.add_argument("--json")
    ap.add_argument("--table")
    ap.add_argument("--progress", action="store_true", help="rank 0 names each op as it starts")
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    from torch.testing._internal.common_methods_invocations import op_db

    rank, world = dist.get_rank(), dist.get_world_size()
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=600))
    shape = tuple(int(x) for x in args.mesh.split(",")) if args.mesh else (world,)
    if len(shape) not in (1, 2) or math.prod(shape) != world:
        raise ValueError(f"--mesh {args.mesh} does not cover the {world} ranks")
    fws = {name: Framework(name, args.timeout, shape) for name in ("hyper", "torch")}
    patterns = args.ops.split(",")
    ops = [o for o in op_db if torch.float32 in o.supported_dtypes("cpu") and deterministic(o)
           and any(fnmatch.fnmatchcase(o.name, p) for p in patterns)]
    rows = {}
    examples = {}
    t0 = time.time()
    for index, op in enumerate(ops):
        if index < args.resume:
            continue
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if rank == 0 and args.progress:
            print(f"[{time.time() - t0:7.1f} s] {index + 1}/{len(ops)} {key}", file=sys.stderr,
                  flush=True)
        counts = {fw: dict.fromkeys(KINDS, 0) for fw in fws}
        torch.manual_seed(0)
        try:
            samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=False))
        except Exception:  # noqa: BLE001
            samples = []
        used = 0
        for sample in samples:
            if used >= args.samples:
                break
            if not isinstance(sample.input, torch.Tensor) or any(
                    isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a)
                    for a in list(sample.args) + list(sample.kwargs.values())):
                continue
            try:
                state = torch.get_rng_state()
                want = [o.clone() if isinstance(o, torch.Tensor) else o
                        for o in flatten(op(sample.input, *sample.args, **sample.kwargs))]
            except Exception:  # noqa: BLE001
                continue
            if not torch.equal(torch.get_rng_state(), state):
                continue  # the sample drew from torch's RNG
            used += 1
            slots = tensor_slots(sample)
            grads = None if args.no_grad or not op.supports_autograd else \
                plain_grads(op, sample, slots)
            for choice in combos(sample, slots, len(shape)):
                for name, fw in fws.items():
                    if name == "torch" and key in TORCH_ABORTS.get(shape, ()):
                        counts[name]["hang"] += 1
                        examples.setdefault((name, key, "hang"), "not run: Gloo aborts the "
                                            "process (collective mismatch) on this mesh")
                        continue
                    mine = run_case(fw, op, sample, choice, slots, want, grads)
                    everyone = [None] * world
                    dist.all_gather_object(everyone, mine, group=control)
                    kind = decide(everyone)
                    counts[name][kind] += 1
                    if kind in ("wrong", "hang", "failed", "refused"):
                        examples.setdefault((name, key, kind),
                                            f"{choice} on {tuple(sample.input.shape)}: "
                                            f"{[e[1] for e in everyone if e[1]][:1]}")
                    if kind == "hang":
                        fw.new_mesh()
        rows[key] = counts
    elapsed = time.time() - t0
    if rank == 0:
        summary = {fw: {k: sum(1 for r in rows.values() if verdict(r[fw]) == k) for k in
                        ("correct", "partly", "refused", "failed", "wrong", "hang", "none")}
                   for fw in fws}
        report = {"world": world, "mesh": list(shape), "grad": not args.no_grad,
                  "ops": len(rows), "seconds": round(elapsed, 1),
                  "summary": summary, "rows": rows,
                  "examples": {f"{a}|{b}|{c}": v for (a, b, c), v in examples.items()}}
        if args.json:
            with open(args.json, "w") as f:
                json.dump(report, f, indent=1)
        if args.table:
            write_table(args.table, report, args)
        print(json.dumps({"ops": len(rows), "seconds": round(elapsed, 1), "summary": summary}))
    dist.barrier(group=control)
    dist.destroy_process_group()


def verdict(c):
    """One op's verdict from its cases: wrong / hang / failed if any case was; correct when
    all were; partly when some were; refused when none ran; none without cases."""
    total = sum(c.values())
    if total == 0:
        return "none"
    for k in ("wrong", "hang"):
        if c[k]:
            return k
    if c["correct"] == total:
        return "correct"
    if c["correct"]:
        return "partly"
    if c["refused"]:
        return "refused"
    return "failed"


def write_table(path, report, args):
    lines = [
        "# PyTorch's op corpus through hyper and PyTorch DTensor",
        "",
        f"Generated by `python/tests/opinfo_corpus.py` on {report['world']} ranks "
        f"({'x'.join(map(str, report['mesh']))} mesh, Gloo, CPU, float32), up to {args.samples} "
        f"OpInfo samples per op, {report['ops']} ops, "
        f"{'values and gradients' if report['grad'] else 'values only'}, "
        f"{report['seconds']} s. Each op's verdict: `correct` (every "
        "layout case equal to the plain op), `partly` (some cases correct, the others "
        "refused or failed), `refused`, `failed`, `wrong` (a value differed), `hang` (a "
        "collective timed out or the ranks got out of step), `none` (no usable sample).",
        "",
        f"Command: `PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node "
        f"{report['world']} python/tests/opinfo_corpus.py {' '.join(sys.argv[1:])}`",
        "",
        "| verdict | hyper | PyTorch DTensor |",
        "|---|---|---|",
    ]
    for k in ("correct", "partly", "refused", "failed", "wrong", "hang", "none"):
        lines.append(f"| {k} | {report['summary']['hyper'][k]} | {report['summary']['torch'][k]} |")
    lines += ["", "Cases (correct / refused / failed / wrong / hang) per op:", "",
              "| op | hyper | PyTorch DTensor |", "|---|---|---|"]
    for key, r in sorted(report["rows"].items()):
        cell = {fw: "/".join(str(r[fw][k]) for k in KINDS) + f" ({verdict(r[fw])})" for fw in r}
        lines.append(f"| `{key}` | {cell['hyper']} | {cell['torch']} |")
    if report["examples"]:
        lines += ["", "First example of each wrong / hang / failed / refused op:", ""]
        for k, v in sorted(report["examples"].items()):
            fw, op, kind = k.split("|")
            lines.append(f"- {fw} `{op}` {kind}: {v}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    try:
        main()
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
