#!/usr/bin/env python3
"""The op/layout catalogue of cases.json through PyTorch 2.x DTensor and through hyper
(dispatch_cases), compared (issue 14; docs/dtensor.md "Compared with PyTorch DTensor").

    compare_dtensor.py --hyper PATH/TO/dispatch_cases [--cases cases.json] [--only SUBSTR]
                       [--table FILE] [--keep DIR]

PyTorch side: one process per rank (started with multiprocessing's "spawn": a fresh
interpreter that imports torch itself, never a fork of this one, which has imported torch; gloo
on 127.0.0.1, a free port, 20 s timeouts), one world of 2 ranks (mesh [2])
and one of 4 (meshes [4] and [2,2]); inputs are the same float64 values and Partial shares as hyper's (make_cases.py's docstring).
Cases marked "hyper_only" (RaggedShard) are not compared (hyper's gtest DispatchCatalogue.*
checks them against the single-device op). Every other case gets one verdict:
  same               both compute, same output placements, values agree
  placements differ  both compute, values agree, placements differ      (must be explained)
  hyper refuses      PyTorch computes, hyper raises                     (must be explained)
  pytorch refuses    hyper computes, PyTorch raises                     (must be explained)
  both refuse        both raise
  pytorch wrong      both compute, hyper's values equal the plain-torch oracle on the global
                     tensors, PyTorch's do not (a PyTorch DTensor bug; must be explained)
  VALUES DIFFER      hyper's values differ from the plain-torch oracle on the global tensors
                     (always a failure)
A self-check alters hyper's entry of one "same" case (a value, the placements, a refusal) and
expects those verdicts, so that a comparison that cannot fail is caught.
Exit 0 when every difference is in cases.json's "explained" list with that verdict and every
listed case still shows it; 1 otherwise; 77 (ctest SKIP_RETURN_CODE) when this python has no
torch.distributed.tensor.
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL, ATOL = 1e-7, 1e-9


def need_torch():
    try:
        import torch  # noqa: F401
        import torch.distributed.tensor  # noqa: F401
    except Exception as e:  # ImportError, or a broken install
        print("SKIP: %s cannot import torch.distributed.tensor (%s: %s); the PyTorch DTensor "
              "comparison needs PyTorch >= 2.4 in this python" % (sys.executable, type(e).__name__, e))
        sys.exit(77)


# ---- the ops: tests/pytorch_compare/ops.json, the table hyper's side reads too ------------
_OPS = None


def op_table():
    global _OPS
    if _OPS is None:
        with open(os.path.join(HERE, "ops.json")) as f:
            _OPS = json.load(f)["ops"]
    return _OPS


def inputs_named(term):
    """The number of inputs an op term names: the highest "$k" plus one."""
    if isinstance(term, str):
        return int(term[1:]) + 1 if term.startswith("$") else 0
    items = term.values() if isinstance(term, dict) else term if isinstance(term, list) else []
    return max([inputs_named(t) for t in items] + [0])


def evaluate(op, term, args, x):
    """One term of ops.json (its "comment" says the language) on PyTorch's side: ATen operators
    through torch.ops.aten, as testing_cases.h's OpTerm runs them through c10's dispatcher."""
    import torch

    def arg(name):
        if name not in args:
            raise ValueError("op %s: the case has no argument %r" % (op, name))
        return args[name]

    def ev(t):
        if isinstance(t, str):
            if t.startswith("$"):
                return x[int(t[1:])]
            return arg(t[1:]) if t.startswith("@") else t
        if isinstance(t, list):
            return [ev(e) for e in t]
        if not isinstance(t, dict):
            return t
        if "call" in t:
            name, _, overload = t["call"].partition(".")
            fn = getattr(getattr(torch.ops.aten, name), overload or "default")
            r = fn(*[ev(a) for a in t.get("args", [])], **{k: ev(v) for k, v in t.get("kwargs", {}).items()})
            if "output" not in t:
                return r
            which = ev(t["output"])
            if which == "sum":
                total = r[0]
                for o in r[1:]:
                    total = total + o
                return total
            return r[which]
        if "dtype" in t:
            return {"float32": torch.float32, "float64": torch.float64}[t["dtype"]]
        if "float" in t:
            return float(ev(t["float"]))
        if "enum" in t:
            return t["of"].index(ev(t["enum"]))
        if "index_at" in t:
            return [None] * ev(t["index_at"]) + [ev(t["index"])]
        raise ValueError("op %s: unknown term %r" % (op, t))

    return ev(term)


def run_op(op, args, x):
    """The op of a case on tensors (DTensors, or the plain global tensors for the oracle), x in
    the order of the case's inputs."""
    table = op_table()
    if op not in table:
        raise ValueError("unknown op %r in the case file" % op)
    n = inputs_named(table[op])
    if len(x) != n:
        raise ValueError("op %s takes %d inputs, got %d" % (op, n, len(x)))
    return evaluate(op, table[op], args, x)


