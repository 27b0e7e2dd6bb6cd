"""The node-cron and gocron adapters' example schedulers (integrations/node-cron/example.mjs,
integrations/go/gocron/example/), built once and run as real scheduler processes against a live server.

Each example prints one JSON object per line on stdout for what it does (ready, started, finished, failed, skipped,
with the tick where it knows it); the adapter logs to stderr. A Scheduler process reads both as they come.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.faketime import libfaketime
from tests.support.polyglot import ROOT, build, require

INTEGRATIONS = ROOT / "integrations"
#: The Go module: the client package, the schedlock command and the gocron adapter (integrations/go/gocron).
GO_MODULE = INTEGRATIONS / "go"
NODE_CRON_FILES = ["package.json", "package-lock.json", "index.mjs", "example.mjs", "tsconfig.json"]


def build_node_cron(folder: Path) -> float:
    """integrations/node-cron copied into ``folder`` with its locked dependencies (npm ci, through npm's own cache);
    returns the seconds npm ci took."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NODE_CRON_FILES:
        shutil.copy(INTEGRATIONS / "node-cron" / name, folder / name)
    started = time.monotonic()
    build([require("npm", "npm"), "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=folder)
    return time.monotonic() - started


def build_gocron(out: Path) -> float:
    """integrations/go/gocron's example built into ``out``/example, with the module versions go.sum pins (Go's module
    and build caches are the user's own, so a second session builds from them); returns the seconds it took."""
    out.mkdir(parents=True, exist_ok=True)
    go = go_tool()
    started = time.monotonic()
    build([go, "build", "-o", str(out / "example"), "./gocron/example"], cwd=GO_MODULE, env=go_env())
    return time.monotonic() - started


def go_tool() -> str:
    """The go command, which must be Go 1.21 or later: gocron v2 needs it (Debian 12's golang-go is 1.19; the
    machine's own Go comes first on PATH)."""
    go = require("go", "golang-go")
    version = subprocess.run([go, "env", "GOVERSION"], capture_output=True, text=True, check=True).stdout.strip()
    major, minor = (int(part) for part in version.removeprefix("go").split(".")[:2])
    if (major, minor) < (1, 21):
        pytest.fail(f"{go} is {version}: gocron v2 needs Go 1.21 or later")
    return go


def go_env() -> dict[str, str]:
    """Go's environment for the adapter: the user's module and build caches, the versions go.sum pins, no cgo."""
    return {**os.environ, "GOFLAGS": "-mod=readonly", "CGO_ENABLED": "0"}


def tool(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """A check (tsc, go vet, gofmt) run in ``cwd``; the caller asserts on its exit code and output."""
    path = cwd / command[0] if "/" in command[0] else Path(go_tool()).with_name(command[0])
    return subprocess.run(
        [str(path), *command[1:]], cwd=cwd, env=go_env(), capture_output=True, text=True, timeout=300, check=False
    )


@dataclass
class Scheduler:
    """One running example scheduler: its JSON events and its stderr, read by threads as they come."""

    process: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # stdout's other lines (node's console.info and debug)
    errors: list[str] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def read(self) -> None:
        assert self.process.stdout is not None and self.process.stderr is not None
        for target, stream in ((self._events, self.process.stdout), (self._errors, self.process.stderr)):
            thread = threading.Thread(target=target, args=(stream,), daemon=True)
            thread.start()
            self.threads.append(thread)

    def _events(self, stream: Any) -> None:
        for line in stream:
            if line.startswith("{"):
                self.events.append(json.loads(line))
            else:
                self.lines.append(line)

    def _errors(self, stream: Any) -> None:
        for line in stream:
            self.errors.append(line)

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The events of one kind so far."""
        return [e for e in list(self.events) if e["event"] == kind]

    def wait(self, done: Callable[[], bool], what: str, timeout: float = 30) -> None:
        """Poll until done() (generous: the machine is shared); fail saying what did not happen."""
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} within {timeout} s; events {self.events}, stderr {self.stderr}")
            if self.process.poll() is not None:
                raise AssertionError(f"the scheduler exited {self.process.returncode}: {self.stderr}")
            time.sleep(0.05)

    @property
    def stderr(self) -> str:
        return "".join(self.errors)

    @property
    def stdout(self) -> str:
        """stdout but the JSON events."""
        return "".join(self.lines)

    def stop(self) -> None:
        """SIGTERM (the example stops its scheduler), then wait; a scheduler that will not stop is killed."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.close()

    def kill(self) -> None:
        """SIGKILL: the holder dies without releasing anything."""
        self.process.kill()
        self.process.wait()

    def close(self) -> None:
        """Wait for the readers to see the end of both pipes, then close them."""
        for thread in self.threads:
            thread.join(timeout=5)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@dataclass
class Example:
    """A built example scheduler of one adapter: start(...) runs another process of it."""

    adapter: str
    command: list[str]
    cwd: Path

    def start(self, url: str, name: str, schedule: str, clock_behind_s: int = 0, **knobs: str) -> Scheduler:
        """A scheduler process on ``schedule`` for the lock ``name``; knobs are the example's variables (JOB,
        LEASE_MS, FAIL_OPEN). clock_behind_s sets its clock back: gocron's through its WithClock option, node-cron's
        (which takes no clock) with libfaketime. Waits until it is ready."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
        env.update(knobs, SCHEDLOCK_URL=url, JOB_NAME=name, SCHEDULE=schedule)
        if clock_behind_s and self.adapter == "gocron":
            env["CLOCK_BEHIND_MS"] = str(clock_behind_s * 1000)
        elif clock_behind_s:
            env.update(LD_PRELOAD=libfaketime(), FAKETIME=f"-{clock_behind_s}")
        process = subprocess.Popen(
            self.command, cwd=self.cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        scheduler = Scheduler(process)
        scheduler.read()
        try:
            scheduler.wait(lambda: bool(scheduler.of("ready")), "the scheduler did not start")
        except AssertionError:
            scheduler.stop()
            raise
        return scheduler
