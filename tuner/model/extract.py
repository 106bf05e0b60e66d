"""Task extraction: a model's tunable subgraphs as deduplicated workloads, and the rest.

Every anchor node (patterns.ANCHORS) that maps onto an operator becomes a `Match`; matches of
the same workload (the same canonical operator and arguments) form one `Task`, whose weight is
its number of occurrences. Every node no match takes in is reported as an `UntunedNode` with
the reason and its FLOPs, so that the report can say which share of the model's work the
tuned kernels cover.

FLOPs: a task's are its operator's (2 per multiply-add, the fused bias and activation not
counted); an untuned Conv / Gemm / MatMul counts 2 per multiply-add too, any other node one per
output element (0 for the nodes that only move or describe data, e.g. Reshape, Shape).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from tunefleet.compiler import ops

from .graph import ModelError, ModelGraph, Problem
from .patterns import Match, Unhandled, Untuned, match_at

if TYPE_CHECKING:
    import onnx

__all__ = ["Task", "UntunedNode", "Extraction", "extract_tasks", "node_flop"]

#: Nodes that only move or describe data: no arithmetic.
DATA_MOVEMENT = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "Shape",
                           "Constant", "Concat", "Split", "Slice", "Gather", "Cast", "Expand", "Dropout"})


@dataclasses.dataclass
class Task:
    """A distinct workload of the model and every place it occurs (`matches`, graph order)."""

    workload: ops.Workload
    matches: list[Match]

    @property
    def occurrences(self) -> int:
        return len(self.matches)

    @property
    def flop(self) -> int:
        """FLOPs of one occurrence."""
        return self.workload.flop


@dataclasses.dataclass(frozen=True)
class UntunedNode:
    """A node no kernel replaces: its name, op type, the reason and its FLOPs."""

    node: str
    op_type: str
    reason: str
    flop: int


@dataclasses.dataclass
class Extraction:
    """The `tasks` (by first occurrence) and `untuned` nodes (graph order) of a model."""

    tasks: list[Task]
    untuned: list[UntunedNode]

    @property
    def total_flop(self) -> int:
        """FLOPs of the whole model: every occurrence of every task and every untuned node."""
        return sum(t.flop * t.occurrences for t in self.tasks) + sum(u.flop for u in self.untuned)

    def share(self, task: Task) -> float:
        """The fraction of the model's FLOPs in all occurrences of `task`."""
        return task.flop * task.occurrences / max(1, self.total_flop)

    @property
    def untuned_share(self) -> float:
        """The fraction of the model's FLOPs in untuned nodes."""
        return sum(u.flop for u in self.untuned) / max(1, self.total_flop)


def node_flop(graph: ModelGraph, node: onnx.NodeProto) -> int:
    """The FLOPs of one node run alone (see the module docstring); 0 when its shapes are unknown."""
    if node.op_type in DATA_MOVEMENT:
        return 0
    shapes = [graph.info(t) for t in node.input if t]
    out = graph.info(node.output[0]) if node.output else None
    if out is None or any(s is None for s in shapes[:2]):
        return 0
    if node.op_type == "Conv":
        weight = shapes[1].shape  # [CO, CI/group, KH, KW]
        return 2 * math.prod(out.shape) * math.prod(weight[1:])
    if node.op_type in ("Gemm", "MatMul"):
        a = shapes[0].shape
        transposed = node.op_type == "Gemm" and any(x.name == "transA" and x.i for x in node.attribute)
        return 2 * math.prod(out.shape) * (a[-2] if transposed else a[-1])
    return math.prod(out.shape)


def _reason(node: onnx.NodeProto) -> str:
    if node.op_type in DATA_MOVEMENT:
        return "data movement: no kernel needed"
    return f"no operator for {node.op_type}"


def extract_tasks(graph: ModelGraph) -> Extraction:
    """The tasks and untuned nodes of `graph` (see the module docstring).

    Raises ModelError listing every anchor node that makes the model untunable as given (a
    shape unknown after inference, a dtype the operators do not compute in).
    """
    tasks: dict[str, Task] = {}
    taken: set[str] = set()
    reasons: dict[str, str] = {}
    problems = []
    for node in graph.nodes:
        if node.name in taken:
            continue
        try:
            found = match_at(graph, node)
        except Untuned as exc:
            reasons[node.name] = str(exc)
            continue
        except Unhandled as exc:
            problems.append(Problem(node.name, node.op_type, str(exc)))
            continue
        if found is None:
            continue
        taken.update(found.nodes)
        tasks.setdefault(found.workload.key, Task(found.workload, [])).matches.append(found)
    if problems:
        raise ModelError(problems)
    untuned = [UntunedNode(n.name, n.op_type, reasons.get(n.name) or _reason(n), node_flop(graph, n))
               for n in graph.nodes if n.name not in taken]
    return Extraction(list(tasks.values()), untuned)
