"""Shared pieces of the GPU benchmarks (bench/matmul_gpu.py, bench/ops_gpu.py).

They run on a machine with an NVIDIA GPU and nvcc; elsewhere `require_gpu()` stops them at
once with the reason. The vendor baselines come from PyTorch (cuBLAS, cuDNN) or, for
matmul, CuPy (cuBLAS), with TF32 off everywhere, so every number is true fp32 arithmetic.

Our side: a short search per workload (the template's default config, its one-knob
neighbours, random configs; all built with nvcc in parallel, each timed in this process
with the library's CUDA-event timer), then the best few re-timed with more repeats. With
`--tuner` the workload is tuned by tunefleet's tuner instead (XGBoost-guided search,
candidates measured in isolated child processes by the GPU measurer; needs xgboost).

Running from a checkout on a GPU machine without network: `pip install --no-deps
--no-build-isolation -e .` (or PYTHONPATH pointing at an installed tunefleet).
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("CUPY_TF32", "0")  # before cupy is imported: no TF32 in CuPy's cuBLAS calls

import numpy as np  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.build import BuildError  # noqa: E402
from tunefleet.compiler import cuda_device  # noqa: E402
from tunefleet.compiler.cuda import nvcc  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.cuda.kernel import GpuKernel  # noqa: E402
from tunefleet.compiler.cuda.limits import InvalidConfig  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402


def require_gpu() -> tuple[dict, Target]:
    """(device facts, cuda target of exactly its architecture); exits (status 1) with the
    reason when there is no nvcc or no usable NVIDIA GPU."""
    if not nvcc.have_nvcc():
        sys.exit("this benchmark needs nvcc (the CUDA toolkit) and an NVIDIA GPU: nvcc not found "
                 "(put it on PATH or set $NVCC)")
    try:
        info = cuda_device.query(0)
    except cuda_device.GpuNotFound as exc:
        sys.exit(f"this benchmark needs an NVIDIA GPU: {exc}")
    target = Target("cuda", info["arch"])
    try:
        nvcc.arch_flags(target.isa)
    except BuildError as exc:
        sys.exit(str(exc))
    return info, target


def describe(info: dict, target: Target) -> str:
    clocks = cuda_device.clocks(info.get("pci_bus_id")) or {}
    return (f"{info['name']} ({info['arch']}, {info.get('sm_count')} SMs, L2 {(info.get('l2_bytes') or 0) >> 20} MiB), "
            f"driver {info.get('driver_version')}, CUDA driver API {info.get('cuda_driver_version')}, "
            f"nvcc {nvcc.nvcc_version()}, target {target}; clocks now: {clocks or 'n/a'}")


# ----------------------------------------------------------------------------- vendor baselines


def vendor() -> tuple[str, object] | tuple[None, None]:
    """("torch", torch) with TF32 disabled, else ("cupy", cupy), else (None, None)."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
            torch.set_float32_matmul_precision("highest")
            torch.backends.cudnn.benchmark = True
            return "torch", torch
    except ImportError:
        pass
    try:
        import cupy

        return "cupy", cupy
    except ImportError:
        return None, None


def _time_events(run, synchronize, new_event, elapsed_ms, *, repeat: int = 10, min_ms: float = 100.0) -> float:
    """Best seconds per call of `run()` (CUDA events around a batch of calls, batch sized to last
    about min_ms). `synchronize()` waits for the device, `new_event()` makes a timing event,
    `elapsed_ms(start, stop)` reads two of them (torch.cuda's or cupy.cuda's)."""
    for _ in range(3):
        run()
    synchronize()

    def batch_ms(number: int) -> float:
        start, stop = new_event(), new_event()
        start.record()
        for _ in range(number):
            run()
        stop.record()
        stop.synchronize()
        return elapsed_ms(start, stop)

    number = 1
    while True:
        ms = batch_ms(number)
        if ms >= min_ms or number >= 1 << 20:
            break
        number = max(number * 2, int(number * 1.2 * min_ms / max(ms, 1e-3)))
    best = ms / number
    for _ in range(repeat - 1):
        best = min(best, batch_ms(number) / number)
    return best / 1e3


def _torch_events(torch) -> tuple:
    """_time_events' device hooks for PyTorch: its events time only when created with enable_timing."""
    return (torch.cuda.synchronize, lambda: torch.cuda.Event(enable_timing=True),
            lambda start, stop: start.elapsed_time(stop))


def cublas_matmul_seconds(M: int, N: int, K: int, *, batch: int = 0, transpose_b: bool = False) -> float | None:
    """Best seconds of an fp32 (TF32 off) cuBLAS product through PyTorch or CuPy; None without either."""
    name, mod = vendor()
    if name == "torch":
        torch = mod
        shape = (batch,) if batch else ()
        a = torch.rand(*shape, M, K, device="cuda", dtype=torch.float32)
        b = torch.rand(*shape, *((N, K) if transpose_b else (K, N)), device="cuda", dtype=torch.float32)
        bb = b.transpose(-1, -2) if transpose_b else b
        c = torch.empty(*shape, M, N, device="cuda", dtype=torch.float32)
        return _time_events(lambda: torch.matmul(a, bb, out=c), *_torch_events(torch))
    if name == "cupy":
        cp = mod
        shape = (batch,) if batch else ()
        a = cp.random.rand(*shape, M, K, dtype=cp.float32)
        b = cp.random.rand(*shape, *((N, K) if transpose_b else (K, N)), dtype=cp.float32)
        bb = b.swapaxes(-1, -2) if transpose_b else b
        c = cp.empty((*shape, M, N), dtype=cp.float32)
        return _time_events(lambda: cp.matmul(a, bb, out=c), cp.cuda.Device().synchronize, cp.cuda.Event,
                            cp.cuda.get_elapsed_time)
    return None


