"""What a serving process knows of the schema's revisions, without Alembic (~8 MB of a server's memory that only
``schedlock-server migrate`` needs): this release's revisions, where Alembic keeps its bookkeeping,
whether the revision a table is at can be served, and whether a database's encoding can hold the rows.
tests/db/test_migrations.py holds REVISIONS to the migrations Alembic finds."""

from __future__ import annotations

from app.settings import Settings

#: This release's schema revisions, oldest first (app/db/migrations/versions): a new migration adds its id here.
REVISIONS = ("0001", "0002", "0003", "0004", "0005", "0006", "0007")
HEAD = REVISIONS[-1]
KNOWN = frozenset(REVISIONS)


def version_table_for(settings: Settings) -> str:
    """Alembic's bookkeeping table, one per lock table, beside it: ``<table>_migrations``."""
    return f"{settings.table_name}_migrations"


def is_ready_revision(current: str | None) -> bool:
    """Serving is safe at our head, and at any revision this release does not know: a newer release migrated
    the table ahead of us (rolling upgrades migrate first, then replace pods; migrations only ever add)."""
    return current is not None and (current == HEAD or current not in KNOWN)


def schema_problem(current: str | None) -> str | None:
    """What is wrong with the schema revision a server found at start-up, in words an operator can act on."""
    if is_ready_revision(current):
        return None
    if current is None:
        return "is not migrated"
    return f"is at schema revision {current}, this release needs {HEAD}"


def encoding_problem(encoding: str) -> str | None:
    """Why a database of ``encoding`` (its ``server_encoding``) cannot serve, or None for UTF8."""
    if encoding == "UTF8":
        return None
    return (
        f"the database's encoding is {encoding}, not UTF8: lock names, holders and reasons are any Unicode text "
        f"(Java ShedLock's names too), which it cannot all store"
        + (" (and it counts VARCHAR(64) in bytes)" if encoding == "SQL_ASCII" else "")
        + "; create a database with ENCODING 'UTF8' (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0) "
        "and point SCHEDLOCK_DATABASE_URL at it"
    )
