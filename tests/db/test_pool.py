"""app.db.pool.StatementPool on a real Postgres: lending, queueing, timeouts, dropped connections, idling, closing."""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import asyncpg
import pytest

from app.db.pool import StatementPool
from tests.support.patience import SETTLE
from tests.support.servers import free_port

APP = "schedlock-pool-test"


@pytest.fixture
def connect(database_url: str) -> Callable[[], Any]:
    return functools.partial(asyncpg.connect, database_url, server_settings={"application_name": APP})


@pytest.fixture
async def pool(connect: Callable[[], Any]) -> AsyncIterator[StatementPool]:
    pool = StatementPool(connect, min_size=1, max_size=3)
    await pool.open()
    yield pool
    pool.terminate()


async def backend_pid(conn: Any) -> int:
    return int(await conn.fetchval("SELECT pg_backend_pid()"))


async def test_opens_min_size_and_lends_the_most_recently_used_idle_connection(pool: StatementPool) -> None:
    assert (pool.get_size(), pool.get_idle_size(), pool.get_max_size()) == (1, 1, 3)
    a = await pool.acquire(1)
    b = await pool.acquire(1)  # none idle: a second one is opened
    assert pool.get_size() == 2 and pool.get_idle_size() == 0
    pool.release(a)
    pool.release(b)
    assert await pool.acquire(1) is b, "not most recently used first"


async def test_never_more_than_max_size_and_waiters_are_served_in_order(pool: StatementPool) -> None:
    held = [await pool.acquire(1) for _ in range(3)]
    assert pool.get_size() == 3
    served: list[int] = []

    async def wait(i: int) -> None:
        conn = await pool.acquire(5)
        served.append(i)
        pool.release(conn)

    waiting = [asyncio.create_task(wait(i)) for i in range(4)]
    await asyncio.sleep(0.05)
    assert served == [] and pool.get_size() == 3
    for conn in held:
        pool.release(conn)
    await asyncio.gather(*waiting)
    assert served == [0, 1, 2, 3]
    assert (pool.get_size(), pool.get_idle_size()) == (3, 3)


async def test_a_waiter_gives_up_after_max_wait_and_is_not_served_later(pool: StatementPool) -> None:
    held = [await pool.acquire(1) for _ in range(3)]
    started = asyncio.get_running_loop().time()
    with pytest.raises(TimeoutError):
        await pool.acquire(0.2)
    assert 0.15 < asyncio.get_running_loop().time() - started < 2
    pool.release(held[0])
    assert pool.get_idle_size() == 1, "the connection went to a waiter that had given up"
    for conn in held[1:]:
        pool.release(conn)


async def test_a_waiter_cancelled_just_after_being_served_passes_the_connection_on(pool: StatementPool) -> None:
    held = [await pool.acquire(1) for _ in range(3)]
    waiting = asyncio.create_task(pool.acquire(5))
    await asyncio.sleep(0.05)
    pool.release(held[0])  # hands the connection to the waiter ...
    waiting.cancel()  # ... which is cancelled before it could take it
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert pool.get_idle_size() == 1, "the connection was lost with the cancelled waiter"
    for conn in held[1:]:
        pool.release(conn)


async def test_a_closed_connection_is_dropped_and_its_room_reused(pool: StatementPool) -> None:
    held = [await pool.acquire(1) for _ in range(3)]
    waiter = asyncio.create_task(pool.acquire(5))
    await asyncio.sleep(0.05)
    dead_pid = await backend_pid(held[0])
    held[0].terminate()  # as app.db.statements.fetch does after a client-side timeout
    pool.release(held[0])
    fresh = await waiter  # woken to open a new connection in the freed room
    assert not fresh.is_closed() and await backend_pid(fresh) != dead_pid
    assert pool.get_size() == 3
    for conn in (fresh, *held[1:]):
        pool.release(conn)


async def test_a_connection_the_server_closed_is_never_lent(pool: StatementPool, database_url: str) -> None:
    conn = await pool.acquire(1)
    pid = await backend_pid(conn)
    pool.release(conn)
    admin = await asyncpg.connect(database_url)
    try:
        assert await admin.fetchval("SELECT pg_terminate_backend($1)", pid)
    finally:
        await admin.close()
    for _ in range(100):  # until the client has read the server's goodbye
        if conn.is_closed():
            break
        await asyncio.sleep(0.02)
    again = await pool.acquire(1)
    assert again is not conn and await backend_pid(again) != pid
    pool.release(again)


