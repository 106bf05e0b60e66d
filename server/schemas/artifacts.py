"""Bodies describing stored artifacts."""

from __future__ import annotations

import datetime as dt

from typing import Literal

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


class BuildingOut(BaseModel):
    """An archive a worker is building (202 with `Retry-After`): ask again in `retry_after_s`
    seconds; the same request then returns it, or 409 with the error that stopped the build."""

    status: Literal["building"] = "building"
    build: str
    state: str
    detail: str
    retry_after_s: int
