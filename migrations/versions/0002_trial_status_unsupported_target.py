"""Trial status `unsupported_target` (18 characters): trials.status widens from 13.

A worker that cannot execute a trial's target (avx512 code on an AVX2 host) answers
`unsupported_target` without building anything. Statuses are plain strings sized to the
longest value, so the new one needs a wider column (PostgreSQL enforces the length).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("trials") as batch:
        batch.alter_column("status", existing_type=sa.String(length=13), type_=sa.String(length=18),
                           existing_nullable=False)


def downgrade() -> None:
    # The narrower column cannot hold the new status: such trials become runtime errors first.
    op.execute("UPDATE trials SET status = 'runtime_error' WHERE status = 'unsupported_target'")
    with op.batch_alter_table("trials") as batch:
        batch.alter_column("status", existing_type=sa.String(length=18), type_=sa.String(length=13),
                           existing_nullable=False)
