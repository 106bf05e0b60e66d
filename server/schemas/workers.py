"""Bodies of the /workers endpoints."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from tunefleet.compiler.target import CPU_ISAS, Target, best_cpu_isa
from tunefleet.server.db.models import WorkerState
from tunefleet.server.schemas.common import ONE_LINE_PATTERN, Id
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN

#: A short text fact (names, versions, paths of tools).
Text = Annotated[str, Field(max_length=256)]
#: A key of a map of facts.
Key = Annotated[str, Field(min_length=1, max_length=64)]
#: A CPU number (Linux numbers at most a few thousand CPUs).
Cpu = Annotated[int, Field(ge=0, le=65_535)]
#: A count or size a device reports (bytes of memory, kHz, SMs): non-negative, 64-bit.
Amount = Annotated[int, Field(ge=0, le=2**63 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class Toolkit(_Strict):
    """The CUDA toolkit a GPU worker builds with."""

    nvcc: Text | None = None
    nvcc_version: Text | None = None


class Clocks(_Strict):
    """A GPU's clocks, temperature and power as NVML reported them at registration."""

    sm_mhz: Amount | None = None
    mem_mhz: Amount | None = None
    sm_max_mhz: Amount | None = None
    mem_max_mhz: Amount | None = None
    temperature_c: int | None = Field(default=None, ge=-273, le=1_000)
    power_w: float | None = Field(default=None, ge=0, le=100_000)


class GpuFacts(_Strict):
    """What a GPU worker read off its device (tunefleet.compiler.cuda_device.query)."""

    index: int | None = Field(default=None, ge=0, le=1_024)
    name: Text | None = None
    kind: Literal["cuda"] | None = None
    major: int | None = Field(default=None, ge=0, le=1_000)
    minor: int | None = Field(default=None, ge=0, le=1_000)
    compute_capability: str | None = Field(default=None, max_length=16, pattern=r"^\d+\.\d+$")
    arch: str | None = Field(default=None, max_length=16, pattern=r"^sm_\d+[a-z]?$")
    memory_bytes: Amount | None = None
    driver_version: Text | None = None
    cuda_driver_version: Text | None = None
    pci_bus_id: Text | None = None
    sm_count: Amount | None = None
    l2_bytes: Amount | None = None
    shared_per_block_optin: Amount | None = None
    regs_per_block: Amount | None = None
    max_threads_per_block: Amount | None = None
    clock_khz: Amount | None = None
    memory_clock_khz: Amount | None = None
    memory_bus_bits: Amount | None = None
    toolkit: Toolkit | None = None
    clocks: Clocks | None = None


class HostFacts(_Strict):
    """What a worker found out about its host (tunefleet.worker.host.host_facts). Every
    fact is typed and bounded; an unknown fact is a 422.

    :attr:`target` is the best target the host executes: ``cpu -isa=<cpu_isa>`` for a CPU
    worker, ``cuda -arch=<cuda_arch>`` for a GPU worker. A worker that does not send
    `cpu_isa` / `cuda_arch` (one older than this server) gets them derived from its raw
    `isa` flags / `compute_capability`."""

    kind: Literal["cpu", "cuda"] = Field(default="cpu", description="what the worker measures on")
    hostname: Text | None = None
    cpu_model: Text | None = None
    cpu_isa: Literal[CPU_ISAS] | None = Field(  # type: ignore[valid-type]
        default=None, description="the best CPU ISA the host executes (Target.host()); default: from `isa`")
    isa: list[Annotated[str, Field(max_length=32)]] = Field(
        default_factory=list, max_length=64, description="raw CPU flags, e.g. ['avx2', 'fma', 'avx512f']"
    )
    cores: int | None = Field(default=None, ge=1, le=65_536)
    affinity: list[Cpu] = Field(
        default_factory=list, max_length=65_536, description="CPUs the worker may run on"
    )
    gpu_name: Text | None = None
    compute_capability: str | None = Field(default=None, max_length=16, pattern=r"^\d+\.\d+$")
    cuda_arch: str | None = Field(default=None, pattern=r"^sm_[1-9][0-9]{1,2}a?$",
                                  description="a GPU worker's architecture, e.g. sm_90; default: from "
                                  "compute_capability")
    toolchain: dict[Key, Text] = Field(
        default_factory=dict, max_length=32, description="tool -> version, e.g. {'gcc': '12.2.0'}"
    )
    gpu: GpuFacts | None = None
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


class WorkerRegister(_Strict):
    """A worker announcing itself; registering an existing name refreshes that worker."""

    name: str = Field(min_length=1, max_length=128, pattern=ONE_LINE_PATTERN)
    device_key: str = Field(min_length=1, max_length=64, pattern=DEVICE_KEY_PATTERN)
    host: HostFacts = Field(default_factory=HostFacts)

    @model_validator(mode="after")
    def _cuda_host_names_its_arch(self) -> WorkerRegister:
        if self.host.target is None:
            raise ValueError("host: a cuda host reports its cuda_arch (e.g. sm_90) or compute_capability")
        return self


class WorkerHeartbeat(_Strict):
    """A worker's periodic sign of life and what it is doing."""

    state: Literal["idle", "measuring"]
    current_task_id: Id | None = None


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
