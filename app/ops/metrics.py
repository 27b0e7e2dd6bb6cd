"""Prometheus metrics: one registry per app, what it counts, and the gauges read at scrape time.

Labels stay bounded: HTTP metrics are labelled by route template (``/v1/locks/{name}/acquire``), never by raw
path, and no metric carries a lock name. Lock outcomes are counted in one place, ``app.api.middleware.observe``,
from the route and the response status; database statements are timed through the store's observer callback
(``Metrics.observe_db``). What needs the database (the number of held locks) is computed when Prometheus
scrapes, at most once per ``held_locks_max_age`` seconds, never on a request's path.

The jobs' metrics (docs/jobs.md) are the one exception to "no lock name in a label": they carry ``job_name``, the
name of a registered job (not ``job``: Prometheus sets that label on every series it scrapes, and would rename
ours ``exported_job``). That set is bounded by what write tokens register on purpose, not by what clients
invent. They are computed on scrape too, with the same cache: every job's state, from one page of jobs and one
statement for their runs. ``schedlock_job_ticks_total`` counts the ticks the server saw decided, from its first
scrape on.

With more than one worker process (``serve --workers N``) the values are shared between the workers in files
(app.ops.multiprocess), so that ``/metrics`` answers for the whole server; one worker keeps them in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from app import __version__
from app.background import every
from app.db.runner import STATEMENT_OPERATIONS
from app.errors import SchedlockError, StorageUnavailable
from app.jobs.status import Jobs, JobStatus
from app.locking.store import LockStore
from app.ops import multiprocess
from app.ops.job_metrics import count_ticks, job_families

# The *_created series double what Prometheus stores and no query here needs them. (A process-wide switch.)
disable_created_metrics()  # type: ignore[no-untyped-call]

#: Lock operations sub-millisecond to seconds: finer at the low end than Prometheus' default buckets.
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

#: Every outcome each lock operation can have; all are exported from the start (at 0) so rate() works at once.
LOCK_OUTCOMES: dict[str, tuple[str, ...]] = {
    "acquire": ("acquired", "held", "slot_done", "invalid", "denied", "error"),
    "release": ("released", "not_holder", "not_found", "invalid", "denied", "error"),
    "extend": ("extended", "not_holder", "not_found", "invalid", "denied", "error"),
}

#: What a job webhook's POST can come to (schedlock_job_webhook_posts_total's ``result``).
WEBHOOK_RESULTS = ("delivered", "failed", "given_up")

POOL_HELP = "Open database connections of the server (all its worker processes), busy or idle."
POOL_MAX_HELP = "The most connections the server may open: SCHEDLOCK_POOL_MAX_SIZE per worker process."
#: How often each of several workers writes its pool's figures for the others' scrapes.
POOL_SAMPLE_SECONDS = 1.0


class Metrics:
    """The metrics of one app. Tests create many apps, so each has its own registry (never the global one).

    ``shared``: the directory the worker processes of one server share their metrics in (app.ops.multiprocess), or
    None for one process. Shared values live in files, read at scrapes by MultiProcessCollector rather than through
    the registry."""

    def __init__(self, held_locks_max_age: float = 5.0, shared: str | None = None) -> None:
        self.registry = CollectorRegistry()
        self.held_locks_max_age = held_locks_max_age
        self.shared = shared
        r = None if shared else self.registry
        self.requests = Counter(
            "schedlock_http_requests", "HTTP requests served.", ["method", "route", "status"], registry=r
        )
        self.request_duration = Histogram(
            "schedlock_http_request_duration_seconds",
            "Time to serve an HTTP request, from the first byte in to the last byte out.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.lock_operations = Counter(
            "schedlock_lock_operations",
            "Lock operations by outcome. acquire: acquired|held (skip the run)|slot_done (skip: the tick already "
            "ran)|...; extend not_holder: the lease was lost. invalid: 4xx bad input; denied: 401/403; error: 5xx.",
            ["operation", "outcome"],
            registry=r,
        )
        self.db_duration = Histogram(
            "schedlock_db_statement_duration_seconds",
            "Time a lock-store call spent on the database: waiting for a pooled connection plus the statement.",
            ["operation"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.db_errors = Counter(
            "schedlock_db_errors",
            "Statements that failed: the database unavailable or not migrated, contention, or a value it cannot store.",
            ["operation"],
            registry=r,
        )
        self.webhook_posts = Counter(
            "schedlock_job_webhook_posts",
            "Job webhook POSTs by result: delivered (a 2xx), failed (tried again later), given_up (the event's last "
            "attempt failed: it will not be delivered). Per process: aggregate with sum().",
            ["result"],
            registry=r,
        )
        self._webhook_results = {result: self.webhook_posts.labels(result) for result in WEBHOOK_RESULTS}
        Gauge(
            "schedlock_build_info",
            "Always 1; the version label says which build runs.",
            ["version"],
            multiprocess_mode="livemax",
            registry=r,
        ).labels(__version__).set(1)
        self._pool_gauges: tuple[Any, Any, Any] | None = None
        if shared:
            self.registry.register(multiprocess.collector(shared))
            self.registry.register(multiprocess.ServerProcesses())
            # livesum: the live workers' pools, added up (a worker that exited leaves the sum: multiprocess.forget)
            pool = Gauge("schedlock_db_pool_connections", POOL_HELP, ["state"], multiprocess_mode="livesum", registry=r)
            pool_max = Gauge(
                "schedlock_db_pool_max_connections", POOL_MAX_HELP, multiprocess_mode="livesum", registry=r
            )
            self._pool_gauges = (pool.labels("busy"), pool.labels("idle"), pool_max)
        else:
            # Each worker's garbage collector is its own: with several, python_gc_* could not be summed honestly.
            ProcessCollector(registry=self.registry)
            GCCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        self.registry.register(_StateCollector(self))

        self._outcomes = {
            (op, outcome): self.lock_operations.labels(op, outcome)
            for op, outcomes in LOCK_OUTCOMES.items()
            for outcome in outcomes
        }
        self._db = {op: (self.db_duration.labels(op), self.db_errors.labels(op)) for op in STATEMENT_OPERATIONS}
        self._http: dict[tuple[str, str, int], tuple[Any, Any]] = {}
        self.pool: Any = None
        self.store: LockStore | None = None
        self.held_locks: int | None = None
        self._held_checked = -math.inf
        self.jobs: Jobs | None = None
        self.job_statuses: list[JobStatus] | None = None
        #: Ticks seen decided, per (job, state), and per job the newest tick counted.
        self.job_ticks: dict[tuple[str, str], int] = {}
        self._ticks_counted: dict[str, Any] = {}
        self._jobs_checked = -math.inf

    def watch(self, pool: Any, store: LockStore, jobs: Jobs | None = None) -> None:
        """Report on this pool, this store's table and its jobs (called by the lifespan once they exist)."""
        self.pool, self.store, self.jobs = pool, store, jobs
        self.sample_pool()

    def sample_pool(self) -> None:
        """Write this worker's pool figures where the other workers' scrapes read them (shared metrics only: one
        process reads its pool when scraped)."""
        if self._pool_gauges is None or self.pool is None:
            return
        busy, idle, most = self._pool_gauges
        size, free = self.pool.get_size(), self.pool.get_idle_size()
        busy.set(size - free)
        idle.set(free)
        most.set(self.pool.get_max_size())

    @contextlib.asynccontextmanager
    async def sampling(self) -> AsyncIterator[None]:
        """While entered, the pool's figures are written every POOL_SAMPLE_SECONDS (shared metrics only)."""
        if self._pool_gauges is None:
            yield
            return

        async def sample() -> None:
            self.sample_pool()

        async with every(POOL_SAMPLE_SECONDS, sample, "metrics: pool sample"):
            yield

    # The hot path: label children are looked up once and cached (labels() costs more than inc/observe).
    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._http.get(key)
        if children is None:
            children = (self.requests.labels(method, route, str(status)), self.request_duration.labels(method, route))
            self._http[key] = children
        children[0].inc()
        children[1].observe(seconds)

    def count_webhook(self, result: str) -> None:
        """A job webhook's POST and its result (app.jobs.webhooks.Notifier)."""
        self._webhook_results[result].inc()

    def count_outcome(self, operation: str, outcome: str) -> None:
        self._outcomes[operation, outcome].inc()

    def observe_db(self, operation: str, seconds: float, outcome: str) -> None:
        """The lock store's observer (``app.db.runner.Observer``)."""
        duration, errors = self._db[operation]
        duration.observe(seconds)
        if outcome != "ok":
            errors.inc()

    def exposition(self, accept: str) -> tuple[bytes, str]:
        """The registry in the format ``accept`` asks for (OpenMetrics or Prometheus text), and its content type."""
        encoder, content_type = choose_encoder(accept)
        self.sample_pool()  # the scraped worker's own figures, exact
        return encoder(self.registry), content_type

    async def refresh_held_locks(self) -> None:
        """Count the held locks, unless the last count is fresh enough. A failure leaves the gauge out of the
        scrape (rather than a stale number) and is not retried before the next ``held_locks_max_age``."""
        if self.store is None or time.monotonic() - self._held_checked < self.held_locks_max_age:
            return
        self._held_checked = time.monotonic()
        try:
            self.held_locks = await self.store.count_held()
        except StorageUnavailable:
            self.held_locks = None

    async def refresh_jobs(self, page: int = 500) -> None:
        """Every job's state, unless the last reading is fresh enough (``held_locks_max_age``). A failure leaves the
        jobs' gauges out of the scrape until the next reading."""
        if self.jobs is None or time.monotonic() - self._jobs_checked < self.held_locks_max_age:
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
        self._count_ticks(statuses)

    def _count_ticks(self, statuses: list[JobStatus]) -> None:
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


