"""Benchmark: tunefleet's CPU kernels against numpy/OpenBLAS, PyTorch and onnxruntime on a quiet
host and on one whose last CPU another program keeps busy (a child spinning, pinned there), in
one run.

A parallel loop that splits its work into one static chunk per thread runs at the pace of its
slowest CPU: with one of 2 CPUs shared with a spinner, its thread there gets half that CPU and
the call takes about twice its quiet time. The runtime's parallel loops let the threads on free
CPUs take the parts a slowed thread has not started (compiler/runtime/tunefleet_runtime.c, "load
balancing"). Each workload's default config (no tuning) is built once; each round times every
kernel and peer in a fresh process, first quiet, then with the spinner. Prints per workload
GFLOP/s quiet and busy (best over the rounds), each one's busy time over its quiet time (median
over the rounds), and the peers' busy time over ours in the same round (median; > 1: we are
faster). `--always-spinning` adds our kernel rebuilt to spin between jobs whatever the load
(column spin: the runtime before its contention-aware spinning).

    python bench/busy_host.py [--only matmul conv] [--processes 5] [--threads N] [--always-spinning]

AMD EPYC Zen 4 (family 25 model 17, AVX-512 on 256-bit units, 2 vCPUs), before -> after the
parts (5 rounds of fresh processes, busy ÷ quiet, medians; scratch builds of the default configs
against each runtime): matmul 1024³ 1.98 -> 1.40 (numpy/OpenBLAS 1.68), 128×3072×768 1.99 ->
1.42, conv2d 3×3 64@56² 2.04 -> 1.79, 512@7² (per-call weight packing, three parallel loops)
2.27 -> 1.91, 1×1 1024 -> 256 at 14² 2.07 -> 1.85, dense 1×2048 -> 1000 2.38 -> 1.98,
depthwise 32@112² 2.10 -> 1.89; quiet times level (0.97-1.03×). Calls of 1-2 ms gain less than
long ones: the spinner's CPU is lent in slices of milliseconds, and a worker holding a part when
its slice ends keeps the call waiting until its next.

AMD EPYC Zen 3 (family 25 model 1, AVX2 only, 2 vCPUs; main at 86be830, 5 rounds; PyTorch not
installed), busy ÷ quiet for ours / numpy / onnxruntime: matmul 1024³ 1.40 / 2.14 (ours busy
1.45× numpy), 128×3072×768 1.60 / 2.26 (1.49×), conv2d 3×3 64@56² 1.75 / - / 1.99 (1.16×
onnxruntime), 1×1 1024 -> 256 at 14² 1.90 / - / 2.16 (1.23×), dense 1×2048 -> 1000 1.99 / 2.38 /
2.22 (numpy 0.84×, onnxruntime 1.11× ours busy; quiet, OpenBLAS's GEMV ran 57.3 GFLOP/s against
our default's 39.9: its weights stream from the L3, where dense's L2 prefetch costs, see
compiler/ops/dot.py).

AMD EPYC Zen 4 again, after the runtime's workers stopped spinning while their CPU is contended
(tunefleet_runtime.c, "contention-aware spinning"; 5 rounds, PyTorch 2.13 and onnxruntime),
busy ÷ quiet for ours / numpy / PyTorch / onnxruntime, then the peers' busy time over ours: matmul
1024³ 1.37 / 1.90 / 2.09 / - (numpy 1.77×, PyTorch 1.70×), 128×3072×768 1.39 / 2.10 / 2.15 / -
(1.78×, 1.98×), conv2d 3×3 64@56² 1.35 (was 1.78) / - / 1.95 / 2.14 (PyTorch 2.62×, onnxruntime
1.39×), 1×1 1024 -> 256 at 14² 1.34 (was 1.87) / - / 1.97 / 1.88 (2.22×, 2.11×), dense 1×2048 ->
1000 1.50 (was 1.91) / 2.20 / 1.01 / 1.79 (numpy 1.37×, PyTorch 1.52×, onnxruntime 1.14×, was
0.85×). Quiet GFLOP/s: 227.1, 214.5, 218.9, 218.6, 63.7 (numpy's GEMV 68.6).

AMD EPYC Zen 3 with `--always-spinning` (main at 88603d7, 5 rounds), busy ÷ quiet for ours / numpy /
PyTorch / onnxruntime / always spinning, then the peers' busy time over ours: matmul 1024³ 1.39 /
2.02 / 2.11 / - / 1.32 (numpy 1.40×, PyTorch 1.75×, always spinning 1.00×), 128×3072×768 1.56 /
2.18 / 2.14 / - / 1.92 (1.56×, 1.63×, 1.12×), conv2d 3×3 64@56² 1.26 / - / 2.07 / 2.07 / 1.57
(PyTorch 3.09×, onnxruntime 1.63×, 1.31×), 1×1 1024 -> 256 at 14² 1.34 / - / 2.21 / 1.98 / 1.99
(2.20×, 1.63×, 1.36×), dense 1×2048 -> 1000 1.43 / 1.94 / 1.19 / 1.83 / 1.93 (numpy 1.02×, PyTorch
1.43×, onnxruntime 1.18×, 1.37×). Quiet GFLOP/s ours / always spinning: 184.4 / 181.9, 165.9 /
167.3, 172.0 / 167.5, 162.8 / 172.9, 42.1 / 41.8 (numpy's GEMV 57.7).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import PROCESSES, export, interleaved_seconds, kernel_code, numpy_matmul_code, scratch_dir  # noqa: E402
from ops_cpu import numpy_code, ort_code, torch_available, torch_code  # noqa: E402
from tune_under_load import spinner  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

_CONV = {"N": 1, "bias": True, "epilogue": "relu"}
WORKLOADS = {
    "matmul 1024": ("matmul", {"M": 1024, "N": 1024, "K": 1024}),
    "matmul 128x3072x768": ("matmul", {"M": 128, "N": 3072, "K": 768}),
    "conv 3x3 64@56": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 3, "KW": 3,
                                       "padding": 1}),
    "conv 1x1 1024->256@14": ("conv2d_nchw", {**_CONV, "CI": 1024, "CO": 256, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    "dense 1x2048->1000": ("dense", {"M": 1, "N": 1000, "K": 2048, "bias": True}),
}
PEERS = ("numpy", "torch", "ort", "spin")
#: TF_CONTENDED_SHARE of an always-spinning build: a window is contended where the run-queue wait
#: times this share exceeds the window, so with 0 none is
NEVER_CONTENDED = 0


def peer_codes(op: str, a: dict, threads: int, have_torch: bool) -> dict[str, str]:
    """Python sources timing each peer that has the workload, by peer name: numpy for matmul and
    dense, PyTorch when installed, onnxruntime's one-node model for conv2d and dense."""
    codes = {"numpy": numpy_matmul_code(a["M"], a["N"], a["K"]) if op == "matmul" else numpy_code(op, a, "repeats"),
             "torch": torch_code(op, a, threads, "repeats") if have_torch else None,
             "ort": ort_code(op, a, threads, "repeats") if op != "matmul" else None}
    return {name: code for name, code in codes.items() if code is not None}


