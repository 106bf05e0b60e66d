"""What tuning changes in the store: task status as tuners take, pause and finish tasks;
trials as they are dispatched and measured; the best record. Workers' liveness is
:mod:`tunefleet.server.services.liveness`.

Status changes here are conditional updates (``UPDATE ... WHERE status IN (...)``), so a
cancel committed by the API between a tuner's read and its write is never overwritten: the
tuner's change then affects no row and the function says so. Every function commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import case, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tunefleet.server.db import utcnow
from tunefleet.server.db.models import (
    BestRecord,
    Task,
    TaskStatus,
    Trial,
    TrialStatus,
    Worker,
)
from tunefleet.server.services.liveness import live_device_keys
from tunefleet.server.services.tasks import FINAL, TRANSITIONS, gflops
from tunefleet.tuner import validation
from tunefleet.tuner.measure import MeasureResult

S = TaskStatus
UNFINISHED_TRIAL = (TrialStatus.QUEUED, TrialStatus.RUNNING)


# --- tasks -----------------------------------------------------------------------------


def _move(session: Session, task_id: int, to: TaskStatus, **values: Any) -> bool:
    """Move task `task_id` to `to` if its current status allows it (committed); False when
    it does not (e.g. it was cancelled meanwhile)."""
    sources = [s for s, targets in TRANSITIONS.items() if to in targets]
    now = utcnow()
    if to is S.RUNNING:
        values.setdefault("started_at", func.coalesce(Task.started_at, now))
    if to in FINAL:
        values.setdefault("finished_at", now)
    result = session.execute(
        update(Task).where(Task.id == task_id, Task.status.in_(sources)).values(status=to, **values)
    )
    session.commit()
    return result.rowcount == 1


def tasks_needing_tuner(session: Session, lost_after_s: float) -> list[int]:
    """Ids of tasks a tuner should work on: queued and running ones, and those waiting for a
    worker or exporting whose device key has a live worker; oldest first."""
    live = live_device_keys(session, lost_after_s)
    active = Task.status.in_([S.QUEUED, S.RUNNING])
    needs_worker = Task.status.in_([S.WAITING_FOR_WORKER, S.EXPORTING]) & Task.device_key.in_(live)
    ids = list(session.scalars(select(Task.id).where(active | needs_worker).order_by(Task.id)))
    session.commit()
    return ids


def waiting_tasks(session: Session, device_key: str) -> list[int]:
    """Ids of the tasks waiting for a worker of `device_key`, oldest first."""
    return list(
        session.scalars(
            select(Task.id)
            .where(Task.status == S.WAITING_FOR_WORKER, Task.device_key == device_key)
            .order_by(Task.id)
        )
    )


def start(session: Session, task_id: int) -> bool:
    """A tuner begins (or resumes) searching: queued / waiting / running → running."""
    task = session.get(Task, task_id)
    if task is not None and task.status == S.RUNNING:
        return True
    return _move(session, task_id, S.RUNNING)


def wait_for_worker(session: Session, task_id: int) -> bool:
    """No live worker serves the task's device key: → waiting_for_worker."""
    return _move(session, task_id, S.WAITING_FOR_WORKER)


def requeue(session: Session, task_id: int) -> bool:
    """The tuner is shutting down mid-search: running → queued, for another tuner to resume."""
    result = session.execute(
        update(Task).where(Task.id == task_id, Task.status == S.RUNNING).values(status=S.QUEUED)
    )
    session.commit()
    return result.rowcount == 1


def start_export(session: Session, task_id: int) -> bool:
    """The search is over: running → exporting."""
    return _move(session, task_id, S.EXPORTING)


def fail(session: Session, task_id: int, error: str) -> bool:
    """The task cannot finish: → failed with `error`."""
    return _move(session, task_id, S.FAILED, error=error)


