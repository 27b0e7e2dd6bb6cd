"""`serve --workers N` (SCHEDLOCK_WORKERS): N worker processes on one port, each with its own pool, started with
the settings `serve` resolved, all stopped gracefully on SIGTERM, and one `/metrics` for all of them."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from prometheus_client.mmap_dict import MmapedDict
from pydantic import SecretStr

from app.settings import Settings
from tests.support.metrics import Samples, parse, value
from tests.support.patience import SETTLE
from tests.support.servers import (
    LiveServer,
    free_port,
    server_env,
    spawn_server,
    start_server,
    stop_server,
    wait_for,
)


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
    for key, setting in settings.environ().items():
        monkeypatch.setenv(key, setting)
    rebuilt = Settings()
    assert rebuilt == settings
    assert rebuilt.database_url is not None
    assert rebuilt.database_url.get_secret_value() == "postgresql://schedlock:s3cret@db.internal:5433/jobs"
    assert "SCHEDLOCK_TOKENS_FILE" not in settings.environ()  # unset stays unset
    # Every setting is covered: a new one of a type environ() cannot write fails here.
    assert {name for name, value in settings if value is None} == {"tokens_file"}


def start_two_workers(settings: Settings, env: dict[str, str] | None = None) -> tuple[LiveServer, int]:
    """``serve --workers 2`` (a pool of at least one connection each) on a free port, once it answers: the server,
    and the port of its database (to find the workers by their connections)."""
    port = free_port()
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--workers", "2"]
    server = spawn_server(command, server_env(settings, {"SCHEDLOCK_POOL_MIN_SIZE": "1", **(env or {})}), port)
    try:
        wait_for(server)
    except BaseException:
        stop_server(server)
        raise
    return server, urlsplit(settings.asyncpg_dsn()).port or 5432


def test_two_workers_share_the_port_with_a_pool_each_and_stop_gracefully(settings: Settings, name: str) -> None:
    server, db_port = start_two_workers(settings)
    try:
        workers = wait_for_pools(server, 2, db_port)
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
    server, db_port = start_two_workers(settings)
    try:
        killed, survivor = wait_for_pools(server, 2, db_port)
        killed.kill()
        # kill() returns once SIGKILL is sent, not once it has taken effect: until then the worker still counts.
        deadline = time.monotonic() + SETTLE
        while not gone(killed):
            assert time.monotonic() < deadline, f"{killed} outlived SIGKILL"
            time.sleep(0.05)
        replaced = [w for w in wait_for_pools(server, 2, db_port) if w.pid != survivor.pid]
        assert len(replaced) == 1 and replaced[0].pid != killed.pid
        assert httpx.get(f"{server.url}/readyz").status_code == 200
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output


def test_sighup_replaces_every_worker(settings: Settings) -> None:
    """SIGHUP restarts the workers (each reads its configuration again): new processes, still one server."""
    server, db_port = start_two_workers(settings)
    try:
        before = {w.pid for w in wait_for_pools(server, 2, db_port)}
        server.process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 60
        while before & {w.pid for w in workers_of(server)} or len(wait_for_pools(server, 2, db_port)) != 2:
            assert server.process.poll() is None, "the server outlives SIGHUP"
            assert time.monotonic() < deadline, f"still {workers_of(server)} of {before}"
            time.sleep(0.1)
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


def metrics_dir_of(workers: list[psutil.Process]) -> Path:
    """The directory the workers share their metrics in (the supervisor names it in their environment)."""
    (found,) = {w.environ()["PROMETHEUS_MULTIPROC_DIR"] for w in workers}
    return Path(found)


def counted_by(metrics_dir: Path, pid: int, name: str, **labels: str) -> float:
    """One worker's own count of a counter, read from its file (what the scrapes add up)."""
    path = metrics_dir / f"counter_{pid}.db"
    if not path.exists():
        return 0.0
    total = 0.0
    for key, count, _, _ in MmapedDict.read_all_values_from_file(str(path)):  # type: ignore[no-untyped-call]
        _, sample, sample_labels, _ = json.loads(key)
        if sample == name and sample_labels == labels:
            total += count
    return total


