"""The multi-rank cases of hyper.fsdp (run like ranks.py's by test_fsdp.py). A Llama-style
model trains with hyper.fsdp.fully_shard; its losses and parameters are checked against the
same model trained on one device on the whole global batch, and against PyTorch's FSDP2
(torch.distributed.fsdp.fully_shard) on the same buckets and seeds."""

import copy
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy as TorchMP
from torch.distributed.fsdp import fully_shard as torch_fully_shard

import hyper
from hyper.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from llama import Llama, batch, loss_of, tensor_parallel
from ranks import TIMEOUT, expect_raises, main, world_mesh

PER_RANK = 2  # sequences per rank and step


def shard_llama(model, mesh, **kw):
    """fully_shard per block, then the root (embedding, final norm, output)."""
    for block in model.layers:
        fully_shard(block, mesh=mesh, **kw)
    fully_shard(model, mesh=mesh, **{k: v for k, v in kw.items() if k != "shard_block"})
    return model


def fsdp_modules(model):
    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def global_loss(loss):
    """The mean of the ranks' losses (each the mean over its rows: the global batch's mean)."""
    t = (loss.full_tensor() if hyper.is_dtensor(loss) else loss).detach().clone().float()
    dist.all_reduce(t)
    return (t / dist.get_world_size()).item()


def local_rows(tokens):
    r = dist.get_rank()
    return tokens[r * PER_RANK:(r + 1) * PER_RANK]


def check_close(name, got, want, rtol, atol):
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        raise AssertionError(f"{name}: max abs difference {(got - want).abs().max().item():.3g} "
                             f"(rtol {rtol}, atol {atol})")


def check_params(model, ref, rtol, atol, what):
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert hyper.is_dtensor(p), f"{what}: {name} is not a DTensor outside forward"
        full = p.full_tensor() if hyper.is_dtensor(p) else p.full_tensor()
        check_close(f"{what}: parameter {name}", full, q.detach(), rtol, atol)


def check_blocks(name, p, block):
    """Every rank's piece of sharded parameter `p` starts on a block boundary counted from the
    parameter's first element: whole blocks, the last piece possibly ending short."""
    units = p.placements[0].local_units
    total, at = sum(units), 0
    for r, u in enumerate(units):
        start = p.numel() * at // total
        assert start % block == 0 or start == p.numel(), \
            f"{name}: rank {r}'s piece starts at element {start}"
        at += u
    assert p.to_local().numel() == p.numel() * units[dist.get_rank()] // total


def train(model, opt, steps, clip=None, micro=1, sharded=True, rows=local_rows):
    """`steps` steps of `micro` micro-batches each (gradient sync on the last); returns the
    global losses. `sharded`: this rank's rows (`rows` of the global batch), the loss averaged
    over the ranks; else the same steps on one device over the whole global batch."""
    losses = []
    for step in range(steps):
        total = 0.0
        for m in range(micro):
            if micro > 1 and hasattr(model, "set_requires_gradient_sync"):
                model.set_requires_gradient_sync(m == micro - 1)
            tokens = batch(step * micro + m, dist.get_world_size(), PER_RANK)
            loss = loss_of(model, rows(tokens) if sharded else tokens)
            loss.backward()
            total += global_loss(loss) if sharded else loss.item()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        opt.zero_grad()
        losses.append(total)
    return losses


def case_llama_vs_single_device():
    """fully_shard per block (blocks of 4 elements) and the root; AdamW with gradient
    clipping, 3 steps: losses and parameters equal the single-device run's (fp32)."""
    torch.manual_seed(0)
    ref = Llama()
    model = shard_llama(copy.deepcopy(ref), world_mesh(), shard_block=4)
    # The gradients of one backward: DTensors laid out as their parameters, equal to the
    # single device's over the global batch.
    loss_of(model, local_rows(batch(9, dist.get_world_size(), PER_RANK))).backward()
    loss_of(ref, batch(9, dist.get_world_size(), PER_RANK)).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad.placements == p.placements, name
        check_close(f"gradient of {name}", p.grad.full_tensor(), q.grad, 1e-5, 1e-7)
        p.grad, q.grad = None, None
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    got = train(model, opt, 3, clip=0.5)
    want = train(ref, ref_opt, 3, clip=0.5, sharded=False)
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-5 * abs(w), f"step {step}: loss {g} vs single device {w}"
    check_params(model, ref, 1e-4, 1e-5, "AdamW vs single device")
    for m in model.layers:  # the blocks (the root's bucket has blocks of 1)
        for name, p in m.named_parameters():
            check_blocks(name, p, 4)
    # Nothing was copied outside the collectives.
    assert all(m.fsdp_copied_bytes == 0 for m in fsdp_modules(model))


