"""All lock SQL, in one place: ShedLock's statements (../shared/SHEDLOCK.md) plus lease tokens.

Every operation is one atomic statement, run in its own implicit transaction, whose guard sits in its WHERE
clause (acquires and releases that arrive together may share a statement over arrays, each answered as if alone:
app.locking.flights, app.locking.batches); "now" is always ``timezone('utc', CURRENT_TIMESTAMP)``, the database's
clock. Acquire, release and extend each return both the outcome and, when they fail, the row as it stands, so one
round trip decides and explains.

Lease tokens: acquire generates a random secret; only its SHA-256 is stored (``lease_token_hash``). Release and
extend match on that hash, so they only touch the row while it still carries this lease. When a Java node
takes the row over, the table's trigger clears the hash (see the migration), so an old token stops working.
A released lease keeps a marker hash, so a repeated release is idempotent and an extend after release fails.
A force-released lease gets an empty hash, which no token matches.

The run history (app.locking.history) is written by the table's trigger, in each statement's own transaction; only
force-release writes to it here, to record who forced and why.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from app.db.schema import qualified_name, runs_table
from app.db.statements import fetch as run_statement
from app.errors import LockHeld, LockNotFound, NotHolder, SchemaNotMigrated, SlotDone, StorageUnavailable
from app.locking import slots
from app.locking.batches import Batches
from app.locking.flights import ALONE, Flights
from app.locking.leases import FORCED_MARKER_SQL, hash_token, new_token, released_marker
from app.locking.listing import list_query
from app.locking.rows import NOW, ROW, Lease, LockRow, Page, row_from, row_of
from app.locking.timefmt import format_time

#: Told of every statement the store runs: (operation, seconds, outcome), outcome "ok" or "unavailable" (the
#: database could not answer, or the table is not migrated). The operations are STATEMENT_OPERATIONS.
Observer = Callable[[str, float, str], None]
STATEMENT_OPERATIONS = (
    *("acquire", "release", "extend", "get", "list", "schema_revision", "count_held"),
    *("acquire_batch", "release_batch"),  # many names in one statement (app.locking.batches)
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
        # Insert, or take over an expired row: ShedLock's acquire, plus the lease columns. A row the statement's
        # snapshot shows held is refused by reading alone: no INSERT is attempted, so a refusal takes no row lock,
        # no transaction id and writes no WAL, and never waits behind the holder's commit (docs/performance.md,
        # "Coalescing"). Otherwise ON CONFLICT decides on the latest committed row, as ShedLock's statement does;
        # if a writer that committed after the snapshot wins, the second branch reports the row as the snapshot
        # saw it (not held), and acquire() reads it again.
        take_over = f"""ON CONFLICT (name) DO UPDATE SET
                lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
                locked_by = EXCLUDED.locked_by, lease_token_hash = EXCLUDED.lease_token_hash,
                lock_at_least_for = EXCLUDED.lock_at_least_for, slot = NULL
              WHERE l.lock_until <= {NOW}"""
        self._acquire_sql = f"""
            WITH seen AS (SELECT {ROW} FROM {t} WHERE name = $1),
            taken AS (
              INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for, slot)
              SELECT $1, {NOW} + $2::interval, {NOW}, $3::text, $4::bytea, $5::interval, NULL::text
              WHERE NOT EXISTS (SELECT FROM seen WHERE lock_until > {NOW})
              {take_over}
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM taken
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM seen WHERE NOT EXISTS (SELECT FROM taken)"""
        # Never earlier than locked_at + lock_at_least_for; a second release with the same token changes nothing.
        # The first release of a lease with a slot, if the job completed ($4), records the slot (docs/slots.md).
        completes = "lease_token_hash = $2 AND $4::boolean AND slot IS NOT NULL"
        self._release_sql = f"""
            WITH done AS (
              UPDATE {t} SET
                lock_until = CASE WHEN lease_token_hash = $3 THEN lock_until
                  ELSE GREATEST({NOW}, locked_at + COALESCE(lock_at_least_for, interval '0')) END,
                lease_token_hash = $3,
                last_completed_slot = CASE WHEN {completes} THEN slot ELSE last_completed_slot END,
                last_completed_at = CASE WHEN {completes} THEN {NOW} ELSE last_completed_at END,
                last_completed_by = CASE WHEN {completes} THEN locked_by ELSE last_completed_by END
              WHERE name = $1 AND lease_token_hash IN ($2, $3)
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        # The same two statements for many names at once (app.locking.batches): the arguments are arrays, one
        # element per operation, each name at most once. Rows are asked for in name order (the acquire's insert
        # follows it; for the release's join the planner has the last word), so two batches rarely wait for each
        # other's rows crosswise. A name neither taken nor seen (inserted after the snapshot) has no row.
        self._acquire_many_sql = f"""
            WITH input AS (
              SELECT * FROM unnest($1::text[], $2::interval[], $3::text[], $4::bytea[], $5::interval[])
                AS i(name, at_most, locked_by, token_hash, at_least)),
            seen AS (SELECT {ROW} FROM {t} WHERE name = ANY($1::text[])),
            taken AS (
              INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for, slot)
              SELECT i.name, {NOW} + i.at_most, {NOW}, i.locked_by, i.token_hash, i.at_least, NULL::text FROM input i
              WHERE NOT EXISTS (SELECT FROM seen s WHERE s.name = i.name AND s.lock_until > {NOW})
              ORDER BY i.name
              {take_over}
              RETURNING {ROW})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM taken
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM seen s WHERE NOT EXISTS (SELECT FROM taken WHERE taken.name = s.name)"""
        many_completes = "l.lease_token_hash = i.token_hash AND i.completed AND l.slot IS NOT NULL"
        self._release_many_sql = f"""
            WITH input AS (
              SELECT * FROM unnest($1::text[], $2::bytea[], $3::bytea[], $4::boolean[])
                AS i(name, token_hash, marker, completed)),
            done AS (
              UPDATE {t} AS l SET
                lock_until = CASE WHEN l.lease_token_hash = i.marker THEN l.lock_until
                  ELSE GREATEST({NOW}, l.locked_at + COALESCE(l.lock_at_least_for, interval '0')) END,
                lease_token_hash = i.marker,
                last_completed_slot = CASE WHEN {many_completes} THEN l.slot ELSE l.last_completed_slot END,
                last_completed_at = CASE WHEN {many_completes} THEN {NOW} ELSE l.last_completed_at END,
                last_completed_by = CASE WHEN {many_completes} THEN l.locked_by ELSE l.last_completed_by END
              FROM (SELECT * FROM input ORDER BY name) i
              WHERE l.name = i.name AND l.lease_token_hash IN (i.token_hash, i.marker)
              RETURNING {row_of("l")})
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {row_of("l")}, {NOW} FROM {t} l
            WHERE l.name = ANY($1::text[]) AND NOT EXISTS (SELECT FROM done WHERE done.name = l.name)"""
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
              FROM forced
              WHERE r.name = forced.name AND r.fencing_token = forced.fencing_token AND r.outcome = 'running')
            SELECT true AS ok, {ROW}, {NOW} AS db_time FROM forced
            UNION ALL
            SELECT false, {ROW}, {NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM forced)"""
        self._count_held_sql = f"SELECT count(*) AS n FROM {t} WHERE lock_until > {NOW}"
        self._slot_sql = slots.acquire_sql(t)
        #: The database's now as last seen, from which the slotted acquire lists its candidate ticks.
        self.db_clock = slots.DbClock()
        #: Acquires in flight, by name: the ones that arrive meanwhile are decided together (app.locking.flights).
        self._acquiring: Flights[Lease | LockRow] = Flights()
        #: Acquires and releases of different names that arrive while one is in flight go as one statement.
        self.acquires: Batches[tuple[Any, ...], Any] = Batches(
            lambda args: self._one("acquire", self._acquire_sql, args),
            lambda ops: self._many("acquire_batch", self._acquire_many_sql, ops),
            _name_of,
            _everyones,
        )
        self.releases: Batches[tuple[Any, ...], Any] = Batches(
            lambda args: self._one("release", self._release_sql, args),
            lambda ops: self._many("release_batch", self._release_many_sql, ops),
            _name_of,
            _everyones,
        )

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
        """Take the lock if it is free or expired; raise LockHeld (with the holder) otherwise. Acquires of a name
        that arrive while one is in flight go as a group when it is done: the first runs the statement, the others
        find the lock held by whoever holds it after that (app.locking.flights)."""
        outcome = await self._acquiring.run(
            name, lambda: self._acquire_once(name, lock_at_most_for, lock_at_least_for, locked_by), _follow
        )
        if isinstance(outcome, Lease):
            return outcome
        if self._on_held is not None:
            self._on_held(outcome)
        raise _held(name, outcome)

    async def _acquire_once(
        self, name: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta, locked_by: str
    ) -> Lease | LockRow:
        """One acquire statement: the lease, or the holder's row."""
        token = new_token()
        row = await self.acquires.submit((name, lock_at_most_for, locked_by, hash_token(token), lock_at_least_for))
        if row is not None and row["ok"]:
            return Lease(row_from(row), token)
        current = row_from(row) if row is not None else None
        if current is None or not current.held:
            # The statement lost a race with a writer that committed after its snapshot was taken: read again.
            try:
                current = await self.get(name)
            except LockNotFound:
                raise LockHeld(f"{name!r} is held", name=name) from None
        return current

    async def acquire_slot(
        self,
        name: str,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        locked_by: str,
        choose: Callable[[datetime], slots.Candidates],
    ) -> Lease:
        """Take the lock for a slot (app.locking.slots), ``choose`` listing the candidate slots around an estimate
        of the database's now. Raise SlotDone if the slot the statement picked is the last completed one (whether
        or not the lock is held), LockHeld if it is held."""
        token = new_token()
        for _ in range(slots.ATTEMPTS):
            candidates = choose(self.db_clock.now())
            rows = await self.fetch(
                "acquire",
                self._slot_sql,
                *(name, lock_at_most_for, locked_by, hash_token(token), lock_at_least_for, *candidates.args()),
            )
            answer = rows[0]
            self.db_clock.learn(answer["db_time"])
            if answer["picked"] is not None:
                break
        else:
            raise StorageUnavailable("acquire: the database's clock kept moving away from the ticks listed; retry")
        if answer["ok"]:
            return Lease(row_from(answer), token)
        if answer["name"] is not None:
            current = row_from(answer)
        else:  # a row inserted after the statement's snapshot was taken: read it
            try:
                current = await self.get(name)
            except LockNotFound:
                raise LockHeld(f"{name!r} is held", name=name) from None
        if self._on_held is not None:  # a skipped run, whether the tick was done or someone holds the lock
            self._on_held(current)
        if current.last_completed_slot == answer["picked"]:
            raise _slot_done(name, current)
        raise _held(name, current)

    async def release(self, name: str, token: str, completed: bool = True) -> LockRow:
        """End the lease; ``completed`` (the job finished) records its slot, if it has one, as completed."""
        token_hash = hash_token(token)
        row = await self.releases.submit((name, token_hash, released_marker(token_hash), completed))
        return self._outcome(name, [] if row is None else [row], "release")

    async def _one(self, operation: str, sql: str, args: tuple[Any, ...]) -> Any:
        """The single-name statement: its row, or None."""
        rows = await self.fetch(operation, sql, *args)
        return rows[0] if rows else None

    async def _many(self, operation: str, sql: str, ops: Sequence[tuple[Any, ...]]) -> list[Any]:
        """The batched statement (arguments as arrays, one element per operation): each operation's row, or None."""
        rows = await self.fetch(operation, sql, *(list(column) for column in zip(*ops, strict=True)))
        by_name = {row["name"]: row for row in rows}
        return [by_name.get(op[0]) for op in ops]

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


