"""What ``/metrics`` computes when Prometheus scrapes, never on a request's path: the number of held locks and every
registered job's state, each read at most once per ``max_age`` seconds, and the gauges they and the pool's figures
become (``StateCollector``, registered with the app's registry by app.ops.metrics)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from app.errors import SchedlockError, StorageUnavailable
from app.jobs.status import Jobs, JobStatus
from app.locking.store import LockStore
from app.ops import multiprocess
from app.ops.job_metrics import count_ticks, job_families

POOL_HELP = "Open database connections of the server (all its worker processes), busy or idle."
POOL_MAX_HELP = "The most connections the server may open: SCHEDLOCK_POOL_MAX_SIZE per worker process."


class Scraped:
    """The state read at scrapes. ``shared``: the directory several workers share their metrics in (then the job
    ticks' ledger is shared too), or None for one process."""

    def __init__(self, max_age: float, shared: str | None) -> None:
        self.max_age = max_age
        self.shared = shared
        self.pool: Any = None
        self.store: LockStore | None = None
        self.jobs: Jobs | None = None
        self.held_locks: int | None = None
        self._held_checked = -math.inf
        self.job_statuses: list[JobStatus] | None = None
        #: Ticks seen decided, per (job, state), and per job the newest tick counted.
        self.job_ticks: dict[tuple[str, str], int] = {}
        self._ticks_counted: dict[str, Any] = {}
        self._jobs_checked = -math.inf

    async def refresh_held_locks(self) -> None:
        """Count the held locks, unless the last count is fresh enough. A failure leaves the gauge out of the
        scrape (rather than a stale number) and is not retried before the next ``max_age``."""
        if self.store is None or time.monotonic() - self._held_checked < self.max_age:
            return
        self._held_checked = time.monotonic()
        try:
            self.held_locks = await self.store.count_held()
        except StorageUnavailable:
            self.held_locks = None

    async def refresh_jobs(self, page: int = 500) -> None:
        """Every job's state, unless the last reading is fresh enough (``max_age``). A failure leaves the jobs'
        gauges out of the scrape until the next reading."""
        if self.jobs is None or time.monotonic() - self._jobs_checked < self.max_age:
            return
        self._jobs_checked = time.monotonic()
        try:
            statuses: list[JobStatus] = []
            after: str | None = None
            while True:
                found, more, db_time = await self.jobs.store.page(limit=page, after=after, prefix=None, scope=None)
                statuses += await self.jobs.statuses(found, db_time) if found else []
                if not more:
                    break
                after = found[-1].name
        except SchedlockError:
            self.job_statuses = None
            return
        self.job_statuses = statuses
        self.record_ticks(statuses)

    def record_ticks(self, statuses: list[JobStatus]) -> None:
        """Count the ticks these statuses show decided, each once (in the shared ledger with several workers)."""
        if self.shared is None:
            count_ticks(statuses, self.job_ticks, self._ticks_counted)
            return
        with multiprocess.shared_ticks(self.shared) as (ticks, counted):
            count_ticks(statuses, ticks, counted)

    def ticks(self) -> dict[tuple[str, str], int]:
        """The ticks counted so far: this process's, or the server's when shared (whichever worker read them)."""
        return self.job_ticks if self.shared is None else multiprocess.read_ticks(self.shared)


def _tasks(n: int) -> GaugeMetricFamily:
    return GaugeMetricFamily(
        "schedlock_event_loop_tasks",
        "Tasks of the process's event loop at the scrape: requests in flight, background chores, the server's own. "
        "Flat under a steady load; a rise that never comes back is a leak (docs/reliability.md, soak).",
        value=n,
    )


class StateCollector:
    """Gauges read at scrape time: pool usage (of one process; several workers share theirs in files), the event
    loop's tasks (one process only), the held-lock count and the jobs' states cached by ``Scraped``."""

    def __init__(self, scraped: Scraped) -> None:
        self._scraped = scraped

    def describe(self) -> Iterable[Metric]:
        pool_open, pool_max, held = self._families()
        return [held] if self._scraped.shared else [pool_open, pool_max, _tasks(0), held]

    def collect(self) -> Iterable[Metric]:
        s = self._scraped
        pool_open, pool_max, held = self._families()
        if s.pool is not None and s.shared is None:
            size, idle = s.pool.get_size(), s.pool.get_idle_size()
            pool_open.add_metric(["busy"], size - idle)
            pool_open.add_metric(["idle"], idle)
            pool_max.add_metric([], s.pool.get_max_size())
            yield from (pool_open, pool_max)
        if s.shared is None:
            with contextlib.suppress(RuntimeError):  # scraped outside the event loop: no tasks to count
                yield _tasks(len(asyncio.all_tasks()))
        if s.held_locks is not None:
            held.add_metric([], s.held_locks)
            yield held
        if s.job_statuses is not None:
            yield from job_families(s.job_statuses, s.ticks())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("schedlock_db_pool_connections", POOL_HELP, labels=["state"])
        yield GaugeMetricFamily("schedlock_db_pool_max_connections", POOL_MAX_HELP)
        yield GaugeMetricFamily(
            "schedlock_locks_held",
            "Locks whose lock_until is in the future by the database clock, in the whole table (Java rows too). "
            "The same for every replica: aggregate with max(), not sum().",
        )