def acquired_by(metrics_dir: Path, pid: int) -> float:
    labels = {"operation": "acquire", "outcome": "acquired"}
    return counted_by(metrics_dir, pid, "schedlock_lock_operations_total", **labels)


def settle(metrics_dir: Path, workers: list[psutil.Process], operation: str, result: str, expected: float) -> None:
    """Wait until the workers' files hold ``expected`` outcomes: a worker counts a request just after it has sent
    the response, so a scrape (or a kill) right after the last answer could come before the last count."""
    labels = {"operation": operation, "outcome": result}
    deadline = time.monotonic() + SETTLE
    while sum(counted_by(metrics_dir, w.pid, "schedlock_lock_operations_total", **labels) for w in workers) != expected:
        assert time.monotonic() < deadline, f"{operation} {result}: not {expected}"
        time.sleep(0.01)


def scrape(server: LiveServer) -> Samples:
    """One scrape on a connection of its own, so that it may reach either worker."""
    r = httpx.get(f"{server.url}/metrics", headers={"connection": "close"})
    assert r.status_code == 200, r.text
    return parse(r.text)


def take_and_give_back(server: LiveServer, prefix: str, count: int) -> None:
    """``count`` acquires and releases of new names, each on a connection of its own."""
    for i in range(count):
        name = f"{prefix}-{i}"
        lease = httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
        assert lease.status_code == 200, lease.text
        released = httpx.post(f"{server.url}/v1/locks/{name}/release", json={"token": lease.json()["token"]})
        assert released.status_code == 200, released.text


def outcome(samples: Samples, operation: str, result: str) -> float:
    return value(samples, "schedlock_lock_operations_total", operation=operation, outcome=result)


def test_metrics_answer_for_the_whole_server_on_every_scrape(settings: Settings, name: str) -> None:
    server, db_port = start_two_workers(settings, {"SCHEDLOCK_HISTORY_FLUSH_INTERVAL": "0.2"})
    try:
        workers = wait_for_pools(server, 2, db_port)
        metrics_dir = metrics_dir_of(workers)
        # Private to the server's user: no other user can read the files or plant some.
        mode = metrics_dir.stat()
        assert stat.S_IMODE(mode.st_mode) == 0o700 and mode.st_uid == os.getuid()

        # Acquires and releases, until each worker has served some (each one's own file says how many).
        sent = 0
        while not all(acquired_by(metrics_dir, w.pid) for w in workers):
            assert sent < 400, f"one worker took every connection: {[acquired_by(metrics_dir, w.pid) for w in workers]}"
            take_and_give_back(server, f"{name}-{sent}", 20)
            sent += 20
        settle(metrics_dir, workers, "acquire", "acquired", sent)
        # Refusals of one held lock: what the dashboard's skip count (the lock's page) is made of.
        lease = httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "5m"})
        assert lease.status_code == 200, lease.text
        refused = 15
        for _ in range(refused):
            again = httpx.post(f"{server.url}/v1/locks/{name}/acquire", json={"lock_at_most_for": "5m"})
            assert again.status_code == 409
        settle(metrics_dir, workers, "release", "released", sent)
        settle(metrics_dir, workers, "acquire", "held", refused)
        settle(metrics_dir, workers, "acquire", "acquired", sent + 1)

        # Every scrape, whichever worker answers it, counts all of it; scrape until both workers have answered.
        scrapes = 0
        while not all(
            counted_by(
                metrics_dir, w.pid, "schedlock_http_requests_total", method="GET", route="/metrics", status="200"
            )
            for w in workers
        ):
            assert scrapes < 100, "one worker answered every scrape"
            samples = scrape(server)
            scrapes += 1
            assert outcome(samples, "acquire", "acquired") == sent + 1
            assert outcome(samples, "release", "released") == sent
            assert outcome(samples, "acquire", "held") == refused
            route = "/v1/locks/{name}/acquire"
            count = value(samples, "schedlock_http_request_duration_seconds_count", method="POST", route=route)
            assert count == sent + 1 + refused
            # The pools of both workers, summed (each writes its own figures every second).
            assert value(samples, "schedlock_db_pool_max_connections") == 2 * settings.pool_max_size
            open_now = sum(value(samples, "schedlock_db_pool_connections", state=s) for s in ("busy", "idle"))
            assert 2 <= open_now <= 2 * settings.pool_max_size
            assert value(samples, "schedlock_build_info", version=settings_version()) == 1  # one series, no pid
            assert value(samples, "process_cpu_seconds_total") > 0
            assert value(samples, "process_resident_memory_bytes") > 0
            assert not [key for key in samples if ("pid", str(workers[0].pid)) in key[1]]

        # The dashboard's count of skipped attempts (the lock's page reads .../skips) is what /metrics counted.
        deadline = time.monotonic() + SETTLE
        while True:
            skips = httpx.get(f"{server.url}/v1/locks/{name}/skips", params={"hours": 24}).json()
            if skips["total"] == refused or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert skips["total"] == refused == outcome(scrape(server), "acquire", "held")
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output
    assert not metrics_dir.exists(), "the supervisor removes the metrics directory when it exits"


