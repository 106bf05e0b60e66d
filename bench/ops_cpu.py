"""Benchmark: tunefleet's CPU operators against PyTorch (oneDNN), in one run.

Workloads (batch 1, float32): the ResNet-50 conv2d layers (NCHW, fused bias + relu; the
last 3×3 layer also with pre-packed weights), MobileNet-v1 depthwise layers, and BERT's
attention batch_matmul 12×128×64 · 12×64×128. For each: our default config (no tuning),
the best of up to 32 configs sampled from the template's space (the default's one-knob
neighbours and random points, ranked by a quick in-process timing), and PyTorch on the
CPU when it is installed. Prints GFLOP/s, PyTorch's time over our best, and the percentage
of the fp32 FMA peak that the bench measures itself. Every reported number is the best over
several rounds of fresh processes, each round timing the peak, our two kernels and PyTorch
one after the other (timings vary by up to 35% between processes on these machines, more
when other work shares them).

    python bench/ops_cpu.py [--only conv5 dw] [--configs 32] [--threads N] [--protocol min-call]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (PROCESSES, export, interleaved_best_seconds, kernel_code, peak_code, quick_seconds,  # noqa: E402
                    scratch_dir)

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

_CONV = {"N": 1, "bias": True, "epilogue": "relu"}
_DW = {"N": 1, "KH": 3, "KW": 3, "padding": 1, "bias": True, "epilogue": "relu"}
WORKLOADS = {
    "conv2 3x3": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 3, "KW": 3, "padding": 1}),
    "conv3 3x3": ("conv2d_nchw", {**_CONV, "CI": 128, "CO": 128, "H": 28, "W": 28, "KH": 3, "KW": 3, "padding": 1}),
    "conv4 3x3": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 256, "H": 14, "W": 14, "KH": 3, "KW": 3, "padding": 1}),
    "conv5 3x3": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 7, "W": 7, "KH": 3, "KW": 3, "padding": 1}),
    "conv5 packed": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 7, "W": 7, "KH": 3, "KW": 3, "padding": 1,
                                     "weight_layout": "OIHW16i16o"}),
    "conv3 3x3 s2": ("conv2d_nchw", {**_CONV, "CI": 128, "CO": 128, "H": 56, "W": 56, "KH": 3, "KW": 3,
                                     "padding": 1, "stride": 2}),
    "conv2 1x1": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 64, "H": 56, "W": 56, "KH": 1, "KW": 1}),
    "conv2 1x1 up": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 256, "H": 56, "W": 56, "KH": 1, "KW": 1}),
    "conv3 1x1 s2": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1, "KW": 1, "stride": 2}),
    "conv4 1x1 up": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 1024, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    "conv4 1x1": ("conv2d_nchw", {**_CONV, "CI": 1024, "CO": 256, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    "conv5 1x1": ("conv2d_nchw", {**_CONV, "CI": 2048, "CO": 512, "H": 7, "W": 7, "KH": 1, "KW": 1}),
    "dw 32x112": ("depthwise_conv2d_nchw", {**_DW, "C": 32, "H": 112, "W": 112}),
    "dw 64x112 s2": ("depthwise_conv2d_nchw", {**_DW, "C": 64, "H": 112, "W": 112, "stride": 2}),
    "dw 512x14": ("depthwise_conv2d_nchw", {**_DW, "C": 512, "H": 14, "W": 14}),
    "bmm 12x128x64": ("batch_matmul", {"batch": 12, "M": 128, "N": 128, "K": 64}),
}


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


#: Timing protocols: "repeats" is tunefleet's (repeats of back-to-back calls lasting >= 100 ms,
#: best repeat's mean); "min-call" is the fastest single call of 200, which shrugs off most of
#: the load other work puts on a shared machine.
PROTOCOLS = {"repeats": {"repeat": 10, "min_repeat_ms": 100}, "min-call": {"repeat": 200, "min_repeat_ms": 0}}
#: The peak measurement that goes with each protocol: long runs, or many short ones.
PEAK_RUNS = {"repeats": {}, "min-call": {"iters": 200_000, "runs": 200}}


def torch_code(op: str, a: dict, threads: int, protocol: str) -> str:
    """Python source timing PyTorch's equivalent of the workload with the same protocol as ours
    (see PROTOCOLS); prints the best seconds."""
    p = PROTOCOLS[protocol]
    if op == "batch_matmul":
        setup = (f"x = torch.rand({a['batch']}, {a['M']}, {a['K']}); y = torch.rand({a['batch']}, {a['K']}, {a['N']})\n"
                 "f = lambda: torch.bmm(x, y)")
    else:
        cin, cout, groups = (a["C"], a["C"], a["C"]) if op.startswith("depthwise") else (a["CI"], a["CO"], 1)
        setup = (f"x = torch.rand({a['N']}, {cin}, {a['H']}, {a['W']})\n"
                 f"w = torch.rand({cout}, {cin // groups}, {a['KH']}, {a['KW']}); b = torch.rand({cout})\n"
                 f"f = lambda: F.relu(F.conv2d(x, w, b, {a['stride']}, {a['padding']}, {a['dilation']}, {groups}))")
    return f"""
