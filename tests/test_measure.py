"""Measure types: validation names the field, JSON round trips, statistics."""

import json
import math
import statistics

import pytest

from tunefleet.tuner.measure import (
    STATUSES,
    MeasureInput,
    MeasureProtocol,
    MeasureResult,
    canonical_json,
    workload_key,
)

WORKLOAD = {"op": "matmul", "M": 64, "N": 32, "K": 16, "dtype": "float32"}
CONFIG = {"index": 3, "knobs": {"tile": [8, 8]}}


def roundtrip(obj):
    return type(obj).from_json(json.loads(json.dumps(obj.to_json())))


def test_protocol_defaults_and_round_trip():
    p = MeasureProtocol()
    assert (p.number, p.repeat, p.min_repeat_ms, p.cooldown_ms) == (1, 10, 2.0, 1.0)
    assert p.check_correctness and not p.flush_cache and p.timeout_s > 0
    q = MeasureProtocol(number=2, repeat=20, min_repeat_ms=0, cooldown_ms=5, flush_cache=True, timeout_s=3)
    assert roundtrip(p) == p and roundtrip(q) == q


@pytest.mark.parametrize(
    "field,value",
    [("number", 0), ("repeat", 1.5), ("repeat", True), ("min_repeat_ms", -1), ("cooldown_ms", math.nan),
     ("flush_cache", 1), ("timeout_s", 0), ("check_correctness", "yes"), ("max_disturbance", -0.1),
     ("remeasure", 11), ("rounds", 0)],
)
def test_protocol_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=rf"MeasureProtocol\.{field} must be"):
        MeasureProtocol(**{field: value})


def test_from_json_rejects_unknown_and_missing_fields():
    with pytest.raises(ValueError, match=r"unknown field\(s\) \['repeats'\]"):
        MeasureProtocol.from_json({"repeats": 3})
    with pytest.raises(ValueError, match=r"missing field\(s\) \['target'\]"):
        MeasureInput.from_json({"workload": WORKLOAD, "config": CONFIG})
    with pytest.raises(ValueError, match="must be an object"):
        MeasureResult.from_json([1])


def test_input_round_trip_and_workload_key():
    inp = MeasureInput(WORKLOAD, "cpu -isa=avx2", CONFIG)
    assert roundtrip(inp) == inp
    reordered = dict(reversed(list(WORKLOAD.items())))
    assert workload_key(reordered) == inp.workload_key == workload_key(json.loads(canonical_json(WORKLOAD)))
    assert len(inp.workload_key) == 64
    assert workload_key({**WORKLOAD, "M": 65}) != inp.workload_key
    with pytest.raises(ValueError, match=r"MeasureInput\.target"):
        MeasureInput(WORKLOAD, " ", CONFIG)
    with pytest.raises(ValueError, match=r"MeasureInput\.config"):
        MeasureInput(WORKLOAD, "cpu", {"index": 3})
    with pytest.raises(ValueError, match=r"MeasureInput\.workload"):
        MeasureInput({}, "cpu", CONFIG)
    with pytest.raises(ValueError):
        workload_key({"x": math.inf})


def test_result_statistics():
    r = MeasureResult("ok", [2e-3, 1e-3, 4e-3, 1.5e-3, 3e-3], build_s=0.5, run_s=0.3, host="h1")
    assert r.median == 2e-3
    assert r.gflops(2e6) == pytest.approx(1.0)
    assert r.throughput() == pytest.approx(500.0) and r.peak_throughput() == pytest.approx(1000.0)
    assert r.cv == pytest.approx(statistics.stdev(r.costs) / statistics.fmean(r.costs))
    assert MeasureResult("ok", [1e-3]).cv == 0.0
    assert r.spread == pytest.approx((3e-3 - 1.5e-3) / 2e-3)  # quartiles 1.5 and 3 ms, median 2
    assert MeasureResult("ok", [1e-3]).spread == 0.0
    # one repeat stretched by a hiccup of the host: CV says 9%, the spread what the others say
    hiccup = MeasureResult("ok", [1e-3 * (1 + 0.0005 * i) for i in range(29)] + [1.5e-3])
    assert hiccup.cv > 0.08 and hiccup.spread < 0.01
    bad = MeasureResult("timeout", error="ran past 10 s")
    assert bad.median == math.inf and bad.gflops(1e9) == 0.0 and bad.throughput() == 0.0 and bad.cv == math.inf
    assert bad.spread == math.inf
    assert bad.peak_throughput() == 0.0
    assert roundtrip(r) == r and roundtrip(bad) == bad
    assert bad.host and bad.timestamp > 1.7e9


@pytest.mark.parametrize(
    "kwargs,field",
    [({"status": "crashed"}, "status"), ({"status": "ok"}, "costs"), ({"status": "ok", "costs": [0.0]}, "costs"),
     ({"status": "ok", "costs": [math.inf]}, "costs"), ({"status": "ok", "costs": [1.0], "build_s": -1}, "build_s"),
     ({"status": "runtime_error", "error": None}, "error"), ({"status": "ok", "costs": (1.0,)}, "costs"),
     ({"status": "ok", "costs": [1.0], "disturbance": -1}, "disturbance"),
     ({"status": "ok", "costs": [1.0], "disturbed": 1}, "disturbed")],
)
def test_result_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"MeasureResult\.{field} must be"):
        MeasureResult(**kwargs)


def test_statuses_are_the_documented_ones():
    assert STATUSES == ("ok", "compile_error", "runtime_error", "wrong_answer", "timeout", "worker_lost",
                        "unsupported_target")
    for s in STATUSES[1:]:
        assert not MeasureResult(s).ok
