"""Artifacts: recording uploads and finding a task's artifact."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.db.models import Artifact
from tunefleet.server.errors import NotFound
from tunefleet.server.services import tasks


def store_upload(session: Session, store: ArtifactStore, staged: Path, sha256: str) -> Artifact:
    """Move a staged upload into the store and record it (committed); an artifact already
    stored under the same sha256 is returned as it is."""
    relative, size = store.ingest(staged, sha256)
    query = select(Artifact).where(Artifact.sha256 == sha256)
    artifact = session.scalars(query).first()
    if artifact is not None:
        return artifact
    artifact = Artifact(sha256=sha256, size=size, path=relative)
    session.add(artifact)
    try:
        session.commit()
    except IntegrityError:  # the same content arrived concurrently
        session.rollback()
        return session.scalars(query).one()
    return artifact


def of_task(session: Session, task_id: int) -> Artifact:
    """The artifact a task produced (or reused); NotFound for an unknown task or one
    without an artifact yet."""
    task = tasks.get(session, task_id)
    if task.artifact is None:
        raise NotFound(f"task {task_id} has no artifact yet (status {task.status})")
    return task.artifact
