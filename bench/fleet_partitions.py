"""The fleet's history partitioned by day, beside the plain table: retention by dropping a day, and what the
partitions cost the statements that run at every lock change and every read (``python -m bench.fleet
--partitions``; docs/history.md, "A fleet's month").

A copy of the runs, ``PARTITION BY RANGE (acquired_at)`` with one partition per day and the plain table's two
indexes, is timed against the plain table on:

- the run trigger's lookup at every extend and release: ``UPDATE ... WHERE name = $1 AND fencing_token = $2 AND
  outcome = 'running'`` (on ended runs, so nothing changes: the cost is finding the row), as the trigger sends it,
  and with the run's ``acquired_at`` added (which the trigger could pass: the lock row's ``locked_at``) so that
  Postgres prunes to one partition;
- the trigger's insert of a new run;
- a lock's runs page (``name``, newest token first) and every lock's (newest ``acquired_at`` first);
- retention: the oldest day detached and dropped, against the batched DELETE (bench/fleet.py).
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
from collections.abc import Callable
from typing import Any

import asyncpg

from app.db.schema import qualified_name, runs_table

LOOKUPS = 2000


async def measure(conn: asyncpg.Connection, schema: str, table: str, say: Callable[[str], None]) -> dict[str, Any]:
    runs = runs_table(table, schema)
    parted = qualified_name(f"{table}_runs_by_day", schema)
    out: dict[str, Any] = {}
    first, last = await conn.fetchrow(f"SELECT min(acquired_at)::date, max(acquired_at)::date FROM {runs}")
    await conn.execute(f"DROP TABLE IF EXISTS {parted}")
    await conn.execute(
        f"CREATE TABLE {parted} (LIKE {runs} INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (acquired_at)"
    )
    day, days = first, 0
    while day <= last:
        part = qualified_name(f"{table}_runs_{day:%Y%m%d}", schema)
        await conn.execute(
            f"CREATE TABLE {part} PARTITION OF {parted} FOR VALUES FROM ('{day}') TO ('{day + dt.timedelta(days=1)}') "
            "WITH (fillfactor = 85)"
        )
        day, days = day + dt.timedelta(days=1), days + 1
    t0 = time.monotonic()
    await conn.execute(f"INSERT INTO {parted} SELECT * FROM {runs}")
    await conn.execute(f"CREATE INDEX ON {parted} (name, fencing_token)")
    await conn.execute(f"CREATE INDEX ON {parted} (acquired_at, fencing_token)")
    await conn.execute(f"VACUUM (ANALYZE) {parted}")
    out["partitions"] = days
    out["copy_s"] = round(time.monotonic() - t0, 1)
    say(f"partitioned copy: {days} partitions in {out['copy_s']} s")

    # 0.1% of a month's pages is plenty; a small history (the suite's 1/100 of a day) may give no page at that
    # share: take ten times as many until the sample is full, or the whole table.
    sample: list[Any] = []
    share = 0.1
    while len(sample) < LOOKUPS and share <= 100:
        sample = await conn.fetch(
            f"SELECT name, fencing_token, acquired_at FROM {runs} TABLESAMPLE SYSTEM ({share}) "
            f"WHERE outcome <> 'running' LIMIT {LOOKUPS}"
        )
        share *= 10
    keys = [(r["name"], r["fencing_token"], r["acquired_at"]) for r in sample]
    until = dt.datetime(2000, 1, 1)
    lookup = "UPDATE {t} SET lock_until = $3 WHERE name = $1 AND fencing_token = $2 AND outcome = 'running' " + (
        "AND lock_until <> $3"
    )
    pruned = lookup + " AND acquired_at = $4"
    out["trigger_lookup_us"] = {
        "plain": await _each(conn, lookup.format(t=runs), [(n, f, until) for n, f, _ in keys]),
        "partitioned": await _each(conn, lookup.format(t=parted), [(n, f, until) for n, f, _ in keys]),
        "partitioned_pruned": await _each(conn, pruned.format(t=parted), [(n, f, until, a) for n, f, a in keys]),
    }
    say(f"trigger lookup: {out['trigger_lookup_us']}")
    insert = (
        "INSERT INTO {t} (name, fencing_token, locked_by, token_name, acquired_at, lock_until) "
        "VALUES ($1, $2, 'bench', NULL, timezone('utc', now()), timezone('utc', now()) + interval '1 minute')"
    )
    top = await conn.fetchval(f"SELECT max(fencing_token) FROM {runs}")
    new = [(n, top + 1 + i) for i, (n, _, _) in enumerate(keys)]
    default = qualified_name(f"{table}_runs_default", schema)
    await conn.execute(
        f"CREATE TABLE IF NOT EXISTS {default} PARTITION OF {parted} DEFAULT"  # rows past the last day
    )
    out["trigger_insert_us"] = {
        "plain": await _each(conn, insert.format(t=runs), new),
        "partitioned": await _each(conn, insert.format(t=parted), new),
    }
    say(f"trigger insert: {out['trigger_insert_us']}")
    names = list({n for n, _, _ in keys})[:200]
    page = "SELECT * FROM {t} WHERE name = $1 ORDER BY fencing_token DESC LIMIT 51"
    every = "SELECT * FROM {t} ORDER BY acquired_at DESC, fencing_token DESC LIMIT 51"
    out["lock_page_us"] = {
        "plain": await _each(conn, page.format(t=runs), [(n,) for n in names]),
        "partitioned": await _each(conn, page.format(t=parted), [(n,) for n in names]),
    }
    out["every_page_us"] = {
        "plain": await _each(conn, every.format(t=runs), [() for _ in range(200)]),
        "partitioned": await _each(conn, every.format(t=parted), [() for _ in range(200)]),
    }
    say(f"pages: {out['lock_page_us']} {out['every_page_us']}")

    oldest = qualified_name(f"{table}_runs_{first:%Y%m%d}", schema)
    rows = await conn.fetchval(f"SELECT count(*) FROM {oldest}")
    size = await conn.fetchval(f"SELECT pg_total_relation_size('{oldest}'::regclass)")
    wal0, t0 = await _wal(conn), time.monotonic()
    await conn.execute(f"ALTER TABLE {parted} DETACH PARTITION {oldest}")
    await conn.execute(f"DROP TABLE {oldest}")
    out["drop_day"] = {
        "rows": rows,
        "freed_mb": round(size / 2**20, 1),
        "seconds": round(time.monotonic() - t0, 3),
        "wal_kb": round((await _wal(conn) - wal0) / 1024, 1),
    }
    say(f"dropped a day: {out['drop_day']}")
    await conn.execute(f"DROP TABLE {parted}")
    return out


async def _each(conn: asyncpg.Connection, sql: str, args: list[tuple[Any, ...]]) -> dict[str, float]:
    """Median and p99 µs of ``sql`` (prepared) over ``args``, inside a transaction rolled back."""
    statement = await conn.prepare(sql)
    times = []
    tx = conn.transaction()
    await tx.start()
    try:
        for a in args:
            t0 = time.perf_counter()
            await statement.fetch(*a)
            times.append((time.perf_counter() - t0) * 1e6)
    finally:
        await tx.rollback()
    times.sort()
    return {"p50": round(statistics.median(times)), "p99": round(times[int(0.99 * (len(times) - 1))])}


async def _wal(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))
