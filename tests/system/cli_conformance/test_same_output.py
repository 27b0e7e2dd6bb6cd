"""The two commands side by side on the same locks: byte for byte the same help, version, tables and JSON."""

from __future__ import annotations

import json

import pytest

from schedlock import LockClient
from tests.support.cli_impls import Cli

pytestmark = pytest.mark.system  # both commands as processes against a live server; the Go binary built

SUBCOMMANDS = ["run", "list", "status", "release", "runs", "force-release", "jobs"]


@pytest.mark.parametrize("args", [["--help"], *([sub, "--help"] for sub in SUBCOMMANDS), ["--version"]], ids=str)
def test_the_same_help_and_version(py_schedlock: Cli, go_schedlock: Cli, args: list[str]) -> None:
    python, go = py_schedlock(None, *args), go_schedlock(None, *args)
    assert python.returncode == 0 and python.stdout
    assert (go.returncode, go.stdout, go.stderr) == (python.returncode, python.stdout, python.stderr)


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["nope"],
        ["--timeout", "soon", "list"],
        ["list", "--held", "--free"],
        ["list", "--limit", "0"],
        ["list", "--bogus"],
        ["status"],
        ["release", "x"],
        ["force-release", "x"],
        ["runs", "x", "--limit", "many"],
        ["run", "--at", "1m", "--", "true"],
        ["run"],
        ["run", "--name", "x", "--at-most", "1m"],
        ["run", "--name", "x", "--at-most", "1m", "--"],
        ["run", "--at-most", "1m", "--", "--name", "x"],  # after --, the command's
        ["run", "--name", "x", "--at-most", "1m", "--bogus", "true"],
    ],
    ids=str,
)
def test_the_same_usage_errors(py_schedlock: Cli, go_schedlock: Cli, args: list[str]) -> None:
    python, go = py_schedlock(None, *args), go_schedlock(None, *args)
    assert python.returncode == 2
    assert (go.returncode, go.stdout, go.stderr) == (python.returncode, python.stdout, python.stderr)


def test_the_same_tables_and_json(py_schedlock: Cli, go_schedlock: Cli, url: str, name: str) -> None:
    """Text that needs no clock (no "held for ..." left, no running run's duration), from both commands."""
    unicode = f"{name}.ünïcode-名前"
    with LockClient(url) as client:
        client.acquire(f"{name}.held", "1m", holder='node "a" <&> é 🙂')
        client.acquire(unicode, "1m", holder="ナ\u2028").release()
        for code in (4, 0):  # a failed run leaves the tick to the next
            command = ["run", "--name", f"{name}.ran", "--at-most", "1m", "--slot", "s1", "--", "sh", "-c"]
            assert py_schedlock(url, *command, f"exit {code}").returncode == code
        client.acquire(f"{name}.forced", "1m", holder="stuck")
    assert py_schedlock(url, "force-release", f"{name}.forced", "--reason", "why ü").returncode == 0
    assert py_schedlock(url, "run", "--name", f"{name}.job", "--at-most", "1m", "--once-per", "0 0 1 1 *",
                        "--timezone", "Asia/Tokyo", "--", "true").returncode == 0  # fmt: skip

    commands = [
        ["list", "--prefix", f"{name}."],
        ["list", "--prefix", f"{name}.", "--json"],
        ["list", "--prefix", f"{name}.", "--free", "--limit", "2"],
        ["runs", f"{name}.ran"],
        ["runs", f"{name}.ran", "--json"],
        ["runs", f"{name}.forced", "--json"],
        ["runs", unicode, "--json"],
        ["jobs", "--prefix", f"{name}.", "--json"],
        ["jobs", "--prefix", f"{name}."],
        ["force-release", f"{name}.ran", "--reason", "x"],
        ["status", f"{name}.zzz"],
        ["runs", f"{name}.zzz"],
    ]
    for args in commands:
        python, go = py_schedlock(url, *args), go_schedlock(url, *args)
        assert (go.returncode, go.stdout, go.stderr) == (python.returncode, python.stdout, python.stderr), args
        if "--json" in args:
            assert json.loads(python.stdout)["items"], args
    listed = py_schedlock(url, "list", "--prefix", f"{name}.", "--json").stdout
    assert "\\u00e9 \\ud83d\\ude42" in listed and "<&>" in listed  # non-ASCII escaped, as json.dumps does
