"""LockClient and AsyncLockClient against a real server process on a real Postgres."""

from __future__ import annotations

import logging
import os
import socket
import time
from datetime import timedelta
from typing import Any

import httpx
import pytest

import schedlock._base as base
from schedlock import (
    AsyncLockClient,
    LeaseState,
    LockClient,
    LockHeld,
    LockInfo,
    NotHolder,
    NotLocked,
    ServiceUnreachable,
)


def test_acquire_get_release(sync_client: LockClient, name: str) -> None:
    lease = sync_client.acquire(name, "1m", holder="report job")
    assert lease.name == name and lease.state is LeaseState.HELD
    assert lease.locked_by.startswith("report job [schedlock")
    assert timedelta(seconds=59) <= lease.lock_until - lease.locked_at <= timedelta(seconds=61)
    info = sync_client.get(name)
    assert isinstance(info, LockInfo)
    assert info.held and info.locked_by == lease.locked_by and info.fencing_token == lease.fencing_token
    released = lease.release()
    assert lease.state is LeaseState.RELEASED and released.lock_until == lease.lock_until
    assert not sync_client.get(name).held


def test_a_held_lock_says_who_holds_it_and_until_when(sync_client: LockClient, name: str) -> None:
    first = sync_client.acquire(name, "1m", holder="node-a")
    with pytest.raises(LockHeld) as held:
        sync_client.acquire(name, "1m", holder="node-b")
    assert held.value.locked_by == first.locked_by
    assert held.value.lock_until == first.lock_until
    assert "node-a" in str(held.value)
    first.release()


def test_the_context_manager_releases_when_the_body_raises(sync_client: LockClient, name: str) -> None:
    with pytest.raises(RuntimeError, match="job failed"), sync_client.acquire(name, "10m") as lease:
        raise RuntimeError("job failed")
    assert lease.state is LeaseState.RELEASED
    assert not sync_client.get(name).held
    sync_client.acquire(name, "10m").release()  # and someone else can take it at once


def test_release_honours_lock_at_least_for(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "1m", lock_at_least_for="3s") as lease:
        pass
    assert lease.lock_until - lease.locked_at == timedelta(seconds=3)
    with pytest.raises(LockHeld):
        sync_client.acquire(name, "1m")


def test_extend_moves_lock_until_and_a_released_lease_cannot_be_extended(sync_client: LockClient, name: str) -> None:
    lease = sync_client.acquire(name, "10s")
    before = lease.lock_until
    extended = lease.extend("1m")
    assert extended.lock_until == lease.lock_until > before
    assert sync_client.get(name).lock_until == lease.lock_until
    lease.release()
    with pytest.raises(NotLocked):
        lease.extend()
    with pytest.raises(NotHolder):
        sync_client.extend(name, lease.token, "1m")


def test_release_is_idempotent(sync_client: LockClient, name: str) -> None:
    lease = sync_client.acquire(name, "1m")
    first = sync_client.release(name, lease.token)
    assert sync_client.release(name, lease.token).lock_until == first.lock_until
    # The lease did not see those releases; the server answers its own 200 again.
    assert lease.release().lock_until == first.lock_until
    assert lease.state is LeaseState.RELEASED


def test_fencing_tokens_increase_with_every_acquisition(sync_client: LockClient, name: str) -> None:
    tokens = []
    for _ in range(3):
        with sync_client.acquire(name, "1m") as lease:
            tokens.append(lease.fencing_token)
    assert tokens == sorted(set(tokens))


def test_list_and_iterate_pages(sync_client: LockClient, name: str) -> None:
    names = [f"{name}.{i}" for i in range(5)]
    leases = [sync_client.acquire(n, "1m") for n in names[:3]]
    for n in names[3:]:
        sync_client.acquire(n, "1m").release()
    page = sync_client.list(prefix=f"{name}.", limit=2)
    assert [lock.name for lock in page.items] == names[:2] and page.next_cursor
    assert [lock.name for lock in sync_client.iter_locks(prefix=f"{name}.", page_size=2)] == names
    assert [lock.name for lock in sync_client.iter_locks(prefix=f"{name}.", held=True)] == names[:3]
    assert [lock.name for lock in sync_client.iter_locks(prefix=f"{name}.", held=False)] == names[3:]
    for lease in leases:
        lease.release()


