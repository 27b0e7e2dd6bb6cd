"""SchedlockLockProvider (integrations/java) under ShedLock 7's own DefaultLockingTaskExecutor and
KeepAliveLockProvider, against a live server: skipped only when held, every other failure thrown.

The scenarios run in tests/system/integrations/java/shedlock7's Driver, one JVM for the module."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.polyglot import SECRET, token_config
from tests.support.servers import (
    LiveServer,
    free_port,
    server_env,
    serving_tokens,
    spawn_server,
    stop_server,
    wait_for,
)
from tests.support.shedlock_provider import Driver, acquire, build, lock_runs, when
from tests.support.shedlock_provider import lock_row as lock
from tests.support.tokens import Token


@pytest.fixture(scope="module")
def driver() -> Iterator[Driver]:
    program = Driver(build().java("shedlock7", "dev.schedlock.it.Driver"))
    yield program
    program.close()


def test_a_run_holds_the_lock_and_sees_its_fencing_token(driver: Driver, live_server: LiveServer, name: str) -> None:
    run = driver.send("run", live_server.url, name, 60_000, 0)
    assert run["executed"] and run["assert_locked"], run
    assert " pid " in str(run["locked_by"]), "the default holder is the host name and the JVM's pid"
    assert run["lease_after"] is False, "the lease is no longer current once the task has ended"
    assert lock(live_server, name)["held"] is False, "released after the task"
    [history] = lock_runs(live_server, name)
    assert history["fencing_token"] == run["fencing_token"] and history["outcome"] == "released"
    assert history["locked_by"] == run["locked_by"]
    outside = driver.send("outside")
    assert outside == {"fencing_threw": True, "assert_threw": True}


def test_a_held_lock_skips_the_run_without_an_error(driver: Driver, live_server: LiveServer, name: str) -> None:
    held = acquire(live_server, name, holder="another node")
    assert held.status_code == 200
    run = driver.send("run", live_server.url, name, 60_000, 0)
    assert run == {"executed": False, "lease_after": False}
    contend = driver.send("contend", live_server.url, f"{name}-c")
    assert contend == {"first_executed": True, "second_executed": False}


def test_lock_at_least_for_is_kept_after_a_fast_task(driver: Driver, live_server: LiveServer, name: str) -> None:
    assert driver.send("run", live_server.url, name, 120_000, 60_000)["executed"]
    refused = acquire(live_server, name)
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "lock_held"
    row = lock(live_server, name)
    kept = (when(str(row["lock_until"])) - when(str(row["locked_at"]))).total_seconds()
    assert abs(kept - 60) < 0.01, f"lock_until is locked_at + lockAtLeastFor by the database's clock: {kept}"


def test_extend_gives_a_new_lock_and_spends_the_old_one(driver: Driver, live_server: LiveServer, name: str) -> None:
    extend = driver.send("extend", live_server.url, name)
    assert extend["extended"] and extend["same_lease"] and not extend["old_lock_usable"], extend
    assert (when(extend["after"]) - when(extend["before"])).total_seconds() > 50
    assert extend["lease_after_unlock"] is False
    assert (when(extend["task_after"]) - when(extend["task_before"])).total_seconds() > 80, "LockExtender"
    assert lock(live_server, name)["held"] is False
    assert [r["outcome"] for r in lock_runs(live_server, name)] == ["released", "released"]
    expired = driver.send("extend-expired", live_server.url, f"{name}-x")
    assert expired == {"extended": False, "lease_after": False}, "an expired lease is not extended (as in ShedLock)"


def test_keep_alive_holds_a_lock_past_lock_at_most_for(driver: Driver, live_server: LiveServer, name: str) -> None:
    kept = driver.send("keepalive", live_server.url, name)
    assert kept["rival_acquired"] is False, "a rival node got the lock while the task ran past lockAtMostFor"
    assert (when(kept["end_until"]) - when(kept["start_until"])).total_seconds() > 1
    [history] = lock_runs(live_server, name)
    assert history["outcome"] == "released" and history["fencing_token"] == kept["fencing_token"]
    assert int(str(history["duration_ms"])) > 3000, "the task ran longer than lockAtMostFor (2 s)"


#: One request per 4 s, none saved up: a keep-alive extending every 3 s is over it (docs/auth.md#quotas).
TIGHT = Token("tight", rate=0.25, burst=1)
#: Two requests at once, then one per 4 s.
SPENT = Token("spent", rate=0.25, burst=2)
ADMIN = Token("ops", admin=True)


@pytest.fixture(scope="module")
def quota_server(settings: Settings) -> Iterator[LiveServer]:
    with serving_tokens(settings, TIGHT, SPENT, ADMIN) as server:
        yield server


def admin_runs(server: LiveServer, name: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{server.url}/v1/locks/{name}/runs", headers=ADMIN.headers, timeout=10)
    assert response.status_code == 200, response.text
    items: list[dict[str, Any]] = response.json()["items"]
    return items


def test_keep_alive_rides_out_429s_of_a_tight_quota(driver: Driver, quota_server: LiveServer, name: str) -> None:
    """A 429 on an extension is no verdict on the lease: retried after Retry-After while the lease lives, so a task
    runs 9 s under a 6 s lock whose every extension meets a 429 first, and a rival never gets the lock."""
    kept = driver.send("keepalive-quota", quota_server.url, TIGHT.secret, ADMIN.secret, name)
    assert kept["lost"] is False and kept["rival_acquired"] is False, kept
    assert (when(kept["end_until"]) - when(kept["start_until"])).total_seconds() > 2, kept
    [history] = admin_runs(quota_server, name)
    # One run, this lease's. Its release may have met a 429 with no time left to wait it out (the other test).
    assert history["fencing_token"] == kept["fencing_token"], history
    limited = httpx.get(f"{quota_server.url}/metrics", headers=ADMIN.headers, timeout=10).text
    assert 'schedlock_rate_limited_total{principal="tight"}' in limited, "no extension met a 429: not tested"


def test_over_its_quota_an_acquire_skips_and_a_release_waits(
    driver: Driver, quota_server: LiveServer, name: str
) -> None:
    """429 on acquire: the run is skipped (logged), not thrown; 429 on release: retried after Retry-After within the
    lease, so the lock is released, not left to expire."""
    over = driver.send("quota", quota_server.url, SPENT.secret, name)
    assert over["held_skipped"] is True and over["threw"] is None and over["over_quota_ran"] is False, over
    assert over["release_ms"] >= 900, f"the release met no 429: {over}"
    [history] = admin_runs(quota_server, name)
    assert history["outcome"] == "released", history
    assert admin_runs(quota_server, f"{name}-2") == []


def test_a_task_that_throws_releases_the_lock(driver: Driver, live_server: LiveServer, name: str) -> None:
    run = driver.send("run", live_server.url, name, 60_000, 0, "throw")
    assert run["executed"] and run["thrown"] == "the task failed" and run["lease_after"] is False
    assert lock(live_server, name)["held"] is False
    assert acquire(live_server, name).status_code == 200


def test_service_down_throws_instead_of_skipping(driver: Driver, name: str) -> None:
    down = driver.send("failure", f"http://127.0.0.1:{free_port()}", name)
    assert down["threw"] == "SchedlockException" and down["lock_exception"], down
    assert down["status"] == 0 and down["task_ran"] is False


def test_a_refused_request_throws_instead_of_skipping(driver: Driver, live_server: LiveServer) -> None:
    refused = driver.send("failure", live_server.url, "n" * 65)  # longer than ShedLock's VARCHAR(64)
    assert refused["threw"] == "SchedlockException" and refused["task_ran"] is False
    assert refused["status"] == 422 and refused["code"] == "invalid_request", refused


@pytest.fixture(scope="module")
def broken_server(settings: Settings) -> Iterator[LiveServer]:
    """A server that requires an API token (the polyglot tests' token: names under "poly.") and whose table does
    not exist: it is up, it checks tokens, and every lock operation past them answers 503."""
    other = settings.model_copy(update={"table": f"{settings.table_schema}.never_migrated"})
    port = free_port()
    env = server_env(other, {"SCHEDLOCK_TOKENS": token_config()})
    server = spawn_server([sys.executable, "-m", "app", "serve", "--port", str(port)], env, port)
    wait_for(server, "/healthz")
    yield server
    stop_server(server)


def test_503_throws_instead_of_skipping(driver: Driver, broken_server: LiveServer) -> None:
    name = f"poly.{uuid.uuid4().hex[:12]}"
    unavailable = driver.send("token-failure", broken_server.url, SECRET, name)
    assert unavailable["threw"] == "SchedlockException" and unavailable["task_ran"] is False
    assert unavailable["status"] == 503 and unavailable["code"] == "storage_unavailable", unavailable


def test_the_api_token_is_sent_and_a_refused_one_throws(driver: Driver, broken_server: LiveServer) -> None:
    name = f"poly.{uuid.uuid4().hex[:12]}"
    wrong = driver.send("token-failure", broken_server.url, "not-the-secret", name)
    assert wrong["status"] == 401 and wrong["code"] == "unauthorized" and wrong["task_ran"] is False, wrong
    outside = driver.send("token-failure", broken_server.url, SECRET, "elsewhere.job")
    assert outside["status"] == 403 and outside["code"] == "forbidden" and outside["task_ran"] is False, outside
    # The right token gets past authentication, to the missing table (the test above): so it was sent.
    assert driver.send("token-failure", broken_server.url, SECRET, name)["status"] == 503


def test_once_per_slot_skips_a_completed_tick_and_reruns_a_failed_one(
    driver: Driver, live_server: LiveServer, name: str
) -> None:
    first = driver.send("slot", live_server.url, name, "batch-1")
    assert first["executed"] and first["slot"] == "batch-1"
    assert driver.send("slot", live_server.url, name, "batch-1") == {"executed": False, "lease_after": False}
    assert driver.send("slot", live_server.url, name, "batch-2")["executed"], "a new tick runs"
    failed = driver.send("slot", live_server.url, f"{name}-f", "batch-1", "fail")
    assert failed["executed"] and failed["thrown"] == "the task failed"
    assert driver.send("slot", live_server.url, f"{name}-f", "batch-1")["executed"], "a failed tick stays open"
    assert not driver.send("slot", live_server.url, f"{name}-f", "batch-1")["executed"]
    tick = driver.send("once-per", live_server.url, f"{name}-o")
    assert tick["executed"] and str(tick["slot"]).endswith(":00.000Z"), tick
