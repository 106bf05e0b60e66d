"""Initial schema: tasks, trials, best records, artifacts, workers, API tokens.

Revision ID: 0001
Revises:
Create Date: 2026-11-21
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _timestamp(name: str, nullable: bool) -> sa.Column:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("scope", sa.String(length=16), nullable=False),
        _timestamp("created_at", nullable=False),
        _timestamp("revoked_at", nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("name", name=op.f("uq_api_tokens_name")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_api_tokens_token_hash")),
    )
    op.create_table(
        "artifacts",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(length=64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("path", sa.String(length=1024), nullable=False),
        _timestamp("created_at", nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_artifacts")),
        sa.UniqueConstraint("sha256", name=op.f("uq_artifacts_sha256")),
    )
    # tasks.best_trial_id -> trials is added once trials exists (the tables refer to each other).
    op.create_table(
        "tasks",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("op", sa.String(length=64), nullable=False),
        sa.Column("workload", sa.JSON(), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("flop", sa.BigInteger(), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("device_key", sa.String(length=64), nullable=False),
        sa.Column("budget", sa.JSON(), nullable=False),
        sa.Column("protocol", sa.JSON(), nullable=False),
        sa.Column("reuse", sa.Boolean(), nullable=False),
        sa.Column("status", sa.String(length=18), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        _timestamp("created_at", nullable=False),
        _timestamp("started_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("best_latency_s", sa.Float(), nullable=True),
        sa.Column("best_gflops", sa.Float(), nullable=True),
        sa.Column("best_trial_id", sa.Integer(), nullable=True),
        sa.Column("artifact_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name=op.f("fk_tasks_artifact_id_artifacts")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tasks")),
    )
    op.create_index(op.f("ix_tasks_device_key"), "tasks", ["device_key"])
    op.create_index(op.f("ix_tasks_op"), "tasks", ["op"])
    op.create_index(op.f("ix_tasks_status"), "tasks", ["status"])
    op.create_index(op.f("ix_tasks_workload_key"), "tasks", ["workload_key"])
    op.create_table(
        "workers",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("device_key", sa.String(length=64), nullable=False),
        sa.Column("host", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=9), nullable=False),
        _timestamp("registered_at", nullable=False),
        _timestamp("last_heartbeat", nullable=False),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("current_task_id", sa.Integer(), nullable=True),
        sa.ForeignKeyConstraint(
            ["current_task_id"], ["tasks.id"], name=op.f("fk_workers_current_task_id_tasks")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_workers")),
        sa.UniqueConstraint("name", name=op.f("uq_workers_name")),
    )
    op.create_index(op.f("ix_workers_device_key"), "workers", ["device_key"])
    op.create_index(op.f("ix_workers_state"), "workers", ["state"])
    op.create_table(
        "trials",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.Integer(), nullable=False),
        sa.Column("config_index", sa.BigInteger(), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=13), nullable=False),
        sa.Column("costs", sa.JSON(), nullable=True),
        sa.Column("latency_s", sa.Float(), nullable=True),
        sa.Column("build_s", sa.Float(), nullable=True),
        sa.Column("run_s", sa.Float(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("worker_id", sa.Integer(), nullable=True),
        _timestamp("dispatched_at", nullable=True),
        _timestamp("finished_at", nullable=True),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], name=op.f("fk_trials_task_id_tasks")),
        sa.ForeignKeyConstraint(
            ["worker_id"], ["workers.id"], name=op.f("fk_trials_worker_id_workers")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_trials")),
        sa.UniqueConstraint(
            "task_id", "config_index", name=op.f("uq_trials_task_id_config_index")
        ),
    )
    op.create_index(op.f("ix_trials_status"), "trials", ["status"])
    op.create_index(op.f("ix_trials_task_id"), "trials", ["task_id"])
    with op.batch_alter_table("tasks") as batch:
        batch.create_foreign_key(
            "fk_tasks_best_trial_id_trials", "trials", ["best_trial_id"], ["id"]
        )
    op.create_table(
        "best_records",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("workload_key", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=256), nullable=False),
        sa.Column("device_key", sa.String(length=64), nullable=False),
        sa.Column("trial_id", sa.Integer(), nullable=False),
        sa.Column("artifact_id", sa.Integer(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("gflops", sa.Float(), nullable=False),
        _timestamp("updated_at", nullable=False),
        sa.ForeignKeyConstraint(
            ["artifact_id"], ["artifacts.id"], name=op.f("fk_best_records_artifact_id_artifacts")
        ),
        sa.ForeignKeyConstraint(
            ["trial_id"], ["trials.id"], name=op.f("fk_best_records_trial_id_trials")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_best_records")),
        sa.UniqueConstraint(
            "workload_key",
            "target",
            "device_key",
            name=op.f("uq_best_records_workload_key_target_device_key"),
        ),
    )


def downgrade() -> None:
    op.drop_table("best_records")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_constraint("fk_tasks_best_trial_id_trials", type_="foreignkey")
    op.drop_table("trials")
    op.drop_table("workers")
    op.drop_table("tasks")
    op.drop_table("artifacts")
    op.drop_table("api_tokens")
