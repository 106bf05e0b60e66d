"""SQL models of the service: tasks, trials, best records, artifacts, workers and their
device keys' registration locks, API tokens, whole models.

The schema is created and changed only by the Alembic migrations in `migrations/`; a test
checks that they agree with these models.
"""

from __future__ import annotations

import datetime as dt
import enum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Float,
    ForeignKey,
    Integer,
    String,
    UniqueConstraint,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from tunefleet.server.db.base import Base, Message, UTCDateTime, utcnow

KEY_LEN = 64  # sha256 hex digests and device keys


class TaskStatus(enum.StrEnum):
    """Life cycle of a task (transitions in `tunefleet.server.services.tasks`)."""

    QUEUED = "queued"
    WAITING_FOR_WORKER = "waiting_for_worker"
    RUNNING = "running"
    EXPORTING = "exporting"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class TrialStatus(enum.StrEnum):
    """A trial is `queued`, then `running` on a worker, then one of the measure results."""

    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    WRONG_ANSWER = "wrong_answer"
    TIMEOUT = "timeout"
    WORKER_LOST = "worker_lost"
    UNSUPPORTED_TARGET = "unsupported_target"


class WorkerState(enum.StrEnum):
    """What a worker last reported; `lost` once it stops heartbeating."""

    IDLE = "idle"
    MEASURING = "measuring"
    LOST = "lost"


class TokenScope(enum.StrEnum):
    """`read`: lists, progress, best GFLOP/s (no one's sources); `user`: that, and submit and
    manage one's own tasks; `worker`: register, heartbeat and upload; `admin`: everything,
    every task."""

    READ = "read"
    USER = "user"
    WORKER = "worker"
    ADMIN = "admin"


def _status(enum_cls: type[enum.StrEnum], default: enum.StrEnum) -> Mapped[Any]:
    # Stored as plain strings (no native enum type): adding a status needs no ALTER TYPE.
    width = max(len(m.value) for m in enum_cls)
    return mapped_column(String(width), default=default.value, index=True)


class Task(Base):
    """A workload + target + device key + budget submitted by a user, with its progress."""

    __tablename__ = "tasks"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    op: Mapped[str] = mapped_column(String(64), index=True)
    workload: Mapped[dict[str, Any]] = mapped_column(JSON)
    workload_key: Mapped[str] = mapped_column(String(KEY_LEN), index=True)
    flop: Mapped[int] = mapped_column(BigInteger)
    target: Mapped[str] = mapped_column(String(256))
    device_key: Mapped[str] = mapped_column(String(KEY_LEN), index=True)
    budget: Mapped[dict[str, Any]] = mapped_column(JSON)
    protocol: Mapped[dict[str, Any]] = mapped_column(JSON)
    reuse: Mapped[bool] = mapped_column(Boolean, default=False)
    status: Mapped[str] = _status(TaskStatus, TaskStatus.QUEUED)
    error: Mapped[str | None] = mapped_column(Message)
    # The name of the token that submitted it; NULL for a task older than owners (admins only).
    owner: Mapped[str | None] = mapped_column(String(128), index=True)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    best_latency_s: Mapped[float | None] = mapped_column(Float)
    best_gflops: Mapped[float | None] = mapped_column(Float)
    # The disturbance of the measurement best_latency_s comes from (a fraction,
    # tunefleet.tuner.interference); NULL while there is no best, and for tasks older than it.
    best_disturbance: Mapped[float | None] = mapped_column(Float)
    # The task's result: its own best trial, or the stored best it reused. tasks <-> trials
    # is a cycle, so this key is added after both tables exist (use_alter).
    best_trial_id: Mapped[int | None] = mapped_column(
        ForeignKey("trials.id", use_alter=True, name="fk_tasks_best_trial_id_trials")
    )
    artifact_id: Mapped[int | None] = mapped_column(ForeignKey("artifacts.id"))

    best_trial: Mapped[Trial | None] = relationship(
        foreign_keys=[best_trial_id], post_update=True
    )
    artifact: Mapped[Artifact | None] = relationship()


