"""Real ``schedlock-server serve`` processes: start, wait until ready, stop, and read what they printed."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import httpx

from app.settings import Settings


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
