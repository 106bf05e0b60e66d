"""The measuring host: which CPUs a process may use, and the device key of a pool of such hosts.

Shared by ``tunefleet tune`` and the worker daemon, so that records measured by
either carry the same device key for the same kind of host.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Iterable
from pathlib import Path

__all__ = ["affinity", "parse_cpus", "format_cpus", "cpu_model", "device_key", "worker_name"]

_CPU_RANGE = re.compile(r"(\d+)(?:-(\d+))?")
#: Words of a /proc/cpuinfo model name that say nothing about the kind of CPU.
_NOISE = re.compile(r"\((?:r|tm)\)|@.*$|\b(?:cpu|processor|\d+-core)\b", re.I)


def affinity() -> list[int]:
    """The CPUs this process may run on (``sched_getaffinity``), sorted."""
    return sorted(os.sched_getaffinity(0))


def parse_cpus(text: str) -> list[int]:
    """A CPU list in taskset's syntax ("0-3,6") as sorted, distinct ints.

    Raises ValueError naming the bad part, or listing the allowed CPUs when one
    is outside this process's affinity mask.
    """
    cpus: set[int] = set()
    for part in text.split(","):
        m = _CPU_RANGE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"cpus: {part.strip()!r} is not a CPU number or range like 0-3 (in {text!r})")
        lo, hi = int(m[1]), int(m[2] or m[1])
        if hi < lo:
            raise ValueError(f"cpus: range {part.strip()!r} is empty")
        cpus.update(range(lo, hi + 1))
    allowed = set(affinity())
    if not cpus <= allowed:
        raise ValueError(f"cpus: {format_cpus(sorted(cpus - allowed))} not in this process's affinity mask "
                         f"{format_cpus(sorted(allowed))}")
    return sorted(cpus)


def format_cpus(cpus: Iterable[int]) -> str:
    """Inverse of :func:`parse_cpus`: [0, 1, 2, 5] -> "0-2,5"."""
    out: list[str] = []
    run: list[int] = []
    for c in sorted(set(cpus)):
        if run and c != run[-1] + 1:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(c)
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model as a slug, from the first "model name" of /proc/cpuinfo.

    "Intel(R) Xeon(R) Platinum 8375C CPU @ 2.90GHz" -> "intel-xeon-platinum-8375c",
    "AMD EPYC 7B13 64-Core Processor" -> "amd-epyc-7b13". Falls back to the
    machine architecture (``os.uname().machine``) when there is no model name.
    """
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model"):
            slug = re.sub(r"[^a-z0-9]+", "-", _NOISE.sub(" ", value).lower()).strip("-")
            if slug:
                return slug
    return re.sub(r"[^a-z0-9]+", "-", os.uname().machine.lower()).strip("-") or "unknown"


def device_key(cpus: Iterable[int] | None = None) -> str:
    """The default device key of this host measuring on ``cpus`` (default: the affinity mask).

    ``cpu-<model slug>-<n>c``, e.g. "cpu-amd-epyc-2c": hosts of the same CPU
    model measuring on the same number of CPUs form one pool.
    """
    n = len(set(cpus)) if cpus is not None else len(affinity())
    return f"cpu-{cpu_model()}-{n}c"


def worker_name(cpus: Iterable[int]) -> str:
    """``<host name>/cpu<list>``, the name a worker measuring on `cpus` registers under:
    unique per host and CPU set, and stable across restarts (a restarted worker keeps its
    registration). Here, not in the worker, because ``tunefleet up`` looks its worker up by it."""
    return f"{socket.gethostname()}/cpu{format_cpus(cpus)}"
