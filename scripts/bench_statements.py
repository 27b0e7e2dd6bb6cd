"""What each lock statement costs Postgres, against ShedLock's own plain statements: printed, not asserted
(docs/performance.md, "Coalescing").

    .venv/bin/python scripts/bench_statements.py [--database-url URL] [--rounds 5] [--locks 2048]

On one table migrated to head (history trigger on), one connection, the statements prepared: blocks of ``--locks``
lock cycles (acquire + release of a free name) and of refused acquires (a held name), for

- ShedLock: Java's JdbcTemplateLockProvider statements with usingDbTime() (insert-or-take-over, then unlock);
- schedlock, one name per statement: the store's acquire and release;
- schedlock, 16 names per statement: the store's batched acquire and release (app.coalescing.batches);
- refused, before and after this round: ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (which locks the row it
  refuses) against the store's acquire, which refuses from its snapshot.

Per lock: the CPU of the Postgres backend serving the connection (from /proc: the database must run on this
machine) and the WAL written (the insert position's advance: right only while nobody else writes to the cluster).
Rounds alternate the order of the variants; the median of the rounds is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.db import migrate
from app.db.statements import close_pool, create_pool
from app.locking.leases import hash_token, new_token, released_marker
from app.locking.rows import NOW
from app.locking.store import LockStore
from app.settings import Settings
from bench import target
from bench.database import HELP, database, default_url
from scripts.bench_history import backend_cpu_s

BATCH = 16
AT_MOST = timedelta(minutes=5)


def shedlock_sql(table: str) -> tuple[str, str]:
    """ShedLock's JdbcTemplateLockProvider with usingDbTime() on Postgres (../shared/SHEDLOCK.md)."""
    bare = table.split(".")[-1]
    acquire = f"""INSERT INTO {table}(name, lock_until, locked_at, locked_by)
        VALUES($1, {NOW} + make_interval(secs => $2), {NOW}, $3)
        ON CONFLICT (name) DO UPDATE SET lock_until = {NOW} + make_interval(secs => $2), locked_at = {NOW},
          locked_by = $3
        WHERE {bare}.name = $1 AND {bare}.lock_until <= {NOW}"""
    unlock = f"""UPDATE {table} SET lock_until = CASE WHEN locked_at + make_interval(secs => $2) > {NOW}
        THEN locked_at + make_interval(secs => $2) ELSE {NOW} END WHERE name = $1 AND locked_by = $3"""
    return acquire, unlock


def locking_refusal_sql(table: str) -> str:
    """The acquire statement before this round: a refusal takes the row lock (and writes it to the WAL)."""
    return f"""
        WITH taken AS (
          INSERT INTO {table} AS l (name, lock_until, locked_at, locked_by, lease_token_hash, lock_at_least_for)
          VALUES ($1, {NOW} + $2::interval, {NOW}, $3, $4, $5::interval)
          ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until, locked_at = EXCLUDED.locked_at,
            locked_by = EXCLUDED.locked_by, lease_token_hash = EXCLUDED.lease_token_hash,
            lock_at_least_for = EXCLUDED.lock_at_least_for
          WHERE l.lock_until <= {NOW}
          RETURNING name)
        SELECT true FROM taken UNION ALL SELECT false FROM {table} WHERE name = $1 AND NOT EXISTS (SELECT FROM taken)"""


