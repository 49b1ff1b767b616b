"""The multi-rank cases of the pytest suite, run on every rank by conftest.launch (torchrun).
Each case raises on a wrong value; its outcome ("ok" or the traceback) is written per rank to
$HYPER_TEST_OUT/<rank>.json. Values are checked against the single-device computation on the
same global tensors (every rank builds them from the same seed)."""

import json
import os
import sys
import traceback

import torch
import torch.distributed as dist

import hyper
from expect import expect_raises  # noqa: F401  (fsdp_ranks imports it from here too)
from hyper import DTensor, Partial, RaggedShard, Replicate, Shard, distribute_tensor

TIMEOUT = 30  # seconds: a hung peer fails the case instead of the job


def world_mesh():
    return hyper.init_device_mesh("cpu", (dist.get_world_size(),), timeout=TIMEOUT)


def case_seed_section5():
    """The seed's section-5 calls, unchanged but for the import name, with section 3.3's
    intervals (2 ranks: rank 0 holds flat [0, 64), rank 1 [64, 192))."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = world_mesh()
    global_tensor = torch.arange(192, dtype=torch.float32).reshape(6, 4, 8)
    flat = global_tensor.reshape(-1)
    # 5.1
    placement = RaggedShard(dims=(0, 1), local_units=(1, 2) if world == 2 else (1,) * world)
    assert placement.dims == (0, 1)
    if world != 2:
        return
    intervals = {0: (0, 64), 1: (64, 192)}
    lo, hi = intervals[rank]
    # 5.2
    dt = distribute_tensor(global_tensor, mesh, (RaggedShard((0, 1), (1, 2)),), src_data_rank=0)
    assert dt.to_local().shape == (hi - lo,), dt.to_local().shape
    assert torch.equal(dt.to_local(), flat[lo:hi])
    assert dt.shape == (6, 4, 8) and dt.placements == (RaggedShard((0, 1), (1, 2)),)
    # src_data_rank=None: every rank slices its part locally.
    local_only = distribute_tensor(global_tensor, mesh, (RaggedShard((0, 1), (1, 2)),))
    assert torch.equal(local_only.to_local(), flat[lo:hi])
    # Only rank 0's values are read with src_data_rank=0.
    noise = global_tensor if rank == 0 else torch.full_like(global_tensor, -1.0)
    scattered = distribute_tensor(noise, mesh, (RaggedShard((0, 1), (1, 2)),), src_data_rank=0)
    assert torch.equal(scattered.to_local(), flat[lo:hi])
    # 5.3
    local_flat = flat[lo:hi].clone()
    dt = DTensor.from_local(
        local_flat,
        mesh,
        (RaggedShard((0, 1), (1, 2)),),
        shape=(6, 4, 8),
    )
    # 5.4
    full = dt.full_tensor()
    assert torch.equal(full, global_tensor)
    changed = dt.redistribute(
        mesh,
        (RaggedShard((0, 1), (2, 1)),),
    )
    lo2, hi2 = {0: (0, 128), 1: (128, 192)}[rank]
    assert torch.equal(changed.to_local(), flat[lo2:hi2])
    replicated = dt.redistribute(mesh, (Replicate(),))
    assert torch.equal(replicated.to_local(), global_tensor)
    sharded = dt.redistribute(mesh, (Shard(0),))
    assert torch.equal(sharded.to_local(), global_tensor[3 * rank:3 * rank + 3])
    for t in (changed, replicated, sharded):
        assert torch.equal(t.full_tensor(), global_tensor)


def case_refusals_section_9_3():
    """Every refusal of the seed's section 9.3 as a Python exception, on every rank alike."""
    world = dist.get_world_size()
    mesh = world_mesh()
    units = tuple(range(1, world + 1))
    # Several RaggedShard placements; a RaggedShard beside a Partial (a 2-D mesh; beside a
    # Shard it splits the Shard box, docs/placements.md).
    mesh2 = hyper.init_device_mesh("cpu", (world, 1), timeout=TIMEOUT)
    g = torch.arange(96.0 * world).reshape(4 * world, 3, 8)
    expect_raises(ValueError, lambda: distribute_tensor(
        g, mesh2, (RaggedShard((0,), units), RaggedShard((0,), (1,)))), "RaggedShard")
    expect_raises(ValueError, lambda: distribute_tensor(
        g, mesh2, (RaggedShard((0,), units), Partial())),
        "beside a RaggedShard every other mesh dim must be Replicate or Shard")
    # Dims not a prefix.
    expect_raises(ValueError, lambda: RaggedShard((1,), units), "prefix")
    # Prefix cells not divisible by the total units.
    cells = sum(units) * 2 + 1
    expect_raises(ValueError, lambda: distribute_tensor(
        torch.zeros(cells, 2), mesh, (RaggedShard((0,), units),)), "divisible")
    # local_units of another length than the mesh dim.
    expect_raises(ValueError, lambda: distribute_tensor(
        g, mesh, (RaggedShard((0,), units + (1,)),)), "units")
    # from_local: no global shape; not 1-D; not contiguous; numel not the rank's interval.
    rs = (RaggedShard((0, 1), units),)
    shape = (sum(units) * 2, 4, 8)
    n = dict(zip(range(world), units))[dist.get_rank()] * 64
    expect_raises(ValueError, lambda: DTensor.from_local(torch.zeros(n), mesh, rs), "shape")
    expect_raises(ValueError, lambda: DTensor.from_local(torch.zeros(n // 8, 8), mesh, rs,
                                                         shape=shape), "1-D")
    expect_raises(ValueError, lambda: DTensor.from_local(torch.zeros(2 * n)[::2], mesh, rs,
                                                         shape=shape), "contiguous")
    expect_raises(ValueError, lambda: DTensor.from_local(torch.zeros(n - 1), mesh, rs,
                                                         shape=shape), "does not match")
    # An op without a rule for RaggedShard, through torch's own ops.
    dt = distribute_tensor(torch.arange(float(shape[0] * 32)).reshape(shape), mesh, rs)
    expect_raises(NotImplementedError, lambda: dt.sum(0), "RaggedShard")
    expect_raises(NotImplementedError, lambda: torch.matmul(dt, torch.ones(8, 2)), "RaggedShard")
    # A bad placement value.
    expect_raises(ValueError, lambda: Partial("prod"), "prod")


def case_ops_and_autograd():
    """torch ops on DTensors run hyper's rules: values and gradients equal one device's."""
    mesh = world_mesh()
    gen = torch.Generator().manual_seed(7)
    w = torch.randn(8, 6, generator=gen, dtype=torch.float64, requires_grad=True)
    x = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    b = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    dw = distribute_tensor(w, mesh, (Shard(0),))
    y = torch.relu(dw @ x) * 2 + distribute_tensor(b, mesh, (Replicate(),))
    assert isinstance(y, hyper.DTensor) and isinstance(y, torch.Tensor)
    assert y.placements == (Shard(0),), y.placements
    loss = y.full_tensor().pow(2).sum()
    loss.backward()
    w1 = w.detach().clone().requires_grad_()
    ref = (torch.relu(w1 @ x) * 2 + b).pow(2).sum()
    ref.backward()
    torch.testing.assert_close(loss.detach(), ref.detach())
    torch.testing.assert_close(w.grad, w1.grad)
    # from_local with a local that requires grad gets its gradient from ops on the DTensor.
    rank, world = dist.get_rank(), dist.get_world_size()
    rows = torch.arange(4.0 * world, dtype=torch.float64).reshape(world, 4)
    local = rows[rank:rank + 1].clone().requires_grad_()
    dt = DTensor.from_local(local, mesh, (Shard(0),))
    (dt * dt).sum().full_tensor().backward()
    torch.testing.assert_close(local.grad, 2 * rows[rank:rank + 1])
    # A Partial from a contraction over a sharded dim, reduced by full_tensor.
    a = torch.randn(4, 6 * world, generator=gen, dtype=torch.float64)
    c = torch.randn(6 * world, 3, generator=gen, dtype=torch.float64)
    p = distribute_tensor(a, mesh, (Shard(1),)) @ distribute_tensor(c, mesh, (Shard(0),))
    assert p.placements == (Partial(),), p.placements
    torch.testing.assert_close(p.full_tensor(), a @ c)


def case_async_redistribute():
    """redistribute(async_op=True) returns a pending DTensor; its first read waits."""
    mesh = world_mesh()
    world = dist.get_world_size()
    g = torch.arange(24.0 * world).reshape(4 * world, 6)
    dt = distribute_tensor(g, mesh, (Shard(0),))
    r = dt.redistribute(mesh, (Replicate(),), async_op=True)
    assert isinstance(r, hyper.DTensor) and r.placements == (Replicate(),)
    out = torch.exp(r) + 1  # the first read waits
    assert not r.is_pending
    torch.testing.assert_close(out.to_local(), torch.exp(g) + 1)
    r2 = dt.redistribute(mesh, (Replicate(),), async_op=True).wait()
    assert not r2.is_pending
    torch.testing.assert_close(r2.to_local(), g)


def case_python_object():
    """The DTensor API on DTensors only; repr without communicating; the global shape."""
    mesh = world_mesh()
    world = dist.get_world_size()
    dt = distribute_tensor(torch.arange(6.0 * world).reshape(2 * world, 3), mesh, (Shard(0),))
    plain = torch.zeros(3)
    assert not isinstance(plain, hyper.DTensor) and not hyper.is_dtensor(plain)
    for name in ("placements", "device_mesh", "to_local", "full_tensor", "redistribute"):
        assert hasattr(dt, name) and not hasattr(plain, name), name
    assert dt.shape == (2 * world, 3) and dt.to_local().shape == (2, 3)
    assert dt.device_mesh == mesh and dt.device_mesh.shape == [world]
    text = repr(dt)
    assert text.startswith("DTensor(local_tensor=tensor(") and "Shard(dim=0)" in text, text
    assert repr(plain) == "tensor([0., 0., 0.])"
    expect_raises(TypeError, lambda: DTensor(), "from_local")
    expect_raises(TypeError, lambda: distribute_tensor(plain, mesh, Shard(0)), "sequence")
    expect_raises(TypeError, lambda: distribute_tensor(plain, mesh, ("S",)), "not a placement")
    # torch.compile cannot trace a hyper DTensor, and says so; plain tensors still compile.
    compiled = torch.compile(lambda t: (t * 2).relu(), backend="eager")
    try:
        compiled(dt)
    except Exception as e:  # noqa: BLE001  (dynamo wraps the NotImplementedError)
        chain = [e, e.__cause__]
        assert any(isinstance(c, NotImplementedError) for c in chain) or \
            "NotImplementedError" in str(e), repr(e)
        assert "torch.compile" in str(e) and "cannot trace a hyper DTensor" in str(e), str(e)
    else:
        raise AssertionError("torch.compile of a hyper DTensor did not raise")
    torch._dynamo.reset()
    assert torch.equal(compiled(torch.tensor([-1.0, 2.0])), torch.tensor([0.0, 4.0]))


def case_parameter_and_optimizer():
    """nn.Parameter(dt) stays a DTensor; torch.optim (SGD with momentum, Adam, AdamW, the
    for-loop and the foreach paths) after clip_grad_norm_ (both paths) steps it as one device
    steps the full parameter; a row-sharded and a replicated parameter together."""
    mesh = world_mesh()
    world = dist.get_world_size()
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(2 * world + 1, 5, generator=gen, dtype=torch.float64)  # uneven rows
    b = torch.randn(3, generator=gen, dtype=torch.float64)
    x = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    optimizers = []
    for foreach in (False, True):
        optimizers += [
            (f"SGD foreach={foreach}",
             lambda ps, f=foreach: torch.optim.SGD(ps, lr=0.1, momentum=0.9, foreach=f)),
            (f"Adam foreach={foreach}",
             lambda ps, f=foreach: torch.optim.Adam(ps, lr=0.01, foreach=f)),
            (f"AdamW amsgrad foreach={foreach}",
             lambda ps, f=foreach: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, foreach=f)),
        ]
    for name, make_opt in optimizers:
        for clip_foreach in (False, True):
            what = f"{name}, clip_grad_norm_ foreach={clip_foreach}"
            p = torch.nn.Parameter(distribute_tensor(w, mesh, (Shard(0),)))
            q = torch.nn.Parameter(distribute_tensor(b, mesh, (Replicate(),)))
            assert isinstance(p, torch.nn.Parameter) and isinstance(p, hyper.DTensor)
            assert p.placements == (Shard(0),)
            ref, ref_q = torch.nn.Parameter(w.clone()), torch.nn.Parameter(b.clone())
            opt, ref_opt = make_opt([p, q]), make_opt([ref, ref_q])
            for _ in range(3):
                opt.zero_grad()
                ref_opt.zero_grad()
                (torch.tanh(p @ x) + q).full_tensor().pow(2).sum().backward()
                (torch.tanh(ref @ x) + ref_q).pow(2).sum().backward()
                assert isinstance(p.grad, hyper.DTensor) and p.grad.placements == (Shard(0),)
                norm = torch.nn.utils.clip_grad_norm_([p, q], 0.5, foreach=clip_foreach)
                want = torch.nn.utils.clip_grad_norm_([ref, ref_q], 0.5, foreach=clip_foreach)
                got = norm.full_tensor() if hyper.is_dtensor(norm) else norm
                torch.testing.assert_close(got, want, msg=what)
                opt.step()
                ref_opt.step()
            torch.testing.assert_close(p.full_tensor(), ref.detach(), msg=what)
            torch.testing.assert_close(q.full_tensor(), ref_q.detach(), msg=what)


