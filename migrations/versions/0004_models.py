"""Whole models: `models` (an ONNX model's tuning: budget, untuned nodes, status),
`model_tasks` (its distinct workloads, their occurrences and nodes, and the service task
tuning each) and `model_rounds` (the rounds its task scheduler chose, with the latency each
ended at).

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, nullable: bool) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "models",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=256), nullable=False),
        sa.Column("owner", sa.String(length=128), nullable=True),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("device_key", sa.String(length=64), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("protocol", sa.JSON(), nullable=False),
        sa.Column("input_shapes", sa.JSON(), nullable=False),
        sa.Column("untuned", sa.JSON(), nullable=False),
        sa.Column("total_flop", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(length=9), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("events", sa.Integer(), nullable=False),
        sa.Column("scheduled_all", sa.Boolean(), nullable=False),
        _timestamp("created_at", nullable=False),
        _timestamp("finished_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_models")),
    )
    op.create_index(op.f("ix_models_owner"), "models", ["owner"])
    op.create_index(op.f("ix_models_device_key"), "models", ["device_key"])
    op.create_index(op.f("ix_models_status"), "models", ["status"])
    op.create_table(
        "model_tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("index", sa.Integer(), nullable=False),
        sa.Column("workload", sa.JSON(), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("flop", sa.BigInteger(), nullable=False),
        sa.Column("occurrences", sa.Integer(), nullable=False),
        sa.Column("matches", sa.JSON(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=True),
        sa.Column("reused", sa.Boolean(), nullable=False),
        sa.Column("trials_given", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_model_tasks_model_id_models")),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_model_tasks_task_id_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_tasks")),
        sa.UniqueConstraint("model_id", "index", name=op.f("uq_model_tasks_model_id_index")),
    )
    op.create_index(op.f("ix_model_tasks_model_id"), "model_tasks", ["model_id"])
    op.create_index(op.f("ix_model_tasks_task_id"), "model_tasks", ["task_id"])
    op.create_table(
        "model_rounds",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=False),
        sa.Column("model_task_id", sa.Integer(), nullable=False),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=7), nullable=False),
        sa.Column("pulled_at", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.Integer(), nullable=True),
        sa.Column("latency_s", sa.Float(), nullable=True),
        sa.Column("estimate_s", sa.Float(), nullable=True),
        _timestamp("created_at", nullable=False),
        _timestamp("finished_at", nullable=True),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], name=op.f("fk_model_rounds_model_id_models")),
        sa.ForeignKeyConstraint(["model_task_id"], ["model_tasks.id"],
                                name=op.f("fk_model_rounds_model_task_id_model_tasks")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_model_rounds")),
    )
    op.create_index(op.f("ix_model_rounds_model_id"), "model_rounds", ["model_id"])
    op.create_index(op.f("ix_model_rounds_status"), "model_rounds", ["status"])


def downgrade() -> None:
    op.drop_table("model_rounds")
    op.drop_table("model_tasks")
    op.drop_table("models")
