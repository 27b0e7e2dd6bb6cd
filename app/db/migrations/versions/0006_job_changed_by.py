"""Who changed a job: the jobs table (0004) gains ``changed_by``, the principal (a token's name, or the name a
binding made of a JWT's claims, docs/auth.md) whose request last registered, updated, paused or resumed it. NULL for
jobs changed before this revision, by an open server, or registered by an acquire that carries a schedule.

A nullable column without a default: added without rewriting the table. Idempotent; the downgrade drops it.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

from alembic import op

from app.db.schema import jobs_table

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade(settings: Any) -> None:
    table = jobs_table(settings.table_name, settings.table_schema)
    op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS changed_by TEXT NULL")


def downgrade(settings: Any) -> None:
    table = jobs_table(settings.table_name, settings.table_schema)
    op.execute(f"ALTER TABLE {table} DROP COLUMN IF EXISTS changed_by")