import time, torch
import torch.nn.functional as F
torch.set_num_threads({threads})
{setup}
with torch.no_grad():
    f()
    number = 1
    while {p['min_repeat_ms']}:  # as tunefleet's timer: repeats of `number` calls lasting >= min_repeat_ms
        t = time.perf_counter()
        for _ in range(number): f()
        if time.perf_counter() - t >= {p['min_repeat_ms']} / 1000: break
        number *= 2
    best = 1e9
    for _ in range({p['repeat']}):
        t = time.perf_counter()
        for _ in range(number): f()
        best = min(best, (time.perf_counter() - t) / number)
print(best)
"""


def candidates(space, default, n: int, rng) -> list:
    """The default, up to n/2 of its one-knob neighbours (random order), then random configs."""
    out = {default.index: default}
    neighbours = space.neighbors(default)
    for i in rng.permutation(len(neighbours))[: max(0, n // 2 - 1)]:
        out.setdefault(neighbours[i].index, neighbours[i])
    for c in space.random(rng, 4 * n):
        if len(out) >= n:
            break
        out.setdefault(c.index, c)
    return list(out.values())


def search(w, target, n: int, rng) -> tuple:
    """(default BuiltKernel, best BuiltKernel, best config) among up to n sampled configs."""
    default = ops.default_config(w, target)
    configs = candidates(ops.config_space(w, target), default, n, rng)
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda c: build_workload(w, c, target), configs))
    trials = sorted(((quick_seconds(b, w), c.index, c, b) for c, b in zip(configs, built)), key=lambda t: t[:2])
    default_built = built[configs.index(default)]
    return default_built, trials[0][3], trials[0][2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="names of workloads to run (prefix match), default all")
    p.add_argument("--configs", type=int, default=32, help="configs sampled per workload (<= 32)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes per timing")
    p.add_argument("--protocol", choices=list(PROTOCOLS), default="repeats",
                   help="repeats: tunefleet's timer protocol; min-call: fastest single call (for busy machines)")
    args = p.parse_args()
    os.environ["TUNEFLEET_NUM_THREADS"] = str(args.threads)
    target = Target.host()
    have_torch = torch_available()
    print(f"target {target}, {args.threads} threads; PyTorch {'installed' if have_torch else 'not installed'}; "
          f"protocol {args.protocol}; peak: the fp32 FMA peak measured in the same rounds as the row's timings")
    print(f"{'workload':>14} {'GFLOP':>6} {'default':>8} {'best':>8} {'torch':>8} {'peak':>6} {'best/torch':>10} "
          f"{'%peak default/best/torch':>25}  best config")
    rng = np.random.default_rng(0)
    for name, (op, a) in WORKLOADS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        t0 = time.time()
        w = ops.make_workload(op, a)
        default_built, best_built, best_cfg = search(w, target, min(args.configs, 32), rng)
        codes = [peak_code(args.threads, **PEAK_RUNS[args.protocol])]
        codes += [kernel_code(export(b, w, scratch_dir("tf-bench-")), **PROTOCOLS[args.protocol])
                  for b in (default_built, best_built)]
        codes += [torch_code(op, w.args, args.threads, args.protocol)] if have_torch else []
        t_peak, t_default, t_best, *t_torch = interleaved_best_seconds(codes, processes=args.processes)
        peak, t_best = 1 / t_peak, min(t_best, t_default)
        t_torch = t_torch[0] if t_torch else float("nan")
        gf = [w.flop / t / 1e9 for t in (t_default, t_best, t_torch)]
        pct = "/".join(f"{100 * g / peak:.0f}" if g == g else "-" for g in gf)
        print(f"{name:>14} {w.flop / 1e9:6.2f} {gf[0]:8.1f} {gf[1]:8.1f} {gf[2]:8.1f} {peak:6.0f} "
              f"{t_torch / t_best:10.2f} {pct:>25}  {best_cfg.to_json()['knobs']} ({time.time() - t0:.0f}s)",
              flush=True)


if __name__ == "__main__":
    main()
