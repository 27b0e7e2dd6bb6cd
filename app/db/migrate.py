"""Schema management: ``schedlock-server migrate`` (Alembic upgrade head). What a serving process needs to know of
the schema is app.db.revisions, which imports no Alembic."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from app.settings import Settings

_MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(settings: Settings) -> Config:
    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    config.attributes["settings"] = settings
    return config


def revisions() -> tuple[str, ...]:
    """The revisions Alembic finds in app/db/migrations, oldest first (app.db.revisions.REVISIONS must equal them)."""
    return tuple(reversed([script.revision for script in ScriptDirectory(str(_MIGRATIONS)).walk_revisions()]))


class UnsuitableDatabase(Exception):
    """The database cannot hold the lock table as schedlock needs it; the message says why and what to do."""


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
