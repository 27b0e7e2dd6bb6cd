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

import hashlib
import secrets
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from app.db import fetch
from app.errors import LockHeld, LockNotFound, NotHolder, SchemaNotMigrated
from app.schema import qualified_name
from app.timefmt import as_utc_naive, format_time

_NOW = "timezone('utc', CURRENT_TIMESTAMP)"
_ROW = "name, locked_by, locked_at, lock_until, fencing_token"


@dataclass(frozen=True, slots=True)
class LockRow:
    name: str
    locked_by: str
    locked_at: datetime
    lock_until: datetime
    fencing_token: int
    db_time: datetime

    @property
    def held(self) -> bool:
        return as_utc_naive(self.lock_until) > as_utc_naive(self.db_time)


@dataclass(frozen=True, slots=True)
class Lease:
    row: LockRow
    token: str


@dataclass(frozen=True, slots=True)
class Page:
    rows: list[LockRow]
    has_more: bool
    db_time: datetime


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _released_marker(token_hash: bytes) -> bytes:
    return hashlib.sha256(b"released\0" + token_hash).digest()


def new_locked_by(holder: str | None, principal: str | None = None) -> str:
    """Unique per acquisition and never a bare hostname, so no Java node's ``locked_by = <hostname>`` guard can
    ever match a schedlock lease (and no schedlock token can match a Java row)."""
    lease_id = secrets.token_hex(6)
    via = f" via {principal}" if principal else ""
    return f"{holder or 'anonymous'} [schedlock{via} lease {lease_id}]"