def test_default_holder_names_host_and_process(sync_client: LockClient, name: str) -> None:
    with sync_client.acquire(name, "1m") as lease:
        assert lease.locked_by.startswith(f"{socket.gethostname()} pid {os.getpid()} [schedlock")


def test_url_and_token_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, url: str, name: str) -> None:
    monkeypatch.setenv("SCHEDLOCK_URL", url)
    monkeypatch.setenv("SCHEDLOCK_TOKEN", "api-secret-123")
    seen: list[httpx.Request] = []
    with httpx.Client(event_hooks={"request": [seen.append]}) as http, LockClient(http_client=http) as client:
        assert client.base_url == url
        client.acquire(name, "1m").release()
    assert [r.headers["authorization"] for r in seen] == ["Bearer api-secret-123"] * 2
    assert "api-secret-123" not in repr(client)


def test_secrets_never_reach_logs_or_reprs(
    caplog: pytest.LogCaptureFixture, url: str, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.DEBUG)
    with LockClient(url, token="api-secret-456") as client, client.acquire(name, "1m") as lease:
        lease.extend()
        with pytest.raises(LockHeld):
            client.acquire(name, "1m")
        shown = f"{lease!r} {vars(lease)!r} {client!r}"  # and what the lease keeps
    for secret in (lease.token, "api-secret-456"):
        assert secret not in caplog.text and secret not in shown


def test_an_unreachable_service_is_reported_fast_and_as_unreachable(dead_url: str, name: str) -> None:
    started = time.monotonic()
    with LockClient(dead_url) as client, pytest.raises(ServiceUnreachable, match="cannot reach"):
        client.acquire(name, "1m")
    assert time.monotonic() - started < 5


class LoseReleaseAnswers(httpx.BaseTransport):
    """Failure injection a real server cannot produce: the release reaches the server, its answer is lost."""

    def __init__(self, lose: int) -> None:
        self.real = httpx.HTTPTransport()
        self.lose = lose
        self.releases = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.real.handle_request(request)
        if request.url.path.endswith("/release"):
            self.releases += 1
            response.read()
            if self.releases <= self.lose:
                raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def close(self) -> None:
        self.real.close()


def test_release_retries_when_the_answer_is_lost(url: str, name: str) -> None:
    transport = LoseReleaseAnswers(lose=2)
    with LockClient(url, transport=transport) as client:
        with client.acquire(name, "1m") as lease:
            pass
        assert lease.state is LeaseState.RELEASED
        assert transport.releases == 3  # the first two did release; the server answered the third with 200 again
        assert not client.get(name).held


