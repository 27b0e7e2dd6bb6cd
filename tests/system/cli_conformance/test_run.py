"""`schedlock run`, one contract for both commands (docs/cli.md): held, ticks done and left open, the child's
environment, exit codes, signals, keep-alive through a force-release, the service down, bad arguments."""

from __future__ import annotations

import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.settings import Settings
from schedlock import LockClient, LockNotFound
from tests.support.cli import wait_for_file, wait_until
from tests.support.cli_impls import Cli
from tests.support.servers import LiveServer, serving_tokens
from tests.support.tokens import Token

pytestmark = pytest.mark.system  # both commands as processes against a live server; the Go binary built


#: One request per 4 s, none saved up: a caller extending every 3 s is over it. One principal per command, so that
#: one's last requests do not spend the other's quota.
TIGHT = {kind: Token(f"tight-{kind}", rate=0.25, burst=1) for kind in ("python", "go")}
#: One request per 2 s, none saved up: the acquire spends it, so the release right after is answered 429.
RELEASING = {kind: Token(f"releasing-{kind}", rate=0.5, burst=1) for kind in ("python", "go")}
ADMIN = Token("ops", admin=True)


@pytest.fixture(scope="module")
def quota_server(settings: Settings) -> Iterator[LiveServer]:
    with serving_tokens(settings, *TIGHT.values(), *RELEASING.values(), ADMIN) as server:
        yield server


