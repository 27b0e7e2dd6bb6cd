"""Fixtures of the CLI conformance suite: each test runs against both `schedlock` commands (``cli``), the Python
client's and the Go binary, built once per session."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest

from tests.support.cli_impls import Cli, go_cli, python_cli


@pytest.fixture(scope="session")
def go_schedlock(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return go_cli(tmp_path_factory.mktemp("schedlock-go"))


@pytest.fixture(scope="session")
def py_schedlock() -> Cli:
    return python_cli()


@pytest.fixture(params=["python", "go"])
def cli(request: pytest.FixtureRequest) -> Cli:
    """Each implementation in turn: a test that passes for one and fails for the other is a difference."""
    chosen: Cli = request.getfixturevalue("py_schedlock" if request.param == "python" else "go_schedlock")
    return chosen


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[str]]]:
    """The processes a test starts; whatever still runs at its end is stopped (SIGTERM, which schedlock forwards to
    its command, then SIGKILL) and its pipes closed."""
    processes: list[subprocess.Popen[str]] = []
    yield processes
    for process in processes:
        if process.poll() is None:
            process.terminate()
            try:
                process.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
        process.communicate()
