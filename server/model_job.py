"""Whole-model tuning in the service: a model's global trial budget spent over its tasks in
rounds chosen by a task scheduler (tunefleet.tuner.model.scheduler), each round run by the
ordinary task machinery (the one TuningLoop of ``tuner_job.run_task``, then the export job).

:func:`advance` moves a model on; it is quick, idempotent and holds a Redis lock per model,
and runs after a model is submitted, after each tune job of one of its tasks, and in every
tuner's reconcile sweep (so a restarted tuner, or a lost job, loses nothing). One call:

1. **Reuse** (first call): a task whose workload has a stored best record for the model's
   target and device key is answered by it at once (a ``reuse`` task, done, no trials) and
   left out of the scheduler: a layer tuned before costs nothing.
2. **Rounds that ended**: a running round whose task is final is done; its latency (the
   task's validated best, seconds; inf when the task failed) goes to the scheduler's
   ``update`` and the model's
   estimate (Σ occurrences × best latency) is stored with it for the history.
3. **Replay**: the scheduler is rebuilt from SQL by replaying its calls (`next_round` pulls
   and `update`\\ s, in the order the model's event counter gave them), so its state survives
   any restart. A scheduler must therefore be deterministic given its calls.
4. **New rounds**: while fewer rounds run than the device key has live workers (at least
   one), the next round is pulled and started: its task's trial budget is raised by the
   round's trials and the task (re)queued: created at its first round, reopened (done →
   queued) after that; the loop resumes from its trials in SQL and counts them, so a round
   measures exactly its new trials, then the export job re-validates the finalists. A round
   chosen for a task that is still busy waits (``pending``) and no further round is pulled
   until it starts.
5. **End**: once the scheduler answers None and no round is left, the model is ``done``.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Sequence

from redis import Redis
from redis.exceptions import LockError, RedisError
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from tunefleet.base.settings import Settings
from tunefleet.server import queue
from tunefleet.server.db import utcnow
from tunefleet.server.db.models import (Model, ModelRound, ModelStatus, ModelTask, RoundStatus, Task, TaskStatus)
from tunefleet.server.services import liveness, models, tasks
from tunefleet.tuner.model import scheduler
from tunefleet.tuner.model.scheduler import TaskScheduler

__all__ = ["advance", "advance_unfinished", "advance_model_of", "make_scheduler", "FINAL"]

log = logging.getLogger(__name__)

#: Model statuses no round changes any more.
FINAL = frozenset({ModelStatus.DONE, ModelStatus.FAILED, ModelStatus.CANCELLED})
#: Seconds a model's lock is held at most (an advance takes milliseconds).
LOCK_S = 60


def make_scheduler(tuned: Sequence[ModelTask], budget: int) -> TaskScheduler:
    """The task scheduler of a model's `tuned` tasks (those not reused) with `budget` trials in
    all: the tuner's default (tunefleet.tuner.model.scheduler.SCHEDULERS[0], Ansor's gradient
    scheduler), as `tunefleet tune-model` uses it."""
    return scheduler.make_scheduler(scheduler.SCHEDULERS[0], [models.extraction_task(t) for t in tuned], budget)


def advance(session: Session, settings: Settings, connection: Redis, model_id: int) -> str:
    """Move model `model_id` on (see the module docstring) under its Redis lock; returns what
    happened, in words. Redis errors are left to the caller."""
    lock = connection.lock(f"tunefleet:model-lock:{model_id}", timeout=LOCK_S, blocking_timeout=LOCK_S / 4)
    if not lock.acquire():
        return f"model {model_id} is being advanced by another process"
    try:
        started = _Advance(session, settings, model_id).run()
    finally:
        with contextlib.suppress(LockError, RedisError):
            lock.release()
    if started:
        queue.try_enqueue_tune(settings, connection, started)
    return f"model {model_id}: started tasks {started}" if started else f"model {model_id}: nothing to start"


def advance_unfinished(session: Session, settings: Settings, connection: Redis) -> None:
    """:func:`advance` every model not yet finished (the reconcile sweep does)."""
    ids = list(session.scalars(select(Model.id).where(Model.status.not_in(FINAL)).order_by(Model.id)))
    session.commit()
    for model_id in ids:
        advance(session, settings, connection, model_id)


def advance_model_of(session: Session, settings: Settings, connection: Redis, task_id: int) -> None:
    """:func:`advance` the model task `task_id` belongs to, if it belongs to one (after its
    tune job)."""
    model_ids = list(session.scalars(select(ModelTask.model_id).where(ModelTask.task_id == task_id)))
    session.commit()
    for model_id in model_ids:
        advance(session, settings, connection, model_id)


class _Advance:
    """One advance of one model, holding its lock; `run` returns the task ids to enqueue."""

    def __init__(self, session: Session, settings: Settings, model_id: int) -> None:
        self.session = session
        self.settings = settings
        session.expire_all()  # another process changed its tasks since this session read them
        self.model = session.get(Model, model_id)
        self.started: list[int] = []

    def run(self) -> list[int]:
        model = self.model
        if model is None or model.status in FINAL:
            self.session.commit()
            return []
        if model.status == ModelStatus.QUEUED:
            self._reuse()
            model.status = ModelStatus.RUNNING
        tuned = [t for t in model.tasks if not t.reused]
        position = {t.id: i for i, t in enumerate(tuned)}
        rounds = list(self.session.scalars(
            select(ModelRound).where(ModelRound.model_id == model.id).order_by(ModelRound.id)))
        self._close_ended(rounds)
        if not tuned:  # every layer was tuned before
            model.scheduled_all = True
        chooser = make_scheduler(tuned, model.trials) if tuned else None
        if chooser is not None:
            self._replay(chooser, rounds, position)
        busy = {r.model_task_id for r in rounds if r.status == RoundStatus.RUNNING}
        for r in rounds:
            if r.status == RoundStatus.PENDING and r.model_task_id not in busy:
                self._start(r)
                busy.add(r.model_task_id)
        capacity = max(1, len(liveness.live_workers(self.session, model.device_key,
                                                    self.settings.worker_lost_after_s)))
        waiting = any(r.status == RoundStatus.PENDING for r in rounds)
        while not model.scheduled_all and not waiting and len(busy) < capacity:
            assert chooser is not None
            chosen = chooser.next_round()
            seq = self._event()
            if chosen is None:
                model.scheduled_all = True
                break
            index, trials = chosen
            r = ModelRound(model_id=model.id, model_task_id=tuned[index].id, trials=trials,
                           status=RoundStatus.PENDING, pulled_at=seq)
            self.session.add(r)
            rounds.append(r)
            if r.model_task_id in busy:
                waiting = True
            else:
                self._start(r)
                busy.add(r.model_task_id)
        if model.scheduled_all and all(r.status == RoundStatus.DONE for r in rounds):
            model.status, model.finished_at = ModelStatus.DONE, utcnow()
        self.session.commit()
        return self.started

    def _event(self) -> int:
        """The next number of the model's scheduler calls."""
        seq = self.model.events
        self.model.events = seq + 1
        return seq

    def _reuse(self) -> None:
        model = self.model
        for t in model.tasks:
            best = tasks.stored_best(self.session, t.workload_key, model.target, model.device_key)
            if best is not None:
                t.task = self._new_task(t, trials=1, reuse=True)
                tasks.answer_with(t.task, best)
                t.reused = True

    def _new_task(self, t: ModelTask, *, trials: int, reuse: bool) -> Task:
        model = self.model
        task = Task(op=t.workload["op"], workload=t.workload, workload_key=t.workload_key, flop=t.flop,
                    target=model.target, device_key=model.device_key,
                    budget={"trials": trials, "wall_time_s": None, "early_stopping": None},
                    protocol=model.protocol, reuse=reuse, owner=model.owner, status=TaskStatus.QUEUED,
                    trials_done=0)
        self.session.add(task)
        return task

    def _close_ended(self, rounds: list[ModelRound]) -> None:
        tasks_of = {t.id: t for t in self.model.tasks}
        for r in rounds:
            task = tasks_of[r.model_task_id].task
            if r.status != RoundStatus.RUNNING or task is None or task.status not in tasks.FINAL:
                continue
            r.status, r.finished_at, r.updated_at = RoundStatus.DONE, utcnow(), self._event()
            if task.status == TaskStatus.DONE and task.best_latency_s is not None:
                r.latency_s = task.best_latency_s
                r.estimate_s = models.estimate_s(self.model)

    def _replay(self, chooser: TaskScheduler, rounds: list[ModelRound], position: dict[int, int]) -> None:
        events = sorted([(r.pulled_at, False, r) for r in rounds]
                        + [(r.updated_at, True, r) for r in rounds if r.updated_at is not None],
                        key=lambda e: e[0])
        for _, is_update, r in events:
            if is_update:  # a round without a correct kernel: latency inf, as the schedulers take it
                chooser.update(position[r.model_task_id], math.inf if r.latency_s is None else r.latency_s)
                continue
            chosen = chooser.next_round()
            if chosen != (position[r.model_task_id], r.trials):
                log.warning("model %s: replayed round %s chose %s, stored %s", self.model.id, r.id, chosen,
                            (position[r.model_task_id], r.trials))

    def _start(self, r: ModelRound) -> None:
        t = next(t for t in self.model.tasks if t.id == r.model_task_id)
        t.trials_given += r.trials
        r.status = RoundStatus.RUNNING
        if t.task is None:
            t.task = self._new_task(t, trials=t.trials_given, reuse=False)
            self.session.flush()
        elif t.task.status == TaskStatus.DONE:
            self.session.execute(
                update(Task).where(Task.id == t.task.id, Task.status == TaskStatus.DONE)
                .values(status=TaskStatus.QUEUED, finished_at=None,
                        budget={**t.task.budget, "trials": t.trials_given}))
            self.session.refresh(t.task)
        else:  # its task failed or was cancelled: the round ends at once, without trials
            r.status, r.finished_at = RoundStatus.DONE, utcnow()
            return
        self.started.append(t.task.id)
