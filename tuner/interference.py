"""How disturbed a measurement was: other processes' share of its CPUs, and how fast those CPUs ran.

A candidate's timing is only its own speed when nothing else ran on its CPUs meanwhile. Two
probes, both taken in the measuring child around its timed repeats, tell how far that held:

* **Stolen time** (:func:`sched_times`, :func:`stolen_fraction`): Linux counts, per thread,
  the nanoseconds it ran and the nanoseconds it waited on a run queue while runnable
  (``/proc/self/task/<tid>/schedstat``: run time, run delay, time slices; the kernel's
  ``Documentation/scheduler/sched-stats.rst``). A thread that waited ``d`` ns while it ran
  ``r`` ns was runnable ``r + d``; a parallel loop waits for its slowest thread, so the
  longest ``r + d`` over the longest ``r`` of the process's busy threads, minus 1, is the
  slowdown that time-sharing caused the candidate during the window. It costs two
  reads of a few small files: nothing next to the timing. Where schedstat cannot be read
  (a kernel without ``CONFIG_SCHED_INFO``), it is 0.
* **Reference speed** (:func:`reference_seconds`): a fixed reference kernel (a C loop of
  :data:`REFERENCE_ADDS` integer additions, ``sum(range(n))`` in CPython) timed on each
  measuring CPU just before and just after the repeats, best of :data:`REFERENCE_BLOCKS`
  blocks so that it measures the CPU's speed while running, not time-sharing. Compared with
  the fastest this measuring process has seen on that CPU (its calibration: the minimum so
  far, kept by the measurer), it shows what stolen time cannot: a busy SMT sibling, a lower
  clock, caches shared with a busy neighbour (issue #18: "time a fixed reference kernel in
  the same window").

:func:`disturbance` combines them into one figure, a fraction: ``(1 + stolen) * (1 +
slowdown) - 1``, where ``slowdown`` is the reference's time over its calibration minus 1,
averaged over before/after and maximal over the CPUs. 0 means an undisturbed window; 1 means
the candidate's CPUs did about half as much of its work per second as they could.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

__all__ = ["REFERENCE_ADDS", "REFERENCE_BLOCKS", "sched_times", "thread_cpus", "stolen_fraction", "critical_thread",
           "reference_seconds", "reference_slowdown", "disturbance"]

T = TypeVar("T")

#: Integer additions of one block of the reference kernel (about 0.1 ms on a 3 GHz Zen 3 core).
REFERENCE_ADDS = 4000
#: Blocks of the reference kernel per CPU and side; the fastest counts.
REFERENCE_BLOCKS = 5
#: A thread counts for stolen time when it ran at least this fraction of the busiest thread's time.
_BUSY_FRACTION = 0.1


def _per_thread(task_dir: Path, name: str, parse: Callable[[str], T]) -> dict[int, T]:
    """``{thread id: parse(text of <task_dir>/<tid>/<name>)}`` for every thread whose file
    reads and parses; empty when ``task_dir`` cannot be listed."""
    out: dict[int, T] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return out
    for tid in tids:
        try:
            out[int(tid)] = parse((task_dir / tid / name).read_text())
        except (OSError, ValueError, IndexError):
            continue
    return out


def _run_and_wait(schedstat: str) -> tuple[int, int]:
    run, wait, _ = schedstat.split()
    return int(run), int(wait)


def sched_times(task_dir: Path = Path("/proc/self/task")) -> dict[int, tuple[int, int]]:
    """``{thread id: (run ns, run-queue wait ns)}`` of every thread of this process, from
    schedstat; empty when it cannot be read."""
    return _per_thread(task_dir, "schedstat", _run_and_wait)


def thread_cpus(task_dir: Path = Path("/proc/self/task")) -> dict[int, int]:
    """``{thread id: the CPU it last ran on}`` for every thread of this process (field 39,
    ``processor``, of ``/proc/self/task/<tid>/stat``: proc(5); the fields after the command's
    closing parenthesis start at 3); empty when it cannot be read."""
    return _per_thread(task_dir, "stat", lambda stat: int(stat.rsplit(")", 1)[1].split()[39 - 3]))


def _busy_deltas(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]
                 ) -> dict[int, tuple[int, int]]:
    """``{thread id: (run ns, wait ns)}`` between two :func:`sched_times` snapshots of the
    threads that ran at least _BUSY_FRACTION as long as the busiest (threads born in between
    count from 0); empty when no thread ran."""
    deltas = {tid: (run - before.get(tid, (0, 0))[0], wait - before.get(tid, (0, 0))[1])
              for tid, (run, wait) in after.items()}
    busiest = max((run for run, _ in deltas.values()), default=0)
    if busiest <= 0:
        return {}
    return {tid: (run, wait) for tid, (run, wait) in deltas.items() if run >= _BUSY_FRACTION * busiest}


def critical_thread(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]) -> int | None:
    """The thread on the kernel's critical path between two :func:`sched_times` snapshots: of
    the busy threads (:func:`stolen_fraction`'s), the one runnable longest; None when no thread
    ran. Its CPU is the one whose speed set the kernel's time (:func:`reference_slowdown`)."""
    busy = _busy_deltas(before, after)
    return max(busy, key=lambda tid: sum(busy[tid])) if busy else None


def stolen_fraction(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]) -> float:
    """The time-sharing slowdown minus 1 of the kernel's critical path between two
    :func:`sched_times` snapshots: the longest a thread was runnable (ran or waited on a run
    queue) over the longest a thread ran, minus 1, among the threads that ran at least a tenth
    as long as the busiest one (threads born in between count from 0). 0.0 when no thread ran.

    A parallel loop ends with its slowest thread, so this is how much longer the loops took
    than they would have on CPUs of their own. A thread that waited while another thread had
    more work anyway did not make the kernel slower: with one of two CPUs shared with a busy
    loop, an even split's thread there waits as long as it runs (1.0), but a split that gives
    that thread a third of the work finishes it no later than the other thread's two thirds
    (0.0), as it would on a quiet host."""
    busy = _busy_deltas(before, after)
    if not busy:
        return 0.0
    runnable = max(run + wait for run, wait in busy.values())
    return max(0.0, runnable / max(run for run, _ in busy.values()) - 1.0)