def case_pickle_save_deepcopy():
    """pickle, torch.save / torch.load (weights_only) and copy.deepcopy keep this rank's local
    tensor and the layout; the copies are independent of the original."""
    import copy
    import io
    import pickle

    mesh = world_mesh()
    world = dist.get_world_size()
    rows = world * (world + 1)  # divisible by the world and by the ragged units' sum
    g = torch.arange(3.0 * rows).reshape(rows, 3)
    rs = RaggedShard((0,), tuple(range(1, world + 1)))
    for dt in (distribute_tensor(g, mesh, (Shard(0),)), distribute_tensor(g, mesh, (rs,)),
               distribute_tensor(g, mesh, (Replicate(),)).requires_grad_()):
        buf = io.BytesIO()
        torch.save({"w": dt}, buf)
        buf.seek(0)
        copies = [pickle.loads(pickle.dumps(dt)), torch.load(buf)["w"], copy.deepcopy(dt)]
        for c in copies:
            assert isinstance(c, hyper.DTensor) and c.placements == dt.placements
            assert c.shape == dt.shape and c.requires_grad == dt.requires_grad
            assert c.device_mesh == mesh
            assert torch.equal(c.to_local(), dt.to_local())
            with torch.no_grad():
                c.to_local().add_(1)  # the copy's storage is its own
        assert torch.equal(dt.full_tensor(), g)
    p = torch.nn.Parameter(distribute_tensor(g, mesh, (Shard(0),)))
    q = pickle.loads(pickle.dumps(p))
    assert isinstance(q, torch.nn.Parameter) and isinstance(q, hyper.DTensor)
    torch.testing.assert_close(q.full_tensor(), g)
    # No mesh of that shape in the process: a clear ValueError.
    other = hyper.init_device_mesh("cpu", (world, 1), timeout=TIMEOUT)
    data = pickle.dumps(distribute_tensor(g, other, (Shard(0), Replicate())))
    live = list(hyper.mesh._live_meshes)
    hyper.mesh._live_meshes[:] = [m for m in live if list(m.shape) != [world, 1]]
    try:
        expect_raises(ValueError, lambda: pickle.loads(data), f"no DeviceMesh('cpu', [{world}, 1]")
    finally:
        hyper.mesh._live_meshes[:] = live


