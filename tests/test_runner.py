"""Builders and runner on real builds: failing candidates cost one trial each, the run goes on."""

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import helpers_ops
import numpy as np
import pytest
from test_ops_custom import float64_exp_of_float32

from tunefleet.compiler import ops, te
from tunefleet.compiler.target import Target
from tunefleet.compiler.time_limit import TimeLimitError, time_limit
from tunefleet.tuner.builder import Builder
from tunefleet.tuner.host import affinity
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol
from tunefleet.tuner.measure_child import relative_error
from tunefleet.tuner.processes import MAIN_ENV_VAR, CpuGate, context
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


def test_a_builder_process_that_dies_costs_its_candidates_and_the_next_batch_builds(monkeypatch):
    """The dead builder's build never ended: before, timing waited the CpuGate's max_wait_s (180 s)
    for it before each candidate after."""
    monkeypatch.setenv(helpers_ops.DIE_ENV, f"72:{os.getpid()}")
    with LocalMeasurer(plugin_modules=PLUGINS, n_parallel=1) as measurer:
        assert measurer.gate is not None  # builders share the CPUs the candidates are timed on
        (died,) = measurer.measure_batch([faulty("ok", n=72)], FAST)
        assert died.status == "compile_error" and died.error.startswith("builder process failed: BrokenProcessPool")
        start = time.perf_counter()
        assert [r.status for r in measurer.measure_batch([faulty("ok", n=64), faulty("ok", vec=4)], FAST)] == ["ok"] * 2
        assert time.perf_counter() - start < measurer.gate.max_wait_s


@pytest.mark.parametrize("phase, what", [("space", "defining the config space"),
                                         ("lowering", "lowering and C generation")])
def test_a_template_that_does_not_end_fails_its_candidate_and_frees_the_builder(monkeypatch, phase, what):
    """Before, a template or lowering that looped held its builder process for good, and the
    runner waited for it."""
    n = 80 if phase == "space" else 88
    stalled = faulty("ok", n=n)  # its space is defined here, before the stall is set
    monkeypatch.setenv(helpers_ops.STALL_ENV, f"{n}:{phase}")
    builder = Builder(1, plugin_modules=PLUGINS, lowering_limit_s=1)
    try:
        stalled, after = builder.submit(stalled), builder.submit(faulty("ok", n=64))
        result = stalled.result(timeout=helpers_ops.STALL_S / 2)
        assert result.status == "compile_error"
        assert result.error == f"TimeLimitError: {what} took longer than 1 s"
        assert 1 <= result.build_s < helpers_ops.STALL_S / 2
        assert builder.result(after).status == "ok"
    finally:
        builder.close()


def test_a_build_stuck_out_of_the_time_limits_reach_is_killed_and_the_builds_behind_it_run_again(monkeypatch):
    """Before, the runner waited for such a build for good. The build behind it was in the killed
    pool (queued or starting): it is submitted again, not failed."""
    stalled = faulty("ok", n=96)
    monkeypatch.setenv(helpers_ops.STALL_ENV, "96:lowering:in-c")
    builder = Builder(1, plugin_modules=PLUGINS, lowering_limit_s=1, hard_limit_s=3)
    try:
        futures = [builder.submit(stalled), builder.submit(faulty("ok", n=64)), builder.submit(faulty("ok", vec=4))]
        start = time.monotonic()
        result = builder.result(futures[0])
        assert time.monotonic() - start < helpers_ops.STALL_S / 2
        assert result.status == "compile_error"
        assert result.error.startswith("builder process killed: the build ran past the hard limit of 3 s")
        assert [builder.result(f).status for f in futures[1:]] == ["ok", "ok"]
        assert builder.result(builder.submit(faulty("ok", vec=8))).status == "ok"
    finally:
        builder.close()


def test_a_time_limit_fires_in_python_code_and_gives_back_an_earlier_alarm():
    signal.setitimer(signal.ITIMER_REAL, 500)  # pytest-timeout's, where it runs by signal
    handler = signal.getsignal(signal.SIGALRM)
    try:
        with pytest.raises(TimeLimitError, match="^spinning took longer than 0.2 s$"):
            with time_limit(0.2, "spinning"):
                while True:
                    pass
        assert signal.getsignal(signal.SIGALRM) is handler
        assert 499 < signal.getitimer(signal.ITIMER_REAL)[0] <= 500
        with time_limit(600, "waiting"):  # the earlier alarm comes first: it alone applies
            assert signal.getsignal(signal.SIGALRM) is handler
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def test_a_float64_output_of_float32_arithmetic_is_measured(measurer):
    """Its error was held to float64's tolerance: every trial a wrong answer (test_ops_custom)."""
    w = float64_exp_of_float32()
    inp = MeasureInput(w.to_json(), str(TARGET), ops.default_config(w, TARGET).to_json())
    (result,) = measurer.measure_batch([inp], FAST)
    assert result.status == "ok", result.error


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


def test_relative_error_matches_the_same_infinities_and_nans():
    ref = np.array([np.nan, np.inf, -np.inf, 2.0, 4.0], np.float32)
    assert relative_error(ref.copy(), ref) == 0.0
    close = np.array([np.nan, np.inf, -np.inf, 2.0, 4.0002], np.float32)
    assert relative_error(close, ref) == pytest.approx(5e-5, 1e-2)  # over the largest finite |ref|
    for out in ([0.0, np.inf, -np.inf, 2.0, 4.0], [np.nan, -np.inf, -np.inf, 2.0, 4.0],
                [np.nan, np.inf, -np.inf, np.inf, 4.0]):
        assert np.isnan(relative_error(np.array(out, np.float32), ref)), out


