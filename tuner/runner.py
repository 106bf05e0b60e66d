"""Measuring candidates on this machine: builders ahead of a runner of isolated child processes.

:class:`LocalMeasurer` (and the one-shot :func:`measure_batch`) turn measure
inputs into measure results, with no server involved, so ``tunefleet tune``
and the worker daemon share it:

* a :class:`~.builder.Builder` pool compiles every candidate of a batch at
  once, ahead of the runner (pipelined: candidate i is measured while later
  ones build);
* the runner measures candidates one at a time, each in a fresh child process
  (:mod:`.measure_child`) pinned to ``cpus`` with ``TUNEFLEET_NUM_THREADS =
  len(cpus)``: correctness check on fresh random inputs, then the runtime's
  timer with the protocol's number / repeat / min_repeat_ms / cooldown_ms /
  flush_cache (the two millisecond values are rounded to whole milliseconds,
  as the C timer takes ints);
* ``protocol.timeout_s`` bounds the candidate's execution (check + timing),
  counted from when the child has loaded the library, not from when the
  candidate was queued or built; waiting for the CPUs (below) does not count;
* each measurement reports its disturbance (:mod:`.interference`: stolen time and the
  reference kernel's speed against this measurer's calibration, the fastest it has seen; the
  measurer builds the reference once, with its builders, for this host's ISA). What counts is
  its *excess* over the host's present load (:func:`.interference.excess_disturbance`): the
  baseline is the median first-attempt disturbance of the latest 8 trials (0 until 3 were
  measured), so a load that lasts (one core kept busy, a neighbour's long job) is the level
  every trial shares and compares alike under, and only a trial measured in a burst above it
  is suspect. A measurement whose excess is above ``protocol.max_disturbance``, or whose
  reference kernel ran at different speeds before and after the repeats
  (:func:`.interference.unsteady`: the probe cannot tell whether a burst reached the repeats),
  is taken again in a fresh child, up to ``protocol.remeasure`` times; a steady one is kept
  over an unsteady one, then the least disturbed, marked ``disturbed`` if its excess is still
  above. (An absolute threshold counted almost every trial disturbed on a host whose load
  lasted, so the cost model learned nothing and the search turned random.) Each probe costs
  about 3 ms per trial on 2 quiet AMD Zen 4 CPUs, 5.6 ms with one busy (the reference kernel,
  before and after the repeats, on all measuring CPUs at once);
* ``protocol.rounds`` > 1 measures the batch in interleaved rounds
  (:func:`.validation.interleaved`), all builds done first.

When the builders' CPUs overlap the runner's (always, on a machine whose
CPUs all measure), a :class:`~.processes.CpuGate` keeps builds from running
while a candidate is timed: builds overlap the child's start-up and
correctness check only, never the timed repeats.

Statuses: ``compile_error`` (from the builder), ``wrong_answer`` (error text
gives the error and the tolerance), ``runtime_error`` (the kernel returned
nonzero, an exception in the child, the child exited or died by a signal:
the text names the signal, e.g. SIGSEGV, and ends with the child's output),
``timeout``. A failed candidate costs its own trial only.

:class:`LocalRunner` is the tuning loop's :class:`~.interfaces.Runner` over a LocalMeasurer
(or its GPU variant): a batch of its builders' size at a time, measured in the loop's thread.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import logging
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import Future
from multiprocessing.connection import Connection
from pathlib import Path

from tunefleet.compiler import sandbox

from . import interference, plugins, processes, validation
from .builder import Builder, BuildResult
from .interfaces import Candidate, Runner, RunnerFuture, RunnerResult
from .measure import MeasureInput, MeasureProtocol, MeasureResult
from .measure_child import child_main

log = logging.getLogger(__name__)

__all__ = ["STARTUP_TIMEOUT_S", "LocalMeasurer", "LocalRunner", "measure_batch"]

#: Seconds a child may take to start and load its library before it counts as a runtime error.
STARTUP_TIMEOUT_S = 60.0
#: Latest trials whose first attempts' median disturbance is the host's present load (the baseline).
_RECENT = 8
#: First attempts needed before their median counts as the baseline (until then it is 0: quiet).
_MIN_RECENT = 3
#: Characters of the child's output kept in an error text.
_LOG_TAIL = 2000
#: Address space of a sandboxed measurement child, bytes: ``$TUNEFLEET_SANDBOX_MEMORY``, default
#: 16 GiB: Python, numpy and its BLAS reserve about 1 GiB; the rest holds the operands, their
#: reference and the outputs several times over for the largest workloads we tune, and an
#: allocation beyond it fails in the candidate instead of swapping out the worker's host.
CHILD_ADDRESS_SPACE = int(os.environ.get("TUNEFLEET_SANDBOX_MEMORY", 16 << 30))


class _Popen(subprocess.Popen):
    """A sandboxed child with multiprocessing.Process's names (is_alive, join, exitcode)."""

    def is_alive(self) -> bool:
        return self.poll() is None

    def join(self, timeout: float | None = None) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.wait(timeout)

    @property
    def exitcode(self) -> int | None:
        """The child's exit status, or minus the signal that ended it: bwrap exits with 128 + N
        when its command died by signal N, as a shell does."""
        code = self.returncode
        return -(code - 128) if code is not None and 128 < code < 128 + 65 else code