def checkpoint_globals():
    """The tensors the checkpoint cases save and expect (the same on any world size)."""
    return {"w": torch.arange(48.0).reshape(12, 4), "flat": torch.arange(96.0).reshape(6, 4, 4),
            "b": torch.linspace(0, 1, 5, dtype=torch.float64)}


def case_checkpoint_save():
    """hyper.dcp.save and async_save of DTensors (Shard, RaggedShard), a plain tensor and
    nested values to $HYPER_TEST_CKPT (and its _async twin)."""
    mesh = world_mesh()
    world = dist.get_world_size()
    g = checkpoint_globals()
    sd = {"model": {"w": distribute_tensor(g["w"], mesh, (Shard(0),)),
                    "flat": distribute_tensor(g["flat"], mesh,
                                              (RaggedShard((0,), (1, 2) if world == 2 else
                                                           (world - 1,) + (1,) * (world - 1)),))},
          "b": g["b"], "step": 12, "opt": {"lr": 0.25, "name": "adamw", "amsgrad": True}}
    hyper.dcp.save(sd, os.environ["HYPER_TEST_CKPT"])
    handle = hyper.dcp.async_save(sd, os.environ["HYPER_TEST_CKPT"] + "_async")
    handle.wait()
    assert handle.done()
    # A value of another type: ValueError naming it, before anything is written.
    expect_raises(ValueError, lambda: hyper.dcp.save({"x": [1, 2]}, os.environ["HYPER_TEST_CKPT"]
                                                     + "_bad"), "'x' is a list")


