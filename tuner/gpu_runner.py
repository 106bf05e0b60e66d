"""Measuring CUDA candidates: the LocalMeasurer's pipeline with a GPU measurement child.

Used when the target's kind is "cuda" (``tunefleet tune ... --target cuda``, ``tunefleet
worker --gpu N``). Everything but the child is the CPU runner's (:mod:`.runner`): builders
(nvcc here) ahead of the runner, one fresh child process per candidate pinned to the
runner's CPUs (the host thread that launches kernels), the same statuses and timeouts, a
crashing or hanging candidate costing one trial.

The child (:func:`gpu_child_main`) loads the candidate's `.so` (it carries its own CUDA
runtime; only the driver is needed), checks it on fresh random inputs against the
operator's numpy reference (outputs pre-filled with NaN bytes on the device), then times it
with the library's ``tunefleet_cuda_timer``: CUDA events around ``number`` launches per
repeat, after a warm-up launch, with an L2 flush (a write of twice the L2 size) before each
repeat when the protocol's ``flush_cache`` is set. The SM and memory clocks (NVML) read
after the timing come back with the result: :attr:`GpuMeasurer.clocks` holds them per
measured candidate, in order (MeasureResult has no field for them yet).

A config over the device's limits never reaches a child: the builder's verifier raises
``InvalidConfig`` (a ScheduleError), reported as a ``compile_error`` whose text starts
with "InvalidConfig:"; :func:`is_invalid_config` recognizes it.
"""

from __future__ import annotations

import glob

from multiprocessing.connection import Connection

import numpy as np

from tunefleet.compiler import ops
from tunefleet.compiler.cuda_device import clocks as read_clocks
from tunefleet.compiler.cuda.kernel import GpuKernel, GpuUnavailable

from .measure import MeasureResult
from .measure_child import job_workload, outputs_error, redirect_output
from .runner import LocalMeasurer

__all__ = ["GpuMeasurer", "gpu_child_main", "gpu_device_key", "is_invalid_config", "measurer_for"]


def is_invalid_config(result: MeasureResult) -> bool:
    """Whether a failed trial is a config the verifier rejected (never built nor measured)."""
    return result.status == "compile_error" and result.error.startswith("InvalidConfig:")


def _check(kernel: GpuKernel, workload: ops.Workload, inputs: list[np.ndarray]) -> str:
    return outputs_error(workload, kernel.args, kernel.run(*inputs), workload.reference(*inputs))


def _clocks() -> dict | None:
    """NVML clocks of the device this process measures on (CUDA device 0 of its visible set)."""
    try:
        from tunefleet.compiler.cuda_device import query

        return read_clocks(query(0).get("pci_bus_id"))
    except Exception:  # clocks are a report, never a failure
        return None


def gpu_child_main(conn: Connection, job: dict) -> None:
    """Measure one CUDA candidate (the job of :func:`tunefleet.tuner.measure_child.child_main`).

    Messages: ("started",), ("ready",) then waits for "go", then ("result", status, costs,
    error, clocks) — clocks a dict or None."""
    redirect_output(job)
    try:
        protocol, workload = job_workload(job)
        kernel = GpuKernel(job["so_path"], {"name": job["name"], "args": job["args"]})
        kernel.ensure_device()
        conn.send(("started",))
        inputs = ops.random_inputs(workload.tensors(), np.random.default_rng())
        if protocol.check_correctness:
            wrong = _check(kernel, workload, inputs)
            if wrong:
                conn.send(("result", "wrong_answer", [], wrong, None))
                return
        conn.send(("ready",))
        conn.recv()
        costs = kernel.time(*inputs, number=protocol.number, repeat=protocol.repeat,
                            min_repeat_ms=round(protocol.min_repeat_ms), cooldown_ms=round(protocol.cooldown_ms),
                            flush_l2=protocol.flush_cache)
        conn.send(("result", "ok", costs.tolist(), "", _clocks()))
    except GpuUnavailable as exc:
        conn.send(("result", "runtime_error", [], f"GpuUnavailable: {exc}", None))
    except Exception as exc:
        conn.send(("result", "runtime_error", [], f"{type(exc).__name__}: {exc}", None))


class GpuMeasurer(LocalMeasurer):
    """A LocalMeasurer whose candidates run in :func:`gpu_child_main` (same arguments: ``cpus``
    are the host CPUs the launching thread is pinned to). ``clocks``: one entry per candidate
    that reached a child, in order: the NVML clocks after its timing (None if unavailable)."""

    child_target = staticmethod(gpu_child_main)
    address_space = None  # the CUDA driver reserves address space far beyond what it touches
    times_reference = False  # the probe times CPU work; a GPU kernel's child reads its clocks instead

    def __init__(self, **options):
        super().__init__(**options)
        self.clocks: list[dict | None] = []

    def _converse(self, conn, timeout_s: float):
        """The result, its clocks recorded; no interference probe (the clocks ride where the CPU
        child's probe does)."""
        status, costs, error, _ = super()._converse(_ClockTap(conn, self), timeout_s)
        return status, costs, error, None

    def sandbox_devices(self) -> list[str]:
        """The NVIDIA device files (/dev/nvidia*: the GPUs, nvidiactl, nvidia-uvm) the sandboxed child needs."""
        return sorted(glob.glob("/dev/nvidia*"))


class _ClockTap:
    """Wraps the child's pipe: records the clocks riding on its result message."""

    def __init__(self, conn, measurer: GpuMeasurer):
        self._conn, self._m = conn, measurer

    def poll(self, timeout):
        return self._conn.poll(timeout)

    def send(self, obj):
        self._conn.send(obj)

    def recv(self):
        msg = self._conn.recv()
        if msg and msg[0] == "result":
            self._m.clocks.append(msg[4] if len(msg) > 4 else None)
        return msg


def gpu_device_key(target) -> str:
    """The device key of this host's GPU (CUDA device 0 of this process), e.g. "cuda-h100-sm90";
    "cuda-<arch>" when no GPU can be queried (the measurements will then fail anyway)."""
    from tunefleet.compiler.cuda_device import GpuNotFound, device_key, query

    try:
        return device_key(query(0))
    except GpuNotFound:
        return f"cuda-{target.isa.replace('_', '')}"


def measurer_for(target, **options) -> LocalMeasurer:
    """The measurer for a target: GpuMeasurer for cuda, LocalMeasurer otherwise."""
    kind = getattr(target, "kind", str(target).split()[0] if str(target) else "cpu")
    return GpuMeasurer(**options) if kind == "cuda" else LocalMeasurer(**options)
