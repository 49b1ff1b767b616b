"""PyTorch's op corpus through hyper's DTensor and PyTorch's, side by side in one run.

Every OpInfo of the torch wheel's op_db that runs on CPU in float32 (deterministic ones: the
random draws, the ops OpInfo runs under a fixed torch seed and uninitialised factories are
left out, as is any sample that draws from torch's RNG) gives its own sample inputs (OpInfo's
sizes, uneven over the ranks). Each sample runs once per layout combination of its tensor
arguments on a 1-D mesh over all ranks (everything Replicate; each tensor argument alone
Shard(d) for each of its dims; every argument Shard(0)), through hyper DTensors and through
PyTorch DTensors, and the outputs' full tensors are compared with the plain op's. Each case is
one of:
  correct  every rank's outputs equal the plain op's (rtol 1e-4, atol 1e-4; NaN equal NaN)
  refused  every rank raised NotImplementedError or ValueError (a decided refusal)
  failed   every rank raised another exception
  wrong    no exception, and some rank's output differs
  hang     a collective timed out, or the ranks disagreed (some raised, others did not: the
           ranks out of step), after which the framework's mesh is made anew
Only values are compared (not gradients yet).

    PYTHONPATH=build/python .venv/bin/torchrun --standalone --nproc-per-node 4 \\
        python/tests/opinfo_corpus.py --table docs/opinfo_corpus.md [--ops 'add,mul*'] \\
        [--samples 3] [--timeout 10] [--json out.json]
"""

import argparse
import datetime
import fnmatch
import json
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


def combos(sample, slots):
    """Placement choices per slot: ("R",) or ("S", d)."""
    dims = [get(sample, s).dim() for s in slots]
    out = [tuple(("R",) for _ in slots)]
    for i, nd in enumerate(dims):
        for d in range(nd):
            c = [("R",)] * len(slots)
            c[i] = ("S", d)
            out.append(tuple(c))
    if len(slots) > 1 and all(nd > 0 for nd in dims):
        out.append(tuple(("S", 0) for _ in slots))
    return out


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

    def __init__(self, name, timeout):
        self.name, self.timeout, self.generation = name, timeout, 0
        self.new_mesh()

    def new_mesh(self):
        world = dist.get_world_size()
        if self.name == "hyper":
            store = dist.distributed_c10d._get_default_store()
            w = hyper._C.make_world(store, f"hyper/corpus{self.generation}", dist.get_rank(),
                                    world, float(self.timeout))
            self.mesh = hyper._C.init_device_mesh(w, "cpu", [world], [])
        else:
            from torch.distributed.device_mesh import DeviceMesh
            group = dist.new_group(backend="gloo",
                                   timeout=datetime.timedelta(seconds=self.timeout))
            self.mesh = DeviceMesh.from_group(group, "cpu")
        self.generation += 1

    def convert(self, t, choice):
        if self.name == "hyper":
            p = hyper.Replicate() if choice[0] == "R" else hyper.Shard(choice[1])
            return hyper.distribute_tensor(t, self.mesh, (p,))
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        return distribute_tensor(t, self.mesh, [Replicate() if choice[0] == "R" else Shard(choice[1])])

    def full(self, x):
        if self.name == "hyper":
            return x.full_tensor() if hyper.is_dtensor(x) else x
        from torch.distributed.tensor import DTensor
        return x.full_tensor() if isinstance(x, DTensor) else x


def run_case(fw, op, sample, choice, slots, want):
    """This rank's outcome: ("ok"|"wrong"|"refused"|"failed"|"timeout", detail)."""
    placement = dict(zip(slots, choice))
    try:
        out = call(op, sample, lambda slot, t: fw.convert(t, placement[slot]))
        got = [fw.full(o) for o in flatten(out)]
        if len(got) != len(want) or not all(same(g, w) for g, w in zip(got, want)):
            return "wrong", ""
        return "ok", ""
    except (NotImplementedError, ValueError) as e:
        return "refused", f"{type(e).__name__}: {str(e)[:200]}"
    except Exception as e:  # noqa: BLE001
        text = f"{type(e).__name__}: {str(e)[:200]}"
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
    ap.add_argument("--json")
    ap.add_argument("--table")
    ap.add_argument("--progress", action="store_true", help="rank 0 names each op as it starts")
    args = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    from torch.testing._internal.common_methods_invocations import op_db

    rank, world = dist.get_rank(), dist.get_world_size()
    control = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=600))
    fws = {name: Framework(name, args.timeout) for name in ("hyper", "torch")}
    patterns = args.ops.split(",")
    ops = [o for o in op_db if torch.float32 in o.supported_dtypes("cpu") and deterministic(o)
           and any(fnmatch.fnmatchcase(o.name, p) for p in patterns)]
    rows = {}
    examples = {}
    t0 = time.time()
    for index, op in enumerate(ops):
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
            for choice in combos(sample, slots):
                for name, fw in fws.items():
                    mine = run_case(fw, op, sample, choice, slots, want)
                    everyone = [None] * world
                    dist.all_gather_object(everyone, mine, group=control)
                    kind = decide(everyone)
                    counts[name][kind] += 1
                    if kind in ("wrong", "hang", "failed"):
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
        report = {"world": world, "ops": len(rows), "seconds": round(elapsed, 1),
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
        f"Generated by `python/tests/opinfo_corpus.py` on {report['world']} ranks (1-D mesh, "
        f"Gloo, CPU, float32), up to {args.samples} OpInfo samples per op, "
        f"{report['ops']} ops, {report['seconds']} s. Each op's verdict: `correct` (every "
        "layout case equal to the plain op), `partly` (some cases correct, the others "
        "refused or failed), `refused`, `failed`, `wrong` (a value differed), `hang` (a "
        "collective timed out or the ranks got out of step), `none` (no usable sample).",
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
        lines += ["", "First example of each wrong / hang / failed op:", ""]
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
