"""Prometheus metrics: one registry per app, what it counts, and the gauges read at scrape time.

Labels stay bounded: HTTP metrics are labelled by route template (``/v1/locks/{name}/acquire``), never by raw
path, and no metric carries a lock name. Lock outcomes are counted in one place, ``app.api.edge``,
from the route and the response status; database statements are timed through the store's observer callback
(``Metrics.observe_db``). What needs the database (the number of held locks) is computed when Prometheus
scrapes, at most once per ``held_locks_max_age`` seconds, never on a request's path (app.ops.scrape).

The jobs' metrics (docs/jobs.md) are the one exception to "no lock name in a label": they carry ``job_name``, the
name of a registered job (not ``job``: Prometheus sets that label on every series it scrapes, and would rename
ours ``exported_job``). That set is bounded by what write tokens register on purpose, not by what clients
invent. They are computed on scrape too, with the same cache: every job's state, from one page of jobs and one
statement for their runs. ``schedlock_job_ticks_total`` counts the ticks the server saw decided since it started,
whether or not anything scraped before (app.ops.job_metrics).

With more than one worker process (``serve --workers N``) the values are shared between the workers in files
(app.ops.multiprocess), so that ``/metrics`` answers for the whole server; one worker keeps them in memory.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
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
from prometheus_client.exposition import choose_encoder

from app import __version__
from app.background import every
from app.db.runner import STATEMENT_OPERATIONS
from app.jobs.status import Jobs
from app.locking.store import LockStore
from app.ops import multiprocess
from app.ops.scrape import POOL_HELP, POOL_MAX_HELP, Scraped, StateCollector

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

#: How often each of several workers writes its pool's figures for the others' scrapes.
POOL_SAMPLE_SECONDS = 1.0


class Metrics:
    """The metrics of one app. Tests create many apps, so each has its own registry (never the global one).

    ``shared``: the directory the worker processes of one server share their metrics in (app.ops.multiprocess), or
    None for one process. Shared values live in files, read at scrapes by MultiProcessCollector rather than through
    the registry."""

    def __init__(self, held_locks_max_age: float = 5.0, shared: str | None = None) -> None:
        self.registry = CollectorRegistry()
        self.shared = shared
        self.scraped = Scraped(held_locks_max_age, shared)
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
            "ran)|...; extend not_holder: the lease was lost. invalid: 4xx bad input; denied: 401/403/429; error: 5xx.",
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
        # By principal: a token's name or one a binding made, so bounded by the callers the configuration admits.
        self.rate_limited = Counter(
            "schedlock_rate_limited",
            "Requests refused 429 rate_limited, by the principal over its quota (docs/auth.md, Quotas). Per process: "
            "aggregate with sum().",
            ["principal"],
            registry=r,
        )
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
        self.registry.register(StateCollector(self.scraped))

        self._outcomes = {
            (op, outcome): self.lock_operations.labels(op, outcome)
            for op, outcomes in LOCK_OUTCOMES.items()
            for outcome in outcomes
        }
        self._db = {op: (self.db_duration.labels(op), self.db_errors.labels(op)) for op in STATEMENT_OPERATIONS}
        self._http: dict[tuple[str, str, int], tuple[Any, Any]] = {}

    @property
    def held_locks_max_age(self) -> float:
        """Seconds a scrape-time reading (the held locks, the jobs' states) is kept before it is read again."""
        return self.scraped.max_age

    @held_locks_max_age.setter
    def held_locks_max_age(self, seconds: float) -> None:
        self.scraped.max_age = seconds

    def watch(self, pool: Any, store: LockStore, jobs: Jobs | None = None) -> None:
        """Report on this pool, this store's table and its jobs (called by the lifespan once they exist)."""
        self.scraped.pool, self.scraped.store, self.scraped.jobs = pool, store, jobs
        self.sample_pool()

    def sample_pool(self) -> None:
        """Write this worker's pool figures where the other workers' scrapes read them (shared metrics only: one
        process reads its pool when scraped)."""
        pool = self.scraped.pool
        if self._pool_gauges is None or pool is None:
            return
        busy, idle, most = self._pool_gauges
        size, free = pool.get_size(), pool.get_idle_size()
        busy.set(size - free)
        idle.set(free)
        most.set(pool.get_max_size())

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

    def count_rate_limited(self, principal: str) -> None:
        """A request refused for its principal's quota (app.auth.quotas)."""
        self.rate_limited.labels(principal).inc()

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
        """Count the held locks for the next scrape, unless the last count is fresh enough (app.ops.scrape)."""
        await self.scraped.refresh_held_locks()

    async def refresh_jobs(self) -> None:
        """Read every job's state for the next scrape, unless the last reading is fresh enough (app.ops.scrape)."""
        await self.scraped.refresh_jobs()
