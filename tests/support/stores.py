"""A LockStore of a test's own, on a pool of its own: a narrow pool (one connection makes every statement in flight
a busy pool, so what arrives meanwhile coalesces), and server settings the service's pool does not pin (a forced
generic plan, a database default)."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from app.db.pool import StatementPool
from app.locking.store import LockStore
from app.settings import Settings


@asynccontextmanager
async def own_store(settings: Settings, size: int = 1, **server_settings: str) -> AsyncIterator[LockStore]:
    """A LockStore on ``settings``' table over a pool of ``size`` connections with ``server_settings``."""
    connect = functools.partial(
        asyncpg.connect,
        dsn=settings.asyncpg_dsn(),
        server_settings={"timezone": "UTC", "application_name": "schedlock-test", **server_settings},
    )
    pool = StatementPool(connect, min_size=size, max_size=size)
    await pool.open()
    store = LockStore.over(pool, settings.table_name, settings.table_schema, 5.0)
    try:
        yield store
    finally:
        await pool.close()