def cudnn_conv_seconds(a: dict) -> float | None:
    """Best seconds of the workload's fp32 convolution (+bias, +relu) through PyTorch's cuDNN
    (TF32 off, cudnn.benchmark on); None without PyTorch."""
    name, torch = vendor()
    if name != "torch":
        return None
    import torch.nn.functional as F

    groups = a["C"] if "C" in a else 1
    ci = a.get("CI", a.get("C"))
    co = a.get("CO", a.get("C"))
    x = torch.rand(a["N"], ci, a["H"], a["W"], device="cuda")
    w = torch.rand(co, ci // groups, a["KH"], a["KW"], device="cuda")
    bias = torch.rand(co, device="cuda") if a["bias"] else None
    act = {"relu": torch.relu, "gelu": F.gelu}.get(a["epilogue"], lambda t: t)

    def run():
        return act(F.conv2d(x, w, bias, stride=a["stride"], padding=a["padding"], dilation=a["dilation"],
                            groups=groups))

    with torch.no_grad():
        return _time_events(run, *_torch_events(torch))


# ----------------------------------------------------------------------------- our kernels


def _kernel(built) -> GpuKernel:
    return GpuKernel(built.so_path, {"name": built.name, "args": [a.to_dict() for a in built.args]})


def time_built(built, workload, *, repeat: int = 10, min_repeat_ms: int = 100) -> float:
    """Best seconds per launch of a built kernel on random inputs (CUDA events)."""
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(0))
    return float(np.min(_kernel(built).time(*inputs, repeat=repeat, min_repeat_ms=min_repeat_ms)))


def check_built(built, workload) -> float:
    """Relative error of the kernel's output against the numpy reference."""
    from tunefleet.tuner.measure_child import relative_error

    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(1))
    outs = _kernel(built).run(*inputs)
    return max(relative_error(o, np.asarray(r)) for o, r in zip(outs, workload.reference(*inputs)))


def candidates(space, default, n: int, rng, keep=None) -> list:
    """The default config, its one-knob neighbours, then random configs (those `keep(config)`
    accepts, when given): n distinct in all."""
    out = {default.index: default}
    for c in space.neighbors(default):
        if len(out) >= max(2, n // 2):
            break
        out.setdefault(c.index, c)
    tries = 0
    while len(out) < min(n, space.size) and tries < 100 * n:
        tries += 1
        c = space.random(rng, 1)[0]
        if keep is None or keep(c):
            out.setdefault(c.index, c)
    return list(out.values())


def gemm_keep(cfg) -> bool:
    """Random GEMM configs worth a build: register tiles of at least 16 values, 64+ threads."""
    return cfg["tile_m"].val * cfg["tile_n"].val >= 16 and cfg["warps_y"].val * cfg["warps_x"].val >= 2


def search(workload, target: Target, n_configs: int, *, seed: int = 0, top: int = 3, keep=None) -> dict:
    """Short search (see the module docstring). Returns {"default": (seconds, config),
    "best": (seconds, config, built), "tried": count, "invalid": count, "failed": count}."""
    space = ops.config_space(workload, target)
    default = ops.default_config(workload, target)
    configs = candidates(space, default, n_configs, np.random.default_rng(seed), keep)

    def build(cfg):
        try:
            return cfg, build_workload(workload, cfg, target), ""
        except InvalidConfig as exc:
            return cfg, None, f"invalid: {exc}"
        except Exception as exc:  # a compile error is a failed candidate, not a failed benchmark
            return cfg, None, f"{type(exc).__name__}: {exc}"

    with ThreadPoolExecutor(max(1, len(os.sched_getaffinity(0)))) as pool:
        built = list(pool.map(build, configs))
    quick = []
    invalid = failed = 0
    for cfg, b, err in built:
        if b is None:
            invalid += err.startswith("invalid")
            failed += not err.startswith("invalid")
            continue
        try:
            quick.append((time_built(b, workload, repeat=3, min_repeat_ms=20), cfg, b))
        except RuntimeError:
            failed += 1
    quick.sort(key=lambda t: t[0])
    final = []
    for _, cfg, b in quick[:top]:
        err = check_built(b, workload)
        if err <= 1e-4:
            final.append((time_built(b, workload), cfg, b))
    final.sort(key=lambda t: t[0])
    d = next(((t, c) for t, c, _ in final if c.index == default.index), None)
    if d is None:
        db = next((b for c, b, _ in built if c.index == default.index and b is not None), None)
        d = (time_built(db, workload), default) if db is not None else (float("inf"), default)
    return {"default": d, "best": final[0] if final else (float("inf"), default, None), "tried": len(configs),
            "invalid": invalid, "failed": failed}


def tune_with_tuner(workload, target: Target, trials: int, records_path: str) -> tuple[float, object, object]:
    """Tune with tunefleet's tuner and the GPU measurer; (seconds re-timed here, config, built)."""
    from tunefleet.compiler.cuda_device import device_key
    from tunefleet.tuner.gpu_runner import GpuMeasurer
    from tunefleet.tuner.tune import tune

    with GpuMeasurer() as measurer:
        result = tune(workload, target, trials=trials, records_path=records_path, measurer=measurer,
                      device_key=device_key(cuda_device.query(0)))
    if result.best is None:
        raise RuntimeError("the tuner found no correct config")
    cfg = ops.config_space(workload, target).from_json(result.best.config)
    built = build_workload(workload, cfg, target)
    return time_built(built, workload), cfg, built


def gflops(workload, seconds: float | None) -> float:
    return workload.flop / seconds / 1e9 if seconds and seconds != float("inf") else float("nan")


def elapsed(t0: float) -> str:
    return f"{time.time() - t0:.0f}s"