class LockStore:
    """The lock operations over one table. ``pool`` is an asyncpg pool (see app.db.create_pool)."""

    def __init__(self, pool: Any, table: str, schema: str | None, pool_timeout: float) -> None:
        self._pool = pool
        self._pool_timeout = pool_timeout
        t = qualified_name(table, schema)
        self.table = t
        # Insert, or take over an expired row: ShedLock's acquire, plus the lease columns. When it is held,
        # the second branch reports the holder (the statement's snapshot; see _acquire_fallback).
        self._acquire_sql = f"""
            WITH taken AS (
              INSERT INTO {t} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for)
              VALUES ($1, {_NOW} + $2::interval, {_NOW}, $3, $4, $5::interval)
              ON CONFLICT (name) DO UPDATE SET
                lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
                locked_by = EXCLUDED.locked_by, lease_token_hash = EXCLUDED.lease_token_hash,
                lock_at_least_for = EXCLUDED.lock_at_least_for
              WHERE l.lock_until <= {_NOW}
              RETURNING {_ROW})
            SELECT true AS ok, {_ROW}, {_NOW} AS db_time FROM taken
            UNION ALL
            SELECT false, {_ROW}, {_NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM taken)"""
        # Never earlier than locked_at + lock_at_least_for; a second release with the same token changes nothing.
        self._release_sql = f"""
            WITH done AS (
              UPDATE {t} SET
                lock_until = CASE WHEN lease_token_hash = $3 THEN lock_until
                  ELSE GREATEST({_NOW}, locked_at + COALESCE(lock_at_least_for, interval '0')) END,
                lease_token_hash = $3
              WHERE name = $1 AND lease_token_hash IN ($2, $3)
              RETURNING {_ROW})
            SELECT true AS ok, {_ROW}, {_NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {_ROW}, {_NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        # Only a live lease moves; locked_at stays, so the at-least window still counts from the acquisition.
        self._extend_sql = f"""
            WITH done AS (
              UPDATE {t} SET lock_until = {_NOW} + $3::interval,
                lock_at_least_for = COALESCE($4::interval, lock_at_least_for)
              WHERE name = $1 AND lease_token_hash = $2 AND lock_until > {_NOW}
              RETURNING {_ROW})
            SELECT true AS ok, {_ROW}, {_NOW} AS db_time FROM done
            UNION ALL
            SELECT false, {_ROW}, {_NOW} FROM {t} WHERE name = $1 AND NOT EXISTS (SELECT FROM done)"""
        self._get_sql = f"SELECT {_ROW}, {_NOW} AS db_time FROM {t} WHERE name = $1"
        self._count_held_sql = f"SELECT count(*) AS n FROM {t} WHERE lock_until > {_NOW}"

    def _fetch(self, action: str, sql: str, *args: Any) -> Awaitable[list[Any]]:
        return fetch(self._pool, self._pool_timeout, action, sql, *args)

    async def acquire(
        self, name: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta, locked_by: str
    ) -> Lease:
        """Take the lock if it is free or expired; raise LockHeld (with the holder) otherwise."""
        token = secrets.token_urlsafe(32)
        rows = await self._fetch(
            "acquire",
            self._acquire_sql,
            name,
            lock_at_most_for,
            locked_by,
            hash_token(token),
            lock_at_least_for,
        )
        if rows and rows[0]["ok"]:
            return Lease(_row(rows[0]), token)
        current = _row(rows[0]) if rows else None
        if current is None or not current.held:
            # The statement lost a race with a writer that committed after its snapshot was taken: read again.
            try:
                current = await self.get(name)
            except LockNotFound:
                raise LockHeld(f"{name!r} is held", name=name) from None
        raise _held(name, current)

    async def release(self, name: str, token: str) -> LockRow:
        token_hash = hash_token(token)
        rows = await self._fetch("release", self._release_sql, name, token_hash, _released_marker(token_hash))
        return self._outcome(name, rows, "release")

    async def extend(
        self, name: str, token: str, lock_at_most_for: timedelta, lock_at_least_for: timedelta | None
    ) -> LockRow:
        rows = await self._fetch(
            "extend", self._extend_sql, name, hash_token(token), lock_at_most_for, lock_at_least_for
        )
        return self._outcome(name, rows, "extend")

    async def get(self, name: str) -> LockRow:
        rows = await self._fetch("get", self._get_sql, name)
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        return _row(rows[0])

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
        sql, args = _list_query(self.table, prefix=prefix, held=held, after=after, limit=limit, scope=scope)
        rows = await self._fetch("list", sql, *args)
        if not rows:
            db_time = (await self._fetch("list", f"SELECT {_NOW} AS db_time"))[0]["db_time"]
            return Page([], False, db_time)
        return Page([_row(r) for r in rows[:limit]], len(rows) > limit, rows[0]["db_time"])

    async def schema_revision(self, version_table: str) -> str | None:
        """The Alembic revision recorded beside the lock table, or None if it was never migrated."""
        try:
            rows = await self._fetch("readiness check", f"SELECT version_num FROM {version_table}")
        except SchemaNotMigrated:
            return None
        return str(rows[0]["version_num"]) if rows else None

    async def count_held(self) -> int:
        """How many locks are held now (Java rows too). A scan of the table: for metrics, not the hot path."""
        rows = await self._fetch("count held locks", self._count_held_sql)
        return int(rows[0]["n"])

    @staticmethod
    def _outcome(name: str, rows: list[Any], action: str) -> LockRow:
        if not rows:
            raise LockNotFound(f"no lock named {name!r}", name=name)
        row = _row(rows[0])
        if not rows[0]["ok"]:
            raise NotHolder(
                f"cannot {action} {name!r}: this token no longer holds the lock "
                "(released, expired, taken over, or never issued for it)",
                name=name,
            )
        return row


def _row(record: Any) -> LockRow:
    return LockRow(
        record["name"],
        record["locked_by"],
        record["locked_at"],
        record["lock_until"],
        record["fencing_token"],
        record["db_time"],
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


def _list_query(
    table: str,
    *,
    prefix: str | None,
    held: bool | None,
    after: str | None,
    limit: int,
    scope: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    # Static text per combination of filters (never "$1 IS NULL OR ..."), so each prepared statement keeps an
    # index range scan even once Postgres switches it to a generic plan.
    where: list[str] = []
    args: list[Any] = []

    def arg(value: Any) -> str:
        args.append(value)
        return f"${len(args)}"

    if after is not None:
        where.append(f'name COLLATE "C" > {arg(after)}')
    if prefix:
        where.append(f'name COLLATE "C" >= {arg(prefix)}')
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            where.append(f'name COLLATE "C" < {arg(upper)}')
    if scope is not None:
        where.append(_scope_condition(scope, arg))
    if held is not None:
        where.append(f"lock_until {'>' if held else '<='} {_NOW}")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f'SELECT {_ROW}, {_NOW} AS db_time FROM {table} {clause} ORDER BY name COLLATE "C" LIMIT {arg(limit + 1)}'
    return sql, args


def _scope_condition(scope: Sequence[str], arg: Any) -> str:
    """Names starting with any of ``scope``: one index range per prefix. With several, the envelope from the
    least prefix to the greatest bound is added too, so the planner still walks one bounded index range in
    name order (the ORDER BY ... LIMIT stays cheap) and filters the ranges inside it."""
    if not scope:
        return "false"
    uppers = [prefix_upper_bound(p) for p in scope]
    ranges = [
        f'name COLLATE "C" >= {arg(p)}' + (f' AND name COLLATE "C" < {arg(u)}' if u is not None else "")
        for p, u in zip(scope, uppers, strict=True)
    ]
    if len(ranges) == 1:
        return ranges[0]
    envelope = f'name COLLATE "C" >= {arg(min(scope))}'
    if all(u is not None for u in uppers):
        envelope += f' AND name COLLATE "C" < {arg(max(u for u in uppers if u is not None))}'
    return f"{envelope} AND ({' OR '.join(f'({r})' for r in ranges)})"


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix``, in code point order (None: no
    bound). Code point order is byte order in UTF-8, which is what the "C" collation compares."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be stored; skip them
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None