async def test_long_idle_connections_are_closed_down_to_min_size(connect: Callable[[], Any]) -> None:
    pool = StatementPool(connect, min_size=1, max_size=3, idle_lifetime=0.2)
    await pool.open()
    try:
        held = [await pool.acquire(1) for _ in range(3)]
        for conn in held:
            pool.release(conn)
        assert pool.get_size() == 3
        # The reaper retires them, then closes them in the background: wait for both (a loaded machine takes its
        # time over either; the deadline only bounds a failure).
        deadline = time.monotonic() + SETTLE
        while pool.get_size() != 1 or sum(conn.is_closed() for conn in held) != 2:
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert (pool.get_size(), pool.get_idle_size()) == (1, 1)
        assert sum(conn.is_closed() for conn in held) == 2
    finally:
        pool.terminate()


async def test_close_waits_for_lent_connections_then_closes_everything(connect: Callable[[], Any]) -> None:
    pool = StatementPool(connect, min_size=2, max_size=2)
    await pool.open()
    lent = await pool.acquire(1)
    idle = await pool.acquire(1)
    pool.release(idle)
    closing = asyncio.create_task(pool.close())
    await asyncio.sleep(0.05)
    assert not closing.done(), "closed while a connection was still lent"
    with pytest.raises(asyncpg.InterfaceError):
        await pool.acquire(1)
    assert await lent.fetchval("SELECT 1") == 1  # the borrower finishes its statement
    pool.release(lent)
    await asyncio.wait_for(closing, 5)
    assert lent.is_closed() and idle.is_closed() and pool.get_size() == 0


async def test_an_unreachable_database_fails_open_and_each_acquire_in_bounded_time() -> None:
    connect = functools.partial(asyncpg.connect, f"postgresql://postgres@127.0.0.1:{free_port()}/x", timeout=1)
    pool = StatementPool(connect, min_size=1, max_size=2)
    with pytest.raises(OSError):
        await pool.open()
    assert pool.get_size() == 0
    for _ in range(3):  # nothing leaks: each failed attempt gives its room back
        with pytest.raises(OSError):
            await pool.acquire(2)
    assert pool.get_size() == 0
    pool.terminate()


async def test_under_churn_nothing_leaks(connect: Callable[[], Any]) -> None:
    """Many callers for few connections, some giving up, some cancelled mid-statement: afterwards every
    connection is back, none over max_size, and each still works."""
    pool = StatementPool(connect, min_size=1, max_size=3)
    await pool.open()
    rng = random.Random(7)
    outcomes: dict[str, int] = {"ok": 0, "timeout": 0, "cancelled": 0}

    async def caller(i: int) -> None:
        try:
            conn = await pool.acquire(rng.choice([0.002, 2.0, 2.0]))
        except TimeoutError:
            outcomes["timeout"] += 1
            return
        try:
            assert pool.get_size() <= 3
            await conn.fetchval("SELECT pg_sleep($1)", rng.choice([0, 0.001, 0.005]))
            outcomes["ok"] += 1
        except asyncio.CancelledError:
            conn.terminate()  # as app.db.statements.fetch does: the statement's state is unknown
            outcomes["cancelled"] += 1
            raise
        finally:
            pool.release(conn)

    try:
        tasks = [asyncio.create_task(caller(i)) for i in range(300)]
        await asyncio.sleep(0.01)
        for task in rng.sample(tasks, 40):
            task.cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
        cancelled = sum(isinstance(r, asyncio.CancelledError) for r in results)
        assert outcomes["ok"] > 100 and outcomes["timeout"] > 0 and cancelled > 10, (outcomes, cancelled)
        assert 1 <= pool.get_size() <= 3
        assert pool.get_idle_size() == pool.get_size(), "a connection was not given back"
        conns = [await pool.acquire(1) for _ in range(3)]
        assert [await c.fetchval("SELECT 1") for c in conns] == [1, 1, 1]
        for c in conns:
            pool.release(c)
    finally:
        pool.terminate()
