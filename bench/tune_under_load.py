"""Benchmark: does tuning on a busy host choose as fast a kernel as tuning on a quiet one?

Tunes matmul 1024³ (float32, this host's best target, `tune` with the xgb search) twice with a
fresh record file each: once as the host is ("quiet": nothing of ours beside it), once with one
of the measuring CPUs kept busy by a load generator (a child process spinning, pinned there, at
the same priority). Then both winners are re-timed with no load of ours, in fresh processes,
interleaved (quiet winner, busy winner, quiet winner, ...), best and median over the rounds.

Printed: per run the tuning's seconds, the trials' disturbance (median, largest, how many
stayed disturbed after re-measures), the validated winner's in-search GFLOP/s and config;
then both winners' re-timed GFLOP/s, and the busy winner as a % of the quiet one (the issue's
goal: within 10%). Also the interference probe's cost per trial (the reference kernel timed
before and after on every measuring CPU, the schedstat reads), in this process.

    python bench/tune_under_load.py [--trials 64] [--M 1024 --N 1024 --K 1024]
                                    [--processes 5] [--load-cpu N] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import interleaved_seconds, kernel_code  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402
from tunefleet.tuner import interference  # noqa: E402
from tunefleet.tuner.apply import apply_best  # noqa: E402
from tunefleet.tuner.measure import MeasureProtocol  # noqa: E402
from tunefleet.tuner.tune import TuneResult, tune  # noqa: E402


def spinner(cpu: int) -> subprocess.Popen:
    """A child process spinning on `cpu` until killed; returns once it runs there."""
    code = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nprint(flush=True)\nwhile True: pass"
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    proc.stdout.readline()
    return proc


def probe_seconds(cpus: list[int], n: int = 50) -> float:
    """Seconds the interference probes add to one trial: two reference timings on every CPU and
    two schedstat snapshots (as the measuring child takes them), mean over `n`."""
    t0 = time.perf_counter()
    for _ in range(n):
        interference.reference_seconds(cpus)
        interference.sched_times()
        interference.sched_times()
        interference.reference_seconds(cpus)
    return (time.perf_counter() - t0) / n


def run(label: str, workload: ops.Workload, trials: int, out: Path, load_cpu: int | None) -> TuneResult:
    records = out / f"under-load-{label}.jsonl"
    records.unlink(missing_ok=True)
    load = spinner(load_cpu) if load_cpu is not None else None
    try:
        result = tune(workload, Target.host(), trials=trials, records_path=records, protocol=MeasureProtocol())
    finally:
        if load is not None:
            load.kill()
            load.wait()
    ok = [t.result for t in result.trials if t.result.ok]
    d = [r.disturbance for r in ok]
    print(f"{label:>6}: {result.elapsed_s:.0f} s for {len(result.trials)} trials; disturbance median "
          f"{statistics.median(d) if d else 0:.2f}, max {max(d, default=0):.2f}, "
          f"{sum(r.disturbed for r in ok)} of {len(ok)} correct trials still disturbed after re-measures; "
          f"winner in-search {result.gflops:.1f} GFLOP/s (CV {result.cv:.1%}, disturbance "
          f"{result.best.result.disturbance if result.best else 0:.2f}) "
          f"{result.best.config['knobs'] if result.best else None}", flush=True)
    return result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--M", type=int, default=1024)
    p.add_argument("--N", type=int, default=1024)
    p.add_argument("--K", type=int, default=1024)
    p.add_argument("--processes", type=int, default=5, help="rounds of fresh processes re-timing the winners")
    cpus = sorted(os.sched_getaffinity(0))
    p.add_argument("--load-cpu", type=int, default=cpus[-1], help="the CPU the load generator keeps busy")
    p.add_argument("--out", type=Path, default=Path(tempfile.mkdtemp(prefix="tf-under-load-")))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    w = ops.make_workload("matmul", {"M": args.M, "N": args.N, "K": args.K})
    print(f"matmul {args.M}x{args.N}x{args.K}, target {Target.host()}, CPUs {cpus}, load on CPU {args.load_cpu}; "
          f"load average {os.getloadavg()[0]:.2f}; records in {args.out}")
    print(f"interference probe: {probe_seconds(cpus) * 1e3:.2f} ms per trial on {len(cpus)} CPUs", flush=True)
    results = {"quiet": run("quiet", w, args.trials, args.out, None),
               "busy": run("busy", w, args.trials, args.out, args.load_cpu)}
    if any(r.best is None for r in results.values()):
        print("no correct config in a run; nothing to re-time")
        return
    artifacts = {k: apply_best([r.best], w, Target.host(), tempfile.mkdtemp(prefix=f"tf-under-load-{k}-"))
                 for k, r in results.items()}
    seconds = dict(zip(artifacts, interleaved_seconds([kernel_code(a) for a in artifacts.values()],
                                                      processes=args.processes)))
    best = {k: min(s) for k, s in seconds.items()}
    for k, s in seconds.items():
        print(f"{k:>6} winner re-timed quietly: best {w.flop / min(s) / 1e9:.1f} GFLOP/s, median "
              f"{w.flop / statistics.median(s) / 1e9:.1f} over {len(s)} processes", flush=True)
    same = results["quiet"].best.config["knobs"] == results["busy"].best.config["knobs"]
    print(f"busy winner = {best['quiet'] / best['busy']:.1%} of the quiet winner's speed (best), "
          f"{statistics.median(seconds['quiet']) / statistics.median(seconds['busy']):.1%} (median); "
          f"{'the same config' if same else 'different configs'}; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
