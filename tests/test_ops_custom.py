"""custom workloads: softmax, layernorm and an elementwise chain written as te JSON build with
the generic template and match numpy; the interpreter and FLOP count; bad JSON is rejected
with errors on the field "te"."""

import functools
import json
import random

import numpy as np
import pytest
import random_te
from ops_check import TARGET, failures, relative_error, sample

from tunefleet.compiler import ops, te
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.ops.te_analysis import count_flop, inlined_size, precision_dtype


def softmax(M, N):
    x = te.placeholder((M, N), name="x")
    k = te.reduce_axis(N, "k")
    mx = te.compute((M,), lambda i: te.max(x[i, k], axis=k), name="mx")
    e = te.compute((M, N), lambda i, j: te.exp(x[i, j] - mx[i]), name="e")
    k2 = te.reduce_axis(N, "k2")
    s = te.compute((M,), lambda i: te.sum(e[i, k2], axis=k2), name="s")
    return te.compute((M, N), lambda i, j: e[i, j] / s[i], name="out")


def layernorm(M, N, eps=1e-5):
    x = te.placeholder((M, N), name="x")
    gamma, beta = te.placeholder((N,), name="gamma"), te.placeholder((N,), name="beta")
    k = te.reduce_axis(N, "k")
    s1 = te.compute((M,), lambda i: te.sum(x[i, k], axis=k), name="s1")
    mean = te.compute((M,), lambda i: s1[i] * (1.0 / N), name="mean")
    k2 = te.reduce_axis(N, "k2")
    s2 = te.compute((M,), lambda i: te.sum((x[i, k2] - mean[i]) * (x[i, k2] - mean[i]), axis=k2), name="s2")
    return te.compute((M, N), lambda i, j: (x[i, j] - mean[i]) / te.sqrt(s2[i] * (1.0 / N) + eps) * gamma[j]
                      + beta[j], name="out")


def chain(M, N):
    a, b = te.placeholder((M, N), name="a"), te.placeholder((N,), name="b")
    t = te.compute((M, N), lambda i, j: a[i, j] * 2.0 + b[j], name="t")
    return te.compute((M, N), lambda i, j: te.tanh(t[i, j]) + te.sigmoid(t[i, te.min(j + 1, N - 1)]), name="out")


def custom(out) -> ops.Workload:
    """The workload a client would submit: the JSON text of the computation."""
    return ops.make_workload("custom", {"te": json.loads(json.dumps(te.to_json([out])))})


def np_softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def np_layernorm(x, gamma, beta, eps=1e-5):
    x = x.astype(np.float64)
    return (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + eps) * gamma + beta


@pytest.mark.parametrize("make, shapes", [(softmax, [(13, 37), (1, 129), (64, 16)]),
                                          (layernorm, [(7, 100), (3, 1), (32, 768)]),
                                          (chain, [(5, 33), (1, 7), (9, 130)])])
def test_random_configs_match_numpy(make, shapes):
    cases = [c for n, s in enumerate(shapes) for c in sample(custom(make(*s)), 4, seed=n)]
    assert len({c[1].to_json()["index"] for c in cases}) >= 6
    assert not failures(cases)


def test_full_reduction_to_a_scalar():
    x = te.placeholder((5, 7), name="x")
    k, m = te.reduce_axis(5, "k"), te.reduce_axis(7, "m")
    total = te.compute((), lambda: te.sum(x[k, m] * x[k, m], axis=[k, m]), name="total")
    norm = te.compute((), lambda: te.sqrt(total[()]), name="norm")
    w = custom(norm)
    assert not failures(sample(w, 4, seed=3))
    x_val = np.arange(35, dtype=np.float32).reshape(5, 7)
    assert relative_error(w.reference(x_val)[0], np.linalg.norm(x_val.astype(np.float64))) < 1e-6


