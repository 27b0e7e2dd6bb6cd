"""Jobs: lock names with an expected schedule (docs/jobs.md), in a table beside the lock table; their state changes
waiting for webhook delivery; and whether a run's release said ``completed: false``.

The lock table is not touched: no column, no trigger, no row. The runs table (0002) gains one nullable column,
``failed``, which the release route sets when a release says the job failed; a nullable column with no default
is added without rewriting the table. Idempotent, like 0001-0003. The downgrade drops only what this revision
added (the jobs registered and the failed marks): the lock rows and the runs stay.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

from typing import Any

from alembic import op

from app.db.schema import job_events_table, jobs_table, quote_ident, runs_table

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    # TEXT like the history's tables; the API bounds every field. Times are database UTC, like the runs'.
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {jobs_table(name, schema)} (
          name TEXT PRIMARY KEY,
          schedule TEXT NOT NULL,
          timezone TEXT NOT NULL,
          grace INTERVAL NOT NULL,
          description TEXT NULL,
          paused BOOLEAN NOT NULL DEFAULT false,
          created_at TIMESTAMP NOT NULL,
          updated_at TIMESTAMP NOT NULL,
          expected_since TIMESTAMP NOT NULL,
          -- its badge (GET /v1/jobs/{name}/badge.svg) is readable without a token
          public BOOLEAN NOT NULL DEFAULT false,
          -- the state last claimed by a replica's check: a change from it is one webhook event (docs/jobs.md)
          notified_state TEXT NULL
        )
        """
    )
    # The outbox: one row per state change, written by the statement that claims the change, so exactly one
    # replica writes it; delivered (and retried) by whichever replica claims the row next.
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {job_events_table(name, schema)} (
          id BIGSERIAL PRIMARY KEY,
          name TEXT NOT NULL,
          url TEXT NOT NULL,
          state TEXT NOT NULL,
          previous TEXT NOT NULL,
          at TIMESTAMP NOT NULL,
          attempts INTEGER NOT NULL DEFAULT 0,
          next_attempt_at TIMESTAMP NOT NULL,
          claimed_until TIMESTAMP NULL,
          delivered_at TIMESTAMP NULL,
          last_error TEXT NULL
        )
        """
    )
    op.execute(
        f"CREATE INDEX IF NOT EXISTS {quote_ident(f'{name}_job_events_due_idx')} ON {job_events_table(name, schema)} "
        "(next_attempt_at) WHERE delivered_at IS NULL"
    )
    op.execute(f"ALTER TABLE {runs_table(name, schema)} ADD COLUMN IF NOT EXISTS failed BOOLEAN NULL")


def downgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    op.execute(f"DROP TABLE IF EXISTS {job_events_table(name, schema)}")
    op.execute(f"DROP TABLE IF EXISTS {jobs_table(name, schema)}")
    op.execute(f"ALTER TABLE {runs_table(name, schema)} DROP COLUMN IF EXISTS failed")
