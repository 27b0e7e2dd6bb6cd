"""Migration 0004 (jobs): it adds the jobs table and the runs' ``failed`` column and touches no lock row; running it
again changes nothing; its downgrade drops only what it added, and upgrading again brings it back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from alembic import command

from app.db import migrate
from app.settings import Settings
from tests.support.apps import fresh_table
from tests.support.java import JavaNode


@pytest.fixture
async def fresh(database_url: str) -> AsyncIterator[tuple[Any, Settings]]:
    async with fresh_table(database_url, "jmig") as pair:
        yield pair


async def alembic(settings: Settings, action: str, revision: str) -> None:
    await asyncio.to_thread(getattr(command, action), migrate.alembic_config(settings), revision)


async def tables(conn: Any, settings: Settings) -> set[str]:
    rows = await conn.fetch(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = $1", settings.table_schema
    )
    return {r["table_name"] for r in rows}


async def run_columns(conn: Any, settings: Settings) -> set[str]:
    rows = await conn.fetch(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2",
        settings.table_schema,
        f"{settings.table_name}_runs",
    )
    return {r["column_name"] for r in rows}


async def test_upgrade_and_downgrade_leave_the_locks_alone(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await alembic(settings, "upgrade", "0003")
    java = JavaNode(conn, settings.table, hostname="java-host-1")
    await java.insert_or_take_over("held", 600.0)
    before = await conn.fetch(f"SELECT * FROM {settings.table} ORDER BY name")
    await alembic(settings, "upgrade", "head")
    assert "shedlock_jobs" in await tables(conn, settings) and "failed" in await run_columns(conn, settings)
    jobs = f'"{settings.table_schema}".shedlock_jobs'
    await conn.execute(
        f"INSERT INTO {jobs} VALUES ('held', 'PT1M', 'UTC', '5 minutes', NULL, false, now(), now(), now(), false, NULL)"
    )
    await alembic(settings, "upgrade", "head")  # again: nothing changes
    assert await conn.fetchval(f"SELECT count(*) FROM {jobs}") == 1
    await alembic(settings, "downgrade", "0003")
    assert "shedlock_jobs" not in await tables(conn, settings) and "failed" not in await run_columns(conn, settings)
    assert await conn.fetch(f"SELECT * FROM {settings.table} ORDER BY name") == before
    assert await conn.fetchval(f'SELECT count(*) FROM "{settings.table_schema}".shedlock_runs') == 1
    await alembic(settings, "upgrade", "head")
    assert "shedlock_jobs" in await tables(conn, settings)
    assert await conn.fetch(f"SELECT * FROM {settings.table} ORDER BY name") == before