def test_interpreter_matches_numpy_formulas():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((13, 37)).astype(np.float32)
    gamma, beta = rng.standard_normal(37).astype(np.float32), rng.standard_normal(37).astype(np.float32)
    (sm,) = custom(softmax(13, 37)).reference(x)
    (ln,) = custom(layernorm(13, 37)).reference(x, gamma, beta)
    assert sm.dtype == np.float32 and relative_error(sm, np_softmax(x.astype(np.float64))) < 1e-6
    assert relative_error(ln, np_layernorm(x, gamma, beta)) < 1e-5


def test_default_configs_and_arguments():
    w = custom(layernorm(32, 64))
    built = build_workload(w, ops.default_config(w, TARGET), TARGET)
    assert [(a.name, a.shape, a.is_output) for a in built.args] == [
        ("x", (32, 64), False), ("gamma", (64,), False), ("beta", (64,), False), ("out", (32, 64), True)]
    rng = np.random.default_rng(1)
    ins = ops.random_inputs(w.tensors(), rng)
    assert relative_error(built.run(*ins)[0], np_layernorm(*ins)) < 1e-4


def test_flop_count():
    # softmax: max (1 per point), exp(x - max) (2), sum (1), divide (1) over M×N points
    assert count_flop([softmax(4, 8)]) == 4 * 8 * 5
    assert custom(softmax(4, 8)).flop == 160


def _json(out) -> dict:
    return te.to_json([out])


@pytest.mark.parametrize("mutate, message", [
    (lambda j: j["tensors"][-1].update(body=["evil", ["const", 1.0, "float32"]]), "unknown node kind"),
    (lambda j: j["tensors"][0].update(name="__import__"), "reserved"),
    (lambda j: j.update(outputs=["nothing"]), "output 'nothing'"),
    (lambda j: j["tensors"][-1]["body"][1][2].__setitem__(1, ["add", ["var", "i"], ["var", "j"]]),
     r"may range over \[0, 10\]"),  # x[i, i + j] leaves x
    (lambda j: j["tensors"].insert(0, {"name": "unused", "op": "placeholder", "shape": [3], "dtype": "float32"}),
     "no output reads"),
])
def test_bad_json_is_rejected_on_field_te(mutate, message):
    x = te.placeholder((4, 8), name="x")
    data = _json(te.compute((4, 8), lambda i, j: x[i, j] * 2.0, name="out"))
    mutate(data)
    with pytest.raises(ops.WorkloadError, match=message) as exc:
        ops.make_workload("custom", {"te": data})
    assert exc.value.field == "te"


def doubling_chain(depth: int) -> te.Tensor:
    """`depth` tensors, each reading the one before twice: inlined, 2**depth loads of x."""
    t = te.placeholder((64,), name="x")
    for k in range(depth):
        t = te.compute((64,), lambda i, p=t: p[i] * 0.5 + p[i] * 0.25, name=f"s{k}")
    return t


def test_inlined_size_counts_what_the_generic_template_lowers():
    # each stage's own 9 nodes (add, 2 × mul, load, var, const) and twice the one before, inlined;
    # 3 levels more (add, mul, load) for each
    sizes = [inlined_size([doubling_chain(d)]) for d in range(1, 8)]
    assert sizes == [(9 * (2**d - 1), 3 * d + 1) for d in range(1, 8)]
    # softmax's reductions stay stages; out = e[i, j] / s[i] has 6 nodes, e = exp(x[i, j] - mx[i])
    # 7 more inlined into it, whatever the shapes; e's 4 levels nest below its load, the second level
    assert inlined_size([softmax(4, 8)]) == inlined_size([softmax(64, 1000)]) == (13, 6)


def test_a_computation_that_inlines_into_a_huge_expression_is_rejected_on_field_te():
    """30 stages of a few hundred bytes of JSON each lower to 2**30 loads: the builder would take
    hours (depth 14: 4 s), so the edge refuses it; depth 10 still builds and matches numpy."""
    with pytest.raises(ops.WorkloadError, match=f"more than {te.MAX_JSON_NODES} nodes") as exc:
        custom(doubling_chain(30))
    assert exc.value.field == "te"
    w = custom(doubling_chain(10))
    x = np.random.default_rng(0).random(64, dtype=np.float32)
    assert relative_error(build_workload(w, ops.default_config(w, TARGET), TARGET).run(x)[0], x * 0.75 ** 10) < 1e-4


