"""How disturbed a measurement was: other processes' share of its CPUs, and how fast those CPUs ran.

A candidate's timing is only its own speed when nothing else ran on its CPUs meanwhile. Two
probes, both taken in the measuring child around its timed repeats, tell how far that held:

* **Stolen time** (:func:`sched_times`, :func:`stolen_fraction`): Linux counts, per thread,
  the nanoseconds it ran and the nanoseconds it waited on a run queue while runnable
  (``/proc/self/task/<tid>/schedstat``: run time, run delay, time slices; the kernel's
  ``Documentation/scheduler/sched-stats.rst``). A thread that waited ``d`` ns while it ran
  ``r`` ns was runnable ``r + d``; the runtime's parallel loops share a slowed thread's work
  out among the others, so the ``d`` summed over the process's busy threads over their ``r``
  is the slowdown that time-sharing caused the candidate during the window.
  It costs two reads of a few small files: nothing next to the timing. Where schedstat cannot
  be read (a kernel without ``CONFIG_SCHED_INFO``), it is 0.
* **Reference speed** (:class:`Reference`, :func:`reference_slowdown`): a fixed reference
  kernel, the matmul :data:`REFERENCE_WORKLOAD` built by our compiler for the host's ISA with
  its template's default config, runs in parallel on all measuring CPUs at once through the
  runtime's pool, as the candidate does, just before and just after the repeats: the fastest
  block of :data:`REFERENCE_CALLS` calls, in rounds of :data:`REFERENCE_BLOCKS` blocks until
  one comes near the calibration (:func:`fastest_of_rounds`), so that it measures how fast
  the CPUs compute while they run, not time-sharing. Compared with the fastest this
  measuring process has seen (its calibration: the minimum so far, kept by the measurer), it
  shows what stolen time cannot: the CPUs' vector units shared with another VM's threads (on
  an SMT sibling, or our two vCPUs on one core), a lower clock, caches shared with a busy
  neighbour (issue #18: "time a fixed reference kernel in the same window").

  Why a vector kernel on all CPUs at once (AMD EPYC Zen 4 VM, 2 vCPUs, KVM): for up to a few
  hundred ms at a time, a 2-thread 512³ matmul ran 1.95-2.1x slower while both its threads ran
  all along (no run-queue wait, no steal time in ``/proc/stat``). The 128³ reference read
  1.94-1.95x in those windows (1.05 median, 1.15 at the 95th percentile elsewhere), whereas the
  earlier reference, a CPython integer loop timed one CPU at a time, read 1.0-1.03x there and
  1.3-1.8x in undisturbed windows: it measured neither the vector units nor both CPUs busy. In
  ResNet-50 tuning on that host such windows read trials at twice their time with a
  disturbance near 0 (1×1 64 -> 256 at 56²: median 0.99 ms, fastest repeat 0.51, disturbance
  0.004); with this reference, a trial timed at 0.92 against 0.47 ms read 0.96.

:func:`disturbance` combines them into one figure, a fraction: ``(1 + stolen) * (1 +
slowdown) - 1``, where ``slowdown`` is the reference's time over its calibration minus 1,
averaged over before/after. 0 means an undisturbed window; 1 means the candidate's CPUs did
about half as much of its work per second as they could. Where the reference's two readings
disagree (:func:`unsteady`), the window changed while it was measured and that average may not
hold for the repeats between them: the runner measures again.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from tunefleet.base.load import Kernel
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target

from .builder import build_candidate
from .measure import MeasureInput

__all__ = ["REFERENCE_WORKLOAD", "REFERENCE_CALLS", "REFERENCE_BLOCKS", "REFERENCE_ROUNDS", "REFERENCE_NEAR",
           "sched_times", "stolen_fraction", "reference_input", "Reference", "fastest_of_rounds",
           "reference_slowdown", "unsteady",
           "disturbance", "excess_disturbance", "UNSTEADY"]

#: The reference kernel: a float32 matmul whose operands (192 KiB) stay in the L2, about 20 µs
#: per call on 2 Zen 4 cores (AVX-512).
REFERENCE_WORKLOAD = ("matmul", {"M": 128, "N": 128, "K": 128})
#: Back-to-back calls of the reference kernel per block.
REFERENCE_CALLS = 8
#: Blocks of the reference kernel per round; the fastest block of a side's rounds counts.
REFERENCE_BLOCKS = 8
#: Rounds per side (before, after) at most: more follow the first while its fastest block is not
#: within :data:`REFERENCE_NEAR` of the calibration. 5 rounds take about 6.5 ms on 2 Zen 4 cores,
#: longer than the slices (about 3 ms) in which Linux shares a CPU between one of our threads and
#: another busy one: the runtime's loops then hand that thread's work to the others, so a block
#: run while it waits reads up to twice the calibration, and one in its next slice reads near it.
#: Vector units shared with a neighbour's threads, or a lower clock, last longer and still read.
#: A reference on one thread takes one round (:func:`fastest_of_rounds`).
REFERENCE_ROUNDS = 5
#: How close to the calibration (a fraction over it) a side's fastest block ends its rounds.
REFERENCE_NEAR = 0.15
#: How far apart (a fraction of the calibration) the reference's speeds before and after the
#: repeats may be in a steady window. AMD Zen 4, 2 vCPUs, tuning matmul 1024³: quiet, 0.12 at the
#: 90th percentile of 80 trials' probes, and 0.93 once (1.94x before, 1.01x after: a burst that
#: shared the vector units); one CPU kept busy all along, 0.22 at most of 79. Intel Xeon (model
#: 167, AVX-512), the same runs twice: quiet 0.19-0.20 at the 99th percentile of 79, 0.22 at most;
#: busy 0.21-0.26, 0.28 at most (bench/tune_under_load.py prints these). AMD Zen 3 (AVX2, a
#: noisier host), two runs: quiet 0.16 at the 90th percentile of 80 probes in a quiet hour (1
#: above 0.4), 0.53 in a disturbed one (16 of 94); one CPU kept busy 0.42-0.52 at the 90th
#: percentile (9-16 of about 90 above 0.4, measured again). There the threshold costs re-measures,
#: but the busy winner still re-timed at 95.7-98.7% of the quiet one: raising it would let a
#: burst that covered one side of the window pass as steady.
UNSTEADY = 0.4
#: A thread counts for stolen time when it ran at least this fraction of the busiest thread's time.
_BUSY_FRACTION = 0.1


def sched_times(task_dir: Path = Path("/proc/self/task")) -> dict[int, tuple[int, int]]:
    """``{thread id: (run ns, run-queue wait ns)}`` of every thread of this process whose
    schedstat reads; empty when ``task_dir`` cannot be listed."""
    out: dict[int, tuple[int, int]] = {}
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return out
    for tid in tids:
        try:
            run, wait, _ = (task_dir / tid / "schedstat").read_text().split()
            out[int(tid)] = int(run), int(wait)
        except (OSError, ValueError):
            continue
    return out


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


def stolen_fraction(before: Mapping[int, tuple[int, int]], after: Mapping[int, tuple[int, int]]) -> float:
    """The time-sharing slowdown minus 1 of the kernel between two :func:`sched_times`
    snapshots: the threads' run-queue waits over their run times, both summed over the threads
    that ran at least a tenth as long as the busiest one (threads born in between count from 0).
    0.0 when no thread ran.

    The runtime's parallel loops hand the parts a slowed thread has not started to the others
    (tunefleet_runtime.c, "load balancing"), so the kernel's threads together get their work
    done at the rate they get CPU time: of the time they were runnable, the waits were lost.
    With one of two CPUs shared with a busy loop, the thread there runs half the window and
    waits the other half while the other thread runs all of it: 0.5 / 1.5 = 0.33 (a 1024³ matmul
    took 1.40x its quiet time on an AMD Zen 4). A thread that runs less than the others on a
    quiet host (the caller's timing loop between calls) waits no more for it: 0. Static chunks,
    before the balancing, made the kernel wait for its slowest thread (the same even split took
    twice as long; this reads 0.5)."""
    busy = _busy_deltas(before, after)
    if not busy:
        return 0.0
    return sum(wait for _, wait in busy.values()) / sum(run for run, _ in busy.values())


def reference_input(target: str | None = None) -> MeasureInput:
    """The reference kernel as a measure input: :data:`REFERENCE_WORKLOAD` for ``target`` (a
    target string, default this host's), with its template's default config."""
    workload = ops.make_workload(*REFERENCE_WORKLOAD)
    parsed = Target.parse(target) if target else Target.host()
    return MeasureInput(workload.to_json(), str(parsed), ops.preferred_configs(workload, parsed)[0].to_json())


class Reference:
    """The built reference kernel (:func:`reference_input`), loaded with its operands
    (``arrays``: A and B, 128 × 128 float32 each, row-major, in [-1, 1)): the library
    ``so_path``, the kernel's ``name`` and its ``args`` (``ArgSpec.to_dict()`` each), as the
    builder gives them. Raises like :class:`~tunefleet.base.load.Kernel`."""

    def __init__(self, so_path: str, name: str, args: Sequence[dict]):
        self.kernel = Kernel(so_path, {"name": name, "args": list(args)})
        workload = ops.make_workload(*REFERENCE_WORKLOAD)
        self.arrays = ops.random_inputs(workload.tensors(), np.random.default_rng(0))

    @classmethod
    def for_host(cls) -> Reference:
        """The reference for this host's ISA, built in this process (the compiler's cache makes a
        rebuild cheap). Raises RuntimeError with the builder's error when it does not build."""
        built = build_candidate(reference_input())
        if built.status != "ok":
            raise RuntimeError(f"the reference kernel did not build: {built.error}")
        return cls(built.so_path, built.name, built.args)

    def seconds(self, calibration: float | None = None) -> float:
        """Seconds per call on the runtime's threads (as many as :attr:`Kernel.num_threads` gives
        the calling thread): the fastest block of :data:`REFERENCE_CALLS` calls over rounds of
        :data:`REFERENCE_BLOCKS` blocks (each after one warm-up call), as :func:`fastest_of_rounds`
        takes them against ``calibration`` (seconds per call, the fastest the measurer has seen;
        None: one round)."""
        return fastest_of_rounds(lambda: self.kernel.time(*self.arrays, number=REFERENCE_CALLS,
                                                          repeat=REFERENCE_BLOCKS, min_repeat_ms=0),
                                 calibration, self.kernel.num_threads)


def fastest_of_rounds(time_round: Callable[[], Sequence[float]], calibration: float | None,
                      threads: int) -> float:
    """The fastest of the blocks (seconds per call each) that ``time_round()`` returns, called
    once, then again while the fastest so far is more than :data:`REFERENCE_NEAR` over
    ``calibration``, :data:`REFERENCE_ROUNDS` times at most; once only without a calibration or
    on one thread (``threads``, the kernel's).

    More rounds look for a block in which every thread ran, the one sharing its CPU included. On
    one thread no other takes a waiting thread's work: a slice it waits out slows every block
    alike and is stolen time's to count (AMD Zen 3, one CPU under four busy loops: with rounds, a
    validated winner's first measurement ranked above its re-measures in 1 run of 7)."""
    fastest = min(time_round())
    for _ in range(REFERENCE_ROUNDS - 1):
        if calibration is None or threads <= 1 or fastest <= calibration * (1.0 + REFERENCE_NEAR):
            break
        fastest = min(fastest, min(time_round()))
    return float(fastest)


def reference_slowdown(samples: Sequence[float], calibration: float | None) -> float:
    """How much slower than ``calibration`` (seconds per call, the fastest seen) the reference
    ran: the mean of ``samples`` (seconds per call, e.g. before and after) over the calibration,
    minus 1, at least 0; 0.0 without samples or calibration."""
    if not samples or not calibration:
        return 0.0
    return max(0.0, statistics.fmean(samples) / calibration - 1.0)


def unsteady(samples: Sequence[float], calibration: float | None) -> bool:
    """Whether the reference's speed changed during the window: its fastest and slowest
    ``samples`` (seconds per call, before and after the repeats) differ by more than
    :data:`UNSTEADY` of ``calibration``. Then the mean that :func:`reference_slowdown` takes is
    no measure of the repeats between them: a burst that covered one side only reads half its
    slowdown whether or not it reached the repeats (AMD Zen 4: 0.50 on trials timed at their
    quiet speed, 2 of 15 in one run; own throughput credited them 1.5x). False without two
    samples or a calibration."""
    if len(samples) < 2 or not calibration:
        return False
    return (max(samples) - min(samples)) / calibration > UNSTEADY


def disturbance(stolen: float, slowdown: float) -> float:
    """``(1 + stolen) * (1 + slowdown) - 1``: the combined slowdown, as a fraction (>= 0)."""
    return max(0.0, (1.0 + stolen) * (1.0 + slowdown) - 1.0)


def excess_disturbance(disturbance: float, baseline: float) -> float:
    """How much more a measurement was disturbed than the host's present load: ``(1 +
    disturbance) / (1 + baseline) - 1``, at least 0 (both fractions as :func:`disturbance`
    gives them). E.g. 1.0 under a baseline of 1.0 (one of the CPUs shared with a
    busy loop, all along) is 0: the trial ran as its neighbours did; 3.0 under it is 1.0: its
    CPUs did half the work per second its neighbours' did."""
    return max(0.0, (1.0 + disturbance) / (1.0 + baseline) - 1.0)
