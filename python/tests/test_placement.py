"""Placements in one process: construction, checks, equality (no ranks needed)."""

import pytest

import hyper
from hyper import Partial, RaggedShard, Replicate, Shard


def test_placements_compare_and_hash():
    assert Shard(0) == Shard(0) and Shard(0) != Shard(1) and Shard(0) != Replicate()
    assert RaggedShard((0, 1), (1, 2)) == RaggedShard([0, 1], [1, 2])
    assert RaggedShard((0, 1), (1, 2)) != RaggedShard((0, 1), (2, 1))
    assert len({Shard(0), Shard(0), Replicate(), Partial(), Partial("sum")}) == 3
    assert Partial().reduce_op == "sum" and Partial("max").is_partial("max")
    assert Shard(1).is_shard() and Shard(1).is_shard(1) and not Shard(1).is_shard(0)
    assert RaggedShard((0,), (1, 2)).is_ragged_shard() and not Replicate().is_shard()
    assert repr(RaggedShard((0, 1), (1, 2))) == "RaggedShard(dims=(0, 1), local_units=(1, 2))"


def test_placements_are_immutable():
    s = Shard(0)
    with pytest.raises(AttributeError):
        s.dim = 1


@pytest.mark.parametrize("make, fragment", [
    (lambda: RaggedShard((1,), (1, 2)), "prefix"),
    (lambda: RaggedShard((), (1, 2)), "dims"),
    (lambda: RaggedShard((0,), ()), "units"),
    (lambda: RaggedShard((0,), (1, -1)), "negative"),
    (lambda: RaggedShard((0,), (0, 0)), "zero"),
    (lambda: Partial("prod"), "prod"),
])
def test_bad_placements_raise_value_error(make, fragment):
    with pytest.raises(ValueError, match=fragment):
        make()


def test_shard_dim_must_be_an_int():
    with pytest.raises(TypeError):
        Shard("0")


def test_error_types():
    assert issubclass(hyper.CommError, RuntimeError)
    assert issubclass(hyper.SaveError, RuntimeError)
    assert issubclass(hyper.IOError, OSError)
