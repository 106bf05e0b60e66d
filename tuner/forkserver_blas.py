"""Imported by the measurement fork server only, before the parent's main module
(:data:`.processes.PRELOAD`): numpy's BLAS, and an OpenBLAS the main module loads, get one
thread there, so no process forked from it has BLAS threads that spin beside a timed candidate.
(The sandboxed child, a fresh Python, gets the same from ``OPENBLAS_NUM_THREADS=1`` in its
environment: :mod:`.runner`.)

numpy's OpenBLAS starts a pool of one thread per CPU when it loads, and a forked child rebuilds
that pool the first time it touches BLAS, even to lower its thread count: a ``threadpoolctl``
limit of one thread in the measurement child created a pool thread that spun for about 0.1 s,
through the candidate's timing. On a 2-CPU AMD Zen 5 VM a 256³ matmul measured on both CPUs
ran at 1.6x its own time (median over 30 trials; repeats up to 4x), the spinning thread's share
of the CPUs counted as each trial's disturbance (0.9). A multi-threaded BLAS would spin in the
child after each call too (about 0.1 s), and the correctness check calls it right before the
timing."""

import os

os.environ["OPENBLAS_NUM_THREADS"] = "1"  # where numpy is not loaded yet: it starts with one thread

import numpy  # noqa: E402,F401
from threadpoolctl import threadpool_limits  # noqa: E402

threadpool_limits(1, user_api="blas")  # where a module imported before this one loaded it already
