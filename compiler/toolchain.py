"""The C compiler builds run, and the error of a failed build: what both the builds
(:mod:`.build`) and the sandbox's self-test (:func:`.sandbox.detect`) need."""

from __future__ import annotations

import os
import shlex
import shutil

__all__ = ["BuildError", "compiler_command"]


class BuildError(RuntimeError):
    """A build that failed: compiler missing, compile/link error, timeout, oversized source.

    `compiler_output` holds the compiler's stderr and stdout ("" when it did not run);
    the message includes it.
    """

    def __init__(self, message: str, compiler_output: str = "") -> None:
        super().__init__(f"{message}\n{compiler_output}".rstrip())
        self.compiler_output = compiler_output


def compiler_command() -> list[str]:
    """The C compiler command: `$CC` split like a shell would (default "gcc"), its program
    resolved to an absolute path. Raises BuildError if the program is not found."""
    cc = shlex.split(os.environ.get("CC", "gcc")) or ["gcc"]
    path = shutil.which(cc[0])
    if path is None:
        raise BuildError(f"C compiler {cc[0]!r} not found (set $CC or install gcc)")
    return [path, *cc[1:]]
