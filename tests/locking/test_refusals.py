"""A refused acquire only reads: no transaction id (so no WAL and no commit to flush), no row lock, and no wait
behind another writer of the row. Where the statement's snapshot is already out of date, ON CONFLICT still decides
on the latest committed row (docs/performance.md, "Contended")."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from fastapi import FastAPI

from app.errors import LockHeld
from app.locking.leases import hash_token, new_token
from app.locking.outcomes import Refusals
from app.locking.rows import LockRow, held
from app.settings import Settings
from tests.support.api import acquire, extend, release
from tests.support.patience import SETTLE


def acquire_args(name: str) -> tuple[Any, ...]:
    return (name, timedelta(minutes=10), "refusal-test", hash_token(new_token()), timedelta(0))


async def test_a_refused_acquire_takes_no_transaction_id(
    app: FastAPI, client: httpx.AsyncClient, db: Any, name: str
) -> None:
    assert (await acquire(client, name)).status_code == 200
    sql = app.state.store.sql.acquire
    async with db.acquire() as conn, conn.transaction():
        (row,) = await conn.fetch(sql, *acquire_args(name))
        assert row["ok"] is False and row["locked_by"] != "refusal-test"
        assert await conn.fetchval("SELECT txid_current_if_assigned()") is None
        # Nothing of the row is locked by the refusal: another session can lock it without waiting.
        async with db.acquire() as other, other.transaction():
            locked = await other.fetchval(
                f"SELECT name FROM {app.state.store.table} WHERE name = $1 FOR UPDATE NOWAIT", name
            )
            assert locked == name


async def test_an_acquire_that_takes_the_row_has_a_transaction(app: FastAPI, db: Any, name: str) -> None:
    # The witness for the test above: the same probe sees the write when the acquire succeeds.
    sql = app.state.store.sql.acquire
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            (row,) = await conn.fetch(sql, *acquire_args(name))
            assert row["ok"] is True
            assert await conn.fetchval("SELECT txid_current_if_assigned()") is not None
        finally:
            await tx.rollback()


async def test_a_refusal_does_not_wait_behind_a_writer_of_the_row(
    app: FastAPI, client: httpx.AsyncClient, db: Any, name: str
) -> None:
    assert (await acquire(client, name)).status_code == 200
    async with db.acquire() as conn, conn.transaction():
        # Another writer holds the row lock (as a release or a Java unlock does until it commits).
        await conn.execute(f"SELECT FROM {app.state.store.table} WHERE name = $1 FOR UPDATE", name)
        refused = await asyncio.wait_for(acquire(client, name), timeout=SETTLE)  # a wait would end in 503
        assert refused.status_code == 409
        assert refused.json()["error"]["code"] == "lock_held"


async def test_an_acquire_racing_a_release_sees_the_committed_row(
    app: FastAPI, client: httpx.AsyncClient, settings: Settings, db: Any, name: str
) -> None:
    # The snapshot says free (expired), a concurrent writer holds the row: ON CONFLICT waits for it and decides on
    # what it committed. Here the writer takes the lock, so the acquire is refused, with the writer as the holder.
    taken = (await acquire(client, name, "10m")).json()
    assert (await release(client, name, taken["token"])).status_code == 200
    table = app.state.store.table
    async with db.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            await conn.execute(
                f"UPDATE {table} SET lock_until = timezone('utc', CURRENT_TIMESTAMP) + interval '10 minutes', "
                "locked_at = timezone('utc', CURRENT_TIMESTAMP), locked_by = 'java-host-9' WHERE name = $1",
                name,
            )
            pending = asyncio.ensure_future(acquire(client, name))
            await asyncio.sleep(0.3)
            assert not pending.done()  # waiting for the writer's commit, not answering from its snapshot
        finally:
            await tx.commit()
        refused = await asyncio.wait_for(pending, timeout=SETTLE)
    assert refused.status_code == 409
    assert refused.json()["error"]["locked_by"] == "java-host-9"


async def test_callers_refused_together_each_get_the_holder(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    # Acquires that queue behind one statement are refused with its one row: the same body for each, naming the
    # holder as the lock's own read gives it.
    taken = (await acquire(client, name, holder="first-holder")).json()
    refused = await asyncio.gather(*(acquire(client, name, holder=f"caller-{i}") for i in range(16)))
    assert {r.status_code for r in refused} == {409}
    # One body per statement that decided them: the same but for db_time (the statement's own clock reading).
    assert len({orjson.dumps(r.json()["error"] | {"db_time": None}) for r in refused}) == 1
    error = refused[0].json()["error"]
    assert (error["locked_by"], error["lock_until"]) == (taken["locked_by"], taken["lock_until"])


async def test_a_refusal_names_the_holder_of_the_moment(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    # The refusal kept for a name is the last row's: a new holder, or the same holder extended, is refused anew.
    first = (await acquire(client, name, "10m", holder="holder-one")).json()
    assert (await acquire(client, name)).json()["error"]["locked_by"] == first["locked_by"]
    extended = (await extend(client, name, first["token"], "20m")).json()
    refused = (await acquire(client, name)).json()["error"]
    assert (refused["locked_by"], refused["lock_until"]) == (first["locked_by"], extended["lock_until"])
    assert refused["lock_until"] != first["lock_until"]
    assert (await release(client, name, first["token"])).status_code == 200
    second = (await acquire(client, name, "10m", holder="holder-two")).json()
    assert (await acquire(client, name)).json()["error"]["locked_by"] == second["locked_by"]


def test_each_refused_caller_raises_its_own_error() -> None:
    # One row, many callers: each gets its own exception (its own traceback), made from a kept one that is never
    # raised; the body is rendered once for them all.
    refusals = Refusals()
    now = datetime(2026, 12, 4, 21, 0, tzinfo=UTC)
    row = LockRow("nightly", "host-a", now, now + timedelta(minutes=10), 7, now)
    errors = [refusals.of("nightly", row) for _ in range(3)]
    assert len({id(e) for e in errors}) == 3
    for error in errors:
        assert type(error) is LockHeld
        assert error.body() == held("nightly", row).body()
    try:
        raise errors[0]
    except LockHeld:
        pass
    assert errors[0].__traceback__ is not None and errors[1].__traceback__ is None
    (kept,) = (refusal for _, refusal in refusals.kept.values())
    assert kept.__traceback__ is None and all(kept is not e for e in errors)
    assert errors[1].rendered() is errors[2].rendered() == orjson.dumps(held("nightly", row).body())
    other = LockRow("nightly", "host-b", now, now + timedelta(minutes=5), 8, now)
    assert refusals.of("nightly", other).details["locked_by"] == "host-b"
