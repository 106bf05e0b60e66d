"""Imported by the measurement fork server only (first of :data:`.processes.PRELOAD`): ties
the fork server's life to the process that started it (:func:`.lifeline.die_with_parent`).

Multiprocessing ends a fork server once every holder of its "alive" pipe is gone, but it hands
that pipe to every process it forks, so a builder or measurement process keeps it alive, and
they keep each other running after their owner is killed. With this, the kernel kills the fork
server when its owner ends, and the processes it forked die with it (:func:`.processes.adopt`).
An owner that ended before this ran is noticed by multiprocessing itself (no fork yet holds the
pipe)."""

import signal

from .lifeline import die_with_parent

die_with_parent(signal.SIGKILL)
