"""Prometheus metrics: one registry per app, what it counts, and the gauges read at scrape time.

Labels stay bounded: HTTP metrics are labelled by route template (``/v1/locks/{name}/acquire``), never by raw
path, and no metric carries a lock name. Lock outcomes are counted in one place, ``app.api.middleware.observe``,
from the route and the response status; database statements are timed through the store's observer callback
(``Metrics.observe_db``). What needs the database (the number of held locks) is computed when Prometheus
scrapes, at most once per ``held_locks_max_age`` seconds, never on a request's path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Iterator
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
from app.db.runner import STATEMENT_OPERATIONS
from app.errors import StorageUnavailable
from app.locking.store import LockStore

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


class Metrics:
    """The metrics of one app. Tests create many apps, so each has its own registry (never the global one)."""

    def __init__(self, held_locks_max_age: float = 5.0) -> None:
        self.registry = CollectorRegistry()
        self.held_locks_max_age = held_locks_max_age
        r = self.registry
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
        Gauge(
            "schedlock_build_info", "Always 1; the version label says which build runs.", ["version"], registry=r
        ).labels(__version__).set(1)
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        r.register(_StateCollector(self))

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

    def watch(self, pool: Any, store: LockStore) -> None:
        """Report on this pool and this store's table (called by the lifespan once they exist)."""
        self.pool, self.store = pool, store

    # The hot path: label children are looked up once and cached (labels() costs more than inc/observe).
    def observe_request(self, method: str, route: str, status: int, seconds: float) -> None:
        key = (method, route, status)
        children = self._http.get(key)
        if children is None:
            children = (self.requests.labels(method, route, str(status)), self.request_duration.labels(method, route))
            self._http[key] = children
        children[0].inc()
        children[1].observe(seconds)

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


class _StateCollector:
    """Gauges read at scrape time: pool usage, and the held-lock count cached by ``refresh_held_locks``."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics

    def describe(self) -> Iterable[Metric]:
        return list(self._families())

    def collect(self) -> Iterable[Metric]:
        m = self._metrics
        pool_open, pool_max, held = self._families()
        if m.pool is not None:
            size, idle = m.pool.get_size(), m.pool.get_idle_size()
            pool_open.add_metric(["busy"], size - idle)
            pool_open.add_metric(["idle"], idle)
            pool_max.add_metric([], m.pool.get_max_size())
            yield from (pool_open, pool_max)
        if m.held_locks is not None:
            held.add_metric([], m.held_locks)
            yield held

    @staticmethod
    def _families() -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(
            "schedlock_db_pool_connections",
            "Open database connections of this process, busy or idle.",
            labels=["state"],
        )
        yield GaugeMetricFamily("schedlock_db_pool_max_connections", "The most connections this process may open.")
        yield GaugeMetricFamily(
            "schedlock_locks_held",
            "Locks whose lock_until is in the future by the database clock, in the whole table (Java rows too). "
            "The same for every replica: aggregate with max(), not sum().",
        )
