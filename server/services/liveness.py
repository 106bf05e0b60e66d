"""Which measurement workers are alive: those whose heartbeat is at most `lost_after_s`
seconds old and that are not marked lost. Asked by submission (a task's default device key),
by the device-key pools, by readiness and by the tuners (waiting for workers, the reconcile
sweep). Every function commits (ends its read transaction: the next read sees newer commits).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from sqlalchemy import Select, select, update
from sqlalchemy.orm import Session

from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Worker, WorkerState

__all__ = ["live_query", "live_workers", "live_device_keys", "mark_lost_workers"]


def _fresh_since(lost_after_s: float) -> dt.datetime:
    return utcnow() - dt.timedelta(seconds=lost_after_s)


def live_query(device_key: str, lost_after_s: float) -> Select[tuple[Worker]]:
    """The query for the workers of `device_key` that heartbeat within the last
    `lost_after_s` seconds; run in the caller's transaction, which it does not end."""
    return select(Worker).where(
        Worker.device_key == device_key,
        Worker.state != WorkerState.LOST,
        Worker.last_heartbeat >= _fresh_since(lost_after_s),
    )


def live_workers(session: Session, device_key: str, lost_after_s: float) -> Sequence[Worker]:
    """Workers of `device_key` that heartbeat within the last `lost_after_s` seconds."""
    workers = session.scalars(live_query(device_key, lost_after_s)).all()
    session.commit()  # end the read transaction: the next read sees newer commits
    return workers


def live_device_keys(session: Session, lost_after_s: float, kind: str | None = None) -> list[str]:
    """Device keys served by at least one live worker (of target `kind`, e.g. "cpu", as the
    worker reported in its host facts; workers that reported none count as "cpu"), with the
    most live workers first."""
    rows = session.execute(
        select(Worker.device_key, Worker.host)
        .where(Worker.state != WorkerState.LOST, Worker.last_heartbeat >= _fresh_since(lost_after_s))
    ).all()
    session.commit()
    counts: dict[str, int] = {}
    for key, host in rows:
        if kind is None or (host or {}).get("kind", "cpu") == kind:
            counts[key] = counts.get(key, 0) + 1
    return sorted(counts, key=lambda k: (-counts[k], k))


def mark_lost_workers(session: Session, lost_after_s: float) -> int:
    """Record as `lost` every worker silent for `lost_after_s` seconds; returns how many."""
    result = session.execute(
        update(Worker)
        .where(Worker.state != WorkerState.LOST, Worker.last_heartbeat < _fresh_since(lost_after_s))
        .values(state=WorkerState.LOST, current_task_id=None)
    )
    session.commit()
    return result.rowcount or 0
