"""The baseline: the same acquire/release statements, sent straight to Postgres with asyncpg, no HTTP.

Each client gets its own connection and runs ``app.locking.store.LockStore`` on it, so the statements (and their
arguments) are exactly the server's, by construction, and nothing but the HTTP layer separates the two.
"""

from __future__ import annotations

import asyncio
import random
import resource
import time
from datetime import timedelta
from typing import Any

import asyncpg
import uvloop

from app.db.availability import Availability
from app.errors import LockHeld, SchedlockError
from app.locking.leases import new_locked_by
from app.locking.store import LockStore
from bench.dbcpu import cpu_of
from bench.loadgen import Load
from bench.stats import Phase

_AT_MOST = timedelta(seconds=30)


class _OneConnection:
    """Looks like app.db.pool.StatementPool to LockStore, but always lends the same dedicated connection."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.availability = Availability()  # told of each statement's outcome, as the real pool's is

    async def acquire(self, max_wait: float) -> Any:
        return self._conn

    def release(self, conn: Any, *, drop: bool = False) -> None:
        pass

    def saturated(self) -> bool:
        """Never: each client runs one statement at a time on its own connection, so nothing coalesces."""
        return False


def run_direct(database_url: str, table: str, load: Load) -> Phase:
    """Drive ``load`` (modes "own" and "random") against the database; blocks for ``load.seconds``."""
    before = resource.getrusage(resource.RUSAGE_SELF)
    phase = uvloop.run(_run(database_url, table, load))
    after = resource.getrusage(resource.RUSAGE_SELF)
    phase.loadgen_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return phase


async def _run(database_url: str, table: str, load: Load) -> Phase:
    schema, _, name = table.rpartition(".")
    settings = {"timezone": "UTC", "application_name": "schedlock-bench"}
    opened = await asyncio.gather(
        *(asyncpg.connect(database_url, server_settings=settings) for _ in range(load.clients)), return_exceptions=True
    )
    conns = [c for c in opened if not isinstance(c, BaseException)]
    failed = [c for c in opened if isinstance(c, BaseException)]
    if failed:
        await asyncio.gather(*(c.close() for c in conns))
        if isinstance(failed[0], asyncpg.TooManyConnectionsError):
            raise SystemExit(
                f"the baseline needs {load.clients} connections of its own and Postgres refused more "
                "(max_connections is shared with everything else on that server): retry later, or lower --clients"
            )
        raise failed[0]
    try:
        phase = Phase(seconds=0.0, counts={"acq_ok": 0, "rel_ok": 0})
        stores = [LockStore.over(_OneConnection(c), name, schema or None, 5.0) for c in conns]  # type: ignore[arg-type]
        backends = [c.get_server_pid() for c in conns]
        before = cpu_of(backends)
        start = time.perf_counter()
        await asyncio.gather(*(_client(i, store, load, start, phase) for i, store in enumerate(stores)))
        phase.seconds = time.perf_counter() - start
        after = cpu_of(backends)
        if after:  # Postgres runs on this machine: its backends' CPU is the baseline's whole server-side cost
            phase.db_cpu_s = sum(cpu - before.get(pid, 0.0) for pid, cpu in after.items())
        return phase
    finally:
        await asyncio.gather(*(c.close() for c in conns))


def _names(client: int, load: Load) -> Any:
    """The same name sequence as wrk_script.lua's pick()."""
    rng = random.Random(client * 7919 + 17)
    index = client
    while True:
        if load.mode == "random":
            yield rng.randrange(load.names)
        else:
            yield index
            index = (index + load.clients) % load.names


async def _client(client: int, store: LockStore, load: Load, start: float, phase: Phase) -> None:
    counts = phase.counts
    interval = 1.0 / load.rate if load.rate else 0.0
    deadline = start + load.seconds
    due = start + random.Random(client).random() * interval  # spread the clients over one interval
    names = _names(client, load)
    while True:
        if interval:  # paced: cycles start on an absolute schedule, as in wrk_script.lua
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            due += interval
        t0 = time.perf_counter()
        if t0 >= deadline:
            return
        name = f"{load.prefix}{next(names):06d}"
        try:
            lease = await store.acquire(name, _AT_MOST, timedelta(0), new_locked_by("bench"))
        except LockHeld:
            phase.acquire_us.append((time.perf_counter() - t0) * 1e6)
            counts["acq_held"] = counts.get("acq_held", 0) + 1
            continue
        except SchedlockError:
            phase.acquire_us.append((time.perf_counter() - t0) * 1e6)
            counts["acq_other"] = counts.get("acq_other", 0) + 1
            continue
        t1 = time.perf_counter()
        phase.acquire_us.append((t1 - t0) * 1e6)
        counts["acq_ok"] += 1
        try:
            await store.release(name, lease.token)
        except SchedlockError:
            counts["rel_other"] = counts.get("rel_other", 0) + 1
        else:
            counts["rel_ok"] += 1
        phase.release_us.append((time.perf_counter() - t1) * 1e6)
