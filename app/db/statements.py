"""Database connections for the hot path, and how database failures are reported.

Lock statements go straight to asyncpg (prepared once per connection, one round trip, autocommit: each
statement is its own transaction, so CURRENT_TIMESTAMP is the database's now; with SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0,
for PgBouncer, prepared unnamed each time), on connections lent by ``app.db.pool.StatementPool``, which
``app.db.connector`` opens. SQLAlchemy owns the schema (``app.db.schema``) and the migrations.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import weakref
from typing import Any

import asyncpg

from app.db import failures
from app.db.connector import Connector
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
    asyncpg.OperatorInterventionError,  # admin shutdown, crash shutdown (a cancelled statement is caught first)
    asyncpg.TooManyConnectionsError,
    # During a failover: every host of a multi-host URL is a standby (target_session_attrs=read-write found no
    # primary yet), or a connection's server was turned into a standby under it.
    asyncpg.TargetServerAttributeNotMatched,
    asyncpg.ReadOnlySQLTransactionError,
    # The client's protocol state is broken ("another operation is in progress"): seen once, during a failover
    # under load, on a connection an earlier connection-level failure had left mid-operation. Nothing was sent.
    asyncpg.InternalClientError,
)
#: Failures after which a connection is never lent again (the pool opens a new one).
_DROP_CONNECTION: tuple[type[BaseException], ...] = (asyncio.CancelledError, *_UNAVAILABLE)


async def create_pool(settings: Settings) -> StatementPool:
    """A pool whose connections speak UTC, pin what the statements rely on and give up on stuck statements.

    If the database is down at start-up, the pool starts empty instead of failing: the service comes up
    unready (/readyz answers 503) and recovers by itself when the database does."""
    pool = StatementPool(Connector(settings, _heard), min_size=settings.pool_min_size, max_size=settings.pool_max_size)
    try:
        await pool.open()
    except _UNAVAILABLE as exc:  # the service starts unready (/readyz 503) and recovers by itself
        pool.availability.failed("start-up", type(exc).__name__)
    return pool


#: Failures after which the connection's statement may still be running on the server: the client gave up on it.
_MAY_STILL_RUN: tuple[type[BaseException], ...] = (TimeoutError, asyncio.TimeoutError, asyncio.CancelledError)
#: Connections closing in the background (a strong reference each, until done).
_closing: set[asyncio.Task[None]] = set()


def _close_in_background(conn: Any, timeout: float) -> None:
    """Close a connection whose statement was given up on, in the background, letting the server's cancellation
    of that statement go out first.

    Dropping the socket alone does not end the statement. A commit waiting for a synchronous standby that does not
    come (Patroni's ``synchronous_mode_strict`` with no standby left) is not bound by statement_timeout, which ends
    before the commit, and its backend does not notice the closed socket: each statement given up on would leave a
    backend waiting, until ``max_connections`` is full and Patroni's own connections, and pg_rewind's, are refused
    too, so no standby can rejoin to end the wait. asyncpg sends the server a cancel request when it gives up on a
    statement (its command timeout, or the caller's cancellation); ``terminate()`` would cancel that request before
    it is sent, and a graceful ``close()`` waits for it (asyncpg's public API), within ``timeout``. A cancel request
    takes no connection slot; the statement's outcome is unknown either way (the caller gets a 503).
    tests/system/ha/test_failover.py fails if the backends are left waiting."""
    task = asyncio.get_running_loop().create_task(_close(conn, timeout))
    _closing.add(task)
    task.add_done_callback(_closing.discard)


async def _close(conn: Any, seconds: float) -> None:
    try:
        await conn.close(timeout=seconds)
    except Exception:  # asyncpg aborts the connection itself when a close fails: nothing else to do
        pass
    finally:
        conn.terminate()


#: Connections whose current statement drew a warning from the server (see _heard).
_warned: weakref.WeakSet[Any] = weakref.WeakSet()
_unconfirmed_reported_at = [-math.inf]


def _heard(conn: Any, message: Any) -> None:
    """A log message from the server. The one that matters: with synchronous replication, a commit waiting for
    the standby's confirmation that is cancelled (pg_cancel_backend, a pooler or a client's cancel request) stays
    committed on the primary, and Postgres reports the statement as done with only a WARNING ("has already
    committed locally, but might not have been replicated"). A lease granted on that would vanish if the primary
    failed next. asyncpg runs this callback before the statement's result resumes the caller, so fetch() sees the
    mark. Warnings are SQLSTATE class 01 (the text is translated; the code is not)."""
    if str(getattr(message, "sqlstate", "")).startswith("01"):
        _warned.add(conn)


def _unconfirmed(action: str) -> StorageUnavailable:
    now = time.monotonic()
    if now - _unconfirmed_reported_at[0] >= 30:  # one line per 30 s, not one per request
        _unconfirmed_reported_at[0] = now
        logger.warning(
            "a commit was cancelled before the synchronous standby confirmed it (the database says it may not be "
            "replicated): such writes are answered 503, their outcome unknown; check replication"
        )
    return StorageUnavailable(f"{action}: the database did not confirm the write (replication); outcome unknown")


async def fetch(pool: StatementPool, pool_timeout: float, action: str, sql: str, *args: Any) -> list[Any]:
    """Run one statement on a pooled connection, in bounded time: at most ``pool_timeout`` to get a connection
    (opening one included), then the statement timeout (server side, and one second later client side).

    When the client-side timeout fires, the server has not even answered the cancellation its own
    statement_timeout sends: it is stuck, or the network is. The connection is then dropped at once rather than
    cleaned up with a cancel request that would wait on the same silence.

    A database failure becomes StorageUnavailable (503), or SchemaNotMigrated when the table or its columns are
    missing; ``action`` names what failed. A statement whose outcome is unknown (the connection broke after it
    was sent, or the commit was not confirmed: see _heard) is reported the same way: never as success. Contention
    (a serialization failure or deadlock, sent once more first; a lock timeout) and text the database cannot store
    are the caller's own 503 and 422 (app.db.failures)."""
    try:
        conn = await pool.acquire(pool_timeout)
        closing = False
        try:
            rows = await _run(conn, action, sql, args)
        except failures.CANCELLED:  # an answer, on a connection as good as before: it goes back to the pool
            raise
        except _DROP_CONNECTION + failures.LOST_STATEMENT as exc:
            # A connection that failed this way is never lent again; the pool opens a new one. Read-only: its server
            # is a standby now (a switchover), so the next connection finds the primary.
            if isinstance(exc, _MAY_STILL_RUN):
                _close_in_background(conn, pool_timeout)
                closing = True
            else:
                conn.terminate()
            raise
        except failures.UNSTORABLE_TEXT as exc:
            pool.availability.answered()
            raise failures.unstorable(action, sql, args, conn.get_settings().server_encoding, exc) from None
        finally:
            if _warned:  # a mark left by a statement that failed must not taint the connection's next one
                _warned.discard(conn)
            pool.release(conn, drop=closing)
    except asyncpg.UndefinedTableError:
        pool.availability.answered()
        raise SchemaNotMigrated(f"{action}: the lock table does not exist; run `schedlock-server migrate`") from None
    except (asyncpg.UndefinedColumnError, asyncpg.UndefinedFunctionError):
        pool.availability.answered()
        raise SchemaNotMigrated(f"{action}: the lock table is not migrated; run `schedlock-server migrate`") from None
    except failures.RETRY_ONCE + failures.LOCK_TIMEOUT as exc:
        pool.availability.answered()
        raise failures.contended(action, exc) from None
    except failures.LOST_STATEMENT:
        pool.availability.answered()
        raise failures.lost_statement(action) from None
    except failures.CANCELLED:
        pool.availability.answered()
        raise failures.cancelled(action) from None
    except _UNAVAILABLE as exc:
        pool.availability.failed(action, type(exc).__name__)
        raise StorageUnavailable(f"{action}: database unavailable ({type(exc).__name__})") from None
    pool.availability.answered()
    return rows


async def _run(conn: Any, action: str, sql: str, args: tuple[Any, ...]) -> list[Any]:
    """The statement, sent once more after a serialization failure or a deadlock: its transaction was rolled back
    whole, so the second try is the first to do anything."""
    try:
        rows: list[Any] = await conn.fetch(sql, *args)
    except failures.RETRY_ONCE:
        _warned.discard(conn)  # whatever the failed try drew is not the second's
        rows = await conn.fetch(sql, *args)
    if _warned and conn in _warned:
        raise _unconfirmed(action)
    return rows


async def close_pool(pool: StatementPool, grace: float) -> None:
    """Close gracefully, but never hang a shutdown on a database that does not answer: after ``grace``
    seconds, drop the remaining connections (the server notices the closed sockets)."""
    try:
        await asyncio.wait_for(pool.close(), grace)
    except _UNAVAILABLE as exc:  # includes TimeoutError
        logger.warning("database did not answer at shutdown (%s); connections dropped", type(exc).__name__)
        pool.terminate()
