"""The runs of a name by time: an index on the history's ``(name, acquired_at)``, for the jobs' reads.

A job's ticks, its state and the jobs list read the runs of each job acquired in a window of time
(app.jobs.store.JobStore.runs). With only ``(name, fencing_token)`` and ``(acquired_at, fencing_token)`` to go by,
Postgres read every run of the name and filtered them by time: a cost that grew with the history, about 1 ms per
job at two days of a fleet of 1,000 runs a minute and 15 times that at a month (docs/history.md, "A fleet's month").
With this index a window costs the same whatever the history's length.

Built ``CONCURRENTLY``: the history is written by the lock table's trigger at every acquisition, schedlock's and
Java ShedLock nodes' alike, and a plain ``CREATE INDEX`` would hold those writes (and so every acquisition) for as
long as the build takes, minutes on a large history. A concurrent build cannot run in a transaction, so this step
runs outside the migration's. A build that failed (a cancelled migration) leaves an invalid index behind, which
``IF NOT EXISTS`` would keep: it is dropped and built again. The lock table is not touched.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.schema import qualified_name, quote_ident, runs_table

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def index_name(table: str) -> str:
    return f"{table}_runs_name_acquired_idx"


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    index = index_name(name)
    with op.get_context().autocommit_block():
        invalid = op.get_bind().execute(
            sa.text("SELECT NOT i.indisvalid FROM pg_index i WHERE i.indexrelid = to_regclass(:index)"),
            {"index": qualified_name(index, schema)},
        )
        if invalid.scalar():
            op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {qualified_name(index, schema)}")
        op.execute(
            f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {quote_ident(index)} ON {runs_table(name, schema)} "
            "(name, acquired_at)"
        )


def downgrade(settings: Any) -> None:
    index = qualified_name(index_name(settings.table_name), settings.table_schema)
    with op.get_context().autocommit_block():
        op.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {index}")
