"""Bodies describing stored artifacts."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, ConfigDict


class ArtifactOut(BaseModel):
    """A built kernel in the artifact store, addressed by the sha256 of its tar.gz."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    sha256: str
    size: int
    created_at: dt.datetime


class ArtifactHeaderOut(BaseModel):
    """The C header of a task's artifact: the whole text, and the part a caller needs
    (argument shapes and the kernel's prototypes)."""

    task_id: int
    kernel: str
    file_name: str
    text: str
    prototype: str
