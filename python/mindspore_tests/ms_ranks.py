"""The multi-rank cases of the MindSpore suite, run on every rank by hyper.mindspore.run (see
conftest.py). Each case raises on a wrong value; its outcome ("ok" or the traceback) is written
per rank to $HYPER_TEST_OUT/<rank>.json. Values are checked against an independent oracle:
numpy slicing of the known global array (ref_local below, written from the placements'
definitions, not from hyper's core) and the single-device MindSpore computation."""

import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]

import numpy as np
import mindspore as ms

ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")

import hyper  # noqa: E402
import hyper.mindspore as hm  # noqa: E402
from expect import expect_raises  # noqa: E402
from hyper.mindspore import (DTensor, Partial, RaggedShard, Replicate, Shard,  # noqa: E402
                             distribute_tensor)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])


# ---- the oracle -------------------------------------------------------------------------------

def chunk(n, k, i):
    """torch.chunk's piece i of n over k: ceil(n / k) per piece, trailing pieces clipped."""
    c = -(-n // k)
    lo = min(i * c, n)
    return lo, min(lo + c, n)


def coordinate(mesh_shape, rank):
    out = []
    for s in reversed(mesh_shape):
        out.append(rank % s)
        rank //= s
    return out[::-1]


def ref_local(g, mesh_shape, placements, rank=RANK):
    """This rank's local storage of the global array `g` (no Partial): nested Shards cut a
    box in mesh-dim order, then a RaggedShard takes its flat interval of the box."""
    coord = coordinate(mesh_shape, rank)
    box = [[0, s] for s in g.shape]
    for m, p in enumerate(placements):
        if p.is_shard():
            d = p.dim % g.ndim
            lo, hi = chunk(box[d][1] - box[d][0], mesh_shape[m], coord[m])
            box[d] = [box[d][0] + lo, box[d][0] + hi]
    sub = g[tuple(slice(a, b) for a, b in box)]
    for m, p in enumerate(placements):
        if p.is_ragged_shard():
            k, units = len(p.dims), p.local_units
            cells = int(np.prod(sub.shape[:k]))
            per = cells // sum(units)
            suffix = int(np.prod(sub.shape[k:]))
            start = sum(units[:coord[m]]) * per * suffix
            return sub.reshape(-1)[start:start + units[coord[m]] * per * suffix]
    return sub


def arr(t):
    return t.astype(ms.float32).asnumpy() if t.dtype == ms.bfloat16 else t.asnumpy()


def check_equal(got, want, what):
    got = arr(got) if isinstance(got, ms.Tensor) else got
    assert got.shape == want.shape, f"{what}: shape {got.shape}, want {want.shape}"
    assert np.array_equal(got, want), f"{what}: {got.ravel()[:8]} != {want.ravel()[:8]}"


def world_mesh():
    return hm.init_device_mesh("cpu", (WORLD,))


def mesh2d():
    return hm.init_device_mesh("cpu", (2, WORLD // 2), mesh_dim_names=("dp", "tp"))


def units(total_cells, n, zero_at=None):
    """Units for n ranks (1, 2 or 4) summing to 1, 3 or 6, which divide total_cells (6 or 30); the
    units of rank `zero_at` go to the next rank."""
    u = {1: [1], 2: [1, 2], 4: [1, 2, 2, 1]}[n]
    if zero_at is not None:
        u[(zero_at + 1) % n] += u[zero_at]
        u[zero_at] = 0
    assert total_cells % sum(u) == 0, (total_cells, u)
    return tuple(u)


SHAPE = (6, 5, 8)
G = np.arange(np.prod(SHAPE), dtype=np.float32).reshape(SHAPE)


def layouts_1d():
    n = WORLD
    return [(Shard(0),), (Shard(1),), (Shard(2),), (Replicate(),),
            (RaggedShard((0,), units(6, n, zero_at=n - 1)),),
            (RaggedShard((0, 1), units(30, n, zero_at=0)),)]


def layouts_2d():
    a, b = 2, WORLD // 2
    return [(Shard(0), Shard(1)), (Replicate(), Shard(0)), (Shard(1), Replicate()),
            (Shard(0), Shard(0)), (RaggedShard((0,), (1, 2)), Replicate()),
            (Replicate(), RaggedShard((0, 1), units(30, b))),
            (Shard(1), RaggedShard((0,), (2, 1) if b == 2 else (1,)))]


# ---- cases --------------------------------------------------------------------------------------

def case_seed_section5():
    """The seed's section-5 calls, unchanged but for the import name (hyper.mindspore), with
    section 3.3's intervals on 2 ranks (rank 0: flat [0, 64), rank 1: [64, 192))."""
    mesh = world_mesh()
    global_np = np.arange(192, dtype=np.float32).reshape(6, 4, 8)
    global_tensor = ms.Tensor(global_np)
    flat = global_np.reshape(-1)
    placement = RaggedShard(dims=(0, 1), local_units=(1, 2) if WORLD == 2 else (1,) * WORLD)
    assert placement.dims == (0, 1) and hm.RaggedShard is hyper.RaggedShard
    u = (1, 2) if WORLD == 2 else (2, 0, 3, 1)
    starts = np.concatenate([[0], np.cumsum(u)]) * 192 // sum(u)
    lo, hi = int(starts[RANK]), int(starts[RANK + 1])
    rs = (RaggedShard((0, 1), u),)
    dt = distribute_tensor(global_tensor, mesh, rs, src_data_rank=0)
    check_equal(dt.to_local(), flat[lo:hi], "src_data_rank=0")
    assert dt.shape == (6, 4, 8) and dt.placements == rs
    check_equal(distribute_tensor(global_tensor, mesh, rs).to_local(), flat[lo:hi], "local slice")
    noise = global_tensor if RANK == WORLD - 1 else ms.Tensor(np.full_like(global_np, -1.0))
    check_equal(distribute_tensor(noise, mesh, rs, src_data_rank=WORLD - 1).to_local(),
                flat[lo:hi], "only the source's values")
    dt = DTensor.from_local(ms.Tensor(flat[lo:hi].copy()), mesh, rs, shape=(6, 4, 8))
    check_equal(dt.full_tensor(), global_np, "full_tensor")
    u2 = tuple(reversed(u))
    changed = dt.redistribute(mesh, (RaggedShard((0, 1), u2),))
    s2 = np.concatenate([[0], np.cumsum(u2)]) * 192 // sum(u2)
    check_equal(changed.to_local(), flat[int(s2[RANK]):int(s2[RANK + 1])], "units changed")
    check_equal(dt.redistribute(mesh, (Replicate(),)).to_local(), global_np, "replicated")
    sharded = dt.redistribute(mesh, (Shard(0),))
    check_equal(sharded.to_local(), ref_local(global_np, (WORLD,), (Shard(0),)), "sharded")
    for t in (changed, sharded):
        check_equal(t.full_tensor(), global_np, "full_tensor after redistribute")


def _catalogue(mesh, layouts, g, dtype=ms.float32):
    gt = ms.Tensor(g).astype(dtype)
    want_g = arr(gt)
    for src in layouts:
        d = distribute_tensor(gt, mesh, src)
        check_equal(d.to_local(), ref_local(want_g, mesh.shape, src), f"distribute {src}")
        for dst in layouts:
            moved = d.redistribute(mesh, dst)
            assert moved.placements == dst and moved.shape == g.shape
            check_equal(moved.to_local(), ref_local(want_g, mesh.shape, dst), f"{src} -> {dst}")
        check_equal(d.full_tensor(), want_g, f"full_tensor of {src}")


def case_redistribute_catalogue_1d():
    """Every pair of a catalogue of 1-D layouts (uneven Shards, RaggedShard with a zero-unit
    rank) against slicing the global array."""
    _catalogue(world_mesh(), layouts_1d(), G)


def case_redistribute_catalogue_2d():
    """The same on a 2-D mesh (2, world/2), RaggedShard beside Replicate and beside Shard."""
    _catalogue(mesh2d(), layouts_2d(), G)


def case_large_moves():
    """Tensors whose plans have long runs (rows of 2048 elements): the executor places them by
    slices instead of index arrays; every pair against slicing."""
    shape = (64, 2048)
    g = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    ragged = RaggedShard((0,), (1, 3) if WORLD == 2 else (1, 0, 2, 1))  # 64 rows: 16 per unit
    _catalogue(world_mesh(), [(Shard(0),), (Shard(1),), (Replicate(),), (ragged,)], g)


def case_dtypes():
    """Bit-exact moves of every dtype MindSpore's CPU collectives do not carry themselves
    (bytes travel as int32 words): a few pairs per dtype."""
    mesh = world_mesh()
    lay = [(Shard(1),), (RaggedShard((0, 1), units(30, WORLD, zero_at=0)),), (Replicate(),)]
    rng = np.random.default_rng(7)
    vals = rng.standard_normal(SHAPE)
    for dtype, g in [(ms.float64, vals), (ms.float16, vals.astype(np.float16)),
                     (ms.bfloat16, vals.astype(np.float32)), (ms.int64, (vals * 1e6).astype(np.int64)),
                     (ms.int32, (vals * 100).astype(np.int32)), (ms.int8, (vals * 10).astype(np.int8)),
                     (ms.uint8, (np.abs(vals) * 50).astype(np.uint8)), (ms.bool_, vals > 0)]:
        _catalogue(mesh, lay, g, dtype)


def case_partial():
    """Partial(sum / avg / max / min) to Replicate, Shard and RaggedShard: the reduction of
    every rank's contribution (float32 sums through AllReduce, the rest gathered)."""
    mesh = world_mesh()
    contrib = [G * (r + 1) - 3 * r for r in range(WORLD)]
    reduce = {"sum": sum(contrib), "avg": sum(contrib) / WORLD,
              "max": np.maximum.reduce(contrib), "min": np.minimum.reduce(contrib)}
    for op, want in reduce.items():
        p = DTensor.from_local(ms.Tensor(contrib[RANK]), mesh, (Partial(op),))
        for dst in [(Replicate(),), (Shard(1),), (RaggedShard((0,), units(6, WORLD, 1)),)]:
            got = p.redistribute(mesh, dst).to_local()
            want_local = ref_local(want.astype(np.float32), (WORLD,), dst)
            assert np.allclose(arr(got), want_local, rtol=1e-6), f"Partial({op}) -> {dst}"
        check_equal(p.full_tensor(), want.astype(np.float32), f"full_tensor of Partial({op})")
    # int64 sums (no AllReduce kernel: gathered and summed exactly).
    pi = DTensor.from_local(ms.Tensor(np.arange(60, dtype=np.int64) * (RANK + 1)), mesh,
                            (Partial(),))
    check_equal(pi.full_tensor(), np.arange(60, dtype=np.int64) * sum(range(1, WORLD + 1)),
                "int64 Partial sum")
    # Replicate -> Partial(sum): the value on coordinate 0, zeros elsewhere.
    r2p = distribute_tensor(ms.Tensor(G), mesh, (Replicate(),)).redistribute(mesh, (Partial(),))
    check_equal(r2p.to_local(), G if RANK == 0 else np.zeros_like(G), "Replicate -> Partial")
    check_equal(r2p.full_tensor(), G, "Replicate -> Partial -> full")
    # On a 2-D mesh: Partial over one dim only (an exchange, not a world all-reduce).
    m2 = mesh2d()
    c = m2.get_coordinate()
    p2 = DTensor.from_local(ms.Tensor(ref_local(G, m2.shape, (Replicate(), Shard(0))) * (c[0] + 1)),
                            m2, (Partial(), Shard(0)), shape=SHAPE)
    check_equal(p2.full_tensor(), G * 3, "Partial on the dp dim of a 2-D mesh")


def case_zero_unit_ranks():
    """A RaggedShard giving some ranks nothing: creation, elementwise, full_tensor, moves and
    gradients, without a hang or a misplaced element."""
    mesh = world_mesh()
    u = tuple(0 if r % 2 else 2 for r in range(WORLD))
    rs = (RaggedShard((0,), u),)
    g = G[: sum(u)] if sum(u) <= 6 else np.arange(sum(u) * 40, dtype=np.float32).reshape(-1, 5, 8)
    gt = ms.Tensor(g)
    d = distribute_tensor(gt, mesh, rs)
    assert d.to_local().shape == (ref_local(g, (WORLD,), rs).size,)
    if u[RANK] == 0:
        assert d.to_local().shape == (0,)
    empty_ok = DTensor.from_local(ms.Tensor(ref_local(g, (WORLD,), rs).copy()), mesh, rs,
                                  shape=g.shape)
    y = hm.ops.exp(empty_ok * 0.01)
    check_equal(y.full_tensor(), arr(ms.ops.exp(gt * 0.01)), "exp on zero-unit ranks")
    for dst in [(Shard(0),), (RaggedShard((0,), tuple(reversed(u))),), (Replicate(),)]:
        check_equal(d.redistribute(mesh, dst).to_local(), ref_local(g, (WORLD,), dst), f"-> {dst}")

    def loss(x):
        dx = distribute_tensor(x, mesh, rs)
        return (hm.ops.square(dx).full_tensor() * 0.5).sum()
    grad = arr(ms.grad(loss)(gt))
    want = np.zeros(g.size, np.float32)
    idx = ref_local(np.arange(g.size).reshape(g.shape), (WORLD,), rs)
    want[idx] = g.reshape(-1)[idx]
    check_equal(grad.reshape(-1), want, "gradient with zero-unit ranks")


def case_autograd():
    """Gradients against the single-device MindSpore computation: distribute -> redistribute
    (ragged -> shard -> ragged) -> elementwise -> full_tensor -> loss; from_local / to_local with
    grad_placements; every path of redistribute's backward."""
    mesh = world_mesh()
    rng = np.random.default_rng(3)
    w = ms.Tensor(rng.standard_normal(SHAPE).astype(np.float32))
    x0 = ms.Tensor(rng.standard_normal(SHAPE).astype(np.float32))
    rs = (RaggedShard((0, 1), units(30, WORLD, zero_at=WORLD - 1)),)
    one = arr(ms.grad(lambda x: (ms.ops.sin(x) * w).sum())(x0))
    idx_all = np.arange(int(np.prod(SHAPE))).reshape(SHAPE)
    for path in [[(Shard(1),)], [(Shard(2),), (Replicate(),)], [(RaggedShard((0,), units(6, WORLD)),)],
                 [(Partial(),), (Shard(0),)]]:
        def loss(x):
            d = distribute_tensor(x, mesh, rs)
            for dst in path:
                d = d.redistribute(mesh, dst)
            if d.placements[0].is_partial():
                d = d.redistribute(mesh, (Replicate(),))
            return (hm.ops.sin(d).full_tensor() * w).sum()
        got = arr(ms.grad(loss)(x0)).reshape(-1)
        idx = ref_local(idx_all, (WORLD,), rs)
        want = np.zeros(got.size, np.float32)
        want[idx] = one.reshape(-1)[idx]
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6), f"gradient via {path}"
    # from_local -> full_tensor: the gradient of the local is the local part of one device's.
    local = ms.Tensor(ref_local(arr(x0), (WORLD,), (Shard(0),)).copy())
    g_local = ms.grad(lambda l: (DTensor.from_local(l, mesh, (Shard(0),), shape=SHAPE)
                                 .full_tensor() * w).sum())(local)
    check_equal(g_local, ref_local(arr(w), (WORLD,), (Shard(0),)), "from_local gradient")
    # to_local(grad_placements=Partial): each rank's gradient is a part; they are summed.
    c = float(RANK + 1)
    rep = lambda x: distribute_tensor(x, mesh, (Replicate(),))  # noqa: E731
    g_part = ms.grad(lambda x: (rep(x).to_local(grad_placements=(Partial(),)) * c).sum())(x0)
    check_equal(g_part, np.full(SHAPE, sum(range(1, WORLD + 1)), np.float32),
                "to_local(grad_placements=Partial)")
    # full_tensor(grad_placements=Partial) of a Shard: reduce-scatter of the gradients.
    sh = lambda x: distribute_tensor(x, mesh, (Shard(1),))  # noqa: E731
    g_fp = ms.grad(lambda x: (sh(x).full_tensor(grad_placements=(Partial(),)) * c).sum())(x0)
    want = np.zeros(SHAPE, np.float32)
    lo, hi = chunk(SHAPE[1], WORLD, RANK)
    want[:, lo:hi] = sum(range(1, WORLD + 1))
    check_equal(g_fp, want, "full_tensor(grad_placements=Partial)")


def case_elementwise():
    """The seed's elementwise whitelist against the op on the global tensor, sliced; the
    result keeps the ragged layout; everything else fails closed."""
    mesh = world_mesh()
    rs = (RaggedShard((0, 1), units(30, WORLD, zero_at=0)),)
    pos = np.abs(G) / 7 + 0.5
    gt = ms.Tensor(pos)
    d = distribute_tensor(gt, mesh, rs)
    from hyper.mindspore import ops as hops
    for name in ["abs", "absolute", "clone", "cos", "exp", "gelu", "isinf", "isnan", "log", "neg",
                 "negative", "relu", "rsqrt", "sigmoid", "silu", "sin", "sqrt", "square"]:
        y = getattr(hops, name)(d)
        assert y.placements == rs and y.shape == SHAPE, name
        want = arr(hops.UNARY[name](gt))
        check_equal(y.to_local(), ref_local(want, (WORLD,), rs), name)
    e = distribute_tensor(ms.Tensor(pos[::-1].copy()), mesh, rs)
    for name in ["add", "sub", "mul", "div", "true_divide", "real_div", "pow", "rsub", "rpow"]:
        f = hops.BINARY[name]
        y = getattr(hops, name)(d, e)
        check_equal(y.to_local(), ref_local(arr(f(gt, ms.Tensor(pos[::-1].copy()))), (WORLD,), rs),
                    name)
        check_equal(getattr(hops, name)(d, 2.0).to_local(),
                    ref_local(arr(f(gt, 2.0)), (WORLD,), rs), name + " scalar")
    check_equal((2.0 - d * 3 + d / 2 - (-d) ** 2 + 1 / d).to_local(),
                ref_local(arr(2.0 - gt * 3 + gt / 2 - (-gt) ** 2 + 1 / gt), (WORLD,), rs),
                "operators")
    # Fail-closed.
    expect_raises(NotImplementedError, lambda: d.sum(), "'sum' is not supported")
    expect_raises(NotImplementedError, lambda: d.reshape(30, 8), "'reshape'")
    expect_raises(NotImplementedError, lambda: hops.matmul(d, d), "matmul", "fail-closed")
    expect_raises(ValueError, lambda: d + d.redistribute(mesh, (Shard(0),)), "laid out differently")
    expect_raises(TypeError, lambda: d + gt, "distribute a mindspore.Tensor")
    p = DTensor.from_local(ms.Tensor(pos), mesh, (Partial(),))
    expect_raises(NotImplementedError, lambda: hops.relu(p), "Partial")
    for make in (lambda: hm.zeros(SHAPE, mesh, rs), lambda: hm.ones(SHAPE, mesh, rs),
                 lambda: hm.full(SHAPE, 3.0, mesh, rs), lambda: hm.empty(SHAPE, mesh, rs)):
        expect_raises(NotImplementedError, make, "RaggedShard factory")
    z = hm.full(SHAPE, 3.0, mesh, (Shard(1),))
    check_equal(z.full_tensor(), np.full(SHAPE, 3.0, np.float32), "full() of Shard(1)")
    # Gradients of elementwise ops are MindSpore's own on the locals.
    gr = ms.grad(lambda x: (hops.sigmoid(distribute_tensor(x, mesh, rs)) * 2).full_tensor().sum())(gt)
    one = arr(ms.grad(lambda x: (ms.ops.sigmoid(x) * 2).sum())(gt))
    idx = ref_local(np.arange(pos.size).reshape(SHAPE), (WORLD,), rs)
    want = np.zeros(pos.size, np.float32)
    want[idx] = one.reshape(-1)[idx]
    assert np.allclose(arr(gr).reshape(-1), want, rtol=1e-6), "sigmoid gradient"


def case_refusals_section_9_3():
    """Every refusal of the seed's section 9.3 (and the mesh's) on every rank alike."""
    mesh = world_mesh()
    u = tuple(range(1, WORLD + 1))
    g = ms.Tensor(np.arange(96.0 * WORLD, dtype=np.float32).reshape(4 * WORLD, 3, 8))
    m2 = mesh2d()
    expect_raises(ValueError, lambda: distribute_tensor(
        g, m2, (RaggedShard((0,), (1, 1)), RaggedShard((0,), (1,) * (WORLD // 2)))), "RaggedShard")
    expect_raises(ValueError, lambda: distribute_tensor(
        g, m2, (RaggedShard((0,), (1, 1)), Partial())), "Replicate or Shard")
    expect_raises(ValueError, lambda: RaggedShard((1,), u), "prefix")
    cells = sum(u) * 2 + 1
    expect_raises(ValueError, lambda: distribute_tensor(
        ms.Tensor(np.zeros((cells, 2), np.float32)), mesh, (RaggedShard((0,), u),)), "divisible")
    expect_raises(ValueError, lambda: distribute_tensor(g, mesh, (RaggedShard((0,), u + (1,)),)),
                  "units")
    rs = (RaggedShard((0, 1), u),)
    shape = (sum(u) * 2, 4, 8)
    n = u[RANK] * 64
    z = lambda k: ms.Tensor(np.zeros(k, np.float32))  # noqa: E731
    expect_raises(ValueError, lambda: DTensor.from_local(z(n), mesh, rs), "shape=")
    expect_raises(ValueError, lambda: DTensor.from_local(
        ms.Tensor(np.zeros((n // 8, 8), np.float32)), mesh, rs, shape=shape), "1-D")
    expect_raises(ValueError, lambda: DTensor.from_local(z(2 * n)[::2], mesh, rs, shape=shape),
                  "contiguous")
    expect_raises(ValueError, lambda: DTensor.from_local(z(n - 1), mesh, rs, shape=shape),
                  f"holds {n - 1} elements", f"gives it {n}")
    expect_raises(ValueError, lambda: DTensor.from_local(
        ms.Tensor(np.zeros((2, 3), np.float32)), mesh, (Shard(0),), shape=(4 * WORLD, 3)),
        "local shape")
    expect_raises(ValueError, lambda: Partial("prod"), "prod")
    expect_raises(ValueError, lambda: distribute_tensor(g, mesh, (Shard(0), Shard(1))), "placements")
    expect_raises(ValueError, lambda: distribute_tensor(g, mesh, (Shard(3),)), "Shard")
    expect_raises(ValueError, lambda: distribute_tensor(g, mesh, (Shard(0),), src_data_rank=WORLD),
                  "src_data_rank")
    expect_raises(TypeError, lambda: distribute_tensor(np.zeros(3), mesh, (Shard(0),)),
                  "mindspore.Tensor")
    # The mesh: no sub-meshes (world-only collectives), the world's size, cpu.
    expect_raises(NotImplementedError, lambda: m2["dp"], "world group")
    expect_raises(ValueError, lambda: hm.init_device_mesh("cpu", (WORLD + 1,)), "the world has")
    expect_raises(ValueError, lambda: hm.init_device_mesh("npu", (WORLD,)), "npu")
    expect_raises(ValueError, lambda: hm.init_device_mesh("cpu", (WORLD,), ("a", "b")), "names")
    # Redistribute to another mesh.
    d = distribute_tensor(g, mesh, (Shard(0),))
    expect_raises(ValueError, lambda: d.redistribute(m2, (Shard(0), Replicate())), "mesh")
    # run_check: a rank whose arguments differ is named on every rank.
    bad_shape = (4 * WORLD, 3, 8) if RANK else (4 * WORLD + 4, 3, 8)
    rows = ref_local(np.zeros(bad_shape, np.float32), (WORLD,), (Shard(0),))
    expect_raises(ValueError, lambda: DTensor.from_local(
        ms.Tensor(rows.copy()), mesh, (Shard(0),), shape=bad_shape, run_check=True),
        "run_check", "rank 0 has")


def case_collectives():
    """The seed's differentiable variable all-gather (backward: reduce-scatter) and all-to-all
    (backward: swapped splits), forward values and gradients."""
    mesh = world_mesh()  # noqa: F841  (initialises communication)
    from hyper.mindspore import comm
    splits = [(r + 1) % 3 for r in range(WORLD)]  # rank 2 sends no rows
    rows = [np.arange(splits[r] * 4, dtype=np.float32).reshape(splits[r], 4) + 100 * r
            for r in range(WORLD)]
    x = ms.Tensor(rows[RANK])
    out = comm.variable_all_gather(x, splits)
    check_equal(out, np.concatenate(rows), "variable_all_gather")
    w = np.arange(sum(splits) * 4, dtype=np.float32).reshape(-1, 4)
    g = ms.grad(lambda t: (comm.variable_all_gather(t, splits) * ms.Tensor(w)).sum())(x)
    lo = sum(splits[:RANK])
    check_equal(g, WORLD * w[lo:lo + splits[RANK]], "variable_all_gather backward")
    # all_to_all: rank r sends (r + q) % 3 rows to rank q.
    send = [(RANK + q) % 3 for q in range(WORLD)]
    recv = [(q + RANK) % 3 for q in range(WORLD)]
    xs = np.arange(sum(send) * 2, dtype=np.float32).reshape(-1, 2) + 1000 * RANK
    y = comm.all_to_all_single(ms.Tensor(xs), send, recv)
    want = []
    for q in range(WORLD):
        sq = [(q + p) % 3 for p in range(WORLD)]
        xq = np.arange(sum(sq) * 2, dtype=np.float32).reshape(-1, 2) + 1000 * q
        start = sum(sq[:RANK])
        want.append(xq[start:start + sq[RANK]])
    check_equal(y, np.concatenate(want), "all_to_all_single")
    # Backward: the gradient of sum(y * c_r) reaches each sent row as its receiver's c.
    gx = ms.grad(lambda t: (comm.all_to_all_single(t, send, recv) * float(RANK + 1)).sum())(
        ms.Tensor(xs))
    want_g = np.concatenate([np.full((send[q], 2), q + 1, np.float32) for q in range(WORLD)])
    check_equal(gx, want_g, "all_to_all_single backward")
    expect_raises(ValueError, lambda: comm.variable_all_gather(x, splits[:-1]), "output_splits")
    expect_raises(ValueError, lambda: comm.all_to_all_single(ms.Tensor(xs), send,
                                                             [v + 1 for v in recv]), "output_splits")


def case_bytes():
    """What crosses the wire, from hm.stats(): a move that needs no data moves no bytes; a
    ragged -> ragged move sends each rank's outgoing elements once (one AllGather padded to the
    longest sender, or one Broadcast when a single rank sends)."""
    mesh = world_mesh()
    d = distribute_tensor(ms.Tensor(G), mesh, (Replicate(),))
    hm.reset_stats()
    d.redistribute(mesh, (Shard(1),))
    d.redistribute(mesh, (RaggedShard((0,), units(6, WORLD)),))
    assert hm.stats() == {"collectives": 0, "bytes_sent": 0, "bytes_received": 0}, hm.stats()
    s = distribute_tensor(ms.Tensor(G), mesh, (Shard(0),))
    hm.reset_stats()
    s.redistribute(mesh, (Shard(1),))
    st = hm.stats()
    # Each rank sends what its rows hold of the others' columns; padded to the longest sender.
    sends = []
    for r in range(WORLD):
        rlo, rhi = chunk(6, WORLD, r)
        clo, chi = chunk(5, WORLD, r)
        sends.append((rhi - rlo) * (5 - (chi - clo)) * 8)
    senders = [v for v in sends if v]
    if len(senders) > 1:
        assert st["bytes_sent"] == max(sends) * 4, (st, sends)
        assert st["bytes_received"] == (WORLD - 1) * max(sends) * 4, (st, sends)
    assert st["collectives"] == 1, st



def case_graph_mode():
    """In GRAPH_MODE the same calls run (eagerly: MindSpore's primitives run outside compiled
    Cells in either mode), values unchanged; gradients through them are PyNative's."""
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        mesh = world_mesh()
        rs = (RaggedShard((0, 1), units(30, WORLD, zero_at=0)),)
        d = distribute_tensor(ms.Tensor(G), mesh, rs)
        check_equal(d.to_local(), ref_local(G, (WORLD,), rs), "distribute in GRAPH_MODE")
        m = d.redistribute(mesh, (Shard(2),))
        check_equal(m.to_local(), ref_local(G, (WORLD,), (Shard(2),)), "redistribute in GRAPH_MODE")
        check_equal(hm.ops.exp(m * 0.001).full_tensor(), arr(ms.ops.exp(ms.Tensor(G) * 0.001)),
                    "elementwise + full_tensor in GRAPH_MODE")
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)


def case_cross_rank_errors():
    """A bad argument on one rank fails every rank alike, naming that rank, and leaves no rank
    inside a collective (the ones after it still pair up)."""
    mesh = world_mesh()
    from hyper.mindspore import comm
    splits = [1] * WORLD
    mine = splits if RANK != 1 else [2] + splits[1:]
    one_row = ms.Tensor(np.zeros((1, 2), np.float32))
    expect_raises(ValueError, lambda: comm.variable_all_gather(one_row, mine),
                  "rank 1's output_splits")
    rows = ms.Tensor(np.zeros((2 if RANK == 1 else 1, 2), np.float32))
    expect_raises(ValueError, lambda: comm.variable_all_gather(rows, splits), "rank 1 holds 2 rows")
    out = splits if RANK != 1 else [0] + splits[1:]
    expect_raises(ValueError, lambda: comm.all_to_all_single(
        ms.Tensor(np.zeros((WORLD, 2), np.float32)), splits, out), "rank 1's output_splits")
    local = ref_local(G, (WORLD,), (Shard(0),))
    bad = local if RANK != 1 else local[:-1]
    expect_raises(ValueError, lambda: DTensor.from_local(
        ms.Tensor(bad.copy()), mesh, (Shard(0),), shape=SHAPE, run_check=True),
        "run_check=True): rank 1:", "local shape")
    check_equal(distribute_tensor(ms.Tensor(G), mesh, (Shard(1),)).full_tensor(), G,
                "a collective after the refusals")
    # A source rank whose values nobody else needs: no data moves, no rank waits.
    p = distribute_tensor(ms.Tensor(G), mesh, (Partial(),), src_data_rank=0)
    check_equal(p.to_local(), G if RANK == 0 else np.zeros_like(G), "Partial from rank 0")
    check_equal(p.full_tensor(), G, "Partial from rank 0, summed")


# ---- checkpoint ---------------------------------------------------------------------------------

MS_DTYPES = {"w": ms.float32, "idx": ms.int64, "h": ms.bfloat16, "b": ms.float64, "flags": ms.bool_}


def _ms_state(glob, layouts, mesh, zero):
    state = {}
    for k, pl in layouts.items():
        src = ms.Tensor(np.zeros_like(glob[k]) if zero else glob[k]).astype(MS_DTYPES[k])
        state[k] = distribute_tensor(src, mesh, pl)
    state["b"] = ms.Tensor(np.zeros_like(glob["b"]) if zero else glob["b"])
    return state


def case_checkpoint_from_torch():
    """Loads the checkpoint hyper saved on PyTorch (4 ranks, torch_side.py) into other layouts
    on this world, checks every rank's values, checks the chunk files with the reference
    safetensors reader, then saves generation 1 with yet other layouts for PyTorch to check."""
    from ckpt_globals import ragged_units, tensors, values
    src, dst = os.environ["HYPER_CKPT_IN"], os.environ["HYPER_CKPT_OUT"]
    mesh = world_mesh()
    glob = tensors(0)
    lay = {"w": (Shard(2),), "idx": (RaggedShard((0,), ragged_units(WORLD, 6)),),
           "h": (Replicate(),), "flags": (RaggedShard((0, 1), ragged_units(WORLD, 12)),)}
    state = _ms_state(glob, lay, mesh, zero=True)
    hm.dcp.load(state, src)
    for k, want in glob.items():
        got = state[k]
        want_local = want if k == "b" else ref_local(want, (WORLD,), lay[k])
        if k == "b":
            check_equal(got, want, k)
        else:
            check_equal(got.to_local(), want_local, f"{k} loaded from PyTorch")
    flat_vals = {k: type(v)() for k, v in values(0).items()}
    hm.dcp.load(flat_vals, src)
    assert flat_vals == values(0), flat_vals
    # The files: any safetensors reader reads every chunk of "w" as its box of the global.
    from safetensors.numpy import load_file
    meta = json.load(open(os.path.join(src, ".metadata")))
    files = {}
    for c in meta["tensors"]["w"]["chunks"]:
        data = files.setdefault(c["file"], load_file(os.path.join(src, c["file"])))
        box = tuple(slice(o, o + z) for o, z in zip(c["offsets"], c["sizes"]))
        check_equal(data[c["key"]], glob["w"][box], f"chunk {c['key']} of {c['file']}")
    # Generation 1 back to PyTorch, from other layouts.
    glob1 = tensors(1)
    lay1 = {"w": (RaggedShard((0, 1), ragged_units(WORLD, 30)),), "idx": (Shard(0),),
            "h": (Shard(1),), "flags": (Replicate(),)}
    out = _ms_state(glob1, lay1, mesh, zero=False)
    out.update(values(1))
    hm.dcp.save(out, dst)


def case_checkpoint():
    """hyper.mindspore.dcp on its own: every layout pair of the 1-D catalogue saved and loaded
    (resharded, in place), nested dicts and values, and every refusal with nothing changed."""
    import tempfile
    mesh = world_mesh()
    base = os.environ["HYPER_TEST_OUT"]
    g = ms.Tensor(G)
    for i, src in enumerate(layouts_1d()):
        d = os.path.join(base, f"ck{i}")
        hm.dcp.save({"m": {"x": distribute_tensor(g, mesh, src)}, "step": i}, d)
        for dst in layouts_1d():
            t = distribute_tensor(ms.Tensor(np.zeros_like(G)), mesh, dst)
            local = t.to_local()
            nested = {"m": {"x": t}, "step": -1}
            read, needed = hm.dcp.load(nested, d)
            assert t.to_local() is local, "load must write in place"
            check_equal(local, ref_local(G, (WORLD,), dst), f"{src} saved, loaded as {dst}")
            assert nested["step"] == i and needed == local.size * 4 and read >= needed
    # Partial is reduced before it is saved.
    d = os.path.join(base, "ckp")
    hm.dcp.save({"p": DTensor.from_local(ms.Tensor(G * (RANK + 1)), mesh, (Partial(),))}, d)
    t = distribute_tensor(ms.Tensor(np.zeros_like(G)), mesh, (Shard(0),))
    hm.dcp.load({"p": t}, d)
    check_equal(t.to_local(), ref_local(G * sum(range(1, WORLD + 1)), (WORLD,), (Shard(0),)),
                "Partial saved reduced")
    # Two Partial tensors in a different dict order on each rank: reduced in name order.
    d = os.path.join(base, "ckorder")
    pa = DTensor.from_local(ms.Tensor(G * (RANK + 1)), mesh, (Partial(),))
    pb = DTensor.from_local(ms.Tensor(G * 10 * (RANK + 1)), mesh, (Partial(),))
    hm.dcp.save({"a": pa, "b": pb} if RANK % 2 == 0 else {"b": pb, "a": pa}, d)
    ta, tb = (distribute_tensor(ms.Tensor(np.zeros_like(G)), mesh, (Replicate(),)) for _ in "ab")
    hm.dcp.load({"a": ta, "b": tb}, d)
    total = sum(range(1, WORLD + 1))
    check_equal(ta.to_local(), G * total, "'a' saved from dicts of different orders")
    check_equal(tb.to_local(), G * 10 * total, "'b' saved from dicts of different orders")
    # Refusals on every rank before any collective: a dtype hyper does not store (on a
    # replicated tensor only one rank writes), a value that does not fit.
    u16 = distribute_tensor(ms.Tensor(np.zeros(SHAPE, np.uint16)), mesh, (Replicate(),))
    expect_raises(NotImplementedError, lambda: hm.dcp.save({"u": u16}, os.path.join(base, "u")),
                  "dtype")
    expect_raises(ValueError, lambda: hm.dcp.save({"n": 2**63}, os.path.join(base, "n")),
                  "does not fit in int64")
    # Refusals: nothing is changed.
    d = os.path.join(base, "ck0")
    t = distribute_tensor(ms.Tensor(np.full(SHAPE, 5.0, np.float32)), mesh, (Shard(1),))
    before = arr(t.to_local()).copy()
    expect_raises(ValueError, lambda: hm.dcp.load({"nope": t}, d), "lacks entry 'nope'")
    expect_raises(ValueError, lambda: hm.dcp.load({"m.x": distribute_tensor(
        ms.Tensor(np.zeros(SHAPE, np.float64)), mesh, (Shard(1),))}, d), "dtype F64", "F32")
    expect_raises(ValueError, lambda: hm.dcp.load({"m.x": distribute_tensor(
        ms.Tensor(np.zeros((6, 5, 9), np.float32)), mesh, (Shard(1),))}, d), "global shape")
    expect_raises(ValueError, lambda: hm.dcp.load({"step": 1.5}, d), "holds int", "float")
    expect_raises(ValueError, lambda: hm.dcp.load({"step": t}, d), "holds a value")
    with tempfile.TemporaryDirectory() as empty:
        expect_raises(ValueError, lambda: hm.dcp.load({"m.x": t}, empty), "incomplete checkpoint")
    # A flipped byte in a data file: the checksum refuses it, the target keeps its values.
    corrupt = os.path.join(base, f"corrupt{RANK}")
    import shutil
    shutil.copytree(d, corrupt)
    data = sorted(f for f in os.listdir(corrupt) if f.endswith(".safetensors"))[0]
    with open(os.path.join(corrupt, data), "r+b") as f:
        f.seek(-5, os.SEEK_END)
        b = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([b[0] ^ 0xFF]))
    whole = ms.Tensor(np.full(SHAPE, 5.0, np.float32))
    try:
        hm.dcp.load({"m.x": whole}, corrupt)
        raise AssertionError("a corrupted chunk was loaded")
    except ValueError as e:
        assert "checksum" in str(e), e
    check_equal(whole, np.full(SHAPE, 5.0, np.float32), "target unchanged after a refusal")
    check_equal(t.to_local(), before, "target unchanged after refusals")
    expect_raises(ValueError, lambda: hm.dcp.save({"x": object()}, os.path.join(base, "bad")),
                  "holds hyper.mindspore DTensors")
    # A save whose directory is a file on rank 0: every rank gets the SaveError.
    blocker = os.path.join(base, "blocker")
    if RANK == 0:
        open(blocker, "w").close()
    _comm_barrier()
    expect_raises(hm.SaveError, lambda: hm.dcp.save(
        {"x": distribute_tensor(g, mesh, (Shard(0),))}, blocker), "failed: rank 0", "not a directory")


def _comm_barrier():
    from hyper.mindspore import _comm
    _comm.barrier()


def main():
    out = os.environ["HYPER_TEST_OUT"]
    path = os.path.join(out, f"{RANK}.json")
    results = {}
    for name in sys.argv[1:]:
        print(f"rank {RANK}: case {name}", file=sys.stderr, flush=True)
        try:
            globals()["case_" + name]()
            results[name] = "ok"
        except Exception:  # noqa: BLE001
            results[name] = traceback.format_exc()
        with open(path + ".tmp", "w") as f:
            json.dump(results, f)
        os.replace(path + ".tmp", path)


if __name__ == "__main__":
    main()
