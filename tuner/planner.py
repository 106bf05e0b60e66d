"""The search strategy behind the tuning loop: learning from results and proposing configs.

:class:`InlinePlanner` does both in the loop's own thread, between measurements: on this
machine the search must never run while a candidate is timed. :class:`Planner` does them
in a thread beside the loop, for a runner that measures elsewhere, so that a cost-model
refit or a simulated-annealing replan (seconds on a busy host) never holds up dispatch,
result recording or the cancel check. Both answer the same calls; ``search_s`` is the
time the loop waited for the search.
"""

from __future__ import annotations

import collections
import threading
import time

from tunefleet.compiler.space import ConfigEntity

from .measure import MeasureResult
from .search import SearchStrategy

__all__ = ["InlinePlanner", "Planner"]


class InlinePlanner:
    """Learns and proposes when asked, in the caller's thread."""

    def __init__(self, search: SearchStrategy) -> None:
        self.search = search
        self.exhausted = False
        self.search_s = 0.0

    @property
    def ready(self) -> int:
        """Proposals waiting to be taken: none (they are made on :meth:`take`)."""
        return 0

    def learn(self, results: list[tuple[ConfigEntity, MeasureResult]]) -> None:
        t0 = time.perf_counter()
        configs, measured = zip(*results)
        self.search.update(list(configs), list(measured))
        self.search_s += time.perf_counter() - t0

    def keep_ready(self, n: int) -> None:
        """Nothing to prepare: proposals are made on :meth:`take`."""

    def take(self, n: int) -> list[ConfigEntity]:
        """Up to `n` new proposals (fewer only when the config space runs out)."""
        t0 = time.perf_counter()
        batch = self.search.next_batch(n)
        self.search_s += time.perf_counter() - t0
        self.exhausted = len(batch) < n
        return batch

    def start(self) -> None:
        pass

    def check(self) -> None:
        pass

    def stop(self) -> None:
        pass


class Planner(threading.Thread):
    """Runs the search beside the loop: learns from results as they come and keeps proposals
    ready. Only this thread touches the search."""

    search_s = 0.0  # the loop never waits for it

    def __init__(self, search: SearchStrategy) -> None:
        super().__init__(name="planner", daemon=True)
        self.search = search
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._halt = threading.Event()
        self._results: list[tuple[ConfigEntity, MeasureResult]] = []
        self._ready: collections.deque[ConfigEntity] = collections.deque()
        self._want = 0
        self.exhausted = False
        self.error: BaseException | None = None

    @property
    def ready(self) -> int:
        """Proposals waiting to be taken."""
        return len(self._ready)

    def learn(self, results: list[tuple[ConfigEntity, MeasureResult]]) -> None:
        with self._lock:
            self._results.extend(results)
        self._wake.set()

    def keep_ready(self, n: int) -> None:
        """Keep `n` proposals ready."""
        if n != self._want:
            self._want = n
            self._wake.set()

    def take(self, n: int) -> list[ConfigEntity]:
        """Up to `n` of the proposals ready now."""
        out = []
        while len(out) < n and self._ready:
            out.append(self._ready.popleft())
        if out:
            self._wake.set()
        return out

    def check(self) -> None:
        """Re-raise in the caller an exception the search raised."""
        if self.error is not None:
            raise self.error

    def stop(self) -> None:
        self._halt.set()
        self._wake.set()
        self.join(timeout=1.0)  # a replan still running finishes alone (daemon thread)

    def run(self) -> None:
        try:
            while not self._halt.is_set():
                with self._lock:
                    results, self._results = self._results, []
                if results:
                    configs, measured = zip(*results)
                    self.search.update(list(configs), list(measured))
                    continue
                missing = self._want - len(self._ready)
                if missing > 0 and not self.exhausted:
                    batch = self.search.next_batch(missing)
                    self._ready.extend(batch)
                    self.exhausted = len(batch) < missing
                    continue
                self._wake.wait(0.5)
                self._wake.clear()
        except BaseException as exc:  # noqa: BLE001 - handed to the loop
            self.error = exc
