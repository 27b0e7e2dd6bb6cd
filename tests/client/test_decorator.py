"""scheduler_lock: skip when held, run under the lock otherwise, and the service-down policy."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Iterator

import pytest

from app.settings import Settings
from schedlock import (
    AsyncLockClient,
    InvalidRequest,
    LockClient,
    NotLocked,
    OnUnavailable,
    ServiceUnreachable,
    StorageUnavailable,
    assert_locked,
)
from tests.support.servers import LiveServer, free_port, server_env, spawn_server, stop_server, wait_for


@pytest.fixture(scope="module")
def unmigrated_server(settings: Settings) -> Iterator[LiveServer]:
    """A real server whose table was never migrated: every lock call answers 503 storage_unavailable."""
    port = free_port()
    env = server_env(settings, {"SCHEDLOCK_TABLE": f"{settings.table_schema}.nothing"})
    server = spawn_server([sys.executable, "-m", "app", "serve", "--port", str(port)], env, port)
    try:
        wait_for(server, "/healthz")  # /readyz stays 503 here, by design
        yield server
    finally:
        stop_server(server)


def test_the_job_runs_under_the_lock_and_returns_its_value(sync_client: LockClient, name: str) -> None:
    @sync_client.scheduler_lock(name, lock_at_most_for="1m")
    def job(x: int) -> int:
        assert_locked()
        assert_locked(name)
        assert sync_client.get(name).held
        return x * 2

    assert job(21) == 42
    assert not sync_client.get(name).held  # released after the run
    assert job.__name__ == "job"


def test_the_job_is_skipped_when_held_and_the_holder_is_logged(
    sync_client: LockClient, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[int] = []

    @sync_client.scheduler_lock(name, lock_at_most_for="1m")
    def job() -> str:
        calls.append(1)
        return "ran"

    caplog.set_level(logging.INFO, logger="schedlock.client")
    with sync_client.acquire(name, "1m", holder="billing on host-7") as other:
        assert job() is None
    assert calls == []
    [record] = [r for r in caplog.records if r.name == "schedlock.client"]
    assert record.levelno == logging.INFO
    assert "skipped" in record.getMessage() and other.locked_by in record.getMessage()
    assert job() == "ran"  # free again


def test_lock_at_least_for_skips_a_second_run_right_after(sync_client: LockClient, name: str) -> None:
    runs: list[int] = []

    @sync_client.scheduler_lock(name, lock_at_most_for="1m", lock_at_least_for="30s")
    def job() -> None:
        runs.append(1)

    job()
    job()
    assert runs == [1]


def test_an_exception_in_the_job_propagates_and_releases(sync_client: LockClient, name: str) -> None:
    @sync_client.scheduler_lock(name, lock_at_most_for="10m")
    def job() -> None:
        raise KeyError("bad data")

    with pytest.raises(KeyError):
        job()
    assert not sync_client.get(name).held


def test_assert_locked_outside_and_for_another_name(sync_client: LockClient, name: str) -> None:
    with pytest.raises(NotLocked):
        assert_locked()
    with sync_client.acquire(name, "1m"):
        assert_locked(name)
        with pytest.raises(NotLocked):
            assert_locked("some-other-job")
    with pytest.raises(NotLocked):
        assert_locked(name)


async def test_async_jobs_run_and_skip(async_client: AsyncLockClient, name: str) -> None:
    @async_client.scheduler_lock(name, lock_at_most_for="1m")
    async def job() -> str:
        assert_locked(name)
        # Tasks the job starts inherit its lease.
        await asyncio.create_task(asyncio.to_thread(lambda: None))
        await asyncio.create_task(_check_locked(name))
        return "ran"

    assert await job() == "ran"
    async with await async_client.acquire(name, "1m"):
        assert await job() is None
    assert await job() == "ran"


async def _check_locked(name: str) -> None:
    assert_locked(name)


async def test_concurrent_async_runs_exactly_one_wins(async_client: AsyncLockClient, name: str) -> None:
    started: list[int] = []

    @async_client.scheduler_lock(name, lock_at_most_for="1m")
    async def job(i: int) -> int:
        started.append(i)
        await asyncio.sleep(0.5)
        return i

    results = await asyncio.gather(*(job(i) for i in range(8)))
    assert len(started) == 1 and [r for r in results if r is not None] == started


def test_sync_and_async_clients_refuse_the_other_kind(sync_client: LockClient, url: str) -> None:
    async def async_job() -> None: ...

    def sync_job() -> None: ...

    with pytest.raises(TypeError, match="AsyncLockClient"):
        sync_client.scheduler_lock("x", "1m")(async_job)
    with pytest.raises(TypeError, match="LockClient"):
        AsyncLockClient(url).scheduler_lock("x", "1m")(sync_job)  # type: ignore[arg-type]


# --- the service-down policy ---------------------------------------------------------------------------------


def test_fail_closed_is_the_default_skips_logs_an_error_and_raises_nothing(
    dead_url: str, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    runs: list[int] = []
    with LockClient(dead_url) as client:

        @client.scheduler_lock(name, lock_at_most_for="1m")
        def job() -> str:
            runs.append(1)
            return "ran"

        assert job() is None
    assert runs == []
    [record] = [r for r in caplog.records if r.name == "schedlock.client"]
    assert record.levelno == logging.ERROR and "fail-closed" in record.getMessage()


def test_fail_open_runs_without_a_lock_and_warns(dead_url: str, name: str, caplog: pytest.LogCaptureFixture) -> None:
    with LockClient(dead_url, on_unavailable="fail-open") as client:

        @client.scheduler_lock(name, lock_at_most_for="1m")
        def job() -> str:
            with pytest.raises(NotLocked):
                assert_locked()  # there is no lease to vouch for this run
            return "ran"

        assert job() == "ran"
    [record] = [r for r in caplog.records if r.name == "schedlock.client"]
    assert record.levelno == logging.WARNING and "WITHOUT the lock" in record.getMessage()


def test_raise_policy_raises_service_unavailable(dead_url: str, name: str) -> None:
    with LockClient(dead_url) as client:

        @client.scheduler_lock(name, lock_at_most_for="1m", on_unavailable=OnUnavailable.RAISE)
        def job() -> str:
            return "ran"

        with pytest.raises(ServiceUnreachable):
            job()


def test_a_503_from_a_real_server_follows_the_policy_too(unmigrated_server: LiveServer, name: str) -> None:
    with LockClient(unmigrated_server.url) as client:

        @client.scheduler_lock(name, lock_at_most_for="1m")
        def closed() -> str:
            return "ran"

        @client.scheduler_lock(name, lock_at_most_for="1m", on_unavailable="fail-open")
        def open_() -> str:
            return "ran"

        @client.scheduler_lock(name, lock_at_most_for="1m", on_unavailable="raise")
        def raising() -> str:
            return "ran"

        assert closed() is None
        assert open_() == "ran"
        with pytest.raises(StorageUnavailable) as error:
            raising()
        assert error.value.retry_after == 1.0


async def test_async_policies(dead_url: str, name: str) -> None:
    async with AsyncLockClient(dead_url) as client:

        @client.scheduler_lock(name, lock_at_most_for="1m")
        async def closed() -> str:
            return "ran"

        @client.scheduler_lock(name, lock_at_most_for="1m", on_unavailable="fail-open")
        async def open_() -> str:
            return "ran"

        @client.scheduler_lock(name, lock_at_most_for="1m", on_unavailable="raise")
        async def raising() -> str:
            return "ran"

        assert await closed() is None
        assert await open_() == "ran"
        with pytest.raises(ServiceUnreachable):
            await raising()


def test_a_rejected_request_raises_whatever_the_policy(url: str) -> None:
    with LockClient(url, on_unavailable="fail-open") as client:

        @client.scheduler_lock("x" * 65, lock_at_most_for="1m")
        def job() -> str:
            return "ran"

        with pytest.raises(InvalidRequest):
            job()
