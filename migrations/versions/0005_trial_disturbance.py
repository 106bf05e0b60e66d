"""Trial disturbance: how much other processes slowed the measuring CPUs during a trial.

trials.disturbance is a fraction (0: undisturbed; NULL for trials stored before it was
measured, and for trials without a timing); trials.disturbed marks a trial that stayed
above its protocol's max_disturbance after its re-measures (false for the stored ones).

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.add_column(sa.Column("disturbance", sa.Float(), nullable=True))
        batch.add_column(sa.Column("disturbed", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.drop_column("disturbed")
        batch.drop_column("disturbance")
