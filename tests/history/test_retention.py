"""Retention: only history rows older than SCHEDLOCK_HISTORY_RETENTION go, in batches, while the pruning replica
holds the service's own lock; a replica that finds it held prunes nothing; lock rows are never touched."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.history.retention import RETENTION_LOCK
from app.settings import Settings
from tests.support.apps import in_process, migrated_table
from tests.support.statements import watched

OLD = "timezone('utc', now()) - interval '40 days'"


@pytest.fixture
def own_table(database_url: str) -> Iterator[Settings]:
    """A table of this test's own: the counts of deleted rows must not depend on what other tests wrote. A pruning
    round counts every old row of the table, so not even this module's other tests may share it (the server's own
    round in test_the_server_prunes_by_itself can stop between the runs and the skip counts)."""
    with migrated_table(
        database_url,
        "ret",
        history_retention=timedelta(days=30),
        history_prune_batch=3,
        history_prune_interval=timedelta(hours=1),
    ) as settings:
        yield settings


@pytest.fixture
async def pair(own_table: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with in_process(own_table) as pair:
        yield pair


def tables(settings: Settings) -> tuple[str, str, str]:
    s, t = settings.table_schema, settings.table_name
    return f'"{s}"."{t}"', f'"{s}"."{t}_runs"', f'"{s}"."{t}_skips"'


async def seed(db: Any, settings: Settings, tag: str) -> None:
    """10 locks acquired 40 days ago and free since (the trigger makes their runs), a run acquired then and still
    running (kept alive), 5 recent runs; 4 old skip counts and 2 recent ones."""
    locks, runs, skips = tables(settings)
    await db.execute(
        f"""INSERT INTO {locks} (name, lock_until, locked_at, locked_by)
        SELECT '{tag}-' || i, {OLD} + interval '1 minute', {OLD}, 'host' FROM generate_series(1, 10) i"""
    )
    await db.execute(
        f"""INSERT INTO {runs} (fencing_token, name, locked_by, acquired_at, lock_until)
        SELECT nextval('{settings.table_schema}.{settings.table_name}_fencing_seq'), '{tag}-' || i, 'host',
          CASE WHEN i = 11 THEN {OLD} ELSE timezone('utc', now()) END, timezone('utc', now()) + interval '1 hour'
        FROM generate_series(11, 16) i"""
    )
    await db.execute(
        f"""INSERT INTO {skips} (name, fencing_token, hour, skipped)
        SELECT '{tag}-' || i, i, date_trunc('hour', CASE WHEN i <= 4 THEN {OLD} ELSE timezone('utc', now()) END), 1
        FROM generate_series(1, 6) i"""
    )


async def count(db: Any, table: str, tag: str) -> int:
    return int(await db.fetchval(f"SELECT count(*) FROM {table} WHERE name LIKE $1", f"{tag}-%"))


async def test_old_history_goes_in_batches_under_the_lock(
    pair: tuple[FastAPI, httpx.AsyncClient], db: Any, own_table: Settings
) -> None:
    app, _ = pair
    tag = uuid.uuid4().hex[:8]
    await seed(db, own_table, tag)
    store = app.state.store
    statements: list[int] = []

    async def hook(operation: str, rows: list[Any] | None) -> None:
        if operation != "prune":
            return
        if rows is None:  # each batch runs while this replica holds the retention lock
            row = await store.get(RETENTION_LOCK)
            assert row.held and row.locked_by.startswith(app.state.pruner.holder)
        else:
            statements.append(int(rows[0]["n"]))

    with watched(store, hook):
        assert await app.state.pruner.prune_once() == 14
    assert statements == [3, 3, 3, 1, 3, 1]  # batches of 3: ten runs, then four skip counts
    locks, runs, skips = tables(own_table)
    assert await count(db, runs, tag) == 6, "the recent runs, and the old one still running"
    assert await count(db, skips, tag) == 2
    assert await count(db, locks, tag) == 10, "lock rows are never deleted"
    assert not (await store.get(RETENTION_LOCK)).held, "released after the round"
    assert await app.state.pruner.prune_once() == 0


async def test_a_replica_that_finds_the_lock_held_prunes_nothing(
    pair: tuple[FastAPI, httpx.AsyncClient], db: Any, own_table: Settings
) -> None:
    app, _ = pair
    tag = uuid.uuid4().hex[:8]
    await seed(db, own_table, tag)
    # Another replica is pruning (callers cannot take the service's own lock: it is reserved).
    other = await app.state.store.acquire(RETENTION_LOCK, timedelta(minutes=10), timedelta(0), "another replica")
    assert await app.state.pruner.prune_once() is None
    assert await count(db, tables(own_table)[1], tag) == 16
    await app.state.store.release(RETENTION_LOCK, other.token)
    assert await app.state.pruner.prune_once() == 14


async def test_two_replicas_prune_one_at_a_time(own_table: Settings, db: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    await seed(db, own_table, tag)
    async with in_process(own_table) as (first, _), in_process(own_table) as (second, _):
        pruning = asyncio.Event()

        async def slow(operation: str, rows: list[Any] | None) -> None:
            if operation == "prune" and rows is None:
                pruning.set()
                await asyncio.sleep(0.1)

        with watched(first.state.store, slow):
            busy = asyncio.create_task(first.state.pruner.prune_once())
            await pruning.wait()
            assert await second.state.pruner.prune_once() is None
            assert await busy == 14
    assert await count(db, tables(own_table)[1], tag) == 6


async def test_the_server_prunes_by_itself(own_table: Settings, db: Any) -> None:
    tag = uuid.uuid4().hex[:8]
    await seed(db, own_table, tag)
    quick = own_table.model_copy(update={"history_prune_interval": timedelta(milliseconds=100)})
    async with in_process(quick):
        for _ in range(100):
            if await count(db, tables(own_table)[1], tag) == 6:
                break
            await asyncio.sleep(0.05)
    assert await count(db, tables(own_table)[1], tag) == 6


async def test_a_zero_retention_keeps_everything(own_table: Settings) -> None:
    async with in_process(own_table.model_copy(update={"history_retention": timedelta(0)})) as (app, _):
        assert app.state.pruner is None
