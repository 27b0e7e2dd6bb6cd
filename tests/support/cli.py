"""The ``schedlock`` command as the tests run it: its real entry point, with SCHEDLOCK_URL set; and waiting."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from tests.support.patience import SETTLE

#: The installed console script: the CLI is tested through its real entry point.
SCHEDLOCK = str(Path(sys.executable).with_name("schedlock"))


#: The ``spawn`` fixture (tests/client/conftest.py): start a process with SCHEDLOCK_URL set, stopped at the end.
Spawn = Callable[..., "subprocess.Popen[str]"]


def cli_env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    return {**env, "SCHEDLOCK_URL": url, **extra}


def cli(url: str, *args: str, timeout: float = SETTLE, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run the schedlock command to completion."""
    return subprocess.run(
        [SCHEDLOCK, *args], env=cli_env(url), input=stdin, capture_output=True, text=True, timeout=timeout, check=False
    )


def wait_until(predicate: Callable[[], object], timeout: float = SETTLE, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def wait_for_file(path: Path, timeout: float = SETTLE) -> None:
    wait_until(path.exists, timeout, str(path))
