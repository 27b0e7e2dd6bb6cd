"""``python -m bench.fleet``: a fleet's month of run history (bench/fleet_data.py), then what reading and pruning it
costs (docs/history.md, "A fleet's month").

1. **Reads**: a ``schedlock-server`` on the generated table answers, one request at a time, each read of the API
   and the dashboard that touches the history (a busy and a rare lock's runs, every run, a team's, the jobs list,
   a busy and a rare job's ticks, the pages); p50/p99/max per read.
   Then the database's part of them: the server's own statements under ``EXPLAIN (ANALYZE)`` (bench/fleet_explain.py).
2. **Retention, batched DELETE** (the Pruner's statement, ``--batch`` rows each): the oldest day deleted, then
   vacuumed, then a new day inserted (the steady state: a day out, a day in): time, rows/s, WAL bytes, and the
   table's and indexes' sizes at each step.
3. **Retention, partitions** (``--partitions``): the same rows in a copy partitioned by day on ``acquired_at``; the
   oldest day detached and dropped: time and WAL; and the lookup the run trigger makes at every extend and release
   (by name and fencing token) timed on both tables.

The data lives in an embedded cluster in ``--data-dir`` (kept, to measure again with ``--reuse``) or in a
temporary one; it takes ~15 GB at the default 30 days.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import random
import secrets
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import asyncpg
from pydantic import SecretStr

from app.auth.tokens import hash_secret
from app.db import migrate
from app.db.embedded import EmbeddedPostgres
from app.db.schema import qualified_name, runs_table, skips_table
from app.settings import Settings
from bench import about, target
from bench.fleet_data import day_sql, generate, runs_per_minute
from bench.soak_client import Server
from bench.soak_report import percentile

RESULTS = Path(__file__).parent / "results"
SCHEMA, TABLE = "fleet", "shedlock"


def say(line: str) -> None:
    print(f"# {line}", file=sys.stderr, flush=True)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__.split("\n\n")[0])
    p.add_argument("--days", type=int, default=30, help="days of history (%(default)s: ~43 M runs)")
    p.add_argument("--scale", type=float, default=1.0, help="of the fleet's 6,400 jobs and 1,000 runs a minute (1)")
    p.add_argument("--data-dir", type=Path, help="the embedded cluster's directory, kept (default: a temporary one)")
    p.add_argument("--reuse", action="store_true", help="measure the history already in --data-dir")
    p.add_argument("--requests", type=int, default=200, help="requests per read measured (%(default)s)")
    p.add_argument("--batch", type=int, default=500, help="rows per DELETE, as SCHEDLOCK_HISTORY_PRUNE_BATCH (500)")
    p.add_argument("--no-retention", dest="retention", action="store_false", help="reads only")
    p.add_argument("--partitions", action="store_true", help="also measure a copy partitioned by day")
    p.add_argument("--output", type=Path, help="JSON to write (default: bench/results/fleet-<time>.json)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    output: Path = args.output or RESULTS / f"fleet-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="schedlock-fleet-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "pgdata"
        Path(tmp).chmod(0o755)
        embedded = EmbeddedPostgres(data_dir)
        url = embedded.start()
        try:
            record = run(args, url, output)
        finally:
            embedded.stop()
    output.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k not in ("machine", "code")}, indent=2))
    print(f"\nresults: {output}")
    return 0


def run(args: argparse.Namespace, url: str, output: Path) -> dict[str, Any]:
    record: dict[str, Any] = {
        "started_at": about.now(),
        "machine": about.machine(url),
        "code": about.code(),
        "config": {
            "days": args.days,
            "scale": args.scale,
            "runs_per_minute": runs_per_minute(args.scale),
            "batch": args.batch,
        },
    }
    t0 = time.monotonic()
    # On a reused history: the migrations since it was made, on its rows (0006 builds an index concurrently).
    migrate.upgrade(Settings(database_url=SecretStr(url), table=f"{SCHEMA}.{TABLE}"))
    record["migrate_s"] = round(time.monotonic() - t0, 1)
    if not args.reuse:
        record["generate"] = asyncio.run(_generate(url, args.days, args.scale))
    record["sizes"] = asyncio.run(_sizes(url))
    record["reads"] = _reads(url, output, args.requests)
    record["statements"] = asyncio.run(_statements(url))
    if args.retention:
        record["retention_delete"] = asyncio.run(_delete_day(url, args.batch))
    if args.partitions:
        record["retention_partitions"] = asyncio.run(_partitions(url))
    record["finished_at"] = about.now()
    return record


async def _generate(url: str, days: int, scale: float) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        timings = await generate(conn, TABLE, SCHEMA, days, say, scale)
        rows = await conn.fetchval(f"SELECT count(*) FROM {runs_table(TABLE, SCHEMA)}")
        return {**{k: round(v, 1) for k, v in timings.items()}, "runs": rows}
    finally:
        await conn.close()


async def _sizes(url: str) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        return await _table_sizes(conn)
    finally:
        await conn.close()


async def _table_sizes(conn: asyncpg.Connection, runs: str | None = None) -> dict[str, Any]:
    runs = runs or runs_table(TABLE, SCHEMA)
    row = await conn.fetchrow(
        """SELECT pg_table_size($1::regclass) AS heap, pg_indexes_size($1::regclass) AS indexes,
                  (SELECT n_live_tup FROM pg_stat_user_tables WHERE relid = $1::regclass) AS live,
                  (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass) AS dead""",
        runs,
    )
    assert row is not None
    out = {"heap_mb": _mb(row["heap"]), "indexes_mb": _mb(row["indexes"]), "live": row["live"], "dead": row["dead"]}
    if runs == runs_table(TABLE, SCHEMA):
        out["skips_mb"] = _mb(
            await conn.fetchval("SELECT pg_total_relation_size($1::regclass)", skips_table(TABLE, SCHEMA))
        )
    return out


def _mb(n: int | None) -> float:
    return round((n or 0) / 2**20, 1)


def _reads(url: str, output: Path, requests: int) -> dict[str, Any]:
    secret = secrets.token_urlsafe(32)
    tokens = json.dumps(
        {"tokens": [{"name": "fleet", "sha256": hash_secret(secret), "prefixes": ["*"], "access": "read"}]}
    )
    with output.with_suffix(".server.log").open("ab") as log:
        server = target.start_server(url, f"{SCHEMA}.{TABLE}", {"SCHEDLOCK_TOKENS": tokens}, log)
        try:
            return asyncio.run(_measure_reads(url, server.url, secret, requests))
        finally:
            target.stop_server(server)


async def _measure_reads(url: str, base: str, token: str, requests: int) -> dict[str, Any]:
    conn = await asyncpg.connect(url)
    try:
        names = qualified_name("fleet_jobs", SCHEMA)
        busy = [r["name"] for r in await conn.fetch(f"SELECT name FROM {names} WHERE every = 1 ORDER BY i LIMIT 50")]
        rare = [r["name"] for r in await conn.fetch(f"SELECT name FROM {names} WHERE every = 60 ORDER BY i LIMIT 50")]
    finally:
        await conn.close()
    rng = random.Random(46)
    team = busy[0].split(".")[0]
    reads: dict[str, Callable[[], str]] = {
        "lock_runs_busy": lambda: f"/v1/locks/{rng.choice(busy)}/runs?limit=50",
        "lock_runs_rare": lambda: f"/v1/locks/{rng.choice(rare)}/runs?limit=50",
        "runs_all": lambda: "/v1/runs?limit=50",
        "runs_team": lambda: f"/v1/runs?prefix={team}.&limit=50",
        "runs_ended_team": lambda: f"/v1/runs?prefix={team}.&ended=true&limit=50",
        "skips_busy": lambda: f"/v1/locks/{rng.choice(busy)}/skips?hours=24",
        "jobs_list": lambda: "/v1/jobs?limit=100",
        "jobs_list_team": lambda: f"/v1/jobs?prefix={team}.&limit=100",
        "job_ticks_busy": lambda: f"/v1/jobs/{rng.choice(busy)}/ticks?limit=50",
        "job_ticks_rare": lambda: f"/v1/jobs/{rng.choice(rare)}/ticks?limit=50",
        "job_busy": lambda: f"/v1/jobs/{rng.choice(busy)}",
        "locks_list": lambda: "/v1/locks?limit=100",
        "ui_locks": lambda: "/ui",
        "ui_lock": lambda: f"/ui/locks/{rng.choice(busy)}",
        "ui_jobs": lambda: "/ui/jobs",
        "ui_job": lambda: f"/ui/jobs/{rng.choice(rare)}",
    }
    client = Server(base, token, 1)
    out: dict[str, Any] = {}
    try:
        for op, path in reads.items():
            for _ in range(5):  # warm: the first requests of a kind prepare its statements
                await client.request("GET", path())
            times = []
            for _ in range(requests):
                t0 = time.perf_counter()
                answer = await client.request("GET", path())
                times.append(time.perf_counter() - t0)
                if answer.status != 200:
                    raise RuntimeError(f"{op}: {answer.status} {answer.body[:200]!r}")
            out[op] = {
                "n": requests,
                "p50_ms": _ms(percentile(times, 0.5)),
                "p99_ms": _ms(percentile(times, 0.99)),
                "max_ms": _ms(max(times)),
            }
            say(f"{op}: p50 {out[op]['p50_ms']} ms, p99 {out[op]['p99_ms']} ms")
    finally:
        await client.close()
    return out


def _ms(s: float | None) -> float | None:
    return None if s is None else round(s * 1000, 2)


async def _wal(conn: asyncpg.Connection) -> int:
    return int(await conn.fetchval("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"))


async def _delete_day(url: str, batch: int) -> dict[str, Any]:
    """The Pruner's statement, ``batch`` rows at a time, over the oldest day; then VACUUM; then a new day in."""
    runs = runs_table(TABLE, SCHEMA)
    conn = await asyncpg.connect(url)
    try:
        out: dict[str, Any] = {"before": await _table_sizes(conn)}
        oldest = await conn.fetchval(f"SELECT min(acquired_at) FROM {runs}")
        # The Pruner's statement (app.history.retention), its cutoff fixed at the end of the oldest day.
        sql = f"""
            WITH gone AS (
              DELETE FROM {runs} WHERE ctid = ANY(ARRAY(
                SELECT ctid FROM {runs}
                WHERE acquired_at < $1 AND lock_until < $1 ORDER BY acquired_at LIMIT $2))
              RETURNING 1)
            SELECT count(*) AS n FROM gone"""
        cutoff = oldest + dt.timedelta(days=1)
        statement = await conn.prepare(sql)
        wal0, t0, deleted, batches = await _wal(conn), time.monotonic(), 0, []
        while True:
            b0 = time.perf_counter()
            n = await statement.fetchval(cutoff, batch)
            batches.append(time.perf_counter() - b0)
            deleted += n
            if n < batch:
                break
        seconds = time.monotonic() - t0
        out["delete"] = {
            "rows": deleted,
            "seconds": round(seconds, 1),
            "rows_per_s": round(deleted / seconds),
            "wal_mb": _mb(await _wal(conn) - wal0),
            "wal_bytes_per_row": round((await _wal(conn) - wal0) / max(deleted, 1)),
            "batch_p50_ms": _ms(percentile(batches, 0.5)),
            "batch_p99_ms": _ms(percentile(batches, 0.99)),
        }
        out["after_delete"] = await _table_sizes(conn)
        say(f"deleted a day: {out['delete']}")
        wal0, t0 = await _wal(conn), time.monotonic()
        await conn.execute(f"VACUUM {runs}")
        out["vacuum"] = {"seconds": round(time.monotonic() - t0, 1), "wal_mb": _mb(await _wal(conn) - wal0)}
        out["after_vacuum"] = await _table_sizes(conn)
        say(f"vacuumed: {out['vacuum']}")
        # A new day in (the day after the newest), through the same generator: does it fit in the freed space?
        out["after_new_day"] = await _new_day(conn)
        return out
    finally:
        await conn.close()


