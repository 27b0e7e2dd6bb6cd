"""What each lock statement costs Postgres, against ShedLock's own plain statements: printed, not asserted
(docs/performance.md, "Coalescing").

    .venv/bin/python scripts/bench_statements.py [--database-url URL] [--rounds 5] [--locks 2048] [--against REV]

On one table migrated to head (history trigger on), one connection, the statements prepared: blocks of ``--locks``
lock cycles (acquire + release of a free name) and of refused acquires (a held name), for

- ShedLock: Java's JdbcTemplateLockProvider statements with usingDbTime() (insert-or-take-over, then unlock);
- schedlock, one name per statement: the store's acquire and release;
- schedlock, 16 names per statement: the store's batched acquire and release (app.coalescing.batches);
- both again with a token's name in ``locked_by``, as a server with API tokens writes it (the history reads it);
- refused, before and after this round: ``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` (which locks the row it
  refuses) against the store's acquire, which refuses from its snapshot.

Per lock: the CPU of the Postgres backend serving the connection (from /proc: the database must run on this
machine) and the WAL written (the insert position's advance: right only while nobody else writes to the cluster).
Rounds alternate the order of the variants; the median of the rounds is printed.

``--against REV`` measures a second table, migrated only to schema revision REV (e.g. ``0004``), on a connection of
its own: each block runs on both tables in turn, in alternating order, and the change's figure is the median of
the rounds' ratios head ÷ REV, which a machine's drifting load disturbs less than either side's median.
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

from alembic import command

from app.db import migrate
from app.db.statements import close_pool, create_pool
from app.locking.leases import hash_token, new_locked_by, new_token, released_marker
from app.locking.rows import NOW
from app.locking.store import LockStore
from app.settings import Settings
from bench import target
from bench.database import HELP, database, default_url
from scripts.bench_history import backend_cpu_s

BATCH = 16
AT_MOST = timedelta(minutes=5)
#: What a server with API tokens writes as locked_by (app.locking.leases.new_locked_by).
WITH_TOKEN = new_locked_by("bench", "bench-token")


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

    async def single_cycles(self, locked_by: str = "bench") -> None:
        for name in self.names("one"):
            token = new_token()
            args = (name, AT_MOST, locked_by, hash_token(token), timedelta(0))
            await self.conn.fetch(self.store.sql.acquire, *args)
            h = hash_token(token)
            await self.conn.fetch(self.store.sql.release, name, h, released_marker(h), True)

    async def batched_cycles(self, locked_by: str = "bench") -> None:
        names = self.names("many")
        for at in range(0, len(names), BATCH):
            group = names[at : at + BATCH]
            hashes = [hash_token(new_token()) for _ in group]
            n = len(group)
            await self.conn.fetch(
                self.store.sql.acquire_many, group, [AT_MOST] * n, [locked_by] * n, hashes, [timedelta(0)] * n
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


class Table:
    """One table's connection and variants: ``plan`` maps each label to its block."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def open(self, locks: int) -> None:
        self.pool = await create_pool(self.settings)
        self.conn = await self.pool.acquire(5.0)
        self.pid = self.conn.get_server_pid()
        s = self.settings
        store = LockStore.over(self.pool, s.table_name, s.table_schema, 5.0)
        for i in range(4):  # the held names the refusals find
            await self.conn.fetch(store.sql.acquire, f"held-{i}", timedelta(hours=1), "holder", b"h" * 32, timedelta(0))
        variants = Variants(store, self.conn, locks)
        self.plan: dict[str, Callable[[], Awaitable[None]]] = {
            "cycle: ShedLock (Java's statements)": variants.shedlock_cycles,
            "cycle: schedlock, one name per statement": variants.single_cycles,
            f"cycle: schedlock, {BATCH} names per statement": variants.batched_cycles,
            "cycle: schedlock, one name, a token's name": lambda: variants.single_cycles(WITH_TOKEN),
            f"cycle: schedlock, {BATCH} names, a token's name": lambda: variants.batched_cycles(WITH_TOKEN),
            "refused: INSERT ... ON CONFLICT (before)": lambda: variants.refused(locking_refusal_sql(store.table)),
            "refused: schedlock's acquire (now)": lambda: variants.refused(store.sql.acquire),
        }
        await variants.seed()

    async def close(self) -> None:
        self.pool.release(self.conn)
        await close_pool(self.pool, 5.0)


