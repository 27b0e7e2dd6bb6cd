"""Java ShedLock nodes in the campaign: ShedLock's own statements (tests/support/java.py, ../shared/SHEDLOCK.md),
each answered by the row it wrote (``RETURNING``), so that Java's grants enter the history with their database times
and fencing tokens.

``unguarded`` plants a bug for the checker to find: that node's takeover has no ``lock_until <= now`` guard, so it
takes a row whoever holds it. ``hold_open`` is the ShedLock #3577 pattern: the takeover runs inside a transaction
that began earlier and stays open while the job runs, keeping the row locked.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any, TextIO

from tests.chaos.history import Op, to_api_time

NOW = "timezone('utc', CURRENT_TIMESTAMP)"
RETURNING = f"RETURNING name, lock_until, locked_at, locked_by, fencing_token, {NOW} AS db_time"


def statements(table: str, *, unguarded: bool = False) -> dict[str, str]:
    guard = "" if unguarded else f" AND {table}.lock_until <= {NOW}"
    return {
        "insert": f"""INSERT INTO {table}(name, lock_until, locked_at, locked_by)
            VALUES($1, {NOW} + make_interval(secs => $2), {NOW}, $3)
            ON CONFLICT (name) DO UPDATE SET
              lock_until = {NOW} + make_interval(secs => $2),
              locked_at = {NOW}, locked_by = $3
            WHERE {table}.name = $1{guard} {RETURNING}""",
        "take_over": f"""UPDATE {table} SET lock_until = {NOW} + make_interval(secs => $2),
              locked_at = {NOW}, locked_by = $3
            WHERE {table}.name = $1{guard} {RETURNING}""",
        "unlock": f"""UPDATE {table} SET lock_until = CASE
              WHEN locked_at + make_interval(secs => $2) > {NOW}
              THEN locked_at + make_interval(secs => $2)
              ELSE {NOW} END
            WHERE name = $1 AND locked_by = $3 {RETURNING}""",
        "extend": f"""UPDATE {table} SET lock_until = {NOW} + make_interval(secs => $2)
            WHERE name = $1 AND locked_by = $3 AND lock_until > {NOW} {RETURNING}""",
    }


def _row(record: Any) -> dict[str, Any]:
    if record is None:
        return {"ok": False}
    return {
        "ok": True,
        "locked_at": to_api_time(record["locked_at"]),
        "lock_until": to_api_time(record["lock_until"]),
        "locked_by": record["locked_by"],
        "fencing_token": record["fencing_token"],
        "db_time": to_api_time(record["db_time"]),
    }


class JavaNode:
    """One Java process: a hostname, the names it knows have a row (ShedLock caches them), and a loop of jobs."""

    def __init__(self, pool: Any, table: str, hostname: str, seed: int, out: TextIO, *, unguarded: bool = False):
        self.pool = pool
        self.hostname = hostname
        self.sql = statements(table, unguarded=unguarded)
        self.rng = random.Random(f"{seed}-{hostname}")
        self.out = out
        self.known: set[str] = set()
        self.leases = 0
        self.ops = 0

    async def _run(self, kind: str, sql: str, name: str, lease: str, seconds: float, conn: Any = None) -> Op:
        self.ops += 1
        t0 = time.monotonic()
        body = error = None
        try:
            record = await (conn or self.pool).fetchrow(sql, name, seconds, self.hostname, timeout=5)
            body = _row(record)
        except Exception as e:  # any failure of the statement: its outcome is unknown
            error = f"{type(e).__name__}: {e}"[:200]
        field = "lock_at_least_for" if kind == "java_unlock" else "lock_at_most_for"
        req = {field: round(seconds * 1000), "hostname": self.hostname}
        op = Op(f"{lease}.{self.ops}", self.hostname, kind, name, lease, t0, time.monotonic(), req, None, body, error)
        self.out.write(op.to_json() + "\n")
        return op

    def _acquire_sql(self, name: str) -> str:
        return self.sql["take_over" if name in self.known else "insert"]

    async def job(self, names: list[str], at_most: float) -> None:
        self.leases += 1
        lease = f"{self.hostname}.{self.leases}"
        name = self.rng.choice(names)
        acquired = await self._run("java_acquire", self._acquire_sql(name), name, lease, at_most)
        if acquired.error is None:
            self.known.add(name)
        if not acquired.ok:
            return
        await self._work(name, lease, at_most)

    async def _work(self, name: str, lease: str, at_most: float) -> None:
        await asyncio.sleep(self.rng.uniform(0, 0.5))
        if self.rng.random() < 0.3:
            await self._run("java_extend", self.sql["extend"], name, lease, at_most)
            await asyncio.sleep(self.rng.uniform(0, 0.3))
        at_least = self.rng.choice([0.0, 0.0, 0.3])
        for _ in range(3):
            if (await self._run("java_unlock", self.sql["unlock"], name, lease, at_least)).error is None:
                break
            await asyncio.sleep(0.2)

    async def hold_open(self, name: str, at_most: float, hold: float) -> None:
        """ShedLock #3577: the takeover inside an outer transaction that began earlier and commits only after the
        job ran, ``hold`` seconds later; the row stays locked all that time."""
        self.leases += 1
        lease = f"{self.hostname}.{self.leases}"
        self.ops += 1
        t0 = time.monotonic()
        body = error = None
        try:
            async with self.pool.acquire(timeout=5) as conn, conn.transaction():
                await conn.execute("SELECT 1")  # the transaction's CURRENT_TIMESTAMP is now
                await asyncio.sleep(0.1)
                body = _row(await conn.fetchrow(self.sql["take_over"], name, at_most, self.hostname))
                await asyncio.sleep(hold)
        except Exception as e:
            error = f"{type(e).__name__}: {e}"[:200]
        req = {"lock_at_most_for": round(at_most * 1000), "hostname": self.hostname, "held_open_s": hold}
        op = Op(f"{lease}.{self.ops}", self.hostname, "java_acquire", name, lease, t0, time.monotonic(), req, None,
                body, error)  # fmt: skip
        self.out.write(op.to_json() + "\n")
        if op.ok:
            await self._work(name, lease, at_most)

    async def run(self, names: list[str], at_most: float, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.job(names, at_most)
            await asyncio.sleep(self.rng.uniform(0.05, 0.3))
