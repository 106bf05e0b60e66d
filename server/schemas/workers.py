"""Bodies of the /workers endpoints."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tunefleet.server.db.models import WorkerState
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN


class HostFacts(BaseModel):
    """What a worker found out about its host; facts not named here are kept as sent,
    so a newer worker can report more than this server knows about."""

    model_config = ConfigDict(extra="allow")

    hostname: str | None = None
    cpu_model: str | None = None
    isa: list[str] = Field(default_factory=list, description="e.g. ['avx2', 'fma', 'avx512f']")
    cores: int | None = Field(default=None, ge=1)
    affinity: list[int] = Field(default_factory=list, description="CPUs the worker may run on")
    gpu_name: str | None = None
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    toolchain: dict[str, str] = Field(
        default_factory=dict, description="tool -> version, e.g. {'gcc': '12.2.0'}"
    )


class WorkerRegister(BaseModel):
    """A worker announcing itself; registering an existing name refreshes that worker."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    device_key: str = Field(min_length=1, max_length=64, pattern=DEVICE_KEY_PATTERN)
    host: HostFacts = Field(default_factory=HostFacts)


class WorkerHeartbeat(BaseModel):
    """A worker's periodic sign of life and what it is doing."""

    model_config = ConfigDict(extra="forbid")

    state: Literal["idle", "measuring"]
    current_task_id: int | None = None


class WorkerOut(BaseModel):
    """A worker as the API shows it; `state` is `lost` once its heartbeat is stale."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    name: str
    device_key: str
    host: HostFacts
    state: WorkerState
    registered_at: dt.datetime
    last_heartbeat: dt.datetime
    trials_done: int
    current_task_id: int | None
