"""Database connections for the hot path, and how database failures are reported.

Lock statements go straight to asyncpg (prepared once per connection, one round trip, autocommit: each
statement is its own transaction, so CURRENT_TIMESTAMP is the database's now), on connections lent by
``app.db.pool.StatementPool``. SQLAlchemy owns the schema (``app.db.schema``) and the migrations.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any

import asyncpg

from app.db.pool import StatementPool
from app.errors import SchemaNotMigrated, StorageUnavailable
from app.settings import Settings

logger = logging.getLogger("schedlock.db")

#: Failures that mean "the database cannot answer right now" rather than "the request was wrong".
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncio.TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.InterfaceError,  # includes "connection was closed in the middle of operation"
    asyncpg.CannotConnectNowError,
    asyncpg.InsufficientResourcesError,
    asyncpg.OperatorInterventionError,  # admin shutdown, crash shutdown, query canceled (statement timeout)
    asyncpg.TooManyConnectionsError,
    # During a failover: every host of a multi-host URL is a standby (target_session_attrs=read-write found no
    # primary yet), or a connection's server was turned into a standby under it.
    asyncpg.TargetServerAttributeNotMatched,
    asyncpg.ReadOnlySQLTransactionError,
)


async def create_pool(settings: Settings) -> StatementPool:
    """A pool whose connections speak UTC and give up on stuck statements.

    If the database is down at start-up, the pool starts empty instead of failing: the service comes up
    unready (/readyz answers 503) and recovers by itself when the database does."""
    connect = functools.partial(
        asyncpg.connect,
        dsn=settings.asyncpg_dsn(),
        timeout=settings.db_connect_timeout,
        command_timeout=settings.db_statement_timeout + 1.0,
        server_settings={
            "timezone": "UTC",
            "application_name": "schedlock",
            "statement_timeout": str(int(settings.db_statement_timeout * 1000)),
        },
    )
    pool = StatementPool(connect, min_size=settings.pool_min_size, max_size=settings.pool_max_size)
    try:
        await pool.open()
    except _UNAVAILABLE as exc:  # the service starts unready (/readyz 503) and recovers by itself
        pool.availability.failed("start-up", type(exc).__name__)
    return pool


async def fetch(pool: StatementPool, pool_timeout: float, action: str, sql: str, *args: Any) -> list[Any]:
    """Run one statement on a pooled connection, in bounded time: at most ``pool_timeout`` to get a connection
    (opening one included), then the statement timeout (server side, and one second later client side).

    When the client-side timeout fires, the server has not even answered the cancellation its own
    statement_timeout sends: it is stuck, or the network is. The connection is then dropped at once rather than
    cleaned up with a cancel request that would wait on the same silence.

    A database failure becomes StorageUnavailable (503), or SchemaNotMigrated when the table or its columns are
    missing; ``action`` names what failed. A statement whose outcome is unknown (the connection broke after it
    was sent) is reported the same way: never as success."""
    try:
        conn = await pool.acquire(pool_timeout)
        try:
            rows: list[Any] = await conn.fetch(sql, *args)
        except (TimeoutError, asyncio.CancelledError, asyncpg.ReadOnlySQLTransactionError):
            # Read-only: this connection's server is a standby now (a switchover). Dropped like a stuck one, so
            # the next connection finds the primary.
            conn.terminate()
            raise
        finally:
            pool.release(conn)
    except asyncpg.UndefinedTableError:
        pool.availability.answered()
        raise SchemaNotMigrated(f"{action}: the lock table does not exist; run `schedlock-server migrate`") from None
    except (asyncpg.UndefinedColumnError, asyncpg.UndefinedFunctionError):
        pool.availability.answered()
        raise SchemaNotMigrated(f"{action}: the lock table is not migrated; run `schedlock-server migrate`") from None
    except _UNAVAILABLE as exc:
        pool.availability.failed(action, type(exc).__name__)
        raise StorageUnavailable(f"{action}: database unavailable ({type(exc).__name__})") from None
    pool.availability.answered()
    return rows


async def close_pool(pool: StatementPool, grace: float) -> None:
    """Close gracefully, but never hang a shutdown on a database that does not answer: after ``grace``
    seconds, drop the remaining connections (the server notices the closed sockets)."""
    try:
        await asyncio.wait_for(pool.close(), grace)
    except _UNAVAILABLE as exc:  # includes TimeoutError
        logger.warning("database did not answer at shutdown (%s); connections dropped", type(exc).__name__)
        pool.terminate()