class _Timeout(Exception):
    pass


class LocalMeasurer:
    """Builds and measures candidates on this machine.

    ``cpus``: the CPUs candidates run (and are timed) on, default the whole
    affinity mask. ``build_cpus``: the builders' CPUs, default the affinity
    mask minus ``cpus``, or all of it when that leaves none.
    ``n_parallel``: builder processes, default ``len(build_cpus)``.
    ``plugin_modules``: operator plugins to import in builders and children
    (default ``$TUNEFLEET_OPS_PLUGINS``). ``host``: stored in every result
    (default the host name). Use as a context manager, or call :meth:`close`.
    """

    #: The function each candidate's child process runs (GPU measurement: tuner.gpu_runner.GpuMeasurer).
    child_target = staticmethod(child_main)
    #: RLIMIT_AS of a sandboxed child (None: unlimited; a CUDA process needs that).
    address_space: int | None = CHILD_ADDRESS_SPACE
    #: Whether children time the interference probe's reference kernel (a CPU kernel).
    times_reference: bool = True

    def __init__(self, *, cpus: Sequence[int] | None = None, build_cpus: Sequence[int] | None = None,
                 n_parallel: int | None = None, plugin_modules: tuple[str, ...] | None = None,
                 host: str | None = None):
        mask = sorted(os.sched_getaffinity(0))
        self.cpus = sorted(set(cpus)) if cpus else mask
        if not set(self.cpus) <= set(mask):
            raise ValueError(f"cpus {self.cpus} are not all in this process's affinity mask {mask}")
        if build_cpus:
            build = sorted(set(build_cpus))
        else:
            build = [c for c in mask if c not in self.cpus] or mask
        self.plugin_modules = plugins.plugin_modules() if plugin_modules is None else tuple(plugin_modules)
        self.host = host or socket.gethostname()
        self._ctx = processes.context()
        self.gate = processes.CpuGate(self._ctx) if set(build) & set(self.cpus) else None
        self.builder = Builder(n_parallel, build, self.gate, self.plugin_modules)
        self._logs = tempfile.TemporaryDirectory(prefix="tunefleet-measure-")
        # The reference kernel: its build's future until the first attempt, then its job entry or None.
        self._reference: Future | dict | None = (self.builder.submit(interference.reference_input())
                                                 if self.times_reference else None)
        #: The reference kernel's fastest seconds per call so far (the calibration), None before the first.
        self.calibration: float | None = None
        # First attempts' disturbances of the latest trials: their median is the baseline.
        self._recent: collections.deque[float] = collections.deque(maxlen=_RECENT)

    @property
    def n_parallel(self) -> int:
        """Builder processes: the natural batch size for a tuning loop."""
        return self.builder.n_parallel

    def measure_batch(self, inputs: Sequence[MeasureInput], protocol: MeasureProtocol) -> list[MeasureResult]:
        """One result per input, in order. All builds are submitted at once; candidates run one at a time.

        KeyboardInterrupt stops at once: the running child is killed, queued
        builds are cancelled, and the exception propagates.
        """
        futures = [self.builder.submit(inp) for inp in inputs]
        built: dict[int, BuildResult] = {}

        def run(i: int, one: MeasureProtocol) -> MeasureResult:
            if i not in built:
                built[i] = self.builder.result(futures[i])
            return self._run(inputs[i], built[i], one)

        try:
            if protocol.rounds > 1:
                for i in range(len(inputs)):  # all builds first: none runs between the rounds
                    built[i] = self.builder.result(futures[i])
            return validation.interleaved(run, len(inputs), protocol)
        except BaseException:
            for f in futures:
                f.cancel()
            raise

    def _result(self, status: str, built: BuildResult, *, costs=(), run_s: float = 0.0,
                error: str = "", disturbance: float = 0.0) -> MeasureResult:
        return MeasureResult(status, list(costs), built.build_s, run_s, error, self.host, disturbance=disturbance)

    @property
    def baseline(self) -> float:
        """The host's present load, as a disturbance: the median first-attempt disturbance of the
        latest trials, 0.0 until :data:`_MIN_RECENT` were measured."""
        return statistics.median(self._recent) if len(self._recent) >= _MIN_RECENT else 0.0

    def _run(self, inp: MeasureInput, built: BuildResult, protocol: MeasureProtocol) -> MeasureResult:
        """Measure; again while disturbed beyond the baseline (see the module docstring).
        ``run_s`` counts every attempt."""
        if built.status != "ok":
            return self._result(built.status, built, error=built.error)
        kept: tuple[tuple[bool, float], MeasureResult] | None = None  # steady ones first, then the least disturbed
        run_s = 0.0
        baseline = self.baseline
        for attempt in range(1 + protocol.remeasure):
            result, steady = self._attempt(inp, built, protocol)
            run_s += result.run_s
            if attempt == 0 and result.ok:
                self._recent.append(result.disturbance)
            excess = interference.excess_disturbance(result.disturbance, baseline)
            if not result.ok or (steady and excess <= protocol.max_disturbance):
                return dataclasses.replace(result, run_s=run_s)
            if kept is None or (not steady, result.disturbance) < kept[0]:
                kept = (not steady, result.disturbance), result
        result = kept[1]
        excess = interference.excess_disturbance(result.disturbance, baseline)
        return dataclasses.replace(result, run_s=run_s, disturbed=excess > protocol.max_disturbance)

    def _disturbance(self, probe: dict | None) -> tuple[float, bool]:
        """The probe's disturbance against the calibration, which it updates first, and whether
        the reference was steady (:func:`.interference.unsteady`)."""
        if not probe:
            return 0.0, True
        samples = probe["reference"]
        self.calibration = min([*samples, *([self.calibration] if self.calibration else [])], default=None)
        slowdown = interference.reference_slowdown(samples, self.calibration)
        # One line per probe, its readings as data: bench/tune_under_load.py prints their spread,
        # to calibrate interference.UNSTEADY and validation.DISTURBANCE_NOISE on a host's ISA.
        if log.isEnabledFor(logging.DEBUG):
            log.debug("interference probe: reference %s s per call, calibration %.3g s, stolen %.3f",
                      " / ".join(f"{s:.3g}" for s in samples) or "-", self.calibration or 0.0, probe["stolen"],
                      extra={"probe": {"reference": list(samples), "calibration": self.calibration,
                                       "stolen": probe["stolen"]}})
        return (interference.disturbance(probe["stolen"], slowdown),
                not interference.unsteady(samples, self.calibration))

    def _reference_job(self) -> dict | None:
        """The reference kernel's entry of a child's job (so_path, name, args), once built; None
        when this measurer times none, or its build failed (logged: the probe then reads stolen
        time only)."""
        if isinstance(self._reference, Future):
            built = self.builder.result(self._reference)
            if built.status != "ok":
                log.warning("the interference probe's reference kernel did not build: %s", built.error)
            self._reference = ({"so_path": built.so_path, "name": built.name, "args": list(built.args)}
                               if built.status == "ok" else None)
        return self._reference

    def _attempt(self, inp: MeasureInput, built: BuildResult, protocol: MeasureProtocol
                 ) -> tuple[MeasureResult, bool]:
        """One measurement in a fresh child, and whether its reference was steady."""
        box = sandbox.current()
        with box.scratch() if box else self._log_folder() as folder:
            log = folder / "child.log"
            job = {"state": processes.parent_state(), "cpus": self.cpus, "log": str(log),
                   "plugins": list(self.plugin_modules), "workload": inp.workload, "name": built.name,
                   "so_path": built.so_path, "args": list(built.args), "protocol": protocol.to_json(),
                   "reference": self._reference_job(), "calibration": self.calibration}
            start = time.perf_counter()
            parent, proc = self._sandboxed(box, folder, job, protocol) if box else self._forked(job)
            probe = None
            try:
                status, costs, error, probe = self._converse(parent, protocol.timeout_s)
            except _Timeout as exc:
                status, costs, error = "timeout", [], str(exc)
            except (EOFError, BrokenPipeError, ConnectionResetError):  # the child died: exit status or signal
                proc.join(5)
                status, costs, error = "runtime_error", [], _death(proc.exitcode)
            finally:
                if proc.is_alive():
                    proc.kill()
                proc.join()
                parent.close()
            run_s = time.perf_counter() - start
            if status == "runtime_error":
                error = f"{error}\n{_tail(log)}\n{_tail(folder.parent / 'sandbox.log') if box else ''}".rstrip()
        disturbance, steady = self._disturbance(probe) if status == "ok" else (0.0, True)
        return self._result(status, built, costs=costs, run_s=run_s, error=error, disturbance=disturbance), steady

    @contextlib.contextmanager
    def _log_folder(self):
        log = Path(self._logs.name) / "child.log"
        log.unlink(missing_ok=True)
        yield log.parent

    def _forked(self, job: dict):
        """The child as a process forked from the fork server: (its pipe end, the process)."""
        parent, child = self._ctx.Pipe(duplex=True)
        proc = self._ctx.Process(target=self.child_target, args=(child, job), daemon=True)
        proc.start()
        child.close()
        return parent, proc

    def _sandboxed(self, box: sandbox.Sandbox, scratch: Path, job: dict, protocol: MeasureProtocol):
        """The child as a fresh Python in the sandbox, in `scratch`, with the library's folder
        read-only, the sandbox's environment (no secret of this process: the job's state is
        replaced) and :meth:`limits`: (its pipe end, the process)."""
        env = box.environment(scratch, {"TUNEFLEET_NUM_THREADS": str(len(self.cpus)), "OPENBLAS_NUM_THREADS": "1"})
        job = {**job, "state": {"env": env, "sys_path": list(sys.path), "owner": None}}  # bwrap is its parent
        parent, child = socket.socketpair()
        target = f"{self.child_target.__module__}:{self.child_target.__name__}"
        argv = [sys.executable, "-I", "-c", f"from tunefleet.tuner.measure_child import sandboxed_main; "
                                            f"sandboxed_main({child.fileno()}, {target!r})"]
        command = box.command(argv, scratch=scratch, limits=self.limits(protocol), env=env,
                              read_only=_library_folders(job), devices=self.sandbox_devices())
        with open(scratch.parent / "sandbox.log", "wb") as out:  # bwrap's and Python's start-up errors
            proc = _Popen(command, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        child.close()
        conn = Connection(parent.detach())
        conn.send(job)
        return conn, proc

    def limits(self, protocol: MeasureProtocol) -> sandbox.Limits:
        """The sandboxed child's limits: CPU seconds for its start-up and ``protocol.timeout_s``
        of execution on every measuring CPU, plus 10 (the wall-clock timeout ends it first
        unless it burns CPU time on more threads than it may); ``address_space`` (default
        CHILD_ADDRESS_SPACE); 64 MiB per file (it writes its log only); the sandbox's processes."""
        cpu_s = math.ceil((STARTUP_TIMEOUT_S + protocol.timeout_s) * len(self.cpus)) + 10
        return sandbox.Limits(cpu_s=cpu_s, address_space=self.address_space, file_size=64 << 20,
                              processes=sandbox.default_processes())

    def sandbox_devices(self) -> list[str]:
        """Device files the sandboxed child needs: none on a CPU (GpuMeasurer: the GPU's)."""
        return []

    def _converse(self, conn, timeout_s: float) -> tuple[str, list[float], str, dict | None]:
        """Follow the child's messages to its result: (status, costs, error, interference probe or
        None); raises _Timeout, or EOFError / BrokenPipeError if it died."""
        msg, _ = _receive(conn, STARTUP_TIMEOUT_S, f"the child did not load the candidate within "
                                                   f"{STARTUP_TIMEOUT_S:g} s")
        if msg[0] == "started":
            limit = f"exceeded timeout_s={timeout_s:g} s of execution"
            msg, left = _receive(conn, timeout_s, f"{limit} (during the correctness check)")
            if msg[0] == "ready":
                with self.gate.timing() if self.gate else contextlib.nullcontext():
                    conn.send("go")
                    msg, _ = _receive(conn, left, f"{limit} (during the timing)")
        return msg[1], msg[2], msg[3], (msg[4] if len(msg) > 4 else None)

    def close(self) -> None:
        """Stop the builders (running builds finish) and remove the child logs."""
        self.builder.close()
        self._logs.cleanup()

    def __enter__(self) -> LocalMeasurer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _receive(conn, seconds: float, timeout_text: str) -> tuple[tuple, float]:
    """The next message and the seconds left of ``seconds``; raises _Timeout(timeout_text), EOFError."""
    t0 = time.perf_counter()
    if not conn.poll(max(0.0, seconds)):
        raise _Timeout(timeout_text)
    return conn.recv(), seconds - (time.perf_counter() - t0)


def _library_folders(job: dict) -> list[Path]:
    """The folders of the job's libraries (the candidate's, the reference kernel's), each once:
    a sandboxed child reads them."""
    paths = [job["so_path"], *([job["reference"]["so_path"]] if job.get("reference") else [])]
    return list(dict.fromkeys(Path(p).parent for p in paths))


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        sig = signal.Signals(-exitcode)
        return f"the candidate's process died by signal {sig.name} ({signal.strsignal(sig)})"
    return f"the candidate's process exited with status {exitcode} before reporting a result"


def _tail(log: Path) -> str:
    try:
        text = log.read_text(errors="replace").strip()
    except OSError:
        return ""
    return f"output of the candidate's process:\n{text[-_LOG_TAIL:]}" if text else ""


class LocalRunner(Runner):
    """Measures candidates of ``workload`` (JSON) for ``target`` on this machine with
    ``measurer``, ``batch_size`` at a time (default: its builders, so that each batch builds in
    parallel and runs back to back). :meth:`poll` measures whatever was submitted, in the
    caller's thread, so that nothing else of this process runs while a candidate is timed;
    KeyboardInterrupt stops it at once (LocalMeasurer.measure_batch)."""

    def __init__(self, measurer: LocalMeasurer, workload: dict, target: str, batch_size: int | None = None) -> None:
        self.measurer = measurer
        self.workload = workload
        self.target = target
        self.batch_size = batch_size or measurer.n_parallel
        self._submitted: list[tuple[list[RunnerFuture], MeasureProtocol]] = []

    def capacity(self) -> int:
        return self.batch_size

    def submit(self, candidates: Sequence[Candidate], protocol: MeasureProtocol) -> list[RunnerFuture]:
        futures = [RunnerFuture(c) for c in candidates]
        self._submitted.append((futures, protocol))
        return list(futures)

    def poll(self, futures: Sequence[RunnerFuture]) -> None:
        while self._submitted:
            batch, protocol = self._submitted.pop(0)
            inputs = [MeasureInput(self.workload, self.target, f.candidate.config.to_json()) for f in batch]
            for future, result in zip(batch, self.measurer.measure_batch(inputs, protocol)):
                future.measured = RunnerResult(result)

    def wait(self, futures: Sequence[RunnerFuture], *, proposals_due: bool) -> None:
        """Nothing to wait for: :meth:`poll` measured everything submitted."""


def measure_batch(inputs: Sequence[MeasureInput], protocol: MeasureProtocol | None = None,
                  cpus: Sequence[int] | None = None, **options) -> list[MeasureResult]:
    """Measure ``inputs`` with a :class:`LocalMeasurer` made for this call (``options`` are its
    keyword arguments). For repeated batches keep one LocalMeasurer: its builders stay up."""
    with LocalMeasurer(cpus=cpus, **options) as measurer:
        return measurer.measure_batch(inputs, protocol or MeasureProtocol())

