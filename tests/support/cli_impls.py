"""The two `schedlock` commands the CLI conformance suite runs (tests/system/cli_conformance): the Python client's,
through its installed entry point, and the Go binary (integrations/go/cmd/schedlock), built once per session.

Each implementation comes in two builds: the real one, and one whose keep-alive floor is 1s instead of 30s (the
Python CLI with its constant lowered, the Go binary linked with ``-X main.minimumKeepAlive=1s``), so keep-alive
tests need not wait minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.cli import SCHEDLOCK
from tests.support.polyglot import ROOT, build
from tests.support.schedulers_js_go import go_tool

GO_MODULE = ROOT / "integrations" / "go"
#: How the release binary is built (docs/cli.md): static, no cgo, no paths or symbols of the build machine.
RELEASE_FLAGS = ["-trimpath", "-ldflags", "-s -w"]
#: The Python CLI with keep-alive's 30s floor lowered to 1s (the hook tests/client/conftest.py's fast_keep_alive uses).
FAST_PYTHON = (
    "import sys, datetime, schedlock._keepalive as k; k.MINIMUM_LOCK_AT_MOST_FOR = datetime.timedelta(seconds=1); "
    "from schedlock._cli import main; sys.exit(main())"
)
#: argparse wraps help to the terminal's width: both commands are run at 80 columns.
COLUMNS = "80"


@dataclass(frozen=True)
class Cli:
    """One implementation of the `schedlock` command."""

    kind: str  # "python" or "go"
    argv: tuple[str, ...]  # the real command
    fast_argv: tuple[str, ...]  # the same with keep-alive's floor at 1s

    def env(self, url: str | None, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
        env["COLUMNS"] = COLUMNS
        if url is not None:
            env["SCHEDLOCK_URL"] = url
        return {**env, **extra}

    def __call__(
        self,
        url: str | None,
        *args: str,
        stdin: str | None = None,
        fast: bool = False,
        timeout: float = 60,
        **env: str,
    ) -> subprocess.CompletedProcess[str]:
        """Run the command to completion, with SCHEDLOCK_URL=url (None: not set) and the extra environment."""
        command = [*(self.fast_argv if fast else self.argv), *args]
        return subprocess.run(
            command, env=self.env(url, **env), input=stdin, capture_output=True, text=True, timeout=timeout
        )

    def start(self, url: str, *args: str, fast: bool = False, **env: str) -> subprocess.Popen[str]:
        """Start the command; the caller waits for it (the ``started`` fixture stops what is left)."""
        command = [*(self.fast_argv if fast else self.argv), *args]
        return subprocess.Popen(
            command, env=self.env(url, **env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )


def python_cli() -> Cli:
    return Cli("python", (SCHEDLOCK,), (sys.executable, "-c", FAST_PYTHON))


def build_go(out: Path, *, extra_ldflags: Sequence[str] = (), goarch: str | None = None) -> tuple[Path, float]:
    """`go build` of cmd/schedlock into ``out`` (niced: the machine is shared), as a release build; returns the binary
    and the seconds the build took."""
    go = go_tool()
    env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=readonly"}
    if goarch:
        env.update(GOOS="linux", GOARCH=goarch)
    ldflags = " ".join(["-s", "-w", *extra_ldflags])
    started = time.monotonic()
    build(["nice", "-n", "10", go, "build", "-trimpath", "-ldflags", ldflags, "-o", str(out), "./cmd/schedlock"],
          cwd=GO_MODULE, env=env)  # fmt: skip
    return out, time.monotonic() - started


def go_cli(folder: Path) -> Cli:
    """The Go binary, built into ``folder``: the release build and the test build."""
    real, _ = build_go(folder / "schedlock")
    fast, _ = build_go(folder / "fast" / "schedlock", extra_ldflags=["-X", "main.minimumKeepAlive=1s"])
    return Cli("go", (str(real),), (str(fast),))
