"""Benchmark: what a multi-target library's load-time dispatch costs, in one run.

For a workload (default: matmul 256^3; any with --op/--args), builds the single-target library of
each ISA this host executes and ONE multi-target library of all of target.DISPATCH_ISAS, every
kernel with the operator's default config of its ISA. For each ISA this host runs, in child
processes with TUNEFLEET_ISA forcing that path, times the multi-target dispatcher and the
single-target kernel side by side (the runtime's timer, alternating) and prints both medians and
their ratio, best of --processes processes. The ISA is printed beside every number.

    python bench/multitarget.py [--op matmul --args '{"M": 256, "N": 256, "K": 256}'] [--processes 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.target import DISPATCH_ISAS, Target
from tunefleet.tuner.apply import build_artifact, build_multi_target_artifact

CHILD = """
import json, sys, numpy as np, tunefleet
from tunefleet.compiler import ops
single, multi = tunefleet.load(sys.argv[1]), tunefleet.load(sys.argv[2])
w = ops.Workload.from_json(single.manifest["workload"])
inputs = ops.random_inputs(w.tensors(), np.random.default_rng(0))
assert np.allclose(single(*inputs), multi(*inputs), rtol=1e-4, atol=1e-4)
s, m = [], []
for _ in range(5):
    s += list(single.time(*inputs, repeat=3, min_repeat_ms=40))
    m += list(multi.time(*inputs, repeat=3, min_repeat_ms=40))
print(json.dumps({"isa": multi.isa, "single": float(np.median(s)), "multi": float(np.median(m))}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="matmul")
    parser.add_argument("--args", default='{"M": 256, "N": 256, "K": 256}', help="the operator's arguments, JSON")
    parser.add_argument("--processes", type=int, default=3)
    opts = parser.parse_args()
    workload = ops.make_workload(opts.op, json.loads(opts.args))
    runs_here = [t.isa for t in Target.host().executable() if t.isa in DISPATCH_ISAS]
    with tempfile.TemporaryDirectory(prefix="tunefleet-bench-multitarget-") as tmp:
        multi = build_multi_target_artifact(workload, dict.fromkeys(DISPATCH_ISAS), Path(tmp) / "multi")
        print(f"{workload.kernel_name()} ({opts.op} {opts.args}); host {Target.host()}; "
              f"multi-target library of {', '.join(DISPATCH_ISAS)}; median seconds per call, best of "
              f"{opts.processes} processes")
        for isa in runs_here:
            target = Target("cpu", isa)
            single = build_artifact(workload, target, ops.default_config(workload, target), Path(tmp) / isa)
            env = {**os.environ, "TUNEFLEET_ISA": isa}
            results = [json.loads(subprocess.run([sys.executable, "-c", CHILD, str(single), str(multi)], env=env,
                                                 check=True, capture_output=True, text=True).stdout)
                       for _ in range(opts.processes)]
            assert all(r["isa"] == isa for r in results)
            best_single = min(r["single"] for r in results)
            best_multi = min(r["multi"] for r in results)
            print(f"  {isa:<8} single-target {best_single * 1e6:9.1f} us   multi-target (dispatched) "
                  f"{best_multi * 1e6:9.1f} us   multi/single {best_multi / best_single:.3f}")


if __name__ == "__main__":
    main()
