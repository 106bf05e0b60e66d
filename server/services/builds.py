"""Archives built on request by a worker (a model's bundle, a multi-target library): what a
build is (`BuildJob`, its key) and its stored outcome (`Build` rows: the artifact, or the error
that stopped it). server.build_jobs enqueues the jobs and follows them."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tunefleet.compiler.build import COMPILE_TIMEOUT_S
from tunefleet.server.db.models import Artifact, Build
from tunefleet.tuner.measure import canonical_json

__all__ = ["BuildJob", "build_key", "timeout_s", "stored", "uploaded", "record"]


@dataclasses.dataclass(frozen=True)
class BuildJob:
    """What a worker runs for build `key` (also the RQ job's id: letters, digits, `-`, `_`):
    the job `function` by name with JSON `args` on the queue of `device_key`, killed after
    `timeout_s` seconds; `what` names the archive in messages (e.g. "the bundle of model 3"),
    `file_name` is its download's name."""

    key: str
    device_key: str
    function: str
    args: Sequence[Any]
    timeout_s: int
    what: str
    file_name: str


def build_key(kind: str, owner_id: int, inputs: Any) -> str:
    """The key of the build of `kind` ("bundle", "multi-target") for model or task `owner_id`
    from `inputs` (JSON: everything the archive is built from): ``<kind>-<id>-<16 hex digits
    of the sha256 of the inputs' canonical JSON>``. Equal inputs, equal key: built once."""
    return f"{kind}-{owner_id}-{hashlib.sha256(canonical_json(inputs).encode()).hexdigest()[:16]}"


def timeout_s(parts: int) -> int:
    """RQ job timeout of a build compiling `parts` C files (each at most COMPILE_TIMEOUT_S), plus
    the upload."""
    return parts * COMPILE_TIMEOUT_S + 120


def stored(session: Session, key: str) -> Build | None:
    """The recorded outcome of build `key`, if any."""
    return session.scalars(select(Build).where(Build.key == key)).first()


def uploaded(session: Session, sha256: str) -> Artifact | None:
    """The stored artifact with digest `sha256` (a build job's upload), if any."""
    return session.scalars(select(Artifact).where(Artifact.sha256 == sha256)).first()


def record(session: Session, key: str, artifact: Artifact | None, error: str | None = None) -> Build:
    """Store the outcome of build `key`, its `artifact` or its `error` (committed); a
    concurrent request's row wins."""
    session.add(Build(key=key, artifact_id=artifact.id if artifact else None, error=error))
    try:
        session.commit()
    except IntegrityError:
        session.rollback()
    return session.scalars(select(Build).where(Build.key == key)).one()
