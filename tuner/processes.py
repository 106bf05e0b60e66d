"""Process plumbing shared by the builders and the runner.

Builder and measurement processes are forked from multiprocessing's fork
server, which imports numpy and the compiler once (:data:`PRELOAD`), so a fresh
process per candidate costs milliseconds instead of a Python start-up. Each new
process then takes the environment and ``sys.path`` its parent has *now*
(:func:`adopt`), as a spawned process would, not the fork server's from when it
started, and dies with the fork server (:func:`~.lifeline.die_with_parent`), which itself
ends when the process that uses it ends: no builder or measurement process outlives its
worker, however the worker dies.

:class:`CpuGate` keeps builds off the CPUs a candidate is being timed on.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import sys
from collections.abc import Iterator
from multiprocessing import spawn

from . import lifeline, plugins

__all__ = ["PRELOAD", "MAIN_ENV_VAR", "context", "parent_state", "adopt", "init_worker", "StartError",
           "check_start", "CpuGate"]

#: Modules the fork server imports once for all the processes it forks; the first ties the fork
#: server's life to its owner's, the second gives the BLAS numpy loads one thread, the third runs
#: the parent's main module there instead of in every child (multiprocessing's rule holds: a main
#: script must guard its work with ``if __name__ == "__main__":``).
PRELOAD = ["tunefleet.tuner.forkserver_lifeline", "tunefleet.tuner.forkserver_blas", "tunefleet.tuner.forkserver_main",
           "numpy", "tunefleet.compiler.ops",
           "tunefleet.compiler.driver", "tunefleet.base.load", "tunefleet.tuner.builder",
           "tunefleet.tuner.measure_child"]
#: How the fork server learns the parent's main module (:mod:`.forkserver_main`): JSON of the
#: main-module and ``sys_argv`` entries of ``multiprocessing.spawn.get_preparation_data``.
MAIN_ENV_VAR = "TUNEFLEET_FORKSERVER_MAIN"
_MAIN_KEYS = ("init_main_from_name", "init_main_from_path", "sys_argv")
#: Longest value of MAIN_ENV_VAR: Linux refuses to start a program with an environment string
#: over 128 KiB, and the fork server is such a program (a longer sys.argv leaves each child to
#: run the main module itself, as it did before).
_MAIN_ENV_MAX = 64 << 10


def context() -> multiprocessing.context.BaseContext:
    """The forkserver multiprocessing context, with :data:`PRELOAD` and this process's main module
    (:data:`MAIN_ENV_VAR`), which apply when the server starts."""
    data = spawn.get_preparation_data("forkserver")
    main = json.dumps({k: data[k] for k in _MAIN_KEYS if k in data})
    if ("init_main_from_name" in data or "init_main_from_path" in data) and len(main) <= _MAIN_ENV_MAX:
        os.environ[MAIN_ENV_VAR] = main
    else:  # e.g. `python -c`: none, nor one inherited from the process that started this one
        os.environ.pop(MAIN_ENV_VAR, None)
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def parent_state() -> dict:
    """What :func:`adopt` gives a new process: this process's environment (less any ``*TOKEN*``
    variable: builders and candidates need no credentials), ``sys.path`` and pid."""
    env = {k: v for k, v in os.environ.items() if "TOKEN" not in k}
    return {"env": env, "sys_path": list(sys.path), "owner": os.getpid()}


def adopt(state: dict, cpus: list[int] | None) -> None:
    """In a freshly forked process: take the parent's environment and ``sys.path`` (``state``,
    from :func:`parent_state`), pin to ``cpus`` (if given), and ignore SIGINT, so that a Ctrl-C
    reaches only the parent, which then stops its children. The process is killed when the
    fork server ends (it ends when the process that owns it ends), or at once if that owner
    is already gone."""
    lifeline.die_with_parent(signal.SIGKILL, alive=state["owner"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ.clear()
    os.environ.update(state["env"])
    sys.path[:] = state["sys_path"]
    if cpus is not None:
        os.sched_setaffinity(0, cpus)


def init_worker(state: dict, cpus: list[int] | None, plugin_modules: tuple[str, ...]) -> None:
    """Initializer of a pool process: :func:`adopt` the parent's state, then import the operator plugins."""
    adopt(state, cpus)
    plugins.load_plugins(plugin_modules)


class StartError(RuntimeError):
    """A process started from this program dies before it runs anything: its main script does
    work when imported (see :func:`check_start`)."""


def _nothing() -> None:
    pass


def check_start(ctx: multiprocessing.context.BaseContext, timeout_s: float = 60.0) -> None:
    """Raise :class:`StartError` when a process started from ``ctx`` fails to run a no-op.

    Each process multiprocessing starts imports the parent's main script again; one that starts
    its work at import (tuning without ``if __name__ == "__main__":``) makes every such process
    die before it runs its task. Called when a pool breaks, to tell that case, which no retry
    mends, from a process that died of its task. A probe that does not finish in ``timeout_s``
    seconds is killed and counts as started.
    """
    probe = ctx.Process(target=_nothing, daemon=True)
    probe.start()
    probe.join(timeout_s)
    if probe.exitcode is None:
        probe.kill()
        probe.join()
        return
    if probe.exitcode != 0:
        main = getattr(sys.modules.get("__main__"), "__file__", None) or "the main module"
        raise StartError(f"processes started from {main} die before they run anything (exit code "
                         f"{probe.exitcode}; their own error is on stderr): a script that tunes must start "
                         'its work under `if __name__ == "__main__":`, because every process that '
                         "multiprocessing starts imports the main script again")


class CpuGate:
    """Keeps builds and timing apart when builders and the runner share CPUs.

    Builders hold :meth:`building` around a build; the runner holds
    :meth:`timing` around the timed part of a candidate. A build does not
    start while a candidate is timed, and timing waits for the builds in flight
    (at most ``max_wait_s``, so a builder that died holding the gate cannot
    block the runner forever). Created in the parent and passed to the builder
    processes when they start.
    """

    def __init__(self, ctx: multiprocessing.context.BaseContext, max_wait_s: float = 180.0):
        self._cond = ctx.Condition()
        self._timing = ctx.RawValue("i", 0)
        self._building = ctx.RawValue("i", 0)
        self.max_wait_s = max_wait_s

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._timing.value)
            self._building.value += 1
        try:
            yield
        finally:
            with self._cond:
                self._building.value -= 1
                self._cond.notify_all()

    def forget_builds(self) -> None:
        """Count no build in flight: call once the builder processes are gone. A builder that died
        mid-build (its pool then breaks) never ends its build, and timing would wait ``max_wait_s``
        for it before every candidate after."""
        with self._cond:
            self._building.value = 0
            self._cond.notify_all()

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        with self._cond:
            self._timing.value = 1
            self._cond.wait_for(lambda: self._building.value <= 0, timeout=self.max_wait_s)
        try:
            yield
        finally:
            with self._cond:
                self._timing.value = 0
                self._cond.notify_all()
