"""Schema management: ``schedlock-server migrate`` (Alembic upgrade head) and the readiness check's view of it."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.settings import Settings

_MIGRATIONS = Path(__file__).parent / "migrations"


def version_table_for(settings: Settings) -> str:
    """Alembic's bookkeeping table, one per lock table, beside it: ``<table>_migrations``."""
    return f"{settings.table_name}_migrations"


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["settings"] = settings
    return config


def head_revision() -> str:
    head = ScriptDirectory(str(_MIGRATIONS)).get_current_head()
    assert head is not None
    return head


def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in ScriptDirectory(str(_MIGRATIONS)).walk_revisions())


def is_ready_revision(current: str | None, head: str, known: frozenset[str]) -> bool:
    """Serving is safe at our head, and at any revision this release does not know: a newer release migrated
    the table ahead of us (rolling upgrades migrate first, then replace pods; migrations only ever add)."""
    return current is not None and (current == head or current not in known)


class UnsuitableDatabase(Exception):
    """The database cannot hold the lock table as schedlock needs it; the message says why and what to do."""


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


def upgrade(settings: Settings, *, require_utf8: bool = True) -> str:
    """Create or adopt the lock table and bring it to the newest revision. Safe to run any number of times.
    Returns what it did, in a sentence: created, adopted, upgraded, or found it current. Raises
    UnsuitableDatabase, before touching anything, for a database whose encoding is not UTF8 (``require_utf8=False``
    is for tests that need a table there, as an older release would have made it)."""
    config = alembic_config(settings)
    config.attributes["require_utf8"] = require_utf8
    command.upgrade(config, "head")
    return describe_outcome(settings.table, *config.attributes["outcome"])


def describe_outcome(table: str, existed: bool, before: str | None, after: str | None) -> str:
    """What a migration did to ``table``, from whether it existed and its revision before and after."""
    if not existed:
        return f"created table {table} at schema revision {after}"
    if before is None:
        return f"adopted the existing table {table} (its rows untouched) and upgraded it to schema revision {after}"
    if before != after:
        return f"upgraded table {table} from schema revision {before} to {after}"
    return f"table {table} is already current (schema revision {after}); nothing to do"


def schema_problem(current: str | None, head: str, known: frozenset[str]) -> str | None:
    """What is wrong with the schema revision a server found at start-up, in words an operator can act on."""
    if is_ready_revision(current, head, known):
        return None
    if current is None:
        return "is not migrated"
    return f"is at schema revision {current}, this release needs {head}"
