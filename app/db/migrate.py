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


def upgrade(settings: Settings) -> None:
    """Create or adopt the lock table and bring it to the newest revision. Safe to run any number of times."""
    command.upgrade(alembic_config(settings), "head")
