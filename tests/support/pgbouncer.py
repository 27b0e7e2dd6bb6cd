"""A real PgBouncer (Debian's ``pgbouncer`` package) in front of a test database, in a pool mode of the test's
choosing, with Debian's defaults otherwise: no ``ignore_startup_parameters``, so a startup packet carrying a
parameter PgBouncer does not track is refused, as on a stock install."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from tests.support.servers import free_port

PGBOUNCER = Path("/usr/sbin/pgbouncer")


@contextmanager
def pgbouncer(database_url: str, *, pool_mode: str = "transaction", pool_size: int = 2) -> Iterator[str]:
    """PgBouncer on a free loopback port, lending at most ``pool_size`` server connections per database and user
    (fewer than the service opens, so transactions of one client connection land on different ones). Yields
    ``database_url`` pointed at it (any database of the same server)."""
    if not PGBOUNCER.exists():
        raise RuntimeError("no /usr/sbin/pgbouncer: apt-get install pgbouncer (scripts/test installs it)")
    backend = urlsplit(database_url)
    root = Path(tempfile.mkdtemp(prefix="schedlock-pgbouncer-"))
    root.chmod(0o755)
    port = free_port()
    user = backend.username or "postgres"
    password = f" password={backend.password}" if backend.password else ""
    (root / "users.txt").write_text(f'"{user}" ""\n')
    (root / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"* = host={backend.hostname or '127.0.0.1'} port={backend.port or 5432} user={user}{password}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir = {root}\n"
        f"auth_type = trust\nauth_file = {root / 'users.txt'}\n"
        f"pool_mode = {pool_mode}\ndefault_pool_size = {pool_size}\nmax_client_conn = 200\n"
        f"logfile = {root / 'pgbouncer.log'}\n"
    )
    command = [str(PGBOUNCER), str(root / "pgbouncer.ini")]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root
        for path in root.iterdir():
            shutil.chown(path, "postgres", "postgres")
        shutil.chown(root, "postgres", "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_for_port(port, process, root / "pgbouncer.log")
        yield urlunsplit(backend._replace(netloc=f"{user}@127.0.0.1:{port}"))
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(root, ignore_errors=True)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {log.read_text() if log.exists() else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            assert time.monotonic() < deadline, f"pgbouncer did not listen: {log.read_text() if log.exists() else ''}"
            time.sleep(0.05)