def _name_of(args: tuple[Any, ...]) -> str:
    return str(args[0])


def _everyones(error: Exception) -> Exception | None:
    """A copy of ``error`` for each caller of a failed statement when it would be theirs too: the database is
    unavailable (their own statements would wait out the same timeouts) or not migrated. None otherwise."""
    if isinstance(error, StorageUnavailable | SchemaNotMigrated):
        return type(error)(error.message, **error.details)
    return None


def _follow(outcome: Lease | LockRow | BaseException) -> Any:
    """An acquire that queued behind another of the same name: after a lease was granted or the holder found, the
    lock is held, by that lease or that holder; after the database failed, the same error; after anything else
    (the first caller was cancelled, say), it runs its own statement."""
    if isinstance(outcome, Lease):
        return outcome.row
    if isinstance(outcome, LockRow):
        return outcome
    if isinstance(outcome, Exception) and (error := _everyones(outcome)) is not None:
        return error
    return ALONE


def _slot_done(name: str, current: LockRow) -> SlotDone:
    completed_at = format_time(current.last_completed_at) if current.last_completed_at is not None else None
    return SlotDone(
        f"slot {current.last_completed_slot!r} of {name!r} was completed at {completed_at} "
        f"by {current.last_completed_by!r}",
        name=name,
        slot=current.last_completed_slot,
        completed_at=completed_at,
        locked_by=current.last_completed_by,
        db_time=format_time(current.db_time),
    )


def _held(name: str, current: LockRow) -> LockHeld:
    return LockHeld(
        f"{name!r} is held by {current.locked_by!r} until {format_time(current.lock_until)}",
        name=name,
        locked_by=current.locked_by,
        locked_at=format_time(current.locked_at),
        lock_until=format_time(current.lock_until),
        db_time=format_time(current.db_time),
    )
