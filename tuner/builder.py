"""Builders: compile candidates into shared libraries in a pool of processes.

A :class:`Builder` keeps ``n_parallel`` processes forked from the fork server
(see :mod:`.processes`), pinned to ``cpus``, each with the operator plugins
imported. :meth:`Builder.submit` returns a future, so builds run ahead of the
runner. Builds go through ``compile_shared``, which caches libraries by the
hash of their source and is safe with concurrent builders.

Any failure to produce a library is a ``compile_error``: a ScheduleError or
a ConfigError (the config does not fit the template), a BuildError (gcc
rejected the source or timed out; a TimeLimitError when lowering and code
generation ran past the builder's ``lowering_limit_s``), and also an unexpected exception in the
compiler (then the error text holds the traceback, to report as a bug), and a
builder process that died (the pool is replaced; builds in flight in it fail).

Where no process started from here can even run (a main script that tunes
when imported), :class:`~.processes.StartError` stops the run at its first
build instead of failing every candidate the same way.

The lowering limit is a signal, handled between Python bytecodes: a build stuck in one call into
C is not interrupted by it. :meth:`Builder.result` is the backstop: a build that has run
``hard_limit_s`` while the caller waited for it is taken as hung, the pool's processes are
killed, and the other builds that were in flight are submitted again to the new pool.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import traceback
import weakref
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from tunefleet.compiler.build import COMPILE_TIMEOUT_S, BuildError
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.schedule import ScheduleError
from tunefleet.compiler.space import ConfigError
from tunefleet.compiler.time_limit import LOWERING_TIMEOUT_S, time_limit

from . import plugins, processes
from .measure import MeasureInput
from .resolve import resolve

__all__ = ["BuildResult", "build_candidate", "Builder", "hung_build_limit_s"]

log = logging.getLogger(__name__)

#: Expected ways for a config to fail to build; anything else also fails it, with a traceback.
_EXPECTED = (ScheduleError, BuildError, ConfigError)


@dataclasses.dataclass(frozen=True)
class BuildResult:
    """A built candidate: ``status`` "ok" or "compile_error"; the kernel's ``name``, the library's
    ``so_path`` and its ``args`` (``ArgSpec.to_dict()`` each, call order) when ok; ``build_s``
    wall seconds; ``error`` text when it failed."""

    status: str
    name: str = ""
    so_path: str = ""
    args: tuple[dict, ...] = ()
    build_s: float = 0.0
    error: str = ""


def build_candidate(inp: MeasureInput, lowering_limit_s: float | None = None) -> BuildResult:
    """Build one candidate in this process (no pool). Never raises for a bad candidate.

    ``lowering_limit_s``: wall seconds for the template's define run (its space is cached per
    process), and again for lowering and code generation, enforced only in a main thread (see
    ``compiler.time_limit``); gcc and nvcc have their own limit."""
    start = time.perf_counter()
    try:
        with time_limit(lowering_limit_s, "defining the config space"):  # runs the template
            workload, target, config = resolve(inp.workload, inp.target, inp.config)
        built = build_workload(workload, config, target, lowering_limit_s)
    except _EXPECTED as exc:
        return BuildResult("compile_error", build_s=time.perf_counter() - start,
                           error=f"{type(exc).__name__}: {exc}")
    except Exception:  # a compiler bug: the candidate still fails, and the traceback says where
        return BuildResult("compile_error", build_s=time.perf_counter() - start,
                           error=f"internal compiler error:\n{traceback.format_exc()}")
    return BuildResult("ok", built.name, str(built.so_path), tuple(a.to_dict() for a in built.args),
                       time.perf_counter() - start)


def hung_build_limit_s(lowering_limit_s: float) -> float:
    """Wall seconds past which a running build is taken as hung: its two Python phases'
    ``lowering_limit_s`` each, two compiler runs' ``COMPILE_TIMEOUT_S`` (the runtime object, once
    per flags, and the unit) and a minute of margin."""
    return 2 * lowering_limit_s + 2 * COMPILE_TIMEOUT_S + 60


_gate: processes.CpuGate | None = None
_lowering_limit_s: float | None = None


def _init_worker(state: dict, cpus: list[int], gate: processes.CpuGate | None,
                 plugin_modules: tuple[str, ...], lowering_limit_s: float | None) -> None:
    global _gate, _lowering_limit_s
    processes.init_worker(state, cpus, plugin_modules)
    _gate, _lowering_limit_s = gate, lowering_limit_s


def _build_in_worker(inp: MeasureInput) -> BuildResult:
    if _gate is None:
        return build_candidate(inp, _lowering_limit_s)
    with _gate.building():
        return build_candidate(inp, _lowering_limit_s)


class Builder:
    """A pool of ``n_parallel`` builder processes pinned to ``cpus`` (default: the affinity mask).

    ``gate``: a :class:`~.processes.CpuGate` shared with the runner when their
    CPUs overlap. ``plugin_modules``: operator plugins each process imports
    (default: ``$TUNEFLEET_OPS_PLUGINS``). ``lowering_limit_s``: wall seconds that lowering and
    code generation of one candidate may take before it fails as a compile error (a compiler
    defect that loops must not hold a builder for good). ``hard_limit_s`` (default
    :func:`hung_build_limit_s` of it): wall seconds a running build may take while :meth:`result` waits
    for it, past which the pool is killed (the backstop for what the lowering limit cannot
    interrupt). If a builder process dies, its candidates come back as compile errors and the
    pool is replaced.
    """

    def __init__(self, n_parallel: int | None = None, cpus: list[int] | None = None,
                 gate: processes.CpuGate | None = None, plugin_modules: tuple[str, ...] | None = None,
                 lowering_limit_s: float = LOWERING_TIMEOUT_S, hard_limit_s: float | None = None):
        self.cpus = sorted(cpus) if cpus else sorted(os.sched_getaffinity(0))
        self.n_parallel = n_parallel or len(self.cpus)
        if self.n_parallel < 1:
            raise ValueError(f"n_parallel must be >= 1, got {self.n_parallel}")
        self.gate = gate
        self.lowering_limit_s = lowering_limit_s
        self.hard_limit_s = hung_build_limit_s(lowering_limit_s) if hard_limit_s is None else hard_limit_s
        self.plugin_modules = plugins.plugin_modules() if plugin_modules is None else tuple(plugin_modules)
        self._pool: ProcessPoolExecutor | None = None
        # The current pool's futures, with their inputs (to submit again if another build hangs).
        self._pool_futures: weakref.WeakKeyDictionary[Future, MeasureInput] = weakref.WeakKeyDictionary()
        # A future whose build was submitted again after a hung build's pool was killed -> the new one.
        self._resubmitted: weakref.WeakKeyDictionary[Future, Future] = weakref.WeakKeyDictionary()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.n_parallel, mp_context=processes.context(), initializer=_init_worker,
                initargs=(processes.parent_state(), self.cpus, self.gate, self.plugin_modules,
                          self.lowering_limit_s))
        return self._pool

    def submit(self, inp: MeasureInput) -> Future:
        """Start building ``inp``; the future's result is a :class:`BuildResult`.

        A pool that broke since its last result is replaced first (raises
        :class:`~.processes.StartError` as :meth:`result` does)."""
        try:
            future = self._executor().submit(_build_in_worker, inp)
        except BrokenProcessPool:
            self._replace_broken_pool()
            future = self._executor().submit(_build_in_worker, inp)
        self._pool_futures[future] = inp
        return future

    def result(self, future: Future) -> BuildResult:
        """The future's BuildResult; a compile_error if its builder process died (the pool is then replaced).

        Raises :class:`~.processes.StartError` instead when no process started from here can run
        at all (a main script that tunes when imported): every candidate would fail the same way.
        A build that runs ``hard_limit_s`` while this waits is a compile_error; its pool is killed
        and the other builds in flight are submitted again (their futures' results are the new ones).
        """
        while future in self._resubmitted:
            future = self._resubmitted[future]
        try:
            return self._wait(future)
        except TimeoutError:
            self._kill_pool_of(future)
            return BuildResult("compile_error", build_s=self.hard_limit_s,
                               error=f"builder process killed: the build ran past the hard limit of "
                                     f"{self.hard_limit_s:g} s (stuck where the lowering limit cannot interrupt it)")
        except Exception as exc:  # BrokenProcessPool, or a result that could not be sent back
            if isinstance(exc, BrokenProcessPool) and future in self._pool_futures:  # not replaced already
                self._replace_broken_pool()
            return BuildResult("compile_error", error=f"builder process failed: {type(exc).__name__}: {exc}")

    def _wait(self, future: Future) -> BuildResult:
        """``future.result()``; TimeoutError once it has been running ``hard_limit_s`` seconds of this
        wait. Time queued behind other builds does not count, nor time before the wait (the runner
        may have held the CpuGate then)."""
        poll_s = min(1.0, self.hard_limit_s / 4)
        running_since = None
        while True:
            try:
                return future.result(timeout=poll_s)
            except TimeoutError:
                if not future.running():
                    continue
                now = time.monotonic()
                running_since = running_since or now
                if now - running_since >= self.hard_limit_s:
                    raise

    def _kill_pool_of(self, hung: Future) -> None:
        in_flight = [(f, inp) for f, inp in self._pool_futures.items() if f is not hung and not f.done()]
        log.error("a build ran past the hard limit of %g s: killing the builder pool and submitting its "
                  "%d other builds again", self.hard_limit_s, len(in_flight))
        if self._pool is not None:
            for proc in list(self._pool._processes.values()):  # no public way before Python 3.14's kill_workers()
                proc.kill()
        self._replace_broken_pool()
        for f, inp in in_flight:
            self._resubmitted[f] = self.submit(inp)

    def _replace_broken_pool(self) -> None:
        self.close()  # quick: the broken pool's processes were killed already
        if self.gate is not None:
            self.gate.forget_builds()
        processes.check_start(processes.context())

    def close(self, wait: bool = True) -> None:
        """Stop the pool; queued builds are cancelled, running ones finish when ``wait``."""
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=True)
            self._pool = None
            self._pool_futures = weakref.WeakKeyDictionary()
