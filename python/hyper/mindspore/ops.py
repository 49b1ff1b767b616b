"""Elementwise ops on hyper.mindspore DTensors: the seed's fail-closed whitelist (§4.7).

Each op runs MindSpore's own op on the local tensors (so gradients are MindSpore's) and wraps
the result with the layout of the first DTensor operand; a ragged operand's layout wins over a
non-ragged one. Rules, each refused with an error naming the values:
- DTensor operands must share mesh, global shape and placements (ValueError otherwise; a
  ragged operand beside a non-ragged DTensor is refused too: their local storages differ);
- a Partial operand is refused (NotImplementedError): an elementwise op of partial values is
  not the op of the sum, except for linear cases this whitelist does not single out;
- the other operand of a binary op is a DTensor or a Python number (a mindspore.Tensor is
  refused with TypeError: distribute it first).
Any other name, e.g. ``hyper.mindspore.ops.sum``, raises NotImplementedError.
"""

import numbers

import mindspore as ms
from mindspore import ops as msops

from .dtensor import DTensor

UNARY = {
    "abs": msops.abs, "absolute": msops.abs, "clone": lambda x: x.copy(), "cos": msops.cos,
    "exp": msops.exp, "gelu": lambda x: msops.gelu(x, approximate="none"),
    "isinf": msops.isinf, "isnan": msops.isnan, "log": msops.log, "neg": msops.neg,
    "negative": msops.neg, "relu": msops.relu, "rsqrt": msops.rsqrt,
    "sigmoid": msops.sigmoid, "silu": msops.silu, "sin": msops.sin, "sqrt": msops.sqrt,
    "square": msops.square,
}

BINARY = {
    "add": msops.add, "sub": msops.sub, "mul": msops.mul, "div": msops.div,
    "true_divide": msops.div, "real_div": msops.div, "pow": msops.pow,
    "rsub": lambda a, b: msops.sub(b, a), "rpow": lambda a, b: msops.pow(b, a),
}

__all__ = sorted(UNARY) + sorted(BINARY)


def _keys_text(d):
    return f"{d.placements} of shape {d.shape} on {d.device_mesh}"


def _result_spec(name, operands):
    dts = [o for o in operands if isinstance(o, DTensor)]
    first = next((d for d in dts if any(k[0] == "RS" for k in d._keys)), dts[0])
    for d in dts:
        if any(k[0] == "P" for k in d._keys):
            raise NotImplementedError(f"hyper.mindspore.ops.{name}: operand {_keys_text(d)} is "
                                      "Partial; redistribute it to Replicate or Shard first")
        if (d._mesh, d._keys, d._shape) != (first._mesh, first._keys, first._shape):
            raise ValueError(f"hyper.mindspore.ops.{name}: operands laid out differently: "
                             f"{_keys_text(first)} and {_keys_text(d)}; redistribute one to "
                             "the other's placements")
    return first


def _operand(name, o):
    if isinstance(o, DTensor):
        return o._local
    if isinstance(o, numbers.Number) and not isinstance(o, bool):
        return o
    raise TypeError(f"hyper.mindspore.ops.{name}: operand of type {type(o).__name__}; a DTensor "
                    "op takes DTensors and Python numbers (distribute a mindspore.Tensor "
                    "first)")


def _unary(name, fn):
    def op(x):
        if not isinstance(x, DTensor):
            raise TypeError(f"hyper.mindspore.ops.{name}: expected a DTensor, got "
                            f"{type(x).__name__}")
        spec = _result_spec(name, [x])
        return DTensor._make(fn(x._local), spec._mesh, spec._keys, spec._shape)
    op.__name__ = name
    return op


def _binary(name, fn):
    def op(a, b):
        if not isinstance(a, DTensor) and not isinstance(b, DTensor):
            raise TypeError(f"hyper.mindspore.ops.{name}: neither operand is a DTensor")
        spec = _result_spec(name, [a, b])
        return DTensor._make(fn(_operand(name, a), _operand(name, b)), spec._mesh, spec._keys,
                             spec._shape)
    op.__name__ = name
    return op


for _n, _f in UNARY.items():
    globals()[_n] = _unary(_n, _f)
for _n, _f in BINARY.items():
    globals()[_n] = _binary(_n, _f)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"hyper.mindspore.ops.{name}: not supported on DTensors "
                              f"(fail-closed; the elementwise whitelist is {__all__})")


def _install():
    """The Python operators of DTensor."""
    g = globals()
    pairs = {"__add__": "add", "__sub__": "sub", "__mul__": "mul", "__truediv__": "div",
             "__pow__": "pow", "__neg__": "neg", "__abs__": "abs"}
    for dunder, name in pairs.items():
        setattr(DTensor, dunder, g[name])
    DTensor.__radd__ = lambda self, other: g["add"](other, self)
    DTensor.__rmul__ = lambda self, other: g["mul"](other, self)
    DTensor.__rsub__ = lambda self, other: g["sub"](other, self)
    DTensor.__rtruediv__ = lambda self, other: g["div"](other, self)
    DTensor.__rpow__ = lambda self, other: g["pow"](other, self)


_install()
