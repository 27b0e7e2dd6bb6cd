"""Create ShedLock's table if missing, or adopt an existing one; add schedlock's columns and fencing trigger.

Adopting never drops, rewrites or deletes anything: the extra columns are nullable or have a constant default
(a catalog-only change since PostgreSQL 11), and every statement is idempotent.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.schema import EXTRA_COLUMNS_DDL, lock_table, qualified_name, quote_ident

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    table = qualified_name(name, schema)
    bind = op.get_bind()

    if not sa.inspect(bind).has_table(name, schema=schema):
        lock_table(name, schema).create(bind)

    for column, ddl in EXTRA_COLUMNS_DDL.items():
        op.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS {quote_ident(column)} {ddl}")

    sequence = qualified_name(f"{name}_fencing_seq", schema)
    function = qualified_name(f"{name}_schedlock_fence", schema)
    trigger = quote_ident(f"{name}_schedlock_fence")
    op.execute(f"CREATE SEQUENCE IF NOT EXISTS {sequence} AS BIGINT")
    # Every acquisition, by schedlock or by a Java ShedLock node (whose SQL does not know these columns), sets
    # locked_at and locked_by; that is how the trigger tells an acquisition from an extend or a release.
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $fence$
        BEGIN
          IF TG_OP = 'INSERT' THEN
            NEW.fencing_token := nextval('{sequence}');
          ELSIF NEW.locked_at IS DISTINCT FROM OLD.locked_at OR NEW.locked_by IS DISTINCT FROM OLD.locked_by THEN
            NEW.fencing_token := nextval('{sequence}');
            -- An acquirer that set no new lease (a Java node) ends the schedlock lease: its token stops working.
            IF NEW.lease_token_hash IS NOT DISTINCT FROM OLD.lease_token_hash THEN
              NEW.lease_token_hash := NULL;
              NEW.lock_at_least_for := NULL;
            END IF;
          ELSE
            NEW.fencing_token := OLD.fencing_token;
          END IF;
          RETURN NEW;
        END
        $fence$
        """
    )
    op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    op.execute(
        f"CREATE TRIGGER {trigger} BEFORE INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()"
    )
    # Listing is ordered by code point and filtered by prefix; a "C"-collated index serves both, whatever the
    # database's default collation.
    index = quote_ident(f"{name}_name_c_idx")
    op.execute(f'CREATE INDEX IF NOT EXISTS {index} ON {table} (name COLLATE "C")')


def downgrade(settings: Any) -> None:
    raise NotImplementedError("schedlock never drops lock data; restore from backup instead")
