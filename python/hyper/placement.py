"""Placements: how each mesh dim lays out a tensor (PyTorch's names, plus RaggedShard).

- ``Shard(dim)``: tensor dim ``dim`` split across the mesh dim (torch.chunk sizes, uneven allowed).
- ``Replicate()``: every rank of the mesh dim holds the whole values.
- ``Partial(reduce_op="sum")``: every rank holds a part; the value is their sum / avg / max / min.
- ``RaggedShard(dims, local_units)``: the tensor's row-major storage cut into contiguous,
  non-uniform flat intervals, rank ``r`` of the mesh dim holding ``local_units[r]`` units of the
  prefix cells over ``dims`` (which must be ``(0, 1, ..., k-1)``).

Placements are immutable, comparable and hashable. Their checks are the C++ ones: a bad one
raises ValueError naming the values (``RaggedShard((1,), (1, 2))``: dims not a prefix).
"""

from . import _core

__all__ = ["Placement", "Shard", "Replicate", "Partial", "RaggedShard"]


class Placement:
    """Base of the four placements."""

    __slots__ = ()

    def is_shard(self, dim=None):
        return False

    def is_replicate(self):
        return False

    def is_partial(self, reduce_op=None):
        return False

    def is_ragged_shard(self):
        return False

    def _key(self):
        raise NotImplementedError

    def __eq__(self, other):
        return isinstance(other, Placement) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")


class Shard(Placement):
    __slots__ = ("dim",)

    def __init__(self, dim):
        if isinstance(dim, bool) or not isinstance(dim, int):
            raise TypeError(f"Shard(dim): dim must be an int, got {dim!r}")
        object.__setattr__(self, "dim", dim)

    def is_shard(self, dim=None):
        return dim is None or dim == self.dim

    def _key(self):
        return ("S", self.dim)

    def __repr__(self):
        return f"Shard(dim={self.dim})"


class Replicate(Placement):
    __slots__ = ()

    def is_replicate(self):
        return True

    def _key(self):
        return ("R",)

    def __repr__(self):
        return "Replicate()"


class Partial(Placement):
    __slots__ = ("reduce_op",)

    def __init__(self, reduce_op="sum"):
        object.__setattr__(self, "reduce_op", reduce_op)
        _core.check_placement(self._key())

    def is_partial(self, reduce_op=None):
        return reduce_op is None or reduce_op == self.reduce_op

    def _key(self):
        return ("P", self.reduce_op)

    def __repr__(self):
        return f"Partial({self.reduce_op})"


class RaggedShard(Placement):
    __slots__ = ("dims", "local_units")

    def __init__(self, dims, local_units):
        object.__setattr__(self, "dims", tuple(int(d) for d in dims))
        object.__setattr__(self, "local_units", tuple(int(u) for u in local_units))
        _core.check_placement(self._key())

    def is_ragged_shard(self):
        return True

    def _key(self):
        return ("RS", self.dims, self.local_units)

    def __repr__(self):
        return f"RaggedShard(dims={self.dims}, local_units={self.local_units})"


def _to_c(placements):
    """The placements as the tuples hyper._C and hyper._core read (TypeError for anything else)."""
    if isinstance(placements, Placement):
        raise TypeError("placements must be a sequence of placements, e.g. (Shard(0),), "
                        f"got the single placement {placements!r}")
    out = []
    for p in placements:
        if not isinstance(p, Placement):
            raise TypeError(f"not a placement: {p!r} (use hyper.Shard / Replicate / Partial / "
                            "RaggedShard)")
        out.append(p._key())
    return tuple(out)


def _from_c(keys):
    """The placements of hyper._C's / hyper._core's tuples."""
    out = []
    for k in keys:
        if k[0] == "S":
            out.append(Shard(k[1]))
        elif k[0] == "P":
            out.append(Partial(k[1]))
        elif k[0] == "RS":
            out.append(RaggedShard(k[1], k[2]))
        else:
            out.append(Replicate())
    return tuple(out)
