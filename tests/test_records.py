"""Record files: round trip, crash tolerance, schema checks, best()."""

import json
import warnings

import pytest

from tunefleet import __version__
from tunefleet.tuner import validation
from tunefleet.tuner.measure import MeasureInput, MeasureResult, workload_key
from tunefleet.tuner.records import (
    SCHEMA_VERSION,
    Record,
    RecordError,
    Toolchain,
    TornRecordWarning,
    append,
    best,
    load,
)

MATMUL = {"op": "matmul", "M": 64, "N": 64, "K": 64}
OTHER = {"op": "matmul", "M": 128, "N": 64, "K": 64}
GCC = Toolchain("gcc", "12.2.0")


def rec(workload=MATMUL, index=0, costs=(1e-3,), status="ok", target="cpu", device="cpu-2c"):
    result = MeasureResult(status, list(costs) if status == "ok" else [], host="h")
    inp = MeasureInput(workload, target, {"index": index, "knobs": {"t": index}})
    return Record.of(inp, result, device, GCC)


def test_round_trip_through_a_file(tmp_path):
    path = tmp_path / "r.jsonl"
    records = [rec(index=i, costs=(1e-3 * (i + 1), 2e-3)) for i in range(5)] + [rec(status="timeout", index=9)]
    for r in records:
        append(path, r)
    assert load(path) == records
    lines = path.read_text().splitlines()
    assert len(lines) == 6
    first = json.loads(lines[0])
    assert first["schema"] == SCHEMA_VERSION and first["workload_key"] == workload_key(MATMUL)
    assert first["toolchain"] == {"compiler": "gcc", "compiler_version": "12.2.0", "tunefleet": __version__}
    assert set(first) == {"schema", "workload_key", "workload", "target", "device_key", "config", "result", "toolchain"}


def test_torn_last_line_is_skipped_with_a_warning_and_cut_on_next_append(tmp_path):
    path = tmp_path / "r.jsonl"
    append(path, rec(index=1))
    append(path, rec(index=2))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 40])  # a crash in the middle of line 2
    with pytest.warns(TornRecordWarning, match=":2: skipping a torn last line"):
        assert [r.config["index"] for r in load(path)] == [1]
    with pytest.warns(TornRecordWarning, match="cutting a torn last line"):
        append(path, rec(index=3))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r.config["index"] for r in load(path)] == [1, 3]


def test_complete_last_line_without_newline_is_kept(tmp_path):
    path = tmp_path / "r.jsonl"
    append(path, rec(index=1))
    path.write_bytes(path.read_bytes().rstrip(b"\n"))
    assert [r.config["index"] for r in load(path)] == [1]


def test_corruption_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "r.jsonl"
    append(path, rec(index=1))
    with open(path, "a") as f:
        f.write("{not json\n")
    append(path, rec(index=2))
    with pytest.raises(RecordError, match=r"r\.jsonl:2: not JSON"):
        load(path)


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_or_infinity_anywhere_is_an_error_naming_the_line(tmp_path, constant):
    """json reads them and the records never hold them; before, one in a config's knobs failed
    later, as a bare ValueError of the canonical JSON that keys configs."""
    path = tmp_path / "r.jsonl"
    append(path, rec(index=1))
    path.write_text(path.read_text() + path.read_text().replace('"t":1', f'"t":{constant}'))
    with pytest.raises(RecordError, match=rf"r\.jsonl:2: not JSON: {constant} is not a JSON value"):
        load(path)


def test_unknown_schema_version_is_rejected_clearly(tmp_path):
    path = tmp_path / "r.jsonl"
    d = rec().to_json()
    d["schema"] = 99
    d["toolchain"]["tunefleet"] = "9.0.0"
    path.write_text(json.dumps(d) + "\n")
    with pytest.raises(RecordError, match=r":1: record schema version 99 is not supported.*reads version 1.*9\.0\.0"):
        load(path)


