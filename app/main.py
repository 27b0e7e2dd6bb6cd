"""The app factory: wires settings, the database pool, routes and error handlers."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from app import __version__
from app.api.deps import Services
from app.api.edge import Edge
from app.api.errors import install_error_handlers
from app.api.routes import admin, badges, docs, health, jobs, locks, runs, ui
from app.api.routes import metrics as metrics_route
from app.auth.authenticator import Authenticator
from app.auth.exposure import is_loopback
from app.db.durability import warn_if_commits_may_be_lost
from app.db.revisions import schema_problem, version_table_for
from app.db.schema import qualified_name, skips_table
from app.db.statements import close_pool, create_pool
from app.errors import StorageUnavailable
from app.history.chores import history_chores
from app.history.retention import Pruner
from app.history.runs import History
from app.history.skips import SkipCounter
from app.jobs.events import Events
from app.jobs.implicit import Registrar
from app.jobs.status import Jobs
from app.jobs.store import JobStore
from app.jobs.webhooks import Notifier, job_chores
from app.locking.store import LockStore
from app.ops import multiprocess
from app.ops.metrics import Metrics
from app.settings import Settings

logger = logging.getLogger("schedlock")

DESCRIPTION = """\
ShedLock's lock semantics over HTTP, on one Postgres table, using the database's clock.

A job takes a named lock before it runs. If another node holds it, the job is **skipped, never waited for**.
`lock_at_most_for` bounds how long a crashed holder blocks others; `lock_at_least_for` keeps the lock after a
fast job ends, so a second node a moment later still skips. The table is ShedLock's own, so Java nodes using
ShedLock's `JdbcTemplateLockProvider` with `usingDbTime()` and HTTP callers exclude each other.

This is "at most one at a time", **not** "exactly once": a holder that outlives `lock_at_most_for` (a paused VM,
a long GC) can overlap the next holder. Keep jobs idempotent, and use `fencing_token` to reject stale writers.

Errors always have the shape `{"error": {"code": ..., "message": ...}}`.

With API tokens configured, every `/v1` request needs `Authorization: Bearer <token>`; a token may only use
names starting with its prefixes, and may be read-only. `/healthz`, `/readyz`, `/docs` and `/openapi.json`
need no token.

