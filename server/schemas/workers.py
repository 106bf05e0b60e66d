"""Bodies of the /workers endpoints."""

from __future__ import annotations

import datetime as dt
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunefleet.compiler.target import CPU_ISAS, Target, best_cpu_isa
from tunefleet.server.db.models import WorkerState
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN


class HostFacts(BaseModel):
    """What a worker found out about its host; facts not named here are kept as sent,
    so a newer worker can report more than this server knows about.

    :attr:`target` is the best target the host executes: ``cpu -isa=<cpu_isa>`` for a CPU
    worker, ``cuda -arch=<cuda_arch>`` for a GPU worker. A worker that does not send
    `cpu_isa` / `cuda_arch` (one older than this server) gets them derived from its raw
    `isa` flags / `compute_capability`."""

    model_config = ConfigDict(extra="allow")

    kind: Literal["cpu", "cuda"] = Field(default="cpu", description="what the worker measures on")
    hostname: str | None = None
    cpu_model: str | None = None
    cpu_isa: Literal[CPU_ISAS] | None = Field(  # type: ignore[valid-type]
        default=None, description="the best CPU ISA the host executes (Target.host()); default: from `isa`")
    isa: list[str] = Field(default_factory=list, description="raw CPU flags, e.g. ['avx2', 'fma', 'avx512f']")
    cores: int | None = Field(default=None, ge=1)
    affinity: list[int] = Field(default_factory=list, description="CPUs the worker may run on")
    gpu_name: str | None = None
    compute_capability: str | None = Field(default=None, pattern=r"^\d+\.\d+$")
    cuda_arch: str | None = Field(default=None, pattern=r"^sm_[1-9][0-9]{1,2}a?$",
                                  description="a GPU worker's architecture, e.g. sm_90; default: from "
                                  "compute_capability")
    toolchain: dict[str, str] = Field(
        default_factory=dict, description="tool -> version, e.g. {'gcc': '12.2.0'}"
    )
    sandbox: str = Field(
        default="none", max_length=200,
        description="how the worker isolates candidates' builds and runs, e.g. 'bubblewrap 0.11.0, uid 65534 "
        "(setpriv)'; 'none' for a worker started with --no-sandbox (or one older than the sandbox)")


    @model_validator(mode="after")
    def _derive_targets(self) -> HostFacts:
        if self.cpu_isa is None:
            self.cpu_isa = best_cpu_isa(self.isa)
        if self.kind == "cuda" and self.cuda_arch is None and self.compute_capability is not None:
            self.cuda_arch = "sm_" + self.compute_capability.replace(".", "")
        return self

    @property
    def target(self) -> Target | None:
        """The best target this host executes; None for a cuda host that reported no
        architecture (registration requires one; a row stored before that may lack it)."""
        if self.kind == "cuda":
            return Target("cuda", self.cuda_arch) if self.cuda_arch else None
        return Target("cpu", self.cpu_isa or best_cpu_isa(self.isa))


class WorkerRegister(BaseModel):
    """A worker announcing itself; registering an existing name refreshes that worker."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    device_key: str = Field(min_length=1, max_length=64, pattern=DEVICE_KEY_PATTERN)
    host: HostFacts = Field(default_factory=HostFacts)

    @model_validator(mode="after")
    def _cuda_host_names_its_arch(self) -> WorkerRegister:
        if self.host.target is None:
            raise ValueError("host: a cuda host reports its cuda_arch (e.g. sm_90) or compute_capability")
        return self


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
