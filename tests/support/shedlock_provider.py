"""The Java side of tests/system/integrations/: the Maven build of integrations/java (the ShedLock provider) and of
the programs that run it with the real ShedLock (tests/system/integrations/java/), built once per session; the driver
program that runs scenarios one command at a time; Spring Boot JVMs started side by side.

The build uses the local Maven repository (~/.m2) like any Maven project: the first run downloads ShedLock, Spring
and the Postgres driver from Maven Central, later runs need no network.
"""

from __future__ import annotations

import functools
import json
import os
import queue
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest

from tests.support.polyglot import require
from tests.support.servers import LiveServer

ROOT = Path(__file__).parents[2]
BUILD = ROOT / "tests" / "system" / "integrations" / "java"


@dataclass(frozen=True)
class Build:
    """The built modules, and how long `mvn package` took."""

    seconds: float

    def classpath(self, module: str) -> str:
        """The module's own jar and its runtime dependencies (written by maven-dependency-plugin)."""
        target = BUILD / module / "target"
        jars = sorted(target.glob("schedlock-it-*.jar"))
        assert jars, f"{module} was not built"
        return f"{jars[0]}{os.pathsep}{(target / 'classpath.txt').read_text().strip()}"

    def java(self, module: str, main: str, *args: str) -> list[str]:
        """A java command line running ``main`` of ``module``. The JIT stops at C1: these JVMs live seconds, and
        start markedly faster on a loaded machine without C2's compilations."""
        java = require("java", "openjdk-17-jdk-headless")
        return [java, "-XX:TieredStopAtLevel=1", "-cp", self.classpath(module), main, *args]


@functools.cache
def build() -> Build:
    """`mvn -q package` of tests/system/integrations/java (the provider included), once per session; a failure fails."""
    mvn = require("mvn", "maven")
    # C1 only and the serial collector: about half Maven's CPU time for a build this small, on a 2-core machine.
    env = {**os.environ, "MAVEN_OPTS": f"{os.environ.get('MAVEN_OPTS', '')} -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}
    started = time.monotonic()
    done = subprocess.run(
        [mvn, "-q", "-B", "package"], cwd=BUILD, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"mvn package in {BUILD} failed:\n{done.stdout}{done.stderr}")
    return Build(time.monotonic() - started)


def jdbc_url(database_url: str) -> str:
    """The JDBC form of a postgresql:// URL, as the Postgres JDBC driver takes it."""
    parts = urlsplit(database_url)
    query = {"user": parts.username or "postgres", **({"password": parts.password} if parts.password else {})}
    return f"jdbc:postgresql://{parts.hostname}:{parts.port or 5432}{parts.path}?{urlencode(query)}"


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env.update(extra)
    return env


class Driver:
    """tests/system/integrations/java/shedlock7's Driver: one command a line in, one JSON object a line out."""

    def __init__(self, command: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            command,
            env=_env(env or {}),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, daemon=True),
            threading.Thread(target=self._read_errors, daemon=True),
        ]
        for reader in self.readers:
            reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)

    def _read_errors(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.errors.append(line)

    def send(self, *args: object, timeout: float = 60) -> dict[str, Any]:
        """Run one command; its answer, which must not be an error."""
        assert self.process.stdin is not None
        self.process.stdin.write(" ".join(str(a) for a in args) + "\n")
        self.process.stdin.flush()
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"driver gave no answer to {args} in {timeout}s:\n{''.join(self.errors)}") from None
        answer: dict[str, Any] = json.loads(line)
        assert "error" not in answer, f"{args}: {answer['error']}\n{''.join(self.errors)}"
        return answer

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for reader in self.readers:
            reader.join(timeout=10)
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@dataclass
class Jvm:
    """A Spring Boot JVM of tests/system/integrations/java/boot3, its JSON lines read as they come."""

    process: subprocess.Popen[str]
    events: list[dict[str, Any]] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    reader: threading.Thread | None = None

    def read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith('{"event"'):
                self.events.append(json.loads(line))
            else:
                self.other.append(line)

    def of(self, event: str, job: str | None = None) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == event and (job is None or e["job"] == job)]

    def output(self) -> str:
        return "".join(self.other)


def start_jvm(command: list[str], env: dict[str, str]) -> Jvm:
    process = subprocess.Popen(
        command, env=_env(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    jvm = Jvm(process)
    jvm.reader = threading.Thread(target=jvm.read, daemon=True)
    jvm.reader.start()
    return jvm


def stop_jvm(jvm: Jvm) -> None:
    """SIGTERM (Spring shuts down gracefully, releasing nothing it does not hold), then wait."""
    if jvm.process.poll() is None:
        os.killpg(jvm.process.pid, signal.SIGTERM)
    try:
        jvm.process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(jvm.process.pid, signal.SIGKILL)
        jvm.process.wait()
    if jvm.reader is not None:
        jvm.reader.join(timeout=10)
    if jvm.process.stdout is not None:
        jvm.process.stdout.close()


def when(text: str) -> datetime:
    """A time of the API (ISO-8601 with Z)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def lock_row(server: LiveServer, name: str) -> dict[str, Any]:
    """GET /v1/locks/{name}, which must exist."""
    response = httpx.get(f"{server.url}/v1/locks/{name}", timeout=10)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def lock_runs(server: LiveServer, name: str) -> list[dict[str, Any]]:
    """The lock's runs from the history, newest first."""
    response = httpx.get(f"{server.url}/v1/locks/{name}/runs", timeout=10)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def all_runs(server: LiveServer, prefix: str) -> list[dict[str, Any]]:
    """Every run of the names under ``prefix``, oldest first."""
    response = httpx.get(f"{server.url}/v1/runs", params={"prefix": prefix, "limit": 1000}, timeout=10)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return sorted(items, key=lambda r: (r["acquired_at"], r["fencing_token"]))


def acquire(server: LiveServer, name: str, at_most: str = "1m", **extra: object) -> httpx.Response:
    """POST acquire, without a token."""
    body = {"lock_at_most_for": at_most, **extra}
    return httpx.post(f"{server.url}/v1/locks/{name}/acquire", json=body, timeout=10)


def release(server: LiveServer, name: str, token: str) -> httpx.Response:
    """POST release."""
    return httpx.post(f"{server.url}/v1/locks/{name}/release", json={"token": token}, timeout=10)