def run(
    cli: Cli, url: str, name: str, *command: str, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    return cli(url, "run", "--name", name, "--at-most", "1m", *options, "--", *command)


def held(url: str, name: str) -> bool:
    with LockClient(url) as client:
        return client.get(name).held


def test_the_command_gets_the_lock_in_its_environment_and_its_exit_code_comes_back(
    cli: Cli, url: str, name: str
) -> None:
    show = 'echo "$SCHEDLOCK_LOCK_NAME:$SCHEDLOCK_FENCING_TOKEN:${SCHEDLOCK_SLOT-unset}"; exit 7'
    result = run(cli, url, name, "sh", "-c", show)
    assert result.returncode == 7, result.stderr
    lock_name, fencing, slot = result.stdout.strip().split(":")
    assert (lock_name, slot) == (name, "unset") and int(fencing) > 0
    with LockClient(url) as client:
        info = client.get(name)
    assert not info.held and info.fencing_token == int(fencing) and info.locked_by.startswith("sh on ")


def test_the_commands_own_options_are_its_own_with_or_without_dashes(cli: Cli, url: str, name: str) -> None:
    """COMMAND starts at the first word that is not one of run's options: a `-v` or `--name` after it is the
    command's (as with env or timeout), not run's; `--` before it is the same."""
    other = f"{name}-other"
    for dashes in ((), ("--",)):
        args = ("run", "--name", name, "--at-most", "1m", *dashes, "echo", "-v", "--name", other, "-n")
        result = cli(url, *args)
        assert (result.returncode, result.stdout, result.stderr) == (0, f"-v --name {other} -n\n", "")
    with LockClient(url) as client:
        assert client.get(name).fencing_token is not None  # run took this lock, not the command's --name
        with pytest.raises(LockNotFound):
            client.get(other)


def test_held_skips_quietly_with_the_held_exit_code_and_says_who_with_v(cli: Cli, url: str, name: str) -> None:
    with LockClient(url) as client, client.acquire(name, "1m", holder="node-a"):
        quiet = run(cli, url, name, "echo", "ran", options=("--held-exit-code", "3"))
        loud = run(cli, url, name, "echo", "ran", options=("-v",))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (3, "", "")
    assert loud.returncode == 0 and loud.stdout == ""
    assert loud.stderr.startswith(f"schedlock: '{name}' is held by node-a") and "; not running echo" in loud.stderr


def test_a_done_tick_is_skipped_and_a_failed_one_left_open(cli: Cli, url: str, name: str) -> None:
    slot = ("--slot", "2026-12-05")
    failed = run(cli, url, name, "sh", "-c", 'echo "$SCHEDLOCK_SLOT"; exit 5', options=slot)
    assert (failed.returncode, failed.stdout) == (5, "2026-12-05\n"), failed.stderr
    with LockClient(url) as client:
        assert client.get(name).last_completed_slot is None  # the failed run left the tick open
    done = run(cli, url, name, "echo", "ran", options=slot)
    assert (done.returncode, done.stdout) == (0, "ran\n"), done.stderr
    again = run(cli, url, name, "echo", "ran", options=(*slot, "-v", "--held-exit-code", "4"))
    assert (again.returncode, again.stdout) == (4, "")
    assert f"slot 2026-12-05 of '{name}' was completed at " in again.stderr


def test_a_late_trigger_of_an_older_tick_is_skipped_as_stale(cli: Cli, url: str, name: str) -> None:
    """Ticks only move forward (docs/slots.md): once a tick time completed, an older one is skipped as a done tick is
    (the held exit code, nothing printed without -v), and -v says it is stale and which tick completed when."""
    newer, older = "2026-11-30T04:00:00.000Z", "2026-11-30T03:00:00.000Z"
    ran = run(cli, url, name, "echo", "ran", options=("--slot", newer))
    assert (ran.returncode, ran.stdout) == (0, "ran\n"), ran.stderr
    quiet = run(cli, url, name, "echo", "ran", options=("--slot", older))
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    loud = run(cli, url, name, "echo", "ran", options=("--slot", older, "-v", "--held-exit-code", "4"))
    assert (loud.returncode, loud.stdout) == (4, "")
    status = json.loads(cli(url, "status", name, "--json").stdout)
    assert status["last_completed_slot"] == newer  # the late trigger moved nothing back
    assert loud.stderr == (
        f"schedlock: slot {older} of '{name}' is stale: older than its last completed slot {newer} "
        f"(completed at {status['last_completed_at']}); not running echo\n"
    )


def test_once_per_runs_a_tick_once_and_registers_its_name_as_a_job(cli: Cli, url: str, name: str) -> None:
    yearly = ("--once-per", "0 0 1 1 *", "--timezone", "Europe/Berlin")  # the same tick all year
    first = run(cli, url, name, "sh", "-c", 'echo "$SCHEDLOCK_SLOT"', options=yearly)
    assert first.returncode == 0, first.stderr
    tick = first.stdout.strip()
    assert tick.endswith("T23:00:00.000Z") and tick[5:10] == "12-31", tick  # Berlin's midnight on 1 January
    second = run(cli, url, name, "echo", "ran", options=yearly)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")
    jobs = json.loads(cli(url, "jobs", "--prefix", name, "--json").stdout)["items"]
    assert [(job["name"], job["schedule"], job["timezone"]) for job in jobs] == [(name, "0 0 1 1 *", "Europe/Berlin")]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda s: s.name)
