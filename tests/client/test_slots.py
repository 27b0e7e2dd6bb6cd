"""The client and the ``schedlock`` command with slots (docs/slots.md): once_per and slot, SlotDone, a failed job
leaving its tick open, ``Lease.slot``, against the live server."""

from __future__ import annotations

import logging
import os
import signal
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from schedlock import AsyncLockClient, InvalidRequest, LockClient, LockHeld, SlotDone
from tests.support.cli import SCHEDLOCK, Spawn, cli, wait_until


def floor_minute(value: datetime) -> str:
    return value.astimezone(UTC).replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:00.000Z")


def test_a_lease_knows_its_slot_and_a_completed_tick_raises_slot_done(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "1m", slot="2026-11-30T03:00") as lease:
        assert lease.slot == "2026-11-30T03:00"
    with pytest.raises(SlotDone) as caught:
        sync_client.acquire(name, "1m", slot="2026-11-30T03:00")
    done = caught.value
    assert done.slot == "2026-11-30T03:00" and done.locked_by == lease.locked_by
    assert done.completed_at is not None and done.completed_at >= lease.locked_at
    assert not isinstance(done, LockHeld)  # a distinct answer, with its own class
    info = sync_client.get(name)
    assert info.last_completed_slot == "2026-11-30T03:00" and info.last_completed_at == done.completed_at
    assert [i.last_completed_slot for i in sync_client.iter_locks(prefix=name)] == ["2026-11-30T03:00"]


def test_a_body_that_raises_releases_as_not_completed(sync_client: LockClient, name: str) -> None:
    with pytest.raises(RuntimeError), sync_client.acquire(name, "1m", slot="t1"):
        raise RuntimeError("the job failed")
    with sync_client.acquire(name, "1m", slot="t1") as lease:  # the tick is still open
        released = lease.release()
    assert released.slot == "t1" and released.completed is True


def test_once_per_computes_the_databases_tick(sync_client: LockClient, name: str) -> None:
    lease = sync_client.acquire(name, "1m", once_per="* * * * *", once_per_timezone="Europe/Berlin")
    try:
        # The slot is the minute of the database's now at acquisition (plus the server's 1 s early grace).
        assert lease.slot == floor_minute(lease.locked_at + timedelta(seconds=1))
    finally:
        lease.release(completed=False)
    assert sync_client.get(name).last_completed_slot is None


def test_the_decorator_runs_a_tick_once_and_a_failure_lets_it_run_again(
    sync_client: LockClient, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[str] = []
    fail = [True]

    @sync_client.scheduler_lock(name, lock_at_most_for="1m", once_per="@yearly")
    def nightly() -> str:
        runs.append("run")
        if fail[0]:
            raise RuntimeError("failed")
        return "done"

    with pytest.raises(RuntimeError):
        nightly()  # a failure: the tick stays open
    fail[0] = False
    assert nightly() == "done"
    with caplog.at_level(logging.INFO, logger="schedlock.client"):
        assert nightly() is None  # the year's tick is done: skipped
    assert len(runs) == 2
    assert "was completed at" in caplog.text and f"{datetime.now(UTC).year}-01-01T00:00:00.000Z" in caplog.text


async def test_the_async_decorator_and_lease(async_client: AsyncLockClient, name: str) -> None:
    runs: list[str] = []

    @async_client.scheduler_lock(name, lock_at_most_for="1m", once_per="0 0 1 1 *", once_per_timezone="Asia/Tokyo")
    async def job() -> None:
        runs.append("run")

    await job()
    await job()
    assert runs == ["run"]
    async with await async_client.acquire(name + "-a", "1m", slot="k") as lease:
        assert lease.slot == "k"
    with pytest.raises(SlotDone):
        await async_client.acquire(name + "-a", "1m", slot="k")


def test_bad_combinations_fail_before_the_job_is_scheduled(sync_client: LockClient, name: str) -> None:
    with pytest.raises(ValueError, match="not both"):
        sync_client.acquire(name, "1m", slot="a", once_per="* * * * *")
    with pytest.raises(ValueError, match="only goes with once_per"):
        sync_client.scheduler_lock(name, lock_at_most_for="1m", once_per_timezone="UTC")
    with pytest.raises(InvalidRequest) as caught:  # the service reads the cron expression
        sync_client.acquire(name, "1m", once_per="99 * * * *")
    assert caught.value.field == "schedule"
    with pytest.raises(InvalidRequest) as caught:
        sync_client.acquire(name, "1m", once_per="@daily", once_per_timezone="Europe/Nowhere")
    assert caught.value.field == "timezone"


def test_the_cli_runs_a_tick_once_and_a_failed_command_leaves_it_open(url: str, name: str, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    command = ["--", "sh", "-c", f'echo "$SCHEDLOCK_SLOT" >> {log}; exit "$0"']
    failed = cli(url, "run", "--name", name, "--at-most", "1m", "--once-per", "@yearly", *command[:4], "3")
    assert failed.returncode == 3
    ran = cli(url, "run", "--name", name, "--at-most", "1m", "--once-per", "@yearly", *command[:4], "0")
    assert ran.returncode == 0, ran.stderr
    skipped = cli(url, "run", "-v", "--name", name, "--at-most", "1m", "--once-per", "@yearly", *command[:4], "0")
    assert skipped.returncode == 0 and "was completed at" in skipped.stderr
    ticks = log.read_text().split()
    assert len(ticks) == 2 and ticks[0] == ticks[1] and ticks[0].endswith("-01-01T00:00:00.000Z")
    held = cli(
        url, "run", "--name", name, "--held-exit-code", "9", "--at-most", "1m", "--once-per", "@yearly", "--", "true"
    )
    assert held.returncode == 9  # slot_done exits like a held lock
    status = cli(url, "status", name)
    assert f"last completed {ticks[0]} at " in " ".join(status.stdout.split())


def test_the_cli_with_a_slot_key_and_a_time_zone(url: str, name: str) -> None:
    args = ["run", "--name", name, "--at-most", "1m"]
    assert cli(url, *args, "--slot", "batch-42", "--", "true").returncode == 0
    assert cli(url, *args, "--slot", "batch-42", "--", "false").returncode == 0  # done: not run at all
    assert cli(url, *args, "--once-per", "0 3 * * *", "--timezone", "Europe/Berlin", "--", "true").returncode == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slot", "a", "--once-per", "@daily"], "--slot and --once-per: give one of them"),
        (["--timezone", "UTC"], "--timezone: only goes with --once-per"),
        (["--slot", "x" * 65], "--slot: must be 1 to 64 characters"),
    ],
)
def test_the_cli_refuses_bad_slot_options(url: str, name: str, args: list[str], message: str) -> None:
    result = cli(url, "run", "--name", name, "--at-most", "1m", *args, "--", "true")
    assert result.returncode == 2 and message in result.stderr


