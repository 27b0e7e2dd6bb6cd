"""Fixtures for the polyglot tests: a live server that requires API tokens, and the example clients of each
language built (outside the repository) into programs the tests run.

Each language has a driver (tests/polyglot/{java,go,node}) that runs one scenario through the example file and
prints one JSON object as its last line of output; the tests assert on it and on the server's own view.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from app.auth.tokens import hash_secret
from app.db import migrate
from app.settings import Settings
from tests.support.apps import drop_schema, make_settings
from tests.support.servers import LiveServer, start_server, stop_server

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
DRIVERS = Path(__file__).parent
#: The secret the example programs get in SCHEDLOCK_TOKEN; the token may use names under "poly." and the examples'
#: own "nightly-report".
SECRET = "polyglot-secret-" + "p" * 40
PREFIXES = ["poly.", "nightly-report"]
LANGUAGES = ["java", "go", "node"]


def token_config() -> str:
    entry = {"name": "polyglot", "sha256": hash_secret(SECRET), "prefixes": PREFIXES, "access": "read-write"}
    return json.dumps({"tokens": [entry]})


def bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {SECRET}"}


@pytest.fixture(scope="package")
def poly_settings(database_url: str) -> Iterator[Settings]:
    """A lock table of these tests' own: the runnable examples all take "nightly-report", which other tests use."""
    schema = f"test_poly_{uuid.uuid4().hex[:10]}"
    settings = make_settings(database_url, f"{schema}.shedlock")
    migrate.upgrade(settings)
    yield settings
    drop_schema(database_url, schema)


@pytest.fixture(scope="package")
def poly_server(poly_settings: Settings) -> Iterator[LiveServer]:
    """A `schedlock-server serve` process that requires an API token on every /v1 request."""
    server = start_server(poly_settings, {"SCHEDLOCK_TOKENS": token_config()})
    yield server
    stop_server(server)


@pytest.fixture
def poly_name() -> str:
    """A lock name within the token's prefixes that no other test uses."""
    return f"poly.{uuid.uuid4().hex[:12]}"


def require(tool: str, package: str) -> str:
    """The path of a tool the suite needs; its absence is a failure (./scripts/test installs it), never a skip."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: the Debian package {package} provides it (./scripts/test installs it)")
    return path


def build(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


@dataclass
class Program:
    """A built example driver: run(scenario...) returns the JSON object it printed last."""

    language: str
    command: list[str]
    cwd: Path
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self, url: str, token: str | None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
        env.update(self.extra_env, SCHEDLOCK_URL=url)
        if token is not None:
            env["SCHEDLOCK_TOKEN"] = token
        return env

    def execute(self, *args: str, url: str, token: str | None = SECRET) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self.command, *args],
            cwd=self.cwd,
            env=self.env(url, token),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    def run(self, *args: str, url: str, token: str | None = SECRET) -> dict[str, Any]:
        done = self.execute(*args, url=url, token=token)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            raise AssertionError(f"{self.language} {args} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        result: dict[str, Any] = json.loads(lines[-1])
        return result


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/java/SchedLock.java and the driver, compiled with every lint as an error; returns the class folder."""
    javac = require("javac", "openjdk-17-jdk-headless")
    classes = tmp_path_factory.mktemp("java-classes")
    sources = [str(EXAMPLES / "java" / "SchedLock.java"), str(DRIVERS / "java" / "Driver.java")]
    build([javac, "-Xlint:all", "-Werror", "-d", str(classes), *sources], cwd=classes)
    return classes


def java_command(classes: Path, main: str) -> list[str]:
    return [require("java", "openjdk-17-jdk-headless"), "-cp", str(classes), main]


@pytest.fixture(scope="session")
def java_program(java_classes: Path) -> Program:
    return Program("java", java_command(java_classes, "Driver"), cwd=java_classes)


def go_vars(tmp: Path) -> dict[str, str]:
    """Go's caches in a temporary folder, no module downloads (the example is stdlib only), no C compiler."""
    return {
        "GOCACHE": str(tmp / "cache"),
        "GOPATH": str(tmp / "gopath"),
        "GOPROXY": "off",
        "GOFLAGS": "-mod=mod",
        "CGO_ENABLED": "0",
    }


def go_env(tmp: Path) -> dict[str, str]:
    return {**os.environ, **go_vars(tmp)}


@pytest.fixture(scope="session")
def go_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The Go driver and examples/go/cmd/nightly-report, built into a temporary folder; returns that folder."""
    go = require("go", "golang-go")
    out = tmp_path_factory.mktemp("go-build")
    env = go_env(out)
    build([go, "build", "-o", str(out / "driver"), "."], cwd=DRIVERS / "go", env=env)
    build([go, "build", "-o", str(out / "nightly-report"), "./cmd/nightly-report"], cwd=EXAMPLES / "go", env=env)
    return out


@pytest.fixture(scope="session")
def go_program(go_build: Path) -> Program:
    return Program("go", [str(go_build / "driver")], cwd=go_build)


def node_command() -> list[str]:
    return [require("node", "nodejs")]


@pytest.fixture(scope="session")
def node_program() -> Program:
    node = require("node", "nodejs")
    version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    # Node 20 is what the examples are written for; Debian 12's own nodejs is 18, where fetch works the same.
    if int(version.lstrip("v").split(".")[0]) < 18:
        pytest.fail(f"node {version.strip()}: the example needs Node.js 18 or later (fetch, AbortSignal.timeout)")
    return Program("node", [node, str(DRIVERS / "node" / "driver.mjs")], cwd=DRIVERS / "node")


@pytest.fixture(params=LANGUAGES)
def program(request: pytest.FixtureRequest) -> Program:
    """Each language's example in turn."""
    built: Program = request.getfixturevalue(f"{request.param}_program")
    return built
