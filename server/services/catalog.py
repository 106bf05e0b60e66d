"""The compiler's operator library and targets, as the API validates against them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tunefleet.compiler import ops
from tunefleet.compiler.ops import Workload, WorkloadError
from tunefleet.compiler.target import Target, TargetError, bare_kind, list_targets
from tunefleet.server.errors import FieldError

if TYPE_CHECKING:
    from tunefleet.server.services.pools import Pool


def operators() -> list[dict[str, Any]]:
    """Every operator family with its arguments and supported target kinds."""
    return ops.list()


def targets(live: Sequence[Pool] = ()) -> list[dict[str, Any]]:
    """Every target kind the compiler generates code for, each with the `live` pools with a
    host of its kind: ``{"device_key", "hosts", "default", "supports", "agree"}`` (default:
    the best target their hosts all execute, None when they share none; agree: false for a
    pool whose hosts have different best targets, which an operator should split) and, for
    such a pool, ``"targets"``: each host's best target."""
    kinds = list_targets()
    for entry in kinds:
        entry["pools"] = [_pool(pool) for pool in live if entry["kind"] in pool.kinds]
    return kinds


def _pool(pool: Pool) -> dict[str, Any]:
    best = pool.best
    out = {"device_key": pool.device_key, "hosts": len(pool.hosts), "default": str(best) if best is not None else None,
           "supports": [str(t) for t in pool.supports], "agree": pool.agree}
    if not pool.agree:
        out["targets"] = {name: str(target) for name, target in sorted(pool.hosts.items())}
    return out


def make_workload(op: str, args: dict[str, Any]) -> Workload:
    """The workload for `op` with `args`; a bad operator or argument is a FieldError
    located at `op`, `args` or `args` and the argument's path (e.g. `micro_kernel`,
    `source`)."""
    try:
        return ops.make_workload(op, args)
    except WorkloadError as exc:
        loc = ("body", exc.field) if exc.field in ("op", "args") else ("body", "args", *exc.field.split("."))
        raise FieldError(loc, str(exc)) from exc


def requested_target(target: str | None) -> tuple[str | None, Target | None]:
    """The kind and target a request names: (None, None) when omitted, (kind, None) for a
    kind alone ("cpu": the best its device key's hosts execute, decided by
    services.pools), else (kind, parsed target). Errors locate `target`."""
    if target is None:
        return None, None
    kind = bare_kind(target)
    if kind is not None:
        return kind, None
    try:
        parsed = Target.parse(target)
    except TargetError as exc:
        raise FieldError(("body", "target"), str(exc)) from exc
    return parsed.kind, parsed


def check_template(workload: Workload, kind: str) -> None:
    """FieldError on `target` when the workload's operator has no schedule template for
    target `kind`."""
    try:
        workload.template(kind)
    except WorkloadError as exc:
        raise FieldError(("body", "target"), str(exc)) from exc
