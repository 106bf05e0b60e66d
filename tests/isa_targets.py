"""The CPU targets of this host's ISA family, for tests that build a code path per ISA.

On every host the suite builds each of them with gcc (a target override: the ISA is named,
not taken from the host) and checks against numpy those this host executes; code for a
better ISA than the host's is compiled only (running it would SIGILL). An AVX-512 host
checks avx512, avx2 and generic; an AVX2 host checks avx2 and generic and compiles avx512;
an Arm host checks neon and generic.
"""

from __future__ import annotations

import pytest

from tunefleet.compiler.target import CPU_ISAS, Target

HOST = Target.host()
#: this host's best target, the better ones of its family and the lesser ones it executes
FAMILY = [t for t in (Target("cpu", isa) for isa in CPU_ISAS) if t.runs_on(HOST) or HOST.runs_on(t)]
#: FAMILY less the host's own target (which the rest of the suite builds and checks)
OTHERS = [t for t in FAMILY if t != HOST]


def runs_here(target: Target) -> bool:
    """Whether this host executes code built for `target`."""
    return target.runs_on(HOST)


def params(targets: list[Target]) -> list:
    """pytest parameters of `targets`, with ids like 'avx2' and 'avx512-compile-only'."""
    return [pytest.param(t, id=t.isa if runs_here(t) else f"{t.isa}-compile-only") for t in targets]
