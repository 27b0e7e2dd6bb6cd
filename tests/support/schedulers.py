"""Scheduler processes for tests/system/integrations/: APScheduler, Celery (worker with embedded beat) and django-cron
nodes (tests/support/nodes/), started side by side on one lock, and what their jobs recorded.

Each node's job appends ``<tick> <node> <event>`` lines (start, fail, done) to one record file; a node also records
``- <node> ready`` once its scheduler runs. Each node's output goes to a log file the tests read.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import kombu

from tests.support.faketime import libfaketime

ROOT = Path(__file__).parent.parent.parent
SCHEDULERS = ("apscheduler", "celery", "django_cron")


@dataclass(frozen=True)
class Record:
    tick: str
    node: str
    event: str

    @property
    def at(self) -> datetime:
        return datetime.strptime(self.tick, "%Y-%m-%dT%H:%M:%S.000Z").replace(tzinfo=UTC)


@dataclass
class Node:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    killed: bool = False

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@dataclass
class Nodes:
    """Nodes of one scheduler on one lock (``lock``), recording into one file; stopped when the block ends."""

    scheduler: str
    url: str
    folder: Path
    lock: str = field(default_factory=lambda: f"sched-{uuid.uuid4().hex[:10]}")
    started: list[Node] = field(default_factory=list)

    @property
    def record_path(self) -> Path:
        return self.folder / "record.txt"

    def command(self, beat_only: bool = False) -> list[str]:
        if self.scheduler == "celery":
            app = "tests.support.nodes.celery_node"
            if beat_only:
                return [sys.executable, "-m", "celery", "-A", app, "beat", "-l", "info"]
            flags = ["--without-mingle", "--without-gossip", "--without-heartbeat"]
            return [sys.executable, "-m", "celery", "-A", app, "worker", "-B", "-P", "solo", "-l", "info", *flags]
        return [sys.executable, "-m", f"tests.support.nodes.{self.scheduler}_node"]

    def start(
        self, name: str, url: str | None = None, *, clock_behind_s: int = 0, beat_only: bool = False, **env: str
    ) -> Node:
        """Start a node; NODE_* settings (tests/support/nodes/common.py) as keyword arguments, without the prefix.
        ``clock_behind_s``: its clock runs that many seconds behind (libfaketime), so that every trigger it fires
        comes late; ``beat_only`` (Celery): a beat and no worker."""
        environment = {k: v for k, v in os.environ.items() if not k.startswith(("SCHEDLOCK_", "NODE_"))}
        environment.update(
            PYTHONPATH=str(ROOT),
            SCHEDLOCK_URL=url or self.url,
            NODE_NAME=name,
            NODE_RECORD=str(self.record_path),
            NODE_LOCK=self.lock,
            NODE_QUEUE=str(self.folder / "queue"),
            NODE_DB=str(self.folder / f"{name}.sqlite3"),
        )
        environment.update({f"NODE_{key.upper()}": value for key, value in env.items()})
        if clock_behind_s:
            environment.update(LD_PRELOAD=libfaketime(), FAKETIME=f"-{clock_behind_s}")
        if beat_only:
            environment["NODE_BEAT_ONLY"] = "1"
        if self.scheduler == "celery":
            broker_for(Path(environment["NODE_QUEUE"]))
        log_path = self.folder / f"{name}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                self.command(beat_only),
                cwd=self.folder,
                env=environment,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # the node and its children (Celery's beat) are stopped together
            )
        node = Node(name, process, log_path)
        self.started.append(node)
        return node

    def records(self) -> list[Record]:
        if not self.record_path.exists():
            return []
        lines = self.record_path.read_text().splitlines()
        return [Record(*line.split(" ", 2)) for line in lines if line.count(" ") == 2]

    def runs(self, event: str = "done", node: str | None = None) -> list[Record]:
        return [r for r in self.records() if r.event == event and node in (None, r.node)]

    def wait_until(self, what: str, done: Callable[[], object], timeout: float = 40) -> None:
        """Poll until ``done()`` is true; fail with every node's log when it does not come in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if done():
                return
            for node in self.started:
                if not node.killed and node.process.poll() not in (None, 0):
                    raise AssertionError(f"node {node.name} exited {node.process.returncode}:\n{node.log}")
            time.sleep(0.1)
        raise AssertionError(f"no {what} within {timeout}s; records {self.records()}\n{self.logs()}")

    def logs(self) -> str:
        return "\n".join(f"--- {node.name} ---\n{node.log[-6000:]}" for node in self.started)

    def wait_ready(self, *nodes: Node) -> None:
        names = {node.name for node in nodes}
        self.wait_until(f"{names} ready", lambda: names <= {r.node for r in self.runs("ready")})

    def kill(self, node: Node) -> None:
        node.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(timeout=10)

    def stop(self, node: Node) -> None:
        if node.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGTERM)
            try:
                node.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill(node)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)  # whatever it left behind

    def stop_all(self) -> None:
        for node in self.started:
            self.stop(node)


@contextlib.contextmanager
def nodes(scheduler: str, url: str, folder: Path) -> Iterator[Nodes]:
    group = Nodes(scheduler, url, folder)
    try:
        yield group
    finally:
        group.stop_all()


def broker_for(folder: Path) -> None:
    """Create the Celery nodes' broker (tests/support/nodes/celery_node.py) and its queue before they start: two
    workers declaring it at once race to insert the same row."""
    folder.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():  # kombu's models use a loader option SQLAlchemy 2.1 deprecates
        warnings.simplefilter("ignore", DeprecationWarning)
        broker = f"sqla+sqlite:///{folder}/broker.sqlite3"
        with kombu.Connection(broker) as connection:  # type: ignore[attr-defined,no-untyped-call]
            connection.SimpleQueue("celery").close()


def by_tick(records: list[Record]) -> dict[str, list[str]]:
    """Which nodes have a record of each tick."""
    ticks: dict[str, list[str]] = {}
    for record in records:
        ticks.setdefault(record.tick, []).append(record.node)
    return ticks


def in_order(records: list[Record]) -> bool:
    """The ticks completed, in the order they completed (the record file's), only move forward: no tick ran twice,
    and none after a newer one (issue 43)."""
    ticks = [r.tick for r in records]
    return all(earlier < later for earlier, later in itertools.pairwise(ticks))
