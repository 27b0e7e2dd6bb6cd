"""`schedlock --url X --api-token Y run ...`: the connection options work before the subcommand as well as after
it (after wins), through the real entry point, against a server that requires a token."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator

import pytest

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.cli import SCHEDLOCK
from tests.support.servers import LiveServer, free_port, start_server, stop_server

SECRET = "cli-options-secret-" + "o" * 40
TOKENS = json.dumps(
    {
        "tokens": [
            {"name": "billing-cron", "sha256": hash_secret(SECRET), "prefixes": ["billing."], "access": "read-write"}
        ]
    }
)


@pytest.fixture(scope="module")
def token_server(settings: Settings) -> Iterator[LiveServer]:
    server = start_server(settings, {"SCHEDLOCK_TOKENS": TOKENS})
    yield server
    stop_server(server)


def schedlock(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}  # nothing from the environment
    return subprocess.run([SCHEDLOCK, *args], env=env, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def lock() -> str:
    return f"billing.cli-{uuid.uuid4().hex[:10]}"  # within the billing-cron token's prefix


def test_global_options_before_the_subcommand(token_server: LiveServer, lock: str) -> None:
    ran = schedlock("--url", token_server.url, "--api-token", SECRET, "--timeout", "5", "run",
                    "--name", lock, "--at-most", "1m", "--at-least", "1m", "--", "echo", "ran")  # fmt: skip
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    status = schedlock("--url", token_server.url, "--api-token", SECRET, "status", lock, "--json")
    assert status.returncode == 0, status.stderr
    assert "[schedlock via billing-cron lease " in status.stdout  # the token was sent: its name is in locked_by


def test_options_after_the_subcommand_still_work_and_win(token_server: LiveServer, lock: str) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    ran = schedlock("--url", dead, "--api-token", "wrong", "run", "--url", token_server.url,
                    "--api-token", SECRET, "--name", lock, "--at-most", "1m", "--", "true")  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    mixed = schedlock("--api-token", SECRET, "status", lock, "--url", token_server.url)
    assert mixed.returncode == 0, mixed.stderr


def test_a_missing_or_wrong_token_before_the_subcommand_is_a_rejection(token_server: LiveServer, lock: str) -> None:
    for token_args in ([], ["--api-token", "wrong"]):
        ran = schedlock("--url", token_server.url, *token_args, "run", "--name", lock, "--at-most", "1m", "--", "true")
        assert ran.returncode == 64 and "unauthorized" in ran.stderr, ran.stderr