def case_llama_vs_fsdp2():
    """The same model, seeds and buckets under PyTorch's FSDP2: losses and parameters after
    3 SGD-with-momentum steps agree, with reshard_after_forward True and False."""
    for reshard in (True, False):
        torch.manual_seed(0)
        base = Llama()
        model = shard_llama(copy.deepcopy(base), world_mesh(), reshard_after_forward=reshard)
        peer = copy.deepcopy(base)
        tm = torch_mesh("cpu", (dist.get_world_size(),))
        for block in peer.layers:
            torch_fully_shard(block, mesh=tm, reshard_after_forward=reshard)
        torch_fully_shard(peer, mesh=tm, reshard_after_forward=reshard)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        peer_opt = torch.optim.SGD(peer.parameters(), lr=0.1, momentum=0.9)
        got = train(model, opt, 3)
        want = train(peer, peer_opt, 3)
        for step, (g, w) in enumerate(zip(got, want)):
            assert abs(g - w) <= 1e-6 * abs(w), f"reshard {reshard} step {step}: {g} vs FSDP2 {w}"
        for (name, p), q in zip(model.named_parameters(), peer.parameters()):
            check_close(f"reshard {reshard}: {name} vs FSDP2", p.full_tensor(), q.full_tensor(),
                        1e-6, 1e-7)


def case_hsdp():
    """A 2-D mesh (replicate, shard): each replica group shards the buckets, gradients are
    reduce-scattered within it and all-reduced across the replicas. Against one device and
    against FSDP2's HSDP on the same 2-D mesh shape, 2 SGD-with-momentum steps."""
    n = dist.get_world_size()
    shape = (n // 2, 2)
    torch.manual_seed(0)
    base = Llama()
    ref = copy.deepcopy(base)
    model = shard_llama(copy.deepcopy(base), hyper.init_device_mesh("cpu", shape,
                                                                    timeout=TIMEOUT))
    w = model.layers[0].attention.wq.weight
    assert isinstance(w.placements[0], hyper.Replicate) and \
        isinstance(w.placements[1], hyper.RaggedShard), w.placements
    peer = copy.deepcopy(base)
    tm = torch_mesh("cpu", shape, mesh_dim_names=("replicate", "shard"))
    for block in peer.layers:
        torch_fully_shard(block, mesh=tm)
    torch_fully_shard(peer, mesh=tm)
    sides = {"hyper": model, "FSDP2": peer}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for k, m in sides.items()}
    losses = {k: train(m, opts[k], 2) for k, m in sides.items()}
    want = train(ref, torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9), 2,
                 sharded=False)
    for step in range(2):
        g, f, w1 = losses["hyper"][step], losses["FSDP2"][step], want[step]
        assert abs(g - w1) <= 1e-5 * abs(w1) and abs(g - f) <= 1e-6 * abs(f), (g, f, w1)
    check_params(model, ref, 1e-5, 1e-6, "HSDP vs single device")
    for (name, p), q in zip(model.named_parameters(), peer.parameters()):
        check_close(f"HSDP {name} vs FSDP2", p.full_tensor(), q.full_tensor(), 1e-6, 1e-7)


def tensor_parallel_llama(model, tp_mesh):
    """hyper.tp on the blocks, every other parameter Replicate on the tp mesh."""
    import hyper.tp
    return tensor_parallel(model, tp_mesh, hyper.tp,
                           lambda t, m: hyper.distribute_tensor(t, m, [hyper.Replicate()]))


