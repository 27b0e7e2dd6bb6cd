"""Keep-alive: extends while the body runs, refuses short locks, and makes a lost lock visible.

Keep-alive refuses lock_at_most_for < 30s, as ShedLock does; the ``fast_keep_alive`` fixture lowers that floor
(a private module constant) so a 2s lock extended every second can show "alive past lock_at_most_for" in seconds.
The CLI tests run one real 30s keep-alive without the hook.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

from schedlock import (
    AsyncLockClient,
    LeaseState,
    LockClient,
    LockHeld,
    LockLost,
    NotHolder,
    RateLimited,
    ServiceUnreachable,
    assert_locked,
)
from tests.support.takeover import steal


@pytest.mark.parametrize("at_most", ["29s", "29999ms", timedelta(seconds=10)])
def test_keep_alive_refuses_lock_at_most_for_under_30s(sync_client: LockClient, at_most: Any) -> None:
    with pytest.raises(ValueError, match="30s"):
        sync_client.acquire("x", at_most, keep_alive=True)
    with pytest.raises(ValueError, match="30s"):
        sync_client.scheduler_lock("x", at_most, keep_alive=True)
    with pytest.raises(ValueError, match="30s"):
        AsyncLockClient().scheduler_lock("x", at_most, keep_alive=True)


def test_keep_alive_accepts_30s(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "30s", keep_alive=True) as lease:
        assert lease.state is LeaseState.HELD
    assert lease.state is LeaseState.RELEASED


@pytest.mark.usefixtures("fast_keep_alive")
def test_a_job_outlives_lock_at_most_for_under_keep_alive(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "2s", keep_alive=True) as lease:
        first_until = lease.lock_until
        deadline = time.monotonic() + 5  # 2.5 times lock_at_most_for
        while time.monotonic() < deadline:
            with pytest.raises(LockHeld):
                sync_client.acquire(name, "2s")
            assert_locked(name)
            time.sleep(0.5)
        assert lease.state is LeaseState.HELD
        assert lease.lock_until - first_until >= timedelta(seconds=3)
    assert lease.state is LeaseState.RELEASED
    assert not sync_client.get(name).held


@pytest.mark.usefixtures("fast_keep_alive")
async def test_a_stolen_lock_is_reported_to_a_sync_body(
    sync_client: LockClient, name: str, db: Any, settings: Any
) -> None:
    lost = threading.Event()
    seen: list[LockLost] = []

    def on_lost(error: LockLost) -> None:
        seen.append(error)
        lost.set()

    with sync_client.acquire(name, "2s", keep_alive=True, on_lost=on_lost) as lease:
        await steal(db, settings.table, name)
        assert await asyncio.to_thread(lost.wait, 5)
        assert lease.state is LeaseState.LOST
        assert isinstance(seen[0].__cause__, NotHolder) and seen[0].lease is lease
        with pytest.raises(LockLost):
            assert_locked()
    assert lease.state is LeaseState.LOST  # exit did not pretend to release
    assert sync_client.get(name).locked_by == "thief"  # nor touched the thief's row


@pytest.mark.usefixtures("fast_keep_alive")
async def test_a_stolen_lock_cancels_an_async_body(
    async_client: AsyncLockClient, name: str, db: Any, settings: Any
) -> None:
    seen: list[LockLost] = []
    started = time.monotonic()
    with pytest.raises(LockLost) as lost:
        async with await async_client.acquire(name, "2s", keep_alive=True, on_lost=seen.append) as lease:
            await steal(db, settings.table, name)
            await asyncio.sleep(30)
    assert time.monotonic() - started < 29  # cancelled, not slept out (however slow the machine)
    assert seen == [lost.value] and lease.state is LeaseState.LOST
    assert isinstance(lost.value.__cause__, NotHolder)
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]


@pytest.mark.usefixtures("fast_keep_alive")
async def test_a_stolen_lock_cancels_a_decorated_async_job(
    async_client: AsyncLockClient, name: str, db: Any, settings: Any
) -> None:
    finished: list[bool] = []

    @async_client.scheduler_lock(name, lock_at_most_for="2s", keep_alive=True)
    async def job() -> None:
        await steal(db, settings.table, name)
        await asyncio.sleep(30)
        finished.append(True)

    with pytest.raises(LockLost):
        await job()
    assert finished == []


@pytest.mark.usefixtures("fast_keep_alive")
async def test_a_cancellation_from_elsewhere_stays_a_cancellation(async_client: AsyncLockClient, name: str) -> None:
    async def body() -> None:
        async with await async_client.acquire(name, "2s", keep_alive=True):
            await asyncio.sleep(30)

    task = asyncio.create_task(body())
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not (await async_client.get(name)).held  # released on the way out


class FlakyExtensions(httpx.BaseTransport):
    """Failure injection: extension requests fail to connect ``failures`` times, everything else goes through."""

    def __init__(self, failures: int) -> None:
        self.real = httpx.HTTPTransport()
        self.failures = failures
        self.extends = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/extend"):
            self.extends += 1
            if self.extends <= self.failures:
                return self.fail(request)
        return self.real.handle_request(request)

    def fail(self, request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    def close(self) -> None:
        self.real.close()


@pytest.mark.usefixtures("fast_keep_alive")
def test_a_network_blip_is_retried_while_the_lease_surely_lives(url: str, name: str) -> None:
    transport = FlakyExtensions(failures=2)
    with LockClient(url, transport=transport) as client, client.acquire(name, "2s", keep_alive=True) as lease:
        time.sleep(3)
        assert transport.extends >= 4  # two failed, then the retries and regular extensions went through
        assert lease.state is LeaseState.HELD
        with pytest.raises(LockHeld):
            client.acquire(name, "2s")


class QuotaExtensions(FlakyExtensions):
    """Extension requests answered 429 rate_limited ``failures`` times, as a server does to a caller over its quota."""

    def fail(self, request: httpx.Request) -> httpx.Response:
        body = {"error": {"code": "rate_limited", "message": "over its quota", "retry_after": 1}}
        return httpx.Response(429, json=body, headers={"Retry-After": "1"}, request=request)


@pytest.mark.usefixtures("fast_keep_alive")
def test_an_extension_over_the_quota_is_retried_not_taken_for_a_lost_lease(url: str, name: str) -> None:
    transport = QuotaExtensions(failures=2)
    with LockClient(url, transport=transport) as client, client.acquire(name, "2s", keep_alive=True) as lease:
        time.sleep(3)
        assert transport.extends >= 4  # two answered 429, then the retries and regular extensions went through
        assert lease.state is LeaseState.HELD
        with pytest.raises(LockHeld):
            client.acquire(name, "2s")
    with LockClient(url, transport=QuotaExtensions(failures=1)) as client:
        lease = client.acquire(name, "2s")
        assert lease is not None
        with pytest.raises(RateLimited):
            lease.extend()
        assert lease.state is LeaseState.HELD  # a 429 says nothing of the lease
        lease.release()


@pytest.mark.usefixtures("fast_keep_alive")
def test_a_service_down_for_good_loses_the_lease_before_it_runs_out(url: str, name: str) -> None:
    transport = FlakyExtensions(failures=1000)
    seen: list[LockLost] = []
    with LockClient(url, transport=transport) as client:
        started = time.monotonic()
        with client.acquire(name, "2s", keep_alive=True, on_lost=seen.append) as lease:
            while not seen and time.monotonic() - started < 5:
                time.sleep(0.05)
            lost_after = time.monotonic() - started
        assert lease.state is LeaseState.LOST and lost_after < 2  # declared lost before lock_until passed
        assert isinstance(seen[0].__cause__, ServiceUnreachable)