def always_spinning(artifact: Path) -> Path:
    """A copy of the artifact directory rebuilt from its C source (its manifest's build command)
    with TF_CONTENDED_SHARE 0, so that no window reads contended: its workers spin between jobs
    whatever the load, as before the runtime's contention-aware spinning."""
    out = scratch_dir("tf-busy-spin-")
    shutil.copytree(artifact, out, dirs_exist_ok=True)
    manifest = json.loads((out / "manifest.json").read_text())
    cc = f"{os.environ.get('CC', 'gcc')} -DTF_CONTENDED_SHARE={NEVER_CONTENDED}"
    subprocess.run(manifest["build_command"], shell=True, cwd=out, check=True, env={**os.environ, "CC": cc})
    manifest["so_sha256"] = hashlib.sha256((out / f"{manifest['name']}.so").read_bytes()).hexdigest()
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out


def timed_rounds(codes: list[str], processes: int, busy_cpu: int) -> tuple[list[list[float]], list[list[float]]]:
    """Per code, its seconds in each round quiet and with a spinner on `busy_cpu`."""
    quiet: list[list[float]] = [[] for _ in codes]
    busy: list[list[float]] = [[] for _ in codes]
    for _ in range(processes):
        for i, s in enumerate(interleaved_seconds(codes, processes=1)):
            quiet[i] += s
        load = spinner(busy_cpu)
        try:
            for i, s in enumerate(interleaved_seconds(codes, processes=1)):
                busy[i] += s
        finally:
            load.kill()
            load.wait()
    return quiet, busy


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="names of workloads to run (prefix match), default all")
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--always-spinning", action="store_true",
                   help="also time our kernel built to spin between jobs whatever the load (column spin)")
    args = p.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        p.error("needs 2 CPUs in the affinity mask: one to keep busy and one free")
    target, have_torch = Target.host(), torch_available()
    print(f"target {target}, {args.threads} threads, spinner on CPU {cpus[-1]}; PyTorch "
          f"{'installed' if have_torch else 'not installed'}; GFLOP/s best over {args.processes} rounds; "
          "busy/quiet and peer/ours: medians over the rounds")
    print(f"{'workload':>22} {'':>6} {'ours':>7} " + " ".join(f"{n:>7}" for n in PEERS)
          + "  busy/quiet: ours " + " ".join(f"{n:>6}" for n in PEERS) + "  peer/ours busy: " + " ".join(f"{n:>6}" for n in PEERS))
    for name, (op, a) in WORKLOADS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        w = ops.make_workload(op, a)
        built = build_workload(w, ops.default_config(w, target), target)
        peers = peer_codes(op, w.args, args.threads, have_torch)
        artifact = export(built, w, scratch_dir("tf-busy-"))
        if args.always_spinning:
            peers["spin"] = kernel_code(always_spinning(artifact))
        codes = [kernel_code(artifact)] + list(peers.values())
        quiet, busy = timed_rounds(codes, args.processes, cpus[-1])
        cols = dict(zip(["ours", *peers], range(len(codes))))

        def cell(peer: str, fn) -> str:
            return f"{fn(cols[peer]):6.2f}" if peer in cols else f"{'-':>6}"

        for label, secs in (("quiet", quiet), ("busy", busy)):
            gflops = " ".join(f"{w.flop / min(secs[cols[n]]) / 1e9:7.1f}" if n in cols else f"{'-':>7}"
                              for n in ("ours", *PEERS))
            slowdown = " ".join(cell(n, lambda i: statistics.median(b / q for b, q in zip(busy[i], quiet[i])))
                                for n in ("ours", *PEERS))
            ratio = " ".join(cell(n, lambda i: statistics.median(x / o for x, o in zip(busy[i], busy[0]))) for n in PEERS)
            print(f"{name if label == 'quiet' else '':>22} {label:>6} {gflops}" +
                  (f"  {slowdown:>24}  {ratio}" if label == "busy" else ""), flush=True)


if __name__ == "__main__":
    main()
