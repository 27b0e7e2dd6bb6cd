"""Runs once per schedule tick: the lease's slot and the name's last completed slot (docs/slots.md).

Nullable columns only, so Java's four-column statements are unaffected and Java acquisitions simply have no slot.
A trigger of its own (0001's fencing function stays as it is) clears a lease's slot when a Java node takes the row
over, the way the fencing trigger clears ``lease_token_hash``. Idempotent, like 0001: it may run any number of times.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

from alembic import op

from app.db.schema import SLOT_COLUMNS_DDL, qualified_name, quote_ident

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    table = qualified_name(name, schema)
    for column, ddl in SLOT_COLUMNS_DDL.items():
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {quote_ident(column)} {ddl}")

    function = qualified_name(f"{name}_schedlock_slot", schema)
    trigger = quote_ident(f"{name}_schedlock_slot")
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $slot$
        BEGIN
          NEW.slot := NULL;
          RETURN NEW;
        END
        $slot$
        """
    )
    # The WHEN clause keeps every other update (release, extend, schedlock's own acquisitions) from calling the
    # function at all. An acquisition sets locked_at or locked_by; one that set no new lease hash is a Java node's.
    # Postgres runs BEFORE triggers in name order, so 0001's fencing trigger may already have cleared the hash
    # (NULL) or not yet (unchanged): either way the condition holds, whichever trigger runs first.
    op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    op.execute(
        f"""
        CREATE TRIGGER {trigger} BEFORE UPDATE ON {table} FOR EACH ROW
        WHEN (OLD.slot IS NOT NULL
              AND (NEW.locked_at IS DISTINCT FROM OLD.locked_at OR NEW.locked_by IS DISTINCT FROM OLD.locked_by)
              AND (NEW.lease_token_hash IS NULL OR NEW.lease_token_hash IS NOT DISTINCT FROM OLD.lease_token_hash))
        EXECUTE FUNCTION {function}()
        """
    )


def downgrade(settings: Any) -> None:
    raise NotImplementedError("schedlock never drops lock data; restore from backup instead")