def test_a_release_that_keeps_failing_is_logged_not_raised(
    url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    transport = LoseReleaseAnswers(lose=100)
    with LockClient(url, transport=transport) as client:
        with client.acquire(name, "1m") as lease:
            pass
        assert transport.releases == 4  # one try and three retries
        assert lease.state is LeaseState.HELD
        assert "could not release lock" in caplog.text


def rate_limited(request: httpx.Request, retry_after: int) -> httpx.Response:
    """The answer the server gives a caller over its quota (app/auth/quotas.py)."""
    body = {"error": {"code": "rate_limited", "message": "over quota", "retry_after": retry_after}}
    return httpx.Response(429, json=body, headers={"Retry-After": str(retry_after)}, request=request)


class RateLimitReleases(httpx.BaseTransport):
    """Answers the first ``limit`` releases 429 rate_limited with ``Retry-After`` (not sent on), then the server's."""

    def __init__(self, limit: int, retry_after: int = 1) -> None:
        self.real = httpx.HTTPTransport()
        self.limit, self.retry_after = limit, retry_after
        self.releases = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/release"):
            self.releases += 1
            if self.releases <= self.limit:
                return rate_limited(request, self.retry_after)
        return self.real.handle_request(request)

    def close(self) -> None:
        self.real.close()


def test_a_release_answered_429_is_sent_again_after_retry_after(
    url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A 429 is no verdict on the lease: the release waits the service's Retry-After and frees the lock, rather
    than leaving it held until lock_at_most_for."""
    transport = RateLimitReleases(limit=2)
    with LockClient(url, transport=transport) as client:
        with client.acquire(name, "1m") as lease:
            pass
        assert lease.state is LeaseState.RELEASED and transport.releases == 3
        assert not client.get(name).held
    assert caplog.text.count(f"release of {name!r} failed, retrying in 1s: rate_limited (429)") == 2


def test_a_release_429_waits_at_most_a_bounded_time_then_gives_up(
    url: str, name: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(base, "RELEASE_MAX_RETRY_AFTER", 0.3)  # a Retry-After of an hour is waited 0.3 s at a time
    transport = RateLimitReleases(limit=100, retry_after=3600)
    with LockClient(url, transport=transport) as client:
        with client.acquire(name, "1m") as lease:
            pass
        assert transport.releases == 4 and lease.state is LeaseState.HELD  # one try and three retries
    assert caplog.text.count("retrying in 0.3s: rate_limited (429)") == 3 and "could not release lock" in caplog.text


class AsyncLoseReleaseAnswers(httpx.AsyncBaseTransport):
    def __init__(self, lose: int) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.lose = lose
        self.releases = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.real.handle_async_request(request)
        if request.url.path.endswith("/release"):
            self.releases += 1
            await response.aread()
            if self.releases <= self.lose:
                raise httpx.ReadError("connection reset by peer", request=request)
        return response

    async def aclose(self) -> None:
        await self.real.aclose()


async def test_async_release_retries_when_the_answer_is_lost(url: str, name: str) -> None:
    transport = AsyncLoseReleaseAnswers(lose=1)
    async with AsyncLockClient(url, transport=transport) as client:
        async with await client.acquire(name, "1m") as lease:
            pass
        assert lease.state is LeaseState.RELEASED and transport.releases == 2
        assert not (await client.get(name)).held


class AsyncRateLimitReleases(httpx.AsyncBaseTransport):
    def __init__(self, limit: int) -> None:
        self.real = httpx.AsyncHTTPTransport()
        self.limit = limit
        self.releases = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/release"):
            self.releases += 1
            if self.releases <= self.limit:
                return rate_limited(request, 1)
        return await self.real.handle_async_request(request)

    async def aclose(self) -> None:
        await self.real.aclose()


async def test_async_release_answered_429_is_sent_again_after_retry_after(url: str, name: str) -> None:
    transport = AsyncRateLimitReleases(limit=1)
    async with AsyncLockClient(url, transport=transport) as client:
        async with await client.acquire(name, "1m") as lease:
            pass
        assert lease.state is LeaseState.RELEASED and transport.releases == 2
        assert not (await client.get(name)).held


async def test_async_acquire_held_release(async_client: AsyncLockClient, name: str) -> None:
    lease = await async_client.acquire(name, "1m", holder="async node")
    with pytest.raises(LockHeld) as held:
        await async_client.acquire(name, "1m")
    assert held.value.locked_by == lease.locked_by
    assert (await async_client.get(name)).held
    await lease.release()
    assert lease.state is LeaseState.RELEASED
    assert not (await async_client.get(name)).held


async def test_async_context_manager_releases_when_the_body_raises(async_client: AsyncLockClient, name: str) -> None:
    with pytest.raises(ValueError, match="boom"):
        async with await async_client.acquire(name, "10m") as lease:
            raise ValueError("boom")
    assert lease.state is LeaseState.RELEASED
    assert not (await async_client.get(name)).held


async def test_async_extend_list_and_iterate(async_client: AsyncLockClient, name: str) -> None:
    async with await async_client.acquire(name, "10s") as lease:
        before = lease.lock_until
        await lease.extend("1m")
        assert lease.lock_until > before
        page = await async_client.list(prefix=name)
        assert [lock.name for lock in page.items] == [name]
        assert [lock.name async for lock in async_client.iter_locks(prefix=name, held=True)] == [name]


async def test_async_unreachable(dead_url: str, name: str) -> None:
    async with AsyncLockClient(dead_url) as client:
        with pytest.raises(ServiceUnreachable):
            await client.acquire(name, "1m")


def test_local_mistakes_fail_before_any_request(sync_client: LockClient) -> None:
    bad: list[tuple[Any, ...]] = [("x", "10 minutes"), ("x", "0s"), ("x", "1m", "2m"), ("", "1m"), ("a/b", "1m")]
    for args in bad:
        with pytest.raises(ValueError):
            sync_client.acquire(*args)