def nested(depth: int, name: str = "out") -> te.Tensor:
    """name[i] = x[i] + (x[i] + (... + 1.0)), `depth` additions: depth + 2 levels deep (the last
    addition's x[i] and its index)."""
    x = te.placeholder((64,), name="x")
    return te.compute((64,), lambda i: functools.reduce(lambda e, _: x[i] + e, range(depth), te.const(1.0)), name=name)


def test_expressions_that_nest_too_deep_are_rejected_on_field_te():
    """The compiler's passes recurse along an expression: 500 levels of JSON raised RecursionError in
    the server (HTTP 500), 450 in a lowering. Rejected over te.MAX_EXPR_DEPTH, as written or once the
    stages are inlined; at the limit it builds and matches numpy."""
    with pytest.raises(ops.WorkloadError, match=f"nests deeper than {te.MAX_EXPR_DEPTH} levels") as exc:
        custom(nested(te.MAX_EXPR_DEPTH - 1))
    assert exc.value.field == "te"
    half = te.MAX_EXPR_DEPTH // 2
    chained = nested(half, "inner")
    for name in ("again", "out"):  # each stage half the limit deep, the three inlined not within it
        chained = te.compute((64,), lambda i, t=chained: functools.reduce(lambda e, _: e * 0.5, range(half), t[i]),
                             name=name)
    with pytest.raises(ops.WorkloadError, match=f"nests deeper than {te.MAX_EXPR_DEPTH} levels"):
        custom(chained)
    w = custom(nested(te.MAX_EXPR_DEPTH - 2))
    x = np.random.default_rng(0).random(64, dtype=np.float32)
    got = build_workload(w, ops.default_config(w, TARGET), TARGET).run(x)[0]
    assert relative_error(got, x * (te.MAX_EXPR_DEPTH - 2) + 1.0) < 1e-4


@pytest.mark.parametrize("body", [
    ["mul", ["load", "x", [["var", "i"]]], ["var", "i"]],  # an iteration variable beside float lanes
    ["div", ["load", "x", [["var", "i"]]], ["const", 4, "int64"]],
    ["mul", ["load", "x", [["var", "i"]]], ["const", 2.5, "float64"]],  # float32 beside float64
    ["select", ["lt", ["var", "i"], ["const", 2, "int32"]], ["load", "x", [["var", "i"]]], ["const", 3, "int32"]],
    # bool of an int or a float, then arithmetic with it: the cast kept the value (2 + x, not 1 + x)
    ["add", ["load", "x", [["var", "i"]]], ["cast", "bool", ["floormod", ["var", "i"], ["const", 3, "int64"]]]],
    ["add", ["load", "x", [["var", "i"]]],
     ["cast", "float32", ["cast", "bool", ["sub", ["load", "x", [["var", "i"]]], ["const", 0.5, "float32"]]]]],
])
def test_mixed_dtypes_from_json_build_and_match_the_interpreter(body):
    """Before, each config failed to build: the C generator's KeyError 'int32', or gcc's error on a
    float32 vector times a double; or, for a cast to bool, computed wrongly."""
    data = {"version": 1, "outputs": ["out"], "tensors": [
        {"name": "x", "op": "placeholder", "shape": [37], "dtype": "float32"},
        {"name": "out", "op": "compute", "shape": [37], "dtype": "float32", "axes": ["i"], "body": body}]}
    assert failures(sample(ops.make_workload("custom", {"te": data}), 2, 0)) == []


def float64_exp_of_float32(n: int = 1024) -> ops.Workload:
    """out = float64(exp(x)) for a float32 x of n elements."""
    x = te.placeholder((n,), name="x")
    return custom(te.compute((n,), lambda i: te.cast("float64", te.exp(x[i])), name="out"))


