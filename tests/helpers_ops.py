"""Test-only operator "faulty": B[i] = 2·A[i], with a template knob that breaks the kernel on purpose.

Imported as an operator plugin (``TUNEFLEET_OPS_PLUGINS=helpers_ops``, with
this folder on ``sys.path``), so builder and measurement processes know it too.
The ``mode`` knob of the CPU template:

- "ok": the right kernel (with the ``vec`` knob, a split of i vectorized by vec);
- "wrong": a wrong index expression, B[i] = 2·A[min(i + 1, n - 1)];
- "crash": a read 2**36 elements past the end of A (a te stage always stores in
  bounds, so the fault comes from a load; the process dies by SIGSEGV);
- "hang": 2·A[i] as a sum of 2**40 terms 2·A[i]/2**40, which never ends in a
  test's lifetime (float additions of a nonzero term cannot be folded);
- "illegal": a schedule that splits an axis that was split already (ScheduleError).

When ``$TUNEFLEET_TEST_DIE`` is "n:pid", a process other than ``pid`` that instantiates the
template for that n exits at once (a builder process that dies mid-build). When
``$TUNEFLEET_TEST_STALL`` is "n:space" or "n:lowering", the template for that n computes for
``STALL_S`` seconds when it defines its config space or when it schedules a config (a
compiler defect that loops). With ":in-c" after it ("n:lowering:in-c") it does so with SIGALRM
blocked, as a call into C that never returns would: no Python time limit interrupts it.

The numpy reference runs in the measurement process; when ``$TUNEFLEET_TEST_PROBE``
names a file, it writes there what that process sees: its CPU affinity and
``TUNEFLEET_NUM_THREADS``.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np

from tunefleet.compiler import te
from tunefleet.compiler.ops.registry import ArgDef, OpDef, register
from tunefleet.compiler.schedule import create_schedule
from tunefleet.compiler.space import ConfigSpace

MODES = ("ok", "wrong", "crash", "hang", "illegal")
PROBE_ENV = "TUNEFLEET_TEST_PROBE"
DIE_ENV = "TUNEFLEET_TEST_DIE"
STALL_ENV = "TUNEFLEET_TEST_STALL"
STALL_S = 30.0
FAR = 1 << 36
LONG = 1 << 40


def _compute(a: dict) -> list[te.Tensor]:
    A = te.placeholder((a["n"],), "float32", "A")
    return [A, te.compute((a["n"],), lambda i: A[i] * 2.0, name="B")]


def _body(A: te.Tensor, n: int, mode: str) -> te.Tensor:
    if mode == "wrong":
        return te.compute((n,), lambda i: A[te.min(i + 1, n - 1)] * 2.0, name="B")
    if mode == "crash":
        return te.compute((n,), lambda i: A[i + FAR] * 2.0, name="B")
    if mode == "hang":
        k = te.reduce_axis(LONG, "k")
        return te.compute((n,), lambda i: te.sum(A[i] * (2.0 / LONG), axis=k), name="B")
    return te.compute((n,), lambda i: A[i] * 2.0, name="B")


def _template(cfg, workload, target):
    n = workload.args["n"]
    die = os.environ.get(DIE_ENV, "")
    if die.startswith(f"{n}:") and die != f"{n}:{os.getpid()}":
        os._exit(3)
    phase = "space" if isinstance(cfg, ConfigSpace) else "lowering"
    stall = os.environ.get(STALL_ENV, "")
    if stall in (f"{n}:{phase}", f"{n}:{phase}:in-c"):
        if stall.endswith(":in-c"):
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        end = time.monotonic() + STALL_S
        while time.monotonic() < end:
            pass
    cfg.define_knob("mode", list(MODES))
    cfg.define_knob("vec", [1, 4, 8])
    A = te.placeholder((n,), "float32", "A")
    B = _body(A, n, cfg["mode"].val)
    sch = create_schedule(B)
    if cfg["mode"].val == "ok" and cfg["vec"].val > 1:
        _, inner = sch[B].split(sch[B].op.axis[0], factor=cfg["vec"].val)
        sch[B].vectorize(inner)
    if cfg["mode"].val == "illegal":
        (i,) = sch[B].op.axis
        sch[B].split(i, factor=2)
        sch[B].split(i, factor=2)
    return sch, [A, B]


def _reference(a: dict, A: np.ndarray) -> list[np.ndarray]:
    if os.environ.get(PROBE_ENV):
        Path(os.environ[PROBE_ENV]).write_text(json.dumps({
            "affinity": sorted(os.sched_getaffinity(0)), "threads": os.environ.get("TUNEFLEET_NUM_THREADS")}))
    return [(A * 2).astype(np.float32)]


register(OpDef(
    name="faulty",
    description="test only: B = 2A, with template modes that compute wrongly, crash or hang",
    args=[ArgDef("n", "int", 64, 1, 1 << 20)],
    compute=_compute,
    reference=_reference,
    flop=lambda a: a["n"],
    templates={"cpu": _template},
))
