"""The HTTP load generator: wrk (Debian package ``wrk``) with ``wrk_script.lua``, one connection per thread.

wrk rather than an async httpx client because it costs the shared two cores far less per request (see
``python -m bench.loadgen_cost`` and docs/performance.md), so more of the machine is left to the
server and Postgres being measured.
"""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from bench.stats import Phase

SCRIPT = Path(__file__).with_name("wrk_script.lua")


@dataclass(frozen=True)
class Load:
    """One load pattern. ``mode``: "own" (each client cycles over its own names), "random" (clients pick names
    at random: contended when names are few) or "get" (GET ``path``). ``rate`` is per client; 0 = closed loop."""

    mode: str
    clients: int
    seconds: int
    names: int = 1
    prefix: str = "bench-"
    rate: float = 0.0
    path: str = "/v1/locks"
    at_most: str = "30s"
    token: str | None = field(default=None, repr=False)  # API token to send; a secret: never written out


def wrk_path() -> str:
    path = shutil.which("wrk")
    if path is None:
        raise RuntimeError("wrk is not installed: `apt-get install wrk` (./scripts/test installs it)")
    return path


def wrk_version() -> str:
    out = subprocess.run([wrk_path(), "--version"], capture_output=True, text=True, check=False)
    return (out.stdout or out.stderr).splitlines()[0].split(" Copyright")[0].strip()


def run_wrk(base_url: str, load: Load, protocol_env: dict[str, str] | None = None) -> Phase:
    """Run wrk once and return its samples; the CPU wrk used is measured from its rusage.

    ``protocol_env`` switches the script to another protocol than schedlock's API (see ``bench.etcd.wrk_env``)."""
    if load.mode == "own" and load.names < load.clients:
        raise ValueError(f"mode 'own' needs at least as many names ({load.names}) as clients ({load.clients})")
    with tempfile.TemporaryDirectory(prefix="schedlock-bench-") as tmp:
        out = Path(tmp) / "samples.txt"
        env = {
            **os.environ,
            "BENCH_MODE": load.mode,
            "BENCH_NAMES": str(load.names),
            "BENCH_PREFIX": load.prefix,
            "BENCH_THREADS": str(load.clients),
            "BENCH_RATE": repr(load.rate),
            "BENCH_PATH": load.path,
            "BENCH_AT_MOST": load.at_most,
            "BENCH_OUT": str(out),
        }
        if load.token:
            env["BENCH_TOKEN"] = load.token
        env.update(protocol_env or {})
        command = [wrk_path(), "-t", str(load.clients), "-c", str(load.clients), "-d", f"{load.seconds}s"]
        command += ["--timeout", "10s", "-s", str(SCRIPT), base_url]
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if result.returncode != 0 or not out.exists():
            raise RuntimeError(f"wrk failed ({result.returncode}): {result.stdout}{result.stderr}")
        phase = parse_samples(out.read_text())
    phase.loadgen_cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return phase


_COUNT_KEYS = ("acq_ok", "acq_held", "acq_other", "rel_ok", "rel_other", "get_ok", "get_other")
_SOCKET_KEYS = ("socket_connect", "socket_read", "socket_write", "wrk_status_ge_400", "socket_timeout")


def parse_samples(text: str) -> Phase:
    """Parse what wrk_script.lua's done() wrote: one summary line, then counts and samples per client."""
    phase = Phase(seconds=0.0)
    counts = dict.fromkeys(_COUNT_KEYS, 0)
    samples = {"acquire": phase.acquire_us, "release": phase.release_us, "get": phase.get_us}
    for line in text.splitlines():
        tag, *fields = line.split()
        if tag == "summary":
            phase.seconds = int(fields[0]) / 1e6
            phase.http_requests = int(fields[1])
            socket = dict(zip(_SOCKET_KEYS, (int(f) for f in fields[2:]), strict=True))
            # wrk counts every status >= 400 as an error, 409 lock_held included; our own counts say which.
            socket.pop("wrk_status_ge_400")
            counts.update(socket)
        elif tag == "counts":
            for key, value in zip(_COUNT_KEYS, fields, strict=True):
                counts[key] += int(value)
        else:
            samples[tag].extend(float(f) for f in fields)
    phase.counts = {k: v for k, v in counts.items() if v or k in ("acq_ok", "rel_ok")}
    return phase
