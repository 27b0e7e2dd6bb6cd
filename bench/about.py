"""What a run was measured on and with: the machine, the code, and configuration safe to write down."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from bench import target


def machine(database_url: str) -> dict[str, Any]:
    """Cores, CPU model, memory, kernel, Python and Postgres versions, and the load average at the start."""
    cpu = "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    with open("/proc/meminfo") as f:
        mem_gb = int(f.readline().split()[1]) / 1024 / 1024
    cores = os.cpu_count() or 0
    pg = target.postgres_version(database_url)
    return {
        "description": f"{cores} cores ({cpu}), {mem_gb:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}, PostgreSQL {pg}",
        "cores": cores,
        "cpu": cpu,
        "memory_gib": round(mem_gb, 1),
        "python": platform.python_version(),
        "postgres": pg,
        "loadavg_start": list(os.getloadavg()),
    }


#: What a run measures: the server, the benchmark, and the versions they run with. An edit elsewhere (the docs, the
#: tests) changes no figure, so it does not mark the run as made on uncommitted code.
MEASURED = ("app", "bench", "pyproject.toml", "requirements.lock")


def code(root: Path = target.ROOT) -> dict[str, Any]:
    """The commit measured, and whether what it measures (MEASURED) had uncommitted changes."""

    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return out.stdout.strip()

    dirty = git("status", "--porcelain", "--", *MEASURED)
    return {"commit": git("rev-parse", "--short", "HEAD") or None, "dirty": bool(dirty)}


def redacted_env(env: dict[str, str]) -> dict[str, str]:
    """The server's environment without the database password."""
    out = dict(env)
    if "SCHEDLOCK_DATABASE_URL" in out:
        out["SCHEDLOCK_DATABASE_URL"] = redact_url(out["SCHEDLOCK_DATABASE_URL"])
    return out


def redact_url(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    creds, at, host = rest.rpartition("@")
    if at and ":" in creds:
        creds = creds.split(":", 1)[0] + ":***"
    return f"{scheme}{sep}{creds}{at}{host}"


def now() -> str:
    """UTC, to the second."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