def case_checkpoint_load():
    """The checkpoint of case_checkpoint_save (saved on another number of ranks) loaded in
    place into other layouts; errors name what does not match."""
    mesh = world_mesh()
    g = checkpoint_globals()
    for d in (os.environ["HYPER_TEST_CKPT"], os.environ["HYPER_TEST_CKPT"] + "_async"):
        w = distribute_tensor(torch.zeros(12, 4), mesh, (Shard(1),))
        w_local = w.to_local()
        sd = {"model": {"w": w, "flat": distribute_tensor(torch.zeros(6, 4, 4), mesh, (Replicate(),))},
              "b": torch.zeros(5, dtype=torch.float64), "step": 0,
              "opt": {"lr": 0.0, "name": "", "amsgrad": False}}
        hyper.dcp.load(sd, d)
        assert torch.equal(sd["model"]["w"].full_tensor(), g["w"])
        assert torch.equal(w_local, g["w"][:, w_local.shape[1] * dist.get_rank():][:, :w_local.shape[1]])
        assert torch.equal(sd["model"]["flat"].to_local(), g["flat"])
        assert torch.equal(sd["b"], g["b"])
        assert sd["step"] == 12 and sd["opt"] == {"lr": 0.25, "name": "adamw", "amsgrad": True}
    bad_shape = {"model": {"w": distribute_tensor(torch.zeros(12, 5), mesh, (Shard(0),))}}
    expect_raises(ValueError, lambda: hyper.dcp.load(bad_shape, os.environ["HYPER_TEST_CKPT"]),
                  "model.w", "[12, 5]", "[12, 4]")
    expect_raises(ValueError, lambda: hyper.dcp.load({"nope": torch.zeros(1)},
                                                     os.environ["HYPER_TEST_CKPT"]), "nope")
    expect_raises(ValueError, lambda: hyper.dcp.load({"step": 1.5}, os.environ["HYPER_TEST_CKPT"]),
                  "step")


