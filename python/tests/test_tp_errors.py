"""hyper.tp's refusals, raised before any collective (no ranks needed)."""

import pytest
from torch import nn

from hyper import Replicate, Shard
from hyper.tp import ColwiseParallel, PrepareModuleInput, RowwiseParallel, parallelize_module


def block():
    m = nn.Module()
    m.w1, m.norm = nn.Linear(4, 8), nn.LayerNorm(8)
    return m


def test_a_plan_name_that_matches_no_submodule():
    with pytest.raises(ValueError, match="'w3' names no submodule of Module .*w1, norm"):
        parallelize_module(block(), None, {"w3": ColwiseParallel()})


def test_a_plan_value_that_is_not_a_style():
    with pytest.raises(TypeError, match="parallelize_plan\\['w1'\\] is not a ParallelStyle"):
        parallelize_module(block(), None, {"w1": "colwise"})
    with pytest.raises(TypeError, match="must be a ParallelStyle or a dict"):
        parallelize_module(block(), None, [ColwiseParallel()])


def test_styles_refuse_modules_they_cannot_split():
    with pytest.raises(NotImplementedError, match="ColwiseParallel: nn.Linear and nn.Embedding only, got LayerNorm"):
        parallelize_module(block(), None, {"norm": ColwiseParallel()})
    with pytest.raises(NotImplementedError, match="RowwiseParallel: .* got LayerNorm"):
        parallelize_module(block(), None, {"norm": RowwiseParallel()})


def test_prepare_module_input_counts_must_agree():
    with pytest.raises(ValueError, match="2 input_layouts but 1 desired_input_layouts"):
        PrepareModuleInput(input_layouts=(Shard(0), None), desired_input_layouts=(Replicate(),))
