"""The HTTP load generator: wrk (Debian package ``wrk``) with ``wrk_script.lua``, one connection per thread.

wrk rather than an async httpx client because it costs the shared two cores far less per request (see
``python -m bench.loadgen_cost`` and docs/performance.md), so more of the machine is left to the
server and Postgres being measured.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
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
    #: Part of a load split between wrk processes (``split``): this one's first client, and the clients of all.
    first_client: int = 0
    of_clients: int | None = None

    @property
    def all_clients(self) -> int:
        return self.of_clients or self.clients

    def split(self, parts: int) -> list[Load]:
        """The load as ``parts`` loads to run at once, one wrk each: the clients shared out, each keeping its id,
        so in mode "own" the names stay disjoint and the same as the whole load's, and every client's random
        sequence differs."""
        shares = [self.clients // parts + (i < self.clients % parts) for i in range(parts)]
        firsts = [sum(shares[:i]) for i in range(parts)]
        return [
            replace(self, clients=n, first_client=f, of_clients=self.clients)
            for n, f in zip(shares, firsts, strict=True)
        ]


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
    return run_wrks([(base_url, load)], protocol_env)[0]


def run_wrks(runs: Sequence[tuple[str, Load]], protocol_env: dict[str, str] | None = None) -> list[Phase]:
    """One wrk per (base URL, load), all at once; each one's samples, and the CPU it used (its own rusage)."""
    for _, load in runs:
        if load.mode == "own" and load.names < load.all_clients:
            raise ValueError(f"mode 'own' needs at least as many names ({load.names}) as clients ({load.all_clients})")
    with tempfile.TemporaryDirectory(prefix="schedlock-bench-") as tmp:
        started: list[tuple[subprocess.Popen[bytes], Path]] = []
        try:
            for i, (base_url, load) in enumerate(runs):
                started.append(_start(Path(tmp) / str(i), base_url, load, protocol_env or {}))
            return [_finish(process, out) for process, out in started]
        finally:
            for process, _ in started:
                if process.returncode is None:
                    process.kill()
                    process.wait()


def _start(out: Path, base_url: str, load: Load, protocol_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path]:
    env = {
        **os.environ,
        "BENCH_MODE": load.mode,
        "BENCH_NAMES": str(load.names),
        "BENCH_PREFIX": load.prefix,
        "BENCH_THREADS": str(load.all_clients),
        "BENCH_FIRST_CLIENT": str(load.first_client),
        "BENCH_RATE": repr(load.rate),
        "BENCH_PATH": load.path,
        "BENCH_AT_MOST": load.at_most,
        "BENCH_OUT": str(out.with_suffix(".samples")),
    }
    if load.token:
        env["BENCH_TOKEN"] = load.token
    env.update(protocol_env)
    command = [wrk_path(), "-t", str(load.clients), "-c", str(load.clients), "-d", f"{load.seconds}s"]
    command += ["--timeout", "10s", "-s", str(SCRIPT), base_url]
    with out.with_suffix(".log").open("wb") as log:  # wrk's own report (on failure, its errors)
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), out


def _finish(process: subprocess.Popen[bytes], out: Path) -> Phase:
    # wait4, not RUSAGE_CHILDREN: with several wrk at once, each one's CPU is its own.
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    samples = out.with_suffix(".samples")
    if process.returncode != 0 or not samples.exists():
        raise RuntimeError(f"wrk failed ({process.returncode}): {out.with_suffix('.log').read_text()}")
    phase = parse_samples(samples.read_text())
    phase.loadgen_cpu_s = usage.ru_utime + usage.ru_stime
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
