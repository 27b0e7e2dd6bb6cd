"""The ``schedlock`` command, through its installed entry point, against the live server."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from schedlock import LockClient, LockHeld
from tests.support.cli import SCHEDLOCK, Spawn, cli, wait_for_file, wait_until
from tests.support.patience import SETTLE
from tests.support.takeover import steal

# The real CLI with keep-alive's 30s floor lowered to 1s (the same private hook as the fast_keep_alive fixture).
FAST_KEEP_ALIVE_CLI = (
    "import sys, datetime, schedlock._keepalive as k; k.MINIMUM_LOCK_AT_MOST_FOR = datetime.timedelta(seconds=1); "
    "from schedlock._cli import main; sys.exit(main())"
)


def test_help_explains_the_exit_codes(url: str) -> None:
    result = cli(url, "run", "--help")
    assert result.returncode == 0
    for text in ("exit codes:", "69", "75", "128+N", "--held-exit-code", "SCHEDLOCK_FENCING_TOKEN", 'not "exactly'):
        assert text in result.stdout, text


def test_two_concurrent_runs_exactly_one_runs_the_command(url: str, name: str, tmp_path: Path, spawn: Spawn) -> None:
    log, stop = tmp_path / "runs", tmp_path / "stop"
    # The winner runs until told to stop, so every other run must find the lock held, however slow it starts.
    command = ["sh", "-c", f'echo "$SCHEDLOCK_FENCING_TOKEN" >> {log}; while [ ! -e {stop} ]; do sleep 0.05; done']
    runs = [spawn([SCHEDLOCK, "run", "--name", name, "--at-most", "1m", "--", *command]) for _ in range(4)]
    wait_until(lambda: sum(run.poll() is not None for run in runs) == 3, 60, "three runs to skip")
    stop.touch()
    outputs = [run.communicate(timeout=30) for run in runs]
    assert [run.returncode for run in runs] == [0, 0, 0, 0]
    assert outputs == [("", "")] * 4  # the skipped ones are silent: cron sends no mail
    assert len(log.read_text().splitlines()) == 1
    assert cli(url, "run", "--name", name, "--at-most", "1m", "--", "true").returncode == 0  # released


def test_the_command_sees_the_lock_and_its_exit_code_comes_back(url: str, name: str) -> None:
    result = cli(
        url,
        "run",
        "--name",
        name,
        "--at-most",
        "1m",
        "--",
        "sh",
        "-c",
        'echo "$SCHEDLOCK_LOCK_NAME:$SCHEDLOCK_FENCING_TOKEN"; exit 7',
    )
    assert result.returncode == 7
    lock_name, fencing = result.stdout.strip().split(":")
    assert lock_name == name and int(fencing) > 0
    with LockClient(url) as client:
        info = client.get(name)
    assert not info.held and info.fencing_token == int(fencing) and info.locked_by.startswith("sh on ")


def test_held_exit_code_and_verbose(url: str, name: str) -> None:
    with LockClient(url) as client, client.acquire(name, "1m", holder="node-a"):
        quiet = cli(url, "run", "--name", name, "--at-most", "1m", "--held-exit-code", "3", "--", "echo", "ran")
        loud = cli(url, "run", "-v", "--name", name, "--at-most", "1m", "--", "echo", "ran")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (3, "", "")
    assert loud.returncode == 0 and loud.stdout == "" and "held by node-a" in loud.stderr


def test_a_killed_command_gives_128_plus_the_signal_and_is_released(url: str, name: str) -> None:
    result = cli(url, "run", "--name", name, "--at-most", "1m", "--", "sh", "-c", "kill -KILL $$")
    assert result.returncode == 128 + signal.SIGKILL
    with LockClient(url) as client:
        assert not client.get(name).held


def test_sigterm_is_forwarded_and_the_lock_released(url: str, name: str, tmp_path: Path, spawn: Spawn) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got-term"
    script = f"trap 'touch {got}; exit 9' TERM; touch {ready}; while :; do sleep 0.1; done"
    run = spawn([SCHEDLOCK, "run", "--name", name, "--at-most", "1m", "--", "sh", "-c", script])
    wait_for_file(ready)
    run.send_signal(signal.SIGTERM)
    run.communicate(timeout=10)
    assert run.returncode == 9 and got.exists()
    with LockClient(url) as client:
        assert not client.get(name).held


def test_a_missing_command_is_127_and_the_lock_is_released(url: str, name: str) -> None:
    result = cli(url, "run", "--name", name, "--at-most", "1m", "--", "/no/such/command")
    assert result.returncode == 127 and "command not found" in result.stderr
    with LockClient(url) as client:
        assert not client.get(name).held


def test_service_unavailable_does_not_run_the_command(dead_url: str, name: str, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    result = cli(dead_url, "run", "--name", name, "--at-most", "1m", "--", "touch", str(marker))
    assert result.returncode == 69 and not marker.exists()
    assert "unavailable" in result.stderr


def test_fail_open_runs_the_command_without_the_lock(dead_url: str, name: str) -> None:
    result = cli(
        dead_url,
        "run",
        "--fail-open",
        "--name",
        name,
        "--at-most",
        "1m",
        "--",
        "sh",
        "-c",
        'echo "[${SCHEDLOCK_LOCK_NAME:-}]"',
    )
    assert result.returncode == 0 and result.stdout == "[]\n"
    assert "WITHOUT the lock" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--at-most", "10 minutes"], "--at-most"),
        (["--at-most", "1m", "--at-least", "2m"], "--at-least"),
        (["--at-most", "29s", "--keep-alive"], "30s"),
        (["--at-most", "1m", "--held-exit-code", "300"], "--held-exit-code"),
    ],
)
def test_bad_arguments_exit_2(url: str, name: str, args: list[str], message: str) -> None:
    result = cli(url, "run", "--name", name, *args, "--", "true")
    assert result.returncode == 2 and message in result.stderr


def test_a_rejected_request_exits_64(url: str) -> None:
    result = cli(url, "run", "--name", "x" * 65, "--at-most", "1m", "--", "true")
    assert result.returncode == 64 and "invalid_request" in result.stderr


def test_list_status_release(url: str, name: str) -> None:
    with LockClient(url) as client:
        held = client.acquire(f"{name}.a", "1m", holder="node-a")
        client.acquire(f"{name}.b", "1m").release()

    table = cli(url, "list", "--prefix", f"{name}.")
    assert table.returncode == 0
    header, row_a, row_b = table.stdout.splitlines()
    assert header.split()[:4] == ["NAME", "HELD", "LOCK", "UNTIL"]
    assert row_a.split()[:2] == [f"{name}.a", "yes"] and "node-a" in row_a
    assert row_b.split()[:2] == [f"{name}.b", "no"]

    listed = json.loads(cli(url, "list", "--prefix", f"{name}.", "--held", "--json").stdout)
    assert [item["name"] for item in listed["items"]] == [f"{name}.a"]
    assert len(json.loads(cli(url, "list", "--prefix", f"{name}.", "--limit", "1", "--json").stdout)["items"]) == 1

    status = json.loads(cli(url, "status", f"{name}.a", "--json").stdout)
    assert status["held"] is True and status["fencing_token"] == held.fencing_token
    assert "held           yes" in cli(url, "status", f"{name}.a").stdout
    missing = cli(url, "status", f"{name}.zzz")
    assert missing.returncode == 1 and "no lock named" in missing.stderr

    assert cli(url, "release", f"{name}.a", "--token", "-", stdin=held.token + "\n").returncode == 0
    assert cli(url, "release", f"{name}.a", "--token", held.token).returncode == 0  # idempotent
    wrong = cli(url, "release", f"{name}.a", "--token", "not-the-token")
    assert wrong.returncode == 1 and "no longer holds" in wrong.stderr
    assert json.loads(cli(url, "status", f"{name}.a", "--json").stdout)["held"] is False


def test_list_when_the_service_is_down(dead_url: str) -> None:
    assert cli(dead_url, "list").returncode == 69


# --- keep-alive ---------------------------------------------------------------------------------------------------


def fast(*args: str) -> list[str]:
    """The real CLI with keep-alive's 30s floor lowered to 1s."""
    return [sys.executable, "-c", FAST_KEEP_ALIVE_CLI, *args]


