"""Fixtures for the client tests: clients on the live server process (its `url` and a `dead_url` are the root
conftest's), fast keep-alive, the CLI."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta

import pytest

import schedlock._keepalive as keepalive
from schedlock import AsyncLockClient, LockClient
from tests.support.cli import Spawn, cli_env
from tests.support.patience import ANSWER


@pytest.fixture
def sync_client(url: str) -> Iterator[LockClient]:
    with LockClient(url, timeout=ANSWER) as client:
        yield client


@pytest.fixture
async def async_client(url: str) -> AsyncIterator[AsyncLockClient]:
    async with AsyncLockClient(url, timeout=ANSWER) as client:
        yield client


@pytest.fixture
def fast_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let keep-alive accept a 2s lock_at_most_for (extending every second), so tests need not wait minutes."""
    monkeypatch.setattr(keepalive, "MINIMUM_LOCK_AT_MOST_FOR", timedelta(seconds=1))


@pytest.fixture
def spawn(url: str) -> Iterator[Spawn]:
    """Start a process (``spawn(argv, url=...)``) with SCHEDLOCK_URL set; whatever still runs at the end is
    stopped (SIGTERM first, which schedlock forwards to its command) and its pipes closed."""
    started: list[subprocess.Popen[str]] = []

    def start(argv: Sequence[str], url_: str | None = None) -> subprocess.Popen[str]:
        process = subprocess.Popen(
            list(argv), env=cli_env(url_ or url), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.terminate()
            try:
                process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        process.communicate()
