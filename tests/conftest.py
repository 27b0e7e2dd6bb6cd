"""Shared fixtures: a real Postgres, a fresh lock table per test session, the app with its lifespan entered.

The suite brings its own Postgres: SCHEDLOCK_TEST_DATABASE_URL if set (a server of the developer's choosing), else a
throwaway cluster of Debian's postgresql on a free loopback port, else (without Debian's binaries) an embedded
pgserver cluster; nothing assumes a server at 127.0.0.1:5432. Its URL is exported as SCHEDLOCK_TEST_DATABASE_URL
for what the tests start. Each session migrates its own schema, so parallel runs never see each other's rows, and
drops it at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI

from app.db import migrate
from app.settings import Settings
from tests.support.apps import drop_schema, in_process, make_settings, migrated_table
from tests.support.java import JavaNode
from tests.support.pgcluster import PgCluster
from tests.support.polyglot import token_config
from tests.support.servers import LiveServer, free_port, start_server, stop_server

#: Every test under tests/system/ is of the system tier (``-m "not system"`` is the fast tier); a fast module with a
#: test or two that need more marks them one by one.
SYSTEM = Path(__file__).parent / "system"


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.is_relative_to(SYSTEM):
            item.add_marker(pytest.mark.system)


#: The suite's own cluster: its servers, the benchmark and the docs' examples open many connections at once.
SUITE_CLUSTER_SETTINGS = {"max_connections": "400", "synchronous_commit": "on"}


def _reachable(url: str) -> bool:
    async def probe() -> None:
        conn = await asyncpg.connect(url, timeout=3)
        await conn.close()

    try:
        asyncio.run(probe())
    except (OSError, asyncpg.PostgresError, TimeoutError):
        return False
    return True


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    url = os.environ.get("SCHEDLOCK_TEST_DATABASE_URL")
    if url is not None:
        if not _reachable(url):
            pytest.fail(f"SCHEDLOCK_TEST_DATABASE_URL is set but unreachable: {url}")
        yield url
        return
    with _own_postgres() as url:
        os.environ["SCHEDLOCK_TEST_DATABASE_URL"] = url
        try:
            yield url
        finally:
            del os.environ["SCHEDLOCK_TEST_DATABASE_URL"]


@contextlib.contextmanager
def _own_postgres() -> Iterator[str]:
    """A Postgres for this session alone: Debian's binaries in a throwaway cluster, or the embedded pgserver."""
    try:
        cluster = PgCluster()
    except RuntimeError:  # no Debian postgresql: the embedded one (./scripts/test installs postgresql on Debian)
        from app.db.embedded import EmbeddedPostgres

        with tempfile.TemporaryDirectory(prefix="schedlock-test-pg-") as tmp:
            Path(tmp).chmod(0o755)
            embedded = EmbeddedPostgres(Path(tmp) / "pgdata")
            try:
                yield embedded.start()
            finally:
                embedded.stop()
        return
    try:
        cluster.start(**SUITE_CLUSTER_SETTINGS)
        yield cluster.url
    finally:
        cluster.destroy()


@pytest.fixture(scope="session")
def schema(database_url: str) -> Iterator[str]:
    """A schema of this session's own, dropped at the end."""
    name = f"test_{uuid.uuid4().hex[:10]}"
    yield name
    drop_schema(database_url, name)


@pytest.fixture(scope="session")
def settings(database_url: str, schema: str) -> Settings:
    settings = make_settings(database_url, f"{schema}.shedlock")
    migrate.upgrade(settings)
    return settings


@pytest.fixture(scope="session")
async def app_and_client(settings: Settings) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    async with in_process(settings) as pair:
        yield pair


@pytest.fixture(scope="session")
def app(app_and_client: tuple[FastAPI, httpx.AsyncClient]) -> FastAPI:
    return app_and_client[0]


@pytest.fixture(scope="session")
def client(app_and_client: tuple[FastAPI, httpx.AsyncClient]) -> httpx.AsyncClient:
    return app_and_client[1]


@pytest.fixture(scope="session")
async def db(database_url: str) -> AsyncIterator[Any]:
    """A direct connection pool, for what a test must see or do behind the service's back."""
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=4, server_settings={"timezone": "UTC"})
    yield pool
    await pool.close()


@pytest.fixture
def name() -> str:
    """A lock name no other test uses."""
    return f"job-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def java(db: Any, settings: Settings) -> JavaNode:
    """A Java ShedLock node (JdbcTemplateLockProvider, usingDbTime()) on the same table."""
    return JavaNode(db, settings.table, hostname="java-host-1")


@pytest.fixture(scope="session")
def live_server(settings: Settings) -> Iterator[LiveServer]:
    server = start_server(settings)
    yield server
    stop_server(server)


@pytest.fixture
def url(live_server: LiveServer) -> str:
    return live_server.url


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens: connection refused at once."""
    return f"http://127.0.0.1:{free_port()}"


# A server that requires API tokens: the polyglot examples (tests/system/polyglot/) and the stock clients
# (tests/api/test_stock_clients.py) run against it.


@pytest.fixture(scope="session")
def poly_settings(database_url: str) -> Iterator[Settings]:
    """A lock table of these tests' own: the runnable examples all take "nightly-report", which other tests use."""
    with migrated_table(database_url, "test_poly") as settings:
        yield settings


@pytest.fixture(scope="session")
def poly_server(poly_settings: Settings) -> Iterator[LiveServer]:
    """A `schedlock-server serve` process that requires an API token on every /v1 request."""
    server = start_server(poly_settings, {"SCHEDLOCK_TOKENS": token_config()})
    yield server
    stop_server(server)


@pytest.fixture
def poly_name() -> str:
    """A lock name within the token's prefixes that no other test uses."""
    return f"poly.{uuid.uuid4().hex[:12]}"
