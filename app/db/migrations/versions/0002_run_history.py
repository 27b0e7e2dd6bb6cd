"""Run history: a run per acquisition (schedlock's or a Java node's), written by a trigger on the lock table, and
skipped attempts per lock, run and hour (docs/history.md).

The lock table's columns and 0001's fencing trigger stay as they are. An AFTER trigger sees the row as 0001's BEFORE
trigger left it: a new fencing token means an acquisition. AFTER rather than BEFORE because Postgres fires BEFORE
INSERT for every ``INSERT ... ON CONFLICT`` attempt, the refused ones too; AFTER triggers fire only for rows
actually inserted or updated, so a refused acquire (409) writes nothing.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.schema import qualified_name, quote_ident, runs_table, skips_table

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

#: The ``[schedlock via <token> lease <id>]`` suffix app.locking.leases.new_locked_by appends; group 1 is the token.
TOKEN_NAME_RE = r" \[schedlock via ([A-Za-z0-9._:@-]+) lease [0-9a-f]+\]$"


def _utc(column: str, aware: bool) -> str:
    # The history keeps UTC wall-clock TIMESTAMPs. A TIMESTAMPTZ lock table is converted explicitly, so the result
    # does not depend on the writer's session time zone (a Java node's is the JVM's).
    return f"({column} AT TIME ZONE 'UTC')" if aware else column


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    table = qualified_name(name, schema)
    runs, skips = runs_table(name, schema), skips_table(name, schema)
    bind = op.get_bind()
    types = {c["name"]: c["type"] for c in sa.inspect(bind).get_columns(name, schema=schema)}
    aware = {col: bool(getattr(types[col], "timezone", False)) for col in ("locked_at", "lock_until")}

    # TEXT, not the lock table's lengths: an adopted table may allow longer values, and a history row that does not
    # fit would make the lock change itself fail. fillfactor leaves room on each page, so the updates that end a run
    # (no indexed column changes) stay heap-only.
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {runs} (
          fencing_token BIGINT PRIMARY KEY,
          name TEXT NOT NULL,
          locked_by TEXT NOT NULL,
          token_name TEXT NULL,
          acquired_at TIMESTAMP NOT NULL,
          lock_until TIMESTAMP NOT NULL,
          ended_at TIMESTAMP NULL,
          outcome TEXT NOT NULL DEFAULT 'running'
            CHECK (outcome IN ('running', 'released', 'expired', 'taken_over', 'force_released')),
          forced_by TEXT NULL,
          force_reason TEXT NULL
        ) WITH (fillfactor = 85)
        """
    )
    op.execute(f"CREATE INDEX IF NOT EXISTS {quote_ident(f'{name}_runs_name_idx')} ON {runs} (name, fencing_token)")
    op.execute(f"CREATE INDEX IF NOT EXISTS {quote_ident(f'{name}_runs_acquired_idx')} ON {runs} (acquired_at)")
    op.execute(
        f"""
        CREATE TABLE IF NOT EXISTS {skips} (
          name TEXT NOT NULL,
          fencing_token BIGINT NOT NULL,
          hour TIMESTAMP NOT NULL,
          skipped BIGINT NOT NULL,
          PRIMARY KEY (name, fencing_token, hour)
        )
        """
    )
    op.execute(f"CREATE INDEX IF NOT EXISTS {quote_ident(f'{name}_skips_hour_idx')} ON {skips} (hour)")

    locked_at, new_until = _utc("NEW.locked_at", aware["locked_at"]), _utc("NEW.lock_until", aware["lock_until"])
    old_until = _utc("OLD.lock_until", aware["lock_until"])
    function = qualified_name(f"{name}_schedlock_runs", schema)
    trigger = quote_ident(f"{name}_schedlock_runs")
    # Which change is which (the lease is the row's fencing token; docs/history.md, "How a run ends"):
    # - a new fencing token: an acquisition. The previous run, if still running, expired unreleased: taken over.
    # - the lease hash changed to the empty marker: a force-release, whose own statement records it (who and why).
    # - the lease hash changed otherwise: schedlock's release (the released marker).
    # - a Java row (no lease hash) whose lock_until did not rise, or was or became past: Java's unlock. Its extend
    #   needs a live lease and sets now + lockAtMostFor, which (as its keep-alive does) raises lock_until.
    # - anything else moving lock_until: an extend.
    # A release after lock_until (nobody took the row meanwhile) ends the run as expired, at lock_until: the lock
    # was free from then on, whatever the late release wrote.
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $runs$
        DECLARE
          now_utc CONSTANT timestamp := timezone('utc', CURRENT_TIMESTAMP);
          new_until CONSTANT timestamp := {new_until};
          old_until timestamp;
        BEGIN
          IF TG_OP = 'UPDATE' THEN
            old_until := {old_until};
            IF NEW.fencing_token = OLD.fencing_token THEN
              IF NEW.lease_token_hash IS DISTINCT FROM OLD.lease_token_hash THEN
                IF NEW.lease_token_hash = '\\x'::bytea THEN
                  RETURN NULL;
                END IF;
              ELSIF NEW.lease_token_hash IS NOT NULL
                  OR (new_until > old_until AND old_until > now_utc) THEN
                UPDATE {runs} SET lock_until = new_until
                  WHERE fencing_token = NEW.fencing_token AND outcome = 'running' AND lock_until <> new_until;
                RETURN NULL;
              END IF;
              IF old_until > now_utc THEN
                UPDATE {runs} SET outcome = 'released', ended_at = now_utc, lock_until = new_until
                  WHERE fencing_token = NEW.fencing_token AND outcome = 'running';
              ELSE
                UPDATE {runs} SET outcome = 'expired', ended_at = old_until, lock_until = old_until
                  WHERE fencing_token = NEW.fencing_token AND outcome = 'running';
              END IF;
              RETURN NULL;
            END IF;
            UPDATE {runs} SET outcome = 'taken_over', ended_at = LEAST(now_utc, old_until), lock_until = old_until
              WHERE fencing_token = OLD.fencing_token AND outcome = 'running';
          END IF;
          INSERT INTO {runs} (fencing_token, name, locked_by, token_name, acquired_at, lock_until)
            VALUES (NEW.fencing_token, NEW.name, NEW.locked_by, substring(NEW.locked_by from '{TOKEN_NAME_RE}'),
                    {locked_at}, new_until)
            ON CONFLICT (fencing_token) DO NOTHING;
          RETURN NULL;
        END
        $runs$
        """
    )
    op.execute(f"DROP TRIGGER IF EXISTS {trigger} ON {table}")
    op.execute(f"CREATE TRIGGER {trigger} AFTER INSERT OR UPDATE ON {table} FOR EACH ROW EXECUTE FUNCTION {function}()")
    # Leases held while this migration runs get their run now, so their end is recorded too. (Rows older than the
    # fencing trigger have token 0 and no identity to record.)
    op.execute(
        f"""
        INSERT INTO {runs} (fencing_token, name, locked_by, token_name, acquired_at, lock_until)
        SELECT fencing_token, name, locked_by, substring(locked_by from '{TOKEN_NAME_RE}'),
               {_utc("locked_at", aware["locked_at"])}, {_utc("lock_until", aware["lock_until"])}
        FROM {table}
        WHERE fencing_token > 0 AND {_utc("lock_until", aware["lock_until"])} > timezone('utc', CURRENT_TIMESTAMP)
        ON CONFLICT (fencing_token) DO NOTHING
        """
    )


def downgrade(settings: Any) -> None:
    raise NotImplementedError("schedlock never drops lock data; restore from backup instead")
