"""Tensor parallelism for ``torch.nn`` modules with PyTorch's names and defaults
(``torch.distributed.tensor.parallel``), on hyper DTensors.

    from hyper.tp import ColwiseParallel, RowwiseParallel, parallelize_module
    parallelize_module(mlp, mesh, {"w1": ColwiseParallel(), "w2": RowwiseParallel()})

A style replaces the module's parameters by DTensor parameters of its layout and adds forward
hooks that lay out the inputs and outputs. Every redistribution at a module boundary is issued
with ``async_op=True``: the pending DTensor crosses the boundary and is waited for at its first
read, so the collective overlaps whatever runs in between (forward, and backward through the
asynchronous gradient redistribution). Values and gradients equal one device's.
"""

import fnmatch

import torch
from torch import nn

from .dtensor import DTensor, distribute_tensor, is_dtensor
from .placement import Replicate, Shard

__all__ = ["ParallelStyle", "ColwiseParallel", "RowwiseParallel", "SequenceParallel",
           "PrepareModuleInput", "PrepareModuleOutput", "parallelize_module"]


def _as_dtensor(x, mesh, layouts):
    """`x` as a DTensor: a DTensor as is, a local tensor as this rank's part of `layouts`."""
    if is_dtensor(x):
        return x
    return DTensor.from_local(x, mesh, layouts)


def _laid_out(x, mesh, layouts):
    """DTensor `x` in `layouts` (negative Shard dims counted from x's end), redistributed
    asynchronously when they differ."""
    want = tuple(Shard(p.dim + x.dim()) if isinstance(p, Shard) and p.dim < 0 else p
                 for p in layouts)
    if tuple(x.placements) == want:
        return x
    return x.redistribute(mesh, want, async_op=True)


def _one(layout):
    return layout if isinstance(layout, tuple) else (layout,)


def _distribute_param(module, name, mesh, placements):
    p = getattr(module, name, None)
    if p is None or is_dtensor(p):
        return
    dt = distribute_tensor(p.detach(), mesh, placements)
    module.register_parameter(name, nn.Parameter(dt, requires_grad=p.requires_grad))


def _hook_io(module, mesh, given, desired, output_layouts, use_local_output):
    """Hooks laying out the module's first input (a local tensor taken as `given`) as
    `desired`, and its DTensor output as `output_layouts` (local when `use_local_output`)."""

    def pre(mod, args):
        x = _laid_out(_as_dtensor(args[0], mesh, given), mesh, desired)
        return (x,) + tuple(args[1:])

    def post(mod, args, out):
        out = _laid_out(out, mesh, output_layouts)
        return out.to_local() if use_local_output else out

    module.register_forward_pre_hook(pre)
    module.register_forward_hook(post)


class ParallelStyle:
    """How one module is parallelized (`_apply`)."""

    def _apply(self, module, mesh):
        raise NotImplementedError


