"""What the benchmark runs against: a schedlock server process on a table of its own, and that table.

By default the harness creates a schema of its own on the database, starts ``schedlock-server serve --migrate``
on it, and drops the schema at the end. Pointed at an existing server (``--url``), it only adds rows named
``<prefix>...`` to that server's table, and never deletes them (Java ShedLock nodes may share the table).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import asyncpg

from app.auth.tokens import hash_secret

ROOT = Path(__file__).resolve().parent.parent
_PAGE = os.sysconf("SC_PAGE_SIZE")
_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    """A schedlock server: its base URL and, when known, its process id (for RSS and CPU)."""

    url: str
    pid: int | None
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None
    env: dict[str, str] = field(default_factory=dict)


def bench_token(prefixes: list[str]) -> tuple[str, str]:
    """A new API token for the benchmark's names: (the secret, the server's SCHEDLOCK_TOKENS holding its hash)."""
    secret = secrets.token_urlsafe(32)
    entry = {"name": "bench", "sha256": hash_secret(secret), "prefixes": prefixes, "access": "read-write"}
    return secret, json.dumps({"tokens": [entry]})


def free_port() -> int:
    """A loopback port free now, picked at random below the kernel's ephemeral range: a port the kernel hands out
    (``bind(0)``) can be taken by any outgoing connection's local end before the server binds it, as a Patroni
    node's REST API once found (``Couldn't start a service on '127.0.0.1:45193'``)."""
    low = _ephemeral_low()
    for _ in range(200):
        port = _RANDOM.randrange(_LOWEST, low) if low > _LOWEST + 1000 else 0
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise RuntimeError(f"no free loopback port found between {_LOWEST} and {low}")


#: Ports below this are left to services a machine may run (and below 1024 need privileges).
_LOWEST = 10_000
#: Its own generator: a test that seeds the global one (hypothesis does) must not make every run pick the same.
_RANDOM = random.Random()


def _ephemeral_low() -> int:
    """The lowest port the kernel picks for outgoing connections (Linux's default range is 32768-60999)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def start_server(
    database_url: str, table: str, extra_env: dict[str, str], log: IO[bytes], command: list[str] | None = None
) -> Server:
    """``python -m app serve --migrate`` on a free port; returns once /readyz answers 200.

    ``command`` runs another server instead; ``{port}`` and ``{python}`` in it are replaced by the port and this
    interpreter (``bench.servers`` measures other ASGI servers serving the same app)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    server_env = {"SCHEDLOCK_DATABASE_URL": database_url, "SCHEDLOCK_TABLE": table, **extra_env}
    command = command or ["{python}", "-m", "app", "serve", "--migrate", "--port", "{port}"]
    process = subprocess.Popen(
        [part.format(port=port, python=sys.executable) for part in command],
        env={**env, **server_env},
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    server = Server(f"http://127.0.0.1:{port}", process.pid, process, log, server_env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}; see {log.name}")
        try:
            with urllib.request.urlopen(f"{server.url}/readyz", timeout=1) as response:
                if response.status == 200:
                    return server
        except (OSError, urllib.error.URLError):
            pass
        time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"the server did not become ready; see {log.name}")


def stop_server(server: Server) -> None:
    if server.process is not None:
        terminate(server.process)


def terminate(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM, and SIGKILL if the process has not exited 30 s later."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def machine_busy_s() -> float:
    """CPU seconds every core of the machine has been busy since boot (/proc/stat: all but idle and iowait)."""
    with open("/proc/stat") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


class ProcessWatch:
    """Samples a process's RSS while a phase runs (largest value kept) and measures the CPU it used.

    "The process" is the process and its descendants (``process_tree``): a server with workers is a supervisor
    and its worker processes, and all of them count."""

    def __init__(self, pid: int | None, every: float = 0.1) -> None:
        self._pid = pid
        self._every = every
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._cpu0: dict[int, float] = {}
        self.rss_mb: float | None = None
        self.cpu_s: float | None = None
        #: CPU seconds the whole machine was busy meanwhile (every process: load generator, server, Postgres).
        self.machine_cpu_s: float | None = None
        self._machine0 = 0.0

    def __enter__(self) -> ProcessWatch:
        self._machine0 = machine_busy_s()
        if self._pid is not None:
            self._cpu0 = tree_cpu_s(self._pid)
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.machine_cpu_s = machine_busy_s() - self._machine0
        if self._pid is None or self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self.cpu_s = sum(cpu - self._cpu0.get(pid, 0.0) for pid, cpu in tree_cpu_s(self._pid).items())

    def _sample(self) -> None:
        assert self._pid is not None
        while True:
            rss = tree_rss_mb(self._pid)
            self.rss_mb = max(self.rss_mb or 0.0, rss)
            if self._stop.wait(self._every):
                return


def process_tree(pid: int) -> list[int]:
    """The process and all its descendants that exist now, parents first (from /proc)."""
    found = [pid]
    for parent in found:  # grows while it is walked
        with contextlib.suppress(OSError), os.scandir(f"/proc/{parent}/task") as tasks:
            for task in tasks:
                with contextlib.suppress(OSError), open(f"{task.path}/children") as f:
                    found.extend(int(child) for child in f.read().split())
    return found


def tree_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds used so far by each process of the tree (processes that end meanwhile are left out)."""
    out = {}
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            out[member] = process_cpu_s(member)
    return out