def reference_seconds(cpus: Sequence[int], adds: int = REFERENCE_ADDS, blocks: int = REFERENCE_BLOCKS) -> list[float]:
    """Seconds of the reference kernel on each of ``cpus`` (same order): the calling thread is
    pinned to each in turn (its affinity is restored after), and the fastest of ``blocks``
    blocks of ``adds`` additions counts. About ``len(cpus) * blocks * 0.1`` ms on Zen 3."""
    mask = os.sched_getaffinity(0)
    out = []
    try:
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            best = float("inf")
            for _ in range(blocks):
                t0 = time.perf_counter()
                sum(range(adds))
                best = min(best, time.perf_counter() - t0)
            out.append(best)
    finally:
        os.sched_setaffinity(0, mask)
    return out


def reference_slowdown(samples: Iterable[Sequence[float]], calibration: Sequence[float],
                       critical: int | None = None) -> float:
    """How much slower than ``calibration`` (seconds per CPU, the fastest seen) the reference
    ran: per CPU the mean of ``samples`` (e.g. before and after, each seconds per CPU) over
    the calibration, minus 1, at least 0 — of the CPU at index ``critical`` (where the kernel's
    critical path ran: :func:`critical_thread`), else the largest over the CPUs.

    A CPU shared with a lasting load slows the reference there, but the kernel only where its
    critical path runs: a parallel split that gives that CPU's thread less work finishes no
    later (Intel Xeon model 167, one of 2 CPUs kept busy, a 1024³ matmul split 2:1 toward the
    free CPU: 0.33-0.43 by the largest, as if a third slower, where it ran as fast as on a quiet
    host; even splits 0.88-0.89 — too close for the winner's choice to tell them apart, so the
    uneven split won and ran at 60% of the quiet winner's speed)."""
    samples = [list(s) for s in samples]
    if not samples or not calibration:
        return 0.0
    ratios = [sum(s[i] for s in samples) / len(samples) / calibration[i] for i in range(len(calibration))]
    return max(0.0, (ratios[critical] if critical is not None else max(ratios)) - 1.0)


def disturbance(stolen: float, slowdown: float) -> float:
    """``(1 + stolen) * (1 + slowdown) - 1``: the combined slowdown, as a fraction (>= 0)."""
    return max(0.0, (1.0 + stolen) * (1.0 + slowdown) - 1.0)