class _StateCollector:
    """Gauges read at scrape time: pool usage (of one process; several workers share theirs in files), the event
    loop's tasks (one process only), and the held-lock count cached by ``refresh_held_locks``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        pool_open, pool_max, held = self._families()
        return [held] if self._metrics.shared else [pool_open, pool_max, _tasks(0), held]

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        pool_open, pool_max, held = self._families()
        if m.pool is not None and m.shared is None:
            size, idle = m.pool.get_size(), m.pool.get_idle_size()
            pool_open.add_metric(["busy"], size - idle)
            pool_open.add_metric(["idle"], idle)
            pool_max.add_metric([], m.pool.get_max_size())
            yield from (pool_open, pool_max)
        if m.shared is None:
            with contextlib.suppress(RuntimeError):  # scraped outside the event loop: no tasks to count
                yield _tasks(len(asyncio.all_tasks()))
        if m.held_locks is not None:
            held.add_metric([], m.held_locks)
            yield held
        if m.job_statuses is not None:
            yield from job_families(m.job_statuses, m.ticks())

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("schedlock_db_pool_connections", POOL_HELP, labels=["state"])
        yield GaugeMetricFamily("schedlock_db_pool_max_connections", POOL_MAX_HELP)
        yield GaugeMetricFamily(
            "schedlock_locks_held",
            "Locks whose lock_until is in the future by the database clock, in the whole table (Java rows too). "
            "The same for every replica: aggregate with max(), not sum().",
        )
