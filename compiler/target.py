"""Code generation targets: the kind of processor and the instruction set code is generated for.

A target string is a kind followed by one option: ``cpu -isa=<isa>`` or
``cuda -arch=<sm_XY>``. ``str(Target.parse(s))`` is the canonical spelling.

A kind alone (``cpu``, ``cuda``) means *the best target of the hosts that will run the
code*: here, for the compiler and ``tunefleet tune``/``build``/``demo``, this machine
(:meth:`Target.local`); on the service, the hosts of the task's device key.

What a host can execute (:meth:`Target.runs_on`): a CPU whose best ISA is ``avx512``
runs ``avx512``, ``avx2`` and ``generic`` code; ``avx2`` runs ``avx2`` and ``generic``;
``neon`` runs ``neon`` and ``generic``; ``generic`` only ``generic``. A GPU runs code
for exactly its own architecture (``sm_90`` code on an sm_90 device; no cubin is
portable across architectures as we build them).
"""

from __future__ import annotations

import platform
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Bytes per element of the dtypes the compiler knows.
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "int8": 1, "int32": 4}

#: CPU instruction sets: (vector register bytes, vector registers, C compiler flags). Generic
#: code is counted as x86-64's baseline SSE2 (16 xmm registers), the fewest it may run with.
_CPU_ISAS = {
    "avx512": (64, 32, ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2",
                    "-mprefer-vector-width=512")),
    "avx2": (32, 16, ("-mavx2", "-mfma")),
    "neon": (16, 32, ()),
    "generic": (16, 16, ()),
}
#: The host CPU flags each x86 ISA needs (all of its cflags' extensions).
_X86_ISA_FLAGS = (
    ("avx512", {"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma", "avx2"}),
    ("avx2", {"avx2", "fma"}),
)
#: The CPU ISAs, the most capable of each family first.
CPU_ISAS = tuple(_CPU_ISAS)
_CUDA_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}a?")
#: CUDA architectures listed by list_targets(); any sm_<digits> is accepted.
KNOWN_CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
#: The option naming the `isa` field in a target string, per kind.
_OPTION = {"cpu": "isa", "cuda": "arch"}
_DEFAULT_CPU_ISA = "generic"
#: CPU ISAs by family, the most capable first: a host runs its best ISA and every later one.
_ISA_LADDERS = (("avx512", "avx2", "generic"), ("neon", "generic"))
#: CUDA vector loads are at most 128 bits.
_CUDA_VECTOR_BYTES = 16


class TargetError(ValueError):
    """An unknown target kind, ISA/architecture or option; the message lists the allowed values."""


@dataclass(frozen=True)
class Target:
    """What code is generated for.

    kind: "cpu" or "cuda". isa: for cpu one of "avx512", "avx2", "neon", "generic";
    for cuda the architecture, e.g. "sm_90". Raises TargetError on other values.
    """

    kind: str
    isa: str

    def __post_init__(self) -> None:
        _check_kind(self.kind)
        if self.kind == "cpu" and self.isa not in _CPU_ISAS:
            raise TargetError(
                f"unknown cpu isa {self.isa!r}; allowed: {', '.join(_CPU_ISAS)}")
        if self.kind == "cuda" and not _CUDA_ARCH.fullmatch(self.isa):
            raise TargetError(
                f"unknown cuda arch {self.isa!r}; allowed: sm_<major><minor>[a], "
                f"e.g. {', '.join(KNOWN_CUDA_ARCHS)}")

    @classmethod
    def parse(cls, text: str) -> Target:
        """Parses "cpu -isa=avx2" or "cuda -arch=sm_90"; a kind alone ("cpu", "cuda") is this
        machine's best target of that kind (:meth:`local`). Raises TargetError."""
        kind = bare_kind(text)
        if kind is not None:
            return cls.local(kind)
        kind, *options = text.split() or [""]
        _check_kind(kind)
        option = _OPTION[kind]
        values = {}
        for token in options:
            key, sep, value = token.partition("=")
            if key != f"-{option}" or not sep or key[1:] in values:
                raise TargetError(
                    f"bad option {token!r} in target {text!r}; a {kind} target takes one "
                    f"-{option}=<value>")
            values[option] = value
        return cls(kind, values[option])

    def __str__(self) -> str:
        return f"{self.kind} -{_OPTION[self.kind]}={self.isa}"

    @classmethod
    def host(cls) -> Target:
        """The CPU target of this machine: avx512 or avx2 (from /proc/cpuinfo flags) on x86,
        neon on aarch64, else generic."""
        if platform.machine().lower() in ("aarch64", "arm64"):
            return cls("cpu", "neon")
        return cls("cpu", best_cpu_isa(_cpuinfo_flags()))

    @classmethod
    def local(cls, kind: str) -> Target:
        """This machine's best target of `kind`: :meth:`host` for "cpu"; for "cuda" the
        architecture of its GPU 0 (TargetError naming the reason when it has none)."""
        _check_kind(kind)
        if kind == "cpu":
            return cls.host()
        from .cuda_device import GpuNotFound, query

        try:
            return cls("cuda", query(0)["arch"])
        except GpuNotFound as exc:
            raise TargetError(f"target 'cuda' needs -arch=<sm_XY> here, e.g. cuda -arch=sm_90: no GPU on "
                              f"this machine to take the architecture from ({exc})") from None

    def runs_on(self, host: Target) -> bool:
        """Whether a host whose best target is `host` executes code built for this target
        (see the module docstring: a CPU runs its ISA and the lesser ones of its family, a
        GPU exactly its architecture)."""
        return self in host.executable()

    def executable(self) -> list[Target]:
        """The targets a host whose best target is this one executes, the best first:
        avx512 -> [avx512, avx2, generic]; sm_90 -> [sm_90, sm_90a]."""
        if self.kind == "cuda":  # sm_90a code (arch-specific features) runs on sm_90 devices only
            base = self.isa.removesuffix("a")
            return [self] + [Target("cuda", a) for a in (base, base + "a") if a != self.isa]
        ladder = next((rung for rung in _ISA_LADDERS if self.isa in rung), (self.isa,))
        return [Target("cpu", isa) for isa in ladder[ladder.index(self.isa):]]

    @classmethod
    def common_best(cls, hosts: Iterable[Target]) -> Target | None:
        """The best target every one of `hosts` (their best targets) executes; None when
        they share none (other kinds, or other GPU architectures) or there are no hosts."""
        common: list[Target] | None = None
        for host in hosts:
            runs = host.executable()
            common = runs if common is None else [t for t in common if t in runs]
        return common[0] if common else None

    @property
    def name_suffix(self) -> str:
        """The part of a kernel's symbol and library names that says what it was built for:
        the cpu ISA (``avx2``) or the cuda architecture without its underscore (``sm90``)."""
        return self.isa.replace("_", "")

    @property
    def vector_bytes(self) -> int:
        """Bytes in one vector register (cuda: bytes of the widest vector load)."""
        return _CPU_ISAS[self.isa][0] if self.kind == "cpu" else _CUDA_VECTOR_BYTES

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers of a cpu target (32 zmm with AVX-512, 16 ymm with
        AVX2, 32 with NEON, 16 xmm for generic code). Raises TargetError for a cuda target."""
        if self.kind != "cpu":
            raise TargetError(f"a {self.kind} target has no vector register file; only cpu targets do")
        return _CPU_ISAS[self.isa][1]

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` (e.g. "float32") per vector. Raises TargetError on an unknown dtype."""
        if dtype not in DTYPE_BYTES:
            raise TargetError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
        return self.vector_bytes // DTYPE_BYTES[dtype]

    @property
    def cflags(self) -> list[str]:
        """C compiler flags selecting the ISA (never -march=native); [] for cuda host code."""
        return list(_CPU_ISAS[self.isa][2]) if self.kind == "cpu" else []


