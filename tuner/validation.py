"""How every tuning run ends, defined once: which finalists are re-measured, how, and which wins.

``tunefleet tune`` (on this machine) and a service task (its export job, on a worker of the
task's device key) end alike:

1. :func:`finalists`: the :data:`FINALISTS` fastest correct configs by their fastest repeat
   (peak throughput: the ranking least disturbed by other processes on a shared host); a
   config that ever gave a wrong answer or a runtime error is out (a kernel wrong once is
   wrong).
2. :func:`validation_protocol`: they are re-measured side by side with more repeats
   (default :func:`validation_repeat`) and a timeout longer in proportion.
3. :func:`best`: the winner is chosen by median among the measurements with the most
   repeats, so a noise-lucky short measurement cannot beat the validated ones.

Measurements are given as ``(key, item, result)`` triples: ``key`` names the config
(e.g. its canonical knobs JSON), ``item`` is what the caller wants back (a record, a trial
row, an index), ``result`` its :class:`~.measure.MeasureResult`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Iterable
from typing import TypeVar

from .measure import MeasureProtocol, MeasureResult

__all__ = ["FINALISTS", "DISQUALIFYING", "finalists", "validation_repeat", "validation_protocol", "best"]

#: Configs re-measured at the end of a tuning run, local or distributed.
FINALISTS = 5
#: Statuses that rule a config out for good.
DISQUALIFYING = ("wrong_answer", "runtime_error")

T = TypeVar("T")
Measurement = tuple[Hashable, T, MeasureResult]


def _disqualified(measured: list[Measurement]) -> set[Hashable]:
    return {key for key, _, result in measured if result.status in DISQUALIFYING}


def finalists(measured: Iterable[Measurement], n: int = FINALISTS) -> list[T]:
    """The items of the ``n`` fastest correct measurements by fastest repeat, fastest first
    (ties: the earlier measurement), leaving out configs with a :data:`DISQUALIFYING` result."""
    measured = list(measured)
    out = _disqualified(measured)
    ok = [(key, item, result) for key, item, result in measured if result.ok and key not in out]
    return [item for _, item, _ in sorted(ok, key=lambda m: -m[2].peak_throughput())[:n]]


def validation_repeat(protocol: MeasureProtocol) -> int:
    """Repeats of a finalist's re-measurement: at least 15, and three times the search's."""
    return max(15, 3 * protocol.repeat)


def validation_protocol(protocol: MeasureProtocol, repeat: int | None = None) -> MeasureProtocol:
    """``protocol`` with ``repeat`` repeats (default :func:`validation_repeat`) and its
    ``timeout_s`` longer in proportion (never shorter)."""
    repeat = repeat or validation_repeat(protocol)
    return dataclasses.replace(protocol, repeat=repeat,
                               timeout_s=protocol.timeout_s * max(1.0, repeat / protocol.repeat))


def best(measured: Iterable[Measurement]) -> T | None:
    """The item of the winning measurement, or None when no config qualifies.

    * A config with a :data:`DISQUALIFYING` result is out.
    * A config measured several times is represented by its correct measurement with the
      most repeats (the latest of those on a tie).
    * Only configs represented by the most repeats compete (the validated finalists).
    * Then the least median cost wins; ties go to the config measured first.
    """
    measured = list(measured)
    out = _disqualified(measured)
    chosen: dict[Hashable, tuple[T, MeasureResult]] = {}
    for key, item, result in measured:
        if result.ok and key not in out and (key not in chosen or len(result.costs) >= len(chosen[key][1].costs)):
            chosen[key] = (item, result)
    most = max((len(result.costs) for _, result in chosen.values()), default=0)
    return min(((item, result) for item, result in chosen.values() if len(result.costs) == most),
               key=lambda m: m[1].median, default=(None, None))[0]