class Trial(Base):
    """One candidate config of a task and what its measurement returned.

    (task_id, config_index) is unique: a config is measured at most once per task, also
    across tuner restarts.
    """

    __tablename__ = "trials"
    __table_args__ = (UniqueConstraint("task_id", "config_index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    task_id: Mapped[int] = mapped_column(ForeignKey("tasks.id"), index=True)
    config_index: Mapped[int] = mapped_column(BigInteger)
    config: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = _status(TrialStatus, TrialStatus.QUEUED)
    costs: Mapped[list[float] | None] = mapped_column(JSON)
    # The latency that ranks trials (from `costs`); NULL unless status is ok.
    latency_s: Mapped[float | None] = mapped_column(Float)
    build_s: Mapped[float | None] = mapped_column(Float)
    run_s: Mapped[float | None] = mapped_column(Float)
    error: Mapped[str | None] = mapped_column(Message)
    # How much other processes slowed the measuring CPUs (a fraction, tunefleet.tuner.interference);
    # NULL unless measured. `disturbed`: still above the protocol's max_disturbance after re-measures.
    disturbance: Mapped[float | None] = mapped_column(Float)
    disturbed: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    worker_id: Mapped[int | None] = mapped_column(ForeignKey("workers.id"))
    dispatched_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class Artifact(Base):
    """A built kernel (tar.gz of .so, .h, manifest.json, source) in the content-addressed store."""

    __tablename__ = "artifacts"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(KEY_LEN), unique=True)
    size: Mapped[int] = mapped_column(BigInteger)
    path: Mapped[str] = mapped_column(String(1024))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Build(Base):
    """An archive built on request by a worker's job (a model's bundle, a multi-target library),
    under its `key`, which is also the RQ job's id (``bundle-<model id>-<spec digest>``,
    ``multi-target-<task id>-<spec digest>``): the stored `artifact` once built, or the
    `error` that stopped the build (answered as it is, never retried)."""

    __tablename__ = "builds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(128), unique=True)
    artifact_id: Mapped[int | None] = mapped_column(ForeignKey("artifacts.id"))
    error: Mapped[str | None] = mapped_column(Message)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)

    artifact: Mapped[Artifact | None] = relationship(lazy="joined")


