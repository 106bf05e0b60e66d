"""`tunefleet tune`: tune one workload on this machine, no server, and write the best kernel's artifact."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import click
import xgboost  # noqa: F401 (the cost model's, imported at its first fit: without the extra, fail here, in one line)
from rich.console import Console
from rich.live import Live
from rich.table import Table

from tunefleet.compiler import ops

from .build import parse_target
from .opargs import ArgumentError, workload_command, workload_from_cli
from .paths import OutputPath

EXIT_INTERRUPTED = 130
#: Seconds between progress lines without a new best, where the output is not a terminal (a log).
HEARTBEAT_S = 30.0


def _errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{status} {n}" for status, n in sorted(errors.items())) or "none"


class _Display:
    """The live progress panel on a terminal; otherwise one line per new best and per phase, and
    one at least every :data:`HEARTBEAT_S` seconds, so a log shows the run is alive."""

    def __init__(self, console: Console, workload: ops.Workload):
        self.console = console
        self.workload = workload
        self.live = Live(console=console, refresh_per_second=4, transient=False) if console.is_terminal else None
        self.best = 0.0
        self.phase = ""
        self.printed_s = 0.0

    def __enter__(self) -> _Display:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live:
            self.live.__exit__(*exc)

    def __call__(self, p) -> None:
        if self.live:
            self.live.update(self._panel(p))
        elif p.best_gflops > self.best or p.phase != self.phase or p.elapsed_s - self.printed_s >= HEARTBEAT_S:
            self.console.print(f"[{p.elapsed_s:6.0f} s] {p.phase}: trials {p.trials_done}/{p.trials_budget}, "
                               f"best {p.best_gflops:.2f} GFLOP/s, errors: {_errors(p.errors)}", highlight=False)
            self.printed_s = p.elapsed_s
        self.best, self.phase = max(self.best, p.best_gflops), p.phase

    def _panel(self, p) -> Table:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold")
        grid.add_column()
        done = p.trials_done / max(1, p.trials_budget)
        bar = "█" * round(30 * done) + "░" * (30 - round(30 * done))
        grid.add_row(self.workload.kernel_name(), f"{p.phase} · {p.elapsed_s:.0f} s")
        grid.add_row("trials", f"{bar} {p.trials_done}/{p.trials_budget}")
        grid.add_row("best", f"{p.best_gflops:.2f} GFLOP/s")
        grid.add_row("rate", f"{p.rate * 60:.1f} trials/min")
        grid.add_row("errors", _errors(p.errors))
        return grid


def executable_here(target):
    """`target` when this machine executes it; ArgumentError naming what it executes else (a
    candidate for another ISA would die of SIGILL, every trial)."""
    from tunefleet.compiler.target import Target, TargetError

    try:
        here = Target.local(target.kind)
    except TargetError as exc:
        raise ArgumentError(f"--target: {exc}") from None
    if not target.runs_on(here):
        raise ArgumentError(f"--target: this machine ({here}) cannot execute {target}; it runs "
                            f"{', '.join(map(str, here.executable()))}")
    return target


def _enable_sandbox() -> None:
    """Sandbox this process's builds and runs; ArgumentError (exit status 2) when impossible here."""
    from tunefleet.compiler import sandbox

    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        raise ArgumentError(f"--sandbox: {exc}") from None
    sandbox.enable(True)


def cpus_option(text: str | None) -> list[int] | None:
    from tunefleet.tuner.host import parse_cpus

    if text is None:
        return None
    try:
        return parse_cpus(text)
    except ValueError as exc:
        raise ArgumentError(f"--{exc}") from None


@workload_command("tune", "code generation target this machine executes, e.g. 'cpu -isa=avx2'; 'cpu' or "
                          "'cuda' alone: its best of that kind [default: cpu]")
@click.option("--trials", type=click.IntRange(min=1), default=64, show_default=True,
              help="distinct configs to measure (resumed ones count)")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="seconds one candidate may execute (check + timing)")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True,
              help="timed repeats per candidate (each at least 2 ms)")
@click.option("--out", required=True, type=OutputPath(folder=True),
              help="artifact directory to write for the best config")
