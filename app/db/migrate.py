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


def upgrade(settings: Settings) -> str:
    """Create or adopt the lock table and bring it to the newest revision. Safe to run any number of times.
    Returns what it did, in a sentence: created, adopted, upgraded, or found it current."""
    config = alembic_config(settings)
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
