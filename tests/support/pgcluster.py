"""A throwaway PostgreSQL cluster the fault tests may stop, freeze and restart without touching the shared one.

Debian's binaries (/usr/lib/postgresql/<v>/bin), run as the ``postgres`` user when the tests run as root
(Postgres refuses to run as root), on a free port on 127.0.0.1, with its data in a temporary directory.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from pydantic import SecretStr

from app.db import migrate
from app.settings import Settings
from tests.support.servers import free_port


def _bin_dir() -> Path:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if not found:
        raise RuntimeError("no PostgreSQL server binaries under /usr/lib/postgresql (apt-get install postgresql)")
    return Path(found[-1]).parent


#: Fast and fragile on purpose (the tests break clusters, they do not keep data); ``start`` may override any.
_SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "60",
}


class PgCluster:
    """``start``/``stop``/``restart`` with pg_ctl; ``freeze``/``thaw`` SIGSTOP/SIGCONT every server process;
    ``kill`` as a crashed host. ``initdb=False`` leaves the data directory empty, for ``basebackup``."""

    def __init__(self, *, initdb: bool = True) -> None:
        self.bin = _bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="schedlock-faults-"))
        self.root.chmod(0o755)
        self.data = self.root / "pgdata"
        self.log = self.root / "postgres.log"
        self.port = free_port()
        self._as_postgres = os.geteuid() == 0
        self.data.mkdir(mode=0o700)
        self.log.touch()
        if self._as_postgres:
            shutil.chown(self.data, "postgres", "postgres")
            shutil.chown(self.log, "postgres", "postgres")
        if initdb:
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self._as_postgres:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=60)

    def start(self, **settings: str) -> None:
        options = " ".join(
            [f"-p {self.port} -k {self.data}", *(f"-c {k}={v}" for k, v in {**_SETTINGS, **settings}.items())]
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w", "-t", "30", "start")

    def basebackup(self, primary: PgCluster, application_name: str, stream_port: int | None = None) -> None:
        """Make this (empty) cluster a streaming standby of ``primary``, known to it as ``application_name``
        (what synchronous_standby_names lists), streaming from ``stream_port`` (a proxy in front of the primary;
        default the primary's own port). Start it afterwards."""
        source = ["-h", "127.0.0.1", "-p", str(primary.port), "-U", "postgres"]
        self._run("pg_basebackup", *source, "-D", str(self.data), "--checkpoint=fast", "--no-sync")
        port = stream_port or primary.port
        conninfo = f"host=127.0.0.1 port={port} user=postgres application_name={application_name}"
        with (self.data / "postgresql.auto.conf").open("a") as conf:
            conf.write(f"primary_conninfo = '{conninfo}'\n")
        (self.data / "standby.signal").touch()
        if self._as_postgres:
            for path in (self.data / "postgresql.auto.conf", self.data / "standby.signal"):
                shutil.chown(path, "postgres", "postgres")

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "promote")

    def kill(self) -> None:
        """Every server process dies at once (SIGKILL), as when its host fails: nothing is flushed or said."""
        self._signal(signal.SIGKILL)
        with contextlib.suppress(FileNotFoundError):
            (self.data / "postmaster.pid").unlink()

    def process_pid(self, title: str) -> int:
        """The server process whose title starts with ``postgres: <title>`` (e.g. "walreceiver")."""
        for pid in self.pids():
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"postgres: {title}".encode()):
                    return pid
        raise LookupError(f"no {title} process")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def postmaster_pid(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split("\n", 1)[0])

    def pids(self) -> list[int]:
        """The postmaster and every process it started (backends, checkpointer, ...)."""
        parent = self.postmaster_pid()
        children = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == parent:
                children.append(int(stat.parent.name))
        return [parent, *children]

    @property
    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def freeze(self) -> None:
        """Every server process stops dead, sockets open: no answer, no RST, like a hung host."""
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def _signal(self, signum: int) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):  # a backend that just exited
                os.kill(pid, signum)

    def destroy(self) -> None:
        if self.running:
            self.thaw()
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            probe = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)], capture_output=True
            )
            if probe.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError("cluster did not become ready")


@contextlib.contextmanager
def migrated_cluster() -> Iterator[PgCluster]:
    """A started throwaway cluster with schedlock's table (``shedlock``) migrated in, destroyed afterwards."""
    cluster = PgCluster()
    try:
        cluster.start()
        migrate.upgrade(Settings(database_url=SecretStr(cluster.url), table="shedlock"))
        yield cluster
    finally:
        cluster.destroy()
