"""The lock table as SQLAlchemy metadata: ShedLock's four columns, plus schedlock's nullable/defaulted ones.

Used by the migration (to create the table when it is missing) and to quote the table's name in ``app.locking``.
Java ShedLock names its four columns in every statement, so the extra columns must stay nullable or defaulted.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

#: ShedLock's exact DDL (see ../shared/SHEDLOCK.md): the columns a Java node reads and writes.
SHEDLOCK_COLUMNS = ("name", "lock_until", "locked_at", "locked_by")

#: Columns only schedlock knows. Java's INSERT leaves them to their defaults; a trigger keeps them honest.
EXTRA_COLUMNS_DDL = {
    # Strictly increases with every acquisition of the name (bumped by the trigger, also for Java).
    "fencing_token": "BIGINT NOT NULL DEFAULT 0",
    # SHA-256 of the current schedlock lease's secret token; NULL when a Java node holds (or held) the row.
    "lease_token_hash": "BYTEA NULL",
    # The at-least window of the current schedlock lease, measured from locked_at; used by release.
    "lock_at_least_for": "INTERVAL NULL",
}

#: Migration 0003's columns, for runs once per schedule tick (docs/slots.md). TEXT, not VARCHAR: the API bounds the
#: key (1-64 characters), and an adopted table keeps ShedLock's only VARCHARs.
SLOT_COLUMNS_DDL = {
    # The tick the current schedlock lease runs; NULL for a lease without one, and cleared when a Java node takes
    # the row over (the slot trigger), as the fencing trigger clears lease_token_hash.
    "slot": "TEXT NULL",
    # The last tick a holder released as completed, when (database UTC) and by whom (its locked_by). Never cleared:
    # an acquire of that same tick answers slot_done.
    "last_completed_slot": "TEXT NULL",
    "last_completed_at": "TIMESTAMP NULL",
    "last_completed_by": "TEXT NULL",
}


def lock_table(name: str, schema: str | None) -> sa.Table:
    """The table as ShedLock creates it (four columns), for CREATE TABLE when it is missing."""
    return sa.Table(
        name,
        sa.MetaData(),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("lock_until", sa.DateTime(timezone=False), nullable=False),
        sa.Column("locked_at", sa.DateTime(timezone=False), nullable=False),
        sa.Column("locked_by", sa.String(255), nullable=False),
        schema=schema,
    )


_preparer = postgresql.dialect().identifier_preparer  # type: ignore[no-untyped-call]


def quote_ident(identifier: str) -> str:
    return str(_preparer.quote(identifier))


def qualified_name(name: str, schema: str | None) -> str:
    """``"schema"."table"`` quoted for SQL text."""
    return f"{quote_ident(schema)}.{quote_ident(name)}" if schema else quote_ident(name)


def runs_table(name: str, schema: str | None) -> str:
    """The run history beside lock table ``name`` (migration 0002; docs/history.md), quoted for SQL text."""
    return qualified_name(f"{name}_runs", schema)


def skips_table(name: str, schema: str | None) -> str:
    """Skipped acquire attempts per lock, run and hour, beside lock table ``name``, quoted for SQL text."""
    return qualified_name(f"{name}_skips", schema)


def jobs_table(name: str, schema: str | None) -> str:
    """The jobs (lock names with an expected schedule) beside lock table ``name`` (migration 0004; docs/jobs.md)."""
    return qualified_name(f"{name}_jobs", schema)


def job_events_table(name: str, schema: str | None) -> str:
    """The jobs' state changes waiting for (or done with) their webhook deliveries (migration 0004; docs/jobs.md)."""
    return qualified_name(f"{name}_job_events", schema)