def settings_version() -> str:
    from app import __version__

    return __version__


@pytest.mark.system
def test_a_replaced_worker_keeps_the_counters_and_leaves_the_gauges(settings: Settings, name: str) -> None:
    """Counters never go back when a worker dies (its file stays, and is still added up); its pool leaves the
    gauges once the supervisor has seen it go, and its replacement's joins them."""
    server, db_port = start_two_workers(settings)
    try:
        workers = wait_for_pools(server, 2, db_port)
        metrics_dir = metrics_dir_of(workers)
        sent = 0
        while not all(acquired_by(metrics_dir, w.pid) for w in workers):
            assert sent < 400, "one worker took every connection"
            take_and_give_back(server, f"{name}-{sent}", 20)
            sent += 20
        settle(metrics_dir, workers, "release", "released", sent)
        killed, survivor = workers
        killed.kill()
        deadline = time.monotonic() + SETTLE
        while not gone(killed):
            assert time.monotonic() < deadline, f"{killed} outlived SIGKILL"
            time.sleep(0.05)
        # Before and while it is replaced, every scrape still counts what the dead worker served.
        while len(workers_of(server)) < 2 or len(wait_for_pools(server, 2, db_port)) < 2:
            assert outcome(scrape(server), "acquire", "acquired") == sent
        (replacement,) = [w for w in wait_for_pools(server, 2, db_port) if w.pid != survivor.pid]
        assert replacement.pid != killed.pid
        take_and_give_back(server, f"{name}-after", 10)
        settle(metrics_dir, [replacement, survivor, killed], "release", "released", sent + 10)
        deadline = time.monotonic() + SETTLE
        for _ in range(10):
            samples = scrape(server)
            assert outcome(samples, "acquire", "acquired") == sent + 10
            assert outcome(samples, "release", "released") == sent + 10
            # Two live pools: the dead worker's left the sum (the replacement writes its own within a second).
            while value(samples, "schedlock_db_pool_max_connections") != 2 * settings.pool_max_size:
                assert time.monotonic() < deadline, value(samples, "schedlock_db_pool_max_connections")
                time.sleep(0.2)
                samples = scrape(server)
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output


def test_one_worker_keeps_its_metrics_in_memory(settings: Settings, name: str, tmp_path: Path) -> None:
    """One process is the cheap path: a PROMETHEUS_MULTIPROC_DIR in its environment is not used (its files could
    be another server's), and the process's own collectors (python_gc_*) are there."""
    inherited = tmp_path / "someone-elses"
    inherited.mkdir()
    server = start_server(settings, {"PROMETHEUS_MULTIPROC_DIR": str(inherited)})
    try:
        take_and_give_back(server, name, 3)
        samples = scrape(server)
        assert outcome(samples, "acquire", "acquired") == 3
        assert value(samples, "python_gc_collections_total", generation="0") >= 0
        assert any(key[0].startswith("python_gc_") for key in samples)
    finally:
        output = stop_server(server)
    assert server.process.returncode == 0, output
    assert list(inherited.iterdir()) == []
