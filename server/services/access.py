"""Who may see and do what with a task: its owner and admins manage it (cancel, download
its artifact) and read its sources (object-valued arguments: extern micro-kernels, custom
tensor expressions) and error texts; everyone else with read access sees the task without
them. Best records stay shared: a task's best latency, GFLOP/s and config are not sources."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunefleet.compiler import ops
from tunefleet.server.db.models import Task, TokenScope
from tunefleet.server.errors import Conflict, Forbidden
from tunefleet.server.schemas.tasks import TaskOut, TrialOut
from tunefleet.server.services.tasks import FINAL

#: What a hidden source or error text reads as.
HIDDEN = "hidden: only the task's owner and admins see it"


@dataclass(frozen=True)
class Caller:
    """Who sent a request: the token's name and scope, or anonymous (both None; only for
    reads, and only where the server's `anonymous_read` setting opens them)."""

    name: str | None
    scope: TokenScope | None

    @property
    def admin(self) -> bool:
        """Whether the caller may act on every task."""
        return self.scope is TokenScope.ADMIN

    def owns(self, owner: str | None) -> bool:
        """Whether the caller may manage a task owned by `owner` (its owner or an admin)."""
        return self.admin or (self.name is not None and self.name == owner)


def require_owner(caller: Caller, task: Task) -> None:
    """Forbidden unless `caller` owns `task` or is an admin."""
    if not caller.owns(task.owner):
        raise Forbidden(f"task {task.id} belongs to another user; only its owner or an admin may do this")


def task_out(task: Task, caller: Caller) -> TaskOut:
    """`task` as `caller` may see it: without its sources and error text unless theirs."""
    out = TaskOut.model_validate(task)
    return out if caller.owns(task.owner) else hide_task(out)


def hide_task(out: TaskOut) -> TaskOut:
    """`out` with its sources (object-valued workload arguments) and error text hidden."""
    sources = {a.name for a in ops.get(out.op).args if a.type == "json"}
    args = out.workload.get("args") or {}
    hidden = {name: HIDDEN if name in sources and value is not None else value for name, value in args.items()}
    return out.model_copy(update={
        "workload": {**out.workload, "args": hidden}, "error": HIDDEN if out.error else None, "sources_hidden": True,
    })


def trial_out(trial: object, caller: Caller, owner: str | None) -> TrialOut:
    """A trial of a task owned by `owner`, its error text hidden unless `caller` may see it."""
    out = TrialOut.model_validate(trial)
    return out if caller.owns(owner) or out.error is None else out.model_copy(update={"error": HIDDEN})


def check_queue(session: Session, owner: str, limit: int) -> None:
    """Conflict when `owner` already has `limit` unfinished tasks."""
    unfinished = session.scalar(
        select(func.count()).select_from(Task).where(Task.owner == owner, Task.status.not_in(FINAL))
    ) or 0
    if unfinished >= limit:
        raise Conflict(f"{owner} has {unfinished} unfinished tasks, the most this server queues per user "
                       f"(max_queued_tasks_per_user); wait for some to finish or cancel some")
