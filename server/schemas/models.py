"""Bodies of the /models endpoints: a whole ONNX model's tuning and its progress."""

from __future__ import annotations

import datetime as dt
from typing import Any

from pydantic import BaseModel, Field

from tunefleet.server.db.models import ModelStatus


class ModelTaskOut(BaseModel):
    """One distinct workload (layer) of a model: its `occurrences` and the ONNX `nodes` each
    occurrence replaces (anchor node first), its share of the model's FLOPs, and its service
    task's progress (`task_id` null until its first round; `reused`: answered by a stored best
    record, at no trials)."""

    index: int
    op: str
    workload: dict[str, Any]
    workload_key: str
    flop: int = Field(description="floating-point operations of one occurrence")
    flop_share: float = Field(description="occurrences × flop over the model's FLOPs, 0..1")
    occurrences: int
    nodes: list[list[str]]
    task_id: int | None
    status: str = Field(description="its task's status, or 'pending' before its first round")
    reused: bool
    trials_given: int = Field(description="trials its rounds were given so far")
    trials_done: int
    best_latency_s: float | None = Field(description="median seconds of its best kernel so far")
    best_gflops: float | None
    best_disturbance: float | None = Field(description="the disturbance of the measurement of best_latency_s "
                                           "(its task's best_disturbance)")


class UntunedOut(BaseModel):
    """A node no kernel replaces: why, and its FLOPs (0 for nodes that only move data)."""

    node: str
    op_type: str
    reason: str
    flop: int


class EstimatePoint(BaseModel):
    """The model's estimated latency (seconds) when a round ended."""

    at: dt.datetime
    estimate_s: float


class ModelOut(BaseModel):
    """A model's tuning: its tasks (layers) and their progress, its untuned nodes, the
    estimated model latency (Σ occurrences × best kernel latency, seconds; null until every
    task has a kernel) and how it fell (`history`)."""

    id: int
    name: str
    owner: str | None
    target: str
    device_key: str
    trials: int = Field(description="the global trial budget")
    trials_done: int
    status: ModelStatus
    error: str | None
    created_at: dt.datetime
    finished_at: dt.datetime | None
    tasks: list[ModelTaskOut]
    untuned: list[UntunedOut]
    untuned_flop_share: float = Field(description="the untuned nodes' share of the model's FLOPs, 0..1")
    estimated_latency_s: float | None
    history: list[EstimatePoint]