def status(session: Session, task_id: int) -> TaskStatus:
    """The task's current status, read from the database (not from the session's cache)."""
    value = session.scalar(select(Task.status).where(Task.id == task_id))
    session.commit()
    if value is None:
        raise LookupError(f"task {task_id} not found")
    return TaskStatus(value)


# --- trials ----------------------------------------------------------------------------


def trials_of(session: Session, task_id: int) -> Sequence[Trial]:
    """Every trial of the task, in dispatch order."""
    trials = session.scalars(select(Trial).where(Trial.task_id == task_id).order_by(Trial.id)).all()
    session.commit()
    return trials


def add_trials(session: Session, task_id: int, configs: Iterable[tuple[int, dict[str, Any]]]) -> list[Trial]:
    """Store configs `(index, config JSON)` as queued trials of the task (committed) and
    return them; a config the task already has is skipped (each is measured at most once)."""
    configs = list(configs)
    existing = set(
        session.scalars(
            select(Trial.config_index).where(
                Trial.task_id == task_id, Trial.config_index.in_([i for i, _ in configs])
            )
        )
    )
    now = utcnow()
    trials = [
        Trial(task_id=task_id, config_index=index, config=config, status=TrialStatus.QUEUED,
              attempts=0, dispatched_at=now)
        for index, config in configs
        if index not in existing
    ]
    session.add_all(trials)
    try:
        session.commit()
    except IntegrityError:  # another tuner added one of them meanwhile: add one by one
        session.rollback()
        trials = []
        for index, config in configs:
            trial = Trial(task_id=task_id, config_index=index, config=config,
                          status=TrialStatus.QUEUED, attempts=0, dispatched_at=now)
            session.add(trial)
            try:
                session.commit()
                trials.append(trial)
            except IntegrityError:
                session.rollback()
    return trials


def mark_running(session: Session, trial_ids: Iterable[int]) -> None:
    """Queued trials whose measure job a worker has started."""
    ids = list(trial_ids)
    if ids:
        session.execute(
            update(Trial)
            .where(Trial.id.in_(ids), Trial.status == TrialStatus.QUEUED)
            .values(status=TrialStatus.RUNNING)
        )
        session.commit()


def record_result(
    session: Session,
    trial_id: int,
    result: MeasureResult,
    *,
    attempts: int,
    worker_id: int | None,
) -> bool:
    """Store a trial's measure result, count it in its task's progress (trials done, best so
    far: see below for disturbed trials) and its worker's trials (committed). False, with nothing changed, when the trial
    was already recorded or is gone."""
    if worker_id is not None and session.get(Worker, worker_id) is None:
        worker_id = None
    latency = result.median if result.ok else None
    updated = session.execute(
        update(Trial)
        .where(Trial.id == trial_id, Trial.status.in_(UNFINISHED_TRIAL))
        .values(
            status=result.status,
            costs=result.costs,
            latency_s=latency,
            build_s=result.build_s,
            run_s=result.run_s,
            error=result.error or None,
            disturbance=result.disturbance if result.ok else None,
            disturbed=result.disturbed,
            attempts=attempts,
            worker_id=worker_id,
            finished_at=utcnow(),
        )
    )
    if updated.rowcount != 1:
        session.rollback()
        return False
    task_id, flop = session.execute(
        select(Task.id, Task.flop).join(Trial, Trial.task_id == Task.id).where(Trial.id == trial_id)
    ).one()
    values: dict[str, Any] = {"trials_done": Task.trials_done + 1}
    if latency is not None:
        # a disturbed timing sets the best only while there is none (then any undisturbed one
        # that is faster replaces it): a fast outlier of a busy moment cannot beat a measured best
        better = Task.best_latency_s.is_(None)
        if not result.disturbed:
            better = better | (Task.best_latency_s > latency)
        values["best_latency_s"] = case((better, latency), else_=Task.best_latency_s)
        values["best_gflops"] = case((better, gflops(flop, latency)), else_=Task.best_gflops)
        values["best_disturbance"] = case((better, result.disturbance), else_=Task.best_disturbance)
    session.execute(update(Task).where(Task.id == task_id).values(**values))
    if worker_id is not None:
        session.execute(update(Worker).where(Worker.id == worker_id).values(trials_done=Worker.trials_done + 1))
    session.commit()
    return True


