"""Tensor expressions: construction errors, canonical JSON round trip, data-only parsing."""

import json

import pytest

from tunefleet.compiler import te
from tunefleet.compiler.ops import make_workload


def _matmul_relu():
    A = te.placeholder((4, 5), name="A")
    B = te.placeholder((5, 3), name="B")
    k = te.reduce_axis(5, "k")
    C = te.compute((4, 3), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.compute((4, 3), lambda i, j: te.if_then_else(C[i, j] > 0.0, C[i, j], te.exp(C[i, j]) - 1.0), name="D")


def test_json_round_trip_is_canonical():
    data = te.to_json([_matmul_relu()])
    text = json.dumps(data, sort_keys=True)
    (again,) = te.from_json(json.loads(text))
    assert json.dumps(te.to_json([again]), sort_keys=True) == text


@pytest.mark.parametrize("bad", ["A; system('rm -rf /')", "__import__", "int", "tf_pool", "1abc", "a" * 80])
def test_from_json_rejects_malicious_identifiers(bad):
    data = te.to_json([_matmul_relu()])
    data["tensors"][0]["name"] = bad
    with pytest.raises(te.TEError, match="name"):
        te.from_json(data)


def test_from_json_rejects_unknown_node_kinds_and_unbound_names():
    data = te.to_json([_matmul_relu()])
    data["tensors"][3]["body"] = ["eval", "open('/etc/passwd')"]
    with pytest.raises(te.TEError, match="unknown node kind 'eval'"):
        te.from_json(data)
    data = te.to_json([_matmul_relu()])
    data["tensors"][2]["body"][2][1][2][0] = ["var", "zz"]
    with pytest.raises(te.TEError, match="unknown variable 'zz'"):
        te.from_json(data)


# (a path into the JSON of _matmul_relu, a value of the wrong JSON type there, words of the error)
WRONG_TYPES = [
    (("tensors", 0, "shape"), 4.5, "shape must be a list"),
    (("tensors", 2, "reduce_axes"), 5, "reduce_axes: must be a list"),
    (("tensors", 2, "body", 1), ["sum"], "unknown reducer"),
    (("tensors", 2, "body", 3, 0), {"k": 1}, "expected a name"),
    (("tensors", 2, "body", 2, 1, 1), ["A"], "expected a name"),
    (("tensors", 2, "body", 2, 1, 2, 0, 1), ["i"], "expected a name"),
    (("tensors", 3, "body", 3, 1, 1), ["exp"], "expected a name"),
    (("tensors", 3, "body", 1, 2, 2), ["float32"], "unknown dtype"),
    (("tensors", 3, "body", 1, 2), ["const", 1.5, "int32"], "not an integer"),
    (("tensors", 3, "body", 1, 2), ["const", float("nan"), "int32"], "not an integer"),
    (("outputs", 0), ["D"], "output"),
]


@pytest.mark.parametrize(("path", "value", "words"), WRONG_TYPES)
def test_from_json_names_a_value_of_the_wrong_type(path, value, words):
    """Each raised TypeError or ValueError (unhashable list, int not iterable, NaN to int): an
    HTTP 500 for a custom task, where the client is owed a 422 naming the field."""
    data = te.to_json([_matmul_relu()])
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    with pytest.raises(te.TEError, match=words):
        te.from_json(data)


def test_shapes_dtypes_and_nesting_are_validated():
    with pytest.raises(te.TEError, match="shape"):
        te.placeholder((4, -1), name="A")
    with pytest.raises(te.TEError, match="dtype"):
        te.placeholder((4,), "complex64", name="A")
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis(4, "k")
    with pytest.raises(te.TEError, match="reduction must be the whole body"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) + 1.0, name="B")
    with pytest.raises(te.TEError, match="no truth value"):
        bool(A[0, 0] > 1.0)


def test_workload_key_is_stable_and_argument_order_free():
    a = make_workload("matmul", {"M": 8, "N": 16, "K": 4})
    b = make_workload("matmul", {"K": 4, "N": 16, "M": 8})
    assert a.key == b.key and len(a.key) == 24
    assert a.key != make_workload("matmul", {"M": 8, "N": 16, "K": 5}).key


def test_a_python_bool_as_a_condition_names_te_eq():
    """`i == 0` between expressions is Python's object comparison (False); a condition built from
    it is refused with the way out, instead of silently selecting the else branch everywhere."""
    A = te.placeholder((8,), name="A")
    with pytest.raises(te.TEError, match=r"te.eq\(a, b\)"):
        te.compute((8,), lambda i: te.if_then_else(i == 0, A[i], 0.0), name="B")
    with pytest.raises(te.TEError, match="Python bool False"):
        te.all_of(A.shape[0] > 9)
    B = te.compute((8,), lambda i: te.if_then_else(te.eq(i, 0), A[i], 0.0), name="B")
    assert B.op.body.cond.op == "eq"


def test_constants_intrinsics_indices_and_extents_are_typed():
    """Each was accepted from a client's JSON, then failed every trial (gcc, or the C generator's
    KeyError), or the server (OverflowError: HTTP 500)."""
    A = te.placeholder((8,), name="A")
    with pytest.raises(te.TEError, match="does not fit float32"):
        te.const(10**400, "float32")
    with pytest.raises(te.TEError, match="does not fit int32"):
        te.const(1 << 31, "int32")
    assert te.const(-(1 << 31), "int32").value == -(1 << 31)
    with pytest.raises(te.TEError, match="intrinsic 'exp' takes float arguments, got \\(int32\\)"):
        te.exp(te.const(1, "int32"))
    with pytest.raises(te.TEError, match="index 0 of tensor 'A' has dtype float32"):
        te.compute((8,), lambda i: A[A[i]], name="B")
    with pytest.raises(te.TEError, match="extent must be a positive int, got True"):
        te.reduce_axis(True, "k")


def test_float_arithmetic_converts_its_other_operand_explicitly():
    """An int or a narrower float beside a float is cast to their promotion, so that the backends
    see one dtype per vector operation; index arithmetic keeps its ints."""
    A = te.placeholder((8,), name="A")
    i = te.reduce_axis(8, "i")
    scaled = A[0] * i
    assert scaled.dtype == "float32" and isinstance(scaled.b, te.Cast) and scaled.b.dtype == "float32"
    wide = A[0] * te.const(2.0, "float64")
    assert wide.dtype == "float64" and isinstance(wide.a, te.Cast) and wide.b.dtype == "float64"
    chosen = te.if_then_else(i < 2, A[0], te.const(3, "int32"))
    assert chosen.dtype == "float32" and isinstance(chosen.f, te.Cast)
    index = i + te.const(1, "int32")
    assert index.dtype == "int64" and not isinstance(index.b, te.Cast)
