"""hyper.fsdp: fully sharded data parallel on flat RaggedShard buckets (docs/fsdp.md).

    for block in model.layers:
        hyper.fsdp.fully_shard(block, mesh=mesh)
    hyper.fsdp.fully_shard(model, mesh=mesh)          # the root: what is left
    opt = torch.optim.AdamW(model.parameters())       # steps on the shards, no communication
    loss = model(x).sum(); loss.backward(); opt.step()

FSDP2's names and meaning (``torch.distributed.fsdp.fully_shard``). Each call makes one bucket
of the module's parameters not yet in one, in parameter order, in one flat buffer sharded over
the mesh's ranks as a RaggedShard (``shard_block`` elements per block: no block straddles two
ranks). Outside forward and backward every parameter is a DTensor on this rank's piece of it
(a view of the flat shard, placement RaggedShard over all its dims) and gradients arrive as
DTensors of the same layout. Inside, the parameters are views of one gathered flat buffer (the
all-gather writes straight into it: nothing is copied out), and each parameter's gradient is
reduce-scattered from where autograd left it into this rank's flat gradient shard (nothing is
copied in). The next bucket's all-gather is issued when one starts (the order of the first
forward; reversed in backward), and every reduce-scatter runs while backward goes on.
"""

import torch
import torch.nn as nn
from torch.utils._pytree import tree_flatten, tree_map

from . import _C

__all__ = ["FSDPModule", "MixedPrecisionPolicy", "fully_shard"]


class MixedPrecisionPolicy:
    """FSDP2's mixed precision: ``param_dtype`` (the dtype parameters are gathered and used in,
    None: theirs), ``reduce_dtype`` (the dtype gradients are reduced in, None: param_dtype's),
    ``cast_forward_inputs`` (floating-point tensors given to the module's forward are cast to
    ``param_dtype``). The sharded parameters, their gradients and the optimizer keep the
    parameters' own dtype."""

    def __init__(self, param_dtype=None, reduce_dtype=None, cast_forward_inputs=True):
        for name, d in (("param_dtype", param_dtype), ("reduce_dtype", reduce_dtype)):
            if d is not None and (not isinstance(d, torch.dtype) or not d.is_floating_point):
                raise ValueError(f"hyper.fsdp.MixedPrecisionPolicy: {name} must be a floating "
                                 f"torch.dtype or None, got {d!r}")
        self.param_dtype = param_dtype
        self.reduce_dtype = reduce_dtype
        self.cast_forward_inputs = bool(cast_forward_inputs)

    def __repr__(self):
        return (f"MixedPrecisionPolicy(param_dtype={self.param_dtype}, reduce_dtype="
                f"{self.reduce_dtype}, cast_forward_inputs={self.cast_forward_inputs})")


# Parameters already in a bucket (the sharded nn.Parameters) carry this attribute, so that an
# outer fully_shard leaves them to the inner one.
_MANAGED = "_hyper_fsdp_sharded"

_SHARDED, _GATHERING, _UNSHARDED = "sharded", "gathering", "unsharded"


def _wider_or_same(a, b):
    return a == b or torch.finfo(a).bits > torch.finfo(b).bits


def _alias(view):
    """A tensor on `view`'s storage, offset, shape and strides with a version counter of its
    own: the all-gather's writes into the buffer (in place, bumping the buffer's counter)
    must not look like in-place changes of the parameters autograd saved."""
    with torch.no_grad():
        t = torch.empty(0, dtype=view.dtype, device=view.device)
        return t.set_(view.untyped_storage(), view.storage_offset(), view.shape, view.stride())