def global_value(spec):
    """testing_dispatch.h's global_a ("a") / global_b ("b"); "mask": a > 0 (bool); a list of
    ints: those values (int64); testing_cases.h's case_global."""
    import torch
    shape = spec["shape"]
    n = 1
    for s in shape:
        n *= s
    if isinstance(spec["values"], list):
        return torch.tensor(spec["values"], dtype=torch.int64).reshape(shape)
    if spec["values"] == "mask":
        return global_value(dict(spec, values="a")) > 0
    if spec["values"] == "a":
        return torch.linspace(-2.0, 3.0, max(n, 1), dtype=torch.float64)[:n].reshape(shape)
    return (torch.cos(torch.arange(n, dtype=torch.float64)) + 1.5).reshape(shape)


def placement(text):
    from torch.distributed.tensor import Partial, Replicate, Shard
    if text == "R":
        return Replicate()
    if text.startswith("S(") and text.endswith(")"):
        return Shard(int(text[2:-1]))
    if text.startswith("P(") and text.endswith(")"):
        return Partial(text[2:-1])
    raise ValueError("unknown placement %r" % text)


def make(glob, mesh, texts):
    """testing_dispatch.h's make: Partial mesh dims hold unequal shares."""
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
    pls = [placement(t) for t in texts]
    normal = [Replicate() if t.startswith("P(") else p for t, p in zip(texts, pls)]
    d = distribute_tensor(glob, mesh, normal, src_data_rank=None)  # local slices, no collective
    if normal == pls:
        return d
    coord = mesh.get_coordinate()
    w, shift = 1.0, 0.0
    for m, t in enumerate(texts):
        if not t.startswith("P("):
            continue
        op = t[2:-1]
        if op in ("max", "min"):
            shift += (-1.0 if op == "max" else 1.0) * coord[m]
            continue
        n = float(mesh.size(m))
        w *= (coord[m] + 1) / (n * (n + 1) / 2)
        if op == "avg":
            w *= n
    return DTensor.from_local(d.to_local() * w + shift, mesh, pls, run_check=False,
                              shape=glob.shape, stride=glob.stride())


def worker(rank, world, port, cases_path, out_path, only):
    """One rank of the PyTorch side: every case of this world size; rank 0 writes the results."""
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor
    torch.set_num_threads(1)  # tiny tensors; 6 ranks share 2 cores
    # PyTorch's advice about sequential all_gathers on the 2x2 mesh: not what is compared.
    logging.getLogger("torch.distributed.tensor").setLevel(logging.ERROR)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    cases = [c for c in load(cases_path)["cases"]
             if mesh_size(c["mesh"]) == world and only in c["id"] and not c.get("hyper_only")]
    meshes = {}
    results = []
    for c in cases:
        key = tuple(c["mesh"])
        if key not in meshes:
            meshes[key] = DeviceMesh("cpu", torch.arange(world).reshape(key))
        mesh = meshes[key]
        r = {"id": c["id"]}
        # The op's input redistributions run on every rank alike; its local computation may
        # fail on some ranks only (an empty shard): the ranks agree on that before the
        # full_tensor collective, so that no rank waits for a peer that raised.
        err = None
        try:
            x = [global_value(i) if i.get("plain") else make(global_value(i), mesh, i["placements"])
                 for i in c["inputs"]]
            y = run_op(c["op"], c.get("args", {}), x)
            if not isinstance(y, DTensor):
                raise TypeError("the op returned a %s, not a DTensor" % type(y).__name__)
        except Exception as e:
            err = (type(e).__name__, str(e).strip().split("\n")[0][:400])
        flag = torch.tensor([0 if err is None else 1])
        dist.all_reduce(flag)
        failed = []
        if flag.item() > 0:  # the messages only when some rank failed
            errs = [None] * world
            dist.all_gather_object(errs, err)
            failed = [k for k, e in enumerate(errs) if e is not None]
        if failed:
            t, m = errs[failed[0]]
            if len(failed) < world:
                m = "on rank(s) %s only: %s" % (failed, m)
            r.update(status="error", type=t, message=m)
        else:
            try:
                full = y.full_tensor().contiguous()
                r.update(status="ok", placements=[str(p) for p in y.placements],
                         shape=list(full.shape), values=full.reshape(-1).tolist())
            except Exception as e:
                r.update(status="error", type=type(e).__name__,
                         message="full_tensor: " + str(e).strip().split("\n")[0][:400])
        results.append(r)
    if rank == 0:
        with open(out_path, "w") as f:
            json.dump({"cases": results}, f)
    dist.barrier()
    dist.destroy_process_group()


