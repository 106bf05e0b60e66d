"""Device key locks: one row per device key workers registered under, locked by a
registration while it checks that the key's live hosts agree and writes its worker.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "device_key_locks",
        sa.Column("device_key", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("device_key", name=op.f("pk_device_key_locks")),
    )


def downgrade() -> None:
    op.drop_table("device_key_locks")