class BestRecord(Base):
    """The fastest correct trial of a workload on a target + device key, and its artifact."""

    __tablename__ = "best_records"
    __table_args__ = (UniqueConstraint("workload_key", "target", "device_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workload_key: Mapped[str] = mapped_column(String(KEY_LEN))
    target: Mapped[str] = mapped_column(String(256))
    device_key: Mapped[str] = mapped_column(String(KEY_LEN))
    trial_id: Mapped[int] = mapped_column(ForeignKey("trials.id"))
    artifact_id: Mapped[int] = mapped_column(ForeignKey("artifacts.id"))
    latency_s: Mapped[float] = mapped_column(Float)
    gflops: Mapped[float] = mapped_column(Float)
    # The disturbance of the measurement latency_s comes from; NULL for records older than it.
    disturbance: Mapped[float | None] = mapped_column(Float)
    updated_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)


class Worker(Base):
    """A measurement host process serving one device key."""

    __tablename__ = "workers"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    device_key: Mapped[str] = mapped_column(String(KEY_LEN), index=True)
    # Host facts: cpu_model, isa, cores, affinity, gpu_name, compute_capability, toolchain.
    host: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = _status(WorkerState, WorkerState.IDLE)
    registered_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    last_heartbeat: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    trials_done: Mapped[int] = mapped_column(Integer, default=0)
    current_task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"))


class DeviceKeyLock(Base):
    """One row per device key workers registered under, locked by each registration while
    it checks the key's live hosts and writes its worker (services.pools.check_agreement),
    so that two disagreeing hosts registering at once cannot both be accepted."""

    __tablename__ = "device_key_locks"

    device_key: Mapped[str] = mapped_column(String(KEY_LEN), primary_key=True)


class ApiToken(Base):
    """A bearer token; only its sha256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    token_hash: Mapped[str] = mapped_column(String(KEY_LEN), unique=True)
    scope: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    revoked_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)


class ModelStatus(enum.StrEnum):
    """Life cycle of a whole model (services.models, server.model_job): `queued` until its
    first round starts, `running` while rounds are tuning, then `done` (every round ended,
    its bundle can be built), `failed` (no task of it produced a kernel) or `cancelled`."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


class RoundStatus(enum.StrEnum):
    """A round of a model's scheduler: `pending` (chosen while its task was still busy),
    `running` (its task tuning), `done` (its task finished; the latency fed back)."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"


class Model(Base):
    """An ONNX model submitted for whole-model tuning: its global trial budget spent by a
    task scheduler over its distinct workloads (model_tasks), round by round (model_rounds).

    `events` counts the scheduler's calls (a pull of a round, an update with its latency) so
    that a restarted tuner rebuilds the scheduler by replaying them in order.
    """

    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(256))
    owner: Mapped[str | None] = mapped_column(String(128), index=True)
    target: Mapped[str] = mapped_column(String(256))
    device_key: Mapped[str] = mapped_column(String(KEY_LEN), index=True)
    trials: Mapped[int] = mapped_column(Integer)
    protocol: Mapped[dict[str, Any]] = mapped_column(JSON)
    input_shapes: Mapped[dict[str, Any]] = mapped_column(JSON)
    # Nodes no kernel replaces: [{node, op_type, reason, flop}], graph order.
    untuned: Mapped[list[Any]] = mapped_column(JSON)
    total_flop: Mapped[int] = mapped_column(BigInteger)
    status: Mapped[str] = _status(ModelStatus, ModelStatus.QUEUED)
    error: Mapped[str | None] = mapped_column(Message)
    events: Mapped[int] = mapped_column(Integer, default=0)
    # The scheduler answered that the budget is spent: no round is pulled any more.
    scheduled_all: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)

    tasks: Mapped[list[ModelTask]] = relationship(order_by="ModelTask.index")


class ModelTask(Base):
    """One distinct workload of a model: where it occurs (`matches`: per occurrence the ONNX
    nodes it replaces and which tensor each kernel argument is) and the service task tuning it
    (created at its first round; `reused` when a stored best record answered it at once)."""

    __tablename__ = "model_tasks"
    __table_args__ = (UniqueConstraint("model_id", "index"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    workload: Mapped[dict[str, Any]] = mapped_column(JSON)
    workload_key: Mapped[str] = mapped_column(String(KEY_LEN))
    flop: Mapped[int] = mapped_column(BigInteger)
    occurrences: Mapped[int] = mapped_column(Integer)
    matches: Mapped[list[Any]] = mapped_column(JSON)
    task_id: Mapped[int | None] = mapped_column(ForeignKey("tasks.id"), index=True)
    reused: Mapped[bool] = mapped_column(Boolean, default=False)
    trials_given: Mapped[int] = mapped_column(Integer, default=0)

    task: Mapped[Task | None] = relationship()


class ModelRound(Base):
    """One round of a model's scheduler: `trials` more for one of its tasks. `pulled_at` and
    `updated_at` are the model's event numbers of its `next_round` and `update` calls;
    `latency_s` the task's best (validated) latency after it, `estimate_s` the model's
    estimated latency (Σ occurrences × best latency, seconds) then, when every task had one."""

    __tablename__ = "model_rounds"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    model_id: Mapped[int] = mapped_column(ForeignKey("models.id"), index=True)
    model_task_id: Mapped[int] = mapped_column(ForeignKey("model_tasks.id"))
    trials: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = _status(RoundStatus, RoundStatus.PENDING)
    pulled_at: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[int | None] = mapped_column(Integer)
    latency_s: Mapped[float | None] = mapped_column(Float)
    estimate_s: Mapped[float | None] = mapped_column(Float)
    created_at: Mapped[dt.datetime] = mapped_column(UTCDateTime, default=utcnow)
    finished_at: Mapped[dt.datetime | None] = mapped_column(UTCDateTime)
