"""The database's part of each history read on the fleet's month: the server's own statements (app.history.runs,
app.jobs), run through ``EXPLAIN (ANALYZE, TIMING OFF, BUFFERS)`` and then for real, so the reads' own code goes
on with their rows. On a loaded machine the HTTP p99 (bench/fleet.py) mixes the statement with the server's Python
and the machine's queue; this says how much of it the history's size decides."""

from __future__ import annotations

import datetime as dt
import json
import random
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.history.runs import History
from app.jobs.status import Jobs
from app.jobs.store import JobStore
from bench.soak_report import percentile

REPEAT = 30


class Explainer:
    """A Fetcher that records each statement's execution time and blocks read before answering it."""

    def __init__(self, conn: asyncpg.Connection) -> None:
        self.conn = conn
        self.plans: list[dict[str, Any]] = []

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        (row,) = await self.conn.fetch(f"EXPLAIN (ANALYZE, TIMING OFF, BUFFERS, FORMAT JSON) {sql}", *args)
        plan = json.loads(row[0])[0]
        top = plan["Plan"]
        self.plans.append(
            {
                "operation": operation,
                "ms": plan["Execution Time"],
                "blocks": top.get("Shared Hit Blocks", 0) + top.get("Shared Read Blocks", 0),
            }
        )
        return list(await self.conn.fetch(sql, *args))


async def measure(conn: asyncpg.Connection, schema: str, table: str) -> dict[str, Any]:
    explainer = Explainer(conn)
    history = History(explainer, table, schema)
    store = JobStore(explainer, table, schema)
    jobs = Jobs(store, early=dt.timedelta(seconds=1), retention=dt.timedelta(days=30))
    names = f'"{schema}".fleet_jobs'
    busy = [r["name"] for r in await conn.fetch(f"SELECT name FROM {names} WHERE every = 1 ORDER BY i LIMIT 50")]
    rare = [r["name"] for r in await conn.fetch(f"SELECT name FROM {names} WHERE every = 60 ORDER BY i LIMIT 50")]
    team = busy[0].split(".")[0] + "."
    rng = random.Random(46)

    async def job_list(prefix: str | None) -> None:
        found, _, db_time = await store.page(limit=100, after=None, prefix=prefix, scope=None)
        await jobs.statuses(found, db_time)

    async def ticks(name: str) -> None:
        job, db_time = await store.get(name)
        assert job is not None
        await jobs.ticks(job, db_time, limit=50, since=None, before=None)

    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "lock_runs_busy": lambda: history.lock_page(rng.choice(busy), limit=50),
        "lock_runs_rare": lambda: history.lock_page(rng.choice(rare), limit=50),
        "runs_all": lambda: history.page(limit=50),
        "runs_team": lambda: history.page(limit=50, prefix=team),
        "runs_ended_team": lambda: history.page(limit=50, prefix=team, ended=True),
        "jobs_list": lambda: job_list(None),
        "jobs_list_team": lambda: job_list(team),
        "job_ticks_busy": lambda: ticks(rng.choice(busy)),
        "job_ticks_rare": lambda: ticks(rng.choice(rare)),
    }
    out: dict[str, Any] = {}
    for read, call in reads.items():
        await call()  # warm
        explainer.plans.clear()
        for _ in range(REPEAT):
            await call()
        # A read may send several statements (a job's, then its runs'): each is reported by its operation.
        by_operation: dict[str, list[dict[str, Any]]] = {}
        for plan in explainer.plans:
            by_operation.setdefault(plan["operation"], []).append(plan)
        out[read] = {
            op: {
                "p50_ms": round(percentile([p["ms"] for p in plans], 0.5) or 0, 2),
                "p99_ms": round(percentile([p["ms"] for p in plans], 0.99) or 0, 2),
                "blocks_p50": percentile([p["blocks"] for p in plans], 0.5),
            }
            for op, plans in by_operation.items()
        }
    return out
