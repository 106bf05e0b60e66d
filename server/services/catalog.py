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


def parse_target(target: str, op: str) -> Target:
    """The parsed target, checked to be one `op` supports; errors locate `target`."""
    try:
        parsed = Target.parse(target)
    except TargetError as exc:
        raise FieldError(("body", "target"), str(exc)) from exc
    supported = next((o["targets"] for o in operators() if o["name"] == op), [])
    if parsed.kind not in supported:
        raise FieldError(
            ("body", "target"),
            f"operator {op!r} has schedules for targets {', '.join(supported)}, "
            f"not {parsed.kind!r}",
        )
    return parsed