class _Bucket:
    """One fully_shard call's state: its FlatBucket, the gathered buffer and the parameters
    as the module sees them in forward and backward (leaves viewing that buffer)."""

    def __init__(self, module, mesh, reshard_after_forward, shard_block, mp_policy):
        self.module = module
        self.mesh = mesh
        self.reshard_after_forward = reshard_after_forward
        self.mp = mp_policy
        self.requires_gradient_sync = True
        self.forward_prefetch = None   # explicit lists of FSDPModules, or None: recorded order
        self.backward_prefetch = None
        # The parameters, each once, with every (owner module, attribute) that holds it.
        params, holders, seen = [], [], {}
        for owner_name, owner in module.named_modules(remove_duplicate=False):
            for attr, p in list(owner._parameters.items()):
                if p is None or getattr(p, _MANAGED, False):
                    continue
                if id(p) not in seen:
                    seen[id(p)] = len(params)
                    params.append(p)
                    holders.append([])
                holders[seen[id(p)]].append((owner, attr))
        fqns = {id(p): n for n, p in module.named_parameters(remove_duplicate=False)}
        for p in params:
            name = fqns.get(id(p), "?")
            if p.dim() == 0 or p.numel() == 0:
                raise ValueError(f"hyper.fsdp.fully_shard: parameter '{name}' has shape "
                                 f"{tuple(p.shape)}; a RaggedShard needs at least one dim and "
                                 "one element")
        # Tensor-parallel parameters (DTensors on a tp mesh): the bucket shards their local
        # tensors over the data-parallel dim of the 2-D mesh [dp, tp] (DP x TP).
        self.tp_mesh, self.tp_placements, shard_dim = None, [], -1
        tp = [p for p in params if _C.is_dtensor(p)]
        if tp:
            plain = [fqns.get(id(p), "?") for p in params if not _C.is_dtensor(p)]
            if plain:
                raise ValueError(f"hyper.fsdp.fully_shard: parameter '{plain[0]}' is a plain "
                                 "tensor beside tensor-parallel DTensors in one bucket; "
                                 "distribute it on the tensor-parallel mesh too (Replicate)")
            tp_mesh = _C.device_mesh(tp[0])
            for p in tp:
                if _C.device_mesh(p) != tp_mesh or len(tp_mesh.shape) != 1:
                    raise ValueError(f"hyper.fsdp.fully_shard: parameter "
                                     f"'{fqns.get(id(p), '?')}' is a DTensor on "
                                     f"{_C.device_mesh(p)}; every parameter of a bucket must be "
                                     f"on one 1-D tensor-parallel mesh ({tp_mesh})")
            mesh = _dp_tp_mesh(mesh, tp_mesh)
            shard_dim = 0
            self.mesh = mesh
            self.tp_mesh = tp_mesh
            self.tp_placements = [tuple(_C.placements(p)) for p in params]
        dtypes = {p.dtype for p in params}
        if len(dtypes) > 1:
            raise ValueError("hyper.fsdp.fully_shard: one dtype per bucket, the parameters of "
                             f"{type(module).__name__} have {sorted(str(d) for d in dtypes)}")
        self.holders = holders
        self.requires_grad = [p.requires_grad for p in params]
        self.dtype = params[0].dtype if params else None
        self.param_dtype = (mp_policy.param_dtype or self.dtype) if params else None
        self.reduce_dtype = mp_policy.reduce_dtype or self.param_dtype
        self.fb = None
        self.sharded = []
        if params:
            with torch.no_grad():
                self.fb = _C.FlatBucket(mesh, [p.detach() for p in params], shard_block,
                                        shard_dim)
            self.sharded = [nn.Parameter(self.fb.param_over(i, self.fb.shard),
                                         requires_grad=p.requires_grad)
                            for i, p in enumerate(params)]
            for sp in self.sharded:
                setattr(sp, _MANAGED, True)
            self._show(self.sharded)
        self.state = _SHARDED
        self.full = None            # the gathered flat buffer (param_dtype); storage freed when
        self.leaves = []            # resharded; the leaves are views of it
        self.work = None
        self.cast_bytes = 0         # bytes cast for mixed precision (copies, as FSDP2's)
        self.reset_backward()

    # ---- gathering -----------------------------------------------------------------------

    def unshard_async(self):
        if self.fb is None or self.state != _SHARDED:
            return
        numel = self.fb.numel
        if self.full is None:
            self.full = torch.empty(numel, dtype=self.param_dtype, device=self.fb.shard.device)
            self.leaves = [nn.Parameter(_alias(v), requires_grad=rg)
                           for v, rg in zip(self.fb.views(self.full), self.requires_grad)]
            for leaf in self.leaves:
                if leaf.requires_grad:
                    leaf.register_post_accumulate_grad_hook(self._grad_ready)
        else:
            self.full.untyped_storage().resize_(numel * self.full.element_size())
        source = None
        if self.param_dtype != self.dtype:
            source = self.fb.shard.to(self.param_dtype)
            self.cast_bytes += source.numel() * source.element_size()
        self.work = self.fb.unshard_async(self.full, source)
        self.state = _GATHERING

    def unshard(self):
        self.unshard_async()
        if self.state == _GATHERING:
            self.work.wait()
            self.work = None
            self.state = _UNSHARDED

    def reshard(self):
        if self.state == _GATHERING:
            self.work.wait()
            self.work = None
        if self.state != _SHARDED and self.full is not None:
            self.full.untyped_storage().resize_(0)
        self.state = _SHARDED

    def show_gathered(self):
        """Registers the gathered parameters: the leaves, or under tensor parallelism DTensors
        on the tp mesh made of them (differentiable: their gradients reach the leaves)."""
        if self.tp_mesh is None:
            self._show(self.leaves)
            return
        self._show([_C.from_local(leaf, self.tp_mesh, ps, list(sp.shape), False)
                    for leaf, ps, sp in zip(self.leaves, self.tp_placements, self.sharded)])

    def _show(self, tensors):
        """Registers `tensors` as the module's parameters (every holder of each)."""
        for t, hs in zip(tensors, self.holders):
            for owner, attr in hs:
                owner._parameters[attr] = t

    # ---- gradients -----------------------------------------------------------------------

    def reset_backward(self):
        self.pre_backward_done = False
        self.grads_ready = 0
        self.reduced = False
        self.grad_work = None

    def _grad_ready(self, leaf):
        self.grads_ready += 1
        if self.grads_ready == sum(self.requires_grad):
            self.post_backward()

    def post_backward(self):
        """All this bucket's gradients of this backward are in: reduce-scatter them (unless
        gradient sync is off) and free the gathered buffer."""
        if self.reduced or self.fb is None:
            return
        self.reduced = True
        if self.requires_gradient_sync and any(l.grad is not None for l in self.leaves):
            grads = []
            for leaf, rg in zip(self.leaves, self.requires_grad):
                g = leaf.grad if rg else None
                if g is not None and g.dtype != self.param_dtype:
                    g = g.to(self.param_dtype)  # autograd made another dtype: not the fast path
                    self.cast_bytes += g.numel() * g.element_size()
                grads.append(g)
                leaf.grad = None
            # A wider reduce_dtype is the dtype the sum accumulates in; the gradients travel
            # in param_dtype (no cast copy, half the bytes of fp32 for bf16). A narrower one
            # is a cast before the reduction.
            wide = _wider_or_same(self.reduce_dtype, self.param_dtype)
            if not wide:
                grads = [None if g is None else g.to(self.reduce_dtype) for g in grads]
                self.cast_bytes += sum(g.numel() * g.element_size() for g in grads if g is not None)
            out = torch.empty(self.fb.shard.numel(), dtype=self.reduce_dtype,
                              device=self.fb.shard.device)
            self.grad_work = (self.fb.reduce_scatter_grads_async(grads, "avg", out), grads)
            # One reduction in flight: the previous bucket's completes now (it ran while this
            # bucket's backward computed), freeing the unsharded gradients it read.
            pending = self.run.reducing
            while pending:
                pending.pop(0).complete_reduce()
            pending.append(self)
        self.reshard()

    def complete_reduce(self):
        """Waits for this bucket's reduce-scatter and hands the gradient shard to the sharded
        parameters (accumulated into gradients already there)."""
        if self.grad_work is None:
            return
        shard = self.grad_work[0].wait()
        self.grad_work = None
        if shard.dtype != self.dtype:
            shard = shard.to(self.dtype)
            self.cast_bytes += shard.numel() * shard.element_size()
        for i, (sp, rg) in enumerate(zip(self.sharded, self.requires_grad)):
            if not rg:
                continue
            g = self.fb.param_over(i, shard)
            if sp.grad is None:
                sp.grad = g
            else:
                sp.grad.add_(g)

    def finish_backward(self):
        """At the end of backward: reduce what is still unreduced (parameters that got no
        gradient contribute zeros), hand the gradients over, free the gathered buffer."""
        if not self.reduced and self.grads_ready > 0:
            self.post_backward()
        self.complete_reduce()
        self.reshard()
        self.reset_backward()