def test_keep_alive_keeps_the_command_running_past_lock_at_most_for(
    url: str, name: str, tmp_path: Path, spawn: Spawn
) -> None:
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    script = f"touch {ready}; while [ ! -e {stop} ]; do sleep 0.05; done"
    run = spawn(fast("run", "--keep-alive", "--name", name, "--at-most", "2s", "--", "sh", "-c", script))
    wait_for_file(ready)
    with LockClient(url) as client:
        first = client.get(name)
        time.sleep(4)  # twice lock_at_most_for
        with pytest.raises(LockHeld):
            client.acquire(name, "2s")
        later = client.get(name)
        assert later.held and later.fencing_token == first.fencing_token and later.locked_at == first.locked_at
        assert later.db_time - later.locked_at > timedelta(seconds=4)  # held for twice lock_at_most_for
        assert later.lock_until > first.lock_until
        stop.touch()
        _, stderr = run.communicate(timeout=SETTLE)
        assert run.returncode == 0, stderr
        assert not client.get(name).held


async def test_a_stolen_lock_terminates_the_command(
    url: str, name: str, db: Any, settings: Any, tmp_path: Path, spawn: Spawn
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got-term"
    script = f"trap 'touch {got}; exit 0' TERM; touch {ready}; while :; do sleep 0.1; done"
    run = spawn(fast("run", "--keep-alive", "--name", name, "--at-most", "2s", "--", "sh", "-c", script))
    await asyncio.to_thread(wait_for_file, ready)
    await steal(db, settings.table, name)
    _, stderr = await asyncio.to_thread(run.communicate, timeout=SETTLE)
    assert run.returncode == 75, stderr
    assert got.exists() and "lost the lock" in stderr


async def test_a_command_ignoring_sigterm_is_killed_after_the_grace_period(
    url: str, name: str, db: Any, settings: Any, tmp_path: Path, spawn: Spawn
) -> None:
    ready = tmp_path / "ready"
    script = f"trap '' TERM; touch {ready}; while :; do sleep 0.1; done"
    args = ["run", "--keep-alive", "--kill-after", "1s", "--name", name, "--at-most", "2s", "--", "sh", "-c", script]
    run = spawn(fast(*args))
    await asyncio.to_thread(wait_for_file, ready)
    await steal(db, settings.table, name)
    stolen = time.monotonic()
    await asyncio.to_thread(run.communicate, timeout=SETTLE)
    assert run.returncode == 75
    # Killed after the grace period; not within the body's loop forever (an idle machine takes 2-3 s, one at load 20
    # several more: the bound only says it was killed at all).
    assert 1 <= time.monotonic() - stolen < 60


@pytest.mark.system  # a real 30s keep-alive: waits ~15s
async def test_a_real_30s_keep_alive_lock_stolen_terminates_the_command(
    url: str, name: str, db: Any, settings: Any, tmp_path: Path, spawn: Spawn
) -> None:
    """No test hook: the production minimum (30s), so the first extension comes after 15s."""
    ready = tmp_path / "ready"
    script = f"touch {ready}; sleep 60"
    run = spawn([SCHEDLOCK, "run", "--keep-alive", "--name", name, "--at-most", "30s", "--", "sh", "-c", script])
    await asyncio.to_thread(wait_for_file, ready)
    await steal(db, settings.table, name)
    stolen = time.monotonic()
    _, stderr = await asyncio.to_thread(run.communicate, timeout=40)
    assert run.returncode == 75, stderr
    assert time.monotonic() - stolen < 20  # at the first extension, 15s after acquiring
