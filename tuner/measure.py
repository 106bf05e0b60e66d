"""Measure types: what a trial asks for, how it is timed, and what came back.

Plain dataclasses (a worker host has no pydantic), validated on construction:
a bad value raises ``ValueError`` naming the class and the field. Each type
round-trips through JSON with ``to_json()`` / ``from_json(d)``; ``from_json``
rejects unknown and missing fields by name.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import numbers
import socket
import statistics
import time
from typing import Any

import numpy as np

__all__ = [
    "STATUSES",
    "canonical_json",
    "workload_key",
    "MeasureProtocol",
    "MeasureInput",
    "MeasureResult",
]

#: What a trial gave. ``unsupported_target``: the measuring host cannot execute the trial's
#: target (e.g. avx512 code on an AVX2 host); nothing was built or run.
STATUSES = ("ok", "compile_error", "runtime_error", "wrong_answer", "timeout", "worker_lost", "unsupported_target")


def canonical_json(obj: Any) -> str:
    """JSON with sorted keys, no whitespace and no NaN/Infinity (raises ValueError on those)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def workload_key(workload: dict) -> str:
    """The workload's stable key: sha256 hex digest of its canonical JSON."""
    return hashlib.sha256(canonical_json(workload).encode()).hexdigest()


def _require(cls: str, field: str, ok: bool, expected: str, value: Any) -> None:
    if not ok:
        raise ValueError(f"{cls}.{field} must be {expected}, got {value!r}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    """A finite real number (numpy scalars included), not a bool."""
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) and math.isfinite(v)


class _JsonDataclass:
    """``to_json`` / ``from_json`` for the flat dataclasses below."""

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict):
        if not isinstance(d, dict):
            raise ValueError(f"{cls.__name__} JSON must be an object, got {d!r}")
        fields = {f.name: f for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - set(fields))
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; fields are {list(fields)}")
        missing = [
            n
            for n, f in fields.items()
            if n not in d and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ValueError(f"{cls.__name__}: missing field(s) {missing}")
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class MeasureProtocol(_JsonDataclass):
    """How a candidate is timed (the field's protocol: TVM's ``time_evaluator``).

    Each of ``repeat`` repeats runs the kernel ``number`` times, raising the
    count (doubling) until one repeat lasts at least ``min_repeat_ms``; its cost
    is the mean time of one run, in seconds. ``cooldown_ms`` is slept between
    repeats; ``flush_cache`` overwrites a buffer larger than the last-level
    cache before each repeat; ``timeout_s`` bounds one candidate's execution
    (check and timing), counted from when it starts executing;
    ``check_correctness`` compares the output with the operator's reference
    before timing.

    Defaults, for a noisy, shared 2-core machine: 10 repeats of at least
    2 ms each (a few tens of ms per candidate). Other processes only ever add
    time, and a short repeat often runs undisturbed, so the fastest repeats
    are a candidate's own speed: measured twice, 96 configs of a matmul
    (64x64x256, one CPU, other engineers' jobs on the machine) ranked alike
    with these repeats (Spearman 0.85 between the two runs, by the fastest
    repeat), but hardly at all with 5 repeats of 50 ms (0.19 by the median),
    each of which spans some preemption. Candidates are ranked by
    :meth:`MeasureResult.own_throughput` (the median with the measured
    time-sharing taken out), since a load that lasts on one of the CPUs
    slows every repeat alike. A 1 ms cooldown lets the other
    core's housekeeping run between repeats without letting the clock drop.
    Caches stay warm (``flush_cache=False``), as a kernel called in a loop
    sees them; final validation re-measures the top configs with more
    repeats.

    Interference (:mod:`.interference`): each measurement reports its
    ``disturbance`` (a fraction: 0 undisturbed, 1 about half the CPUs' time
    went elsewhere). One whose excess over the host's present load (the
    median of the latest trials' disturbances, :mod:`.runner`) is above
    ``max_disturbance``, or whose probe's reference kernel ran at different speeds
    before and after the repeats, is measured again, up to ``remeasure`` more
    times; a steady attempt is kept over an unsteady one, then the least
    disturbed, and, if it is still above, marked
    ``disturbed`` (the cost model and the ranking then leave it out). A load
    that lasts is the level every trial shares, so its trials still teach
    the cost model; a burst above it is what gets re-measured. The default 2.0
    (the CPUs did a third of the work they did for the neighbouring trials)
    flags a burst like what issue #18 saw on a busy host (the search's best
    3-4x below the same kernels on a quiet one); on a quiet 2-CPU Xeon
    (AVX-512) a 1024³ matmul's trials showed 0.15 (median), with one of the two
    CPUs shared with a busy loop all along about 1.1. ``rounds`` > 1 measures a batch in
    rounds, A B C A B C ..., the ``repeat`` repeats of each candidate split
    among them, so that candidates compared with each other share the same
    disturbances (final validation: :func:`.validation.validation_protocol`);
    ``rounds`` must not exceed ``repeat``.
    """

    number: int = 1
    repeat: int = 10
    min_repeat_ms: float = 2.0
    cooldown_ms: float = 1.0
    flush_cache: bool = False
    timeout_s: float = 10.0
    check_correctness: bool = True
    max_disturbance: float = 2.0
    remeasure: int = 2
    rounds: int = 1

    def __post_init__(self) -> None:
        c = "MeasureProtocol"
        _require(c, "number", _is_int(self.number) and self.number >= 1, "an int >= 1", self.number)
        _require(c, "repeat", _is_int(self.repeat) and self.repeat >= 1, "an int >= 1", self.repeat)
        _require(c, "min_repeat_ms", _is_num(self.min_repeat_ms) and self.min_repeat_ms >= 0,
                 "a number >= 0", self.min_repeat_ms)
        _require(c, "cooldown_ms", _is_num(self.cooldown_ms) and self.cooldown_ms >= 0,
                 "a number >= 0", self.cooldown_ms)
        _require(c, "flush_cache", isinstance(self.flush_cache, bool), "a bool", self.flush_cache)
        _require(c, "timeout_s", _is_num(self.timeout_s) and self.timeout_s > 0, "a number > 0", self.timeout_s)
        _require(c, "check_correctness", isinstance(self.check_correctness, bool), "a bool",
                 self.check_correctness)
        _require(c, "max_disturbance", _is_num(self.max_disturbance) and self.max_disturbance >= 0,
                 "a fraction >= 0", self.max_disturbance)
        _require(c, "remeasure", _is_int(self.remeasure) and 0 <= self.remeasure <= 10, "an int in [0, 10]",
                 self.remeasure)
        _require(c, "rounds", _is_int(self.rounds) and 1 <= self.rounds <= min(100, self.repeat),
                 "an int in [1, min(100, repeat)]", self.rounds)


@dataclasses.dataclass(frozen=True)
class MeasureInput(_JsonDataclass):
    """One trial: a workload (JSON object), a target string and a config (``ConfigEntity.to_json()``)."""

    workload: dict
    target: str
    config: dict

    def __post_init__(self) -> None:
        c = "MeasureInput"
        _require(c, "workload", isinstance(self.workload, dict) and bool(self.workload), "a non-empty object",
                 self.workload)
        _require(c, "target", isinstance(self.target, str) and bool(self.target.strip()), "a non-empty str",
                 self.target)
        _require(c, "config", isinstance(self.config, dict) and isinstance(self.config.get("knobs"), dict),
                 "an object with a 'knobs' object", self.config)

    @property
    def workload_key(self) -> str:
        return workload_key(self.workload)


@dataclasses.dataclass(frozen=True)
class MeasureResult(_JsonDataclass):
    """What one trial gave.

    ``costs``: seconds per run, one entry per repeat (non-empty and positive
    when ``status == "ok"``; numpy scalars are stored as Python floats); ``build_s`` / ``run_s``: wall seconds spent
    building and executing (check + timing); ``error``: error text for a
    failed trial; ``host``: the measuring host or worker id; ``timestamp``:
    Unix seconds when the result was made; ``disturbance``: how much other
    processes slowed the measuring CPUs during the timing, a fraction >= 0
    (:mod:`.interference`; 0.0 where not measured, e.g. a failed trial);
    ``disturbed``: it stayed above the host's present load by more than the
    protocol's ``max_disturbance`` after its re-measures (:mod:`.runner`,
    ``interference.excess_disturbance``), so its costs say more about the host than the
    config.
    """

    status: str
    costs: list[float] = dataclasses.field(default_factory=list)
    build_s: float = 0.0
    run_s: float = 0.0
    error: str = ""
    host: str = dataclasses.field(default_factory=socket.gethostname)
    timestamp: float = dataclasses.field(default_factory=time.time)
    disturbance: float = 0.0
    disturbed: bool = False

    def __post_init__(self) -> None:
        c = "MeasureResult"
        _require(c, "status", self.status in STATUSES, f"one of {list(STATUSES)}", self.status)
        _require(c, "costs", isinstance(self.costs, list) and all(_is_num(x) and x > 0 for x in self.costs),
                 "a list of positive finite seconds", self.costs)
        _require(c, "costs", self.status != "ok" or bool(self.costs), "non-empty when status is 'ok'", self.costs)
        for name in ("build_s", "run_s"):
            value = getattr(self, name)
            _require(c, name, _is_num(value) and value >= 0, "a number of seconds >= 0", value)
            object.__setattr__(self, name, float(value))
        object.__setattr__(self, "costs", [float(x) for x in self.costs])
        _require(c, "error", isinstance(self.error, str), "a str", self.error)
        _require(c, "host", isinstance(self.host, str), "a str", self.host)
        _require(c, "timestamp", _is_num(self.timestamp) and self.timestamp >= 0, "Unix seconds", self.timestamp)
        _require(c, "disturbance", _is_num(self.disturbance) and self.disturbance >= 0, "a fraction >= 0",
                 self.disturbance)
        object.__setattr__(self, "disturbance", float(self.disturbance))
        _require(c, "disturbed", isinstance(self.disturbed, bool), "a bool", self.disturbed)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def trusted(self) -> bool:
        """Correct and not :attr:`disturbed`: its costs are the config's own speed."""
        return self.ok and not self.disturbed

    @property
    def median(self) -> float:
        """Median cost in seconds; ``inf`` for a failed trial."""
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def lower_quartile(self) -> float:
        """First quartile of the costs in seconds (the cost itself with one); ``inf`` for a
        failed trial. Other work only ever adds time, so a burst over part of the repeats moves
        the median before it moves this (``validation.best`` ranks finalists by it)."""
        if not self.ok:
            return math.inf
        return statistics.quantiles(self.costs, n=4, method="inclusive")[0] if len(self.costs) > 1 else self.costs[0]

    @property
    def cv(self) -> float:
        """Coefficient of variation of the costs (stdev / mean); 0.0 with one cost; ``inf`` if failed."""
        if not self.ok:
            return math.inf
        return statistics.stdev(self.costs) / statistics.fmean(self.costs) if len(self.costs) > 1 else 0.0

    @property
    def spread(self) -> float:
        """Interquartile range of the costs over their median (a fraction): how stable the
        kernel's time is, which one repeat stretched by a hiccup of the host barely moves (30
        repeats with one at 1.5x: CV about 9%, spread about 1%). 0.0 with fewer than two costs;
        ``inf`` if failed."""
        if not self.ok:
            return math.inf
        if len(self.costs) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(self.costs, n=4, method="inclusive")
        return (q3 - q1) / self.median

    def gflops(self, flop: float) -> float:
        """``flop`` / median seconds, in GFLOP/s; 0.0 for a failed trial."""
        return flop / self.median / 1e9 if self.ok else 0.0

    def throughput(self) -> float:
        """1 / median seconds (runs per second); 0.0 for a failed trial. Relative speed within a workload."""
        return 1.0 / self.median if self.ok else 0.0

    def own_throughput(self) -> float:
        """``(1 + disturbance)`` / median seconds: the throughput with the slowdown the
        interference probes saw taken out, what ranks candidates (cost model, finalists; the
        winner where disturbances differ by more than the probes' noise, `validation.best`);
        0.0 for a failed trial. Under a load that lasts on some of the measuring CPUs a
        candidate whose parallel split gives the busy CPU less work runs faster than an even
        split, and slower on a quiet host; its critical path was not slowed (disturbance about
        0), the even split's was (about 1), so this ranks them as a quiet host would
        (issue #18: 2-CPU Xeon, one CPU shared with a busy loop: an even 1024³ matmul 190
        GFLOP/s by its fastest repeat, 300-325 by this; an uneven one 217 and 216-244; quietly
        310 and 215; measured before the runtime's parallel loops shared a slowed thread's work
        out, which now evens such splits out at run time, and the probes read the rest)."""
        return (1.0 + self.disturbance) / self.median if self.ok else 0.0

    def peak_throughput(self) -> float:
        """1 / the fastest repeat's seconds; 0.0 for a failed trial. On a shared host, the estimate of a
        candidate's speed least disturbed by other processes (see MeasureProtocol)."""
        return 1.0 / min(self.costs) if self.ok else 0.0
