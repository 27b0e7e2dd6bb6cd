"""`schedlock-server serve` with no database URL: a real embedded Postgres, migrated, stopped on shutdown."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def _stopped(pid: int | None, timeout: float = 10) -> bool:
    """A stopped postmaster may linger a moment as a zombie until its new parent (init) reaps it."""
    deadline = time.monotonic() + timeout
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _running(pid)


def _wait_ready(base: str, proc: subprocess.Popen[str], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError("server did not become ready")


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


def _serve(data_dir: Path, port: int) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env["SCHEDLOCK_EMBEDDED_DATA_DIR"] = str(data_dir)
    return subprocess.Popen(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_serve_runs_on_the_embedded_database_and_stops_it(data_dir: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(data_dir, port)
    try:
        _wait_ready(base, proc)
        r = httpx.post(f"{base}/v1/locks/nightly/acquire", json={"lock_at_most_for": "10m"})
        assert r.status_code == 200, r.text
        postmaster = _postmaster_pid(data_dir)
        assert _running(postmaster)
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert _stopped(postmaster), "the embedded Postgres must stop with the server"
    assert "embedded Postgres stopped" in output


def test_a_killed_server_leaves_postgres_that_the_next_start_adopts_and_stops(data_dir: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    proc = _serve(data_dir, port)
    _wait_ready(base, proc)
    lease = httpx.post(f"{base}/v1/locks/kept/acquire", json={"lock_at_most_for": "1h"}).json()
    orphan = _postmaster_pid(data_dir)
    proc.kill()
    proc.communicate(timeout=10)
    assert _running(orphan), "a killed parent leaves the postmaster running"

    proc = _serve(data_dir, port)
    try:
        _wait_ready(base, proc)
        assert _postmaster_pid(data_dir) == orphan, "the orphan is adopted, not duplicated"
        r = httpx.post(f"{base}/v1/locks/kept/acquire", json={"lock_at_most_for": "1h"})
        assert r.status_code == 409, "the lease taken before the crash is still held"
        assert r.json()["error"]["locked_by"] == lease["locked_by"]
    finally:
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, output
    assert _stopped(orphan)
