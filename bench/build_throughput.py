"""Benchmark: how fast the CPU compiler builds tuning candidates (schedule → C → gcc → .so).

Builds `--candidates` distinct random configs of matmul `--size`³ from the template's config
space (a config the template rejects is skipped and counted, as a builder would report it),
one after the other in this process, like one builder process of the tuner. Each round
starts from an empty build cache (a fresh $TUNEFLEET_CACHE_DIR), so every build compiles;
the first build of a round also pays what a cold cache costs once. Every round builds the
same configs. Printed per round: seconds of the first build, mean and median seconds of the
others, and builds/s over the whole round; then the best round. The rows go to
bench/out/build_throughput.json (or --out).

    python bench/build_throughput.py [--size 512] [--candidates 16] [--rounds 3] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import dump  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.schedule import ScheduleError  # noqa: E402
from tunefleet.compiler.space import ConfigError  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

OUT = Path(__file__).resolve().parent / "out" / "build_throughput.json"


def build_round(workload, configs: list, target: Target, candidates: int) -> dict:
    """Builds configs in order into a fresh empty cache until `candidates` built; the timings."""
    seconds, rejected = [], 0
    with tempfile.TemporaryDirectory(prefix="tf-build-bench-") as cache:
        os.environ["TUNEFLEET_CACHE_DIR"] = cache
        start = time.perf_counter()
        for config in configs:
            t = time.perf_counter()
            try:
                build_workload(workload, config, target)
            except (ScheduleError, ConfigError):
                rejected += 1
                continue
            seconds.append(time.perf_counter() - t)
            if len(seconds) == candidates:
                break
        total = time.perf_counter() - start
    if len(seconds) < candidates:
        raise SystemExit(f"only {len(seconds)} of {len(configs)} configs built; ask for fewer candidates")
    rest = seconds[1:] or seconds
    return {"builds": len(seconds), "rejected": rejected, "first_s": seconds[0],
            "mean_s": statistics.mean(rest), "median_s": statistics.median(rest),
            "total_s": total, "builds_per_s": len(seconds) / total}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--size", type=int, default=512, help="M = N = K of the matmul")
    p.add_argument("--candidates", type=int, default=16, help="configs built per round")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each with an empty cache")
    p.add_argument("--seed", type=int, default=0, help="seed of the random configs")
    p.add_argument("--out", type=Path, default=OUT, help="JSON file of the rows")
    args = p.parse_args()
    target = Target.host()
    workload = ops.make_workload("matmul", {"M": args.size, "N": args.size, "K": args.size})
    configs = ops.config_space(workload, target).random(np.random.default_rng(args.seed), 4 * args.candidates)
    print(f"target {target}, matmul {args.size}³, {args.candidates} random configs (seed {args.seed}), "
          f"cold build cache per round")
    print(f"{'round':>5} {'builds':>6} {'rejected':>8} {'first s':>8} {'mean s':>8} {'median s':>8} "
          f"{'total s':>8} {'builds/s':>8}")
    rows = []
    for r in range(args.rounds):
        row = {"round": r, **build_round(workload, configs, target, args.candidates)}
        rows.append(row)
        print(f"{r:>5} {row['builds']:>6} {row['rejected']:>8} {row['first_s']:8.3f} {row['mean_s']:8.3f} "
              f"{row['median_s']:8.3f} {row['total_s']:8.2f} {row['builds_per_s']:8.2f}", flush=True)
    best = max(rows, key=lambda row: row["builds_per_s"])
    print(f"best round: {best['total_s'] / best['builds']:.3f} s per build, {best['builds_per_s']:.2f} builds/s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    dump(args.out, [{"target": str(target), "size": args.size, "seed": args.seed, **row} for row in rows])
    print(f"rows written to {args.out}")


if __name__ == "__main__":
    main()