class _Run:
    """What one root forward and its backward share: the buckets in the order their forward
    began (recorded on the root's first forward; prefetch follows it, reversed in backward)."""

    def __init__(self):
        self.order = []           # buckets by the start of their forward; [0] is the root's
        self.recorded = False
        self.reducing = []        # buckets whose reduce-scatter is in flight, oldest first
        self.backward_buckets = []
        self.callback_queued = False


_active = []   # the roots whose forward is running (nested calls of FSDP modules)


class FSDPModule:
    """Methods of a module given to ``fully_shard`` (FSDP2's names); ``isinstance(m,
    hyper.fsdp.FSDPModule)`` holds for it."""

    def unshard(self, async_op=False):
        """Gathers this module's parameters now (``async_op``: starts the all-gather; the
        module's forward waits for it)."""
        b = self._hyper_fsdp
        b.unshard_async() if async_op else b.unshard()

    def reshard(self):
        """Frees the gathered parameters (the sharded ones stay)."""
        self._hyper_fsdp.reshard()

    def set_requires_gradient_sync(self, requires_gradient_sync, *, recurse=True):
        """False: backward accumulates this module's gradients unreduced (gradient
        accumulation); the next backward with True reduces the sum."""
        for m in (self.modules() if recurse else [self]):
            if isinstance(m, FSDPModule):
                m._hyper_fsdp.requires_gradient_sync = bool(requires_gradient_sync)

    def set_reshard_after_forward(self, reshard_after_forward, *, recurse=True):
        for m in (self.modules() if recurse else [self]):
            if isinstance(m, FSDPModule):
                m._hyper_fsdp.reshard_after_forward = bool(reshard_after_forward)

    def set_modules_to_forward_prefetch(self, modules):
        """The FSDP modules whose all-gather starts when this module's forward begins
        (instead of the next one in the recorded order)."""
        self._hyper_fsdp.forward_prefetch = [_bucket_of(m, "forward prefetch") for m in modules]

    def set_modules_to_backward_prefetch(self, modules):
        """The FSDP modules whose all-gather starts when this module's backward begins."""
        self._hyper_fsdp.backward_prefetch = [_bucket_of(m, "backward prefetch") for m in modules]

    @property
    def fsdp_plan(self):
        """The bucket's layout as text (hyper-plan --bucket's)."""
        b = self._hyper_fsdp
        return b.fb.plan if b.fb is not None else "flat bucket: no parameters"

    @property
    def fsdp_copied_bytes(self):
        """Bytes this bucket copied outside collectives so far: casts for mixed precision and
        gradients that were not contiguous (gathers and reduce-scatters copy nothing)."""
        b = self._hyper_fsdp
        return b.cast_bytes + (b.fb.copied_bytes if b.fb is not None else 0)


