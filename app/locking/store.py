"""All lock SQL, in one place: ShedLock's statements (../shared/SHEDLOCK.md) plus lease tokens.

Every operation is one atomic statement, run in its own implicit transaction, whose guard sits in its WHERE
clause; "now" is always ``timezone('utc', CURRENT_TIMESTAMP)``, the database's clock. Acquire, release and
extend each return both the outcome and, when they fail, the row as it stands, so one round trip decides
and explains.

Lease tokens: acquire generates a random secret; only its SHA-256 is stored (``lease_token_hash``). Release and
extend match on that hash, so they only touch the row while it still carries this lease. When a Java node
takes the row over, the table's trigger clears the hash (see the migration), so an old token stops working.
A released lease keeps a marker hash, so a repeated release is idempotent and an extend after release fails.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from app.db.schema import qualified_name, runs_table
from app.db.statements import fetch as run_statement
from app.errors import LockHeld, LockNotFound, NotHolder, SchemaNotMigrated, StorageUnavailable
from app.locking.leases import FORCED_MARKER_SQL, hash_token, new_token, released_marker
from app.locking.listing import list_query
from app.locking.rows import NOW, ROW, Lease, LockRow, Page, row_from
from app.locking.timefmt import format_time

#: Told of every statement the store runs: (operation, seconds, outcome), outcome "ok" or "unavailable" (the
#: database could not answer, or the table is not migrated). The operations are STATEMENT_OPERATIONS.
Observer = Callable[[str, float, str], None]
STATEMENT_OPERATIONS = (
    *("acquire", "release", "extend", "get", "list", "schema_revision", "count_held"),
    *("force_release", "runs", "skips", "flush_skips", "prune"),  # the run history's (app.locking.history)
)


class LockStore:
    """The lock operations over one table, on a ``app.db.pool.StatementPool``. ``observe``, if given, is told of
    every statement's duration and outcome (the metrics use it); ``on_held`` of every refused acquire, with the
    holder's row (the skip counter, app.locking.skips)."""

    def __init__(
        self,
        pool: Any,
        table: str,
        schema: str | None,
        pool_timeout: float,
        observe: Observer | None = None,
        on_held: Callable[[LockRow], None] | None = None,
    ) -> None:
        self._pool = pool
        self._pool_timeout = pool_timeout
        self._observe = observe
        self._on_held = on_held
        t = qualified_name(table, schema)
        self.table = t
        # Insert, or take over an expired row: ShedLock's acquire, plus the lease columns. When it is held,
        # the second branch reports the holder (the statement's snapshot; see _acquire_fallback).
        self._acquire_sql = f"""
            WITH taken AS (
              INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for)
              VALUES ($1, {NOW} + $2::interval, {NOW}, $3, $4, $5::interval)
              ON CONFLICT (name) DO UPDATE SET
                lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
                locked_by = EXCLUDED.locked_by, lease_token_hash = EXCLUDED.lease_token_hash,
                lock_at_least_for = EXCLUDED.lock_at_least_for
              WHERE l.lock_until <= {NOW}
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM taken
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM taken)"""
        # Never earlier than locked_at + lock_at_least_for; a second release with the same token changes nothing.
        self._release_sql = f"""
            WITH done AS (
              UPDATE {t} SET
                lock_until = CASE WHEN lease_token_hash = $3 THEN lock_until
                  ELSE GREATEST({NOW}, locked_at + COALESCE(lock_at_least_for, interval '0')) END,
                lease_token_hash = $3
              WHERE name = $1 AND lease_token_hash IN ($2, $3)
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        # Only a live lease moves; locked_at stays, so the at-least window still counts from the acquisition.
        self._extend_sql = f"""
            WITH done AS (
              UPDATE {t} SET lock_until = {NOW} + $3::interval,
                lock_at_least_for = COALESCE($4::interval, lock_at_least_for)
              WHERE name = $1 AND lease_token_hash = $2 AND lock_until > {NOW}
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        self._get_sql = f"SELECT {ROW}, {NOW} AS db_time FROM {t} WHERE name = $1"
        # Free a held lock now, the at-least window ignored, and end its lease: the empty hash matches no token. The
        # empty hash also tells the history trigger that this statement records the run's end itself, with who and
        # why (migration 0002). The lock row is updated first, so the lock order is the one release's trigger takes.
        self._force_sql = f"""
            WITH forced AS (
              UPDATE {t} SET lock_until = {NOW}, lease_token_hash = '{FORCED_MARKER_SQL}'::bytea
              WHERE name = $1 AND lock_until > {NOW}
              RETURNING {ROW}),
            ended AS (
              UPDATE {runs_table(table, schema)} r SET outcome = 'force_released', ended_at = {NOW},
                lock_until = {NOW}, forced_by = $2, force_reason = $3
              FROM forced WHERE r.fencing_token = forced.fencing_token AND r.outcome = 'running')
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM forced
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM forced)"""
        self._count_held_sql = f"SELECT count(*) AS n FROM {t} WHERE lock_until > {NOW}"

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        """Run one statement on the store's pool, observed as ``operation`` (one of STATEMENT_OPERATIONS)."""
        observe = self._observe
        if observe is None:
            return await run_statement(self._pool, self._pool_timeout, operation, sql, *args)
        start = time.perf_counter()
        try:
            rows = await run_statement(self._pool, self._pool_timeout, operation, sql, *args)
        except StorageUnavailable:
            observe(operation, time.perf_counter() - start, "unavailable")
            raise
        observe(operation, time.perf_counter() - start, "ok")
        return rows

    async def acquire(
        self, name: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta, locked_by: str
    ) -> Lease:
        """Take the lock if it is free or expired; raise LockHeld (with the holder) otherwise."""
        token = new_token()
        rows = await self.fetch(
            "acquire",
            self._acquire_sql,
            name,
            lock_at_most_for,
            locked_by,
            hash_token(token),
            lock_at_least_for,
        )
        if rows and rows[0]["ok"]:
            return Lease(row_from(rows[0]), token)
        current = row_from(rows[0]) if rows else None
        if current is None or not current.held:
            # The statement lost a race with a writer that committed after its snapshot was taken: read again.
            try:
                current = await self.get(name)
            except LockNotFound:
                raise LockHeld(f"{name!r} is held", name=name) from None
        if self._on_held is not None:
            self._on_held(current)
        raise _held(name, current)

    async def release(self, name: str, token: str) -> LockRow:
        token_hash = hash_token(token)
        rows = await self.fetch("release", self._release_sql, name, token_hash, released_marker(token_hash))
        return self._outcome(name, rows, "release")

    async def extend(
        self, name: str, token: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta | None
    ) -> LockRow:
        rows = await self.fetch(
            "extend", self._extend_sql, name, hash_token(token), lock_at_most_for, lock_at_least_for
        )
        return self._outcome(name, rows, "extend")

    async def force_release(self, name: str, by: str, reason: str) -> tuple[bool, LockRow]:
        """Free ``name`` now if it is held, ending its lease and recording its run as force-released by ``by``
        for ``reason``. Returns whether it was held, and the row as it is now; LockNotFound for an unknown name."""
        rows = await self.fetch("force_release", self._force_sql, name, by, reason)
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        return bool(rows[0]["ok"]), row_from(rows[0])

    async def get(self, name: str) -> LockRow:
        rows = await self.fetch("get", self._get_sql, name)
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        return row_from(rows[0])

    async def page(
        self,
        *,
        prefix: str | None,
        held: bool | None,
        after: str | None,
        limit: int,
        scope: Sequence[str] | None = None,
    ) -> Page:
        """One page ordered by name (code point order), using the "C"-collated name index. ``scope``: only
        names starting with one of these (an API token's prefixes); None means every name."""
        sql, args = list_query(self.table, prefix=prefix, held=held, after=after, limit=limit, scope=scope)
        rows = await self.fetch("list", sql, *args)
        if not rows:
            db_time = (await self.fetch("list", f"SELECT {NOW} AS db_time"))[0]["db_time"]
            return Page([], False, db_time)
        return Page([row_from(r) for r in rows[:limit]], len(rows) > limit, rows[0]["db_time"])

    async def schema_revision(self, version_table: str) -> str | None:
        """The Alembic revision recorded beside the lock table, or None if it was never migrated."""
        try:
            rows = await self.fetch("schema_revision", f"SELECT version_num FROM {version_table}")
        except SchemaNotMigrated:
            return None
        return str(rows[0]["version_num"]) if rows else None

    async def count_held(self) -> int:
        """How many locks are held now (Java rows too). A scan of the table: for metrics, not the hot path."""
        rows = await self.fetch("count_held", self._count_held_sql)
        return int(rows[0]["n"])

    @staticmethod
    def _outcome(name: str, rows: list[Any], action: str) -> LockRow:
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        row = row_from(rows[0])
        if not rows[0]["ok"]:
            raise NotHolder(
                f"cannot {action} {name!r}: this token no longer holds the lock "
                "(released, expired, taken over, or never issued for it)",
                name=name,
            )
        return row


def _held(name: str, current: LockRow) -> LockHeld:
    return LockHeld(
        f"{name!r} is held by {current.locked_by!r} until {format_time(current.lock_until)}",
        name=name,
        locked_by=current.locked_by,
        locked_at=format_time(current.locked_at),
        lock_until=format_time(current.lock_until),
        db_time=format_time(current.db_time),
    )
