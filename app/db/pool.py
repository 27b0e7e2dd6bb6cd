"""The connection pool behind the hot path: asyncpg connections lent out for one statement at a time.

Why not ``asyncpg.Pool``: every lock request runs exactly one autocommit statement, and asyncpg's general pool
spends more on lending a connection than that use needs: a timeout context and a proxy object per acquire, a
task (``asyncio.shield``), a timeout context, a reset and an inactivity timer per release. At full load that was
a large share of the server's CPU (docs/performance.md). This pool only does what the lock service needs:

- a connection is lent whole to one caller (asyncpg runs one statement per connection at a time) and comes back
  with nothing to undo: callers run single statements, never transactions, SET, LISTEN or cursors;
- an idle connection is lent at once, most recently used first; otherwise a new one is opened while fewer than
  ``max_size`` exist, else the caller queues (first come, first served) for at most ``max_wait`` seconds, opening
  a connection included;
- a connection that closed (the server restarted, or a caller terminated it after a timeout) is dropped, never
  lent, and its place can be taken by a new one at once;
- connections idle for ``idle_lifetime`` seconds are closed, down to ``min_size``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from app.db.availability import Availability

logger = logging.getLogger("schedlock.db")

Connect = Callable[[], Awaitable[Any]]


class StatementPool:
    """Up to ``max_size`` connections made by ``connect``, each lent to one caller at a time (see the module)."""

    def __init__(self, connect: Connect, *, min_size: int, max_size: int, idle_lifetime: float = 300.0) -> None:
        if not 0 <= min_size <= max_size or max_size < 1:
            raise ValueError(f"need 0 <= min_size <= max_size and max_size >= 1, got {min_size}, {max_size}")
        self._connect = connect
        self._min_size = min_size
        self._max_size = max_size
        self._idle_lifetime = idle_lifetime
        self._size = 0  # connections open or being opened
        self._idle: list[tuple[Any, float]] = []  # (connection, when it came back), most recent last
        self._waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        self._all: set[Any] = set()
        self._closing = False
        self._lent = 0
        self._all_back: asyncio.Event | None = None
        self._reaper: asyncio.Task[None] | None = None
        self._closers: set[asyncio.Task[None]] = set()
        #: Told by app.db.statements whether each call reached the database; logs when that changes.
        self.availability = Availability()

    async def open(self) -> None:
        """Open ``min_size`` connections and start closing long-idle ones. Raises what connecting raised (the
        pool stays usable: it opens connections when they are needed)."""
        self._reaper = asyncio.get_running_loop().create_task(self._reap())
        opened = await asyncio.gather(*(self._open_one() for _ in range(self._min_size)), return_exceptions=True)
        failures = [r for r in opened if isinstance(r, BaseException)]
        for conn in opened:
            if not isinstance(conn, BaseException):
                self.release(conn, lent=False)
        if failures:
            raise failures[0]

    async def acquire(self, max_wait: float) -> Any:
        """A connection for the caller alone, until ``release``. Raises TimeoutError after ``max_wait`` seconds
        (only a caller that finds no idle connection waits, or pays for a timer)."""
        conn = None if self._closing else self._take_idle()
        if conn is None:
            conn = await self._wait_or_open(max_wait)
        self._lent += 1
        return conn

    def release(self, conn: Any, *, lent: bool = True, drop: bool = False) -> None:
        """Take a connection back (closed ones too: they are dropped; ``drop``: one being closed elsewhere, never lent
        again, so another may be opened in its place at once). Never blocks."""
        if lent:
            self._lent -= 1
        if drop or conn.is_closed():
            self._forget(conn)
        else:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(conn)
                    return
            self._idle.append((conn, time.monotonic()))
        if self._closing and self._lent == 0 and self._all_back is not None:
            self._all_back.set()

    def get_size(self) -> int:
        return self._size

    def get_idle_size(self) -> int:
        return len(self._idle)

    def get_max_size(self) -> int:
        return self._max_size

    def saturated(self) -> bool:
        """Every connection the pool may open is lent: a statement sent now would wait for one."""
        return self._lent >= self._max_size

    async def close(self) -> None:
        """Stop lending, wait for lent connections to come back, then close every connection gracefully."""
        self._closing = True
        self._stop_reaper()
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(asyncpg.InterfaceError("the pool is closing"))
        if self._lent:
            self._all_back = asyncio.Event()
            await self._all_back.wait()
        idle, self._idle = self._idle, []
        await asyncio.gather(*(conn.close() for conn, _ in idle), return_exceptions=True)
        for conn, _ in idle:
            self._forget(conn)

    def terminate(self) -> None:
        """Drop every connection at once, lent or not, without telling the server."""
        self._closing = True
        self._stop_reaper()
        for conn in list(self._all):
            conn.terminate()
            self._forget(conn)
        self._idle = []

    def _take_idle(self) -> Any | None:
        """The most recently returned idle connection that is still open (closed ones are dropped), or None."""
        while self._idle:
            conn = self._idle.pop()[0]
            if not conn.is_closed():
                return conn
            self._forget(conn)
        return None

    async def _wait_or_open(self, max_wait: float) -> Any:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait
        while True:
            if self._closing:
                raise asyncpg.InterfaceError("the pool is closing")
            idle = self._take_idle()
            if idle is not None:
                return idle
            if self._size < self._max_size:
                async with asyncio.timeout_at(deadline):  # connecting counts against the same wait
                    return await self._open_one()
            # Wait in line. A plain timer on the waiter rather than asyncio.timeout(): under load most callers
            # come here, and cancelling a task is dearer than failing a future.
            waiter: asyncio.Future[Any] = loop.create_future()
            self._waiters.append(waiter)
            timer = loop.call_at(deadline, _expire, waiter)
            try:
                conn = await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled() and waiter.exception() is None:
                    # Served just as we were cancelled: pass the connection, or the room to open one, on.
                    given = waiter.result()
                    if given is None:
                        self._wake_one()
                    else:
                        self.release(given, lent=False)
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                raise
            finally:
                timer.cancel()
            if conn is not None:
                return conn
            # None: a connection was dropped, so there is room to open one.

    async def _open_one(self) -> Any:
        self._size += 1
        try:
            conn = await self._connect()
        except BaseException:
            self._size -= 1
            self._wake_one()  # the room this caller hoped to use is free again
            raise
        self._all.add(conn)
        return conn

    def _forget(self, conn: Any) -> None:
        if conn in self._all:
            self._all.discard(conn)
            self._size -= 1
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    async def _reap(self) -> None:
        loop = asyncio.get_running_loop()
        every = max(min(self._idle_lifetime / 2, 30.0), 0.01)
        while True:
            await asyncio.sleep(every)
            # Least recently used first: the bottom of the stack.
            while self._idle and self._size > self._min_size:
                conn, since = self._idle[0]
                if time.monotonic() - since < self._idle_lifetime:
                    break
                del self._idle[0]
                self._forget(conn)
                closing = loop.create_task(_close_quietly(conn))
                self._closers.add(closing)
                closing.add_done_callback(self._closers.discard)

    def _stop_reaper(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None


def _expire(waiter: asyncio.Future[Any]) -> None:
    if not waiter.done():
        waiter.set_exception(TimeoutError("no database connection became free in time"))


async def _close_quietly(conn: Any) -> None:
    try:
        await conn.close(timeout=5)
    except Exception as exc:  # it is being retired anyway
        logger.debug("closing an idle connection failed: %s", type(exc).__name__)
        conn.terminate()
