"""Debian's PgBouncer in transaction pooling mode, between one server's link and Postgres (``--pgbouncer``).

PgBouncer 1.18 in that mode keeps no prepared statements across transactions: a server whose driver caches them
(asyncpg does, by default) sees "prepared statement does not exist" errors unless the cache is off. Start-up
parameters PgBouncer does not track (``statement_timeout``) must be listed in ``ignore_startup_parameters`` or it
refuses the connection; listed, they are dropped, not applied.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.support.patience import SETTLE
from tests.support.servers import free_port

BINARY = "/usr/sbin/pgbouncer"


class PgBouncer:
    def __init__(self, target_port: int, dbname: str = "postgres") -> None:
        if not Path(BINARY).exists():
            raise RuntimeError("pgbouncer is not installed: apt-get install pgbouncer (./scripts/test does)")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="schedlock-pgbouncer-"))
        self.dir.chmod(0o755)
        (self.dir / "users.txt").write_text('"postgres" ""\n')
        (self.dir / "pgbouncer.ini").write_text(
            f"""[databases]
{dbname} = host=127.0.0.1 port={target_port} dbname={dbname} user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/users.txt
pool_mode = transaction
max_client_conn = 200
default_pool_size = 20
ignore_startup_parameters = extra_float_digits,statement_timeout
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
"""
        )
        command = [BINARY, str(self.dir / "pgbouncer.ini")]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            for path in self.dir.iterdir():
                shutil.chown(path, "postgres", "postgres")
            shutil.chown(self.dir, "postgres", "postgres")
            command = ["runuser", "-u", "postgres", "--", *command]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SETTLE
        while not _listening(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"pgbouncer did not start: {self.log()}")
            time.sleep(0.05)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text()[-2000:] if path.exists() else ""

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0
