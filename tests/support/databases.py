"""A database of a test's own on the test server, for tests that change database-level settings (a default
isolation level, a lock timeout) or need another encoding: made with a random name, dropped afterwards."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg


def with_database(url: str, database: str) -> str:
    """``url`` pointed at another database of the same server."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{database}"))


@asynccontextmanager
async def scratch_database(
    url: str, *, encoding: str | None = None, settings: Mapping[str, str] | None = None
) -> AsyncIterator[str]:
    """A new database on ``url``'s server (``encoding`` with the C locale, from template0, if given), with
    ``settings`` as its defaults (ALTER DATABASE ... SET); yields its URL, drops it afterwards."""
    name = f"scratch_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(url)
    try:
        options = f" ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0" if encoding else ""
        await admin.execute(f'CREATE DATABASE "{name}"{options}')
        for key, value in (settings or {}).items():
            await admin.execute(f"ALTER DATABASE \"{name}\" SET {key} = '{value}'")
        try:
            yield with_database(url, name)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def wait_for_lock_wait(conn: Any, application_name: str = "schedlock", within: float = 20) -> None:
    """Wait until a backend of ``application_name`` in ``conn``'s database waits for a lock (a row another
    transaction holds)."""
    deadline = time.monotonic() + within
    while not await conn.fetchval(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' "
        "AND datname = current_database()",
        application_name,
    ):
        assert time.monotonic() < deadline, "no statement of the service ever waited for the row"
        await asyncio.sleep(0.02)


def schemas_left(database_url: str, prefix: str) -> int:
    """How many schemas whose name starts with ``prefix`` the database still has (a benchmark script's own schemas
    must all be dropped when it ends)."""

    async def count() -> int:
        conn = await asyncpg.connect(database_url)
        try:
            return int(await conn.fetchval("SELECT count(*) FROM pg_namespace WHERE starts_with(nspname, $1)", prefix))
        finally:
            await conn.close()

    return asyncio.run(count())
