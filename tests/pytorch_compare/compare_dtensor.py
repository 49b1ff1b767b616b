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


# ---- the ops: the same names and arguments as dispatch_cases.cc's run_op -------------------
def run_op(op, args, x):
    import torch
    import torch.nn.functional as F
    aten = torch.ops.aten
    table = {
        "add": lambda: torch.add(x[0], x[1]),
        "add_alpha": lambda: torch.add(x[0], x[1], alpha=args.get("alpha")),
        "sub": lambda: torch.sub(x[0], x[1]),
        "mul": lambda: torch.mul(x[0], x[1]),
        "div": lambda: torch.div(x[0], x[1]),
        "add_scalar": lambda: x[0] + args.get("scalar"),
        "mul_scalar": lambda: x[0] * args.get("scalar"),
        "div_scalar": lambda: x[0] / args.get("scalar"),
        "neg": lambda: torch.neg(x[0]),
        "relu": lambda: torch.relu(x[0]),
        "exp": lambda: torch.exp(x[0]),
        "tanh": lambda: torch.tanh(x[0]),
        "gelu": lambda: F.gelu(x[0]),
        "clone": lambda: x[0].clone(),
        "sum": lambda: torch.sum(x[0]),
        "sum_dim": lambda: torch.sum(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "amax": lambda: torch.amax(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "amin": lambda: torch.amin(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "mm": lambda: torch.mm(x[0], x[1]),
        "bmm": lambda: torch.bmm(x[0], x[1]),
        "matmul": lambda: torch.matmul(x[0], x[1]),
        "addmm": lambda: torch.addmm(x[0], x[1], x[2], beta=args.get("beta"), alpha=args.get("alpha")),
        "baddbmm": lambda: torch.baddbmm(x[0], x[1], x[2], beta=args.get("beta"), alpha=args.get("alpha")),
        "view": lambda: x[0].view(args.get("shape")),
        "reshape": lambda: x[0].reshape(args.get("shape")),
        "permute": lambda: x[0].permute(args.get("dims")),
        "transpose": lambda: x[0].transpose(args.get("dim0"), args.get("dim1")),
        "t": lambda: x[0].t(),
        "unsqueeze": lambda: x[0].unsqueeze(args.get("dim")),
        "squeeze": lambda: x[0].squeeze(args.get("dim")),
        "squeeze_all": lambda: x[0].squeeze(),
        "slice": lambda: aten.slice.Tensor(x[0], args.get("dim"), args.get("start"), args.get("end"),
                                           args.get("step")),
        "select": lambda: x[0].select(args.get("dim"), args.get("index")),
        "expand": lambda: x[0].expand(args.get("shape")),
        "linear": lambda: F.linear(x[0], x[1], x[2]),
        "narrow": lambda: x[0].narrow(args.get("dim"), args.get("start"), args.get("length")),
        "flatten": lambda: x[0].flatten(args.get("start_dim"), args.get("end_dim")),
        "softmax": lambda: torch.softmax(x[0], args.get("dim")),
        "log_softmax": lambda: torch.log_softmax(x[0], args.get("dim")),
        "layer_norm": lambda: F.layer_norm(x[0], args.get("normalized_shape"), eps=1e-5),
        "layer_norm_affine": lambda: F.layer_norm(x[0], args.get("normalized_shape"), x[1], x[2], eps=1e-5),
        "mean": lambda: torch.mean(x[0]),
        "mean_dim": lambda: torch.mean(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "var": lambda: torch.var(x[0], args.get("dim"), correction=args.get("correction"),
                                 keepdim=args.get("keepdim")),
        "std": lambda: torch.std(x[0], args.get("dim"), correction=args.get("correction"),
                                 keepdim=args.get("keepdim")),
        "linalg_vector_norm": lambda: torch.linalg.vector_norm(
            x[0], float(args.get("ord")), args.get("dim"), keepdim=args.get("keepdim")),
        "sigmoid": lambda: torch.sigmoid(x[0]),
        "silu": lambda: F.silu(x[0]),
        "rsqrt": lambda: torch.rsqrt(x[0]),
        "sqrt": lambda: torch.sqrt(x[0]),
        "abs": lambda: torch.abs(x[0]),
        "pow_scalar": lambda: torch.pow(x[0], args.get("exponent")),
        "log": lambda: torch.log(x[0]),
        "log1p": lambda: torch.log1p(x[0]),
        "log2": lambda: torch.log2(x[0]),
        "log10": lambda: torch.log10(x[0]),
        "exp2": lambda: torch.exp2(x[0]),
        "expm1": lambda: torch.expm1(x[0]),
        "sin": lambda: torch.sin(x[0]),
        "cos": lambda: torch.cos(x[0]),
        "tan": lambda: torch.tan(x[0]),
        "atan": lambda: torch.atan(x[0]),
        "sinh": lambda: torch.sinh(x[0]),
        "cosh": lambda: torch.cosh(x[0]),
        "asinh": lambda: torch.asinh(x[0]),
        "erf": lambda: torch.erf(x[0]),
        "erfc": lambda: torch.erfc(x[0]),
        "reciprocal": lambda: torch.reciprocal(x[0]),
        "floor": lambda: torch.floor(x[0]),
        "ceil": lambda: torch.ceil(x[0]),
        "round": lambda: torch.round(x[0]),
        "trunc": lambda: torch.trunc(x[0]),
        "sign": lambda: torch.sign(x[0]),
        "softplus": lambda: F.softplus(x[0], args.get("beta"), args.get("threshold")),
        "leaky_relu": lambda: F.leaky_relu(x[0], args.get("negative_slope")),
        "elu": lambda: F.elu(x[0], args.get("alpha")),
        "hardtanh": lambda: F.hardtanh(x[0], args.get("min_val"), args.get("max_val")),
        "mish": lambda: F.mish(x[0]),
        "hardswish": lambda: F.hardswish(x[0]),
        "hardsigmoid": lambda: F.hardsigmoid(x[0]),
        "isinf": lambda: torch.where(torch.isinf(x[0] * 1e308), x[0], x[0] * 2),
        "nan_to_num": lambda: torch.nan_to_num(torch.log(x[0]), 0.0, 7.0, -7.0),
        "sin_inplace": lambda: x[0].clone().sin_(),
        "minimum": lambda: torch.minimum(x[0], x[1]),
        "logaddexp": lambda: torch.logaddexp(x[0], x[1]),
        "atan2": lambda: torch.atan2(x[0], x[1]),
        "hypot": lambda: torch.hypot(x[0], x[1]),
        "fmod": lambda: torch.fmod(x[0], x[1]),
        "remainder": lambda: torch.remainder(x[0], x[1]),
        "div_floor": lambda: torch.div(x[0], x[1], rounding_mode="floor"),
        "pow": lambda: torch.pow(x[0], x[1]),
        "lerp": lambda: torch.lerp(x[0], x[1], args.get("weight")),
        "logsumexp": lambda: torch.logsumexp(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "all_dim": lambda: torch.sum(x[0], args.get("dim"), keepdim=args.get("keepdim")) * torch.all(
            x[0] > args.get("threshold"), dim=args.get("dim"), keepdim=args.get("keepdim")),
        "any_dim": lambda: torch.sum(x[0], args.get("dim"), keepdim=args.get("keepdim")) * torch.any(
            x[0] > args.get("threshold"), dim=args.get("dim"), keepdim=args.get("keepdim")),
        "all": lambda: torch.sum(x[0]) * torch.all(x[0] > args.get("threshold")),
        "cumsum": lambda: torch.cumsum(x[0], args.get("dim")),
        "gather": lambda: torch.gather(x[0], args.get("dim"), x[1]),
        "index_select": lambda: torch.index_select(x[0], args.get("dim"), x[1]),
        "scatter": lambda: torch.scatter(x[0], args.get("dim"), x[1], x[2]),
        "scatter_add": lambda: torch.scatter_add(x[0], args.get("dim"), x[1], x[2]),
        "scatter_value": lambda: torch.scatter(x[0], args.get("dim"), x[1], args.get("value")),
        "index": lambda: x[0][(slice(None),) * args.get("dim") + (x[1],)],
        "index_put": lambda: torch.ops.aten.index_put.default(
            x[0], [None] * args.get("dim") + [x[1]], x[2], args.get("accumulate")),
        "index2": lambda: x[0][x[1], x[2]],
        "index_put2": lambda: torch.ops.aten.index_put.default(x[0], [x[1], x[2]], x[3],
                                                               args.get("accumulate")),
        "index_mask": lambda: x[0][x[1]],
        "index_add": lambda: torch.index_add(x[0], args.get("dim"), x[1], x[2], alpha=args.get("alpha")),
        "index_copy": lambda: torch.index_copy(x[0], args.get("dim"), x[1], x[2]),
        "index_fill": lambda: torch.index_fill(x[0], args.get("dim"), x[1], args.get("value")),
        "scatter_reduce": lambda: torch.scatter_reduce(x[0], args.get("dim"), x[1], x[2], args.get("reduce"),
                                                       include_self=args.get("include_self")),
        "index_reduce": lambda: torch.index_reduce(x[0], args.get("dim"), x[1], x[2], args.get("reduce"),
                                                   include_self=args.get("include_self")),
        "sort": lambda: (lambda r: r.values + r.indices)(
            torch.sort(x[0], args.get("dim"), descending=args.get("descending"))),
        "topk": lambda: (lambda r: r.values + r.indices)(
            torch.topk(x[0], args.get("k"), args.get("dim"), largest=args.get("largest"))),
        "cumprod": lambda: torch.cumprod(x[0], args.get("dim")),
        "logcumsumexp": lambda: torch.logcumsumexp(x[0], args.get("dim")),
        "cummax": lambda: (lambda r: r.values + r.indices)(torch.cummax(x[0], args.get("dim"))),
        "kthvalue": lambda: (lambda r: r.values + r.indices)(
            torch.kthvalue(x[0], args.get("k"), args.get("dim"), keepdim=args.get("keepdim"))),
        "median_dim": lambda: (lambda r: r.values + r.indices)(
            torch.median(x[0], args.get("dim"), keepdim=args.get("keepdim"))),
        "prod": lambda: torch.prod(x[0]),
        "prod_dim": lambda: torch.prod(x[0], args.get("dim"), keepdim=args.get("keepdim")),
        "flip": lambda: torch.flip(x[0], args.get("dims")),
        "roll": lambda: torch.roll(x[0], args.get("shifts"), args.get("dims")),
        "clamp_min": lambda: torch.clamp_min(x[0], args.get("min")),
        "norm": lambda: torch.norm(x[0], args.get("p"), args.get("dim"), args.get("keepdim")),
        "dist": lambda: torch.dist(x[0], x[1], args.get("p")),
        "repeat": lambda: x[0].repeat(*args.get("repeats")),
        "constant_pad_nd": lambda: F.pad(x[0], args.get("pad"), value=args.get("value")),
        "glu": lambda: F.glu(x[0], args.get("dim")),
        "median_all": lambda: torch.median(x[0]),
        "masked_select": lambda: torch.masked_select(x[0], x[1]),
        "clamp_tensor": lambda: torch.clamp(x[0], x[1] - 1.0, x[2] + 0.5),
        "index_put_mask": lambda: (lambda c: c.index_put_((x[1],), torch.tensor(args.get("value"),
                                                                           dtype=c.dtype)))(x[0].clone()),
        "trace": lambda: torch.trace(x[0]),
        "diagonal": lambda: torch.diagonal(x[0], args.get("offset"), args.get("dim1"), args.get("dim2")),
        "diag_embed": lambda: torch.diag_embed(x[0], args.get("offset"), args.get("dim1"), args.get("dim2")),
        "cdist": lambda: torch.cdist(x[0], x[1], args.get("p")),
        "pixel_shuffle": lambda: F.pixel_shuffle(x[0], args.get("factor")),
        "embedding_bag": lambda: F.embedding_bag(x[1], x[0], x[2],
                                                 mode=["sum", "mean", "max"][args.get("mode")]),
        "conv2d": lambda: F.conv2d(x[0], x[1], x[2], args.get("stride"), args.get("padding")),
        "max_pool2d": lambda: F.max_pool2d(x[0], args.get("kernel"), args.get("stride")),
        "avg_pool2d": lambda: F.avg_pool2d(x[0], args.get("kernel"), args.get("stride")),
        "interpolate_bilinear": lambda: F.interpolate(x[0], size=args.get("size"), mode="bilinear",
                                                      align_corners=False),
        "batch_norm": lambda: F.batch_norm(x[0], None, None, x[1], x[2], training=True),
        "group_norm": lambda: F.group_norm(x[0], args.get("groups"), x[1], x[2]),
        "tril": lambda: torch.tril(x[0], args.get("diagonal")),
        "triu": lambda: torch.triu(x[0], args.get("diagonal")),
        "lgamma": lambda: torch.lgamma(x[0]),
        "digamma": lambda: torch.digamma(x[0]),
        "polygamma": lambda: torch.polygamma(args.get("n"), x[0]),
        "sinc": lambda: torch.sinc(x[0]),
        "frac": lambda: torch.frac(x[0]),
        "logit": lambda: torch.logit(x[0], args.get("eps")),
        "fmax": lambda: torch.fmax(x[0], x[1]),
        "fmin": lambda: torch.fmin(x[0], x[1]),
        "xlogy": lambda: torch.xlogy(x[0], x[1]),
        "mse_loss": lambda: F.mse_loss(x[0], x[1], reduction=args.get("reduction")),
        "smooth_l1_loss": lambda: F.smooth_l1_loss(x[0], x[1], reduction=args.get("reduction"),
                                                   beta=args.get("beta")),
        "huber_loss": lambda: F.huber_loss(x[0], x[1], reduction=args.get("reduction"),
                                           delta=args.get("delta")),
        "bce_with_logits": lambda: F.binary_cross_entropy_with_logits(
            x[0], x[1], reduction=args.get("reduction")),
        "clamp_max_tensor": lambda: torch.clamp_max(x[0], x[1]),
        "sdpa": lambda: F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=args.get("is_causal")),
        "addcmul": lambda: torch.addcmul(x[0], x[1], x[2], value=args.get("value")),
        "addcdiv": lambda: torch.addcdiv(x[0], x[1], x[2], value=args.get("value")),
        "maximum": lambda: torch.maximum(x[0], x[1]),
        "where": lambda: torch.where(x[0], x[1], x[2]),
        "masked_fill": lambda: x[0].masked_fill(x[1], args.get("value")),
        "embedding": lambda: F.embedding(x[1], x[0]),  # x[0] the table, x[1] the ids
        "add_inplace": lambda: x[0].clone().add_(x[1]),
        "mul_inplace": lambda: x[0].clone().mul_(x[1]),
        "split": lambda: x[0].split(args.get("split_size"), args.get("dim"))[args.get("index")],
        "split_with_sizes": lambda: x[0].split(args.get("split_sizes"), args.get("dim"))[args.get("index")],
        "chunk": lambda: x[0].chunk(args.get("chunks"), args.get("dim"))[args.get("index")],
        "tensor_split": lambda: x[0].tensor_split(args.get("sections"), args.get("dim"))[args.get("index")],
        "max_dim": lambda: (lambda r: r.values + r.indices)(
            torch.max(x[0], args.get("dim"), keepdim=args.get("keepdim"))),
        "min_dim": lambda: (lambda r: r.values + r.indices)(
            torch.min(x[0], args.get("dim"), keepdim=args.get("keepdim"))),
        "unbind": lambda: x[0].unbind(args.get("dim"))[args.get("index")],
        "fill_inplace": lambda: x[0].clone().fill_(args.get("value")),
        "to_float32_and_back": lambda: x[0].to(torch.float32).to(torch.float64),
    }
    if op not in table:
        raise ValueError("unknown op %r in the case file" % op)
    return table[op]()


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