async def _new_day(conn: asyncpg.Connection) -> dict[str, Any]:
    runs, names = runs_table(TABLE, SCHEMA), qualified_name("fleet_jobs", SCHEMA)
    newest_token = await conn.fetchval(f"SELECT max(fencing_token) FROM {runs}")
    now = await conn.fetchval(f"SELECT max(acquired_at) FROM {runs}")
    await conn.execute("SET session_replication_role = replica")
    total = newest_token // 10000 + 1441  # tokens continue after the newest
    t0 = time.monotonic()
    await conn.execute(day_sql(runs, names), now + dt.timedelta(days=1), 1440, 0, total)
    await conn.execute("SET session_replication_role = DEFAULT")
    return {"insert_s": round(time.monotonic() - t0, 1), **await _table_sizes(conn)}


async def _statements(url: str) -> dict[str, Any]:
    from bench.fleet_explain import measure

    conn = await asyncpg.connect(url, server_settings={"timezone": "UTC"})
    try:
        found = await measure(conn, SCHEMA, TABLE)
    finally:
        await conn.close()
    for read, operations in found.items():
        say(f"{read}: " + ", ".join(f"{op} p50 {f['p50_ms']} p99 {f['p99_ms']} ms" for op, f in operations.items()))
    return found


async def _partitions(url: str) -> dict[str, Any]:
    from bench.fleet_partitions import measure

    conn = await asyncpg.connect(url)
    try:
        return await measure(conn, SCHEMA, TABLE, say)
    finally:
        await conn.close()


if __name__ == "__main__":
    raise SystemExit(main())
