"""Builders and runner on real builds: failing candidates cost one trial each, the run goes on."""

import json
import threading
import time

import helpers_ops
import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner.host import affinity
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol
from tunefleet.tuner.measure_child import relative_error
from tunefleet.tuner.processes import CpuGate, context
from tunefleet.tuner.runner import LocalMeasurer, measure_batch

TARGET = Target.host()
PLUGINS = ("helpers_ops",)
FAST = MeasureProtocol(repeat=2, min_repeat_ms=1, cooldown_ms=0, timeout_s=1.5)


def faulty(mode, vec=1, n=64):
    w = ops.make_workload("faulty", {"n": n})
    config = ops.config_space(w, TARGET).from_json({"knobs": {"mode": mode, "vec": vec}})
    return MeasureInput(w.to_json(), str(TARGET), config.to_json())


@pytest.fixture(scope="module")
def measurer():
    with LocalMeasurer(plugin_modules=PLUGINS) as m:
        yield m


def test_crash_hang_wrong_and_illegal_candidates_each_cost_one_trial(measurer):
    modes = ["crash", "ok", "hang", "wrong", "illegal", "ok"]
    start = time.perf_counter()
    results = measurer.measure_batch([faulty(m, vec=4 if i == 5 else 1) for i, m in enumerate(modes)], FAST)
    assert [r.status for r in results] == [
        "runtime_error", "ok", "timeout", "wrong_answer", "compile_error", "ok"]
    crash, ok, hang, wrong, illegal, ok4 = results
    assert "signal SIGSEGV" in crash.error
    assert "timeout_s=1.5" in hang.error and hang.run_s >= 1.5
    assert "max relative error" in wrong.error and "tolerance 0.0001" in wrong.error
    assert illegal.error.startswith("ScheduleError") and "'B'" in illegal.error
    for r in (ok, ok4):
        assert len(r.costs) == 2 and all(0 < c < 1e-3 for c in r.costs)
        assert r.build_s > 0 and r.run_s > 0 and r.error == ""
    assert time.perf_counter() - start < 30


def test_timeout_counts_execution_not_waiting_in_the_queue(measurer):
    """Two hangs, then a correct candidate that waited > 2 timeouts for its turn: it is still measured."""
    results = measurer.measure_batch([faulty("hang"), faulty("hang"), faulty("ok", vec=8)], FAST)
    assert [r.status for r in results] == ["timeout", "timeout", "ok"]


def test_child_is_pinned_with_one_thread_per_cpu_and_sees_the_current_environment(tmp_path, monkeypatch):
    probe = tmp_path / "probe.json"
    monkeypatch.setenv(helpers_ops.PROBE_ENV, str(probe))  # set after the fork server started
    cpus = affinity()[:1]
    (result,) = measure_batch([faulty("ok")], FAST, cpus, plugin_modules=PLUGINS)
    assert result.ok
    assert json.loads(probe.read_text()) == {"affinity": cpus, "threads": "1"}


def test_config_that_does_not_fit_the_space_is_a_compile_error(measurer):
    inp = faulty("ok")
    bad = MeasureInput(inp.workload, inp.target, {"knobs": {"mode": "ok", "vec": 3}})
    (result,) = measurer.measure_batch([bad], FAST)
    assert result.status == "compile_error" and "ConfigError" in result.error and "vec" in result.error


def test_relative_error_fails_on_unwritten_elements():
    ref = np.ones(4, np.float32)
    assert relative_error(ref * (1 + 1e-6), ref) < 1e-4
    assert np.isnan(relative_error(np.array([1, np.nan, 1, 1], np.float32), ref))


def test_cpu_gate_keeps_builds_out_of_timing():
    gate = CpuGate(context())
    events = []

    def build():
        with gate.building():
            events.append("build")

    with gate.timing():
        t = threading.Thread(target=build)
        t.start()
        time.sleep(0.2)
        events.append("timed")
    t.join()
    assert events == ["timed", "build"]