Bodies are JSON (`Content-Type: application/json`; anything else is 415). A browser page may call the API only
from the server's own origin or one listed in `SCHEDLOCK_ALLOWED_ORIGINS` (CORS); any other `Origin` gets 403.
"""


def create_app(
    settings: Settings | None = None,
    *,
    freeze_gc: bool = False,
    authenticator: Authenticator | None = None,
) -> FastAPI:
    """The service. Raises app.auth.tokens.TokenConfigError if the token configuration is unusable.

    Every request goes one way: the edge middleware (app.api.edge), then FastAPI's routing; the lock operations'
    routes bind their endpoints with app.api.bodies. ``freeze_gc`` (for the one app of a server
    process) moves everything alive once the app has started out of the garbage collector's reach: the app, its
    routes and models are many objects, and a full collection walking them paused every request
    (docs/performance.md).
    ``authenticator``: one already built from these settings (``serve`` builds it first to check the exposure)."""
    settings = settings or Settings()
    metrics = Metrics(shared=multiprocess.worker_dir())
    authenticator = authenticator or Authenticator(settings)
    authenticator.count_rate_limited(metrics.count_rate_limited)
    services = Services(settings, authenticator)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        pool = await create_pool(settings)
        skips = SkipCounter(skips_table(settings.table_name, settings.table_schema))
        store = LockStore.over(
            pool,
            settings.table_name,
            settings.table_schema,
            settings.db_pool_timeout,
            observe=metrics.observe_db,
            on_held=skips.count,
        )
        statements = store.statements
        history = History(statements, settings.table_name, settings.table_schema)
        pruner = (
            Pruner(store, history, settings.history_retention, settings.history_prune_batch)
            if settings.history_retention
            else None
        )
        app.state.store, app.state.history, app.state.skips, app.state.pruner = store, history, skips, pruner
        job_store = JobStore(statements, settings.table_name, settings.table_schema)
        app.state.jobs = Jobs(job_store, settings.slot_early_grace, settings.history_retention)
        app.state.registrar = Registrar(job_store)
        services.store, services.history, services.jobs, services.registrar = (
            store,
            history,
            app.state.jobs,
            app.state.registrar,
        )
        secret = settings.jobs_webhook_secret
        notifier = (
            Notifier(
                app.state.jobs,
                Events(statements, settings.table_name, settings.table_schema),
                settings.jobs_webhook_urls,
                secret.get_secret_value().encode() if secret else b"",
                settings.jobs_webhook_attempts,
                counted=metrics.count_webhook,
            )
            if settings.jobs_webhook_urls
            else None
        )
        app.state.notifier = notifier
        metrics.watch(pool, store, app.state.jobs)
        await _warn_if_not_migrated(app, settings)
        await warn_if_commits_may_be_lost(pool, settings.db_pool_timeout)
        if freeze_gc:
            gc.collect()
            gc.freeze()
        chores = history_chores(
            statements, skips, pruner, settings.history_flush_interval, settings.history_prune_interval.total_seconds()
        )
        try:
            async with (
                authenticator.reloading(),
                chores,
                job_chores(notifier, settings.jobs_check_interval),
                metrics.sampling(),
            ):
                yield
        finally:
            await close_pool(pool, settings.db_connect_timeout)

    app = FastAPIOffline(
        redoc_url=None,  # app.api.routes.docs serves /redoc, without the CDN request of ReDoc's bundle
        title="schedlock",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # FastAPI's own OpenTelemetry instrumentation looks up the global OTel providers on every request, which
        # showed in the profile (docs/performance.md). Observability here is Prometheus (/metrics) and the access log.
        telemetry={"tracing": False, "metrics": False, "logs": False, "operation_spans": False},
        openapi_tags=[
            {"name": "locks", "description": "Acquire, release, extend and inspect named locks."},
            {"name": "history", "description": "Runs, skipped attempts, and force-release (docs/history.md)."},
            {"name": "jobs", "description": "Expected schedules: missed, late and failed runs (docs/jobs.md)."},
            {"name": "health", "description": "Probes for orchestrators."},
            {"name": "observability", "description": "Prometheus metrics."},
        ],
    )
    app.state.settings = settings
    app.state.metrics = metrics
    app.state.auth = authenticator
    app.state.services = services
    app.state.version_table = qualified_name(version_table_for(settings), settings.table_schema)
    install_error_handlers(app)
    # The lock routes on the app's own router, first: matched before any other, without the walk into an included
    # router (which FastAPI matches twice per request). The API document lists them first all the same.
    app.router.routes[:0] = locks.router.routes
    app.include_router(runs.router)
    app.include_router(admin.router)
    app.include_router(jobs.router)
    app.include_router(badges.router)
    app.include_router(health.router)
    app.include_router(metrics_route.router)
    app.include_router(docs.router)
    ui.install(app)
    app.add_middleware(
        Edge,
        metrics=metrics,
        allowed=settings.allowed_origins or (),
        loopback_only=not authenticator.enabled and is_loopback(settings.host),
        max_body_bytes=settings.max_body_bytes,
    )
    return app


async def _warn_if_not_migrated(app: FastAPI, settings: Settings) -> None:
    """Say once, at start-up, when the table is not at this release's schema, and what to run. (The database
    being down is logged apart, by app.db.availability; /readyz keeps answering 503 until the schema is right.)"""
    try:
        current = await app.state.store.schema_revision(app.state.version_table)
    except StorageUnavailable:
        return
    problem = schema_problem(current)
    if problem is not None:
        logger.warning(
            "table %s %s: lock requests will fail until it is; run `schedlock-server migrate` with the same "
            "SCHEDLOCK_DATABASE_URL and SCHEDLOCK_TABLE",
            settings.table,
            problem,
        )
