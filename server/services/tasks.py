"""Tasks: submission, the status state machine, cancel, and the queries the API serves.

Status transitions (anything else is a Conflict):

    queued ──▶ waiting_for_worker ◀──▶ running ──▶ exporting ──▶ done
      │                │                 │  ▲          │
      │                │                 ▼  │          │
      └────────────────┴──────▶ failed / cancelled ◀───┘
                                         (running ──▶ queued: its tuner died; resumed)
                                         (done ──▶ queued: a model's next round raised its
                                          budget: server.model_job)

`reuse=true` with a stored best creates the task directly as `done`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from sqlalchemy import func, select
from sqlalchemy.orm import Session, joinedload

from tunefleet.base.settings import Settings
from tunefleet.server.db import utcnow
from tunefleet.server.db.models import BestRecord, Task, TaskStatus, Trial, TrialStatus, Worker
from tunefleet.server.errors import Conflict, FieldError, NotFound
from tunefleet.server.schemas.tasks import TaskCreate
from tunefleet.server.services import bounds, catalog, pools
from tunefleet.server.services.liveness import live_device_keys

S = TaskStatus
# Tasks read for the API come with their artifact in the same query: TaskOut includes it,
# and loading it lazily costs a query per task (per row of a list).
WITH_ARTIFACT = joinedload(Task.artifact)
FINAL: frozenset[TaskStatus] = frozenset({S.DONE, S.FAILED, S.CANCELLED})
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    S.QUEUED: frozenset({S.WAITING_FOR_WORKER, S.RUNNING, S.FAILED, S.CANCELLED}),
    S.WAITING_FOR_WORKER: frozenset({S.RUNNING, S.FAILED, S.CANCELLED}),
    S.RUNNING: frozenset({S.QUEUED, S.WAITING_FOR_WORKER, S.EXPORTING, S.FAILED, S.CANCELLED}),
    S.EXPORTING: frozenset({S.DONE, S.FAILED, S.CANCELLED}),
    S.DONE: frozenset({S.QUEUED}),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
}


def transition(task: Task, to: TaskStatus, error: str | None = None) -> None:
    """Move `task` to status `to`, stamping started_at on first run and finished_at on a
    final status; raises Conflict for a transition the state machine does not allow."""
    current = TaskStatus(task.status)
    if to not in TRANSITIONS[current]:
        raise Conflict(f"task {task.id} is {current}; it cannot become {to}")
    now = utcnow()
    task.status = to
    if to is S.RUNNING and task.started_at is None:
        task.started_at = now
    if to in FINAL:
        task.finished_at = now
    if error is not None:
        task.error = error


def gflops(flop: int, latency_s: float) -> float:
    """Throughput of a kernel doing `flop` floating-point operations in `latency_s`."""
    return flop / latency_s / 1e9


def submit(
    session: Session, request: TaskCreate, lost_after_s: float = 30.0, *, limits: Settings | None = None,
    owner: str | None = None,
) -> Task:
    """Validate `request` against the compiler (and the bounds of the server's settings
    `limits`, when given) and store it as a new task of `owner` (committed).

    Without a device key, the task goes to the one pool of live workers (heartbeat within
    `lost_after_s`) of the target's kind (any kind when no target is named); with none or
    several such pools that is a 422 on `device_key` listing them. The target follows the
    key's live hosts (services.pools.task_target): omitted or a kind alone, their best;
    one they cannot execute is a 422 on `target`. With `reuse` and a stored best for the
    same workload, target and device key, the task is `done` at once with that best's trial
    and artifact. Nothing is written when the request is invalid.
    """
    if limits is not None:
        bounds.check_request(request, limits)
    workload = catalog.make_workload(request.op, request.args)
    if limits is not None:
        bounds.check_workload(workload, limits)
    kind, parsed = catalog.requested_target(request.target)
    if kind is not None:
        catalog.check_template(workload, kind)
    device_key = request.device_key or default_device_key(session, kind, lost_after_s)
    target = pools.task_target(session, device_key, kind, parsed, lost_after_s)
    catalog.check_template(workload, target.split()[0])
    task = Task(
        op=workload.op,
        workload=workload.to_json(),
        workload_key=workload.key,
        flop=workload.flop,
        target=target,
        device_key=device_key,
        budget=request.budget.model_dump(),
        protocol=request.protocol.model_dump(),
        reuse=request.reuse,
        owner=owner,
        status=S.QUEUED,
        trials_done=0,
    )
    best = stored_best(session, workload.key, target, device_key) if request.reuse else None
    if best is not None:
        answer_with(task, best)
    session.add(task)
    session.commit()
    return task


def default_device_key(session: Session, kind: str | None, lost_after_s: float) -> str:
    """The device key of the only pool of live workers of target `kind` (None: of any
    kind); FieldError on `device_key` naming the live pools (or every known one, when none
    is live)."""
    live = live_device_keys(session, lost_after_s, kind)
    workers = f"{kind} workers" if kind else "workers"
    if len(live) == 1:
        return live[0]
    if live:
        raise FieldError(("body", "device_key"),
                         f"several pools of live {workers}: name one of {', '.join(live)}")
    known = sorted(set(session.scalars(select(Worker.device_key))))
    session.commit()
    hint = f"known device keys: {', '.join(known)}" if known else "no worker has registered yet"
    raise FieldError(("body", "device_key"),
                     f"no live {workers[:-1]} to default to: start a worker or name a device key ({hint})")


def answer_with(task: Task, best: BestRecord) -> None:
    """Make a new `task` done at once with the stored `best` record's trial, artifact and
    latency (a reused best: no trials)."""
    task.status = S.DONE
    task.started_at = task.finished_at = utcnow()
    task.best_trial_id = best.trial_id
    task.artifact_id = best.artifact_id
    task.best_latency_s = best.latency_s
    task.best_gflops = best.gflops
    task.best_disturbance = best.disturbance


def stored_best(session: Session, workload_key: str, target: str, device_key: str) -> BestRecord | None:
    """The best record of `workload_key` on `target` and `device_key`, if one is stored."""
    return session.scalars(
        select(BestRecord).where(
            BestRecord.workload_key == workload_key,
            BestRecord.target == target,
            BestRecord.device_key == device_key,
        )
    ).one_or_none()


def get(session: Session, task_id: int, for_update: bool = False) -> Task:
    """The task with `task_id` (with its artifact loaded, unless locked `for_update`);
    NotFound if there is none."""
    options = () if for_update else (WITH_ARTIFACT,)
    task = session.get(Task, task_id, options=options, with_for_update=for_update)
    if task is None:
        raise NotFound(f"task {task_id} not found")
    return task


def cancel(session: Session, task_id: int) -> Task:
    """Cancel a task that has not finished (committed); Conflict if it has."""
    task = get(session, task_id, for_update=True)
    if task.status in FINAL:
        raise Conflict(f"task {task_id} is already {task.status}; only unfinished tasks can be cancelled")
    transition(task, S.CANCELLED)
    session.commit()
    return task


def list_tasks(
    session: Session,
    *,
    status: TaskStatus | None,
    op: str | None,
    device_key: str | None,
    limit: int,
    offset: int,
) -> tuple[Sequence[Task], int]:
    """One page of tasks (with their artifacts loaded), newest first, matching every given
    filter, and the match count."""
    query = select(Task)
    if status is not None:
        query = query.where(Task.status == status)
    if op is not None:
        query = query.where(Task.op == op)
    if device_key is not None:
        query = query.where(Task.device_key == device_key)
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    page = query.options(WITH_ARTIFACT).order_by(Task.id.desc()).limit(limit).offset(offset)
    items = session.scalars(page).all()
    return items, total or 0


def list_trials(
    session: Session,
    task_id: int,
    *,
    status: TrialStatus | None,
    order: Literal["id", "latency"],
    limit: int,
    offset: int,
) -> tuple[Sequence[Trial], int]:
    """One page of a task's trials, in submission order or fastest first (unmeasured
    last), and the match count; NotFound for an unknown task."""
    get(session, task_id)
    query = select(Trial).where(Trial.task_id == task_id)
    if status is not None:
        query = query.where(Trial.status == status)
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    if order == "latency":
        query = query.order_by(Trial.latency_s.asc().nulls_last(), Trial.id)
    else:
        query = query.order_by(Trial.id)
    return session.scalars(query.limit(limit).offset(offset)).all(), total or 0


def best_trial(session: Session, task_id: int) -> tuple[Task, Trial]:
    """The task and its best trial: the one recorded as its result, else its fastest
    correct trial so far; NotFound while it has none."""
    task = get(session, task_id)
    trial = task.best_trial or session.scalars(
        select(Trial)
        .where(Trial.task_id == task_id, Trial.status == TrialStatus.OK)
        .order_by(Trial.latency_s, Trial.id)
        .limit(1)
    ).first()
    if trial is None or trial.latency_s is None:
        raise NotFound(f"task {task_id} has no correct trial yet")
    return task, trial
