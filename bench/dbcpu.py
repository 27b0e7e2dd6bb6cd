"""The CPU the database spent on a phase: the Postgres backends serving one client process's connections.

The Postgres under test is shared (other processes, other users of the cluster), so its whole CPU would not be the
benchmark's. A backend is the benchmark's when its client's TCP port is one of the measured process's sockets:
ports from ``/proc/<pid>/net/tcp*`` and ``/proc/<pid>/fd``, backends from ``pg_stat_activity``. Backends' CPU comes
from ``/proc/<backend>/stat``, so Postgres must run on this machine and be visible here (it is when the harness
starts the rest; otherwise the figure is simply absent). Not counted: Postgres's background processes (WAL
writer, checkpointer, autovacuum), which serve every database of the cluster, and a backend that exits mid-phase.
"""

from __future__ import annotations

import contextlib
import os

from bench import target


def socket_ports(pid: int) -> set[int]:
    """Local TCP ports of the process's sockets (IPv4 and IPv6)."""
    inodes = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def backends_of(database_url: str, pid: int) -> list[int]:
    """Pids of the Postgres backends whose client is process ``pid`` (over TCP)."""
    ports = sorted(socket_ports(pid))
    if not ports:
        return []
    rows = target.run_sql(
        database_url,
        "SELECT pid FROM pg_stat_activity WHERE client_port IN ({}) AND pid <> pg_backend_pid()".format(
            ", ".join(str(p) for p in ports)
        ),
    )
    return [int(r["pid"]) for r in rows]


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
