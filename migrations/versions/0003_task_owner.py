"""Task owners: tasks.owner names the token (user) that submitted the task.

Only its owner or an admin may cancel a task, download its artifact or read its sources
and error texts. Tasks stored before owners existed go to the one active user token when
there is exactly one (a single-user install such as `tunefleet up`); otherwise they stay
without an owner, and only admins manage them. Tokens keep their scopes (`user`, `worker`,
`admin`; the new `read` scope needs no change to the column).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.add_column(sa.Column("owner", sa.String(length=128), nullable=True))
        batch.create_index(batch.f("ix_tasks_owner"), ["owner"])
    users = op.get_bind().execute(
        sa.text("SELECT name FROM api_tokens WHERE scope = 'user' AND revoked_at IS NULL")
    ).scalars().all()
    if len(users) == 1:
        op.get_bind().execute(sa.text("UPDATE tasks SET owner = :owner"), {"owner": users[0]})


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index(batch.f("ix_tasks_owner"))
        batch.drop_column("owner")
