"""Settings for a test table (migrated or not, in a schema of its own), apps on them with their lifespan entered,
and schema clean-up."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import asyncpg
import httpx
from alembic import command
from fastapi import FastAPI
from pydantic import SecretStr

from app.db import migrate
from app.main import create_app
from app.settings import Settings


def make_settings(database_url: str, table: str, **overrides: Any) -> Settings:
    return Settings(database_url=SecretStr(database_url), table=table, **overrides)


def drop_schema(database_url: str, schema: str) -> None:
    """Drop a schema a test made (from synchronous code: not inside a running event loop)."""

    async def drop() -> None:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


@contextmanager
def migrated_table(database_url: str, prefix: str, **overrides: Any) -> Iterator[Settings]:
    """Settings (with ``overrides``) for a migrated table in a new schema of its own, for tests whose rows must not
    meet other tests' (a name they share, counts of rows); the schema is dropped afterwards. From synchronous code."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    settings = make_settings(database_url, f"{schema}.shedlock", **overrides)
    try:
        migrate.upgrade(settings)
        yield settings
    finally:
        drop_schema(database_url, schema)


@asynccontextmanager
async def fresh_table(database_url: str, prefix: str) -> AsyncIterator[tuple[Any, Settings]]:
    """A direct connection (UTC) and settings for a table in a new schema of its own, not migrated; the schema is
    dropped afterwards."""
    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    conn = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    try:
        yield conn, make_settings(database_url, f"{schema}.shedlock")
    finally:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await conn.close()


async def upgrade_to(settings: Settings, revision: str = "head") -> None:
    """Alembic's upgrade of ``settings``' table to ``revision`` (a migration's id, or head), from async code."""
    await asyncio.to_thread(command.upgrade, migrate.alembic_config(settings), revision)


@asynccontextmanager
async def in_process(settings: Settings, **create: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app on ``settings`` with its lifespan entered, and an in-process client for it."""
    app = create_app(settings, **create)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://schedlock.test") as client,
    ):
        yield app, client