def _bucket_of(module, what):
    if not isinstance(module, FSDPModule):
        raise ValueError(f"hyper.fsdp: {what}: {type(module).__name__} is not a module given to "
                         "fully_shard")
    return module._hyper_fsdp


def _pre_forward(module, args, kwargs):
    b = module._hyper_fsdp
    if not _active:
        run = b.run
        _active.append(run)
    else:
        run = _active[0]
        b.run = run
    if not run.recorded and b not in run.order:
        run.order.append(b)
    b.unshard()
    b.show_gathered()
    nexts = b.forward_prefetch
    if nexts is None and run.recorded and b in run.order:
        i = run.order.index(b)
        nexts = run.order[i + 1:i + 2]
    for n in nexts or []:
        n.unshard_async()
    if b.mp.cast_forward_inputs and b.param_dtype is not None and b.param_dtype != b.dtype:
        cast = lambda t: (t.to(b.param_dtype)
                          if isinstance(t, torch.Tensor) and t.is_floating_point() else t)
        args, kwargs = tree_map(cast, args), tree_map(cast, kwargs)
    return args, kwargs


def _post_forward(module, args, output):
    b = module._hyper_fsdp
    run = b.run
    b._show(b.sharded)
    # The root's parameters stay gathered: backward needs them first (FSDP2 does the same).
    if b.reshard_after_forward and module is not run.root:
        b.reshard()
    if torch.is_grad_enabled():
        if b not in run.backward_buckets:
            run.backward_buckets.append(b)
        for t in tree_flatten(output)[0]:
            if isinstance(t, torch.Tensor) and t.requires_grad:
                t.register_hook(lambda grad, b=b: _pre_backward(b))
    if run is b.run and _active and _active[0] is run and module is run.root:
        _active.clear()
        run.recorded = True
    return output