def tree_rss_mb(pid: int) -> float:
    """RSS of the whole tree in MB (pages shared between processes count once per process)."""
    total = 0.0
    for member in process_tree(pid):
        with contextlib.suppress(OSError):
            total += process_rss_mb(member)
    return total


def process_rss_mb(pid: int) -> float:
    """Resident set size in MB (10^6 bytes), from /proc."""
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 1e6


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds the process has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def run_sql(database_url: str, *statements: str) -> list[Any]:
    """Run statements on one short-lived connection; returns the rows of the last one."""

    async def go() -> list[Any]:
        conn = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
        try:
            rows: list[Any] = []
            for sql in statements:
                rows = list(await conn.fetch(sql))
            return rows
        finally:
            await conn.close()

    return asyncio.run(go())


def seed_list_rows(database_url: str, table: str, rows: int) -> None:
    """``rows`` lock rows named list-000000..., 1% of them held for a day, as Java ShedLock would write them."""
    now = "timezone('utc', CURRENT_TIMESTAMP)"
    run_sql(
        database_url,
        f"""INSERT INTO {table} (name, lock_until, locked_at, locked_by)
            SELECT 'list-' || lpad(i::text, 6, '0'),
                   CASE WHEN i % 100 = 0 THEN {now} + interval '1 day' ELSE {now} - interval '1 hour' END,
                   {now} - interval '2 hours', 'bench-seed-host'
            FROM generate_series(0, {rows - 1}) AS i
            ON CONFLICT (name) DO NOTHING""",
        f"ANALYZE {table}",
    )


def expire_bench_leases(database_url: str, table: str, prefix: str) -> None:
    """End the leases a phase left behind (wrk stops mid-cycle), so the next phase starts on free names.

    Only ``lock_until`` moves, as an expiry would; rows are never deleted."""
    now = "timezone('utc', CURRENT_TIMESTAMP)"
    run_sql(
        database_url,
        f"UPDATE {table} SET lock_until = {now} WHERE name LIKE '{prefix}%' AND lock_until > {now}",
    )


def table_rows(database_url: str, table: str) -> int:
    return int(run_sql(database_url, f"SELECT count(*) AS n FROM {table}")[0]["n"])


def postgres_version(database_url: str) -> str:
    return str(run_sql(database_url, "SHOW server_version")[0][0])


def drop_schema(database_url: str, schema: str) -> None:
    run_sql(database_url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
