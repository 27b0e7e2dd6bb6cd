"""Fixtures for the polyglot tests: the example clients of each language built (outside the repository) into
programs the tests run. Their server (one that requires API tokens, ``poly_server``) is in tests/conftest.py, their
helpers (the token, the build tools, the Program a built driver is) in tests/support/polyglot.py.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.polyglot import (
    DRIVERS,
    EXAMPLES,
    LANGUAGES,
    Program,
    build,
    go_env,
    java_command,
    require,
)


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