def mesh_size(m):
    n = 1
    for s in m:
        n *= s
    return n


def load(path):
    with open(path) as f:
        return json.load(f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_torch_world(world, cases_path, out_path, only):
    """The ranks as spawned processes (a fresh interpreter each, which imports torch and starts
    gloo itself). Not forked: this process has imported torch, and a fork after LibTorch has
    started threads may deadlock the child (house style: fork + exec only); each rank pays its
    own `import torch` instead."""
    import multiprocessing
    port = free_port()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, world, port, cases_path, out_path, only))
             for r in range(world)]
    for p in procs:
        p.start()
    return procs


def fmt_values(v):
    """A short text of a (small) tensor's values."""
    flat = v.reshape(-1).tolist()
    text = ", ".join("%.6g" % x for x in flat[:6])
    return "[%s%s]" % (text, ", ..." if len(flat) > 6 else "")


def verdict(c, h, p):
    """(verdict, detail) of one case from hyper's entry h and PyTorch's p."""
    import torch
    if h is None or p is None:
        return "MISSING", "no result from %s" % ("hyper" if h is None else "PyTorch")
    hok, pok = h["status"] == "ok", p["status"] == "ok"
    if not hok and not pok:
        return "both refuse", "hyper %s; PyTorch %s" % (h["type"], p["type"])
    if not hok:
        return "hyper refuses", "%s: %s" % (h["type"], h["message"][:300])
    if not pok:
        return "pytorch refuses", "%s: %s" % (p["type"], p["message"][:300])
    # The oracle: the op on the plain global tensors.
    want = run_op(c["op"], c.get("args", {}), [global_value(i) for i in c["inputs"]])
    hv = torch.tensor(h["values"], dtype=torch.float64).reshape(h["shape"])
    pv = torch.tensor(p["values"], dtype=torch.float64).reshape(p["shape"])
    def wrong(v):
        return v.shape != want.shape or not torch.allclose(v, want, rtol=RTOL, atol=ATOL)
    if wrong(hv):
        return "VALUES DIFFER", "hyper's full tensor differs from the op on the global tensors"
    if wrong(pv):
        return "pytorch wrong", "PyTorch's full tensor %s differs from the op on the global " \
            "tensors %s (hyper's equals it)" % (fmt_values(pv), fmt_values(want))
    if h["placements"] != p["placements"]:
        return "placements differ", "hyper [%s], PyTorch [%s]" % (",".join(h["placements"]),
                                                                  ",".join(p["placements"]))
    return "same", "[%s]" % ",".join(h["placements"])


