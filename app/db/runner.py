"""Running one statement on the pool, observed: what every domain that owns SQL is handed (the lock store, the run
history, the skip counter, retention), so none of them knows of pools, timeouts or metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from app.db.pool import StatementPool
from app.db.statements import fetch
from app.errors import SchedlockError, StorageUnavailable

#: Told of every statement run: (operation, seconds, outcome), outcome "ok", "unavailable" (the database could not
#: answer, or the table is not migrated) or "failed" (it answered with an error: contention, a value it cannot store).
#: The operations are STATEMENT_OPERATIONS.
Observer = Callable[[str, float, str], None]
#: Every operation a statement is run as: the metrics' label values.
STATEMENT_OPERATIONS = (
    *("acquire", "release", "extend", "get", "list", "schema_revision", "count_held"),
    *("acquire_batch", "release_batch"),  # many names in one statement (app.coalescing.batches)
    *("force_release", "runs", "skips", "flush_skips", "prune"),  # the run history's (app.history)
    *("jobs", "job_runs", "job_write"),  # the jobs' (app.jobs)
)


class Fetcher(Protocol):
    """What runs statements: Statements, or anything that hands its statements on to one (the lock store)."""

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]: ...


class Statements:
    """``fetch(operation, sql, *args)`` runs one statement on ``pool`` within ``pool_timeout`` to get a connection
    (app.db.statements.fetch); ``observe``, if given, is told of its duration and outcome."""

    def __init__(self, pool: StatementPool, pool_timeout: float, observe: Observer | None = None) -> None:
        self.pool = pool
        self._pool_timeout = pool_timeout
        self.observe = observe

    async def fetch(self, operation: str, sql: str, *args: Any) -> list[Any]:
        observe = self.observe
        if observe is None:
            return await fetch(self.pool, self._pool_timeout, operation, sql, *args)
        start = time.perf_counter()
        try:
            rows = await fetch(self.pool, self._pool_timeout, operation, sql, *args)
        except StorageUnavailable:
            observe(operation, time.perf_counter() - start, "unavailable")
            raise
        except SchedlockError:
            observe(operation, time.perf_counter() - start, "failed")
            raise
        observe(operation, time.perf_counter() - start, "ok")
        return rows
