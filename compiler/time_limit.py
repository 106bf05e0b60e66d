"""A wall-clock limit on compiler work done in Python: lowering and code generation.

gcc and nvcc have their own limit (``build.COMPILE_TIMEOUT_S``, enforced on their process
group). What comes before them is Python: the edge bounds what users send, so lowering
takes seconds, but a compiler defect that loops would hold a builder process for good,
and the runner waits for every build it started. :func:`time_limit` turns that into a
failed candidate.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator

from .toolchain import BuildError

__all__ = ["LOWERING_TIMEOUT_S", "TimeLimitError", "time_limit"]

#: Seconds that lowering and code generation of one candidate may take in a builder process.
#: The largest expression the edge accepts (100k nodes inlined) lowers in about 6 s on Zen 4.
LOWERING_TIMEOUT_S = 60.0


class TimeLimitError(BuildError):
    """Compiler work ran past its :func:`time_limit`."""


@contextlib.contextmanager
def time_limit(seconds: float | None, what: str) -> Iterator[None]:
    """Raise :class:`TimeLimitError` ("<what> took longer than <seconds> s") from the block's
    Python code once it has run ``seconds`` wall seconds.

    Uses ``SIGALRM`` (``ITIMER_REAL``), so it limits only in the main thread of a process
    that has no other use for that signal, such as a builder process; elsewhere, or with
    ``seconds`` None, the block runs without a limit. The signal is handled between Python
    bytecodes: a single call into C that never returns is not interrupted. Do not run a
    subprocess in the block: the exception would leave it running.
    An alarm set before (pytest-timeout's, say) is set again afterwards with the time it had
    left; where it would fire first, the block runs under it alone.
    """
    outer_s, outer_interval_s = signal.getitimer(signal.ITIMER_REAL)
    if (seconds is None or threading.current_thread() is not threading.main_thread()
            or 0 < outer_s <= seconds):
        yield
        return

    def expire(_signum, _frame):
        raise TimeLimitError(f"{what} took longer than {seconds:g} s")

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_s:
            signal.setitimer(signal.ITIMER_REAL, max(outer_s - (time.monotonic() - start), 1e-3), outer_interval_s)
