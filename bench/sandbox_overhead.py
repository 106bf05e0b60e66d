"""What the sandbox (tunefleet.compiler.sandbox: bubblewrap, setpriv, prlimit) costs per trial.

Measures the same candidates with a LocalMeasurer, sandbox off and on, in alternating rounds
(each round a fresh measurer and an empty build cache, so every candidate compiles): the
seed workload's family, matmul 256x256x256 (the tests' and the demo's typical size), with
the default protocol (repeat 10 of at least 2 ms each... as `tunefleet tune` uses: its
--repeat default). For each mode it prints the median over rounds of

- build ms per candidate (gcc in the builder pool; sandboxed: one bwrap per gcc run),
- run ms per candidate (child start, correctness check, timing; sandboxed: bwrap and a
  fresh Python instead of a fork of the fork server),
- the whole trial, and the sandbox's overhead in ms and as a share of the unsandboxed trial.

Also the bare cost of starting `true` in the sandbox (no Python), which is what each
sandboxed compiler run pays.

    python bench/sandbox_overhead.py [--candidates 8] [--rounds 3]

Not part of the test run. Name the CPU (and its ISA) beside any number you report.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time

import numpy as np

from tunefleet.compiler import ops, sandbox
from tunefleet.compiler.target import Target
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol
from tunefleet.tuner.runner import LocalMeasurer


def one_round(on: bool, inputs: list[MeasureInput], protocol: MeasureProtocol) -> dict[str, float]:
    """Measure `inputs` with the sandbox on or off, in a fresh build cache; ms per candidate."""
    cache = tempfile.mkdtemp(prefix="tunefleet-bench-cache-")
    os.environ["TUNEFLEET_CACHE_DIR"] = cache
    sandbox.enable(on)
    sandbox._sandbox.cache_clear()  # the hidden paths include the cache
    try:
        with LocalMeasurer() as measurer:
            measurer.measure_batch(inputs[:1], protocol)  # start the pools, build the runtime object
            start = time.perf_counter()
            results = measurer.measure_batch(inputs[1:], protocol)
            wall = time.perf_counter() - start
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    bad = [r.status for r in results if not r.ok]
    assert not bad, bad
    n = len(results)
    return {"build": 1e3 * sum(r.build_s for r in results) / n, "run": 1e3 * sum(r.run_s for r in results) / n,
            "trial": 1e3 * wall / n}


def bare_start_ms(repeat: int = 20) -> float:
    """Median ms to run `true` in the sandbox (bwrap + setpriv + prlimit), and `true` alone."""
    box = sandbox.Sandbox.find()
    limits = sandbox.Limits(cpu_s=10, address_space=None, file_size=1 << 20, processes=sandbox.default_processes())
    times, plain = [], []
    for _ in range(repeat):
        with box.scratch() as scratch:
            command = box.command(["true"], scratch=scratch, limits=limits)
            t = time.perf_counter()
            subprocess.run(command, check=True)
            times.append(time.perf_counter() - t)
        t = time.perf_counter()
        subprocess.run(["true"], check=True)
        plain.append(time.perf_counter() - t)
    return 1e3 * statistics.median(times), 1e3 * statistics.median(plain)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    sandbox.detect()
    target = Target.parse("cpu")
    workload = ops.make_workload("matmul", {"M": 256, "N": 256, "K": 256})
    space = ops.config_space(workload, target)
    configs = space.random(np.random.default_rng(0), opts.candidates + 1)
    inputs = [MeasureInput(workload.to_json(), str(target), c.to_json()) for c in configs]
    protocol = MeasureProtocol(repeat=10, min_repeat_ms=2, timeout_s=20)
    rows: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    for _ in range(opts.rounds):
        for on in (False, True):
            rows[on].append(one_round(on, inputs, protocol))
    start_ms, plain_ms = bare_start_ms()
    print(f"matmul 256^3 on {target} ({os.cpu_count()} CPUs), {opts.candidates} candidates x {opts.rounds} rounds, "
          f"median of rounds, ms per candidate:")
    print(f"{'':12} {'build':>8} {'run':>8} {'trial':>8}")
    med = {on: {k: statistics.median(r[k] for r in rows[on]) for k in ("build", "run", "trial")} for on in rows}
    for on in (False, True):
        print(f"{'sandboxed' if on else 'unsandboxed':12} {med[on]['build']:8.1f} {med[on]['run']:8.1f} "
              f"{med[on]['trial']:8.1f}")
    extra = med[True]["trial"] - med[False]["trial"]
    print(f"overhead per trial: {extra:+.1f} ms ({100 * extra / med[False]['trial']:+.1f} % of an unsandboxed trial); "
          f"build {med[True]['build'] - med[False]['build']:+.1f} ms, run {med[True]['run'] - med[False]['run']:+.1f} ms")
    print(f"bare start of `true` in the sandbox: {start_ms:.1f} ms (outside: {plain_ms:.1f} ms)")


if __name__ == "__main__":
    main()
