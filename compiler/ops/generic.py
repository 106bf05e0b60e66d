"""A generic CPU schedule template for any tensor-expression computation (custom workloads).

What it does with the stages of `create_schedule(outputs)`, in the spirit of TVM's
generic injective / reduction schedules (`topi.generic.schedule_injective`,
`schedule_reduce`):

- injective stages (no reduction) that are not outputs are inlined into their consumers;
- every root stage (the outputs, and the reductions the `reduce_at` knob leaves at the
  root) gets its innermost data axis split by `vec` and the inner part vectorized, and
  its outer data loops — the first `parallel` of them — fused into one parallel loop;
- a reduction puts its reduce loops either innermost (`reduce_order="inner"`: a scalar
  accumulation, no vectorized axis) or just outside the vectorized data axis ("outer":
  the accumulation is vectorized across data points);
- with one output, `reduce_at="consumer"` computes each non-output reduction inside the
  output's parallel loop, for the slice that iteration needs (e.g. a row's max and sum in
  softmax), so the data is read while still in cache;
- an injective stage read by several stages (softmax's exp) is inlined into each, or, with
  `shared="materialize"`, computed once and placed like the reductions.

The knobs are defined from the first output's rank and apply to every root stage.
"""

from __future__ import annotations

from typing import Sequence

from ..expr import Reduce
from ..schedule import Schedule, Stage, create_schedule
from ..te import Tensor


def _classify(sch: Schedule, outputs: Sequence[Tensor]) -> tuple[list[Stage], list[Stage], list[Stage]]:
    """(non-output injective stages, the shared ones among them — read by two or more stages —,
    non-output reduction stages), each in stage order."""
    out_ids = {id(t) for t in outputs}
    inner = [st for st in sch.stages if id(st.tensor) not in out_ids]
    readers = {id(st.tensor): sum(1 for r in sch.stages if st.tensor in r.op.input_tensors()) for st in inner}
    injective = [st for st in inner if not isinstance(st.op.body, Reduce)]
    return (injective, [st for st in injective if readers[id(st.tensor)] > 1],
            [st for st in inner if isinstance(st.op.body, Reduce)])


def define_knobs(cfg, sch: Schedule, outputs: Sequence[Tensor], lanes: int) -> None:
    """parallel (outer loops fused into the parallel loop), vec (inner split, vectorized),
    reduce_order (when there are reductions), reduce_at (with one output and reductions
    before it), shared ('inline' or 'materialize' injective stages read by several stages,
    e.g. softmax's exp, placed like the reductions; only when there are such stages)."""
    _, shared, reductions = _classify(sch, outputs)
    cfg.define_knob("parallel", list(range(1, max(1, outputs[0].ndim) + 1)))
    cfg.define_knob("vec", [lanes, 2 * lanes, 4 * lanes])
    if any(isinstance(st.op.body, Reduce) for st in sch.stages):
        cfg.define_knob("reduce_order", ["inner", "outer"])
    if (reductions or shared) and len(outputs) == 1:
        cfg.define_knob("reduce_at", ["consumer", "root"])
    if shared:
        cfg.define_knob("shared", ["inline", "materialize"])


def _schedule_loops(st: Stage, cfg, parallel: bool):
    """Split/vectorize/reorder the loops of one stage; return its parallel loop (or None)."""
    data, red = list(st.op.axis), list(st.op.reduce_axis)
    vec = None
    if data and (not red or cfg["reduce_order"].val == "outer"):
        last, factor = data.pop(), cfg["vec"].val
        if last.extent > factor:
            outer, vec = st.split(last, factor=factor)
            data.append(outer)
        else:
            vec = last
    st.reorder(*data, *red, *([vec] if vec is not None else []))
    if vec is not None:
        st.vectorize(vec)
    depth = min(cfg["parallel"].val, len(data))
    if not parallel or depth == 0:
        return None
    axis = st.fuse(*data[:depth])
    st.parallel(axis)
    return axis


def schedule(sch: Schedule, cfg, outputs: Sequence[Tensor]) -> None:
    """Apply the generic template (module docstring) to `sch`, whose knobs define_knobs made."""
    injective, shared, reductions = _classify(sch, outputs)
    kept = shared if shared and cfg["shared"].val == "materialize" else []
    for st in injective:
        if st not in kept:
            st.compute_inline()
    axes = [_schedule_loops(sch[t], cfg, parallel=True) for t in outputs]
    placed = [st for st in sch.stages if st in kept or st in reductions]
    attach = None
    if placed and len(outputs) == 1 and cfg["reduce_at"].val == "consumer":
        attach = axes[0]  # None when the output has no outer loop: the stages stay at the root
    for st in placed:
        if attach is not None:
            st.compute_at(sch[outputs[0]], attach)
        _schedule_loops(st, cfg, parallel=attach is None)


def template(cfg, outputs: Sequence[Tensor], inputs: Sequence[Tensor], lanes: int):
    """(Schedule, kernel arguments: inputs then outputs) for the computation of `outputs`."""
    sch = create_schedule(list(outputs))
    define_knobs(cfg, sch, outputs, lanes)
    schedule(sch, cfg, outputs)
    return sch, [*inputs, *outputs]
