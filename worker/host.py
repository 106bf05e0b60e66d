"""What a worker tells the server about its host: CPU model, ISA, cores, affinity, toolchain.

`cpu_isa` is the best CPU ISA the host executes (``Target.host()``: avx512, avx2, neon or
generic); the hosts of one device key must agree on it (the server refuses a host that
does not), and a task's default target is the best its hosts execute. `isa` lists the raw
/proc/cpuinfo flags behind it.

The default device key comes from :func:`tunefleet.tuner.host.device_key`, so a worker and
``tunefleet tune`` on the same kind of host measuring on as many CPUs name the same pool;
its default name from :func:`tunefleet.tuner.host.worker_name`.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tunefleet.compiler.target import Target

__all__ = ["ISA_FLAGS", "cpu_model_name", "isa", "host_facts"]

#: /proc/cpuinfo flags that change which code is fastest (reported in this order).
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni",
             "avx512_bf16", "amx_tile", "amx_bf16", "neon", "asimd", "sve")


def _cpuinfo() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""


def cpu_model_name(cpuinfo: str | None = None) -> str | None:
    """The first "model name" of /proc/cpuinfo, as written there."""
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return value.strip()
    return None


def isa(cpuinfo: str | None = None) -> list[str]:
    """The :data:`ISA_FLAGS` this CPU has ("flags" on x86, "Features" on Arm)."""
    for line in (_cpuinfo() if cpuinfo is None else cpuinfo).splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            have = set(value.split())
            return [f for f in ISA_FLAGS if f in have]
    return []


def host_facts(cpus: Sequence[int]) -> dict[str, Any]:
    """The host facts a worker measuring on `cpus` registers with (see the server's
    ``HostFacts``): kind "cpu", host name, CPU model, its best ISA (`cpu_isa`) and raw ISA
    flags (`isa`), cores, affinity, toolchain."""
    from tunefleet.compiler.build import toolchain_versions

    tools = toolchain_versions()
    return {
        "kind": "cpu",
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model_name(),
        "cpu_isa": Target.host().isa,
        "isa": isa(),
        "cores": os.cpu_count(),
        "affinity": sorted(cpus),
        "toolchain": {"cc": " ".join(tools["cc"]), "cc_version": tools["cc_version"] or "unknown"},
    }