def test_malformed_records_are_rejected():
    good = rec().to_json()
    with pytest.raises(RecordError, match="missing \\['target'\\]"):
        Record.from_json({k: v for k, v in good.items() if k != "target"})
    with pytest.raises(RecordError, match="not the key of its workload"):
        Record.from_json({**good, "workload": OTHER})
    with pytest.raises(RecordError, match="MeasureResult.status"):
        Record.from_json({**good, "result": {**good["result"], "status": "fine"}})
    with pytest.raises(RecordError, match="Toolchain.compiler_version"):
        Record.from_json({**good, "toolchain": {"compiler": "gcc", "compiler_version": "", "tunefleet": "0.1"}})
    with pytest.raises(RecordError, match="device_key"):
        Record.from_json({**good, "device_key": ""})


def test_best_is_the_fastest_correct_record():
    key = workload_key(MATMUL)
    records = [
        rec(index=0, costs=(3e-3, 3e-3, 3e-3)),
        rec(index=1, costs=(1e-3, 5e-3, 1e-3)),  # median 1e-3
        rec(index=2, status="wrong_answer"),
        rec(index=3, costs=(2e-3, 2e-3, 2e-3)),
        rec(index=4, costs=(1e-3, 1e-3, 1e-3)),  # ties with 1: the earlier one wins
        rec(OTHER, index=5, costs=(1e-4, 1e-4, 1e-4)),
        rec(index=6, costs=(1e-5, 1e-5, 1e-5), target="cuda"),
        rec(index=7, costs=(5e-4, 5e-4, 5e-4), device="cpu-64c"),
    ]
    assert best(records, key, "cpu").config["index"] == 7
    assert best(records, key, "cpu", "cpu-2c").config["index"] == 1
    assert best(records, key, "cuda").config["index"] == 6
    assert best(records, key, "cpu", "nowhere") is None
    assert best([rec(status="compile_error")], key, "cpu") is None


def test_best_prefers_the_validated_measurements_and_drops_configs_that_ever_failed():
    key = workload_key(MATMUL)
    search = [rec(index=i, costs=(c,) * 5) for i, c in enumerate((1.0e-3, 1.1e-3, 1.2e-3, 0.9e-3))]
    validation = [rec(index=0, costs=(1.3e-3,) * 15), rec(index=1, costs=(1.2e-3,) * 15)]
    # config 3 was fastest but failed its validation with a wrong answer; config 0 was lucky in the search
    records = [*search, rec(index=3, status="wrong_answer"), *validation]
    assert best(records, key, "cpu").config["index"] == 1
    assert best(search, key, "cpu").config["index"] == 3
    # a later, longer re-measurement of one config replaces the earlier one
    assert best([*records, rec(index=0, costs=(1.0e-3,) * 15)], key, "cpu").config["index"] == 0


def test_a_disturbed_fast_outlier_is_neither_first_finalist_nor_winner():
    quiet = [("a", "a", MeasureResult("ok", [2.0, 2.1])), ("b", "b", MeasureResult("ok", [3.0, 3.0]))]
    outlier = ("c", "c", MeasureResult("ok", [0.5, 0.6], disturbance=1.5, disturbed=True))
    assert validation.finalists([*quiet, outlier], 2) == ["a", "b"]
    assert validation.finalists([*quiet, outlier], 3) == ["a", "b", "c"]  # fills a place left
    assert validation.best([*quiet, outlier]) == "a"
    assert validation.best([outlier]) == "c"  # a disturbed measurement still beats none


def test_the_winner_is_the_fastest_median_unless_a_far_more_disturbed_one_is_faster_without_it():
    """The validated finalists shared their rounds' load: the probes' noise between them (0.09-0.58 on a
    quiet Zen 4) must not re-rank them; a lasting load on one CPU (an even split about 1.0, an uneven 0)
    does."""
    dot = ("dot", "dot", MeasureResult("ok", [1.0] * 15, disturbance=0.37))
    gemm = ("gemm", "gemm", MeasureResult("ok", [1.12] * 15, disturbance=0.58))
    assert gemm[2].own_throughput() > dot[2].own_throughput()
    assert validation.best([dot, gemm]) == validation.best([gemm, dot]) == "dot"
    uneven = ("uneven", "uneven", MeasureResult("ok", [1.0] * 15, disturbance=0.0))
    even = ("even", "even", MeasureResult("ok", [1.3] * 15, disturbance=1.0))
    assert validation.best([uneven, even, dot]) == "even"
    slow = ("slow", "slow", MeasureResult("ok", [2.2] * 15, disturbance=1.0))  # disturbed, not faster without it
    assert validation.best([uneven, slow]) == "uneven"
    assert validation.best([dot, ("short", "short", MeasureResult("ok", [0.5] * 5))]) == "dot"  # most repeats only