def test_outputs_are_checked_at_the_precision_of_their_arithmetic_and_their_own():
    """Before, every config of float64(exp(x)) for a float32 x was a wrong answer: its error, the
    float32 rounding of a vectorized exp (6e-8), was held to float64's tolerance (1e-9)."""
    w = float64_exp_of_float32()
    assert w.tensors()[-1].dtype == "float64" and precision_dtype(w.tensors()[-1]) == "float32"
    assert failures(sample(w, 3, 0)) == []
    x, y = te.placeholder((8,), name="x"), te.placeholder((8,), "float64", name="y")
    exact = te.compute((8,), lambda i: y[i] * 2.0 + te.cast("float64", x[i]), name="exact")  # float32 only loaded
    assert precision_dtype(exact) == "float64"
    assert precision_dtype(te.compute((8,), lambda i: te.cast("float64", x[i]), name="copy")) == "float64"
    assert precision_dtype(te.compute((8,), lambda i: te.cast("float32", y[i] * 3.0), name="narrowed")) == "float32"


def test_a_float32_value_cast_to_float64_has_only_float32s_digits_in_the_reference():
    """The interpreter kept a float32 constant's decimal value (-1.011), the kernel its float32 value
    (-1.01100004): each trial of such a float64 computation was a wrong answer (3.7e-8 > 1e-9)."""
    y = te.placeholder((37,), "float64", name="y")
    w = custom(te.compute((37,), lambda i: y[i] * te.cast("float64", te.const(-1.011, "float32")), name="out"))
    (ref,) = w.reference(np.ones(37))
    assert ref[0] == np.float64(np.float32(-1.011)) != -1.011
    assert failures(sample(w, 2, 0)) == []


def _clamped(index: list) -> list:
    return ["min", ["max", index, ["const", 0, "int64"]], ["const", 36, "int64"]]


@pytest.mark.parametrize("index", [
    ["div", ["sub", ["var", "i"], ["const", 4, "int64"]], ["const", 2, "int64"]],  # was C's i - 4 / 2
    ["mul", ["var", "i"], ["floordiv", ["var", "i"], ["const", 2, "int64"]]],  # was i * i / 2, or recursed
    ["mul", ["var", "i"], ["div", ["var", "i"], ["const", 3, "int64"]]],
    ["sub", ["const", 40, "int64"], ["floormod", ["var", "i"], ["const", 7, "int64"]]],  # was x[36] for all
])
def test_integer_index_arithmetic_lowers_as_written(index):
    """Before: integer `div` had no C precedence, so its operands went unparenthesized; a division
    right of a product lost its parentheses; the range of a product of two variables recursed
    forever; and the tail loop of a parallel split shared its variable with the main loop, whose
    range then became the tail's (i in 0..4 instead of 0..31: min(40 - i % 7, 36) folded to 36)."""
    data = {"version": 1, "outputs": ["out"], "tensors": [
        {"name": "x", "op": "placeholder", "shape": [37], "dtype": "float32"},
        {"name": "out", "op": "compute", "shape": [37], "dtype": "float32", "axes": ["i"],
         "body": ["load", "x", [_clamped(index)]]}]}
    assert failures(sample(ops.make_workload("custom", {"te": data}), 2, 0)) == []


@pytest.mark.parametrize("seed", [0, 1])
def test_random_computations_match_the_interpreter(seed):
    """12 random computations per seed (tests/random_te.py), each built with its default and two random
    configs for this host's ISA and compared with the numpy interpreter."""
    rng, workloads = random.Random(seed), []
    while len(workloads) < 12:
        try:
            workloads.append(ops.make_workload("custom", {"te": random_te.computation(rng)}))
        except ops.WorkloadError:  # an input left unread
            pass
    assert failures([case for n, w in enumerate(workloads) for case in sample(w, 2, n)]) == []