def test_a_computation_undefined_on_some_inputs_is_measured(measurer):
    """log(x) of inputs in [-1, 1): NaN for half of them, in the kernel's output as in numpy's. Before,
    NaN made the error NaN: every trial was a wrong answer."""
    x = te.placeholder((1024,), name="x")
    w = ops.make_workload("custom", {"te": te.to_json([te.compute((1024,), lambda i: te.log(x[i]), name="out")])})
    inp = MeasureInput(w.to_json(), str(TARGET), ops.default_config(w, TARGET).to_json())
    (result,) = measurer.measure_batch([inp], FAST)
    assert result.status == "ok", result.error


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


#: A main module that logs each run of itself (pid and sys.argv), then measures four candidates.
MEASURING_MAIN = textwrap.dedent(f"""
    import json, os, sys
    with open(os.environ["RUNS_LOG"], "a") as log:
        log.write(json.dumps([os.getpid(), sys.argv[1:]]) + "\\n")
    sys.path.insert(0, {str(Path(__file__).parent)!r})
    from test_runner import FAST, faulty
    from tunefleet.tuner.runner import LocalMeasurer

    if __name__ == "__main__":
        with LocalMeasurer(plugin_modules=("helpers_ops",), n_parallel=2) as measurer:
            results = measurer.measure_batch([faulty("ok", vec=v, n=n) for v in (1, 4) for n in (64, 96)], FAST)
        print(json.dumps([r.status for r in results]))
""")


def _run_measuring_main(tmp_path, command: list[str]) -> list:
    """Run MEASURING_MAIN as `command` (from tmp_path, where it is written); the runs it logged."""
    (tmp_path / "measuring_main.py").write_text(MEASURING_MAIN)
    runs = tmp_path / "runs.jsonl"
    done = subprocess.run(command, cwd=tmp_path, env={**os.environ, "RUNS_LOG": str(runs)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == ["ok"] * 4
    return [json.loads(line) for line in runs.read_text().splitlines()]


@pytest.mark.parametrize("run_as", ["script", "module"])
def test_the_parents_main_module_runs_once_in_the_fork_server_not_in_every_child(tmp_path, run_as):
    """Multiprocessing re-runs the parent's main module in every process it starts unless the fork
    server ran it (which CPython's own "__main__" preload did not, python/cpython#98552): a main script
    that imports PyTorch cost each measurement child 1.2-2.1 s. Here the main module runs in the
    parent and once in the fork server, with the parent's sys.argv, whether it was started as a
    script or with -m."""
    command = [sys.executable, "measuring_main.py"] if run_as == "script" else [sys.executable, "-m", "measuring_main"]
    logged = _run_measuring_main(tmp_path, [*command, "--marker"])
    # the parent and the fork server; before, also each of the 2 builders and the 4 measurement children
    assert len(logged) == 2, logged
    assert [argv for _, argv in logged] == [["--marker"]] * 2


def test_a_process_without_a_main_module_does_not_hand_on_the_one_it_inherited():
    """`python -c` has no main module to run; one its parent named (in the environment it inherits)
    must not be run in its fork server."""
    code = ("import os; from tunefleet.tuner import processes; processes.context(); "
            "print(os.environ.get(processes.MAIN_ENV_VAR))")
    inherited = json.dumps({"init_main_from_path": "/nonexistent/parent_main.py", "sys_argv": []})
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, MAIN_ENV_VAR: inherited},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "None"


def test_a_main_whose_argv_does_not_fit_an_environment_string_still_measures(tmp_path):
    """Linux refuses an environment string over 128 KiB: a fork server handed the main module with
    two arguments of 100 KiB would not start, and no candidate would be measured. Its children run
    the main module themselves instead, as they did before the fork server ran it."""
    logged = _run_measuring_main(tmp_path, [sys.executable, "measuring_main.py", "x" * (100 << 10), "y" * (100 << 10)])
    assert len(logged) > 2


#: A script that tunes when imported: every process multiprocessing starts from it runs it again.
UNGUARDED_TUNING = textwrap.dedent("""
    from tunefleet.compiler import ops
    from tunefleet.tuner.tune import tune

    tune(ops.make_workload("matmul", {"M": 32, "N": 32, "K": 32}), "cpu", trials=8,
         records_path="records.jsonl", validate_top=0)
    print("tuned")
""")


def test_a_script_that_tunes_when_imported_stops_at_its_first_build_and_says_why(tmp_path):
    """Each builder process re-runs such a script and dies of it; before, each of the trials was
    recorded as a compile_error ("BrokenProcessPool") and the tuning "finished" with no kernel."""
    (tmp_path / "unguarded.py").write_text(UNGUARDED_TUNING)
    done = subprocess.run([sys.executable, "unguarded.py"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1
    assert "tuned" not in done.stdout
    # the dead processes' own tracebacks go to the same stderr, in whatever order they come
    error = [line for line in done.stderr.splitlines() if line.startswith("tunefleet.tuner.processes.StartError: ")]
    assert len(error) == 1, done.stderr
    assert "processes started from " + str(tmp_path / "unguarded.py") in error[0]
    assert 'if __name__ == "__main__":' in error[0]
    records = tmp_path / "records.jsonl"
    assert not records.exists() or "compile_error" not in records.read_text()