class Block(torch.nn.Module):
    """A transformer block: pre-norm attention (heads of 4 features) and MLP with residuals."""

    def __init__(self, dim=16, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.norm1 = torch.nn.LayerNorm(dim, dtype=torch.float64)
        self.attn = torch.nn.Module()
        for n in ("wq", "wk", "wv", "wo"):
            setattr(self.attn, n, torch.nn.Linear(dim, dim, dtype=torch.float64))
        self.norm2 = torch.nn.LayerNorm(dim, dtype=torch.float64)
        self.mlp = torch.nn.Module()
        self.mlp.w1 = torch.nn.Linear(dim, 4 * dim, dtype=torch.float64)
        self.mlp.w2 = torch.nn.Linear(4 * dim, dim, dtype=torch.float64)

    def attention(self, x):
        b, s = x.shape[0], x.shape[1]
        a = self.attn
        q, k, v = (t.view(b, s, -1, 4).transpose(1, 2) for t in (a.wq(x), a.wk(x), a.wv(x)))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return a.wo(o.transpose(1, 2).reshape(b, s, -1))

    def forward(self, x):
        h = x + self.attention(self.norm1(x))
        return h + self.mlp.w2(torch.relu(self.mlp.w1(self.norm2(h))))


def case_tp_block():
    """The transformer block with tensor + sequence parallelism (PyTorch's plan; every boundary
    asynchronous) trained 3 SGD steps: losses and parameters equal one device's."""
    from hyper.tp import (ColwiseParallel, PrepareModuleInput, PrepareModuleOutput,
                          RowwiseParallel, SequenceParallel, parallelize_module)

    mesh = world_mesh()
    world = dist.get_world_size()
    ref, block = Block(), Block()  # 4 heads: 2 per rank on 2 ranks, 1 on 4
    plan = {
        "norm1": SequenceParallel(), "norm2": SequenceParallel(),
        "attn.wq": ColwiseParallel(), "attn.wk": ColwiseParallel(), "attn.wv": ColwiseParallel(),
        "attn.wo": RowwiseParallel(output_layouts=Shard(1)),
        "mlp.w1": ColwiseParallel(), "mlp.w2": RowwiseParallel(output_layouts=Shard(1)),
    }
    parallelize_module(block, mesh, plan)
    # The attention and the MLP take the sequence-sharded norm output whole.
    block.attention = _gathered(block.attention, mesh)
    parallelize_module(block, mesh, PrepareModuleInput(input_layouts=Replicate(),
                                                       desired_input_layouts=Shard(1),
                                                       use_local_output=True))
    parallelize_module(block, mesh, PrepareModuleOutput(output_layouts=Shard(1),
                                                        desired_output_layouts=Replicate()))
    assert block.attn.wq.weight.placements == (Shard(0),)
    assert block.attn.wo.weight.placements == (Shard(1),) and block.attn.wo.bias.placements == (Replicate(),)
    gen = torch.Generator().manual_seed(11)
    opt = torch.optim.SGD(block.parameters(), lr=0.05)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05)
    for step in range(3):
        x = torch.randn(2, 4 * world, 16, generator=gen, dtype=torch.float64)
        opt.zero_grad()
        ref_opt.zero_grad()
        out = block(x)
        assert not hyper.is_dtensor(out)
        loss = out.pow(2).mean()
        loss.backward()
        ref_loss = ref(x).pow(2).mean()
        ref_loss.backward()
        torch.testing.assert_close(loss, ref_loss)
        opt.step()
        ref_opt.step()
    for (name, p), (_, q) in zip(block.named_parameters(), ref.named_parameters()):
        full = p.full_tensor() if hyper.is_dtensor(p) else p
        torch.testing.assert_close(full.detach(), q.detach(), msg=name)