def _pre_backward(b):
    run = b.run
    if not run.callback_queued:
        run.callback_queued = True
        torch.autograd.Variable._execution_engine.queue_callback(lambda: _finish(run))
    if b.pre_backward_done:
        return
    b.pre_backward_done = True
    b.unshard()
    nexts = b.backward_prefetch
    if nexts is None and b in run.order:
        # Backward meets the root first (its outputs), then the others in reverse.
        backward = run.order[:1] + run.order[:0:-1]
        i = backward.index(b)
        nexts = backward[i + 1:i + 2]
    for n in nexts or []:
        if not n.pre_backward_done:
            n.unshard_async()


def _finish(run):
    run.callback_queued = False
    for b in run.backward_buckets:
        b.finish_backward()
    run.backward_buckets = []
    run.reducing = []


def _dp_tp_mesh(mesh, tp_mesh):
    """The 2-D [dp, tp] mesh of a bucket of tensor-parallel parameters on `tp_mesh`: `mesh`
    itself when it is 2-D with `tp_mesh` as its dim 1, else (FSDP2's form, `mesh` the 1-D dp
    mesh) a live 2-D mesh whose dims 0 and 1 are `mesh` and `tp_mesh`."""
    from .mesh import _live_meshes
    if len(mesh.shape) == 2:
        if mesh[1] != tp_mesh:
            raise ValueError(f"hyper.fsdp.fully_shard: the parameters are DTensors on {tp_mesh}, "
                             f"which is not dim 1 of the mesh {mesh} (data parallel x tensor "
                             "parallel takes the mesh [dp, tp])")
        return mesh
    for root in reversed(_live_meshes):
        if len(root.shape) == 2 and root[0] == mesh and root[1] == tp_mesh:
            return root
    raise ValueError(f"hyper.fsdp.fully_shard: the parameters are DTensors on {tp_mesh}; no 2-D "
                     f"mesh made by hyper.init_device_mesh has {mesh} as dim 0 and it as dim 1 "
                     "(pass the mesh [dp, tp] itself)")


