"""Test helper for operators: build configs of a workload's template with gcc, run them on
random inputs and compare with the operator's numpy reference, as a measurement does
(``measure_child.outputs_error``: the tolerance of the least precise dtype of each output and
of its arithmetic).

    cases = sample(workload, n=20, seed=1)              # [(workload, config)], default first
    assert not failures(cases)                           # [] when every build matches

Both take a `target` (default: this host's best); code for a target this host cannot
execute is built only. Builds run in threads (gcc is a subprocess, so they overlap); kernels
run one at a time.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tunefleet.compiler import ops
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.target import Target
from tunefleet.tuner.measure_child import outputs_error, relative_error  # noqa: F401  (for the tests)

TARGET = Target.host()
THREADS = 3


def sample(workload, n: int, seed: int, *, default: bool = True, target: Target = TARGET) -> list:
    """The default config (when `default`) and `n` distinct random configs of the workload's
    space for `target`."""
    space = ops.config_space(workload, target)
    configs = [ops.default_config(workload, target)] if default else []
    configs += [c for c in space.random(np.random.default_rng(seed), n) if c not in configs]
    return [(workload, c) for c in configs]


def _check(case, seed: int, built, target: Target) -> str | None:
    workload, config = case
    if isinstance(built, Exception):
        return f"{workload.args} {config.to_json()['knobs']}: {type(built).__name__}: {built}"
    if not target.runs_on(TARGET):
        return None  # built by gcc; running it here would SIGILL
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(seed))
    wrong = outputs_error(workload, built.args, built.run(*inputs), workload.reference(*inputs))
    return f"{workload.args} {config.to_json()['knobs']}: {wrong}" if wrong else None


def _build(case, target: Target):
    try:
        return build_workload(case[0], case[1], target)
    except Exception as e:  # reported with the case
        return e


def failures(cases: list, seed: int = 0, target: Target = TARGET) -> list[str]:
    """Descriptions of the cases whose build for `target` fails or whose output differs from
    the reference (compared only where this host executes `target`)."""
    with ThreadPoolExecutor(THREADS) as pool:
        built = list(pool.map(lambda case: _build(case, target), cases))
    return [msg for case, b in zip(cases, built) if (msg := _check(case, seed, b, target)) is not None]
