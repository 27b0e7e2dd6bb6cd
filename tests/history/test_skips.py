"""Skip counts: refusals are counted in memory and written in one statement per flush; a failed flush keeps its
counts for the next; the server flushes by itself, and once more when it shuts down."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

import app.history.skips as skips_module
from app.db.statements import close_pool, create_pool
from app.errors import StorageUnavailable
from app.history.skips import SkipCounter
from app.locking.rows import LockRow
from app.locking.store import LockStore
from app.settings import Settings
from tests.support.api import acquire
from tests.support.apps import in_process
from tests.support.servers import free_port
from tests.support.statements import watched

NOON = datetime(2026, 11, 29, 12)


async def run_skips(client: httpx.AsyncClient, name: str) -> int:
    (run,) = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    return int(run["skipped"])


async def test_refusals_are_written_in_one_statement(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    names = [f"{name}-{i}" for i in range(5)]
    for n in names:
        await acquire(client, n, "10m")
    for n in names:
        for _ in range(3):
            assert (await acquire(client, n, "10m")).status_code == 409
    store, statements = app.state.store, []

    async def hook(operation: str, rows: list[Any] | None) -> None:
        if rows is None:
            statements.append(operation)

    with watched(store, hook):
        assert await app.state.skips.flush(store) >= 15  # other tests' refusals may be in this flush too
    assert statements == ["flush_skips"]
    assert [await run_skips(client, n) for n in names] == [3] * 5
    assert await app.state.skips.flush(store) == 0


async def test_a_failed_flush_keeps_its_counts(
    settings: Settings, app: FastAPI, client: httpx.AsyncClient, name: str
) -> None:
    lease = (await acquire(client, name, "10m")).json()
    holder = await app.state.store.get(name)
    counter = SkipCounter(app.state.history.skips_table)
    counter.count(holder)
    counter.count(holder)
    dead = settings.model_copy(
        update={
            "database_url": SecretStr(f"postgresql://postgres@127.0.0.1:{free_port()}/test"),
            "db_connect_timeout": 1.0,
        }
    )
    pool = await create_pool(dead)
    try:
        down = LockStore.over(pool, dead.table_name, dead.table_schema, 1.0)
        with pytest.raises(StorageUnavailable):
            await counter.flush(down)
    finally:
        await close_pool(pool, 1.0)
    counter.count(holder)
    assert counter.pending == 3
    assert await counter.flush(app.state.store) == 3
    assert await run_skips(client, name) == 3
    assert lease["fencing_token"] == holder.fencing_token


async def test_the_server_flushes_by_itself(settings: Settings, name: str) -> None:
    async with in_process(settings.model_copy(update={"history_flush_interval": 0.1})) as (_, client):
        await acquire(client, name, "10m")
        await acquire(client, name, "10m")
        for _ in range(100):
            if await run_skips(client, name) == 1:
                break
            await asyncio.sleep(0.05)
        assert await run_skips(client, name) == 1


async def test_a_graceful_shutdown_loses_no_skip(settings: Settings, client: httpx.AsyncClient, name: str) -> None:
    async with in_process(settings.model_copy(update={"history_flush_interval": 3600.0})) as (other, other_client):
        await acquire(other_client, name, "10m")
        for _ in range(4):
            await acquire(other_client, name, "10m")
        assert other.state.skips.pending == 4
    assert await run_skips(client, name) == 4


async def test_beyond_the_pending_limit_new_keys_are_dropped_and_said(
    app: FastAPI,
    client: httpx.AsyncClient,
    name: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(skips_module, "MAX_PENDING_KEYS", 1)
    counter = SkipCounter(app.state.history.skips_table)
    for i in range(2):
        await acquire(client, f"{name}-{i}", "10m")
    first, second = [await app.state.store.get(f"{name}-{i}") for i in range(2)]
    with caplog.at_level(logging.WARNING, logger="schedlock.history"):
        counter.count(first)
        counter.count(second)
        counter.count(second)
        counter.count(first)
        assert counter.pending == 2
        assert await counter.flush(app.state.store) == 2
    assert [
        r.getMessage() for r in caplog.records if "dropping" in r.getMessage() or "not counted" in r.getMessage()
    ] == [
        "skip counts not written for a while; dropping new ones until the next flush",
        "2 skipped attempts were not counted while skip counts could not be written",
    ]


async def test_each_refusal_counts_in_its_own_hour(app: FastAPI, db: Any, name: str) -> None:
    counter = SkipCounter(app.state.history.skips_table)
    for at in ("10:59:59.999", "11:00:00", "10:00:00", "11:59:59", "12:00:00.001"):
        counter.count(LockRow(name, "host", NOON, NOON, 7, datetime.fromisoformat(f"2026-11-29T{at}")))
    assert await counter.flush(app.state.store) == 5
    rows = await db.fetch(f"SELECT hour, skipped FROM {app.state.history.skips_table} WHERE name = $1 ORDER BY 1", name)
    assert [(r["hour"].hour, r["skipped"]) for r in rows] == [(10, 2), (11, 2), (12, 1)]
