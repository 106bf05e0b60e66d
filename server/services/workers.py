"""Measurement workers: registration, heartbeats, and how the API reports them."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Task, Worker, WorkerState
from tunefleet.server.errors import FieldError, NotFound
from tunefleet.server.schemas.workers import WorkerHeartbeat, WorkerRegister
from tunefleet.server.services import pools


def register(session: Session, request: WorkerRegister, lost_after_s: float = 30.0) -> Worker:
    """Create the worker named in `request`, or refresh it when the name is known (a
    restarted worker keeps its id); committed. Conflict, with nothing written, when the
    device key's live hosts (heartbeat within `lost_after_s`) have another best target
    (services.pools.check_agreement)."""
    pools.check_agreement(session, request, lost_after_s)
    worker = session.scalars(select(Worker).where(Worker.name == request.name)).first()
    now = utcnow()
    if worker is None:
        worker = Worker(name=request.name, registered_at=now, trials_done=0)
        session.add(worker)
    worker.device_key = request.device_key
    worker.host = request.host.model_dump(mode="json")
    worker.state = WorkerState.IDLE
    worker.current_task_id = None
    worker.last_heartbeat = now
    session.commit()
    return worker


def heartbeat(session: Session, worker_id: int, request: WorkerHeartbeat) -> Worker:
    """Record a sign of life of worker `worker_id` (committed); NotFound for an unknown
    worker, FieldError for an unknown current task."""
    worker = session.get(Worker, worker_id)
    if worker is None:
        raise NotFound(f"worker {worker_id} not found")
    if request.current_task_id is not None and session.get(Task, request.current_task_id) is None:
        raise FieldError(
            ("body", "current_task_id"), f"task {request.current_task_id} not found"
        )
    worker.state = request.state
    worker.current_task_id = request.current_task_id
    worker.last_heartbeat = utcnow()
    session.commit()
    return worker


def effective_state(worker: Worker, lost_after_s: float, now: dt.datetime) -> WorkerState:
    """The worker's reported state, or `lost` when it has not heartbeaten for `lost_after_s`."""
    if (now - worker.last_heartbeat).total_seconds() > lost_after_s:
        return WorkerState.LOST
    return WorkerState(worker.state)


def list_workers(
    session: Session, *, device_key: str | None, limit: int, offset: int
) -> tuple[Sequence[Worker], int]:
    """One page of workers (by id), optionally of one device key, and the match count."""
    query = select(Worker)
    if device_key is not None:
        query = query.where(Worker.device_key == device_key)
    total = session.scalar(select(func.count()).select_from(query.subquery()))
    return session.scalars(query.order_by(Worker.id).limit(limit).offset(offset)).all(), total or 0
