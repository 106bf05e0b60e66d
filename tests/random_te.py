"""Random well-typed custom computations (tensor-expression JSON) for tests.

`computation(rng)` draws one to three stages over one or two float inputs: float32/float64
arithmetic, intrinsics, casts between every dtype (bool included), selects, comparisons and
and/or, integer index arithmetic (div, floordiv, floormod, products of axes) clamped into
bounds, and reductions (sum, max, min); one or two outputs; about half of the tensors and axes
named as C or C++ could not declare them (HARD_NAMES). Such computations found the C
generator's integer precedence, a cast to bool that kept its value, a loop range taken from
another loop, a reference that kept a float32 constant's decimal digits, and names such as
NAN or expf that no build could declare.
"""

from __future__ import annotations

import json
import random

FLOATS = ("float32", "float64")
INTS = ("int32", "int64")
DTYPES = (*FLOATS, *INTS, "bool")
#: Names that C or C++ cannot declare as they are (compiler/codegen/c_names.py).
HARD_NAMES = ("NAN", "this", "expf", "int64_t", "stdout", "linux", "delete", "M_PI", "INT8_MAX", "memcpy", "isnan",
              "EOF", "sqrtf", "grid", "unix")


def _int(value: int) -> list:
    return ["const", value, "int64"]


def _index(rng: random.Random, axes: list[str], extent: int) -> list:
    """An index built from the axes, clamped into [0, extent)."""
    e = ["var", rng.choice(axes)]
    if len(axes) > 1 and rng.random() < 0.3:
        e = [rng.choice(["add", "sub", "mul"]), e, ["var", rng.choice(axes)]]
    r = rng.random()
    if r < 0.2:
        e = ["floordiv", ["sub", e, _int(rng.randint(0, 9))], _int(rng.choice([2, 3, -2]))]
    elif r < 0.4:
        e = ["floormod", ["add", e, _int(rng.randint(-9, 9))], _int(rng.choice([3, 5, 7]))]
    elif r < 0.5:
        e = ["div", ["sub", e, _int(rng.randint(0, 9))], _int(rng.choice([2, -3]))]
    return ["min", ["max", e, _int(0)], _int(extent - 1)]


def _load(rng: random.Random, tensor: tuple[str, list[int], str], axes: list[str]) -> list:
    name, shape, _ = tensor
    return ["load", name, [_index(rng, axes, d) for d in shape]]


def _expr(rng: random.Random, want: str, depth: int, axes: list[str], tensors: list) -> list:
    """An expression of dtype `want`, at most `depth` operators deep."""
    if depth <= 0 or rng.random() < 0.25:
        if want in FLOATS and rng.random() < 0.6:
            tensor = rng.choice(tensors)
            load = _load(rng, tensor, axes)
            return load if tensor[2] == want else ["cast", want, load]
        if want == "bool":
            return ["const", rng.random() < 0.5, "bool"]
        if want in INTS:
            return ["var", rng.choice(axes)] if want == "int64" and rng.random() < 0.5 else \
                ["const", rng.randint(-5, 9), want]
        return ["const", round(rng.uniform(-3, 3), 3), want]
    sub = lambda dtype: _expr(rng, dtype, depth - 1, axes, tensors)  # noqa: E731
    r = rng.random()
    if r < 0.3 and want != "bool":
        op = rng.choice(["add", "sub", "mul", "min", "max", *(["div"] if want in FLOATS else ["floordiv", "floormod"])])
        if op in ("div", "floordiv", "floormod"):  # by a nonzero constant
            return [op, sub(want), ["const", rng.choice([-2.5, 1.5, 4.0] if want in FLOATS else [-3, 2, 5]), want]]
        return [op, sub(want), sub(want)]
    if r < 0.45:
        return ["cast", want, sub(rng.choice(DTYPES))]
    if r < 0.6:
        return ["select", sub("bool"), sub(want), sub(want)]
    if want == "bool":
        if rng.random() < 0.4:
            return [rng.choice(["and", "or"]), sub("bool"), sub("bool")]
        operand = rng.choice((*FLOATS, *INTS))
        return [rng.choice(["lt", "le", "gt", "ge", "eq", "ne"]), sub(operand), sub(operand)]
    if want in FLOATS:
        f = rng.choice(["exp", "tanh", "sigmoid", "abs", "sqrt", "log", "erf"])
        arg = sub(want)
        if f in ("sqrt", "log"):
            arg = ["add", ["call", "abs", [arg]], ["const", 0.5, want]]
        elif f == "exp":
            arg = ["min", arg, ["const", 5.0, want]]
        return ["call", f, [arg]]
    return sub(want)


def computation(rng: random.Random) -> dict:
    """The te JSON of a random computation (see the module docstring); it may leave an input
    unread (then `custom.check` refuses it)."""
    shape = [rng.choice([1, 3, 8, 17, 40]), rng.choice([5, 16, 33, 67])]
    axes = ["i", "j"]
    tensors, entries = [], []
    for k in range(rng.randint(1, 2)):
        dtype = rng.choice(FLOATS)
        tensor = (f"x{k}", rng.choice([shape, shape[1:], [shape[0], 1]]), dtype)
        entries.append({"name": tensor[0], "op": "placeholder", "shape": tensor[1], "dtype": dtype})
        tensors.append(tensor)
    inputs = list(tensors)
    stages = rng.randint(1, 3)
    for s in range(stages):
        dtype, reduce = rng.choice(FLOATS), rng.random() < 0.3
        body = _expr(rng, dtype, rng.randint(1, 5), axes + (["k"] if reduce else []), tensors)
        entry = {"name": f"s{s}", "op": "compute", "shape": shape, "dtype": dtype, "axes": axes}
        if reduce:
            entry["reduce_axes"] = [{"name": "k", "extent": rng.choice([3, 8, 16])}]
            body = ["reduce", rng.choice(["sum", "max", "min"]), body, ["k"]]
        entry["body"] = body
        entries.append(entry)
        tensors.append((f"s{s}", shape, dtype))
    last = entries[-1]
    for tensor in inputs:  # the last stage reads every input the others left unread
        if f'"load", "{tensor[0]}"' in json.dumps(entries):
            continue
        load = _load(rng, tensor, axes)
        load = load if tensor[2] == last["dtype"] else ["cast", last["dtype"], load]
        if last["body"][0] == "reduce":
            last["body"][2] = ["add", last["body"][2], load]
        else:
            last["body"] = ["add", last["body"], load]
    outputs = [f"s{stages - 1}"] + ([f"s{stages - 2}"] if stages > 1 and rng.random() < 0.3 else [])
    return _renamed({"version": 1, "tensors": entries, "outputs": outputs}, rng)


def _renamed(data: dict, rng: random.Random) -> dict:
    """`data` with about half of its tensors and axes named from HARD_NAMES."""
    names = [t["name"] for t in data["tensors"]] + ["i", "j", "k"]
    renames = {old: new for old, new in zip(names, rng.sample(HARD_NAMES, len(names))) if rng.random() < 0.5}

    def rename(value):  # no node kind, dtype or function is one of the names renamed
        if isinstance(value, str):
            return renames.get(value, value)
        if isinstance(value, list):
            return [rename(v) for v in value]
        return {k: rename(v) for k, v in value.items()} if isinstance(value, dict) else value

    return rename(data)
