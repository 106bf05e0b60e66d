"""Constant weights pre-packed: a model's convolutions and linear layers whose weights never
change take them in the blocked layout their kernel computes from, packed once when the model is
loaded instead of on every call (compiler.ops.prepacked).

`prepack_weights(extraction, target)` rewrites each match whose pre-packable argument
(compiler.ops.prepacked.PREPACKED_ARGS: a conv2d_nchw's weight, a matmul's B, a dense's W) is a
constant of the model (an initializer or a Constant's output) to the workload taking it in
`prepacked_layout` for the target (where that is not None) and regroups the matches into tasks
by their new workloads. The bundle's manifest then names the layout of each such argument
(`pack`), and `tunefleet.load`'s ModelBundle.arguments packs an ONNX tensor to it.
"""

from __future__ import annotations

import dataclasses

from tunefleet.compiler.ops.prepacked import PREPACKED_ARGS, with_prepacked_weights
from tunefleet.compiler.target import Target

from .extract import Extraction, Task
from .patterns import Match

__all__ = ["prepack_weights"]


def _prepacked(match: Match, target: Target) -> Match:
    arg = PREPACKED_ARGS.get(match.workload.op, (None,))[0]
    weight = next((b for b in match.bindings if b.arg == arg), None)
    if weight is None or not weight.constant:
        return match
    return dataclasses.replace(match, workload=with_prepacked_weights(match.workload, target))


def prepack_weights(extraction: Extraction, target: Target) -> Extraction:
    """`extraction` with the constant weights of its convolutions and linear layers pre-packed for
    `target` (the module docstring); tasks keep the order of their first match, the untuned nodes are kept."""
    tasks: dict[str, Task] = {}
    for task in extraction.tasks:
        for match in task.matches:
            match = _prepacked(match, target)
            tasks.setdefault(match.workload.key, Task(match.workload, [])).matches.append(match)
    return Extraction(list(tasks.values()), extraction.untuned)
