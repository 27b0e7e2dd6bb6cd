"""Metrics for the whole server when ``serve --workers N`` runs more than one worker process.

prometheus-client's multiprocess mode: the supervisor creates a private directory (``private_dir``) and names it in
``PROMETHEUS_MULTIPROC_DIR`` before it starts the workers. A worker's interpreter then keeps every counter,
histogram and gauge value in memory-mapped files there (one per process and metric type), and a scrape of any worker
reads them all (``MultiProcessCollector``): counters and histograms summed over every process that ever ran,
dead ones included, so a replaced worker never makes a counter go back; the pool gauges summed over the live
workers ('livesum': the supervisor calls ``forget`` for a worker that exited). One worker keeps the in-process values
(app.ops.metrics), which cost less per request.

What the workers compute rather than count is shared here too: the process figures (``ServerProcesses``: CPU and
memory of the supervisor and every worker, summed) and the job ticks counted at scrapes (``shared_ticks``: one
ledger for the server, so it does not depend on which worker a scrape reaches).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import multiprocess as prometheus_multiprocess
    from prometheus_client.core import Metric

#: prometheus-client reads it when first imported: which is why this module imports prometheus-client only inside
#: its functions, so that ``serve`` can clear the variable for one process (app.cli.servers) before anything has.
ENV = "PROMETHEUS_MULTIPROC_DIR"
#: The job ticks' ledger (app.ops.metrics counts them at scrapes); not a ``.db`` file, which the collector reads.
_TICKS_FILE = "job_ticks.json"


def worker_dir() -> str | None:
    """The directory this process shares its metrics in, if it is one of several workers."""
    return os.environ.get(ENV) or None


@contextlib.contextmanager
def private_dir() -> Iterator[Path]:
    """A new directory for the workers' metric files, readable by this user only (``mkdtemp`` makes it 0700, so it
    starts empty and no other user can plant or read files in it), named in the environment the workers inherit;
    removed, with its files, on exit. A directory already named in the environment is not used: its files could be
    another server's."""
    path = Path(tempfile.mkdtemp(prefix="schedlock-metrics-"))
    previous = os.environ.get(ENV)
    os.environ[ENV] = str(path)
    try:
        yield path
    finally:
        if previous is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous
        shutil.rmtree(path, ignore_errors=True)


def forget(pid: int, path: Path) -> None:
    """A worker exited: its live gauges (the pool's) leave the sums. Its counters stay, as they must."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(pid, str(path))  # type: ignore[no-untyped-call]


def collector(path: str) -> prometheus_multiprocess.MultiProcessCollector:
    """What a scrape reads: every process's files in ``path``, merged."""
    from prometheus_client import multiprocess

    return multiprocess.MultiProcessCollector(None, path)  # type: ignore[no-untyped-call]


class ServerProcesses:
    """``process_*`` for the whole server: the supervisor (this worker's parent) and all its children, summed (CPU,
    memory, open files), the earliest start time, and one process's file limit (each has the same)."""

    def __init__(self, proc: str = "/proc") -> None:
        self._proc = proc

    def pids(self) -> list[int]:
        supervisor = os.getppid()
        try:
            children = Path(self._proc, str(supervisor), "task", str(supervisor), "children").read_text().split()
        except OSError:  # no such file without CONFIG_PROC_CHILDREN: report this worker alone
            return [os.getpid()]
        return [supervisor, *map(int, children)]

    def collect(self) -> Iterable[Metric]:
        from prometheus_client import ProcessCollector
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        sums: dict[str, float] = {}
        helps: dict[str, str] = {}
        start = max_fds = None
        for pid in self.pids():
            for family in ProcessCollector(pid=_fixed(pid), proc=self._proc, registry=None).collect():
                value = family.samples[0].value
                helps[family.name] = family.documentation
                if family.name == "process_start_time_seconds":
                    start = value if start is None else min(start, value)
                elif family.name == "process_max_fds":
                    max_fds = value
                else:
                    sums[family.name] = sums.get(family.name, 0.0) + value
        for name, value in sums.items():
            kind = CounterMetricFamily if name == "process_cpu_seconds" else GaugeMetricFamily
            yield kind(name, helps[name] + " Summed over the server's processes.", value=value)
        if start is not None:
            yield GaugeMetricFamily("process_start_time_seconds", helps["process_start_time_seconds"], value=start)
        if max_fds is not None:
            yield GaugeMetricFamily("process_max_fds", helps["process_max_fds"] + " Per process.", value=max_fds)


def _fixed(pid: int) -> Callable[[], int]:
    return lambda: pid


@contextlib.contextmanager
def shared_ticks(path: str) -> Iterator[tuple[dict[tuple[str, str], int], dict[str, datetime]]]:
    """The server's job-tick ledger, locked against the other workers while entered: yields the ticks counted so far
    and, per job, the newest tick counted, and writes back what the block left in them."""
    with open(Path(path, _TICKS_FILE), "a+", encoding="utf-8") as file:
        fcntl.flock(file, fcntl.LOCK_EX)  # held for one scrape's arithmetic: microseconds
        file.seek(0)
        ticks, counted = _parse(file.read())
        yield ticks, counted
        file.seek(0)
        file.truncate()
        json.dump(
            {
                "ticks": [[name, state, n] for (name, state), n in ticks.items()],
                "counted": {name: at.isoformat() for name, at in counted.items()},
            },
            file,
        )


def read_ticks(path: str) -> dict[tuple[str, str], int]:
    """The ticks the server counted so far (what every worker's scrape shows, however fresh its own reading)."""
    try:
        with open(Path(path, _TICKS_FILE), encoding="utf-8") as file:
            fcntl.flock(file, fcntl.LOCK_SH)
            return _parse(file.read())[0]
    except FileNotFoundError:
        return {}


def _parse(text: str) -> tuple[dict[tuple[str, str], int], dict[str, datetime]]:
    if not text:
        return {}, {}
    saved = json.loads(text)
    ticks = {(name, state): n for name, state, n in saved["ticks"]}
    return ticks, {name: datetime.fromisoformat(at) for name, at in saved["counted"].items()}
