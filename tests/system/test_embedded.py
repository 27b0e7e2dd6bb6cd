"""`schedlock-server serve` with no database URL: a real embedded Postgres, migrated, stopped on shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from tests.support.servers import LiveServer, free_port, spawn_server, stop_server, wait_for


def _postmaster_pid(data_dir: Path) -> int | None:
    try:
        return int((data_dir / "postmaster.pid").read_text().split()[0])
    except (FileNotFoundError, IndexError, ValueError):
        return None


def _running(pid: int | None) -> bool:
    if pid is None:
        return False
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _describe(process: psutil.Process) -> str:
    try:
        return f"{process.pid}: {' '.join(process.cmdline())}"
    except psutil.Error:  # gone meanwhile
        return str(process.pid)


def _stopped(pid: int | None, timeout: float = 10) -> bool:
    """A stopped postmaster may linger a moment as a zombie until its new parent (init) reaps it."""
    deadline = time.monotonic() + timeout
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _running(pid)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    # Under /tmp and world-traversable: as root, the embedded Postgres runs as the `pgserver` system user.
    tmp = Path(tempfile.mkdtemp(prefix="schedlock-embedded-"))
    tmp.chmod(0o755)
    yield tmp / "pgdata"
    pid = _postmaster_pid(tmp / "pgdata")
    if _running(pid):
        assert pid is not None
        os.kill(pid, signal.SIGTERM)
    shutil.rmtree(tmp, ignore_errors=True)


def _serve(data_dir: Path, port: int, workers: int = 1) -> LiveServer:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env["SCHEDLOCK_EMBEDDED_DATA_DIR"] = str(data_dir)
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", str(workers)]
    server = spawn_server(command, env, port)
    wait_for(server)
    return server


@pytest.mark.parametrize("workers", [1, 2])
def test_serve_runs_on_the_embedded_database_and_stops_it(data_dir: Path, workers: int) -> None:
    server = _serve(data_dir, free_port(), workers)
    try:
        r = httpx.post(f"{server.url}/v1/locks/nightly/acquire", json={"lock_at_most_for": "10m"})
        assert r.status_code == 200, r.text
        again = httpx.post(f"{server.url}/v1/locks/nightly/acquire", json={"lock_at_most_for": "10m"})
        assert again.status_code == 409, "every worker uses the one embedded database"
        postmaster = _postmaster_pid(data_dir)
        assert _running(postmaster)
        children = psutil.Process(server.process.pid).children()
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output
    # Each child is gone within moments: multiprocessing's resource tracker leaves when it sees the supervisor's end
    # of its pipe close, a few milliseconds after the supervisor itself (seen once in ~10 full runs).
    left = [_describe(child) for child in children if not _stopped(child.pid, timeout=5)]
    assert not left, f"no worker outlives the server: {left}"
    assert _stopped(postmaster), "the embedded Postgres must stop with the server"
    assert "embedded Postgres stopped" in output


def test_a_killed_server_leaves_postgres_that_the_next_start_adopts_and_stops(data_dir: Path) -> None:
    port = free_port()
    server = _serve(data_dir, port)
    lease = httpx.post(f"{server.url}/v1/locks/kept/acquire", json={"lock_at_most_for": "1h"}).json()
    orphan = _postmaster_pid(data_dir)
    server.process.kill()
    stop_server(server)
    assert _running(orphan), "a killed parent leaves the postmaster running"

    server = _serve(data_dir, port)
    try:
        assert _postmaster_pid(data_dir) == orphan, "the orphan is adopted, not duplicated"
        r = httpx.post(f"{server.url}/v1/locks/kept/acquire", json={"lock_at_most_for": "1h"})
        assert r.status_code == 409, "the lease taken before the crash is still held"
        assert r.json()["error"]["locked_by"] == lease["locked_by"]
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output
    assert _stopped(orphan)
