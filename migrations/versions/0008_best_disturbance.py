"""The best's disturbance: a task's best latency and a best record carry the disturbance of the
measurement they come from (tunefleet.tuner.interference: a fraction, 0 undisturbed), so a
latency slowed by other work is reported as such.

tasks.best_disturbance and best_records.disturbance are NULL for rows stored before it was
kept, and while a task has no best.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("best_disturbance", sa.Float(), nullable=True))
    with op.batch_alter_table("best_records") as batch:
        batch.add_column(sa.Column("disturbance", sa.Float(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("best_records") as batch:
        batch.drop_column("disturbance")
    with op.batch_alter_table("tasks") as batch:
        batch.drop_column("best_disturbance")
