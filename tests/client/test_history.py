"""The client's history calls (history, runs, skips, force_release) on both twins, a force-released lease under
keep-alive reporting the loss, and the ``schedlock runs`` / ``schedlock force-release`` commands."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from fastapi import FastAPI

from app.settings import Settings
from schedlock import (
    AsyncLockClient,
    Forbidden,
    LeaseState,
    LockClient,
    LockHeld,
    LockLost,
    LockNotFound,
    NotHolder,
)
from tests.support.cli import cli
from tests.support.servers import LiveServer, serving_tokens
from tests.support.tokens import Token

ADMIN = Token("cli-admin", admin=True)
JOBS = Token("cli-jobs")


def test_history_of_a_lock(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "1m", holder="host-3") as lease:
        page = sync_client.history(name)
        (run,) = page.items
        assert run.fencing_token == lease.fencing_token and run.outcome == "running" and not run.ended
        assert run.locked_by.startswith("host-3") and run.source == "api" and run.ended_at is None
    (run,) = sync_client.history(name).items
    assert run.outcome == "released" and run.ended and run.ended_at is not None
    assert run.duration == run.ended_at - run.acquired_at
    assert page.next_cursor is None and page.db_time.tzinfo is not None


async def test_runs_with_filters_and_pages(async_client: AsyncLockClient, name: str) -> None:
    prefix = f"{name}."
    before = datetime.now(UTC) - timedelta(minutes=1)
    for suffix in "abc":
        async with await async_client.acquire(prefix + suffix, "1m"):
            pass
    held = await async_client.acquire(prefix + "d", "1m")
    first = await async_client.runs(prefix=prefix, limit=3, since=before)
    assert [r.name for r in first.items] == [prefix + "d", prefix + "c", prefix + "b"]
    rest = await async_client.runs(prefix=prefix, limit=3, cursor=first.next_cursor)
    assert [r.name for r in rest.items] == [prefix + "a"] and rest.next_cursor is None
    assert [r.name for r in (await async_client.runs(prefix=prefix, ended=False)).items] == [prefix + "d"]
    assert len((await async_client.runs(prefix=prefix, ended=True)).items) == 3
    assert (await async_client.runs(prefix=prefix, until=before)).items == ()
    await held.release()
    with pytest.raises(ValueError, match="time zone"):
        await async_client.runs(since=datetime.now())


async def test_skips_per_hour(app: FastAPI, name: str) -> None:
    transport = httpx.ASGITransport(app=app)
    async with AsyncLockClient("http://schedlock.test", transport=transport) as client:
        lease = await client.acquire(name, "1m")
        for _ in range(2):
            with pytest.raises(LockHeld):
                await client.acquire(name, "1m")
        await app.state.skips.flush(app.state.store)
        skips = await client.skips(name, hours=2)
        assert skips.name == name and skips.hours == 2 and skips.total == 2
        assert [h.skipped for h in skips.items] == [2] and skips.items[0].hour.minute == 0
        assert (await client.history(name)).items[0].skipped == 2
        await lease.release()


def test_force_release_and_its_answers(sync_client: LockClient, name: str) -> None:
    lease = sync_client.acquire(name, "10m")
    result = sync_client.force_release(name, "stuck")
    assert result.forced and result.run is not None and result.run.outcome == "force_released"
    assert result.run.forced_by == "anonymous" and result.run.force_reason == "stuck"
    with pytest.raises(NotHolder):
        lease.release()
    assert lease.state is LeaseState.LOST
    assert not sync_client.force_release(name, "again").forced
    with pytest.raises(LockNotFound):
        sync_client.force_release(name + "-never", "nothing")


@pytest.mark.usefixtures("fast_keep_alive")
async def test_keep_alive_reports_a_force_release(async_client: AsyncLockClient, name: str) -> None:
    lost: list[LockLost] = []
    with pytest.raises(LockLost):
        async with await async_client.acquire(name, "2s", keep_alive=True, on_lost=lost.append) as lease:
            await async_client.force_release(name, "testing the keep-alive")
            await asyncio.sleep(5)  # the next extension (within a second) is refused: this body is cancelled
    assert lease.state is LeaseState.LOST and lost and isinstance(lost[0].__cause__, NotHolder)


@pytest.mark.usefixtures("fast_keep_alive")
def test_keep_alive_reports_a_force_release_to_a_sync_body(sync_client: LockClient, name: str) -> None:
    lost = threading.Event()
    with (
        pytest.raises(LockLost),
        sync_client.acquire(name, "2s", keep_alive=True, on_lost=lambda _: lost.set()) as lease,
    ):
        sync_client.force_release(name, "testing the keep-alive")
        assert lost.wait(5)
        assert lease.state is LeaseState.LOST
        lease.check()  # a sync body learns of the loss where it looks


@pytest.fixture(scope="module")
def token_server(settings: Settings) -> Iterator[LiveServer]:
    with serving_tokens(settings, ADMIN, JOBS) as server:
        yield server


def test_only_an_admin_token_may_force_release(token_server: LiveServer, name: str) -> None:
    with (
        LockClient(token_server.url, token=JOBS.secret) as jobs,
        LockClient(token_server.url, token=ADMIN.secret) as ops,
    ):
        jobs.acquire(name, "10m")
        with pytest.raises(Forbidden):
            jobs.force_release(name, "not mine to free")
        assert ops.force_release(name, "mine to free").run.forced_by == "cli-admin"  # type: ignore[union-attr]


def test_the_runs_command(url: str, sync_client: LockClient, name: str) -> None:
    for _ in range(3):
        with sync_client.acquire(name, "1m", holder="nightly on host-3"):
            pass
    result = cli(url, "runs", name, "--limit", "2")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split()[:4] == ["ACQUIRED", "AT", "DURATION", "OUTCOME"] and len(rows) == 2
    assert all("released" in row and "nightly on host-3 [schedlock" in row for row in rows)
    data = json.loads(cli(url, "runs", name, "--json").stdout)
    assert [r["outcome"] for r in data["items"]] == ["released"] * 3
    assert data["items"][0]["fencing_token"] > data["items"][1]["fencing_token"]
    empty = cli(url, "runs", name + "-never")
    assert empty.returncode == 0 and empty.stdout.splitlines()[0].startswith("ACQUIRED AT")


def test_the_force_release_command(url: str, sync_client: LockClient, name: str, token_server: LiveServer) -> None:
    sync_client.acquire(name, "10m", holder="host-3")
    result = cli(url, "force-release", name, "--reason", "host-3 is gone")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"force-released {name!r}, held by host-3 [schedlock")
    again = cli(url, "force-release", name, "--reason", "again", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["forced"] is False
    assert cli(url, "force-release", name + "-never", "--reason", "x").returncode == 1
    assert cli(url, "force-release", name).returncode == 2  # --reason is required
    forbidden = cli(token_server.url, "force-release", name, "--reason", "x", "--api-token", JOBS.secret)
    assert forbidden.returncode == 64 and "not an admin token" in forbidden.stderr
    help_text = cli(url, "force-release", "--help").stdout
    assert "exit codes:" in help_text and "force-release without an admin token" in help_text
