"""Processes that die with their parent, however the parent dies (``kill -9`` included).

Linux's ``prctl(PR_SET_PDEATHSIG, sig)`` (prctl(2)) asks the kernel to send ``sig`` to the
calling process when the thread that forked it ends. The setting survives ``execve``, so a
process can set it and then become another program (:func:`main`, which the embedded service
puts in front of every child it starts, redis-server included).

The kernel only delivers the signal if the parent dies *after* the call; :func:`die_with_parent`
therefore checks, once the setting is in place, that the process it belongs to is still there
and exits otherwise.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["command", "die_with_parent", "main"]

#: From <linux/prctl.h>.
PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL, *, alive: int | None = None) -> None:
    """Have the kernel send `sig` to this process when its parent (the thread that forked it)
    ends. `alive`: the pid of the process whose life this one belongs to (its parent, or the
    process that asked a fork server for it); if that one is already gone, this process
    ends now with `sig`, as it would have a moment later. OSError when prctl fails (not Linux)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")
    if alive is not None:
        try:
            os.kill(alive, 0)
        except ProcessLookupError:
            os.kill(os.getpid(), sig)
        except PermissionError:  # it exists, under another uid
            pass


def command(argv: list[str], sig: str = "TERM", parent: int = 0) -> list[str]:
    """The command line that runs `argv` behind :func:`main`: it gets `sig` (a name such as
    ``TERM``) when its parent ends; `parent`: the pid its life belongs to (0: no check)."""
    return [sys.executable, "-m", "tunefleet.tuner.lifeline", sig, str(parent), *argv]


def main(argv: list[str] | None = None) -> None:
    """``python -m tunefleet.tuner.lifeline SIGNAL PARENT_PID PROGRAM [ARG...]``: set the
    parent-death signal (a name such as ``TERM``), then exec PROGRAM. PARENT_PID is the pid
    the program's life belongs to, checked as in :func:`die_with_parent` (``0``: no check)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 3:
        sys.exit("usage: python -m tunefleet.tuner.lifeline SIGNAL PARENT_PID PROGRAM [ARG...]")
    sig = signal.Signals["SIG" + args[0].upper().removeprefix("SIG")]
    die_with_parent(sig, alive=int(args[1]) or None)
    os.execvp(args[2], args[2:])


if __name__ == "__main__":
    main()