def self_check(cases, hres, pres, rows):
    """The comparison itself can fail: the first case both sides computed alike, with hyper's
    entry altered (one value, the placements, a refusal), must get the failing verdicts."""
    import copy
    same = [c for c, r in zip(cases, rows) if r[1] == "same" and hres[c["id"]]["status"] == "ok"
            and hres[c["id"]]["values"]]
    if not same:
        return []
    c = same[0]
    h = hres[c["id"]]
    bad_value = copy.deepcopy(h)
    bad_value["values"][0] += 1e-3
    bad_placements = copy.deepcopy(h)
    bad_placements["placements"] = ["R" if p != "R" else "P(sum)" for p in h["placements"]]
    refused = dict(h, status="error", type="NotImplementedError", message="self-check")
    got = [verdict(c, x, pres[c["id"]])[0] for x in (bad_value, bad_placements, refused)]
    want = ["VALUES DIFFER", "placements differ", "hyper refuses"]
    if got != want:
        return ["self-check on %s: altered hyper results gave %s, expected %s" % (c["id"], got, want)]
    return []


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hyper", required=True, help="the dispatch_cases program")
    ap.add_argument("--cases", default=os.path.join(HERE, "cases.json"))
    ap.add_argument("--only", default="", help="only the cases whose id contains this text")
    ap.add_argument("--table", help="also write the table (Markdown) to this file")
    ap.add_argument("--keep", help="write both sides' raw results into this folder")
    a = ap.parse_args()
    need_torch()
    import torch
    spec = load(a.cases)
    # "hyper_only" cases (RaggedShard: PyTorch DTensor has no such placement) are checked by
    # hyper's gtest DispatchCatalogue.* only.
    hyper_only = [c for c in spec["cases"] if a.only in c["id"] and c.get("hyper_only")]
    cases = [c for c in spec["cases"] if a.only in c["id"] and not c.get("hyper_only")]
    t0 = time.time()
    tmp = a.keep or tempfile.mkdtemp(prefix="pytorch_compare.")
    os.makedirs(tmp, exist_ok=True)
    hyper_out = os.path.join(tmp, "hyper.json")
    cmd = [a.hyper, a.cases, hyper_out] + (["--only", a.only] if a.only else [])
    worlds = sorted({mesh_size(c["mesh"]) for c in cases})
    procs = {w: start_torch_world(w, a.cases, os.path.join(tmp, "torch%d.json" % w), a.only) for w in worlds}
    hyper = subprocess.Popen(cmd)
    failed = []
    # Every world and hyper's program must finish by then (a hang is a failure). Most of the
    # time is PyTorch's own worlds (2773 cases: 263 s alone on the 2-core machine, hyper's
    # program 32 s of it); under ctest -j2 beside another test it takes up to twice that
    # (423 s at 2709 cases), so the margin is for a loaded 2-core machine.
    deadline = time.time() + 840
    for w, ps in procs.items():
        for r, pr in enumerate(ps):
            pr.join(timeout=max(1, deadline - time.time()))
            rc = pr.exitcode
            if rc is None:
                pr.kill()
                rc = "timeout"
            if rc != 0:
                failed.append("PyTorch world %d rank %d: exit %s" % (w, r, rc))
    try:
        hrc = hyper.wait(timeout=max(1, deadline - time.time()))
    except subprocess.TimeoutExpired:
        hyper.kill()
        hrc = "timeout"
    if hrc != 0:
        failed.append("%s: exit %s" % (" ".join(cmd), hrc))
    if failed:
        print("FAIL: " + "; ".join(failed) + " (outputs so far in %s)" % tmp)
        return 1
    hres = {r["id"]: r for r in load(hyper_out)["cases"]}
    pres = {}
    for w in worlds:
        pres.update({r["id"]: r for r in load(os.path.join(tmp, "torch%d.json" % w))["cases"]})
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)

    explained = {}
    problems = []
    for group in spec.get("explained", []):
        for cid in group["ids"]:
            if cid in explained:
                problems.append("explained twice: %s" % cid)
            explained[cid] = group
    ids = {c["id"] for c in spec["cases"]}
    for cid in explained:
        if cid not in ids:
            problems.append("explained but not a case: %s" % cid)

    rows = []
    counts = {}
    for c in cases:
        v, detail = verdict(c, hres.get(c["id"]), pres.get(c["id"]))
        counts[v] = counts.get(v, 0) + 1
        note = ""
        e = explained.get(c["id"])
        if v in ("same", "both refuse"):
            if e is not None:
                problems.append("%s: listed as '%s' but is '%s' now (drop it from 'explained')"
                                % (c["id"], e["verdict"], v))
        elif v in ("VALUES DIFFER", "MISSING"):
            problems.append("%s: %s: %s" % (c["id"], v, detail))
        elif e is None:
            problems.append("%s: %s, not explained: %s" % (c["id"], v, detail))
        elif e["verdict"] != v:
            problems.append("%s: explained as '%s' but is '%s': %s" % (c["id"], e["verdict"], v, detail))
        else:
            note = e["key"]
        rows.append((c["id"], v, detail, note))

    problems += self_check(cases, hres, pres, rows)

    w = max(len(r[0]) for r in rows) if rows else 10
    lines = ["| case | verdict | detail | explained |", "|---|---|---|---|"]
    for cid, v, detail, note in rows:
        print("%-*s  %-17s  %s%s" % (w, cid, v, detail[:150], ("  [" + note + "]") if note else ""))
        lines.append("| `%s` | %s | %s | %s |" % (cid, v, detail.replace("|", "/")[:200], note))
    if a.table:
        with open(a.table, "w") as f:
            f.write("\n".join(lines) + "\n")
    print("\n%d cases in %.1f s (PyTorch %s; %d hyper-only cases not compared): %s" % (
        len(rows), time.time() - t0, __import__("torch").__version__, len(hyper_only),
        ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    if problems:
        print("\nFAIL: %d problem(s):" % len(problems))
        for p in problems:
            print("  " + p)
        return 1
    print("OK: every difference is explained in %s" % a.cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