def test_under_a_load_that_lasted_through_every_finalists_rounds_own_throughput_decides():
    """Where even the fastest finalist was disturbed beyond the probes' noise, the load lasted
    through all their rounds and the lower quartile tells their splits apart, not their speed
    (Intel Xeon model 167, one CPU of 2 busy, 1024³ matmul: a 6 × 48 tile first by it at 0.82,
    17% slower quietly than a 6 × 64 tile at 1.04 with the highest own throughput)."""
    narrow = ("6x48", "6x48", MeasureResult("ok", [10.3e-3] * 10 + [14.0e-3] * 20, disturbance=0.82))
    wide = ("6x64", "6x64", MeasureResult("ok", [10.6e-3] * 10 + [12.0e-3] * 20, disturbance=1.04))
    other = ("other", "other", MeasureResult("ok", [10.4e-3] * 10 + [11.8e-3] * 20, disturbance=0.90))
    assert narrow[2].lower_quartile < min(wide[2].lower_quartile, other[2].lower_quartile)
    assert wide[2].own_throughput() > other[2].own_throughput() > narrow[2].own_throughput()
    assert validation.best([narrow, wide, other]) == validation.best([other, wide, narrow]) == "6x64"
    # a search trial that showed less own throughput caps the config's rank, as for a credited one
    wide_trial = ("6x64", "6x64", MeasureResult("ok", [15.0e-3] * 10, disturbance=0.90))
    assert validation.best([wide_trial, narrow, wide, other]) == "other"


def test_on_a_host_whose_load_lasted_own_throughput_decides_though_an_uneven_split_looked_undisturbed():
    """A split that leaves the busy CPU idle is measured at a low disturbance: where the search's
    trials show the host's load (median above the probes' noise), own throughput decides anyway
    (AMD Zen 4, one of 2 CPUs busy, 1024³ matmul, GFLOP/s: an uneven split first by its lower
    quartile, 142 at 0.39, re-timed quietly at 144; an even one, 118 at 0.81, quietly at 224)."""
    uneven_trial = ("uneven", "uneven", MeasureResult("ok", [1 / 142.4] * 10, disturbance=0.12))
    even_trial = ("even", "even", MeasureResult("ok", [1 / 120.5] * 10, disturbance=1.0))
    others = [(f"t{i}", f"t{i}", MeasureResult("ok", [1 / 110] * 10, disturbance=0.77)) for i in range(4)]
    uneven = ("uneven", "uneven", MeasureResult("ok", [1 / 141.9] * 10 + [1 / 136] * 20, disturbance=0.39))
    even = ("even", "even", MeasureResult("ok", [1 / 118.5] * 10 + [1 / 114.6] * 20, disturbance=0.81))
    assert uneven[2].lower_quartile < even[2].lower_quartile
    assert validation.best([uneven_trial, even_trial, *others, uneven, even]) == "even"
    # the same finalists on a host whose search trials were quiet: the lower quartile decides
    quiet = [(f"t{i}", f"t{i}", MeasureResult("ok", [1 / 110] * 10, disturbance=0.1)) for i in range(6)]
    assert validation.best([uneven_trial, *quiet, uneven, even]) == "uneven"