def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_block=1,
                mp_policy=None):
    """Shards ``module``'s parameters not yet in a bucket as one flat RaggedShard bucket over
    the 1-D ``mesh`` (default: every rank), or over dim 1 of a 2-D mesh whose dim 0 holds
    replicas (FSDP2's HSDP: gradients reduce-scattered within a replica, then all-reduced
    across the replicas), and drives it from the module's forward and backward; returns
    ``module``, now also an ``FSDPModule``. Apply it to inner modules first
    (their own buckets), the root last.

    Data parallel x tensor parallel: when the parameters are DTensors on a 1-D tensor-parallel
    mesh (``hyper.tp.parallelize_module`` first; Shard or Replicate, even shards), the bucket
    holds their local tensors, sharded over dim 0 of the 2-D mesh [dp, tp] (``mesh`` itself,
    or FSDP2's form: ``mesh`` is its dp sub-mesh). The sharded parameters are DTensors on the
    2-D mesh, RaggedShard of the tp shard on dp beside the tp placement; in forward and
    backward the module sees DTensors on the tp mesh viewing the gathered buffer.

    Collective over the mesh (no communication: each rank
    keeps its pieces of the full parameters, which must be the same on every rank).

    ``reshard_after_forward``: free the gathered parameters after forward and gather them
    again for backward (True), or keep them until backward ends (False). ``shard_block``:
    elements per block (each rank's piece of each parameter is whole blocks of it, e.g. a
    quantization tile). ``mp_policy``: a MixedPrecisionPolicy.

    Raises ValueError for a mesh that is neither 1-D nor 2-D, a parameter without dims or elements,
    parameters of several dtypes, a module already given to fully_shard, bad options, or
    tensor-parallel parameters beside plain ones, on several meshes, Partial, or on a tp mesh
    that is not the mesh's dim 1.
    """
    if not isinstance(module, nn.Module):
        raise ValueError(f"hyper.fsdp.fully_shard: expected an nn.Module, got "
                         f"{type(module).__name__}")
    if isinstance(module, FSDPModule):
        raise ValueError(f"hyper.fsdp.fully_shard: {type(module).__name__} was already given to "
                         "fully_shard")
    if mesh is None:
        import torch.distributed as dist
        from .mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    if not isinstance(mesh, _C.DeviceMesh):
        raise ValueError(f"hyper.fsdp.fully_shard: mesh must be a hyper.DeviceMesh, got "
                         f"{type(mesh).__name__} (hyper.DeviceMesh.from_torch converts one)")
    if len(mesh.shape) not in (1, 2):
        raise ValueError(f"hyper.fsdp.fully_shard: the mesh must be 1-D (shard) or 2-D "
                         f"(replicate, shard: HSDP), got shape {list(mesh.shape)}")
    if not isinstance(shard_block, int) or isinstance(shard_block, bool) or shard_block < 1:
        raise ValueError(f"hyper.fsdp.fully_shard: shard_block must be an int >= 1, got "
                         f"{shard_block!r}")
    if not isinstance(reshard_after_forward, bool):
        raise ValueError("hyper.fsdp.fully_shard: reshard_after_forward must be a bool, got "
                         f"{reshard_after_forward!r}")
    if mp_policy is None:
        mp_policy = MixedPrecisionPolicy()
    if not isinstance(mp_policy, MixedPrecisionPolicy):
        raise ValueError("hyper.fsdp.fully_shard: mp_policy must be a "
                         f"hyper.fsdp.MixedPrecisionPolicy, got {type(mp_policy).__name__}")
    b = _Bucket(module, mesh, reshard_after_forward, shard_block, mp_policy)
    b.run = _Run()
    b.run.root = module
    module._hyper_fsdp = b
    module.register_forward_pre_hook(_pre_forward, with_kwargs=True)
    module.register_forward_hook(_post_forward)
    cls = module.__class__
    module.__class__ = type(f"FSDP{cls.__name__}", (FSDPModule, cls), {})
    return module