class Variants:
    def __init__(self, store: LockStore, conn: Any, locks: int) -> None:
        self.store, self.conn, self.locks = store, conn, locks

    def names(self, label: str) -> list[str]:
        """The same names every round: the rows exist (a lock row is never deleted), as in a service's steady state."""
        return [f"{label}-{i}" for i in range(self.locks)]

    async def seed(self) -> None:
        """Insert every name's row once, before anything is measured."""
        for label in ("java", "one", "many"):
            for name in self.names(label):
                await self.conn.fetch(self.store.sql.acquire, name, timedelta(0, 0, 1), "seed", b"s" * 32, timedelta(0))

    async def shedlock_cycles(self) -> None:
        acquire, unlock = shedlock_sql(self.store.table)
        for name in self.names("java"):
            await self.conn.execute(acquire, name, 300.0, "java-host")
            await self.conn.execute(unlock, name, 0.0, "java-host")

    async def single_cycles(self) -> None:
        for name in self.names("one"):
            token = new_token()
            args = (name, AT_MOST, "bench", hash_token(token), timedelta(0))
            await self.conn.fetch(self.store.sql.acquire, *args)
            h = hash_token(token)
            await self.conn.fetch(self.store.sql.release, name, h, released_marker(h), True)

    async def batched_cycles(self) -> None:
        names = self.names("many")
        for at in range(0, len(names), BATCH):
            group = names[at : at + BATCH]
            hashes = [hash_token(new_token()) for _ in group]
            n = len(group)
            await self.conn.fetch(
                self.store.sql.acquire_many, group, [AT_MOST] * n, ["bench"] * n, hashes, [timedelta(0)] * n
            )
            await self.conn.fetch(
                self.store.sql.release_many, group, hashes, [released_marker(h) for h in hashes], [True] * n
            )

    async def refused(self, sql: str) -> None:
        for i in range(self.locks):
            await self.conn.fetch(sql, f"held-{i % 4}", AT_MOST, "bench", hash_token(new_token()), timedelta(0))


async def measure(conn: Any, pid: int, work: Callable[[], Awaitable[None]], locks: int) -> tuple[float, float]:
    wal = await conn.fetchval("SELECT pg_current_wal_insert_lsn()")
    cpu = backend_cpu_s(pid)
    await work()
    cpu = backend_cpu_s(pid) - cpu
    wal = await conn.fetchval("SELECT pg_current_wal_insert_lsn()") - wal
    return cpu / locks * 1e6, float(wal) / locks


async def run(args: argparse.Namespace, settings: Settings) -> None:
    pool = await create_pool(settings)
    conn = await pool.acquire(5.0)
    store = LockStore.over(pool, settings.table_name, settings.table_schema, 5.0)
    pid = conn.get_server_pid()
    for i in range(4):  # the held names the refusals find
        await conn.fetch(store.sql.acquire, f"held-{i}", timedelta(hours=1), "holder", b"h" * 32, timedelta(0))
    variants = Variants(store, conn, args.locks)
    plan: dict[str, Callable[[], Awaitable[None]]] = {
        "cycle: ShedLock (Java's statements)": variants.shedlock_cycles,
        "cycle: schedlock, one name per statement": variants.single_cycles,
        f"cycle: schedlock, {BATCH} names per statement": variants.batched_cycles,
        "refused: INSERT ... ON CONFLICT (before)": lambda: variants.refused(locking_refusal_sql(store.table)),
        "refused: schedlock's acquire (now)": lambda: variants.refused(store.sql.acquire),
    }
    await variants.seed()
    results: dict[str, list[tuple[float, float]]] = {label: [] for label in plan}
    labels = list(plan)
    for r in range(args.rounds):
        order = labels if r % 2 == 0 else labels[::-1]
        for label in order:
            results[label].append(await measure(conn, pid, plan[label], args.locks))
            print(f"# round {r + 1}: {label}: {results[label][-1][0]:.0f} µs", file=sys.stderr)
    base = statistics.median(cpu for cpu, _ in results[labels[0]])
    print(f"{'per lock (median of rounds)':<48} {'Postgres CPU':>14} {'÷ ShedLock':>11} {'WAL':>11}")
    for label in labels:
        cpu = statistics.median(c for c, _ in results[label])
        wal = statistics.median(w for _, w in results[label])
        ratio = cpu / base if base else float("nan")  # a block too short for /proc's 10 ms ticks reads 0
        print(f"{label:<48} {cpu:>11,.0f} µs {ratio:>11.2f} {wal:>7,.0f} B")
    pool.release(conn)
    await close_pool(pool, 5.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=default_url(), help=HELP)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--locks", type=int, default=2048, help="lock cycles (or refusals) per block")
    args = parser.parse_args()
    with database(args.database_url) as args.database_url:
        return _run_all(args)


def _run_all(args: argparse.Namespace) -> int:
    schema = f"bench_statements_{uuid.uuid4().hex[:8]}"
    settings = Settings(database_url=args.database_url, table=f"{schema}.shedlock")  # type: ignore[arg-type]
    migrate.upgrade(settings)
    try:
        asyncio.run(run(args, settings))
    finally:
        target.drop_schema(args.database_url, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