def test_the_cli_reports_a_bad_schedule_as_rejected(url: str, name: str) -> None:
    result = cli(url, "run", "--name", name, "--at-most", "1m", "--once-per", "* * *", "--", "true")
    assert result.returncode == 64 and "schedule" in result.stderr


def test_a_killed_command_leaves_its_tick_open(url: str, name: str) -> None:
    killed = cli(url, "run", "--name", name, "--at-most", "1m", "--slot", "s", "--", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 137
    started = time.monotonic()
    assert cli(url, "run", "--name", name, "--at-most", "1m", "--slot", "s", "--", "true").returncode == 0
    assert time.monotonic() - started < 30
    with LockClient(url) as client:
        assert client.get(name).last_completed_slot == "s"


def test_the_cli_skips_a_late_trigger_of_an_older_tick(url: str, name: str, tmp_path: Path) -> None:
    """Issue 43: a cron line whose trigger comes late (a paused node, a clock behind) runs ``--slot`` with an older
    tick than one already completed: the command does not run, -v says the tick is stale, and the newer tick is not
    run again."""
    log = tmp_path / "runs"
    args = ["run", "-v", "--name", name, "--at-most", "1m"]
    command = ["--", "sh", "-c", f'echo "$SCHEDLOCK_SLOT" >> {log}']
    newer, older = "2026-11-30T03:05:00.000Z", "2026-11-30T03:00:00.000Z"
    assert cli(url, *args, "--slot", newer, *command).returncode == 0
    late = cli(url, *args, "--slot", older, *command)
    assert late.returncode == 0, late.stderr
    assert f"slot {older} of {name!r} is stale: older than its last completed slot {newer}" in late.stderr
    again = cli(url, *args, "--slot", newer, *command)
    assert again.returncode == 0 and "was completed at" in again.stderr
    assert log.read_text().split() == [newer]
    with LockClient(url) as client:
        assert client.get(name).last_completed_slot == newer


def test_a_killed_holder_leaves_its_tick_to_expire_and_the_next_tick_runs(
    url: str, name: str, tmp_path: Path, spawn: Spawn
) -> None:
    """``schedlock run`` itself killed (SIGKILL) while its command runs: nothing releases, so the lock is held until
    lock_at_most_for from the acquisition; then the next tick runs, and the killed tick stays open."""
    started, ran = tmp_path / "started", tmp_path / "ran"
    first, second = "2026-11-30T03:00:00.000Z", "2026-11-30T03:01:00.000Z"
    holder = spawn(
        [
            SCHEDLOCK,
            "run",
            "--name",
            name,
            "--at-most",
            "2s",
            "--slot",
            first,
            "--",
            "sh",
            "-c",
            f"echo $$ > {started}; exec sleep 60",
        ]
    )
    wait_until(lambda: started.exists() and started.read_text().strip(), what="the command to start")
    holder.kill()
    holder.wait(timeout=10)
    os.kill(int(started.read_text()), signal.SIGKILL)  # its command too (its own process group), as a node dying would
    with LockClient(url) as client:
        lease = client.get(name)
        assert lease.held
        args = ["run", "-v", "--name", name, "--at-most", "1m", "--slot", second, "--", "touch", str(ran)]
        held = cli(url, *args)
        assert held.returncode == 0 and "is held by" in held.stderr and not ran.exists()
        wait_until(lambda: cli(url, *args).returncode == 0 and ran.exists(), timeout=30, what="the next tick to run")
        after = client.get(name)
    assert after.locked_at >= lease.lock_until  # not before the killed holder's lease ended
    assert after.last_completed_slot == second  # the killed tick never completed; the next one did
    late = cli(url, "run", "-v", "--name", name, "--at-most", "1m", "--slot", first, "--", "true")
    assert "is stale" in late.stderr  # and an older tick is not run after it
