"""How every tuning run ends, defined once: which finalists are re-measured, how, and which wins.

``tunefleet tune`` (on this machine) and a service task (its export job, on a worker of the
task's device key) end alike:

1. :func:`finalists`: of the correct configs, the fastest by their own throughput
   (``MeasureResult.own_throughput``: the median with the measured time-sharing taken out) and
   the fastest by their median time alone, :data:`FINALISTS` in all, undisturbed measurements
   first (a disturbed one only fills the places left), the template's rule-based configs among
   them whatever their search trials read; a config that ever gave a wrong answer or a runtime
   error is out (a kernel wrong once is wrong).
2. :func:`validation_protocol`: they are re-measured with more repeats (default
   :func:`validation_repeat`) in :data:`ROUNDS` interleaved rounds, A B C A B C ...
   (:func:`interleaved`, by the measurer: one process, so the finalists share the same
   disturbances, as Google Benchmark's ``--benchmark_enable_random_interleaving`` does for
   its benchmarks), each with its per-config median over all rounds.
3. :func:`best`: the winner is chosen among the measurements with the most repeats, so a
   noise-lucky short measurement cannot beat the validated ones, undisturbed ones first: the
   fastest by the lower quartile of its repeats' times, unless one measured with more than
   :data:`DISTURBANCE_NOISE` more disturbance has the higher own throughput; on a host whose
   load lasted (the fastest, or the median of all measurements, above that noise) the highest
   own throughput.
4. :func:`settle`: while the winner's measurement was disturbed by more than
   :data:`DISTURBANCE_NOISE` beyond the host's present load (:func:`unsettled`), it is
   measured again (up to :data:`SETTLE` times, same protocol, each after a pause for the burst
   to pass) and :func:`best` chooses again with it: the latency published with the kernel is
   one the host's neighbours did not inflate, or is reported with the disturbance it had.

Measurements are given as ``(key, item, result)`` triples: ``key`` names the config
(e.g. its canonical knobs JSON), ``item`` is what the caller wants back (a record, a trial
row, an index), ``result`` its :class:`~.measure.MeasureResult`.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from collections.abc import Callable, Hashable, Iterable
from typing import TypeVar

from . import interference
from .measure import MeasureProtocol, MeasureResult

__all__ = ["FINALISTS", "ROUNDS", "DISQUALIFYING", "DISTURBANCE_NOISE", "SETTLE_PAUSES_S", "SETTLE",
           "finalists", "validation_repeat", "validation_protocol", "interleaved", "merge_rounds", "best",
           "unsettled", "settle"]

#: Configs re-measured at the end of a tuning run, local or distributed.
FINALISTS = 5
#: Interleaved rounds of the finalists' re-measurement.
ROUNDS = 3
#: Statuses that rule a config out for good.
DISQUALIFYING = ("wrong_answer", "runtime_error")
#: How far apart two measurements' disturbances may be from the probes' noise alone: on a quiet
#: AMD Zen 4 (2 vCPUs) the validated finalists of one run showed 0.09-0.58, and their own
#: throughputs put a GEMM of median 156 GFLOP/s (disturbance 0.58) above dot products of 175
#: (0.37); an even parallel split with one of two CPUs shared by a busy loop showed about 1.0
#: against 0 for an uneven one (:meth:`~.measure.MeasureResult.own_throughput`; static chunks, before
#: the runtime's load balancing: now 0.34 at the median, bench/tune_under_load.py). On a quiet Intel
#: Xeon model 167 a 64-trial run's trials read 0.09 (median) to 0.27, with one CPU kept busy
#: 1.08 to 1.71 (bench/tune_under_load.py).
DISTURBANCE_NOISE = 0.5
#: Seconds :func:`settle` waits before each re-measure of a winner whose validation was disturbed
#: beyond the host's load (:func:`unsettled`): a burst of another VM's work outlasts a measurement
#: (AMD Zen 4, ResNet-50 tuning: up to three consecutive validation measurements of a task, within
#: 4 s, at 0.95), so each re-measure starts later than the last.
SETTLE_PAUSES_S = (1.0, 3.0)
#: Re-measures of such a winner, at most.
SETTLE = len(SETTLE_PAUSES_S)

log = logging.getLogger(__name__)

T = TypeVar("T")
Measurement = tuple[Hashable, T, MeasureResult]


def _disqualified(measured: list[Measurement]) -> set[Hashable]:
    return {key for key, _, result in measured if result.status in DISQUALIFYING}


def finalists(measured: Iterable[Measurement], n: int = FINALISTS, keep: Iterable[Hashable] = ()) -> list[T]:
    """The items of ``n`` configs' correct measurements (one per config): the ``n - n // 2``
    fastest by own throughput, then the fastest by median time alone, then by own throughput
    again while places are left (ties: the earlier measurement), and last those of the keys in
    ``keep`` (the template's rule-based configs, `ops.preferred_configs`) that none of the
    rankings chose, in place of the last chosen; undisturbed ones ahead of disturbed ones in
    each ranking; configs with a :data:`DISQUALIFYING` result left out.

    A rule's pick is a candidate without any measurement, so one search trial disturbed
    unnoticed cannot drop it: on an AMD Zen 4, tuning ResNet-50, the default of the 3×3 64@56²
    layer and its first neighbour both read 2.05 ms at probe disturbances of 0.15-0.18 (1.06-1.07
    ms in fresh processes and re-measured alike afterwards), and the 13 trials after them never
    came near it, so the task exported a kernel 0.80× the default's speed.

    Own throughput multiplies by the measured disturbance, whose noise on a quiet host (0.02
    to 0.3 between trials) ranked five slower configs above the fastest (AMD Zen 5, AVX-512,
    matmul 128×3072×768: the default's median 468 GFLOP/s at disturbance 0.02 below configs
    of 405-422 at 0.16-0.27), and validation never saw it; its median alone keeps it in."""
    measured = list(measured)
    out = _disqualified(measured)
    ok = [(key, item, result) for key, item, result in measured if result.ok and key not in out]
    by_own = sorted(ok, key=lambda m: (m[2].disturbed, -m[2].own_throughput()))
    by_time = sorted(ok, key=lambda m: (m[2].disturbed, m[2].median))
    picks: dict[Hashable, T] = {}
    for ranking, places in ((by_own, n - n // 2), (by_time, n), (by_own, n)):
        for key, item, _ in ranking:
            if len(picks) >= places:
                break
            picks.setdefault(key, item)
    keep, kept = set(keep), {}
    for key, item, _ in by_time:
        if key in keep and key not in picks:
            kept.setdefault(key, item)
    dropped = [key for key in reversed(picks) if key not in keep][:max(0, len(picks) + len(kept) - n)]
    return [item for key, item in picks.items() if key not in dropped] + list(kept.values())


def validation_repeat(protocol: MeasureProtocol) -> int:
    """Repeats of a finalist's re-measurement: at least 15, and three times the search's."""
    return max(15, 3 * protocol.repeat)


def validation_protocol(protocol: MeasureProtocol, repeat: int | None = None) -> MeasureProtocol:
    """``protocol`` for the finalists: ``repeat`` repeats in all (default
    :func:`validation_repeat`) taken in :data:`ROUNDS` interleaved rounds (fewer when there are
    fewer repeats), each round's ``timeout_s`` longer in proportion to its repeats (never shorter)."""
    repeat = repeat or validation_repeat(protocol)
    rounds = min(ROUNDS, repeat)
    return dataclasses.replace(protocol, repeat=repeat, rounds=rounds,
                               timeout_s=protocol.timeout_s * max(1.0, math.ceil(repeat / rounds) / protocol.repeat))


def interleaved(run: Callable[[int, MeasureProtocol], MeasureResult], n: int,
                protocol: MeasureProtocol) -> list[MeasureResult]:
    """Measure candidates ``0 .. n-1`` in ``protocol.rounds`` rounds, A B C A B C ...:
    ``run(i, one_round)`` measures candidate ``i`` once with ``protocol`` at ``rounds=1`` and
    its share of the ``repeat`` repeats (as even as can be, the earlier rounds taking the
    remainder). A candidate whose round failed is not run again. Returns one
    :func:`merge_rounds` result per candidate, in order (with one round: each run's result
    as it is)."""
    per: list[list[MeasureResult]] = [[] for _ in range(n)]
    for k in range(protocol.rounds):
        share = protocol.repeat // protocol.rounds + (k < protocol.repeat % protocol.rounds)
        one = dataclasses.replace(protocol, rounds=1, repeat=share)
        for i in range(n):
            if not per[i] or per[i][-1].ok:
                per[i].append(run(i, one))
    return [merge_rounds(results) for results in per]


def merge_rounds(results: list[MeasureResult]) -> MeasureResult:
    """One candidate's rounds as one result: the first failed round if any; else every
    round's costs in order (so its median is the per-config median over all rounds), the
    first round's build seconds, the run seconds summed, the median disturbance, and
    ``disturbed`` when more than half the rounds were (the rounds shared their disturbances
    with the other candidates; the median over all costs outvotes a minority of bad rounds),
    host and timestamp of the last round."""
    failed = [r for r in results if not r.ok]
    if failed or len(results) == 1:
        return failed[0] if failed else results[0]
    return dataclasses.replace(
        results[-1], costs=[c for r in results for c in r.costs], build_s=results[0].build_s,
        run_s=sum(r.run_s for r in results), disturbance=statistics.median(r.disturbance for r in results),
        disturbed=2 * sum(r.disturbed for r in results) > len(results))


def best(measured: Iterable[Measurement]) -> T | None:
    """The item of the winning measurement, or None when no config qualifies.

    * A config with a :data:`DISQUALIFYING` result is out.
    * A config measured several times is represented by its correct measurement with the
      most repeats (the latest of those on a tie).
    * Only configs represented by the most repeats compete (the validated finalists).
    * Among those, undisturbed ones win over disturbed ones (a disturbed fast outlier cannot win).
    * Then the fastest by the lower quartile of its repeats' times wins (ties: the config
      measured first): other work only ever adds time, and a burst that spans two of a
      finalist's three rounds moves its median, not its lower quartile (AMD Zen 5, a 64 -> 64
      1×1 convolution at 56²: the default's rounds at 100, 100 and 52 µs, another config's at
      164, 82 and 81 µs, both undisturbed by the probes; 52-56 µs and 81-83 µs in the search).
    * Unless configs measured with more than :data:`DISTURBANCE_NOISE` more disturbance than
      it have a higher own throughput (``MeasureResult.own_throughput``) in every measurement
      of theirs: then the highest of those, each ranked by its lowest own throughput (the
      fastest by its validated one). The finalists were measured in interleaved rounds under
      the same load, so the probes' noise alone would re-rank them at random; a lasting load on
      some of the CPUs, which slows an even parallel split and not an uneven one, shows as a
      larger difference, and it slowed the config's search trial alike. A config that ran
      slower in its validation than in its search trial, with a larger disturbance, is not
      credited with more than its trial showed (AMD Zen 5, a ResNet-50 layer: validated 0.71
      ms at disturbance 0.67 against the default's 0.52 ms at 0.11, search trials 0.57 and
      0.50 ms at 0.16 and 0.04; re-timed 0.64 against 0.50 ms).
    * Where even the fastest was measured with more than DISTURBANCE_NOISE disturbance, or the
      median disturbance of all the measurements given is above it (the search's trials too:
      the host's load), every finalist ran under a load that lasted through the rounds, which
      adds to each one's times by how its parallel split meets it, not by its own speed: the
      highest lowest own throughput wins (Intel Xeon model 167, one of 2 CPUs kept busy, 1024³
      matmul finalists all at 0.82-1.04: the fastest lower quartile, 209 GFLOP/s under the load
      against 201-206, was a 6 × 48 tile that runs 17% slower on a quiet host than the 6 × 64
      tile the own throughputs put first, 279 against 366). A split uneven enough to leave the
      busy CPU idle is itself measured undisturbed (AMD Zen 4, one of 2 CPUs busy, 1024³ matmul,
      search trials at a median of 0.77: the fastest lower quartile, 142 GFLOP/s at 0.39, ran
      at 145 quietly, 64% of the quiet run's winner).
    """
    measured = list(measured)
    out = _disqualified(measured)
    chosen: dict[Hashable, tuple[T, MeasureResult]] = {}
    lowest_own: dict[Hashable, float] = {}
    for key, item, result in measured:
        if result.ok and key not in out:
            lowest_own[key] = min(lowest_own.get(key, math.inf), result.own_throughput())
            if key not in chosen or len(result.costs) >= len(chosen[key][1].costs):
                chosen[key] = (item, result)
    most = max((len(result.costs) for _, result in chosen.values()), default=0)
    finals = [(key, result) for key, (_, result) in chosen.items() if len(result.costs) == most]
    if not finals:
        return None
    fewest_disturbed = min(result.disturbed for _, result in finals)
    finals = [(key, result) for key, result in finals if result.disturbed == fewest_disturbed]
    fastest = min(finals, key=lambda m: m[1].lower_quartile)
    host_load = statistics.median(result.disturbance for _, _, result in measured if result.ok)
    if max(fastest[1].disturbance, host_load) > DISTURBANCE_NOISE:
        return chosen[max((key for key, _ in finals), key=lowest_own.get)][0]
    ranked = {fastest[0]: fastest[1].own_throughput()}
    ranked.update((key, lowest_own[key]) for key, result in finals
                  if result.disturbance - fastest[1].disturbance > DISTURBANCE_NOISE)
    return chosen[max(ranked, key=ranked.get)][0]


def unsettled(result: MeasureResult, baseline: float = 0.0) -> bool:
    """Whether the winner's measurement ``result`` should be taken again before its latency is
    published: correct, and disturbed by more than :data:`DISTURBANCE_NOISE` beyond the host's
    present load ``baseline`` (a disturbance, e.g. the measurer's ``baseline``:
    :func:`.interference.excess_disturbance`). Under a load that lasts the winner is published
    as measured (a re-measure would read the same); a burst of other work during its rounds is
    not what a user's process sees (``tunefleet demo`` on an AMD Zen 4 published a validated
    median of 2.272 ms, measured while the demo's own service shared the CPUs, for a kernel
    that ran at 1.26 ms per call and whose search trial read 1.27 ms at a disturbance of 0.06)."""
    return result.ok and interference.excess_disturbance(result.disturbance, baseline) > DISTURBANCE_NOISE


def settle(choose: Callable[[], T | None], result_of: Callable[[T], MeasureResult],
           remeasure: Callable[[T], object], baseline: float = 0.0) -> T | None:
    """The winner, confirmed: ``choose()`` (the caller's :func:`best` over its measurements);
    while that winner's measurement (``result_of(winner)``) is :func:`unsettled` against
    ``baseline``, ``remeasure(winner)`` adds a new measurement of its config (same protocol)
    to what ``choose`` sees, and ``choose()`` chooses again, up to :data:`SETTLE` times, each
    after a pause of :data:`SETTLE_PAUSES_S` (seconds) for the burst to pass."""
    winner = choose()
    for pause_s in SETTLE_PAUSES_S:
        if winner is None or not unsettled(result_of(winner), baseline):
            break
        log.info("the winner's validation read disturbance %.2f over the host's load %.2f: measuring it again "
                 "in %g s", result_of(winner).disturbance, baseline, pause_s)
        time.sleep(pause_s)
        remeasure(winner)
        winner = choose()
    return winner
