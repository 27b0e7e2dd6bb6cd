"""Run history: every acquisition, through the API or by a Java node's own SQL, becomes a run, and each way a lease
can end is recorded as docs/history.md defines it."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.api import acquire, extend, release, seconds
from tests.support.apps import in_process
from tests.support.java import JavaNode
from tests.support.tokens import Token, with_tokens


async def runs_of(client: httpx.AsyncClient, name: str) -> list[dict[str, Any]]:
    r = await client.get(f"/v1/locks/{name}/runs")
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def only_run(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    (run,) = await runs_of(client, name)
    return run


async def test_an_acquisition_is_a_running_run(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m", holder="host-3")).json()
    run = await only_run(client, name)
    assert run["fencing_token"] == lease["fencing_token"]
    assert run["locked_by"] == lease["locked_by"] and run["locked_by"].startswith("host-3 [schedlock")
    assert run["acquired_at"] == lease["locked_at"] and run["lock_until"] == lease["lock_until"]
    assert run["outcome"] == "running" and run["ended_at"] is None
    assert run["source"] == "api" and run["token_name"] is None and run["skipped"] == 0
    assert run["forced_by"] is None and run["force_reason"] is None
    assert 0 <= run["duration_ms"] < 5000


async def test_a_release_ends_the_run_at_the_release(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    await asyncio.sleep(0.05)
    released = (await release(client, name, lease["token"])).json()
    run = await only_run(client, name)
    assert run["outcome"] == "released"
    assert run["ended_at"] == released["lock_until"] == released["db_time"]
    # from the database's microseconds, where the times shown are rounded to milliseconds
    assert abs(run["duration_ms"] - seconds(run["acquired_at"], run["ended_at"]) * 1000) <= 1
    assert run["duration_ms"] >= 50
    assert (await release(client, name, lease["token"])).status_code == 200  # idempotent: the run is unchanged
    assert await only_run(client, name) == {**run}


async def test_a_release_inside_the_at_least_window_ends_the_run_but_keeps_lock_until(
    client: httpx.AsyncClient, name: str
) -> None:
    lease = (await acquire(client, name, "10m", lock_at_least_for="1m")).json()
    released = (await release(client, name, lease["token"])).json()
    run = await only_run(client, name)
    assert run["outcome"] == "released" and run["ended_at"] == released["db_time"]
    assert run["lock_until"] == released["lock_until"]
    assert seconds(run["acquired_at"], run["lock_until"]) == pytest.approx(60, abs=0.002)
    assert run["duration_ms"] < 5000  # the job's time, not the window's


async def test_an_extension_moves_lock_until(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "1m")).json()
    extended = (await extend(client, name, lease["token"], "20m")).json()
    run = await only_run(client, name)
    assert run["outcome"] == "running" and run["lock_until"] == extended["lock_until"]
    shorter = (await extend(client, name, lease["token"], "5m")).json()  # an extension may also shorten
    assert (await only_run(client, name))["lock_until"] == shorter["lock_until"]


async def test_a_lapsed_lease_reads_as_expired_at_its_lock_until(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    run = await only_run(client, name)
    assert run["outcome"] == "expired"
    assert run["ended_at"] == run["lock_until"] == lease["lock_until"]
    assert run["duration_ms"] == 100


async def test_a_late_release_leaves_the_run_expired(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    assert (await release(client, name, lease["token"])).status_code == 200  # nobody took it: allowed
    run = await only_run(client, name)
    assert run["outcome"] == "expired" and run["ended_at"] == lease["lock_until"]
    await acquire(client, name, "10m")
    assert (await runs_of(client, name))[1]["outcome"] == "expired", "a released run is not taken over"


async def test_a_takeover_ends_the_previous_run_as_taken_over(client: httpx.AsyncClient, name: str) -> None:
    old = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    new = (await acquire(client, name, "10m")).json()
    latest, previous = await runs_of(client, name)
    assert latest["fencing_token"] == new["fencing_token"] and latest["outcome"] == "running"
    assert previous["fencing_token"] == old["fencing_token"]
    assert previous["outcome"] == "taken_over" and previous["ended_at"] == old["lock_until"]
    assert (await release(client, name, old["token"])).status_code == 409
    assert (await runs_of(client, name))[1]["outcome"] == "taken_over"


async def test_concurrent_acquires_start_exactly_one_run(client: httpx.AsyncClient, name: str) -> None:
    answers = await asyncio.gather(*(acquire(client, name, "10m") for _ in range(20)))
    assert sorted(r.status_code for r in answers) == [200] + [409] * 19
    (run,) = await runs_of(client, name)
    assert run["fencing_token"] == next(r.json()["fencing_token"] for r in answers if r.status_code == 200)


async def test_concurrent_takeovers_start_exactly_one_run(client: httpx.AsyncClient, name: str) -> None:
    old = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    answers = await asyncio.gather(*(acquire(client, name, "10m") for _ in range(20)))
    assert sorted(r.status_code for r in answers) == [200] + [409] * 19
    latest, previous = await runs_of(client, name)
    assert latest["outcome"] == "running" and previous["fencing_token"] == old["fencing_token"]
    assert previous["outcome"] == "taken_over"


async def test_the_token_name_is_recorded(settings: Settings, name: str) -> None:
    jobs = Token("jobs", prefixes=("job-",))
    async with in_process(with_tokens(settings, jobs)) as (_, client):
        client.headers.update(jobs.headers)
        # A holder cannot pass itself off as another token: the suffix schedlock appends is the one read.
        lease = (await acquire(client, name, "10m", holder="job [schedlock via admin lease 0]")).json()
        run = await only_run(client, name)
        assert run["token_name"] == "jobs" and run["source"] == "api"
        assert run["locked_by"] == lease["locked_by"]


async def test_a_java_acquisition_and_unlock_are_a_run(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    assert await java.insert_or_take_over(name, 600.0)
    row = await java.row(name)
    run = await only_run(client, name)
    assert run["source"] == "table" and run["locked_by"] == "java-host-1" and run["token_name"] is None
    assert run["fencing_token"] == row["fencing_token"] and run["outcome"] == "running"
    assert seconds(run["acquired_at"], run["lock_until"]) == pytest.approx(600, abs=0.002)
    assert await java.unlock(name, 0.0)
    run = await only_run(client, name)
    assert run["outcome"] == "released" and run["ended_at"] == run["lock_until"]


async def test_a_java_unlock_with_an_at_least_window(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 600.0)
    await java.unlock(name, 60.0)
    run = await only_run(client, name)
    assert run["outcome"] == "released"
    assert seconds(run["acquired_at"], run["lock_until"]) == pytest.approx(60, abs=0.002)
    assert seconds(run["acquired_at"], run["ended_at"]) < 5


async def test_a_java_unlock_whose_window_equals_its_lease(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    # lockAtLeastFor == lockAtMostFor: the unlock changes no value, and is still an unlock.
    await java.insert_or_take_over(name, 60.0)
    assert await java.unlock(name, 60.0)
    assert (await only_run(client, name))["outcome"] == "released"


async def test_a_java_extension_moves_lock_until(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 60.0)
    assert await java.extend(name, 600.0)
    run = await only_run(client, name)
    assert run["outcome"] == "running"
    assert seconds(run["acquired_at"], run["lock_until"]) == pytest.approx(600, abs=1)


async def test_a_java_takeover_of_an_expired_http_lease(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    old = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    assert await java.take_over(name, 600.0)
    latest, previous = await runs_of(client, name)
    assert latest["source"] == "table" and latest["outcome"] == "running"
    assert previous["fencing_token"] == old["fencing_token"] and previous["outcome"] == "taken_over"


async def test_an_http_takeover_of_an_expired_java_lock(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 0.1)
    await asyncio.sleep(0.2)
    assert (await only_run(client, name))["outcome"] == "expired"
    assert (await acquire(client, name, "10m")).status_code == 200
    latest, previous = await runs_of(client, name)
    assert latest["source"] == "api" and previous["source"] == "table" and previous["outcome"] == "taken_over"
    assert not await java.unlock(name, 0.0)  # locked_by differs: Java's unlock matches nothing
    assert (await runs_of(client, name))[0]["outcome"] == "running"


async def test_a_java_unlock_after_its_lease_expired_is_late(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    await java.insert_or_take_over(name, 0.1)
    await asyncio.sleep(0.2)
    assert await java.unlock(name, 0.0)
    run = await only_run(client, name)
    assert run["outcome"] == "expired" and run["ended_at"] == run["lock_until"]
    assert seconds(run["acquired_at"], run["ended_at"]) == pytest.approx(0.1, abs=0.002)


async def test_a_refused_acquire_writes_no_run(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await acquire(client, name, "10m")
    for _ in range(3):
        assert (await acquire(client, name, "10m")).status_code == 409
        assert not await java.insert_or_take_over(name, 600.0)
        assert not await java.take_over(name, 600.0)
    assert len(await runs_of(client, name)) == 1


class _Abort(Exception):
    pass


async def test_a_run_is_written_in_the_lock_changes_transaction(
    db: Any, settings: Settings, client: httpx.AsyncClient, name: str
) -> None:
    runs = f'"{settings.table_schema}"."{settings.table_name}_runs"'
    with pytest.raises(_Abort):
        async with db.acquire() as conn, conn.transaction():
            assert await JavaNode(conn, settings.table, hostname="java-host-9").insert_or_take_over(name, 600.0)
            assert await conn.fetchval(f"SELECT count(*) FROM {runs} WHERE name = $1", name) == 1
            raise _Abort  # the acquisition is rolled back, and its run with it
    assert await JavaNode(db, settings.table, hostname="java-host-9").row(name) is None
    assert await runs_of(client, name) == []
