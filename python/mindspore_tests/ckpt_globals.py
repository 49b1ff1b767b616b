"""The global values of the cross-framework checkpoint test, shared by the PyTorch side
(torch_side.py) and the MindSpore side (ms_ranks.py): numpy only, every value exact in its
dtype (bfloat16 included)."""

import numpy as np

SHAPE = (6, 5, 8)


def tensors(generation=0):
    """name -> global numpy array; generation 1 is what the MindSpore side saves back."""
    out = {
        "w": np.arange(240, dtype=np.float32).reshape(SHAPE) / 8,
        "idx": (np.arange(240, dtype=np.int64) * 7 - 1000).reshape(SHAPE),
        "h": np.arange(60, dtype=np.float32).reshape(6, 10) / 4,  # stored as bfloat16
        "b": np.linspace(-1, 1, 10).astype(np.float64),           # a plain tensor
        "flags": (np.arange(12) % 3 == 0).reshape(3, 4),
    }
    if generation:
        out = {k: (~v if v.dtype == np.bool_ else v + 1) for k, v in out.items()}
    return out


def values(generation=0):
    return {"step": 7 + generation, "lr": 0.5, "tag": f"run-{generation}", "done": bool(generation)}


def ragged_units(n, rows):
    """Units for n ranks over `rows` prefix cells, one rank (the second) holding none."""
    u = [1] * n
    if n > 1:
        u[1] = 0
    while rows % sum(u):
        u[0] += 1
    return tuple(u)
