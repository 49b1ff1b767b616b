"""The PyTorch half of the cross-framework checkpoint test, under torchrun in the torch
environment: `save DIR` saves ckpt_globals' generation-0 values with hyper on PyTorch;
`check DIR` loads generation 1 (saved by hyper.mindspore) into other layouts and checks every
rank's values against the global arrays. Exits non-zero on any mismatch."""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hyper  # noqa: E402
from hyper import RaggedShard, Replicate, Shard, distribute_tensor  # noqa: E402
from ckpt_globals import ragged_units, tensors, values  # noqa: E402

DTYPES = {"w": torch.float32, "idx": torch.int64, "h": torch.bfloat16, "b": torch.float64,
          "flags": torch.bool}


def layouts(mode, n):
    if mode == "save":
        return {"w": (RaggedShard((0, 1), ragged_units(n, 30)),), "idx": (Shard(1),),
                "h": (Replicate(),), "flags": (Shard(0),)}
    return {"w": (Shard(0),), "idx": (Replicate(),), "h": (RaggedShard((0,), ragged_units(n, 6)),),
            "flags": (Shard(1),)}


def main():
    mode, path = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo")
    n = dist.get_world_size()
    mesh = hyper.init_device_mesh("cpu", (n,), timeout=60)
    gen = 0 if mode == "save" else 1
    glob = {k: torch.from_numpy(v).to(DTYPES[k]) for k, v in tensors(gen).items()}
    state = {}
    for k, pl in layouts(mode, n).items():
        src = glob[k] if mode == "save" else torch.zeros_like(glob[k])
        state[k] = distribute_tensor(src, mesh, pl)
    state["b"] = glob["b"].clone() if mode == "save" else torch.zeros_like(glob["b"])
    state.update(values(gen) if mode == "save" else {k: type(v)() for k, v in values(1).items()})
    if mode == "save":
        hyper.dcp.save(state, path)
        return
    hyper.dcp.load(state, path)
    for k, want in glob.items():
        got = state[k].full_tensor() if k != "b" else state[k]
        assert torch.equal(got, want), f"rank {dist.get_rank()}: {k}: {got} != {want}"
    assert {k: state[k] for k in values(1)} == values(1), state
    print(f"rank {dist.get_rank()}: generation 1 checked", flush=True)


if __name__ == "__main__":
    main()
