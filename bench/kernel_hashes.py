"""Hashes of the kernel sources the compiler generates, to show a refactoring left them unchanged.

For every registered operator, a few workloads (each operator's default arguments and a
small odd shape), and every CPU ISA plus ``cuda -arch=sm_90``, it lowers the default config and
``--configs`` random configs of the config space (a fixed seed) and hashes each generated
source (C for CPU, CUDA for GPU; no compiler is run). It prints one line per operator and
target: the number of sources and a digest over them, then a digest over everything.

Run it before and after a change and compare::

    python bench/kernel_hashes.py > before.txt   # on the old commit
    python bench/kernel_hashes.py | diff before.txt -

``--json FILE`` also writes every (workload, target, config) → sha256 for a closer look.
Configs whose schedule does not lower (ScheduleError, InvalidConfig) are hashed as the
error's class name, so a change in what lowers shows too.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np

from tunefleet.compiler import ops
from tunefleet.compiler.codegen.c import generate_c
from tunefleet.compiler.driver import lower_workload
from tunefleet.compiler.ops.registry import WorkloadError
from tunefleet.compiler.schedule import ScheduleError
from tunefleet.compiler.target import CPU_ISAS, Target

#: A small shape with odd extents per operator family, beside each operator's defaults.
ODD_ARGS = {
    "matmul": {"M": 37, "N": 45, "K": 19},
    "dense": {"M": 1, "N": 77, "K": 33},
    "batch_matmul": {"batch": 3, "M": 17, "N": 29, "K": 11},
    "conv2d_nhwc": {"N": 1, "CI": 12, "CO": 20, "H": 9, "W": 11, "KH": 3, "KW": 3, "padding": 1, "stride": 2},
    "conv2d_nchw": {"N": 1, "CI": 12, "CO": 20, "H": 9, "W": 11, "KH": 3, "KW": 3, "padding": 1, "stride": 2},
    "depthwise_conv2d_nchw": {"N": 1, "C": 12, "H": 9, "W": 11, "KH": 3, "KW": 3, "padding": 1},
}


def _source(workload, config, target: Target) -> str:
    if target.kind == "cuda":
        from tunefleet.compiler.cuda.build import cuda_unit, workload_kernel

        return cuda_unit([workload_kernel(workload, config, target)])
    func, _args = lower_workload(workload, config, target)
    return generate_c(func)


def _digest(workload, config, target: Target) -> str:
    try:
        text = _source(workload, config, target)
    except ScheduleError as exc:  # InvalidConfig is one
        text = type(exc).__name__
    return hashlib.sha256(text.encode()).hexdigest()


def _workloads(op: dict) -> list:
    """The operator's default workload and its ODD_ARGS one; none for an operator with a required
    argument (custom: the user's tensor expression)."""
    try:
        out = [ops.make_workload(op["name"], {})]
    except WorkloadError:
        return []
    if op["name"] in ODD_ARGS:
        out.append(ops.make_workload(op["name"], ODD_ARGS[op["name"]]))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", type=int, default=12, help="random configs per workload and target")
    parser.add_argument("--json", help="also write every source's sha256 to this file")
    args = parser.parse_args()
    targets = [Target("cpu", isa) for isa in CPU_ISAS] + [Target.parse("cuda -arch=sm_90")]
    every: dict[str, str] = {}
    total = hashlib.sha256()
    for op in ops.list_ops():
        for target in targets:
            if target.kind not in op["targets"]:
                continue
            digest, count = hashlib.sha256(), 0
            if not _workloads(op):
                continue
            for workload in _workloads(op):
                space = ops.config_space(workload, target)
                rng = np.random.default_rng(0)
                configs = [ops.default_config(workload, target)]
                configs += [space.get(int(rng.integers(space.size))) for _ in range(args.configs)]
                for config in configs:
                    key = json.dumps([workload.to_json(), str(target), config.to_json()], sort_keys=True)
                    every[key] = _digest(workload, config, target)
                    digest.update(every[key].encode())
                    count += 1
            total.update(digest.digest())
            print(f"{op['name']:<24} {str(target):<20} {count:4d} sources  {digest.hexdigest()[:16]}")
    print(f"{'all':<45} {len(every):4d} sources  {total.hexdigest()[:16]}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(every, f, indent=0, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
