"""Fixtures for the client tests: clients on the live server process, a dead URL, fast keep-alive, the CLI."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

import schedlock._keepalive
from schedlock import AsyncLockClient, LockClient
from tests.conftest import LiveServer, free_port

#: The installed console script: the CLI is tested through its real entry point.
SCHEDLOCK = str(Path(sys.executable).with_name("schedlock"))


@pytest.fixture
def url(live_server: LiveServer) -> str:
    return live_server.url


@pytest.fixture
def dead_url() -> str:
    """A URL where nothing listens: connection refused at once."""
    return f"http://127.0.0.1:{free_port()}"


@pytest.fixture
def sync_client(url: str) -> Iterator[LockClient]:
    with LockClient(url, timeout=5) as client:
        yield client


@pytest.fixture
async def async_client(url: str) -> AsyncIterator[AsyncLockClient]:
    async with AsyncLockClient(url, timeout=5) as client:
        yield client


@pytest.fixture
def fast_keep_alive(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let keep-alive accept a 2s lock_at_most_for (extending every second), so tests need not wait minutes."""
    monkeypatch.setattr(schedlock._keepalive, "MINIMUM_LOCK_AT_MOST_FOR", timedelta(seconds=1))


def cli_env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    return {**env, "SCHEDLOCK_URL": url, **extra}


def cli(url: str, *args: str, timeout: float = 60, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the schedlock command to completion."""
    return subprocess.run(
        [SCHEDLOCK, *args], env=cli_env(url), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


Spawn = Callable[..., "subprocess.Popen[str]"]


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


def wait_until(predicate: Callable[[], object], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for(path: Path, timeout: float = 20) -> None:
    wait_until(path.exists, timeout, str(path))
