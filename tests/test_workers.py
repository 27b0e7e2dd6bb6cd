"""`serve --workers N` (SCHEDLOCK_WORKERS): N worker processes on one port, each with its own pool, started with
the settings `serve` resolved, and all stopped gracefully on SIGTERM."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.support.servers import LiveServer, free_port, server_env, spawn_server, stop_server, wait_for


def workers_of(server: LiveServer) -> list[psutil.Process]:
    """The worker processes of a served instance (uvicorn's spawned children; not multiprocessing's tracker)."""
    workers = []
    for child in psutil.Process(server.process.pid).children():
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):  # one that has just died
            if "spawn_main" in " ".join(child.cmdline()) and child.status() != psutil.STATUS_ZOMBIE:
                workers.append(child)
    return workers


def wait_for_pools(server: LiveServer, count: int, db_port: int, timeout: float = 30) -> list[psutil.Process]:
    """Wait until ``count`` workers each hold a connection to the database: their lifespans have run."""
    deadline = time.monotonic() + timeout
    while True:
        workers = workers_of(server)
        with_pool = [w for w in workers if _connected(w, db_port)]
        if len(workers) == count and len(with_pool) == count:
            return workers
        assert time.monotonic() < deadline, f"workers {workers}, with a pool {with_pool}: {''.join(server.output)}"
        time.sleep(0.1)


def _connected(worker: psutil.Process, db_port: int) -> bool:
    try:
        return any(c.raddr and c.raddr.port == db_port for c in worker.net_connections("tcp"))
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False


def gone(process: psutil.Process) -> bool:
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_settings_travel_to_workers_through_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings(
        database_url=SecretStr("postgresql://schedlock:s3cret@db.internal:5433/jobs"),
        table="jobs.shedlock",
        embedded_data_dir=Path("/var/lib/schedlock"),
        port=9001,
        workers=3,
        max_lock_duration=timedelta(hours=36, seconds=1),
        db_statement_timeout=2.5,
        log_level="DEBUG",
        tokens='{"tokens": [{"name": "a", "sha256": "00", "prefixes": ["x-"]}]}',
        allow_unauthenticated=True,
        allowed_origins=["https://jobs.example.com", "http://localhost:3000"],
        jobs_webhook_urls=["https://hooks.example.com/schedlock"],
        jobs_webhook_secret=SecretStr("w" * 32),
    )
    for key in list(os.environ):
        if key.startswith("SCHEDLOCK_"):
            monkeypatch.delenv(key)
    for key, value in settings.environ().items():
        monkeypatch.setenv(key, value)
    rebuilt = Settings()
    assert rebuilt == settings
    assert rebuilt.database_url is not None
    assert rebuilt.database_url.get_secret_value() == "postgresql://schedlock:s3cret@db.internal:5433/jobs"
    assert "SCHEDLOCK_TOKENS_FILE" not in settings.environ()  # unset stays unset
    # Every setting is covered: a new one of a type environ() cannot write fails here.
    assert {name for name, value in settings if value is None} == {"tokens_file"}


def test_two_workers_share_the_port_with_a_pool_each_and_stop_gracefully(settings: Settings, name: str) -> None:
    port = free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "2"]
    server = spawn_server(command, server_env(settings, {"SCHEDLOCK_POOL_MIN_SIZE": "1"}), port)
    try:
        wait_for(server)
        workers = wait_for_pools(server, 2, db_port=urlsplit(settings.asyncpg_dsn()).port or 5432)
        # Fresh connections land on either worker; every one of them is ready and shares the lock table.
        for _ in range(10):
            assert httpx.get(f"{server.url}/readyz", headers={"connection": "close"}).status_code == 200
        lease = httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
        assert lease.status_code == 200, lease.text
        held = httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
        assert held.status_code == 409
        released = httpx.post(f"{server.url}/v1/locks/{name}/release", json={"token": lease.json()["token"]})
        assert released.json()["released"] is True
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output
    assert all(gone(w) for w in workers), output
    for worker in workers:  # each shut down gracefully (uvicorn's last line of a worker that did)
        assert f"Finished server process [{worker.pid}]" in output, output
    assert "Traceback" not in output, output


def test_a_worker_that_dies_is_replaced(settings: Settings) -> None:
    port = free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "2"]
    server = spawn_server(command, server_env(settings, {"SCHEDLOCK_POOL_MIN_SIZE": "1"}), port)
    try:
        wait_for(server)
        db_port = urlsplit(settings.asyncpg_dsn()).port or 5432
        killed, survivor = wait_for_pools(server, 2, db_port)
        killed.kill()
        # kill() returns once SIGKILL is sent, not once it has taken effect: until then the worker still counts.
        deadline = time.monotonic() + 10
        while not gone(killed):
            assert time.monotonic() < deadline, f"{killed} outlived SIGKILL"
            time.sleep(0.05)
        replaced = [w for w in wait_for_pools(server, 2, db_port) if w.pid != survivor.pid]
        assert len(replaced) == 1 and replaced[0].pid != killed.pid
        assert httpx.get(f"{server.url}/readyz").status_code == 200
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output


def test_workers_must_be_at_least_one() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--workers", "0"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--workers: must be 1 or more" in done.stderr


@pytest.mark.system
def test_a_worker_that_fails_at_start_up_fails_the_server(settings: Settings) -> None:
    """A database that does not exist fails each worker's lifespan (uvicorn: "failed to start"): the supervisor
    stops, and so must `serve`, with the status one process exits with after a failed start-up (3), never 0."""
    missing = settings.model_copy(
        update={"database_url": SecretStr(settings.asyncpg_dsn().rsplit("/", 1)[0] + "/no_such_database")}
    )
    done = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--port", str(free_port()), "--workers", "2"],
        env=server_env(missing, {"SCHEDLOCK_POOL_MIN_SIZE": "1"}),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stdout + done.stderr
    assert "no_such_database" in done.stdout + done.stderr
