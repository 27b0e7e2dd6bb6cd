"""The lock operations over one table: acquire (plain and slotted), release, extend, force-release, get, list.

Each operation is one statement of app.locking.statements. Acquires of one name in flight decide the ones queued
behind (app.coalescing.flights); acquires and releases of different names coalesce into one statement when every
connection is busy (app.coalescing.batches).

Lease tokens: acquire generates a random secret; only its SHA-256 is stored (``lease_token_hash``). Release and
extend match on that hash, so they only touch the row while it still carries this lease. When a Java node takes the
row over, the table's trigger clears the hash (see the migration), so an old token stops working. A released lease
keeps a marker hash, so a repeated release is idempotent and an extend after release fails; a force-released one an
empty hash, which no token matches. The run history is written by that trigger, in each statement's transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from app.coalescing.batches import Batches
from app.coalescing.flights import Flights
from app.db.pool import StatementPool
from app.db.runner import Observer, Statements
from app.db.schema import qualified_name, runs_table
from app.errors import LockHeld, LockNotFound, SchemaNotMigrated, StorageUnavailable
from app.locking import slots
from app.locking.leases import hash_token, new_token, released_marker
from app.locking.listing import list_query
from app.locking.outcomes import Refusals, everyones, follow, lease_row
from app.locking.rows import Lease, LockRow, Page, row_from, slot_done
from app.locking.statements import AcquireOp, LockStatements, ReleaseOp

logger = logging.getLogger("schedlock.locks")


class LockStore:
    """The lock operations over ``statements``' pool. ``on_held`` is told of every refused acquire, with the
    holder's row (the skip counter, app.history.skips)."""

    def __init__(
        self, statements: Statements, sql: LockStatements, on_held: Callable[[LockRow], None] | None = None
    ) -> None:
        self.statements = statements
        self.sql = sql
        self.table = sql.table
        self._on_held = on_held
        #: The database's now as last seen, from which the slotted acquire lists its candidate ticks.
        self.db_clock = slots.DbClock()
        self._acquiring: Flights[Lease | LockRow] = Flights()
        #: The acquires that queued behind one statement are refused with its one row (Flights): made once.
        self.refusals = Refusals()
        self._orphans: set[asyncio.Task[Any]] = set()
        busy = statements.pool.saturated
        self.acquires: Batches[AcquireOp] = Batches(
            statements,
            ("acquire", sql.acquire),
            ("acquire_batch", sql.acquire_many),
            busy=busy,
            shared=everyones,
            orphaned=self._release_orphan,
        )
        self.releases: Batches[ReleaseOp] = Batches(
            statements, ("release", sql.release), ("release_batch", sql.release_many), busy=busy, shared=everyones
        )

    @classmethod
    def over(
        cls,
        pool: StatementPool,
        table: str,
        schema: str | None,
        pool_timeout: float,
        *,
        observe: Observer | None = None,
        on_held: Callable[[LockRow], None] | None = None,
    ) -> LockStore:
        """A store for lock table ``table`` in ``schema`` (unquoted) on ``pool``."""
        sql = LockStatements(qualified_name(table, schema), runs_table(table, schema))
        return cls(Statements(pool, pool_timeout, observe), sql, on_held)

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        """Run one statement as ``operation``, observed (app.db.runner.Statements)."""
        return await self.statements.fetch(operation, sql, *args)

    async def acquire(
        self, name: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta, locked_by: str
    ) -> Lease:
        """Take the lock if it is free or expired; raise LockHeld (with the holder) otherwise. Acquires of a name
        that arrive while one is in flight are decided by it (app.coalescing.flights)."""

        async def attempt() -> Lease | LockRow:
            token = new_token()
            op = AcquireOp(name, lock_at_most_for, locked_by, hash_token(token), lock_at_least_for)
            record = await self.acquires.submit(op)
            if record is not None and record["ok"]:
                return Lease(row_from(record), token)
            return await self._refused(name, record)

        outcome = await self._acquiring.run(name, attempt, follow)
        if isinstance(outcome, Lease):
            return outcome
        raise self._held(name, outcome)

    async def acquire_slot(
        self,
        name: str,
        lock_at_most_for: timedelta,
        lock_at_least_for: timedelta,
        locked_by: str,
        choose: Callable[[datetime], slots.Candidates],
    ) -> Lease:
        """Take the lock for a slot, ``choose`` listing the candidate slots around an estimate of the database's
        now. Raise SlotDone if the slot the statement picked is done: the last completed one, or a tick older than
        it (whether or not the lock is held); LockHeld if it is held."""
        token = new_token()
        args = (name, lock_at_most_for, locked_by, hash_token(token), lock_at_least_for)
        for _ in range(slots.ATTEMPTS):
            record = (await self.fetch("acquire", self.sql.acquire_slot, *args, *choose(self.db_clock.now()).args()))[0]
            self.db_clock.learn(record["db_time"])
            if record["picked"] is not None:
                break
        else:
            raise StorageUnavailable("acquire: the database's clock kept moving away from the ticks listed; retry")
        if record["ok"]:
            return Lease(row_from(record), token)
        picked = record["picked"]
        current = await self._refused(name, record if record["name"] is not None else None, picked)
        if slots.done(picked, current.last_completed_slot):
            if self._on_held is not None:  # a skipped run, whether the tick was done or someone holds the lock
                self._on_held(current)
            raise slot_done(name, current, picked)
        raise self._held(name, current)

    async def _refused(self, name: str, record: Any, slot: str | None = None) -> LockRow:
        """The row that refused an acquire. The statement's snapshot may predate a writer that committed after it
        (the row looked free, or was not there yet): then it is read again."""
        current = row_from(record) if record is not None else None
        if current is None or not (current.held or slots.done(slot, current.last_completed_slot)):
            try:
                current = await self.get(name)
            except LockNotFound:
                raise LockHeld(f"{name!r} is held", name=name) from None
        return current

    def _held(self, name: str, current: LockRow) -> LockHeld:
        """The refusal naming ``current`` as the holder (app.locking.outcomes.Refusals), told to ``on_held``."""
        if self._on_held is not None:
            self._on_held(current)
        return self.refusals.of(name, current)

    async def release(self, name: str, token: str, completed: bool = True) -> LockRow:
        """End the lease; ``completed`` (the job finished) records its slot, if it has one, as completed."""
        token_hash = hash_token(token)
        record = await self.releases.submit(ReleaseOp(name, token_hash, released_marker(token_hash), completed))
        return lease_row(name, [] if record is None else [record], "release")

    def _release_orphan(self, op: AcquireOp, record: Any) -> None:
        """A batch granted a lease to a caller that had gone: release it, so the lock is not held for nobody."""
        if record is None or not record["ok"]:
            return
        release = ReleaseOp(op.name, op.token_hash, released_marker(op.token_hash), False)
        task = asyncio.get_running_loop().create_task(self.releases.submit(release))
        self._orphans.add(task)
        task.add_done_callback(self._orphan_released)

    def _orphan_released(self, task: asyncio.Task[Any]) -> None:
        self._orphans.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("a lease granted to a caller that had gone could not be released: %s", task.exception())

    async def extend(
        self, name: str, token: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta | None
    ) -> LockRow:
        rows = await self.fetch("extend", self.sql.extend, name, hash_token(token), lock_at_most_for, lock_at_least_for)
        return lease_row(name, rows, "extend")

    async def force_release(self, name: str, by: str, reason: str) -> tuple[bool, LockRow]:
        """Free ``name`` now if it is held, ending its lease and recording its run as force-released by ``by``
        for ``reason``. Returns whether it was held, and the row as it is now; LockNotFound for an unknown name."""
        rows = await self.fetch("force_release", self.sql.force_release, name, by, reason)
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        return bool(rows[0]["ok"]), row_from(rows[0])

    async def get(self, name: str) -> LockRow:
        rows = await self.fetch("get", self.sql.get, name)
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
            return Page([], False, (await self.fetch("list", self.sql.now))[0]["db_time"])
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
        return int((await self.fetch("count_held", self.sql.count_held))[0]["n"])