#: The CPU ISAs a multi-target library dispatches between at load time (compiler.multitarget),
#: the most capable first: the x86 ladder, whose features cpuid reports.
DISPATCH_ISAS = _ISA_LADDERS[0]


def cpu_features(isa: str) -> tuple[str, ...]:
    """The x86 CPU features code built for `isa` (one of DISPATCH_ISAS) executes on, named as
    /proc/cpuinfo and GCC's ``__builtin_cpu_supports`` name them: all the extensions of its
    cflags; () for generic. Raises TargetError for another ISA."""
    if isa not in DISPATCH_ISAS:
        raise TargetError(f"cpu isa {isa!r} cannot be dispatched to at load time; allowed: "
                          f"{', '.join(DISPATCH_ISAS)}")
    return tuple(sorted(dict(_X86_ISA_FLAGS).get(isa, ())))


def _check_kind(kind: str) -> None:
    if kind not in _OPTION:
        raise TargetError(f"unknown target kind {kind!r}; allowed: {', '.join(_OPTION)}")


def bare_kind(text: str) -> str | None:
    """The kind when `text` names a target kind alone ("cpu", " cuda "), else None."""
    words = text.split()
    return words[0] if len(words) == 1 and words[0] in _OPTION else None


def best_cpu_isa(flags: Iterable[str]) -> str:
    """The best CPU ISA a CPU with these /proc/cpuinfo flags (x86 "flags", Arm "Features")
    executes: avx512 needs avx512f/vl/bw/dq + fma + avx2, avx2 needs avx2 + fma, neon
    asimd (or neon); else generic."""
    have = set(flags)
    for isa, needed in _X86_ISA_FLAGS:
        if needed <= have:
            return isa
    return "neon" if have & {"asimd", "neon"} else _DEFAULT_CPU_ISA


def _cpuinfo_flags() -> set[str]:
    """The first "flags" line of /proc/cpuinfo as a set (empty if unreadable)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return set(value.split())
    return set()


def list_targets() -> list[dict]:
    """The target kinds and their allowed values, for GET /api/v1/targets. Each kind's
    `default` is the kind alone: the best target of the hosts that run the code."""
    best = "the best {} of the hosts that run the code: a task's device key's hosts, or this machine"
    return [
        {"kind": "cpu", "option": "isa", "values": list(_CPU_ISAS), "default": "cpu",
         "default_means": best.format("ISA"), "example": "cpu -isa=avx2"},
        {"kind": "cuda", "option": "arch", "values": list(KNOWN_CUDA_ARCHS), "default": "cuda",
         "default_means": best.format("architecture"),
         "pattern": "sm_<major><minor>[a]", "example": "cuda -arch=sm_90"},
    ]
