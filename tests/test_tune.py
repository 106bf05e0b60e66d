"""The tuning loop on real builds and runs: resume, records, validation, apply_best, transfer."""

import helpers_ops  # noqa: F401  (registers the test operator "faulty")
import numpy as np
import pytest

import tunefleet
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner import records
from tunefleet.tuner.apply import apply_best
from tunefleet.tuner.measure import MeasureProtocol
from tunefleet.tuner.runner import LocalMeasurer
from tunefleet.tuner.tune import TuneError, tune

TARGET = Target.host()
FAST = MeasureProtocol(repeat=2, min_repeat_ms=1, cooldown_ms=0, timeout_s=1.0)
DEVICE = "cpu-test-2c"


@pytest.fixture(scope="module")
def measurer():
    with LocalMeasurer(plugin_modules=("helpers_ops",)) as m:
        yield m


def faulty(n):
    return ops.make_workload("faulty", {"n": n})


def run(workload, path, measurer, **options):
    return tune(workload, TARGET, records_path=path, protocol=FAST, device_key=DEVICE, measurer=measurer,
                validate_top=2, validation_repeat=4, **options)


def test_resume_measures_nothing_twice_and_apply_best_builds_a_working_artifact(tmp_path, measurer):
    """The "faulty" space has 15 configs, 3 of them correct; the others crash, hang, compute wrongly or
    do not lower. Every failure costs one trial and the run goes on."""
    path, w = tmp_path / "records.jsonl", faulty(64)
    seen = []
    first = run(w, path, measurer, trials=8, strategy="xgb", progress=seen.append)
    assert first.measured == 8 and first.stopped == "budget" and len(path.read_text().splitlines()) >= 8
    assert [p.phase for p in seen][-2:] == ["validate", "done"] and seen[-1].trials_done == 8
    assert [p.trials_done for p in seen] == sorted(p.trials_done for p in seen)
    with pytest.raises(TuneError, match="already holds 8 measured configs"):
        run(w, path, measurer, trials=12)

    second = run(w, path, measurer, trials=12, strategy="xgb", resume=True)
    assert second.measured == 4 and len(second.trials) == 12
    indices = [t.config["index"] for t in second.trials]
    assert len(set(indices)) == 12  # nothing measured twice by the search
    assert indices[:8] == [t.config["index"] for t in first.trials]

    stored = records.load(path)
    assert {r.result.status for r in stored} >= {"ok", "runtime_error", "wrong_answer", "compile_error"}
    validated = [r for r in stored if len(r.result.costs) == 4]
    assert validated and all(r.config["knobs"]["mode"] == "ok" for r in validated)
    assert second.best.config["knobs"]["mode"] == "ok" and len(second.best.result.costs) == 4
    assert second.best == records.best(stored, second.best.workload_key, str(TARGET), DEVICE)
    assert second.gflops > 0 and second.cv >= 0

    out = apply_best(path, w, TARGET, tmp_path / "artifact", device_key=DEVICE)
    kernel = tunefleet.load(out)
    a = np.random.default_rng(0).random(64, dtype=np.float32)
    np.testing.assert_allclose(kernel(a), 2 * a, rtol=1e-6)
    assert kernel.manifest["config"] == second.best.config and kernel.manifest["device_key"] == DEVICE
    assert kernel.manifest["latency_s"] == second.best.result.median

    with pytest.raises(LookupError, match="no correct record"):
        apply_best(path, faulty(32), TARGET, tmp_path / "none")


def test_transfer_seeds_the_model_and_early_stopping_ends_the_run(tmp_path, measurer):
    path, other = tmp_path / "records.jsonl", tmp_path / "other.jsonl"
    run(faulty(64), path, measurer, trials=6, strategy="random", seed=1)
    tune(faulty(48), TARGET, records_path=other, protocol=FAST, device_key="cpu-elsewhere-2c", measurer=measurer,
         trials=3, strategy="grid", validate_top=0)
    same_family_and_device = len(records.load(path))
    # another shape of the same operator on the same device key seeds the model; another device's do not
    result = run(faulty(32), path, measurer, trials=15, strategy="xgb", early_stopping=3,
                 transfer_records=records.load(other))
    assert result.transferred == same_family_and_device
    assert result.stopped == "early_stopping" and result.measured < 15
