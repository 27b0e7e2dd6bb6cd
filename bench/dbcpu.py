"""The CPU the database spent on a phase: the Postgres backends serving one client process's connections (its
descendants' too: a server's workers).

The Postgres under test is shared (other processes, other users of the cluster), so its whole CPU would not be the
benchmark's. A backend is the benchmark's when its client's TCP port is one of the measured process's sockets:
ports from ``/proc/<pid>/net/tcp*`` and ``/proc/<pid>/fd``, backends from ``pg_stat_activity``; or, over a Unix
socket (the embedded cluster listens on one only), when it holds the other end of one of those sockets
(``ss -xp``). Backends' CPU comes from ``/proc/<backend>/stat``, so Postgres must run on this machine and be
visible here (it is when the harness starts the rest; otherwise the figure is simply absent). Not counted:
Postgres's background processes (WAL writer, checkpointer, autovacuum), which serve every database of the
cluster, and a backend that exits mid-phase.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess

from bench import target


def socket_inodes(pid: int) -> set[str]:
    """Inodes of the sockets of the process and its descendants (a server's workers)."""
    inodes = set()
    for member in target.process_tree(pid):
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{member}/fd"):
                with contextlib.suppress(OSError):
                    link = os.readlink(f"/proc/{member}/fd/{fd}")
                    if link.startswith("socket:["):
                        inodes.add(link[8:-1])
    return inodes


def socket_ports(pid: int, inodes: set[str]) -> set[int]:
    """Local TCP ports of those of the process's sockets (``inodes``) that are TCP, IPv4 and IPv6."""
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


#: A line of ``ss -xpn``: a Unix socket bound to a Postgres socket file, its inode, its peer's inode, its process.
_UNIX_BACKEND = re.compile(r"\.s\.PGSQL\.\d+\s+\d+\s+\S+\s+(\d+)\s+users:\(\(\"[^\"]*\",pid=(\d+),")


def unix_backends(inodes: set[str]) -> list[int]:
    """Pids of the Postgres backends at the other end of these Unix sockets."""
    try:
        listing = subprocess.run(["ss", "-xpn"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return sorted({int(m[2]) for m in _UNIX_BACKEND.finditer(listing) if m[1] in inodes})


def backends_of(database_url: str, pid: int) -> list[int]:
    """Pids of the Postgres backends whose client is process ``pid`` (over TCP, or a Unix socket)."""
    inodes = socket_inodes(pid)
    ports = sorted(socket_ports(pid, inodes))  # a server's own (its listening socket, its callers') are among them
    over_unix = unix_backends(inodes)
    if not ports:
        return over_unix
    rows = target.run_sql(
        database_url,
        "SELECT pid FROM pg_stat_activity WHERE client_port IN ({}) AND pid <> pg_backend_pid()".format(
            ", ".join(str(p) for p in ports)
        ),
    )
    return sorted({int(r["pid"]) for r in rows} | set(over_unix))


def cpu_of(pids: list[int]) -> dict[int, float]:
    """CPU seconds used so far by each of these processes that is still there."""
    out = {}
    for pid in pids:
        with contextlib.suppress(OSError):  # gone, or not on this machine
            out[pid] = target.process_cpu_s(pid)
    return out


class BackendsCpu:
    """Measures the CPU of the backends serving process ``pid`` between enter and exit (None if none found).

    Backends opened during the phase count from their start; the lookup queries run on a connection of their own,
    outside the measured process, so they are not counted."""

    def __init__(self, database_url: str, pid: int | None) -> None:
        self._url = database_url
        self._pid = pid
        self._before: dict[int, float] = {}
        self.cpu_s: float | None = None

    def __enter__(self) -> BackendsCpu:
        if self._pid is not None:
            self._before = cpu_of(backends_of(self._url, self._pid))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pid is None or exc[0] is not None:
            return
        after = cpu_of(backends_of(self._url, self._pid))
        if after:
            self.cpu_s = sum(cpu - self._before.get(pid, 0.0) for pid, cpu in after.items())
