"""The polyglot tests' helpers (their fixtures are in tests/system/polyglot/conftest.py): the API token the example
programs use, the tools that build them, and a built example driver as a program to run.

Each language has a driver (tests/system/polyglot/{java,go,node}) that runs one scenario through the example file and
prints one JSON object as its last line of output; the tests assert on it and on the server's own view.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.auth.tokens import hash_secret
from tests.support.servers import LiveServer

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
DRIVERS = ROOT / "tests" / "system" / "polyglot"
#: The secret the example programs get in SCHEDLOCK_TOKEN; the token may use names under "poly." and the examples'
#: own "nightly-report".
SECRET = "polyglot-secret-" + "p" * 40
PREFIXES = ["poly.", "nightly-report"]
LANGUAGES = ["java", "go", "node"]


def token_config() -> str:
    """SCHEDLOCK_TOKENS for the polyglot server: the one token whose secret is SECRET."""
    entry = {"name": "polyglot", "sha256": hash_secret(SECRET), "prefixes": PREFIXES, "access": "read-write"}
    return json.dumps({"tokens": [entry]})


def bearer() -> dict[str, str]:
    """The Authorization header with SECRET."""
    return {"Authorization": f"Bearer {SECRET}"}


def row(server: LiveServer, name: str) -> dict[str, object]:
    """The server's view of a lock (GET /v1/locks/{name}, which must exist)."""
    response = httpx.get(f"{server.url}/v1/locks/{name}", headers=bearer())
    assert response.status_code == 200, response.text
    body: dict[str, object] = response.json()
    return body


def require(tool: str, package: str) -> str:
    """The path of a tool the suite needs; its absence is a failure (./scripts/test installs it), never a skip."""
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} is not installed: the Debian package {package} provides it (./scripts/test installs it)")
    return path


def build(command: list[str], cwd: Path, env: dict[str, str] | None = None) -> None:
    """Run a build step; its failure fails the test with the tool's output."""
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


def java_command(classes: Path, main: str) -> list[str]:
    """The java command line that runs class ``main`` from the compiled ``classes`` folder."""
    return [require("java", "openjdk-17-jdk-headless"), "-cp", str(classes), main]


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
    """This process's environment with go_vars(tmp) on top."""
    return {**os.environ, **go_vars(tmp)}


def node_command() -> list[str]:
    """The node command line (no script yet)."""
    return [require("node", "nodejs")]