def case_dp_tp():
    """Data parallel x tensor parallel on the mesh [dp, tp=2]: blocks tensor-parallel
    (hyper.tp), then fully_shard per block and the root over dp (FSDP2's form: mesh is the dp
    sub-mesh). Each dp rank trains on its rows; after 2 SGD-with-momentum steps with
    clip_grad_norm_, losses and parameters equal one device's on the global batch; the sharded parameters are
    RaggedShard on dp of each tp shard, and their gradients are laid out alike."""
    n = dist.get_world_size()
    mesh = hyper.init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("dp", "tp"),
                                  timeout=TIMEOUT)
    torch.manual_seed(0)
    ref = Llama(heads=4)
    model = tensor_parallel_llama(copy.deepcopy(ref), mesh["tp"])
    shard_llama(model, mesh["dp"], shard_block=4)
    w1 = model.layers[0].feed_forward.w1.weight
    assert isinstance(w1.placements[0], hyper.RaggedShard) and \
        w1.placements[1] == hyper.Shard(0), w1.placements
    assert w1.to_local().numel() == w1.numel() // 2 * w1.placements[0].local_units[
        mesh.get_local_rank(0)] // sum(w1.placements[0].local_units)
    dp = mesh.get_local_rank(0)
    per = PER_RANK * 2  # the rows of a dp rank (its tp ranks share them)
    dp_rows = lambda tokens: tokens[dp * per:(dp + 1) * per]
    # One backward: the gradients are laid out as the parameters and equal one device's.
    loss_of(model, dp_rows(batch(9, n, PER_RANK))).backward()
    loss_of(ref, batch(9, n, PER_RANK)).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        assert p.grad.placements == p.placements, name
        check_close(f"DP x TP gradient of {name}", p.grad.full_tensor(), q.grad, 1e-5, 1e-7)
        p.grad, q.grad = None, None
    # (SGD: tensor parallelism sums the row-wise products in another order, and Adam would
    # turn that rounding into lr-sized steps where a gradient is near zero.)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    got = train(model, opt, 2, clip=0.5, rows=dp_rows)
    want = train(ref, ref_opt, 2, clip=0.5, sharded=False)
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-5 * abs(w), f"DP x TP step {step}: loss {g} vs one device {w}"
    check_params(model, ref, 1e-5, 1e-6, "DP x TP SGD vs single device")
    assert all(m.fsdp_copied_bytes == 0 for m in fsdp_modules(model))
    # The checkpoint (model and optimizer state, each shard's boxes) loads into fully_shard over
    # all ranks without tensor parallelism (other layouts).
    path = os.path.join(os.environ["HYPER_TEST_OUT"], f"dp_tp_ckpt_{n}")
    hyper.dcp.save(checkpoint_state(model, opt), path)
    torch.manual_seed(1)
    flat = shard_llama(Llama(heads=4), world_mesh(), shard_block=8)
    flat_opt = torch.optim.SGD(flat.parameters(), lr=0.1, momentum=0.9)
    for p in flat.parameters():
        p.grad = torch.zeros_like(p)
    flat_opt.step()
    flat_opt.zero_grad()
    hyper.dcp.load(checkpoint_state(flat, flat_opt), path)
    check_params(flat, ref, 1e-5, 1e-6, "DP x TP checkpoint loaded into fully_shard")
    for (name, p), q in zip(flat.named_parameters(), ref.parameters()):
        check_close(f"loaded momentum of {name}",
                    flat_opt.state[p]["momentum_buffer"].full_tensor(),
                    ref_opt.state[q]["momentum_buffer"], 1e-5, 1e-6)
    # Refusals: plain parameters beside tensor-parallel ones, and a mesh whose dim 1 is not
    # the parameters' tp mesh.
    mixed = tensor_parallel_llama(Llama(heads=4), mesh["tp"])
    mixed.norm.weight = nn.Parameter(torch.ones(48))
    expect_raises(ValueError, lambda: fully_shard(mixed, mesh=mesh["dp"]),
                  "parameter 'norm.weight' is a plain tensor beside tensor-parallel DTensors")
    other = hyper.init_device_mesh("cpu", (1, n), timeout=TIMEOUT)
    expect_raises(ValueError,
                  lambda: fully_shard(tensor_parallel_llama(Llama(heads=4), mesh["tp"]),
                                      mesh=other), "which is not dim 1 of the mesh")