def test_a_burst_over_two_of_a_finalists_three_rounds_does_not_decide_the_winner():
    """Bursts only add time: the fastest finalist is the one with the fastest lower quartile of its
    repeats (Zen 5, a 1×1 convolution: the default's rounds at 100, 100, 52 µs, another config's at
    164, 82, 81 µs, neither seen as disturbed; the default ran at 52-56 µs in the search)."""
    default = ("default", "default", MeasureResult("ok", [100e-6] * 20 + [52e-6] * 10, disturbance=0.08))
    other = ("other", "other", MeasureResult("ok", [164e-6] * 10 + [82e-6] * 20, disturbance=0.11))
    assert other[2].median < default[2].median
    assert validation.best([default, other]) == validation.best([other, default]) == "default"
    assert validation.best([("one", "one", MeasureResult("ok", [1e-3]))]) == "one"


def test_a_far_more_disturbed_finalist_must_be_faster_without_it_in_every_measurement():
    """A finalist validated slower and far more disturbed than the fastest wins only if its own
    throughput beats the fastest's in each of its measurements: its search trial, apart from
    the finalists' rounds, would have shown a lasting load too (Zen 5, a ResNet-50 layer: search
    0.50 vs 0.57 ms, validation 0.52 at 0.11 vs 0.71 at 0.67; the latter re-timed at 0.64)."""
    default_trial = ("default", "default", MeasureResult("ok", [0.50e-3] * 10, disturbance=0.04))
    other_trial = ("other", "other", MeasureResult("ok", [0.57e-3] * 10, disturbance=0.16))
    default_validated = ("default", "default", MeasureResult("ok", [0.52e-3] * 12, disturbance=0.11))
    other_validated = ("other", "other", MeasureResult("ok", [0.71e-3] * 12, disturbance=0.67))
    validated = [default_validated, other_validated]
    assert other_validated[2].own_throughput() > default_validated[2].own_throughput()
    assert validation.best(validated) == "other"  # the validation alone credits the disturbance
    assert validation.best([default_trial, other_trial, *validated]) == "default"
    # a lasting load on one CPU that slowed the even split in its search trial too: it still wins
    even_trial = ("other", "other", MeasureResult("ok", [0.71e-3] * 10, disturbance=0.7))
    assert validation.best([default_trial, even_trial, *validated]) == "other"


def test_the_fastest_median_is_a_finalist_whatever_the_others_disturbance():
    """Own throughput multiplies by the measured disturbance: on a quiet host its noise can put
    slower configs above the fastest. The fastest by median time alone is re-measured too."""
    fastest = ("fast", "fast", MeasureResult("ok", [1.0, 1.0, 1.0], disturbance=0.02))
    boosted = [(f"s{i}", f"s{i}", MeasureResult("ok", [1.15, 1.15, 1.15], disturbance=0.25 + i / 100))
               for i in range(5)]
    assert "fast" not in [item for _, item, r in sorted(
        [fastest, *boosted], key=lambda m: -m[2].own_throughput())[:5]]  # own throughput alone drops it
    chosen = validation.finalists([fastest, *boosted], 5)
    assert len(chosen) == 5 and "fast" in chosen
    assert chosen[:3] == ["s4", "s3", "s2"]  # the top by own throughput lead
    assert validation.finalists([fastest, fastest, *boosted[:1]], 5) == ["s0", "fast"]  # one place per config


def test_the_rule_based_configs_are_finalists_whatever_their_search_trials_read():
    """A search trial disturbed unnoticed (a 2× slowdown at a probe disturbance of 0.15-0.18 on
    a Zen 4) must not drop the template's default: the keys in `keep` take the last places."""
    default = ("default", "default", MeasureResult("ok", [2.05e-3] * 5, disturbance=0.18))
    others = [(f"c{i}", f"c{i}", MeasureResult("ok", [1.2e-3 + i * 1e-5] * 5, disturbance=0.01)) for i in range(6)]
    assert "default" not in validation.finalists([default, *others], 5)
    chosen = validation.finalists([default, *others], 5, keep=["default"])
    assert chosen == ["c0", "c1", "c2", "c3", "default"]
    assert validation.finalists([default, *others], 5, keep=["c1"]) == validation.finalists([default, *others], 5)
    failed = ("default", "default", MeasureResult("wrong_answer", []))
    assert "default" not in validation.finalists([default, failed, *others], 5, keep=["default"])
    assert validation.finalists([default], 5, keep=["default", "never measured"]) == ["default"]
