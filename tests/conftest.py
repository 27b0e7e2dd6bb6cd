"""Shared fixtures: a real Postgres, a fresh lock table per test session, the app with its lifespan entered.

The database is SCHEDLOCK_TEST_DATABASE_URL, else the local server at 127.0.0.1:5432/test, else (on a machine
without Postgres) an embedded pgserver cluster. Each session migrates its own schema, so parallel runs never
see each other's rows, and drops it at the end.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from app.db import migrate
from app.main import create_app
from app.settings import Settings
from tests.java import JavaNode

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


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
    url = os.environ.get("SCHEDLOCK_TEST_DATABASE_URL", DEFAULT_URL)
    if _reachable(url):
        yield url
        return
    if "SCHEDLOCK_TEST_DATABASE_URL" in os.environ:
        pytest.fail(f"SCHEDLOCK_TEST_DATABASE_URL is set but unreachable: {url}")
    from app.db.embedded import EmbeddedPostgres

    with tempfile.TemporaryDirectory(prefix="schedlock-test-pg-") as tmp:
        Path(tmp).chmod(0o755)
        embedded = EmbeddedPostgres(Path(tmp) / "pgdata")
        try:
            yield embedded.start()
        finally:
            embedded.stop()


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


@asynccontextmanager
async def in_process(settings: Settings, **create: Any) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """An app on ``settings`` with its lifespan entered, and an in-process client for it."""
    app = create_app(settings, **create)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://schedlock.test") as client,
    ):
        yield app, client


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


@dataclass
class LiveServer:
    """A real `schedlock-server serve` process on the session's table."""

    url: str
    process: subprocess.Popen[str]
    # Read continuously by a thread: a server whose output pipe fills up (its access log, after a few hundred
    # requests) blocks on its next log line and stops answering.
    output: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def drain(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(settings: Settings, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any SCHEDLOCK_* of its own, pointed at ``settings``' table."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env.update({"SCHEDLOCK_DATABASE_URL": settings.asyncpg_dsn(), "SCHEDLOCK_TABLE": settings.table})
    env.update(extra_env or {})
    return env


def spawn_server(command: list[str], env: dict[str, str], port: int) -> LiveServer:
    """Start a server process whose output is read as it comes; it is not ready yet (see wait_for)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    server = LiveServer(f"http://127.0.0.1:{port}", process)
    server.reader = threading.Thread(target=server.drain, name=f"server-{port}-output", daemon=True)
    server.reader.start()
    return server


def wait_for(server: LiveServer, path: str = "/readyz", timeout: float = 30) -> None:
    """Wait until ``path`` answers 200; on failure stop the server and raise with what it printed."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited: {stop_server(server)}")
        try:
            if httpx.get(f"{server.url}{path}", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server did not answer {path}: {stop_server(server)}")


def start_server(settings: Settings, extra_env: dict[str, str] | None = None, port: int | None = None) -> LiveServer:
    """Start a server process and wait until it is ready; the caller stops it (stop_server)."""
    port = port or free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port)]
    server = spawn_server(command, server_env(settings, extra_env), port)
    wait_for(server)
    return server


def stop_server(server: LiveServer) -> str:
    """SIGTERM, wait, and return what the server printed."""
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    if server.reader is not None:
        server.reader.join(timeout=10)
    if server.process.stdout is not None:
        server.process.stdout.close()
    return "".join(server.output)


@pytest.fixture(scope="session")
def live_server(settings: Settings) -> Iterator[LiveServer]:
    server = start_server(settings)
    yield server
    stop_server(server)
