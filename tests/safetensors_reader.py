"""The independent reader of hyper's checkpoint files in the tests.

Opens every safetensors file named on the command line with the `safetensors` package (the
format's reference implementation, from PyPI; scripts/deps.sh installs it into .venv) and prints
one JSON object: {file name: {key: {"dtype": "F32", "shape": [..], "values": [..]}}}, values
flattened in row-major order (BF16/F16 as floats, BOOL as booleans, integers as integers).
Exits non-zero on any file the package refuses.
"""
import json
import os
import sys

import torch
from safetensors import safe_open


def values_of(t: torch.Tensor):
    flat = t.reshape(-1)
    if t.dtype == torch.bool:
        return [bool(v) for v in flat.tolist()]
    if t.dtype.is_floating_point:
        return flat.to(torch.float64).tolist()
    return [int(v) for v in flat.tolist()]


def main(paths):
    out = {}
    for path in paths:
        tensors = {}
        with safe_open(path, framework="pt") as f:
            for key in f.keys():
                s = f.get_slice(key)
                tensors[key] = {
                    "dtype": s.get_dtype(),
                    "shape": list(s.get_shape()),
                    "values": values_of(f.get_tensor(key)),
                }
        out[os.path.basename(path)] = tensors
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1:])
