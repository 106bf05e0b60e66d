"""The isolated measurement process: load one built candidate, check it, time it.

:func:`child_main` runs in a fresh process per candidate (forked from the fork
server by :mod:`.runner`), so a candidate that crashes, aborts or hangs takes
only this process with it. It talks to the runner over a pipe:

1. ``("started",)`` once the library is loaded: the runner's timeout starts now;
2. correctness check (when the protocol asks for it), with numpy's BLAS on one
   thread (set in the fork server, :mod:`.forkserver_blas`: a multi-threaded OpenBLAS
   keeps its threads spinning for about 0.1 s after each call, on the CPUs the
   candidate is then timed on): fresh random inputs in
   [-1, 1), outputs pre-filled with NaN (an element the kernel never writes
   fails the check), compared with the operator's numpy reference. The error
   is ``max |out - ref| / max |ref|`` over each output (relative to the
   output's largest magnitude, so the many near-zero entries of a product do
   not make the check flaky); it must be at most :data:`TOLERANCE` of the
   dtype: 1e-4 for float32, 1e-9 for float64 (the least precise of the output's and
   its arithmetic's). Elements equal in both, the same infinity or NaN in both (a log
   of the negative half of the inputs), match, as in ``numpy.testing.assert_allclose``.
   A failure ends with
   ``("result", "wrong_answer", [], text)``;
3. ``("ready",)``, then it waits for ``"go"``: the runner first keeps builds off
   these CPUs;
4. timing with the artifact runtime's ``tunefleet_timer`` on
   ``<name>_packed``, between two interference probes (:mod:`.interference`: the job's
   reference kernel, when it has one, on all its CPUs at once; the threads' schedstat):
   ``("result", "ok", costs, "", probe)``, costs in seconds per call, ``probe`` =
   ``{"stolen": fraction, "reference": [seconds per call before, after] or []}``.

A Python exception, or a nonzero return code of the kernel, ends with
``("result", "runtime_error", [], text)``. Output of the process (C runtime
messages, glibc's abort text) goes to the log file the runner reads.
"""

from __future__ import annotations

import os
from multiprocessing.connection import Connection

import numpy as np

from tunefleet.base.load import Kernel
from tunefleet.compiler import ops
from tunefleet.compiler.ops import te_analysis

from . import interference, plugins, processes
from .measure import MeasureProtocol

__all__ = ["TOLERANCE", "relative_error", "child_main", "sandboxed_main"]

#: Largest accepted relative error (see the module docstring) per the least precise dtype of an
#: output and of its arithmetic (``te_analysis.precision_dtype``).
TOLERANCE = {"float32": 1e-4, "float64": 1e-9}


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """``max |out - ref| / max |ref|`` in float64 over the elements that differ, the max of |ref|
    over its finite elements (floored at 1e-30). Elements equal in both, the same infinity or NaN
    in both, match; NaN when a differing element is not finite in one of them (a NaN or infinity
    the other does not have)."""
    out64, ref64 = out.astype(np.float64), ref.astype(np.float64)
    differ = ~((out64 == ref64) | (np.isnan(out64) & np.isnan(ref64)))
    if not differ.any():
        return 0.0
    out_d, ref_d = out64[differ], ref64[differ]
    if not (np.isfinite(out_d).all() and np.isfinite(ref_d).all()):
        return float("nan")
    finite = np.abs(ref64[np.isfinite(ref64)])
    return float(np.abs(out_d - ref_d).max() / max(float(finite.max()) if finite.size else 0.0, 1e-30))


def _check(kernel: Kernel, workload: ops.Workload) -> tuple[str, list[np.ndarray]]:
    """("" or the wrong-answer text, all arguments of a correct run)."""
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng())
    outputs = [np.full(a.shape, np.nan, a.dtype) for a in kernel.args if a.is_output]
    kernel(*inputs, out=outputs)
    wrong = outputs_error(workload, kernel.args, outputs, workload.reference(*inputs))
    return wrong, ([] if wrong else [*inputs, *outputs])