async def run(args: argparse.Namespace, settings: Settings, against: Settings | None) -> None:
    tables = [Table(settings)] + ([Table(against)] if against is not None else [])
    for table in tables:
        await table.open(args.locks)
    labels = list(tables[0].plan)
    results: list[dict[str, list[tuple[float, float]]]] = [{label: [] for label in labels} for _ in tables]
    try:
        for r in range(args.rounds):
            for label in labels if r % 2 == 0 else labels[::-1]:
                for t in range(len(tables)) if r % 2 == 0 else reversed(range(len(tables))):
                    table = tables[t]
                    results[t][label].append(await measure(table.conn, table.pid, table.plan[label], args.locks))
                figures = ", ".join(f"{res[label][-1][0]:.0f} µs" for res in results)
                print(f"# round {r + 1}: {label}: {figures}", file=sys.stderr)
    finally:
        for table in tables:
            await table.close()
    if against is None:
        report(labels, results[0])
    else:
        report_against(labels, results[0], results[1], args.against)


def report(labels: list[str], results: dict[str, list[tuple[float, float]]]) -> None:
    base = statistics.median(cpu for cpu, _ in results[labels[0]])
    print(f"{'per lock (median of rounds)':<48} {'Postgres CPU':>14} {'÷ ShedLock':>11} {'WAL':>11}")
    for label in labels:
        cpu = statistics.median(c for c, _ in results[label])
        wal = statistics.median(w for _, w in results[label])
        ratio = cpu / base if base else float("nan")  # a block too short for /proc's 10 ms ticks reads 0
        print(f"{label:<48} {cpu:>11,.0f} µs {ratio:>11.2f} {wal:>7,.0f} B")


def report_against(
    labels: list[str], head: dict[str, list[tuple[float, float]]], old: dict[str, list[tuple[float, float]]], rev: str
) -> None:
    print(
        f"{'per lock (median of rounds)':<48} {'CPU, head':>12} {'CPU, ' + rev:>12} {'head ÷ ' + rev:>11} "
        f"{'WAL, head':>11} {'WAL, ' + rev:>11}"
    )
    for label in labels:
        cpu = [statistics.median(c for c, _ in side[label]) for side in (head, old)]
        wal = [statistics.median(w for _, w in side[label]) for side in (head, old)]
        ratios = [h / o for (h, _), (o, _) in zip(head[label], old[label], strict=True) if o]
        ratio = statistics.median(ratios) if ratios else float("nan")
        print(f"{label:<48} {cpu[0]:>9,.0f} µs {cpu[1]:>9,.0f} µs {ratio:>11.3f} {wal[0]:>9,.0f} B {wal[1]:>9,.0f} B")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=default_url(), help=HELP)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--locks", type=int, default=2048, help="lock cycles (or refusals) per block")
    parser.add_argument("--against", metavar="REV", help="also measure a table at this schema revision, e.g. 0004")
    args = parser.parse_args()
    with database(args.database_url) as args.database_url:
        return _run_all(args)


def _run_all(args: argparse.Namespace) -> int:
    schemas = [f"bench_statements_{uuid.uuid4().hex[:8]}"]
    settings = Settings(database_url=args.database_url, table=f"{schemas[0]}.shedlock")  # type: ignore[arg-type]
    against = None
    try:
        migrate.upgrade(settings)
        if args.against:
            schemas.append(f"bench_statements_{uuid.uuid4().hex[:8]}")
            against = Settings(database_url=args.database_url, table=f"{schemas[1]}.shedlock")  # type: ignore[arg-type]
            command.upgrade(migrate.alembic_config(against), args.against)
        asyncio.run(run(args, settings, against))
    finally:
        for schema in schemas:
            target.drop_schema(args.database_url, schema)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