def delete_unfinished(session: Session, task_id: int) -> int:
    """Drop the task's trials that were dispatched but never measured (after a cancel)."""
    result = session.execute(
        delete(Trial).where(Trial.task_id == task_id, Trial.status.in_(UNFINISHED_TRIAL))
    )
    session.commit()
    return result.rowcount or 0


def trial_result(trial: Trial) -> MeasureResult:
    """The measure result a measured trial holds (its worker's id as ``host``)."""
    return MeasureResult(
        trial.status, list(trial.costs or []), trial.build_s or 0.0, trial.run_s or 0.0, trial.error or "",
        host=str(trial.worker_id or ""),
        timestamp=trial.finished_at.timestamp() if trial.finished_at else 0.0,
        disturbance=trial.disturbance or 0.0, disturbed=bool(trial.disturbed),
    )


def best_trials(session: Session, task_id: int, n: int = validation.FINALISTS,
                keep: Iterable[int] = ()) -> list[Trial]:
    """The task's finalists: its `n` fastest correct trials by their fastest repeat, the trials of
    the config indices in `keep` (the template's rule-based configs) among them
    (:func:`tunefleet.tuner.validation.finalists`, as ``tunefleet tune`` picks them), fastest first."""
    trials = session.scalars(
        select(Trial).where(Trial.task_id == task_id, Trial.status.not_in(UNFINISHED_TRIAL)).order_by(Trial.id)
    ).all()
    session.commit()
    return validation.finalists(((t.config_index, t, trial_result(t)) for t in trials), n, keep)


# --- export ----------------------------------------------------------------------------


def finish_export(
    session: Session, task_id: int, trial_id: int, artifact_id: int, latency_s: float, disturbance: float
) -> tuple[bool, bool]:
    """The task's artifact is built and stored: exporting → done with its best trial,
    artifact and (validated) latency in seconds, with that measurement's disturbance (a
    fraction); the best record of its workload + target + device key is created, or replaced
    when this one is faster. Returns (task done, best record updated); nothing changes when the
    task is no longer exporting (cancelled)."""
    task = session.get(Task, task_id)
    if task is None:
        return False, False
    speed = gflops(task.flop, latency_s)
    done = _move(
        session, task_id, S.DONE, best_trial_id=trial_id, artifact_id=artifact_id,
        best_latency_s=latency_s, best_gflops=speed, best_disturbance=disturbance,
    )
    if not done:
        return False, False
    return True, _update_best(session, task, trial_id, artifact_id, latency_s, speed, disturbance)


def _update_best(
    session: Session, task: Task, trial_id: int, artifact_id: int, latency_s: float, speed: float,
    disturbance: float,
) -> bool:
    where = (
        BestRecord.workload_key == task.workload_key,
        BestRecord.target == task.target,
        BestRecord.device_key == task.device_key,
    )
    for _ in range(2):  # a concurrent insert of the same key makes the second round an update
        best = session.scalars(select(BestRecord).where(*where).with_for_update()).one_or_none()
        if best is not None and best.latency_s <= latency_s:
            session.rollback()
            return False
        if best is None:
            session.add(BestRecord(
                workload_key=task.workload_key, target=task.target, device_key=task.device_key,
                trial_id=trial_id, artifact_id=artifact_id, latency_s=latency_s, gflops=speed,
                disturbance=disturbance,
            ))
        else:
            best.trial_id, best.artifact_id = trial_id, artifact_id
            best.latency_s, best.gflops, best.disturbance, best.updated_at = latency_s, speed, disturbance, utcnow()
        try:
            session.commit()
            return True
        except IntegrityError:
            session.rollback()
    return False
