"""From the JSON of a trial (workload, target string, config) back to compiler objects.

Measure inputs and records carry plain JSON so they can travel between
processes and hosts; builders, features and ``apply_best`` turn them back into
a :class:`~tunefleet.compiler.ops.Workload`, a
:class:`~tunefleet.compiler.target.Target` and a
:class:`~tunefleet.compiler.space.ConfigEntity`. Config spaces are cached per
(workload, target), since a template's define run is repeated for every trial
otherwise.
"""

from __future__ import annotations

import functools
import json

from tunefleet.compiler import ops
from tunefleet.compiler.space import ConfigEntity, ConfigSpace
from tunefleet.compiler.target import Target

__all__ = ["workload_space", "resolve"]


@functools.lru_cache(maxsize=64)
def _workload_space(canonical: str, target: str) -> tuple[ops.Workload, Target, ConfigSpace]:
    workload = ops.Workload.from_json(json.loads(canonical))
    parsed = Target.parse(target)
    return workload, parsed, ops.config_space(workload, parsed)


def workload_space(workload: dict, target: str) -> tuple[ops.Workload, Target, ConfigSpace]:
    """The workload, target and config space of a workload JSON and a target string (cached).

    Raises WorkloadError (unknown operator or bad argument, naming the field)
    or TargetError.
    """
    return _workload_space(json.dumps(workload, sort_keys=True), target)


def resolve(workload: dict, target: str, config: dict) -> tuple[ops.Workload, Target, ConfigEntity]:
    """The workload, target and config of a trial's JSON. Raises as :func:`workload_space`, and
    ConfigError when the config does not fit the space."""
    w, t, space = workload_space(workload, target)
    return w, t, space.from_json(config)