def _gathered(attention, mesh):
    """attention(x) with its sequence-sharded DTensor input made Replicate (asynchronously)
    and local, as PrepareModuleInput does for a module."""
    def run(x):
        return attention(x.redistribute(mesh, (Replicate(),), async_op=True))
    return run


def case_torch_interop():
    """hyper.from_torch / dt.to_torch share the local tensors with PyTorch's DTensor, for the
    layouts both express; gradients cross; RaggedShard is refused."""
    from torch.distributed.device_mesh import init_device_mesh as torch_mesh
    from torch.distributed.tensor import Replicate as TR, Shard as TS, distribute_tensor as tdist

    world = dist.get_world_size()
    tmesh = torch_mesh("cpu", (world,))
    hmesh = hyper.DeviceMesh.from_torch(tmesh)
    assert hmesh.shape == [world] and hyper.DeviceMesh.from_torch(tmesh) is hmesh
    assert hmesh.get_group(0) is tmesh.get_group(0)  # torch's own process group
    if world == 4:  # a 2x2 torch mesh: hyper's collectives run on its groups
        tm2 = torch_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        hm2 = hyper.DeviceMesh.from_torch(tm2)
        assert hm2.shape == [2, 2] and hm2.mesh_dim_names == ["dp", "tp"]
        assert hm2.get_group(0) is tm2.get_group(0) and hm2.get_group(1) is tm2.get_group(1)
        g2 = torch.arange(40.0).reshape(5, 8)
        d2 = distribute_tensor(g2, hm2, (Shard(0), Shard(1)))
        torch.testing.assert_close(d2.redistribute(hm2, (Shard(1), Replicate())).full_tensor(), g2)
        torch.testing.assert_close((d2 * 2).sum().full_tensor(), g2.sum() * 2)
        # Groups that are not the mesh's lines through this rank: a ValueError naming both.
        r = dist.get_rank()
        row, col = tm2.mesh[r // 2, :].tolist(), tm2.mesh[:, r % 2].tolist()
        expect_raises(ValueError, lambda: hyper._C.mesh_from_process_groups(
            hyper.mesh._world(None), "cpu", [2, 2], [], [tm2.get_group(1), tm2.get_group(0)],
            [row, col]), f"the process group of mesh dim 0 on rank {r} holds ranks "
            f"[{','.join(map(str, row))}], the mesh's line is [{','.join(map(str, col))}]")
    g = torch.arange(12.0 * world, dtype=torch.float64).reshape(4 * world, 3)
    t = tdist(g, tmesh, [TS(0)]).requires_grad_()  # a leaf torch DTensor
    h = hyper.from_torch(t)
    assert h.placements == (Shard(0),) and h.shape == g.shape
    assert h.to_local().data_ptr() == t.to_local().data_ptr()  # shared, not copied
    (h * h).sum().full_tensor().backward()
    torch.testing.assert_close(t.grad.full_tensor(), 2 * g)
    back = distribute_tensor(g, hmesh, (Shard(1) if g.shape[1] % world == 0 else Replicate(),))
    tt = back.to_torch()
    assert tt.to_local().data_ptr() == back.to_local().data_ptr()
    torch.testing.assert_close(tt.full_tensor(), g)
    r = hyper.from_torch(tdist(g, tmesh, [TR()]))
    assert r.placements == (Replicate(),) and torch.equal(r.to_local(), g)
    rows = world * (world + 1)
    ragged = distribute_tensor(torch.zeros(rows, 2), hmesh, (RaggedShard((0,), tuple(range(1, world + 1))),))
    expect_raises(ValueError, lambda: ragged.to_torch(), "RaggedShard")
    expect_raises(TypeError, lambda: hyper.from_torch(g), "not a torch DTensor")
    # torch DTensors in a hyper.dcp state dict: saved from one layout, loaded in place into
    # another (the torch DTensor's own local tensor is written).
    d = os.path.join(os.environ["HYPER_TEST_OUT"], "interop_ckpt")
    hyper.dcp.save({"t": tdist(g, tmesh, [TS(0)])}, d)
    target = tdist(torch.zeros_like(g), tmesh, [TR()])
    hyper.dcp.load({"t": target}, d)
    torch.testing.assert_close(target.to_local(), g)


def case_comm_timeout():
    """A collective that a peer never joins raises hyper.CommError on the ranks that wait
    (a 3 s limit), instead of hanging the job."""
    mesh = hyper.init_device_mesh("cpu", (dist.get_world_size(),), timeout=3)
    dt = distribute_tensor(torch.arange(4.0 * dist.get_world_size()), mesh, (Shard(0),))
    if dist.get_rank() == 0:
        expect_raises(hyper.CommError, lambda: dt.full_tensor())
    assert issubclass(hyper.CommError, RuntimeError)


def main(namespace=None):
    """Runs the cases named on the command line (case_<name> in `namespace`, default this
    module's)."""
    namespace = globals() if namespace is None else namespace
    cases = sys.argv[1:]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = {}
    path = os.path.join(os.environ["HYPER_TEST_OUT"], f"{rank}.json")
    for name in cases:
        print(f"rank {rank}: case {name}", file=sys.stderr, flush=True)
        try:
            namespace["case_" + name]()
            results[name] = "ok"
        except Exception:  # noqa: BLE001
            results[name] = traceback.format_exc()
        with open(path + ".tmp", "w") as f:  # after each case: a later hang keeps the others
            json.dump(results, f)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
