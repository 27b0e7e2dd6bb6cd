"""Real ``schedlock-server serve`` processes: start, wait until ready, stop, and read what they printed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx

from app.settings import Settings
from bench.target import free_port as free_port  # the suite's servers listen where the benchmark's do
from tests.support.patience import PROBE, START_UP
from tests.support.tokens import Token, with_tokens


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


def wait_for(server: LiveServer, path: str = "/readyz", timeout: float = START_UP) -> None:
    """Wait until ``path`` answers 200; on failure stop the server and raise with what it printed. ``timeout``
    bounds a failure only (tests/support/patience.py): a loaded machine's start-up may take many times an idle
    one's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"server exited: {stop_server(server)}")
        try:
            if httpx.get(f"{server.url}{path}", timeout=PROBE).status_code == 200:
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


@contextlib.contextmanager
def serving_tokens(settings: Settings, *tokens: Token) -> Iterator[LiveServer]:
    """A server process that requires these API tokens (tests/support/tokens.py), stopped when the block ends."""
    configured = with_tokens(settings, *tokens).tokens
    assert configured is not None
    server = start_server(settings, {"SCHEDLOCK_TOKENS": configured})
    try:
        yield server
    finally:
        stop_server(server)