def case_reshard_after_forward():
    """The gathered buffer of a block is freed after its forward (True) or kept until the
    backward ends (False); during forward the parameters are views of that buffer (no
    copy-out) and outside they are DTensors."""
    for reshard in (True, False):
        torch.manual_seed(0)
        model = shard_llama(Llama(), world_mesh(), reshard_after_forward=reshard)
        block = model.layers[0]
        b = block._hyper_fsdp
        seen = {}

        def inside(mod, args):
            w = mod.attention.wq.weight
            seen["plain"] = not hyper.is_dtensor(w)
            base = b.full.data_ptr()
            seen["view"] = base <= w.data_ptr() < base + b.full.numel() * b.full.element_size()

        h = block.register_forward_pre_hook(inside)
        # The FSDP pre-hook ran first (registered at fully_shard): the parameters are views.
        loss = loss_of(model, local_rows(batch(0, dist.get_world_size(), PER_RANK)))
        h.remove()
        assert seen == {"plain": True, "view": True}, seen
        kept = b.full.untyped_storage().nbytes()
        assert (kept == 0) == reshard, f"reshard {reshard}: {kept} bytes kept after forward"
        assert hyper.is_dtensor(block.attention.wq.weight)
        loss.backward()
        assert b.full.untyped_storage().nbytes() == 0, "not freed after backward"
        for name, p in block.named_parameters():
            assert hyper.is_dtensor(p.grad), f"{name}: gradient is not a DTensor"
            assert p.grad.placements == p.placements, name


def case_prefetch():
    """From the second step on, a block's forward starts the next block's all-gather and its
    backward the previous block's (the order of the first forward); explicit prefetch
    replaces that order."""
    torch.manual_seed(0)
    model = shard_llama(Llama(layers=3), world_mesh())
    blocks = [blk._hyper_fsdp for blk in model.layers]
    seen = []
    model.layers[0].register_forward_pre_hook(
        lambda mod, args: seen.append(("forward 0", [b.state for b in blocks])))
    # Inside block 2's backward (its last module), after the block's own pre-backward ran.
    model.layers[2].feed_forward.register_full_backward_pre_hook(
        lambda mod, grad: seen.append(("backward 2", [b.state for b in blocks])))
    for step in range(2):
        loss_of(model, local_rows(batch(step, dist.get_world_size(), PER_RANK))).backward()
    first, second = seen[:2], seen[2:]
    assert first[0] == ("forward 0", ["unsharded", "sharded", "sharded"]), first
    assert second[0] == ("forward 0", ["unsharded", "gathering", "sharded"]), second
    # Block 2's backward began: block 1's all-gather is on its way (or done); block 0's not.
    assert second[1][1][0] == "sharded" and second[1][1][1] in ("gathering", "unsharded") \
        and second[1][1][2] == "unsharded", second
    seen.clear()
    model.layers[0].set_modules_to_forward_prefetch([model.layers[2]])
    model.layers[2].set_modules_to_backward_prefetch([model.layers[0]])
    loss_of(model, local_rows(batch(2, dist.get_world_size(), PER_RANK))).backward()
    assert seen[0] == ("forward 0", ["unsharded", "sharded", "gathering"]), seen
    # Block 2's backward started block 0's gather instead of block 1's.
    assert seen[1][1][0] in ("gathering", "unsharded") and seen[1][1][1] == "sharded", seen


