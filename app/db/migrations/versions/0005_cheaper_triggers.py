"""Cheaper triggers, the same rows: fewer trigger calls per lock change, and the run's token name read without a
capturing regular expression (docs/performance.md, "Run history").

- ``fencing_token`` defaults to the fencing sequence's next value: what 0001's trigger assigned on INSERT (an
  ``INSERT ... ON CONFLICT`` drew one for its proposed row either way), now without calling it. An INSERT that
  names ``fencing_token`` keeps its value; neither schedlock nor ShedLock names it.
- 0001's fencing trigger and 0003's slot trigger fire only for an UPDATE whose ``SET`` names a column they act on
  (``UPDATE OF``; the fencing trigger also for one that sets ``fencing_token``, which its function puts back): an
  acquisition sets ``locked_at`` and ``locked_by``; a release, an extend, a force-release and
  Java's unlock and extend set neither, so they no longer call the fencing function or evaluate the slot
  trigger's ``WHEN``. Only those columns changing made either do anything, and no other trigger changes them,
  so the rows come out the same. Their functions stay 0001's and 0003's.
- 0002's run function is unchanged but for the token name (``token_name`` below).

Each trigger costs a statement about as much whether its ``WHEN`` is false or its function is called: Postgres
prepares a trigger's ``WHEN`` once per statement, so a ``WHEN`` only pays off over many rows. A column list costs
nothing to check. Other shapes were measured and not kept (docs/performance-journal.md, 2026-12-02): the run
history as statement triggers over transition tables (one call per statement, but called for refused acquires
too), or split into row triggers told apart by ``WHEN`` clauses, and the fencing trigger gated by a ``WHEN``.

Nothing is rewritten: the default is a catalog change and the triggers are replaced in this migration's
transaction, so no lock change goes unrecorded. The downgrade restores 0001's, 0002's and 0003's triggers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

import importlib
from typing import Any

import sqlalchemy as sa
from alembic import op

from app.db.schema import qualified_name, quote_ident, runs_table

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

#: 0002's token name: ``substring(locked_by from`` this ``)``, group 1 the name in the suffix
#: ``[schedlock via <token> lease <id>]`` that app.locking.leases.new_locked_by appends.
TOKEN_NAME_RE = r" \[schedlock via ([A-Za-z0-9._:@-]+) lease [0-9a-f]+\]$"
#: The same without the capture: a test only, which Postgres answers several times faster.
_TOKEN_SUFFIX_RE = r" \[schedlock via [A-Za-z0-9._:@-]+ lease [0-9a-f]+\]$"


def token_name(locked_by: str) -> str:
    """SQL for 0002's token name of ``locked_by`` at a fraction of its cost (its capturing match cost more than
    the rest of the run's insert). Every string the expression matches is ``LIKE`` the suffix's shape, which is
    cheap to test first; then a match without the capture; then the name is cut out. A match ends with
    ``' [schedlock via ' || name || ' lease ' || hex || ']'``, where neither name nor hex holds a space or a
    bracket, so it starts at the last ``' [schedlock via '`` and the name runs to the next space.
    tests/db/test_history_triggers.py compares the two on awkward holders."""
    after_suffix = f"right({locked_by}, strpos(reverse({locked_by}), '{' [schedlock via '[::-1]}') - 1)"
    return (
        f"CASE WHEN {locked_by} LIKE '% [schedlock via % lease %]' AND {locked_by} ~ '{_TOKEN_SUFFIX_RE}' "
        f"THEN split_part({after_suffix}, ' ', 1) END"
    )


def _utc(column: str, aware: bool) -> str:
    # As in 0002: the history keeps UTC wall-clock TIMESTAMPs, whatever the writer's session time zone.
    return f"({column} AT TIME ZONE 'UTC')" if aware else column


def upgrade(settings: Any) -> None:
    name, schema = settings.table_name, settings.table_schema
    table = qualified_name(name, schema)

    sequence = qualified_name(f"{name}_fencing_seq", schema)
    op.execute(f"ALTER TABLE {table} ALTER COLUMN fencing_token SET DEFAULT nextval({_literal(sequence)}::regclass)")
    fence = quote_ident(f"{name}_schedlock_fence")
    op.execute(f"DROP TRIGGER IF EXISTS {fence} ON {table}")
    op.execute(
        f"CREATE TRIGGER {fence} BEFORE UPDATE OF locked_at, locked_by, fencing_token ON {table} FOR EACH ROW "
        f"EXECUTE FUNCTION {qualified_name(f'{name}_schedlock_fence', schema)}()"
    )
    slot = quote_ident(f"{name}_schedlock_slot")
    op.execute(f"DROP TRIGGER IF EXISTS {slot} ON {table}")
    op.execute(
        f"""
        CREATE TRIGGER {slot} BEFORE UPDATE OF locked_at, locked_by ON {table} FOR EACH ROW
        WHEN (OLD.slot IS NOT NULL
              AND (NEW.locked_at IS DISTINCT FROM OLD.locked_at OR NEW.locked_by IS DISTINCT FROM OLD.locked_by)
              AND (NEW.lease_token_hash IS NULL OR NEW.lease_token_hash IS NOT DISTINCT FROM OLD.lease_token_hash))
        EXECUTE FUNCTION {qualified_name(f"{name}_schedlock_slot", schema)}()
        """
    )
    _run_function(settings, token_name("NEW.locked_by"))


def _run_function(settings: Any, token: str) -> None:
    """0002's run function (its comments say which change is which), with ``token`` for the token name."""
    name, schema = settings.table_name, settings.table_schema
    runs = runs_table(name, schema)
    types = {c["name"]: c["type"] for c in sa.inspect(op.get_bind()).get_columns(name, schema=schema)}
    aware = {col: bool(getattr(types[col], "timezone", False)) for col in ("locked_at", "lock_until")}
    locked_at, new_until = _utc("NEW.locked_at", aware["locked_at"]), _utc("NEW.lock_until", aware["lock_until"])
    old_until = _utc("OLD.lock_until", aware["lock_until"])
    op.execute(
        f"""
        CREATE OR REPLACE FUNCTION {qualified_name(f"{name}_schedlock_runs", schema)}() RETURNS trigger
        LANGUAGE plpgsql AS $runs$
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
                  WHERE name = NEW.name AND fencing_token = NEW.fencing_token AND outcome = 'running'
                    AND lock_until <> new_until;
                RETURN NULL;
              END IF;
              IF old_until > now_utc THEN
                UPDATE {runs} SET outcome = 'released', ended_at = now_utc, lock_until = new_until
                  WHERE name = NEW.name AND fencing_token = NEW.fencing_token AND outcome = 'running';
              ELSE
                UPDATE {runs} SET outcome = 'expired', ended_at = old_until, lock_until = old_until
                  WHERE name = NEW.name AND fencing_token = NEW.fencing_token AND outcome = 'running';
              END IF;
              RETURN NULL;
            END IF;
            UPDATE {runs} SET outcome = 'taken_over', ended_at = LEAST(now_utc, old_until), lock_until = old_until
              WHERE name = OLD.name AND fencing_token = OLD.fencing_token AND outcome = 'running';
          END IF;
          INSERT INTO {runs} (name, fencing_token, locked_by, token_name, acquired_at, lock_until)
            VALUES (NEW.name, NEW.fencing_token, NEW.locked_by, {token}, {locked_at}, new_until);
          RETURN NULL;
        END
        $runs$
        """
    )


def downgrade(settings: Any) -> None:
    table = qualified_name(settings.table_name, settings.table_schema)
    op.execute(f"ALTER TABLE {table} ALTER COLUMN fencing_token SET DEFAULT 0")
    # Their upgrades are idempotent: run again, they restore their functions and triggers and change no row (the
    # runs of the leases held now exist already).
    for previous in ("0001_shedlock_table", "0002_run_history", "0003_schedule_slots"):
        importlib.import_module(f"app.db.migrations.versions.{previous}").upgrade(settings)


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"