@click.option("--records", "records_path", type=OutputPath(folder=False),
              help="record file (JSON lines) [default: OUT/records.jsonl]")
@click.option("--resume", is_flag=True, help="continue from the record file's trials, measuring none again")
@click.option("--cpus", "cpus_text", metavar="LIST", help="CPUs to measure on, e.g. 0-1 [default: all allowed]")
@click.option("--strategy", type=click.Choice(["xgb", "random", "grid"]), default="xgb", show_default=True)
@click.option("--early-stopping", type=click.IntRange(min=1), metavar="N",
              help="stop after N trials without a better config")
@click.option("--device-key", help="pool of identical hosts the records belong to [default: from this host]")
@click.option("--transfer", "transfer_files", multiple=True,
              type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="more record files to seed the cost model from (same family and device key)")
@click.option("--sandbox", "use_sandbox", is_flag=True,
              help="build and run every candidate in the workers' bubblewrap sandbox (for a workload file from "
                   "someone else, e.g. with an extern micro-kernel) [default: off]")
def tune_command(op, op_args, workload_file, target, trials, timeout, repeat, out, records_path, resume, cpus_text,
                 strategy, early_stopping, device_key, transfer_files, use_sandbox) -> None:
    """Tune OP with its arguments on this machine and write the best kernel to OUT.

    E.g. `tunefleet tune matmul --M 1024 --N 1024 --K 1024 --trials 256 --out kernels/`.
    Operator arguments are listed by `tunefleet ops`. Ctrl-C stops and keeps the records;
    --resume continues.

    Unlike a worker, tune does not sandbox its candidates unless --sandbox asks: it runs only
    what its user gave it, as that user, on that user's machine, so a sandbox would guard
    nothing the user could not do directly, while the fresh Python it starts per candidate
    (instead of a fork of the preloaded fork server) costs about 0.4 s: +0.54 s on a 1.13 s
    trial of a 256^3 matmul, +47 %, on a 2-core AMD Zen 3 (AVX2) host (bench/sandbox_overhead.py).
    --sandbox is for workloads from someone else; it fails (exit status 2) where no sandbox can
    be made.
    """
    from tunefleet.tuner import records
    from tunefleet.tuner.apply import apply_best
    from tunefleet.tuner.measure import MeasureProtocol
    from tunefleet.tuner.tune import TuneError, tune

    if use_sandbox:
        _enable_sandbox()
    workload = workload_from_cli(op, list(op_args), workload_file)
    parsed = executable_here(parse_target(target))
    cpus = cpus_option(cpus_text)
    records_path = records_path or out / "records.jsonl"
    records_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        transfer = [r for f in transfer_files for r in records.load(f)]
    except records.RecordError as exc:
        raise ArgumentError(f"--transfer: {exc}") from None
    console = Console(stderr=True)
    try:
        with _Display(console, workload) as display:
            result = tune(workload, parsed, trials=trials, records_path=records_path, strategy=strategy,
                          protocol=MeasureProtocol(repeat=repeat, timeout_s=timeout), cpus=cpus,
                          device_key=device_key, resume=resume, early_stopping=early_stopping,
                          transfer_records=transfer, progress=display)
    except TuneError as exc:
        raise ArgumentError(f"--records: {exc} (--resume continues)") from None
    except records.RecordError as exc:
        raise ArgumentError(f"--records: {exc}") from None
    except KeyboardInterrupt:
        console.print(f"interrupted: the finished trials are in {records_path}; add --resume to continue")
        sys.exit(EXIT_INTERRUPTED)
    if result.best is None:
        statuses = collections.Counter(t.result.status for t in result.trials)
        raise click.ClickException(f"no correct config among {len(result.trials)} trials (errors: "
                                   f"{_errors(statuses)}); records in {records_path}")
    path = apply_best([result.best], workload, parsed, out)
    click.echo(f"{workload.kernel_name(parsed)}: {result.gflops:.2f} GFLOP/s ({result.latency_s * 1e3:.4g} ms, "
               f"spread {result.spread:.1%}, CV {result.cv:.1%}, disturbance {result.best.result.disturbance:.2f}), "
               f"best of {len(result.trials)} trials in {result.elapsed_s:.0f} s; "
               f"artifact {path}; records {records_path}")

