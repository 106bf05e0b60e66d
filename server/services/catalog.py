"""The compiler's operator library and targets, as the API validates against them."""

from __future__ import annotations

from typing import Any

from tunefleet.compiler import ops
from tunefleet.compiler.ops import Workload, WorkloadError
from tunefleet.compiler.target import Target, TargetError, list_targets
from tunefleet.server.errors import FieldError


def operators() -> list[dict[str, Any]]:
    """Every operator family with its arguments and supported target kinds."""
    return ops.list()


def targets() -> list[dict[str, Any]]:
    """Every target kind the compiler generates code for."""
    return list_targets()


def make_workload(op: str, args: dict[str, Any]) -> Workload:
    """The workload for `op` with `args`; a bad operator or argument is a FieldError
    located at `op`, `args` or `args.<name>`."""
    try:
        return ops.make_workload(op, args)
    except WorkloadError as exc:
        loc = ("body", exc.field) if exc.field in ("op", "args") else ("body", "args", exc.field)
        raise FieldError(loc, str(exc)) from exc


def parse_target(target: str, workload: Workload) -> Target:
    """The parsed target, checked to be one the workload's operator has a schedule
    template for; errors locate `target`."""
    try:
        parsed = Target.parse(target)
        workload.template(parsed.kind)
    except (TargetError, WorkloadError) as exc:
        raise FieldError(("body", "target"), str(exc)) from exc
    return parsed
