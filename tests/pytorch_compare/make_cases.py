#!/usr/bin/env python3
"""Writes cases.json: the catalogue of op/layout cases that compare_dtensor.py runs through
PyTorch DTensor and dispatch_cases (hyper/tensor/dispatch/dispatch_cases.cc) runs through
hyper. Both sides read the flat list in cases.json; this script only generates it (run it
after changing the catalogue: `python3 tests/pytorch_compare/make_cases.py`). The
"explained" list of cases.json is kept as it is: groups {"key", "verdict", "why", "ids"} saying
why hyper and PyTorch DTensor differ on those cases (compare_dtensor.py checks it).

A case: {"id", "mesh": [2] | [4] | [2, 2], "op" (a name of ops.json, the ATen call both sides
         run, with "@name" its args), "args": {...},
         "inputs": [{"shape", "placements": ["S(0)", ...], "values": "a" | "b"}],
         "hyper_only": true (optional: RaggedShard, which PyTorch DTensor lacks; compare_dtensor.py
         skips these, hyper's gtest DispatchCatalogue.* runs them)}
Values: "a" = linspace(-2, 3) over the elements, "b" = cos(i) + 1.5 (float64), the same
functions as hyper/tensor/dispatch/testing_dispatch.h's global_a / global_b; "mask" = a > 0
(bool); a list of ints: those values (int64, embedding ids). An input with "plain": true (and
"placements": []) is passed as the plain global tensor on every rank, not a DTensor.
Partial inputs hold unequal shares on both sides (testing_dispatch.h's make): P(sum)
coordinate c holds (c+1)/S of the value (S = 1+...+n), P(avg) n times that, P(max)/P(min)
coordinate c holds value -c / +c.
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
cases = []


def add(mesh, op, inputs, args=None, tag="", hyper_only=False):
    """inputs: (shape, placements) or (shape, placements, values); values "a" (inputs 0, 2),
    "b" (input 1) unless given; placements None: a plain tensor (id "[plain]")."""
    ins = []
    for i, spec in enumerate(inputs):
        shape, pl = spec[0], spec[1]
        values = spec[2] if len(spec) > 2 else ("a" if i % 2 == 0 else "b")
        ins.append({"shape": list(shape), "placements": list(pl or []), "values": values})
        if pl is None:
            ins[-1]["plain"] = True
    lay = " ".join("[%s]%s" % ("plain" if i.get("plain") else ",".join(i["placements"]),
                               "x".join(map(str, i["shape"]))) for i in ins)
    cid = "m%s %s%s %s" % ("x".join(map(str, mesh)), op, tag, lay)
    assert all(c["id"] != cid for c in cases), cid
    c = {"id": cid, "mesh": list(mesh), "op": op, "args": args or {}, "inputs": ins}
    if hyper_only:
        c["hyper_only"] = True
    cases.append(c)


R, S0, S1, S2, P = "R", "S(0)", "S(1)", "S(2)", "P(sum)"
one_d = [R, S0, S1, P]

# Pointwise binary: every pair on 2 ranks (even), every pair on 4 ranks (uneven [5,6]).
for a in one_d:
    for b in one_d:
        add([2], "add", [([4, 6], [a]), ([4, 6], [b])])
        add([4], "add", [([5, 6], [a]), ([5, 6], [b])])
for a, b in ((S0, R), (P, R), (P, P), (S1, P), (R, P), (S1, S0)):
    add([2], "mul", [([4, 6], [a]), ([4, 6], [b])])
    add([2], "div", [([4, 6], [a]), ([4, 6], [b])])
    add([4], "mul", [([5, 6], [a]), ([5, 6], [b])])
for a, b in ((S0, R), (P, R), (P, P), (S1, P)):
    add([2], "sub", [([4, 6], [a]), ([4, 6], [b])])
    add([2], "add_alpha", [([4, 6], [a]), ([4, 6], [b])], {"alpha": 0.5})
# Partial(avg) / Partial(max) operands.
for a, b in (("P(avg)", R), ("P(avg)", "P(avg)"), ("P(max)", R), ("P(max)", S0)):
    add([2], "add", [([4, 6], [a]), ([4, 6], [b])])
    add([2], "mul", [([4, 6], [a]), ([4, 6], [b])])
# Broadcasting.
for a in (R, S0, S1, P):
    for b in (R, S1, P):
        add([2], "add", [([5, 6], [a]), ([1, 6], [b])])
    add([4], "mul", [([5, 6], [a]), ([6], [R])])
    add([4], "mul", [([5, 6], [a]), ([6], [S0])])
# Scalars.
for a in one_d:
    add([2], "add_scalar", [([4, 6], [a])], {"scalar": 2.0})
    add([2], "mul_scalar", [([4, 6], [a])], {"scalar": 3.0})
    if a in (S0, P):
        add([4], "div_scalar", [([5, 6], [a])], {"scalar": 4.0})
# Unary pointwise.
for op in ("neg", "relu", "exp", "tanh", "gelu", "clone"):
    for a in one_d:
        add([2], op, [([4, 6], [a])])
        if op in ("neg", "relu"):
            add([4], op, [([5, 6], [a])])
# Reductions.
for a in one_d:
    for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
        add(mesh, "sum", [(shape, [a])])
        add(mesh, "sum_dim", [(shape, [a])], {"dim": [0], "keepdim": False}, "(0)")
        add(mesh, "sum_dim", [(shape, [a])], {"dim": [1], "keepdim": True}, "(1,keepdim)")
        add(mesh, "amax", [(shape, [a])], {"dim": [0], "keepdim": False}, "(0)")
        add(mesh, "amin", [(shape, [a])], {"dim": [1], "keepdim": True}, "(1,keepdim)")
    add([4], "amax", [([7, 7], [a])], {"dim": [], "keepdim": False}, "(all)")
for a in ("P(max)", "P(min)"):
    add([2], "amax", [([4, 6], [a])], {"dim": [1], "keepdim": False}, "(1)")
    add([2], "amin", [([4, 6], [a])], {"dim": [1], "keepdim": False}, "(1)")
# Matmul family.
for a in one_d:
    for b in one_d:
        add([2], "mm", [([4, 6], [a]), ([6, 8], [b])])
for a, b in ((R, R), (S0, R), (R, S1), (S1, S0), (S0, S0), (S0, S1), (P, R), (S1, P)):
    add([4], "mm", [([5, 7], [a]), ([7, 3], [b])])
for a, b in ((S0, R), (R, S1), (S1, S0)):
    add([2], "matmul", [([4, 6], [a]), ([6, 8], [b])])
for a, b in ((R, R), (S0, R), (S0, S0), (S0, S2), (S1, R), (S1, S0), (S2, S1), (S2, S2), (P, R), (P, P)):
    add([2], "bmm", [([2, 4, 6], [a]), ([2, 6, 4], [b])])
for bias in (R, S0, S1, P):
    for a, b in ((S0, R), (R, S1), (S1, S0)):
        add([2], "addmm", [([4, 8], [bias]), ([4, 6], [a]), ([6, 8], [b])],
            {"beta": 0.5, "alpha": 2.0})
for bias in (R, S0, P):
    add([2], "addmm", [([8], [bias]), ([4, 6], [S1]), ([6, 8], [S0])],
        {"beta": 1.0, "alpha": 1.0}, "(1-D bias)")
for bias in (R, S0, S2):
    for a, b in ((S0, S0), (S1, R), (S2, S1)):
        add([2], "baddbmm", [([2, 4, 4], [bias]), ([2, 4, 6], [a]), ([2, 6, 4], [b])],
            {"beta": 0.5, "alpha": 2.0})
# Views.
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    n0, n1 = shape
    for a in one_d:
        add(mesh, "view", [(shape, [a])], {"shape": [n0 * n1]}, "(flat)")
        add(mesh, "view", [(shape, [a])], {"shape": [n0, 2, n1 // 2]}, "(split)")
        add(mesh, "reshape", [(shape, [a])], {"shape": [n1, n0]}, "(swap)")
        if mesh == [2]:
            add(mesh, "permute", [(shape, [a])], {"dims": [1, 0]})
            add(mesh, "slice", [(shape, [a])], {"dim": 1, "start": 0, "end": 3, "step": 1}, "(dim1)")
        add(mesh, "transpose", [(shape, [a])], {"dim0": 0, "dim1": 1})
        add(mesh, "t", [(shape, [a])])
        add(mesh, "unsqueeze", [(shape, [a])], {"dim": 1})
        add(mesh, "squeeze", [([n0, 1, n1], [a])], {"dim": 1})
        add(mesh, "squeeze_all", [([1, n0, n1], [{S0: S1, S1: S2}.get(a, a)])])
        add(mesh, "slice", [(shape, [a])], {"dim": 0, "start": 1, "end": n0, "step": 2})
        add(mesh, "select", [(shape, [a])], {"dim": 0, "index": 1})
        add(mesh, "select", [(shape, [a])], {"dim": 1, "index": 2}, "(dim1)")
        if a != S0:
            add(mesh, "expand", [([1, n1], [a])], {"shape": [3, n1]})
# 2x2 mesh.
two_d = [[S0, S1], [R, P], [P, S0], [S0, S0], [S1, R], [R, R]]
for i, a in enumerate(two_d):
    for b in two_d[i:]:
        add([2, 2], "add", [([5, 6], a), ([5, 6], b)])
    add([2, 2], "mul", [([5, 6], a), ([5, 6], [R, R])])
    add([2, 2], "relu", [([5, 6], a)])
    add([2, 2], "sum", [([5, 6], a)])
    add([2, 2], "sum_dim", [([5, 6], a)], {"dim": [1], "keepdim": False}, "(1)")
    add([2, 2], "amax", [([5, 6], a)], {"dim": [0], "keepdim": True}, "(0,keepdim)")
    add([2, 2], "view", [([4, 6], a)], {"shape": [24]}, "(flat)")
    add([2, 2], "transpose", [([5, 6], a)], {"dim0": 0, "dim1": 1})
    add([2, 2], "select", [([5, 6], a)], {"dim": 1, "index": 3})
for a in two_d:
    for b in ([R, R], [S1, S0], [S0, R]):
        add([2, 2], "mm", [([4, 6], a), ([6, 8], b)])

# ---- Thin spots (DispatchCatalogue.* in hyper/tensor/dispatch/catalogue_test.cc) ----
# RaggedShard (hyper only): elementwise ops (beside any layout: the other operands are moved
# onto the ragged one) and the full sum compute; every other op must be refused (fail-closed).
for mesh, rs in (([2], "RS((0,), (1, 2))"), ([4], "RS((0,), (1, 2, 0, 3))"), ([2], "RS((0, 1), (3, 1))")):
    def radd(op, inputs, args=None, tag=""):
        add(mesh, op, inputs, args, tag, hyper_only=True)
    for op in ("add", "sub", "mul", "div"):
        radd(op, [([6, 4], [rs]), ([6, 4], [rs])])
    radd("add_alpha", [([6, 4], [rs]), ([6, 4], [rs])], {"alpha": 0.5})
    for op in ("neg", "relu", "exp", "tanh", "gelu", "clone"):
        radd(op, [([6, 4], [rs])])
    radd("mul_scalar", [([6, 4], [rs])], {"scalar": 3.0})
    radd("add_scalar", [([6, 4], [rs])], {"scalar": 2.0})
    radd("sum", [([6, 4], [rs])])
    # Beside another layout: computed on the ragged layout.
    for other in (R, S0, P):
        radd("add", [([6, 4], [rs]), ([6, 4], [other])])
    radd("mul", [([6, 4], [rs]), ([6, 4], ["RS((0,), (1, 1))" if mesh == [2] else "RS((0,), (2, 1, 3, 0))"])])
    # Refused.
    radd("sum_dim", [([6, 4], [rs])], {"dim": [0], "keepdim": False}, "(0)")
    radd("amax", [([6, 4], [rs])], {"dim": [1], "keepdim": False}, "(1)")
    radd("view", [([6, 4], [rs])], {"shape": [24]}, "(flat)")
    radd("transpose", [([6, 4], [rs])], {"dim0": 0, "dim1": 1})
    radd("unsqueeze", [([6, 4], [rs])], {"dim": 0})
    radd("slice", [([6, 4], [rs])], {"dim": 0, "start": 1, "end": 6, "step": 2})
    radd("select", [([6, 4], [rs])], {"dim": 1, "index": 2})
    radd("mm", [([6, 4], [rs]), ([4, 3], [R])])
# Partial(avg/max/min) beyond add/mul: reductions, unary, scalars, views, matmul, 4 ranks.
PA, PX, PN = "P(avg)", "P(max)", "P(min)"
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    for a in (PA, PX, PN):
        add(mesh, "sum", [(shape, [a])])
        add(mesh, "sum_dim", [(shape, [a])], {"dim": [1], "keepdim": False}, "(1)")
        add(mesh, "neg", [(shape, [a])])
        add(mesh, "relu", [(shape, [a])])
        add(mesh, "mul_scalar", [(shape, [a])], {"scalar": -3.0})
        add(mesh, "transpose", [(shape, [a])], {"dim0": 0, "dim1": 1})
        add(mesh, "view", [(shape, [a])], {"shape": [shape[0] * shape[1]]}, "(flat)")
    add(mesh, "add", [(shape, [PA]), (shape, [P])])
    add(mesh, "mul", [(shape, [PN]), (shape, [R])])
    add(mesh, "add", [(shape, [PN]), (shape, [PX])])
    add(mesh, "amin", [(shape, [PN])], {"dim": [0], "keepdim": True}, "(0,keepdim)")
for a in (PA, PX):
    add([2], "mm", [([4, 6], [a]), ([6, 8], [R])])
    add([2], "mm", [([4, 6], [R]), ([6, 8], [a])])
# Uneven shards on 4 ranks: 7 rows (2,2,2,1), 3 columns (1,1,1,0), 9 (3,3,3,0).
for a in (S0, S1):
    for b in (R, S0, S1, P):
        add([4], "add", [([7, 3], [a]), ([7, 3], [b])])
    add([4], "mul", [([7, 3], [a]), ([3], [R])])
    for op in ("relu", "exp", "gelu"):
        add([4], op, [([7, 3], [a])])
    add([4], "sum", [([7, 3], [a])])
    add([4], "sum_dim", [([7, 3], [a])], {"dim": [0], "keepdim": True}, "(0,keepdim)")
    add([4], "sum_dim", [([7, 3], [a])], {"dim": [1], "keepdim": False}, "(1)")
    add([4], "transpose", [([7, 3], [a])], {"dim0": 0, "dim1": 1})
    add([4], "unsqueeze", [([7, 3], [a])], {"dim": 0})
    add([4], "select", [([7, 3], [a])], {"dim": 0, "index": 6})
    add([4], "slice", [([7, 3], [a])], {"dim": 0, "start": 1, "end": 7, "step": 2})
for a, b in ((S0, R), (R, S1), (S1, S0), (S0, S1), (S1, R)):
    add([4], "mm", [([9, 7], [a]), ([7, 3], [b])])
for a, b in ((S0, S0), (S1, R), (S2, S1), (R, S2)):
    add([4], "bmm", [([3, 5, 7], [a]), ([3, 7, 2], [b])])
for bias in (R, S0, S1, P):
    add([4], "addmm", [([9, 3], [bias]), ([9, 7], [S0]), ([7, 3], [R])], {"beta": 0.5, "alpha": 2.0})
    add([4], "addmm", [([9, 3], [bias]), ([9, 7], [S1]), ([7, 3], [S0])], {"beta": 0.5, "alpha": 2.0})
# 2x2 meshes with mixed placements (both mesh dims sharding, Partial(sum/avg/max) beside a
# Shard, uneven [5,7]).
mixed = [[S0, S1], [S1, S0], [S0, P], [P, S1], ["P(avg)", S0], [S1, "P(max)"], [R, S0], [P, P]]
for i, a in enumerate(mixed):
    for b in mixed[i:]:
        add([2, 2], "add", [([5, 7], a), ([5, 7], b)])
    add([2, 2], "mul", [([5, 7], a), ([5, 7], [S0, S1])])
    add([2, 2], "neg", [([5, 7], a)])
    add([2, 2], "gelu", [([5, 7], a)])
    add([2, 2], "mul_scalar", [([5, 7], a)], {"scalar": 0.5})
    add([2, 2], "sum", [([5, 7], a)])
    add([2, 2], "sum_dim", [([5, 7], a)], {"dim": [0], "keepdim": True}, "(0,keepdim)")
    add([2, 2], "amin", [([5, 7], a)], {"dim": [1], "keepdim": False}, "(1)")
    add([2, 2], "t", [([5, 7], a)])
    add([2, 2], "unsqueeze", [([5, 7], a)], {"dim": 2})
    add([2, 2], "slice", [([5, 7], a)], {"dim": 1, "start": 1, "end": 6, "step": 2})
    add([2, 2], "reshape", [([4, 6], a)], {"shape": [4, 2, 3]}, "(split)")
for a, b in (([S0, S1], [R, S0]), ([S0, R], [S1, R]), ([R, S1], [S0, R]), ([S1, S0], [S0, S1]),
             ([P, S0], [R, R]), ([S0, "P(avg)"], [R, R]), ([S1, S1], [S0, S0])):
    add([2, 2], "mm", [([5, 7], a), ([7, 3], b)])
for a, b in (([S0, S1], [S0, R]), ([S0, S2], [S0, S1]), ([S1, S0], [R, S0])):
    add([2, 2], "bmm", [([2, 5, 6], a), ([2, 6, 3], b)])
for bias in ([R, R], [S0, S1], [P, R]):
    add([2, 2], "addmm", [([5, 3], bias), ([5, 7], [S0, S1]), ([7, 3], [R, S0])],
        {"beta": 0.5, "alpha": 2.0})
# linear (data / column / row parallel), matmul 3-D x 2-D, narrow, flatten, in-place add_/mul_
# (on a clone of arg 0).
for x, w, bias in ((S0, R, R), (R, S0, S0), (S1, S1, R), (R, R, R), (P, R, R), (S1, S1, P)):
    add([2], "linear", [([4, 6], [x]), ([8, 6], [w]), ([8], [bias])])
for x, w, bias in ((S0, R, R), (R, S0, S0), (S1, S1, R)):
    add([4], "linear", [([5, 6], [x]), ([7, 6], [w]), ([7], [bias])])
add([2, 2], "linear", [([5, 6], [S0, R]), ([8, 6], [R, S0]), ([8], [R, S0])])
for a, b in ((S0, R), (S1, R), (R, S1), (S2, S0), (P, R)):
    add([2], "matmul", [([2, 4, 6], [a]), ([6, 8], [b])], tag="(3-D)")
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    for a in one_d:
        add(mesh, "narrow", [(shape, [a])], {"dim": 1, "start": 1, "length": 3}, "(dim1)")
        add(mesh, "narrow", [(shape, [a])], {"dim": 0, "start": 1, "length": 2}, "(dim0)")
for mesh, shape in (([2], [2, 4, 6]), ([4], [5, 2, 3])):
    for a in (R, S0, S1, S2, P):
        add(mesh, "flatten", [(shape, [a])], {"start_dim": 1, "end_dim": 2}, "(1,2)")
for op in ("add_inplace", "mul_inplace"):
    for a, b in ((S0, S0), (S0, R), (R, S0), (P, R), (R, P), (P, P), (S1, S0)):
        add([2], op, [([4, 6], [a]), ([4, 6], [b])])
    for a, b in ((S0, R), (R, S0), (S1, P)):
        add([4], op, [([5, 6], [a]), ([5, 6], [b])])

# ---- The nn rules (docs/dtensor.md's rules table, nn_rules.h / nn_kernels.h) ----
# Meshes: [2] even ([4,6]), [4] uneven ([5,6]: rows 2,2,1,0... columns 2,2,1,1), [2,2] ([5,7]).
PA = "P(avg)"
for op in ("softmax", "log_softmax"):
    for a in (R, S0, S1, P):
        add([2], op, [([4, 6], [a])], {"dim": 1}, "(1)")
    for a in (S0, S1, PA):
        add([4], op, [([5, 6], [a])], {"dim": 1}, "(1)")
    add([4], op, [([5, 6], [S1])], {"dim": 0}, "(0)")
    for a in ([S0, S1], [P, S0]):
        add([2, 2], op, [([5, 7], a)], {"dim": 1}, "(1)")
for a in (R, S0, S1, P):  # leading-dim Shard kept, normalized-dim Shard gathered, P reduced
    add([2], "layer_norm", [([4, 6], [a])], {"normalized_shape": [6]})
    add([2], "layer_norm_affine", [([4, 6], [a]), ([6], [R]), ([6], [R])], {"normalized_shape": [6]})
for a in (S0, S1, PA):
    add([4], "layer_norm", [([5, 6], [a])], {"normalized_shape": [6]})
    add([4], "layer_norm_affine", [([5, 6], [a]), ([6], [R]), ([6], [R])], {"normalized_shape": [6]})
for a, w in ((S0, S0), (R, S0), (S0, P)):  # a sharded or Partial weight is made Replicate
    add([2], "layer_norm_affine", [([4, 6], [a]), ([6], [w]), ([6], [R])], {"normalized_shape": [6]})
add([2], "layer_norm", [([2, 3, 4], [S1])], {"normalized_shape": [3, 4]}, "(2 dims)")
add([2], "layer_norm", [([2, 3, 4], [S0])], {"normalized_shape": [3, 4]}, "(2 dims)")
for a in ([S0, S1], [P, S0], [S0, R]):
    add([2, 2], "layer_norm_affine", [([5, 7], a), ([7], [R, R]), ([7], [R, R])], {"normalized_shape": [7]})
# Reductions by kernels: mean, var / std (correction 0, 1), linalg_vector_norm (ord 2, 1, inf).
for mesh, shape, lays in (([2], [4, 6], (R, S0, S1, P)), ([4], [5, 6], (S0, S1, PA))):
    for a in lays:
        add(mesh, "mean", [(shape, [a])])
        add(mesh, "mean_dim", [(shape, [a])], {"dim": [0], "keepdim": False}, "(0)")
        add(mesh, "mean_dim", [(shape, [a])], {"dim": [1], "keepdim": True}, "(1,keepdim)")
        for op in ("var", "std"):
            add(mesh, op, [(shape, [a])], {"dim": [0], "correction": 1, "keepdim": False}, "(0)")
            add(mesh, op, [(shape, [a])], {"dim": [1], "correction": 0, "keepdim": True}, "(1,c0,keepdim)")
        add(mesh, "var", [(shape, [a])], {"dim": [0, 1], "correction": 0, "keepdim": False}, "(all,c0)")
        for o, t in ((2, "2"), (1, "1"), ("inf", "inf")):
            add(mesh, "linalg_vector_norm", [(shape, [a])], {"ord": o, "dim": [0, 1], "keepdim": False},
                "(%s)" % t)
            add(mesh, "linalg_vector_norm", [(shape, [a])], {"ord": o, "dim": [1], "keepdim": True},
                "(%s,1,keepdim)" % t)
for a in ([S0, S1], [P, S1]):
    add([2, 2], "mean_dim", [([5, 7], a)], {"dim": [1], "keepdim": False}, "(1)")
    add([2, 2], "std", [([5, 7], a)], {"dim": [0], "correction": 1, "keepdim": False}, "(0)")
    add([2, 2], "linalg_vector_norm", [([5, 7], a)], {"ord": 2, "dim": [0, 1], "keepdim": False}, "(2)")
# Unary pointwise (rsqrt / sqrt on the positive "b" values).
for op, args, vals in (("sigmoid", {}, "a"), ("silu", {}, "a"), ("abs", {}, "a"),
                       ("pow_scalar", {"exponent": 2.0}, "a"), ("rsqrt", {}, "b"), ("sqrt", {}, "b")):
    for a in (R, S0, S1, P):
        add([2], op, [([4, 6], [a], vals)], args)
    for a in (S1, PA):
        add([4], op, [([5, 6], [a], vals)], args)
    add([2, 2], op, [([5, 7], [P, S0], vals)], args)
# More unary pointwise ops (nn_rules.cc; logs and reciprocal on the positive "b" values):
# Replicate, Shard, Partial (reduced first) on 2 ranks, an uneven Shard on 4, a 2x2 mesh.
for op, args, vals in (("log", {}, "b"), ("log1p", {}, "b"), ("log2", {}, "b"), ("log10", {}, "b"),
                       ("exp2", {}, "a"), ("expm1", {}, "a"), ("sin", {}, "a"), ("cos", {}, "a"), ("tan", {}, "a"),
                       ("atan", {}, "a"), ("sinh", {}, "a"), ("cosh", {}, "a"), ("asinh", {}, "a"),
                       ("erf", {}, "a"), ("erfc", {}, "a"), ("reciprocal", {}, "b"),
                       ("floor", {}, "a"), ("ceil", {}, "a"), ("round", {}, "a"), ("trunc", {}, "a"),
                       ("sign", {}, "a"), ("softplus", {"beta": 2.0, "threshold": 3.0}, "a"),
                       ("leaky_relu", {"negative_slope": 0.1}, "a"), ("elu", {"alpha": 0.7}, "a"),
                       ("hardtanh", {"min_val": -1.5, "max_val": 0.5}, "a"), ("mish", {}, "a"),
                       ("hardswish", {}, "a"), ("hardsigmoid", {}, "a"), ("isinf", {}, "a"),
                       ("nan_to_num", {}, "a"), ("sin_inplace", {}, "a")):
    for a in (R, S0, P):
        add([2], op, [([4, 6], [a], vals)], args)
    add([4], op, [([5, 6], [S1], vals)], args)
    add([2, 2], op, [([5, 7], [P, S0], vals)], args)
# More binary pointwise ops (the divisor / the base "b", positive).
for op, args, vals in (("minimum", {}, "ab"), ("logaddexp", {}, "ab"), ("atan2", {}, "ab"),
                       ("hypot", {}, "ab"), ("fmod", {}, "ab"), ("remainder", {}, "ab"),
                       ("div_floor", {}, "ab"), ("pow", {}, "ba"), ("lerp", {"weight": 0.3}, "ab")):
    for a, b in ((R, R), (S0, R), (S0, S1), (P, R), (S1, P)):
        add([2], op, [([4, 6], [a], vals[0]), ([4, 6], [b], vals[1])], args)
    add([4], op, [([5, 6], [S0], vals[0]), ([5, 6], [S0], vals[1])], args)
    add([2, 2], op, [([5, 7], [S0, S1], vals[0]), ([5, 7], [P, R], vals[1])], args)
# logsumexp, all / any (of a comparison, times the sum over the same dims: a float output).
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S1], [PA])),
                          ([2, 2], [5, 7], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "logsumexp", [(shape, a)], {"dim": [1], "keepdim": False}, "(1)")
        add(mesh, "logsumexp", [(shape, a)], {"dim": [0, 1], "keepdim": True}, "(0,1,keepdim)")
        add(mesh, "all_dim", [(shape, a)], {"dim": [1], "keepdim": False, "threshold": 0.5}, "(1)")
        add(mesh, "any_dim", [(shape, a)], {"dim": [1], "keepdim": True, "threshold": 0.3}, "(1,keepdim)")
        add(mesh, "all", [(shape, a)], {"threshold": -2.5})
# cumsum / flip / roll (dim_local_kernels.h: their dims unsharded, other Shards kept, a
# Partial kept) and clamp_min / clamp_max.
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1], [PA])),
                          ([2, 2], [5, 7], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "cumsum", [(shape, a)], {"dim": 1}, "(1)")
        add(mesh, "cumsum", [(shape, a)], {"dim": -2}, "(-2)")
        add(mesh, "flip", [(shape, a)], {"dims": [0]}, "(0)")
        add(mesh, "roll", [(shape, a)], {"shifts": [2], "dims": [1]}, "(2,1)")
        add(mesh, "roll", [(shape, a)], {"shifts": [3], "dims": []}, "(3,flat)")
        add(mesh, "clamp_min", [(shape, a)], {"min": 0.25})
        add(mesh, "clamp_max_tensor", [(shape, a), (shape, a, "b")])
# tril / triu (dim_local_kernels.h: every layout kept, the diagonal shifted by the box's
# offsets), special functions (nn_rules.cc; lgamma / digamma / polygamma on the positive "b"
# values), fmax / fmin / xlogy, the elementwise losses (pointwise_losses.h; soft_margin_loss,
# whose target ATen does not differentiate, and bce, whose input must lie in [0, 1]: in
# pointwise_loss_test.cc).
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1], [PA])),
                          ([2, 2], [5, 7], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "tril", [(shape, a)], {"diagonal": 1}, "(1)")
        add(mesh, "triu", [(shape, a)], {"diagonal": -1}, "(-1)")
for op, args, vals in (("lgamma", {}, "b"), ("digamma", {}, "b"), ("polygamma", {"n": 1}, "b"),
                       ("sinc", {}, "a"), ("frac", {}, "a"), ("logit", {"eps": 0.2}, "a")):
    for a in (R, S0, P):
        add([2], op, [([4, 6], [a], vals)], args)
    add([4], op, [([5, 6], [S1], vals)], args)
    add([2, 2], op, [([5, 7], [P, S0], vals)], args)
for op, args in (("fmax", {}), ("fmin", {}), ("xlogy", {}),
                 ("mse_loss", {"reduction": "mean"}), ("smooth_l1_loss", {"reduction": "sum", "beta": 0.7}),
                 ("huber_loss", {"reduction": "none", "delta": 1.3}),
                 ("bce_with_logits", {"reduction": "mean"})):
    for a, b in ((R, R), (S0, S0), (S0, S1), (P, R), (S1, P)):
        add([2], op, [([4, 6], [a]), ([4, 6], [b])], args)
    add([4], op, [([5, 6], [S0]), ([5, 6], [S0])], args)
    add([2, 2], op, [([5, 7], [S0, S1]), ([5, 7], [P, R])], args)
# Decompositions (decompositions.h): norm, dist, repeat, constant_pad_nd, glu as ops with rules.
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1])),
                          ([2, 2], [5, 6], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "norm", [(shape, a)], {"p": 2.0, "dim": [1], "keepdim": False}, "(2,1)")
        add(mesh, "repeat", [(shape, a)], {"repeats": [2, 1]}, "(2,1)")
        add(mesh, "repeat", [(shape, a)], {"repeats": [1, 1, 2]}, "(1,1,2)")
        add(mesh, "constant_pad_nd", [(shape, a)], {"pad": [1, 2], "value": 0.5}, "(1,2)")
        add(mesh, "constant_pad_nd", [(shape, a)], {"pad": [0, 0, -1, 1], "value": 0.0}, "(0,0,-1,1)")
        add(mesh, "glu", [(shape, a)], {"dim": 1}, "(1)")
        add(mesh, "dist", [(shape, a), (shape, [R] * len(mesh))], {"p": 2.0})
# median() over every element and clamp with tensor bounds (decompositions.h).
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1])),
                          ([2, 2], [5, 6], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "median_all", [(shape, a)])
        add(mesh, "clamp_tensor", [(shape, a), (shape, [R] * len(mesh), "b"), (shape, a, "b")])
# Convolutional networks (spatial_kernels.h, spatial_rules.h): conv2d by batch / output-channel /
# input-channel strategy (a spatial Shard moved), pools and interpolation along the spatial
# dims (batch and channel Shards kept), batch_norm with the global statistics, group_norm.
for mesh, n, lays, wlays in (([2], 4, ([R], [S0], [S1], [S2], [P]), ([R], [S0], [S1])),
                             ([4], 3, ([S0], [S1], [S2]), ([R], [S1])),
                             ([2, 2], 4, ([S0, S1], [P, S0], [S2, R]), ([R, R], [R, S0]))):
    rep = [R] * len(mesh)
    for a in lays:
        for w in wlays:
            add(mesh, "conv2d", [([n, 4, 6, 5], a), ([6, 4, 3, 3], w), ([6], rep)],
                {"stride": [1, 1], "padding": [1, 0]}, "(1,pad)")
        add(mesh, "max_pool2d", [([n, 4, 6, 6], a)], {"kernel": [2, 2], "stride": [2, 2]}, "(2)")
        add(mesh, "avg_pool2d", [([n, 4, 7, 6], a)], {"kernel": [3, 2], "stride": [2, 2]}, "(3x2)")
        add(mesh, "interpolate_bilinear", [([n, 4, 3, 4], a)], {"size": [5, 7]}, "(5x7)")
        add(mesh, "batch_norm", [([n, 4, 4, 3], a), ([4], rep, "b"), ([4], rep, "a")])
        add(mesh, "group_norm", [([n, 4, 3, 4], a), ([4], rep, "b"), ([4], rep, "a")], {"groups": 2}, "(2)")
# trace (the diagonal as a masked Partial), diagonal / diag_embed (other Shards kept), cdist (pairwise p-norms), pixel_shuffle (along
# channels and plane), embedding_bag (a row-sharded table: the bags' values travel).
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1])),
                          ([2, 2], [5, 6], ([S0, S1], [P, S0]))):
    rep = [R] * len(mesh)
    for a in lays:
        add(mesh, "trace", [(shape, a)])
        add(mesh, "diagonal", [(shape, a)], {"offset": 1, "dim1": 0, "dim2": 1}, "(1)")
        add(mesh, "diagonal", [([shape[0], 3, 2], a)], {"offset": 0, "dim1": 1, "dim2": 2}, "(1,2)")
        add(mesh, "diag_embed", [(shape, a)], {"offset": -1, "dim1": 0, "dim2": 2}, "(-1,0,2)")
        add(mesh, "cdist", [([shape[0], 3], a), ([4, 3], rep)], {"p": 2.0}, "(2)")
        add(mesh, "cdist", [([shape[0], 3], a), ([4, 3], rep)], {"p": 1.0}, "(1)")
        add(mesh, "pixel_shuffle", [([shape[0], 8, 3, 2], a)], {"factor": 2}, "(2)")
        if a != [P] and a != [P, S0]:
            for mode in (0, 1, 2):
                add(mesh, "embedding_bag", [([8, 4], a), ([9], None, [1, 2, 4, 6, 4, 3, 2, 0, 5]),
                                            ([4], None, [0, 2, 2, 5])], {"mode": mode}, "(%d)" % mode)
# gather / index_select / scatter / scatter_add / scatter(value) / sort / topk / cumprod
# (index_kernels.h). Indices distinct along the dim (scatter's overwrite is then order-free):
# 2i + j mod n along 0, i + j mod n along 1; the src "b" laid out like the index, or like self
# beside a plain index.
def index_values(shape, ishape, d):
    return [((2 * i + j) if d == 0 else (i + j)) % shape[d]
            for i in range(ishape[0]) for j in range(ishape[1])]


for mesh, shape, lays, ilays, vlays in (
        ([2], [4, 6], ([R], [S0], [S1], [P]), (None, [R], [S0], [S1]), (None, [R], [S0])),
        ([4], [5, 6], ([S0], [S1], [PA]), ([R], [S0]), (None, [S0])),
        ([2, 2], [5, 7], ([S0, S1], [P, S0]), ([R, S0], [S1, R]), ([S0, R],))):
    for d in (0, 1):
        ishape = list(shape)
        ishape[d] = 3
        ids = index_values(shape, ishape, d)
        for a in lays:
            for i in ilays:
                add(mesh, "gather", [(shape, a), (ishape, i, ids)], {"dim": d}, "(%d)" % d)
                for op in ("scatter", "scatter_add"):
                    add(mesh, op, [(shape, a), (ishape, i, ids), (ishape, i or a, "b")], {"dim": d},
                        "(%d)" % d)
                for reduce, self_in in (("amax", True), ("sum", False)):
                    add(mesh, "scatter_reduce", [(shape, a), (ishape, i, ids), (ishape, i or a, "b")],
                        {"dim": d, "reduce": reduce, "include_self": self_in},
                        "(%d,%s%s)" % (d, reduce, "" if self_in else ",exclude_self"))
            add(mesh, "scatter_value", [(shape, a), (ishape, ilays[-1], ids)],
                {"dim": d, "value": 2.5}, "(%d)" % d)
            for v in vlays:
                add(mesh, "index_select", [(shape, a), ([3], v, [shape[d] - 1, 0, 1])], {"dim": d},
                    "(%d)" % d)
            # Advanced indexing and the index_* family (advanced_index_kernels.h): one index tensor
            # along d (negative entries where ATen wraps them; distinct for the overwrites).
            n = shape[d]
            for v in vlays:
                add(mesh, "index", [(shape, a), ([4], v, [n - 1, 0, -1, 1])], {"dim": d}, "(%d)" % d)
                add(mesh, "index", [(shape, a), ([2, 2], v, [0, 2, 1, -2])], {"dim": d}, "(%d)" % d)
                vshape = list(shape)
                vshape[d] = 3
                for acc in (False, True):
                    add(mesh, "index_put", [(shape, a), ([3], v, [n - 1, 0, -2]), (vshape, a, "b")],
                        {"dim": d, "accumulate": acc}, "(%d%s)" % (d, ",acc" if acc else ""))
                add(mesh, "index_add", [(shape, a), ([3], v, [n - 1, 0, n - 1]), (vshape, a, "b")],
                    {"dim": d, "alpha": 2.5}, "(%d)" % d)
                add(mesh, "index_copy", [(shape, a), ([3], v, [n - 1, 0, 1]), (vshape, a, "b")],
                    {"dim": d}, "(%d)" % d)
                add(mesh, "index_fill", [(shape, a), ([3], v, [n - 1, 0, -2])],
                    {"dim": d, "value": -3.5}, "(%d)" % d)
                add(mesh, "index_reduce", [(shape, a), ([3], v, [n - 1, 0, n - 1]), (vshape, a, "b")],
                    {"dim": d, "reduce": "prod", "include_self": True}, "(%d,prod)" % d)
    # General advanced indexing (advanced_index_kernels.h): x[i, j] (two indices; the loss idiom
    # x[arange, target]) and x[mask], every self layout, indices plain / R / sharded.
    n0, n1 = shape
    for a in lays:
        for v in vlays:
            add(mesh, "index2", [(shape, a), ([3], v, [n0 - 1, 0, 1]), ([3], v, [-1, 2, 0])], {}, "(i,j)")
            add(mesh, "index2", [(shape, a), ([n0], v, list(range(n0))),
                                 ([n0], v, [(5 * k + 1) % n1 for k in range(n0)])], {}, "(arange,target)")
            for acc in (False, True):  # x[i, j] = v (a repeated position when accumulating)
                add(mesh, "index_put2", [(shape, a), ([3], v, [n0 - 1, 0, n0 - 1 if acc else 1]),
                                         ([3], v, [-1, 2, -1]), ([3], [R] * len(mesh), "b")],
                    {"accumulate": acc}, "(i,j%s)" % (",acc" if acc else ""))
        for m in (None, [R] * len(mesh)):
            add(mesh, "index_mask", [(shape, a), (shape, m, "mask")])
            add(mesh, "masked_select", [(shape, a), (shape, m, "mask")])
            add(mesh, "index_put_mask", [(shape, a), (shape, m, "mask")], {"value": -2.5}, "(-2.5)")
    for a in lays:
        add(mesh, "sort", [(shape, a, "b")], {"dim": 1, "descending": True}, "(1,desc)")
        add(mesh, "sort", [(shape, a, "b")], {"dim": 0, "descending": False}, "(0)")
        add(mesh, "topk", [(shape, a, "b")], {"k": 2, "dim": 1, "largest": True}, "(2,1)")
        add(mesh, "topk", [(shape, a, "b")], {"k": 1, "dim": 0, "largest": False}, "(1,0,smallest)")
        add(mesh, "cumprod", [(shape, a, "b")], {"dim": 1}, "(1)")
        add(mesh, "cumprod", [(shape, a, "b")], {"dim": 0}, "(0)")
        add(mesh, "logcumsumexp", [(shape, a, "b")], {"dim": 0}, "(0)")
        add(mesh, "cummax", [(shape, a, "b")], {"dim": 1}, "(1)")
        add(mesh, "kthvalue", [(shape, a, "b")], {"k": 2, "dim": 0, "keepdim": False}, "(2,0)")
        add(mesh, "median_dim", [(shape, a, "b")], {"dim": 1, "keepdim": True}, "(1,keepdim)")
        add(mesh, "prod", [(shape, a, "b")])
        add(mesh, "prod_dim", [(shape, a, "b")], {"dim": 0, "keepdim": False}, "(0)")
        add(mesh, "prod_dim", [(shape, a, "b")], {"dim": 1, "keepdim": True}, "(1,keepdim)")
# scaled_dot_product_attention ([b, heads, s, d]; causal and not): heads or batch sharded,
# Replicate, a sequence-sharded query, 2x2.
for causal in (True, False):
    for lay in ((S1, S1, S1), (S0, S0, S0), (R, R, R), (S2, R, R)):
        add([2], "sdpa", [([2, 4, 6, 8], [l], v) for l, v in zip(lay, "aba")], {"is_causal": causal},
            "(causal)" if causal else "")
    add([4], "sdpa", [([2, 4, 6, 8], [S1], v) for v in "aba"], {"is_causal": causal}, "(causal)" if causal else "")
    add([2, 2], "sdpa", [([2, 4, 6, 8], [S0, S1], v) for v in "aba"], {"is_causal": causal},
        "(causal)" if causal else "")
# addcmul / addcdiv (self + 0.5 * t1 * t2, self + 0.5 * t1 / t2; the divisor "b"), maximum.
for op, vals in (("addcmul", "aba"), ("addcdiv", "abb")):
    for lay in ((R, R, R), (S0, R, S0), (S1, S0, R), (P, R, R), (R, P, R), (P, P, R), (R, P, P),
                (R, R, P), (S0, P, S1), (PA, R, R)):
        add([2], op, [([4, 6], [l], v) for l, v in zip(lay, vals)], {"value": 0.5})
    for lay in ((S0, R, S0), (P, S1, R)):
        add([4], op, [([5, 6], [l], v) for l, v in zip(lay, vals)], {"value": 0.5})
    add([2, 2], op, [([5, 7], l, v) for l, v in zip(([S0, S1], [P, R], [R, S0]), vals)], {"value": 0.5})
for a, b in ((R, R), (S0, R), (S0, S1), (P, R), (S1, P)):
    add([2], "maximum", [([4, 6], [a]), ([4, 6], [b])])
for a, b in ((S0, S0), (S1, PA)):
    add([4], "maximum", [([5, 6], [a]), ([5, 6], [b])])
add([2, 2], "maximum", [([5, 7], [S0, S1]), ([5, 7], [P, R])])
# masked_fill with a bool mask input (a > 0, built alike on both sides).
for a, m in ((R, R), (S0, S0), (S0, R), (R, S1), (S1, S0), (P, R)):
    add([2], "masked_fill", [([4, 6], [a]), ([4, 6], [m], "mask")], {"value": -1.5})
for a, m in ((S0, R), (S1, S1)):
    add([4], "masked_fill", [([5, 6], [a]), ([5, 6], [m], "mask")], {"value": -1.5})
add([2, 2], "masked_fill", [([5, 7], [S0, S1]), ([5, 7], [R, S0], "mask")], {"value": -1.5})
# where(mask, a, b) with a bool mask input (a > 0).
for m, a, b in ((R, R, R), (S0, R, S0), (R, S1, P), (S1, P, P), (R, S0, S1)):
    add([2], "where", [([4, 6], [m], "mask"), ([4, 6], [a], "a"), ([4, 6], [b], "b")])
for m, a, b in ((S0, S0, R), (R, S1, S1)):
    add([4], "where", [([5, 6], [m], "mask"), ([5, 6], [a], "a"), ([5, 6], [b], "b")])
add([2, 2], "where", [([5, 7], [S0, S1], "mask"), ([5, 7], [P, R], "a"), ([5, 7], [R, S0], "b")])
# embedding: table [8,4] (arg 0) Shard(0) / Shard(1) / R / P, ids [2,3] (int64) plain or a DTensor.
IDS = [3, 0, 7, 5, 3, 1]
for t in (R, S0, S1, P):
    add([2], "embedding", [([8, 4], [t]), ([2, 3], None, IDS)])
    for i in (R, S0, S1):
        add([2], "embedding", [([8, 4], [t]), ([2, 3], [i], IDS)])
for t in (S0, S1):  # 8 rows / 4 columns on 4 ranks; 3 columns of ids (1,1,1,0)
    add([4], "embedding", [([8, 4], [t]), ([2, 3], None, IDS)])
    add([4], "embedding", [([8, 4], [t]), ([2, 3], [S1], IDS)])
add([4], "embedding", [([7, 4], [S0]), ([2, 3], [R], [3, 0, 6, 5, 3, 1])], tag="(uneven rows)")
add([2], "embedding", [([8, 4], [S0]), ([2, 3], [P], IDS)])  # Partial ids: refused
for t, i in (([S0, S1], [R, R]), ([S1, R], [S0, R]), ([R, S0], [S1, S0])):
    add([2, 2], "embedding", [([8, 4], t), ([2, 3], i, IDS)])
# split / chunk / unbind (one piece each, "index"), fill_ (on a clone), shape_kernels.h.
# fill_ of a P(sum) is hyper-only: PyTorch DTensor (2.15) keeps the clone P(sum) and fills every
# coordinate, so its full tensor is n times the value (VALUES DIFFER cannot be explained); hyper
# fills coordinate 0 only, and its gtest DispatchCatalogue.* checks it against one device.
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    for a in one_d + [PA, "P(max)"]:
        add(mesh, "split", [(shape, [a])], {"split_size": 4, "dim": 1, "index": 1}, "(4,1)[1]")
        add(mesh, "split", [(shape, [a])], {"split_size": 2, "dim": 0, "index": 0}, "(2,0)[0]")
        add(mesh, "split_with_sizes", [(shape, [a])], {"split_sizes": [1, 5], "dim": 1, "index": 1},
            "([1,5],1)[1]")
        add(mesh, "chunk", [(shape, [a])], {"chunks": 3, "dim": 1, "index": 2}, "(3,1)[2]")
        add(mesh, "unbind", [(shape, [a])], {"dim": 0, "index": 1}, "(0)[1]")
        add(mesh, "unbind", [(shape, [a])], {"dim": 1, "index": 3}, "(1)[3]")
        add(mesh, "fill_inplace", [(shape, [a])], {"value": 2.5}, hyper_only=a == P)
for a in ([S0, S1], [P, S1], [S1, S0], [R, PA]):
    add([2, 2], "split", [([5, 7], a)], {"split_size": 3, "dim": 1, "index": 2}, "(3,1)[2]")
    add([2, 2], "unbind", [([5, 7], a)], {"dim": 0, "index": 4}, "(0)[4]")
    add([2, 2], "fill_inplace", [([5, 7], a)], {"value": -1.0}, hyper_only=P in a)
# to(float32) and back (_to_copy twice; float64 out, so the values compare at float64's
# tolerance): inputs whose float32 rounding is the same per share and in total (no P(sum/avg):
# rounding each share differs from rounding the sum in the last float32 bit).
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    for a in (R, S0, S1, "P(max)", "P(min)"):
        add(mesh, "to_float32_and_back", [(shape, [a])])
add([2, 2], "to_float32_and_back", [([5, 7], [S0, "P(max)"])])
for mesh, rs in (([2], "RS((0,), (1, 2))"), ([4], "RS((0,), (1, 2, 0, 3))")):
    add(mesh, "split", [([6, 4], [rs])], {"split_size": 2, "dim": 1, "index": 0}, "(2,1)[0]",
        hyper_only=True)
    add(mesh, "unbind", [([6, 4], [rs])], {"dim": 0, "index": 1}, "(0)[1]", hyper_only=True)
# max / min along a dim (values + indices: maxdim_kernels.h), a piece of tensor_split
# (tensor_split_kernels.h).
for mesh, shape in (([2], [4, 6]), ([4], [5, 6])):
    for a in one_d + ["P(max)"]:
        add(mesh, "max_dim", [(shape, [a])], {"dim": 0, "keepdim": False}, "(0)")
        add(mesh, "min_dim", [(shape, [a])], {"dim": 1, "keepdim": True}, "(1,keepdim)")
        add(mesh, "tensor_split", [(shape, [a])], {"sections": 4, "dim": 0, "index": 1}, "(4,0)[1]")
        add(mesh, "tensor_split", [(shape, [a])], {"sections": 4, "dim": 1, "index": 3}, "(4,1)[3]")
for a in ([S0, S1], [S0, S0], [P, S1]):
    add([2, 2], "max_dim", [([5, 7], a)], {"dim": 0, "keepdim": True}, "(0,keepdim)")
    add([2, 2], "min_dim", [([5, 7], a)], {"dim": 1, "keepdim": False}, "(1)")
for mesh, rs in (([2], "RS((0,), (1, 2))"), ([4], "RS((0,), (1, 2, 0, 3))")):
    add(mesh, "max_dim", [([6, 4], [rs])], {"dim": 1, "keepdim": False}, "(1)", hyper_only=True)

# More pointwise ops (pointwise_rules.cc): Replicate, Shard, Partial (reduced first; deg2rad
# and rsub.Tensor are linear: kept) on 2 ranks, an uneven Shard on 4, a 2x2 mesh.
for op, args, vals in (("acos", {}, "a"), ("asin", {}, "a"), ("atanh", {}, "a"), ("acosh", {}, "b"),
                       ("deg2rad", {}, "a"), ("special_i1", {}, "a"), ("special_entr", {}, "b"),
                       ("celu", {}, "a"), ("hardshrink", {}, "a"), ("softshrink", {}, "a"),
                       ("log_sigmoid", {}, "a"), ("threshold", {}, "a"), ("round_decimals", {}, "a")):
    for a in (R, S0, P):
        add([2], op, [([4, 6], [a], vals)], args)
    add([4], op, [([5, 6], [S1], vals)], args)
    add([2, 2], op, [([5, 7], [P, S0], vals)], args)
for op in ("logaddexp2", "xlog1py", "rsub"):
    for a, b in ((R, R), (S0, R), (S0, S1), (P, R), (S1, P)):
        add([2], op, [([4, 6], [a], "a"), ([4, 6], [b], "b")])
    add([4], op, [([5, 6], [S0], "a"), ([5, 6], [S0], "b")])
    add([2, 2], op, [([5, 7], [S0, S1], "a"), ([5, 7], [P, R], "b")])
for a, b, c in ((R, R, R), (S0, S1, R), (P, R, S0)):
    add([2], "lerp_tensor", [([4, 6], [a]), ([4, 6], [b]), ([4, 6], [c])])
# Matrices batched over the leading dims (core_dims_kernels.h): a Shard of a batch dim kept,
# of a matrix dim gathered, a Partial reduced; 4 ranks uneven; a 2x2 mesh.
for op in ("linalg_matrix_exp", "linalg_det", "svdvals", "linalg_inv"):
    for a in (R, S0, S1, S2, P):
        add([2], op, [([3, 4, 4], [a], "b")])
    add([4], op, [([5, 3, 3], [S0], "b")])
    add([2, 2], op, [([4, 3, 3], [S0, S2], "b")])
# The *_copy views, rot90 (flips and a transpose), addmv / addr (decompositions.h).
for mesh, shape, lays in (([2], [4, 6], ([R], [S0], [S1], [P])), ([4], [5, 6], ([S0], [S1])),
                          ([2, 2], [5, 7], ([S0, S1], [P, S0]))):
    for a in lays:
        add(mesh, "permute_copy", [(shape, a)], {"dims": [1, 0]}, "(1,0)")
        add(mesh, "rot90", [(shape, a)], {"k": 1, "dims": [0, 1]}, "(1)")
        add(mesh, "rot90", [(shape, a)], {"k": -2, "dims": [1, 0]}, "(-2)")
for a, b, c in ((R, R, R), (S0, S0, R), (R, S1, S0), (P, P, R), (S0, R, R)):
    add([2], "addmv", [([4], [a]), ([4, 6], [b]), ([6], [c])], {"beta": 0.5, "alpha": 2.0})
    add([2], "addr", [([4, 6], [a]), ([4], [S0 if b != R else R]), ([6], [c])],
        {"beta": 0.0 if a == P else 1.0, "alpha": 1.5})

with open(os.path.join(HERE, "ops.json")) as f:
    unknown = sorted({c["op"] for c in cases} - set(json.load(f)["ops"]))
if unknown:
    raise SystemExit("make_cases.py: ops without an entry in ops.json: %s" % ", ".join(unknown))

path = os.path.join(HERE, "cases.json")
explained = []
if os.path.exists(path):
    with open(path) as f:
        explained = json.load(f).get("explained", [])
with open(path, "w") as f:  # one case per line; the explained groups indented
    f.write('{"comment": %s,\n "cases": [\n' % json.dumps(
        "Generated by make_cases.py (the case list); 'explained' is edited by hand: groups of case "
        "ids with the verdict they show and why hyper and PyTorch DTensor differ there "
        "(compare_dtensor.py)."))
    f.write(",\n".join("  " + json.dumps(c) for c in cases))
    f.write('\n ],\n "explained": %s}\n' % json.dumps(explained, indent=2).replace("\n", "\n "))
print("%d cases -> %s" % (len(cases), path))
