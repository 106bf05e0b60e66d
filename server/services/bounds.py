"""The server's bounds on what one task may ask for (tunefleet.base.settings: max_trials,
max_trial_timeout_s, max_min_repeat_ms, max_operand_bytes, max_extern_source_bytes),
checked at submission; each violation is a FieldError naming the field and the bound."""

from __future__ import annotations

from tunefleet.base.settings import Settings
from tunefleet.compiler.ops import Workload
from tunefleet.compiler.te import dtype_of
from tunefleet.server.errors import FieldError
from tunefleet.server.schemas.tasks import Protocol, TaskCreate

#: The largest FLOP count stored (tasks.flop is a signed 64-bit integer).
MAX_FLOP = 2**63 - 1


def check_request(request: TaskCreate, settings: Settings) -> None:
    """The budget and protocol within the settings' bounds; FieldError otherwise."""
    _at_most(("body", "budget", "trials"), request.budget.trials, settings.max_trials, "max_trials")
    if request.budget.early_stopping is not None:
        _at_most(("body", "budget", "early_stopping"), request.budget.early_stopping,
                 settings.max_trials, "max_trials")
    check_protocol(request.protocol, settings, ("body", "protocol"))


def check_protocol(protocol: Protocol, settings: Settings, loc: tuple[str, ...]) -> None:
    """The protocol's timeout_s and min_repeat_ms within the settings' bounds; FieldError on
    `loc` + the field otherwise."""
    _at_most((*loc, "timeout_s"), protocol.timeout_s, settings.max_trial_timeout_s, "max_trial_timeout_s")
    _at_most((*loc, "min_repeat_ms"), protocol.min_repeat_ms, settings.max_min_repeat_ms, "max_min_repeat_ms")


def check_workload(workload: Workload, settings: Settings) -> None:
    """The workload's operands (inputs and outputs, bytes) and extern sources within the
    settings' bounds, and its FLOP count storable; FieldError on `args` otherwise."""
    for loc, source in extern_sources(workload):
        size = len(source.encode())
        if size > settings.max_extern_source_bytes:
            raise FieldError(("body", *loc), f"extern source of {size} bytes; this server takes at most "
                             f"{settings.max_extern_source_bytes} (max_extern_source_bytes)")
    tensors = workload.tensors()
    size = sum(t.size * dtype_of(t.dtype).bytes for t in tensors)
    if size > settings.max_operand_bytes:
        shapes = ", ".join(f"{t.name}{list(t.shape)}" for t in tensors)
        raise FieldError(("body", "args"), f"operands of {size} bytes ({shapes}); this server takes at most "
                         f"{settings.max_operand_bytes} (max_operand_bytes)")
    if workload.flop > MAX_FLOP:
        raise FieldError(("body", "args"), f"{workload.flop} floating-point operations; at most {MAX_FLOP}")


def extern_sources(workload: Workload) -> list[tuple[tuple[str, ...], str]]:
    """(location, text) of every extern C source the workload carries: the `source` of
    each object-valued argument (e.g. matmul's `micro_kernel`)."""
    found = []
    for arg in workload.opdef.args:
        value = workload.args.get(arg.name)
        if arg.type == "json" and isinstance(value, dict) and isinstance(value.get("source"), str):
            found.append((("args", arg.name, "source"), value["source"]))
    return found


def _at_most(loc: tuple[str, ...], value: float, limit: float, setting: str) -> None:
    if value > limit:
        raise FieldError(loc, f"must be at most {limit:g} on this server ({setting}), got {value:g}")
