"""Fixtures for the polyglot tests: a live server that requires API tokens, and the example clients of each
language built (outside the repository) into programs the tests run. Their helpers (the token, the build tools, the
Program a built driver is) are in tests/support/polyglot.py.
"""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from tests.support.apps import migrated_table
from tests.support.polyglot import (
    DRIVERS,
    EXAMPLES,
    LANGUAGES,
    Program,
    build,
    go_env,
    java_command,
    require,
    token_config,
)
from tests.support.servers import LiveServer, start_server, stop_server


@pytest.fixture(scope="package")
def poly_settings(database_url: str) -> Iterator[Settings]:
    """A lock table of these tests' own: the runnable examples all take "nightly-report", which other tests use."""
    with migrated_table(database_url, "test_poly") as settings:
        yield settings


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


@pytest.fixture(scope="session")
def java_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """examples/java/SchedLock.java and the driver, compiled with every lint as an error; returns the class folder."""
    javac = require("javac", "openjdk-17-jdk-headless")
    classes = tmp_path_factory.mktemp("java-classes")
    sources = [str(EXAMPLES / "java" / "SchedLock.java"), str(DRIVERS / "java" / "Driver.java")]
    build([javac, "-Xlint:all", "-Werror", "-d", str(classes), *sources], cwd=classes)
    return classes


@pytest.fixture(scope="session")
def java_program(java_classes: Path) -> Program:
    return Program("java", java_command(java_classes, "Driver"), cwd=java_classes)


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