def case_mixed_precision():
    """param_dtype bfloat16, reduce_dtype float32 against FSDP2 with the same policy: the
    gathered parameters are bf16, the sharded ones and their gradients fp32; losses and
    parameters agree with FSDP2's."""
    torch.manual_seed(0)
    base = Llama()
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    model = shard_llama(copy.deepcopy(base), world_mesh(), mp_policy=mp)
    peer = copy.deepcopy(base)
    tm = torch_mesh("cpu", (dist.get_world_size(),))
    tmp = TorchMP(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in peer.layers:
        torch_fully_shard(block, mesh=tm, mp_policy=tmp)
    torch_fully_shard(peer, mesh=tm, mp_policy=tmp)
    dtypes = {}
    h = model.layers[1].feed_forward.register_forward_pre_hook(
        lambda mod, args: dtypes.update(w=mod.w1.weight.dtype, x=args[0].dtype))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    peer_opt = torch.optim.SGD(peer.parameters(), lr=0.1)
    got = train(model, opt, 2)
    want = train(peer, peer_opt, 2)
    h.remove()
    assert dtypes == {"w": torch.bfloat16, "x": torch.bfloat16}, dtypes
    for p in model.parameters():
        assert p.dtype == torch.float32
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-6 * abs(w), f"step {step}: {g} vs FSDP2 {w}"
    for (name, p), q in zip(model.named_parameters(), peer.parameters()):
        check_close(f"bf16 {name} vs FSDP2", p.full_tensor(), q.full_tensor(), 1e-6, 1e-7)
    # The copies are the casts (shards to bf16, gradients to fp32): counted, as FSDP2's.
    assert all(m.fsdp_copied_bytes > 0 for m in fsdp_modules(model))


def case_gradient_accumulation():
    """Two micro-batches per step, gradient sync on the second only: the same as one device
    backpropagating both micro-batches over the whole global batch."""
    torch.manual_seed(0)
    ref = Llama()
    model = shard_llama(copy.deepcopy(ref), world_mesh())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    got = train(model, opt, 2, micro=2)
    want = train(ref, ref_opt, 2, micro=2, sharded=False)
    for step, (g, w) in enumerate(zip(got, want)):
        assert abs(g - w) <= 1e-5 * abs(w), f"step {step}: loss {g} vs single device {w}"
    check_params(model, ref, 1e-5, 1e-6, "accumulation vs single device")


def reference_after(steps, ranks):
    """The single-device model and its SGD with momentum after `steps` steps over `ranks`
    ranks' batches."""
    torch.manual_seed(0)
    ref = Llama()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        loss_of(ref, batch(step, ranks, PER_RANK)).backward()
        opt.step()
        opt.zero_grad()
    return ref, opt


def checkpoint_state(model, opt):
    """The model's and the optimizer's state as hyper.dcp saves and loads it."""
    return {"model": model.state_dict(), "optim": opt.state_dict()["state"]}


def case_checkpoint_save():
    """One SGD-with-momentum step with fully_shard (blocks of 4) on this many ranks, then the
    model and optimizer state saved with hyper.dcp (ragged shards as boxes, no
    communication)."""
    torch.manual_seed(0)
    model = shard_llama(Llama(), world_mesh(), shard_block=4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train(model, opt, 1)
    hyper.dcp.save(checkpoint_state(model, opt), os.environ["HYPER_TEST_CKPT"])


def case_checkpoint_load():
    """The checkpoint of case_checkpoint_save (saved on HYPER_TEST_SAVED_RANKS ranks) loaded
    into fully_shard on this many ranks with other units (blocks of 8): the parameters equal
    one device's after that step, and one more step from the loaded optimizer state equals
    one device's second step; loaded into PyTorch's FSDP2 layout (Shard(0)) as well."""
    path, saved = os.environ["HYPER_TEST_CKPT"], int(os.environ["HYPER_TEST_SAVED_RANKS"])
    torch.manual_seed(1)  # other initial values: the load must replace them all
    model = shard_llama(Llama(), world_mesh(), shard_block=8)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for p in model.parameters():  # the optimizer's state exists before it is loaded into
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad()
    hyper.dcp.load(checkpoint_state(model, opt), path)
    ref, ref_opt = reference_after(1, saved)
    check_params(model, ref, 1e-5, 1e-7, "loaded")
    # One more step on this world size's batches from the loaded state.
    tokens = batch(1, dist.get_world_size(), PER_RANK)
    loss_of(model, local_rows(tokens)).backward()
    opt.step()
    loss_of(ref, tokens).backward()
    ref_opt.step()
    check_params(model, ref, 1e-5, 1e-6, "a step after loading")
    # FSDP2's layout: its torch DTensors (Shard(0)) loaded in place.
    peer = Llama()
    tm = torch_mesh("cpu", (dist.get_world_size(),))
    for block in peer.layers:
        torch_fully_shard(block, mesh=tm)
    torch_fully_shard(peer, mesh=tm)
    hyper.dcp.load({"model": peer.state_dict()}, path)
    ref, _ = reference_after(1, saved)
    for (name, p), q in zip(peer.named_parameters(), ref.parameters()):
        check_close(f"FSDP2 {name}", p.full_tensor(), q.detach(), 1e-5, 1e-7)


class Tiny(nn.Module):
    """A bucket smaller than its blocks: some ranks hold nothing."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([1.5, -0.5, 2.0]))
        self.lin = nn.Linear(3, 2)

    def forward(self, x):
        return self.lin(x * self.scale)


def case_zero_unit_ranks():
    """A bucket of 11 elements (parameters of 3, 6 and 2) in blocks of 8: its boundaries can
    only be 0, 3, 9 and 11, so on 4 ranks one holds nothing; it takes part in every
    collective, and one SGD step equals the single-device one."""
    torch.manual_seed(0)
    ref = Tiny()
    model = fully_shard(copy.deepcopy(ref), mesh=world_mesh(), shard_block=8)
    units = model._hyper_fsdp.fb.rank_units
    assert sum(units) == 11, units
    if dist.get_world_size() == 4:
        assert units == [3, 0, 6, 2], units
    for name, p in model.named_parameters():
        check_blocks(name, p, 8)
    x = torch.arange(24.0).reshape(8, 3) / 10
    r, n = dist.get_rank(), dist.get_world_size()
    rows = 8 // n
    for m, xs in ((model, x[r * rows:(r + 1) * rows]), (ref, x)):
        m(xs).pow(2).mean().backward()
        torch.optim.SGD(m.parameters(), lr=0.1).step()
    check_params(model, ref, 1e-6, 1e-6, "zero-unit ranks")


def case_refusals():
    """fully_shard's refusals name the values; nothing is sharded."""
    mesh = world_mesh()

    class Scalar(nn.Module):
        def __init__(self):
            super().__init__()
            self.s = nn.Parameter(torch.tensor(2.0))

    expect_raises(ValueError, lambda: fully_shard(Scalar(), mesh=mesh),
                  "parameter 's' has shape ()", "at least one dim")
    n = dist.get_world_size()
    mesh3 = hyper.init_device_mesh("cpu", (n // 2, 2, 1), timeout=TIMEOUT)
    expect_raises(ValueError, lambda: fully_shard(nn.Linear(2, 2), mesh=mesh3),
                  "the mesh must be 1-D (shard) or 2-D (replicate, shard: HSDP), got shape "
                  f"[{n // 2}, 2, 1]")
    expect_raises(ValueError, lambda: fully_shard(nn.Linear(2, 2), mesh=mesh, shard_block=0),
                  "shard_block must be an int >= 1, got 0")
    expect_raises(ValueError, lambda: MixedPrecisionPolicy(param_dtype=torch.int32),
                  "param_dtype must be a floating torch.dtype or None, got torch.int32")
    expect_raises(ValueError, lambda: fully_shard(nn.Linear(2, 2), mesh=mesh, mp_policy="bf16"),
                  "mp_policy must be a hyper.fsdp.MixedPrecisionPolicy, got str")
    expect_raises(ValueError, lambda: fully_shard(nn.Linear(2, 2), mesh="world"),
                  "mesh must be a hyper.DeviceMesh, got str")
    mixed = nn.Linear(2, 2)
    mixed.bias = nn.Parameter(torch.ones(2, dtype=torch.float64))
    expect_raises(ValueError, lambda: fully_shard(mixed, mesh=mesh),
                  "one dtype per bucket", "torch.float32", "torch.float64")
    assert not hyper.is_dtensor(mixed.weight), "a refused call changed the module"
    lin = fully_shard(nn.Linear(2, 2), mesh=mesh)
    expect_raises(ValueError, lambda: fully_shard(lin, mesh=mesh),
                  "Linear was already given to fully_shard")
    expect_raises(ValueError, lambda: lin.set_modules_to_forward_prefetch([nn.Linear(1, 1)]),
                  "forward prefetch: Linear is not a module given to fully_shard")


def case_rank_dies_mid_step():
    """The last rank exits during its backward (after its first block's reduce-scatter was
    issued); every other rank raises hyper.CommError naming the failure within the mesh's
    3 s limit instead of hanging."""
    mesh = hyper.init_device_mesh("cpu", (dist.get_world_size(),), timeout=3)
    torch.manual_seed(0)
    model = shard_llama(Llama(), mesh)
    last = dist.get_world_size() - 1
    if dist.get_rank() == last:
        # Exit status 0: the launcher (torchrun) stops the other ranks when one fails, which
        # would end them before they report; the sockets close the same way either way.
        model.layers[1].register_full_backward_hook(lambda *a: os._exit(0))
    loss = loss_of(model, local_rows(batch(0, dist.get_world_size(), PER_RANK)))
    try:
        loss.backward()
    except hyper.CommError as e:
        assert "timed out" in str(e) or "closed" in str(e) or "Connection" in str(e), str(e)
        return
    raise AssertionError("backward finished although a rank died")


if __name__ == "__main__":
    main(globals())
