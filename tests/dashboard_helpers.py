"""Arranging tasks, trials and workers in the store as a tuning run leaves them, for the
dashboard tests that must not depend on a tuner running."""

from __future__ import annotations

import datetime as dt
import hashlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session

from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Artifact, Task, TaskStatus, Trial, TrialStatus, Worker
from tunefleet.server.schemas.tasks import TaskCreate
from tunefleet.server.services import tasks

MATMUL = {"M": 32, "N": 16, "K": 8}


def submit(session: Session, op: str = "matmul", args: dict[str, Any] | None = None,
           device_key: str = "cpu-test", trials: int = 16, **fields: Any) -> Task:
    """A queued task, validated and stored by the same service the API uses."""
    request = TaskCreate(op=op, args=MATMUL if args is None else args, target="cpu",
                         device_key=device_key, budget={"trials": trials}, **fields)
    return tasks.submit(session, request)


def add_worker(session: Session, name: str = "cpu-worker-1", device_key: str = "cpu-test",
               state: str = "measuring", task: Task | None = None, trials_done: int = 0,
               heartbeat_age_s: float = 1.0, sandbox: str = "bubblewrap 0.11.0, uid 65534 (setpriv)") -> Worker:
    worker = Worker(
        name=name, device_key=device_key, state=state, trials_done=trials_done,
        host={"hostname": "bench-01", "cpu_model": "AMD EPYC 9654 96-Core Processor", "cores": 2,
              "affinity": [0, 1], "isa": ["avx2", "fma", "avx512f"], "toolchain": {"gcc": "12.2.0"},
              "sandbox": sandbox},
        current_task_id=task.id if task is not None else None,
        last_heartbeat=utcnow() - dt.timedelta(seconds=heartbeat_age_s),
    )
    session.add(worker)
    session.commit()
    return worker


def start(session: Session, task: Task, started_s_ago: float = 60.0) -> None:
    """Move a queued task to running, as the tuner does, `started_s_ago` seconds ago."""
    tasks.transition(task, TaskStatus.RUNNING)
    task.started_at = utcnow() - dt.timedelta(seconds=started_s_ago)
    session.commit()


def record(session: Session, task: Task, results: Sequence[tuple[str, float | None, str | None]],
           worker: Worker | None = None, spacing_s: float = 1.0) -> list[Trial]:
    """Store finished trials `(status, latency_s, error)` of `task`, one per `spacing_s`
    from its start, and update its progress (trials done, best) as the tuner would."""
    assert task.started_at is not None
    done = session.query(Trial).filter(Trial.task_id == task.id).count()
    stored = []
    for i, (status, latency, error) in enumerate(results, start=done):
        finished = task.started_at + dt.timedelta(seconds=spacing_s * (i + 1))
        trial = Trial(
            task_id=task.id, config_index=1000 + i,
            config={"tile_m": 2 ** (i % 4), "tile_n": 8, "vectorize": i % 2 == 0},
            status=status, latency_s=latency, costs=[latency] * 3 if latency else None,
            build_s=0.2, run_s=0.1, error=error, attempts=1, disturbance=0.05 if latency else None,
            worker_id=worker.id if worker else None,
            dispatched_at=finished - dt.timedelta(seconds=spacing_s / 2), finished_at=finished,
        )
        session.add(trial)
        session.flush()
        stored.append(trial)
        task.trials_done = (task.trials_done or 0) + 1
        if status == TrialStatus.OK and latency and (task.best_latency_s is None or latency < task.best_latency_s):
            task.best_latency_s = latency
            task.best_gflops = tasks.gflops(task.flop, latency)
            task.best_disturbance = trial.disturbance
            task.best_trial_id = trial.id
    if worker is not None:
        worker.trials_done += len(results)
    session.commit()
    return stored


def finish(session: Session, task: Task, archive: bytes | None = None) -> None:
    """End a running task as done, with `archive` (an artifact tar.gz, stored under the
    store's layout by the caller) as its artifact when given."""
    tasks.transition(task, TaskStatus.EXPORTING)
    if archive is not None:
        sha = hashlib.sha256(archive).hexdigest()
        artifact = Artifact(sha256=sha, size=len(archive), path=f"{sha[:2]}/{sha}.tar.gz")
        session.add(artifact)
        session.flush()
        task.artifact_id = artifact.id
    tasks.transition(task, TaskStatus.DONE)
    session.commit()


def store_archive(artifact_dir, archive: bytes) -> None:
    """Put an artifact tar.gz where the artifact store keeps it."""
    sha = hashlib.sha256(archive).hexdigest()
    path = artifact_dir / sha[:2] / f"{sha}.tar.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(archive)