def outputs_error(workload: ops.Workload, args, outputs: list[np.ndarray], refs) -> str:
    """"" when every output is within TOLERANCE of its reference, else the wrong-answer text of the
    first that is not: how many elements were never written (outputs start as NaN), or the error.
    ``args``: the kernel's ArgSpecs (the outputs are those with ``is_output``), in the order of
    ``workload.tensors()``; each output's tolerance is that of ``te_analysis.precision_dtype``."""
    specs = [a for a in args if a.is_output]
    computed = workload.tensors()[-len(specs):]
    for spec, tensor, out, ref in zip(specs, computed, outputs, refs):
        ref = np.asarray(ref)
        err = relative_error(out, ref)
        tol = TOLERANCE[te_analysis.precision_dtype(tensor)]
        if not err <= tol:
            unwritten = int(np.isnan(out).sum() - np.isnan(ref).sum())
            what = f"{unwritten} of {out.size} elements never written (still NaN)" if unwritten > 0 else \
                f"max relative error {err:.3g} > tolerance {tol:g}"
            return f"output {spec.name!r}: {what}"
    return ""


def redirect_output(job: dict) -> None:
    """Adopt the parent's process state and the job's CPUs; stdout and stderr go to the job's log."""
    processes.adopt(job["state"], job["cpus"])
    log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)


def job_workload(job: dict) -> tuple[MeasureProtocol, ops.Workload]:
    """Load the job's operator plugins; its protocol and workload."""
    plugins.load_plugins(tuple(job["plugins"]))
    return MeasureProtocol.from_json(job["protocol"]), ops.Workload.from_json(job["workload"])


def sandboxed_main(fd: int, target: str) -> None:
    """The entry point of a child started in the sandbox (a fresh Python, not a fork): the
    runner's end of the pipe is the socket `fd`; the job is its first message; then the child
    function `target` (``"module:function"``, e.g. this module's child_main) runs it."""
    import importlib

    conn = Connection(fd)
    job = conn.recv()
    module, function = target.split(":")
    getattr(importlib.import_module(module), function)(conn, job)


def child_main(conn: Connection, job: dict) -> None:
    """Measure one candidate. ``job``: state (``processes.parent_state()``), cpus, log (path), plugins, workload (JSON),
    name, so_path, args (ArgSpec dicts), protocol (MeasureProtocol JSON), reference (the built reference
    kernel's so_path, name and args, or None: :class:`.interference.Reference`), calibration (the
    reference's fastest seconds per call the measurer has seen, or None)."""
    redirect_output(job)
    os.environ["TUNEFLEET_NUM_THREADS"] = str(len(job["cpus"]))
    try:
        protocol, workload = job_workload(job)
        kernel = Kernel(job["so_path"], {"name": job["name"], "args": job["args"]})
        reference = interference.Reference(**job["reference"]) if job.get("reference") else None
        conn.send(("started",))
        if protocol.check_correctness:
            wrong, arrays = _check(kernel, workload)
            if wrong:
                conn.send(("result", "wrong_answer", [], wrong))
                return
        else:
            arrays = ops.random_inputs(workload.tensors(), np.random.default_rng())
        conn.send(("ready",))
        conn.recv()
        calibration = job.get("calibration")
        before = [reference.seconds(calibration)] if reference else []
        sched = interference.sched_times()
        costs = kernel.time(*arrays, number=protocol.number, repeat=protocol.repeat,
                            min_repeat_ms=round(protocol.min_repeat_ms), cooldown_ms=round(protocol.cooldown_ms),
                            flush_cache=protocol.flush_cache)
        probe = {"stolen": interference.stolen_fraction(sched, interference.sched_times()),
                 "reference": before + ([reference.seconds(calibration)] if reference else [])}
        conn.send(("result", "ok", costs.tolist(), "", probe))
    except Exception as exc:
        conn.send(("result", "runtime_error", [], f"{type(exc).__name__}: {exc}"))
