"""custom: any computation written in the tensor-expression JSON (`te.to_json`), e.g. softmax,
layernorm or an elementwise chain — an operator nobody wrote a template for.

The single argument `te` is the JSON data. Validation (WorkloadError on field "te") parses
it with `te.from_json` (identifiers and node kinds checked, nothing evaluated, nesting at most
te.MAX_EXPR_DEPTH deep), requires every declared input to be read, proves every load in bounds,
and bounds the expressions the generic template lowers once it inlined the stages, in nodes
and in depth (`te_analysis.inlined_size`): a chain of 30 tensors each reading the one before
twice is a few kilobytes of JSON but 2**30 nodes inlined, which a builder would lower for hours
(2**14: 4 s, AMD Zen 4). The kernel's arguments are the placeholders in the order the JSON
declares them, then the outputs in the order of "outputs". The reference is the numpy
interpreter (`te_numpy`), the FLOP count a walk of the expressions, the CPU template the
generic one (`generic`).
"""

from __future__ import annotations

import numpy as np

from .. import te
from . import generic
from .registry import ArgDef, OpDef, WorkloadError, register
from .te_analysis import check_loads_in_bounds, count_flop, inlined_size
from .te_numpy import evaluate

ARGS = [
    ArgDef("te", "json", None, required=True,
           description="the computation as te.to_json data: {version, tensors: [...], outputs: [names]}"),
]


def _parse(a: dict) -> tuple[list[te.Tensor], list[te.Tensor]]:
    """(inputs in declaration order, outputs); WorkloadError('te') for bad JSON."""
    try:
        outputs = te.from_json(a["te"])
    except te.TEError as e:
        raise WorkloadError("te", str(e)) from None
    declared = [t["name"] for t in a["te"]["tensors"] if t.get("op") == "placeholder"]
    inputs = sorted(te.inputs_of(outputs), key=lambda t: declared.index(t.name))
    unread = [n for n in declared if n not in {t.name for t in inputs}]
    if unread:
        raise WorkloadError("te", f"input(s) {unread} are declared but no output reads them")
    return inputs, outputs


#: Most nodes of an expression once the generic template inlined the stages into their readers
#: (`te_analysis.inlined_size`; its depth is bounded by te.MAX_EXPR_DEPTH as each stage's is):
#: as many as the JSON may hold in all, so inlining lowers nothing larger than a user could write.
MAX_INLINED_NODES = te.MAX_JSON_NODES


def check(a: dict) -> None:
    _, outputs = _parse(a)
    try:
        check_loads_in_bounds(outputs)
    except te.TEError as e:
        raise WorkloadError("te", str(e)) from None
    nodes, depth = inlined_size(outputs)
    if nodes > MAX_INLINED_NODES:
        raise WorkloadError("te", f"inlined into their readers, the tensors make an expression of more than "
                                  f"{MAX_INLINED_NODES} nodes (a tensor read n times by the next multiplies "
                                  f"its expression by n); read each intermediate tensor fewer times")
    if depth > te.MAX_EXPR_DEPTH:
        raise WorkloadError("te", f"inlined into their readers, the tensors make an expression that nests "
                                  f"deeper than {te.MAX_EXPR_DEPTH} levels ({depth}); chain fewer tensors")


def compute(a: dict) -> list[te.Tensor]:
    inputs, outputs = _parse(a)
    return [*inputs, *outputs]


def reference(a: dict, *arrays: np.ndarray) -> list[np.ndarray]:
    inputs, outputs = _parse(a)
    return evaluate(outputs, {t.name: x for t, x in zip(inputs, arrays)})


def flop(a: dict) -> int:
    return count_flop(_parse(a)[1])


def cpu_template(cfg, workload, target):
    inputs, outputs = _parse(workload.args)
    cfg.add_flop(count_flop(outputs))
    return generic.template(cfg, outputs, inputs, target.lanes(outputs[0].dtype))


def _layouts(a: dict) -> dict[str, str]:
    inputs, outputs = _parse(a)
    return {t.name: f"row-major {list(t.shape)}" for t in (*inputs, *outputs)}


register(OpDef(
    name="custom",
    description="any computation given as tensor-expression JSON (te.to_json), with a generic CPU template",
    args=ARGS, compute=compute, reference=reference, flop=flop, templates={"cpu": cpu_template},
    check=check, layouts=_layouts, family="custom",
))