class ColwiseParallel(ParallelStyle):
    """nn.Linear: weight and bias Shard(0) (output features split); nn.Embedding: weight
    Shard(1). Input: `input_layouts` (default Replicate) made the module's Replicate input;
    output: Shard(-1) redistributed to `output_layouts`, a local tensor when
    `use_local_output`."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = _one(input_layouts or Replicate())
        self.output_layouts = _one(output_layouts or Shard(-1))
        self.use_local_output = use_local_output

    def _apply(self, module, mesh):
        if isinstance(module, nn.Linear):
            _distribute_param(module, "weight", mesh, (Shard(0),))
            _distribute_param(module, "bias", mesh, (Shard(0),))
        elif isinstance(module, nn.Embedding):
            _distribute_param(module, "weight", mesh, (Shard(1),))
        else:
            raise NotImplementedError(f"ColwiseParallel: nn.Linear and nn.Embedding only, got "
                                      f"{type(module).__name__}")
        _hook_io(module, mesh, self.input_layouts, (Replicate(),), self.output_layouts,
                 self.use_local_output)


class RowwiseParallel(ParallelStyle):
    """nn.Linear: weight Shard(1) (input features split), bias Replicate (added once, after the
    reduction); nn.Embedding: weight Shard(0) (rows split), a Replicate input. Input:
    `input_layouts` (default Shard(-1)); output: the Partial sum redistributed to
    `output_layouts` (default Replicate: an all-reduce; Shard(1): a reduce-scatter), a local
    tensor when `use_local_output`."""

    def __init__(self, *, input_layouts=None, output_layouts=None, use_local_output=True):
        self.input_layouts = _one(input_layouts) if input_layouts is not None else None
        self.output_layouts = _one(output_layouts or Replicate())
        self.use_local_output = use_local_output

    def _apply(self, module, mesh):
        if isinstance(module, nn.Linear):
            desired = (Shard(-1),)
            _distribute_param(module, "weight", mesh, (Shard(1),))
            _distribute_param(module, "bias", mesh, (Replicate(),))
        elif isinstance(module, nn.Embedding):
            desired = (Replicate(),)
            _distribute_param(module, "weight", mesh, (Shard(0),))
        else:
            raise NotImplementedError(f"RowwiseParallel: nn.Linear and nn.Embedding only, got "
                                      f"{type(module).__name__}")
        _hook_io(module, mesh, self.input_layouts or desired, desired, self.output_layouts,
                 self.use_local_output)


class SequenceParallel(ParallelStyle):
    """A module computed per position (nn.LayerNorm, nn.Dropout, RMSNorm, ...) on its input
    sharded along `sequence_dim`; its parameters Replicate. Output: the Shard(sequence_dim)
    DTensor, local when `use_local_output`."""

    def __init__(self, *, sequence_dim=1, use_local_output=False):
        self.sequence_dim = sequence_dim
        self.use_local_output = use_local_output

    def _apply(self, module, mesh):
        for name, _ in list(module.named_parameters(recurse=False)):
            _distribute_param(module, name, mesh, (Replicate(),))
        layout = (Shard(self.sequence_dim),)

        def pre(mod, args):
            x = _laid_out(_as_dtensor(args[0], mesh, layout), mesh, layout)
            return (x,) + tuple(args[1:])

        def post(mod, args, out):
            return out.to_local() if self.use_local_output else out

        module.register_forward_pre_hook(pre)
        module.register_forward_hook(post)


class PrepareModuleInput(ParallelStyle):
    """The module's positional inputs: each tensor given as `input_layouts[i]` (None: left
    alone) redistributed to `desired_input_layouts[i]`, local when `use_local_output`."""

    def __init__(self, *, input_layouts, desired_input_layouts, use_local_output=False):
        self.input_layouts = _one(input_layouts)
        self.desired_input_layouts = _one(desired_input_layouts)
        if len(self.input_layouts) != len(self.desired_input_layouts):
            raise ValueError(f"PrepareModuleInput: {len(self.input_layouts)} input_layouts but "
                             f"{len(self.desired_input_layouts)} desired_input_layouts")
        self.use_local_output = use_local_output

    def _apply(self, module, mesh):
        def pre(mod, args):
            if len(args) < len(self.input_layouts):
                raise ValueError(f"PrepareModuleInput: {len(self.input_layouts)} input_layouts "
                                 f"for a call with {len(args)} positional inputs")
            out = list(args)
            for i, (given, want) in enumerate(zip(self.input_layouts, self.desired_input_layouts)):
                if given is None or not isinstance(args[i], torch.Tensor):
                    continue
                x = _laid_out(_as_dtensor(args[i], mesh, _one(given)), mesh, _one(want))
                out[i] = x.to_local() if self.use_local_output else x
            return tuple(out)

        module.register_forward_pre_hook(pre)


class PrepareModuleOutput(ParallelStyle):
    """The module's tensor output(s): given as `output_layouts` redistributed to
    `desired_output_layouts`, local when `use_local_output`."""

    def __init__(self, *, output_layouts, desired_output_layouts, use_local_output=True):
        self.output_layouts = _one(output_layouts)
        self.desired_output_layouts = _one(desired_output_layouts)
        self.use_local_output = use_local_output

    def _apply(self, module, mesh):
        def one(o, given, want):
            if given is None or not isinstance(o, torch.Tensor):
                return o
            x = _laid_out(_as_dtensor(o, mesh, _one(given)), mesh, _one(want))
            return x.to_local() if self.use_local_output else x

        def post(mod, args, out):
            if isinstance(out, tuple):
                return tuple(one(o, g, w) for o, g, w in
                             zip(out, self.output_layouts, self.desired_output_layouts))
            return one(out, self.output_layouts[0], self.desired_output_layouts[0])

        module.register_forward_hook(post)


def parallelize_module(module, device_mesh, parallelize_plan):
    """Applies `parallelize_plan` (a ParallelStyle for `module` itself, or a dict from module
    names to styles; names may hold fnmatch wildcards, "layers.*.w1") and returns `module`.
    Raises ValueError for a name that matches no submodule."""
    if isinstance(parallelize_plan, ParallelStyle):
        parallelize_plan._apply(module, device_mesh)
        return module
    if not isinstance(parallelize_plan, dict):
        raise TypeError("parallelize_plan must be a ParallelStyle or a dict of them, got "
                        f"{type(parallelize_plan).__name__}")
    names = dict(module.named_modules())
    for pattern, style in parallelize_plan.items():
        if not isinstance(style, ParallelStyle):
            raise TypeError(f"parallelize_plan['{pattern}'] is not a ParallelStyle: {style!r}")
        hits = [n for n in names if n and fnmatch.fnmatchcase(n, pattern)]
        if not hits:
            raise ValueError(f"parallelize_module: '{pattern}' names no submodule of "
                             f"{type(module).__name__} (its submodules: "
                             f"{', '.join(n for n in names if n) or 'none'})")
        for n in hits:
            style._apply(names[n], device_mesh)
    return module