def test_signals_are_forwarded_to_the_command_and_the_lock_released(
    cli: Cli, url: str, name: str, tmp_path: Path, started: list[subprocess.Popen[str]], signum: signal.Signals
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got"
    script = f"trap 'touch {got}; exit 9' {signum.name[3:]}; touch {ready}; while :; do sleep 0.1; done"
    process = cli.start(url, "run", "--name", name, "--at-most", "1m", "--", "sh", "-c", script)
    started.append(process)
    wait_for_file(ready)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 9 and got.exists(), stderr
    assert not held(url, name)


def test_a_command_killed_by_a_signal_gives_128_plus_n_and_the_lock_is_released(cli: Cli, url: str, name: str) -> None:
    result = run(cli, url, name, "sh", "-c", "kill -KILL $$")
    assert result.returncode == 128 + signal.SIGKILL
    assert not held(url, name)


def test_126_and_127_for_a_command_that_cannot_run(cli: Cli, url: str, name: str, tmp_path: Path) -> None:
    missing = run(cli, url, name, "/no/such/command")
    assert missing.returncode == 127 and "schedlock: command not found: /no/such/command" in missing.stderr
    not_executable = tmp_path / "job.sh"
    not_executable.write_text("echo ran\n")
    denied = run(cli, url, f"{name}-x", str(not_executable))
    assert (
        denied.returncode == 126 and f"schedlock: cannot execute {not_executable}: Permission denied" in denied.stderr
    )
    assert not held(url, name) and not held(url, f"{name}-x")


def test_keep_alive_holds_past_at_most_then_a_force_release_terminates_the_command(
    cli: Cli, url: str, name: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    ready, got = tmp_path / "ready", tmp_path / "got-term"
    script = f"trap 'touch {got}; exit 0' TERM; touch {ready}; while :; do sleep 0.1; done"
    args = ("run", "--keep-alive", "--name", name, "--at-most", "2s", "--", "sh", "-c", script)
    process = cli.start(url, *args, fast=True)
    started.append(process)
    wait_for_file(ready)
    with LockClient(url) as client:
        first = client.get(name)

        def extended_past_at_most() -> bool:
            now = client.get(name)
            return now.held and now.db_time - now.locked_at > 2 * (first.lock_until - first.locked_at)

        wait_until(extended_past_at_most, 30, "the lock held past twice --at-most")
        assert client.get(name).fencing_token == first.fencing_token
    forced = cli(url, "force-release", name, "--reason", "conformance")
    assert forced.returncode == 0 and forced.stdout.startswith(f"force-released '{name}', held by sh on ")
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 75, stderr
    assert got.exists() and f"schedlock: lost the lock '{name}'; terminating the command" in stderr


def test_keep_alive_rides_out_429s_of_a_tight_quota(
    cli: Cli, quota_server: LiveServer, name: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    """A caller over its quota gets 429 rate_limited with Retry-After: no verdict on its lease, so keep-alive retries
    the extension (before the lease's end) and the command runs on under the same lease. The quota, one request per
    4 s, refuses each extension sent every 3 s (--at-most 6s) at least once."""
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    script = f"touch {ready}; while [ ! -e {stop} ]; do sleep 0.1; done"
    args = ("run", "--keep-alive", "--name", name, "--at-most", "6s", "--", "sh", "-c", script)
    process = cli.start(quota_server.url, *args, fast=True, SCHEDLOCK_TOKEN=TIGHT[cli.kind].secret)
    started.append(process)
    wait_for_file(ready)
    with LockClient(quota_server.url, token=ADMIN.secret) as client:  # the admin's requests: another principal
        first = client.get(name)

        def extended_past_at_most() -> bool:
            if process.poll() is not None:  # the lock lost, the command terminated: say why
                raise AssertionError(f"exited {process.returncode}: {process.communicate()[1]}")
            now = client.get(name)
            return now.held and now.db_time - now.locked_at > 2 * (first.lock_until - first.locked_at)

        wait_until(extended_past_at_most, 60, "the lock held past twice --at-most")
        assert client.get(name).fencing_token == first.fencing_token
    stop.touch()
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 0, stderr
    assert f"could not extend lock '{name}', retrying:" in stderr and "lost" not in stderr, stderr


def test_a_release_answered_429_is_retried_after_retry_after_and_frees_the_lock(
    cli: Cli, quota_server: LiveServer, name: str
) -> None:
    """A 429 is no verdict on the lease either: the release is sent again after the service's Retry-After (2 s
    here) and the lock is freed, not left held until --at-most (the next ticks would be skipped that long)."""
    secret = RELEASING[cli.kind].secret
    result = cli(quota_server.url, "run", "--name", name, "--at-most", "1m", "--", "true", SCHEDLOCK_TOKEN=secret)
    assert result.returncode == 0, result.stderr
    assert f"schedlock: release of '{name}' failed, retrying in 2s: rate_limited (429): " in result.stderr
    assert "could not release" not in result.stderr, result.stderr
    with LockClient(quota_server.url, token=ADMIN.secret) as client:
        info = client.get(name)
        assert not info.held and client.history(name).items[0].outcome == "released", info


def test_a_command_ignoring_sigterm_is_killed_after_kill_after(
    cli: Cli, url: str, name: str, tmp_path: Path, started: list[subprocess.Popen[str]]
) -> None:
    ready = tmp_path / "ready"
    script = f"trap '' TERM; touch {ready}; while :; do sleep 0.1; done"
    args = ("run", "--keep-alive", "--kill-after", "1s", "--name", name, "--at-most", "2s", "--", "sh", "-c", script)
    process = cli.start(url, *args, fast=True)
    started.append(process)
    wait_for_file(ready)
    assert cli(url, "force-release", name, "--reason", "conformance").returncode == 0
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 75, stderr
    assert "(SIGTERM, then SIGKILL after 1s)" in stderr


def test_service_down_does_not_run_the_command_unless_fail_open(
    cli: Cli, dead_url: str, name: str, tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    closed = run(cli, dead_url, name, "touch", str(marker))
    assert closed.returncode == 69 and not marker.exists()
    assert closed.stderr.startswith(f"schedlock: lock service unavailable, so '{name}' could not be taken: acquire")
    opened = run(cli, dead_url, name, "sh", "-c", 'echo "[${SCHEDLOCK_LOCK_NAME:-}]"; exit 3', options=("--fail-open",))
    assert (opened.returncode, opened.stdout) == (3, "[]\n")
    assert opened.stderr.endswith("schedlock: --fail-open: running sh WITHOUT the lock\n"), opened.stderr


USAGE = "usage: schedlock run --name NAME --at-most DURATION [options] -- COMMAND [ARGS...]\n"


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--at-most", "10 minutes"], "--at-most: not a duration: '10 minutes' (use e.g. '30s', '10m', '1h' or "
         "ISO-8601 'PT10M')"),
        (["--at-most", "0"], "--at-most: must be greater than zero"),
        (["--at-most", "1m", "--at-least", "2m"], "--at-least: must not exceed --at-most"),
        (["--at-most", "101000d"], "--at-most: too large"),
        (["--at-most", "29s", "--keep-alive"], "keep-alive needs --at-most >= 30s (got 29s); it extends every "
         "--at-most / 2"),
        (["--at-most", "1m", "--kill-after", "soon"], "--kill-after: not a duration: 'soon' (use e.g. '30s', "
         "'10m', '1h' or ISO-8601 'PT10M')"),
        (["--at-most", "1m", "--held-exit-code", "300"], "--held-exit-code: must be between 0 and 255"),
        (["--at-most", "1m", "--held-exit-code", "x"], "argument --held-exit-code: invalid int value: 'x'"),
        (["--at-most", "1m", "--slot", "a", "--once-per", "* * * * *"], "--slot and --once-per: give one of "
         "them, not both"),
        (["--at-most", "1m", "--timezone", "UTC"], "--timezone: only goes with --once-per"),
        (["--at-most", "1m", "--slot", "s" * 65], "--slot: must be 1 to 64 characters"),
        (["--at-most"], "argument --at-most: expected one argument"),
        ([], "the following arguments are required: --at-most"),
    ],
)  # fmt: skip
def test_bad_arguments_exit_2_with_the_same_message(cli: Cli, url: str, name: str, args: list[str], error: str) -> None:
    result = cli(url, "run", "--name", name, *args, "--", "true")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"{USAGE}schedlock run: error: {error}\n"


def test_a_missing_command_and_name_are_usage_errors(cli: Cli, url: str) -> None:
    result = cli(url, "run", "--at-most", "1m")
    assert result.returncode == 2
    assert result.stderr == f"{USAGE}schedlock run: error: the following arguments are required: --name, COMMAND\n"


def test_a_name_the_api_cannot_take_is_a_usage_error(cli: Cli, url: str) -> None:
    result = cli(url, "run", "--name", "a/b", "--at-most", "1m", "--", "true")
    assert (result.returncode, result.stderr) == (2, "schedlock: lock name: must not contain '/': 'a/b'\n")


def test_a_name_the_service_rejects_exits_64(cli: Cli, url: str) -> None:
    result = cli(url, "run", "--name", "x" * 65, "--at-most", "1m", "--", "true")
    assert result.returncode == 64
    assert result.stderr.startswith("schedlock: the lock service rejected the request: invalid_request (422): ")
