"""Bodies of the /tasks endpoints."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tunefleet.server.db.models import TaskStatus, TrialStatus
from tunefleet.server.schemas.artifacts import ArtifactOut
from tunefleet.tuner.measure import MeasureProtocol

_PROTOCOL = MeasureProtocol()  # the workers' defaults

DEVICE_KEY_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"
#: The most trials any server admits (its max_trials setting bounds them further).
MAX_TRIALS = 100_000


class Budget(BaseModel):
    """When tuning stops: after `trials` candidates, `wall_time_s` seconds, or
    `early_stopping` trials in a row without a new best, whichever comes first."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    trials: int = Field(default=64, ge=1, le=MAX_TRIALS,
                        description="at most the server's max_trials setting")
    wall_time_s: float | None = Field(default=None, gt=0, le=30 * 86_400)
    early_stopping: int | None = Field(default=None, ge=1, le=MAX_TRIALS)


class Protocol(BaseModel):
    """How workers time a candidate (tunefleet.tuner.measure.MeasureProtocol): `repeat`
    measurements of `number` runs each, each lasting at least `min_repeat_ms`, with
    `cooldown_ms` between them and an optional cache flush; `timeout_s` bounds one
    candidate's execution on the worker; `check_correctness` compares the output with the
    operator's reference first; a trial disturbed by more than `max_disturbance` is measured
    again up to `remeasure` times. The server's settings may bound `min_repeat_ms` and
    `timeout_s` below the limits declared here."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    number: int = Field(default=_PROTOCOL.number, ge=1, le=10_000)
    repeat: int = Field(default=_PROTOCOL.repeat, ge=1, le=1_000)
    min_repeat_ms: float = Field(default=_PROTOCOL.min_repeat_ms, ge=0, le=60_000,
                                 description="at most the server's max_min_repeat_ms setting")
    cooldown_ms: float = Field(default=_PROTOCOL.cooldown_ms, ge=0, le=10_000)
    flush_cache: bool = _PROTOCOL.flush_cache
    timeout_s: float = Field(default=_PROTOCOL.timeout_s, gt=0, le=3_600,
                             description="at most the server's max_trial_timeout_s setting")
    check_correctness: bool = _PROTOCOL.check_correctness
    max_disturbance: float = Field(
        default=_PROTOCOL.max_disturbance, ge=0, le=100,
        description="a trial whose disturbance (how much other processes slowed the measuring CPUs, a "
        "fraction) exceeds the worker's present load (its latest trials' median) by more than this is "
        "measured again, then marked disturbed")
    remeasure: int = Field(default=_PROTOCOL.remeasure, ge=0, le=10,
                           description="re-measures of a disturbed trial")


class TaskCreate(BaseModel):
    """A tuning request: an operator with its arguments (or `op="custom"` with
    `args={"te": ...}`), the target to generate code for (default: the best the device
    key's hosts execute) and the device key to measure on.

    Request bodies are validated strictly: no field beyond those declared, and no value of
    another JSON type than declared (no `true` for a number, no `"5"` for an integer)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    op: str = Field(min_length=1, max_length=64, examples=["matmul"])
    args: dict[str, Any] = Field(default_factory=dict, examples=[{"M": 64, "N": 64, "K": 64}])
    target: str | None = Field(
        default=None, min_length=1, max_length=256, examples=["cpu -isa=avx2", "cpu", "cuda -arch=sm_90"],
        description="what code is generated for; omitted, or a kind alone ('cpu', 'cuda'): the best "
        "target all live hosts of the device key execute (422 when they cannot execute a named one). "
        "With no live host of the key yet, an omitted target is stored as its kind ('cpu') and "
        "resolved to the hosts' best when the task starts",
    )
    device_key: str | None = Field(
        default=None, min_length=1, max_length=64, pattern=DEVICE_KEY_PATTERN,
        description="pool of workers to measure on; omitted: the only pool of live workers of "
        "the target's kind, of any kind when no target is named (422 listing the pools when there "
        "are none or several)",
    )
    budget: Budget = Field(default_factory=Budget)
    protocol: Protocol = Field(default_factory=Protocol)
    reuse: bool = Field(
        default=False, description="answer at once with the stored best, when there is one"
    )


class TaskOut(BaseModel):
    """A task and its progress."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    op: str
    workload: dict[str, Any]
    workload_key: str
    flop: int
    target: str = Field(description="the target code is generated for; a kind alone ('cpu') until the "
                        "task starts when it was submitted without a target while no host of its device "
                        "key was live")
    device_key: str
    budget: Budget
    protocol: Protocol
    reuse: bool
    status: TaskStatus
    error: str | None
    owner: str | None = Field(description="the token (user) that submitted it; null: older than owners")
    sources_hidden: bool = Field(
        default=False, description="true when its sources (object-valued arguments) and error text are "
        "hidden: only its owner and admins see them")
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    trials_done: int
    best_latency_s: float | None = Field(
        description="median seconds of its best kernel: its fastest trial's while tuning (a disturbed one only "
        "while no other is measured), the re-measured winner's once done")
    best_gflops: float | None
    best_disturbance: float | None = Field(
        description="the disturbance of the measurement best_latency_s comes from, a fraction (0: undisturbed; "
        "1: other work took about half of the measuring CPUs' time); null without a best or for older tasks")
    artifact: ArtifactOut | None


class TrialOut(BaseModel):
    """One measured (or pending) candidate config."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    task_id: int
    config_index: int
    config: dict[str, Any]
    status: TrialStatus
    costs: list[float] | None
    latency_s: float | None
    build_s: float | None
    run_s: float | None
    error: str | None
    disturbance: float | None = Field(
        description="how much other processes slowed the measuring CPUs during the timing, a fraction "
        "(0: undisturbed; null: not measured)")
    disturbed: bool = Field(description="still above the protocol's max_disturbance after its re-measures: "
                            "its timing neither ranks it nor teaches the cost model")
    attempts: int
    worker_id: int | None
    dispatched_at: dt.datetime | None
    finished_at: dt.datetime | None


class BestOut(BaseModel):
    """A task's result: its best trial (its own, or the stored best it reused), the
    latency and GFLOP/s, and the artifact once exported."""

    task_id: int
    trial: TrialOut
    latency_s: float
    gflops: float
    reused: bool
    artifact: ArtifactOut | None
