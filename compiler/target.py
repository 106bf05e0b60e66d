"""Code generation targets: the kind of processor and the instruction set code is generated for.

A target string is a kind followed by one option: ``cpu -isa=<isa>`` or
``cuda -arch=<sm_XY>``. ``str(Target.parse(s))`` is the canonical spelling.
"""

from __future__ import annotations

import platform
import re
from dataclasses import dataclass
from pathlib import Path

#: Bytes per element of the dtypes the compiler knows.
DTYPE_BYTES = {"float32": 4, "float64": 8, "float16": 2, "int8": 1, "int32": 4}

#: CPU instruction sets: (vector register bytes, C compiler flags).
_CPU_ISAS = {
    "avx512": (64, ("-mavx512f", "-mavx512vl", "-mavx512bw", "-mavx512dq", "-mfma", "-mavx2",
                    "-mprefer-vector-width=512")),
    "avx2": (32, ("-mavx2", "-mfma")),
    "neon": (16, ()),
    "generic": (16, ()),
}
#: The host CPU flags each x86 ISA needs (all of its cflags' extensions).
_X86_ISA_FLAGS = (
    ("avx512", {"avx512f", "avx512vl", "avx512bw", "avx512dq", "fma", "avx2"}),
    ("avx2", {"avx2", "fma"}),
)
_CUDA_ARCH = re.compile(r"sm_[1-9][0-9]{1,2}a?")
#: CUDA architectures listed by list_targets(); any sm_<digits> is accepted.
KNOWN_CUDA_ARCHS = ("sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_90a")
#: The option naming the `isa` field in a target string, per kind.
_OPTION = {"cpu": "isa", "cuda": "arch"}
_DEFAULT_CPU_ISA = "generic"
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
        """Parses "cpu -isa=avx2", "cpu" (isa generic) or "cuda -arch=sm_90". Raises TargetError."""
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
        if option not in values and kind == "cuda":
            raise TargetError(f"target {text!r} needs -arch=<sm_XY>, e.g. cuda -arch=sm_90")
        return cls(kind, values.get(option, _DEFAULT_CPU_ISA))

    def __str__(self) -> str:
        return f"{self.kind} -{_OPTION[self.kind]}={self.isa}"

    @classmethod
    def host(cls) -> Target:
        """The CPU target of this machine: avx512 or avx2 (from /proc/cpuinfo flags) on x86,
        neon on aarch64, else generic."""
        if platform.machine().lower() in ("aarch64", "arm64"):
            return cls("cpu", "neon")
        flags = _cpuinfo_flags()
        for isa, needed in _X86_ISA_FLAGS:
            if needed <= flags:
                return cls("cpu", isa)
        return cls("cpu", _DEFAULT_CPU_ISA)

    @property
    def vector_bytes(self) -> int:
        """Bytes in one vector register (cuda: bytes of the widest vector load)."""
        return _CPU_ISAS[self.isa][0] if self.kind == "cpu" else _CUDA_VECTOR_BYTES

    def lanes(self, dtype: str) -> int:
        """Elements of `dtype` (e.g. "float32") per vector. Raises TargetError on an unknown dtype."""
        if dtype not in DTYPE_BYTES:
            raise TargetError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPE_BYTES)}")
        return self.vector_bytes // DTYPE_BYTES[dtype]

    @property
    def cflags(self) -> list[str]:
        """C compiler flags selecting the ISA (never -march=native); [] for cuda host code."""
        return list(_CPU_ISAS[self.isa][1]) if self.kind == "cpu" else []


def _check_kind(kind: str) -> None:
    if kind not in _OPTION:
        raise TargetError(f"unknown target kind {kind!r}; allowed: {', '.join(_OPTION)}")


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
    """The target kinds and their allowed values, for GET /api/v1/targets."""
    return [
        {"kind": "cpu", "option": "isa", "values": list(_CPU_ISAS),
         "default": str(Target("cpu", _DEFAULT_CPU_ISA)), "host": str(Target.host())},
        {"kind": "cuda", "option": "arch", "values": list(KNOWN_CUDA_ARCHS),
         "pattern": "sm_<major><minor>[a]", "example": "cuda -arch=sm_90"},
    ]
