"""`tunefleet tune`, `build` and `ops` as a user runs them: subprocesses of the installed command."""

import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from click.testing import CliRunner

import tunefleet
from tunefleet.cli import main
from tunefleet.compiler import ops
from tunefleet.compiler.target import CPU_ISAS, Target
from tunefleet.tuner import records, validation
from tunefleet.tuner.measure import MeasureInput, MeasureResult

TUNEFLEET = str(Path(sys.executable).parent / "tunefleet")
TESTS = str(Path(__file__).parent)
#: A CPU ISA this machine cannot execute (neon on x86, avx512 elsewhere): every trial would SIGILL.
FOREIGN_ISA = next(isa for isa in CPU_ISAS if not Target("cpu", isa).runs_on(Target.host()))


def cli(*args, env=None, timeout=300):
    return subprocess.run([TUNEFLEET, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def with_plugin():
    return {"TUNEFLEET_OPS_PLUGINS": "helpers_ops",
            "PYTHONPATH": os.pathsep.join(filter(None, [TESTS, os.environ.get("PYTHONPATH")]))}


def test_tune_end_to_end_writes_a_correct_artifact(tmp_path):
    out = tmp_path / "kernels"
    run = cli("tune", "matmul", "--M", 64, "--N", 64, "--K", 64, "--trials", 8, "--repeat", 2, "--out", out)
    assert run.returncode == 0, run.stderr
    (summary,) = run.stdout.splitlines()
    assert "GFLOP/s" in summary and "best of 8 trials" in summary and str(out) in summary
    assert re.search(r", disturbance \d+\.\d\d\)", summary), summary  # the winner's measurement's
    assert len({r.config["index"] for r in records.load(out / "records.jsonl")}) == 8
    kernel = tunefleet.load(out)
    rng = np.random.default_rng(0)
    a, b = rng.random((64, 64), dtype=np.float32), rng.random((64, 64), dtype=np.float32)
    np.testing.assert_allclose(kernel(a, b), a @ b, rtol=1e-4)
    assert kernel.manifest["gflops"] > 0 and kernel.manifest["workload"]["args"]["M"] == 64


def test_bad_values_exit_2_with_one_line_naming_the_field(tmp_path):
    runner = CliRunner()  # in process: the same command, without a Python start-up per case
    listed = tmp_path / "listed.json"  # an "op" of another JSON type: before, a TypeError's traceback
    listed.write_text(json.dumps({"op": ["matmul"], "args": {}}))
    for args, field in ((["matmul", "--M", "0"], "M:"), (["matmul", "--K", "x"], "K:"),
                        (["matmul", "--bogus", "1"], "bogus:"), (["nosuchop"], "op:"),
                        (["--workload", str(listed)], "op: unknown operator"),
                        (["matmul", "--cpus", "0-4096"], "--cpus:"), (["matmul", "--target", "tpu"], "--target:"),
                        (["matmul", "--target", f"cpu -isa={FOREIGN_ISA}"], "cannot execute")):
        run = runner.invoke(main, ["tune", *args, "--out", str(tmp_path)])
        assert run.exit_code == 2, (args, run.output)
        assert len(run.stderr.strip().splitlines()) == 1 and field in run.stderr, (args, run.stderr)


def test_output_paths_that_cannot_be_written_exit_2_before_any_work(tmp_path):
    """Before, each was a traceback: `tune` after its search had run, `download` after its request."""
    (tmp_path / "file").touch()
    under_a_file = str(tmp_path / "file" / "out")
    runner = CliRunner()
    for args, option in ((["tune", "matmul", "--out", under_a_file], "'--out'"),
                         (["tune", "matmul", "--out", str(tmp_path / "ok"), "--records", f"{under_a_file}/r.jsonl"],
                          "'--records'"),
                         (["build", "matmul", "--out", under_a_file], "'--out'"),
                         (["download", "1", "--out", under_a_file], "'-o' / '--out'"),
                         (["tune-model", str(tmp_path / "file"), "--out", under_a_file], "'--out'"),
                         (["demo", "--dir", under_a_file], "'--dir'")):
        run = runner.invoke(main, args)
        assert run.exit_code == 2, (args, run.output)
        assert f"Invalid value for {option}: '{tmp_path / 'file'}' is a file, not a folder" in run.stderr, \
            (args, run.stderr)


def test_an_operator_argument_given_twice_exits_2(tmp_path):
    """Before, the last one was taken silently."""
    run = CliRunner().invoke(main, ["build", "matmul", "--M", "64", "--M", "65", "--out", str(tmp_path)])
    assert run.exit_code == 2 and run.stderr.strip() == "Error: M: given twice; give it once"


def test_ctrl_c_keeps_the_records_and_resume_measures_nothing_twice(tmp_path):
    """Ctrl-C once the first batches are recorded. The run records a batch of two at a time, and a
    "hang" config is measured for the whole --timeout: with 4 s, at least 4 s of the run are left
    when the third record appears (with 1 s, a loaded CI host once finished all ten first). The
    run starts with SIGINT's default action, as a terminal's foreground job does: a suite started
    in the background inherits SIGINT ignored, and Python then never turns it into
    KeyboardInterrupt (the run measured all ten and exited 0)."""
    out = tmp_path / "k"
    args = [TUNEFLEET, "tune", "faulty", "--n", "64", "--trials", "10", "--timeout", "4", "--repeat", "1",
            "--strategy", "grid", "--out", str(out)]
    proc = subprocess.Popen(args, env={**os.environ, **with_plugin()}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    path = out / "records.jsonl"
    deadline = time.monotonic() + 120
    while not (path.exists() and len(path.read_text().splitlines()) >= 3) and time.monotonic() < deadline:
        time.sleep(0.1)
    ended_before = proc.poll() is not None
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, (f"the run had {'' if ended_before else 'not '}ended before the signal; "
                                    f"{len(path.read_text().splitlines())} records", stderr)
    assert "--resume" in stderr
    kept = records.load(path)
    assert 3 <= len(kept) < 10

    again = cli("tune", "faulty", "--n", 64, "--trials", 10, "--timeout", 1, "--repeat", 1, "--strategy", "grid",
                "--out", out, env=with_plugin())
    assert again.returncode == 2 and "--resume" in again.stderr
    resumed = cli("tune", "faulty", "--n", 64, "--trials", 10, "--timeout", 1, "--repeat", 1, "--strategy",
                  "grid", "--out", out, "--resume", env=with_plugin())
    assert resumed.returncode == 0, resumed.stderr
    stored = records.load(path)  # the search trials of both runs, then the final validation
    assert len({r.config["index"] for r in stored[:10]}) == 10
    # 2 correct configs validated; the winner again if a busy host disturbed it (validation.settle)
    assert all(len(r.result.costs) == 15 for r in stored[10:]) and 10 + 2 <= len(stored) <= 10 + 2 + validation.SETTLE


def test_progress_in_a_log_shows_each_new_best_each_phase_and_a_line_every_heartbeat():
    """Where stdout is not a terminal (a log, CI), a long search without a new best still prints."""
    from rich.console import Console

    from tunefleet.commands.tune import HEARTBEAT_S, _Display
    from tunefleet.compiler import ops
    from tunefleet.tuner.tune import Progress

    out = io.StringIO()
    display = _Display(Console(file=out, width=200), ops.make_workload("matmul", {"M": 64, "N": 64, "K": 64}))
    assert display.live is None
    progress = [("search", 2, 10.0, 1.0), ("search", 4, 10.0, 5.0), ("search", 6, 12.0, 9.0),
                ("search", 8, 12.0, 9.0 + HEARTBEAT_S / 2), ("search", 10, 12.0, 9.0 + HEARTBEAT_S),
                ("validate", 64, 12.0, 9.5 + HEARTBEAT_S)]
    with display:
        for phase, done, best, elapsed in progress:
            display(Progress(phase, done, 64, best, 1.0, elapsed, {}))
    lines = out.getvalue().splitlines()
    assert [line.split("] ")[1].split(",")[0] for line in lines] == [
        "search: trials 2/64", "search: trials 6/64", "search: trials 10/64", "validate: trials 64/64"]


def test_ops_lists_the_arguments_and_build_writes_the_default_config(tmp_path):
    listing = cli("ops", env=with_plugin())
    assert listing.returncode == 0 and "matmul:" in listing.stdout and "--M int = 1024" in listing.stdout
    assert "faulty:" in listing.stdout
    workload = tmp_path / "w.json"  # a workload file, one argument overridden on the command line
    workload.write_text(json.dumps({"op": "matmul", "args": {"M": 17, "N": 33, "K": 3, "bias": True}}))
    built = cli("build", "--workload", workload, "--K", 65, "--out", tmp_path / "b")
    assert built.returncode == 0, built.stderr
    kernel = tunefleet.load(tmp_path / "b")
    rng = np.random.default_rng(1)
    a, b, bias = (rng.random(s, dtype=np.float32) for s in ((17, 65), (65, 33), (33,)))
    np.testing.assert_allclose(kernel(a, b, bias), a @ b + bias, rtol=1e-4)


def test_a_damaged_record_file_exits_2_naming_the_option_and_line_and_stays_as_it_was(tmp_path):
    """Before, --resume and --transfer with such a file gave a traceback (exit 1): a cost of NaN
    (which json reads and the records never hold) once the search met it, a config its config
    space does not hold from inside the search's resume."""
    workload = ops.make_workload("matmul", {"M": 16, "N": 16, "K": 16})
    target = Target.host()
    space = ops.config_space(workload, target)
    path = tmp_path / "r.jsonl"
    for config in [ops.default_config(workload, target), *space.random(np.random.default_rng(0), 2)]:
        inp = MeasureInput(workload.to_json(), str(target), config.to_json())
        records.append(path, records.Record.of(inp, MeasureResult("ok", [1e-6], host="h"), "cpu-test",
                                               records.host_toolchain()))
    pristine = path.read_text().splitlines()
    tune = ["tune", "matmul", "--M", "16", "--N", "16", "--K", "16", "--device-key", "cpu-test",
            "--out", str(tmp_path / "k")]

    def out_of_space(d: dict) -> dict:
        knob, value = next(iter(d["config"]["knobs"].items()))
        return {**d, "config": {**d["config"], "knobs": {**d["config"]["knobs"], knob: [value]}}}

    cases = [(2, lambda d: json.dumps(d).replace('"costs": [1e-06]', '"costs": [NaN]'),
              "r.jsonl:2: not JSON: NaN is not a JSON value", ("--records", "--transfer")),
             (1, lambda d: json.dumps({**d, "toolchain": ["gcc"]}), "r.jsonl:1: Record.toolchain must be an object",
              ("--records", "--transfer")),
             # only --records: a transfer file's records of the workload tuned are not read
             (3, lambda d: json.dumps(out_of_space(d)), "r.jsonl: record 3 of this workload has config",
              ("--records",))]
    for line, damage, message, options in cases:
        damaged = [damage(json.loads(text)) if n == line else text for n, text in enumerate(pristine, 1)]
        assert damaged != pristine
        path.write_text("\n".join(damaged) + "\n")
        for option in options:
            args = ["--records", str(path), "--resume"] if option == "--records" else ["--transfer", str(path)]
            run = CliRunner().invoke(main, [*tune, *args])
            assert run.exit_code == 2, (option, message, run.output)
            (error,) = run.stderr.strip().splitlines()
            assert error.startswith(f"Error: {option}: ") and message in error, error
        assert path.read_text().splitlines() == damaged
