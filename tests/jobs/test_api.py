"""The jobs API against a real Postgres, with runs made through the API and by a Java node: every tick state and
job state on seconds-level interval schedules, pause and resume, unregistering, bad input (422 naming the field),
pages, and read tokens seeing only the jobs under their prefixes. Waits for real ticks (a few seconds each)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timedelta
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.api import acquire, ts
from tests.support.apps import in_process
from tests.support.java import JavaNode
from tests.support.openapi import check
from tests.support.patience import SETTLE
from tests.support.tokens import Token, with_tokens

#: Tests that wait for real ticks (the database's clock passing them) are system tests; the rest are fast.
waits = pytest.mark.system

STEP = 3  # seconds between ticks of the schedules below (PT3S); a tick's window is [tick - 1 s, next - 1 s)
EARLY = 1.0


async def put(client: httpx.AsyncClient, name: str, **body: Any) -> dict[str, Any]:
    r = await client.put(f"/v1/jobs/{name}", json={"schedule": f"PT{STEP}S", "grace": "1h", **body})
    assert r.status_code == 200, r.text
    job: dict[str, Any] = r.json()
    return job


async def get(client: httpx.AsyncClient, name: str) -> dict[str, Any]:
    r = await client.get(f"/v1/jobs/{name}")
    assert r.status_code == 200, r.text
    job: dict[str, Any] = r.json()
    return job


async def until(client: httpx.AsyncClient, name: str, moment: datetime) -> dict[str, Any]:
    """The job, read once the database's clock has reached ``moment``."""
    deadline = time.monotonic() + SETTLE
    while True:
        job = await get(client, name)
        if ts(job["db_time"]) >= moment or time.monotonic() > deadline:
            assert ts(job["db_time"]) >= moment, "the database's clock did not reach the moment in time"
            return job
        await asyncio.sleep(0.05)


async def next_tick(client: httpx.AsyncClient, name: str) -> datetime:
    """Wait for the job's next tick to be due; its time."""
    tick = ts((await get(client, name))["next_tick"])
    await until(client, name, tick)
    return tick


def tick_of(acquired_at: str) -> datetime:
    """The tick a run acquired then counts for: the latest tick at or before it plus the allowance."""
    at = ts(acquired_at) + timedelta(seconds=EARLY)
    return at - timedelta(seconds=at.timestamp() % STEP)


async def ticks(client: httpx.AsyncClient, name: str, **params: Any) -> dict[datetime, dict[str, Any]]:
    r = await client.get(f"/v1/jobs/{name}/ticks", params={"limit": 100, **params})
    assert r.status_code == 200, r.text
    return {ts(t["tick"]): t for t in r.json()["items"]}


async def cycle(client: httpx.AsyncClient, name: str, **release: Any) -> dict[str, Any]:
    lease: dict[str, Any] = (await acquire(client, name, "1m")).json()
    r = await client.post(f"/v1/locks/{name}/release", json={"token": lease["token"], **release})
    assert r.status_code == 200, r.text
    return lease


@waits
async def test_every_tick_state_from_runs_through_the_api_and_a_java_node(
    client: httpx.AsyncClient, name: str, java: JavaNode
) -> None:
    job = await put(client, name)
    assert job["state"] == "new" and job["last_tick"] is None and job["grace"] == "PT3600S"
    expected: dict[str, tuple[str, int, bool]] = {}  # tick: (state, fencing token, duplicate)

    async def scenario(what: str) -> None:
        """Each scenario runs in a tick of its own: right after one is due."""
        await next_tick(client, name)

    await scenario("completed")
    lease = await cycle(client, name)
    expected[lease["locked_at"]] = ("completed", lease["fencing_token"], False)

    await scenario("failed")
    lease = await cycle(client, name, completed=False)
    expected[lease["locked_at"]] = ("failed", lease["fencing_token"], False)

    await scenario("force-released")
    lease = (await acquire(client, name, "1m")).json()
    r = await client.post(f"/v1/locks/{name}/force-release", json={"reason": "stuck"})
    assert r.status_code == 200 and r.json()["forced"]
    expected[lease["locked_at"]] = ("failed", lease["fencing_token"], False)

    await scenario("timed out")
    lease = (await acquire(client, name, "300ms")).json()  # left to expire
    expected[lease["locked_at"]] = ("timed_out", lease["fencing_token"], False)

    await scenario("duplicate")
    first = await cycle(client, name)
    second = await cycle(client, name)
    assert tick_of(first["locked_at"]) == tick_of(second["locked_at"]), "both runs must fall in one tick"
    expected[second["locked_at"]] = ("completed", second["fencing_token"], True)

    await scenario("java")
    assert await java.insert_or_take_over(name, 60.0)
    java_row = await java.row(name)
    assert await java.unlock(name, 0.0)
    expected[java_row["locked_at"].isoformat(timespec="milliseconds") + "Z"] = (
        "completed",
        java_row["fencing_token"],
        False,
    )

    await scenario("running")
    lease = (await acquire(client, name, "10m")).json()
    expected[lease["locked_at"]] = ("running", lease["fencing_token"], False)

    found = await ticks(client, name)
    for acquired_at, (state, token, duplicate) in expected.items():
        tick = found[tick_of(acquired_at)]
        assert (tick["state"], tick["run"]["fencing_token"], tick["duplicate"]) == (state, token, duplicate), tick
    java_tick = found[tick_of(next(a for a, v in expected.items() if v[1] == java_row["fencing_token"]))]
    assert java_tick["run"]["source"] == "table"
    assert (await get(client, name))["state"] in ("up", "late")  # the running tick, or a newer one waiting


@waits
async def test_up_late_down_and_missed(client: httpx.AsyncClient, name: str) -> None:
    job = await put(client, name, grace="2s")
    for _ in range(5):  # the run's tick must still be the latest when read back
        await next_tick(client, name)
        lease = await cycle(client, name)
        job = await get(client, name)
        if ts(job["last_tick"]["tick"]) == tick_of(lease["locked_at"]):
            break
    assert job["state"] == "up" and job["last_tick"]["state"] == "completed"
    assert job["last_completed_at"] is not None
    # Nobody runs the next tick: late once it is a second past due, down once its grace has passed.
    tick = await next_tick(client, name)
    job = await until(client, name, tick + timedelta(seconds=1.2))
    if ts(job["last_tick"]["tick"]) == tick and ts(job["db_time"]) < tick + timedelta(seconds=2):
        assert job["state"] == "late" and job["last_tick"]["state"] == "pending"
    job = await until(client, name, tick + timedelta(seconds=2.05))
    assert job["state"] == "down"
    assert (await ticks(client, name))[tick]["state"] == "missed"
    r = await client.get("/v1/jobs", params={"prefix": name, "state": "down"})
    assert [j["name"] for j in r.json()["items"]] == [name]
    assert (await client.get("/v1/jobs", params={"prefix": name, "state": "up"})).json()["items"] == []


@waits
async def test_a_paused_job_raises_nothing_and_resumes_from_now(client: httpx.AsyncClient, name: str) -> None:
    await put(client, name, grace="0s")
    tick = await next_tick(client, name)
    assert (await until(client, name, tick + timedelta(milliseconds=100)))["state"] == "down"
    r = await client.post(f"/v1/jobs/{name}/pause")
    assert r.status_code == 200 and r.json()["state"] == "paused" and r.json()["paused"]
    assert (await client.post(f"/v1/jobs/{name}/pause")).json()["state"] == "paused"  # twice: harmless
    await until(client, name, tick + timedelta(seconds=STEP * 2))
    assert (await get(client, name))["state"] == "paused"
    r = await client.post(f"/v1/jobs/{name}/resume")
    assert r.status_code == 200 and r.json()["state"] == "new" and not r.json()["paused"]
    assert ts(r.json()["expected_since"]) > tick + timedelta(seconds=STEP)
    # A PUT that leaves `paused` out keeps it; one that changes nothing changes nothing.
    again = await put(client, name, grace="0s")
    assert again["updated_at"] == r.json()["updated_at"] and again["expected_since"] == r.json()["expected_since"]


@waits
async def test_slotted_runs_failed_then_completed(client: httpx.AsyncClient, name: str) -> None:
    await put(client, name)
    tick = await next_tick(client, name)
    slot = tick.isoformat()
    failed = (await acquire(client, name, "1m", slot=slot)).json()
    r = await client.post(f"/v1/locks/{name}/release", json={"token": failed["token"], "completed": False})
    assert r.json()["completed"] is False
    # A second release saying the opposite changes nothing (the first release decides).
    await client.post(f"/v1/locks/{name}/release", json={"token": failed["token"], "completed": True})
    found = await ticks(client, name)
    assert found[tick_of(failed["locked_at"])]["state"] == "failed"
    done = (await acquire(client, name, "1m", slot=slot)).json()
    await client.post(f"/v1/locks/{name}/release", json={"token": done["token"]})
    tick_view = (await ticks(client, name))[tick_of(done["locked_at"])]
    if tick_of(done["locked_at"]) == tick_of(failed["locked_at"]):
        assert tick_view["runs"] == 2
    assert tick_view["state"] == "completed" and tick_view["run"]["fencing_token"] == done["fencing_token"]


async def test_register_update_and_unregister(client: httpx.AsyncClient, name: str) -> None:
    job = await put(client, name, schedule="0 3 * * *", timezone="Europe/Berlin", description="nightly")
    assert (job["schedule"], job["timezone"], job["description"], job["paused"]) == (
        "0 3 * * *",
        "Europe/Berlin",
        "nightly",
        False,
    )
    assert ts(job["next_tick"]).hour in (1, 2)  # 03:00 in Berlin, in UTC
    changed = await put(client, name, schedule="@hourly")
    assert changed["schedule"] == "0 * * * *" and changed["timezone"] == "UTC"
    assert ts(changed["expected_since"]) > ts(job["expected_since"])
    lease = await cycle(client, name)
    assert (await client.delete(f"/v1/jobs/{name}")).status_code == 204
    r = await client.get(f"/v1/jobs/{name}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "job_not_found"
    assert (await client.delete(f"/v1/jobs/{name}")).status_code == 404
    assert (await client.post(f"/v1/jobs/{name}/pause")).status_code == 404
    assert (await client.get(f"/v1/jobs/{name}/ticks")).status_code == 404
    # The lock and its runs stay.
    runs = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    assert [r["fencing_token"] for r in runs] == [lease["fencing_token"]]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"schedule": "every day"}, "schedule"),
        ({"schedule": "*/5 * * * * *"}, "schedule"),
        ({"schedule": "PT0S"}, "schedule"),
        ({"schedule": "0 3 * * *", "timezone": "Europe/Nowhere"}, "timezone"),
        ({"schedule": "PT15M", "timezone": "Europe/Berlin"}, "timezone"),
        ({"schedule": "PT15M", "grace": "later"}, "grace"),
        ({"schedule": "PT15M", "grace": "P40D"}, "grace"),
        ({"schedule": "PT15M", "description": "a\nb"}, "description"),
        ({"schedule": "PT15M", "owner": "me"}, "owner"),
        ({}, "schedule"),
    ],
)
async def test_bad_jobs_are_422_naming_the_field(
    client: httpx.AsyncClient, name: str, body: dict[str, Any], field: str
) -> None:
    r = await client.put(f"/v1/jobs/{name}", json=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    assert (await client.get(f"/v1/jobs/{name}")).status_code == 404


@waits
async def test_pages_of_jobs_and_ticks(client: httpx.AsyncClient, name: str) -> None:
    names = [f"{name}.{i}" for i in range(5)]
    for n in names:
        await put(client, n, schedule="PT1S")
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"prefix": name, "limit": 2}
        if cursor:
            params["cursor"] = cursor
        r = await client.get("/v1/jobs", params=params)
        seen += [j["name"] for j in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == names
    job = await get(client, names[0])
    await until(client, names[0], ts(job["expected_since"]) + timedelta(seconds=4.5))
    pages: list[datetime] = []
    cursor = None
    while True:
        r = await client.get(f"/v1/jobs/{names[0]}/ticks", params={"limit": 2} | ({"cursor": cursor} if cursor else {}))
        pages += [ts(t["tick"]) for t in r.json()["items"]]
        cursor = r.json()["next_cursor"]
        if cursor is None:
            break
    assert len(pages) >= 4 and pages == sorted(pages, reverse=True) and len(set(pages)) == len(pages)
    assert all(b - a == timedelta(seconds=1) for a, b in zip(pages[1:], pages, strict=False))
    since = pages[1].isoformat()
    assert list(await ticks(client, names[0], since=since, until=pages[0].isoformat())) == [pages[1]]
    for bad in ({"cursor": "bm9wZQ"}, {"limit": 0}, {"since": "yesterday"}):
        r = await client.get(f"/v1/jobs/{names[0]}/ticks", params=bad)
        assert r.status_code == 422, bad
    assert (await client.get("/v1/jobs", params={"cursor": "!"})).status_code == 422
    assert (await client.get("/v1/jobs", params={"state": "sleepy"})).status_code == 422


async def test_tokens_see_and_write_only_their_prefixes(settings: Settings, name: str) -> None:
    writer = Token("jobs-writer", prefixes=("jobs.",))
    reader = Token("jobs-reader", prefixes=("jobs.",), access="read")
    async with in_process(with_tokens(settings, writer, reader)) as (_, client):
        ours, theirs = f"jobs.{name}", f"other.{name}"
        r = await client.put(f"/v1/jobs/{ours}", json={"schedule": "PT1M"}, headers=writer.headers)
        assert r.status_code == 200
        assert (
            await client.put(f"/v1/jobs/{theirs}", json={"schedule": "PT1M"}, headers=writer.headers)
        ).status_code == 403
        assert (
            await client.put(f"/v1/jobs/{ours}", json={"schedule": "PT1M"}, headers=reader.headers)
        ).status_code == 403
        assert (await client.post(f"/v1/jobs/{ours}/pause", headers=reader.headers)).status_code == 403
        assert (await client.delete(f"/v1/jobs/{ours}", headers=reader.headers)).status_code == 403
        assert (await client.get(f"/v1/jobs/{ours}", headers=reader.headers)).status_code == 200
        assert (await client.get(f"/v1/jobs/{ours}/ticks", headers=reader.headers)).status_code == 200
        assert (await client.get(f"/v1/jobs/{theirs}", headers=reader.headers)).status_code == 403
        listed = (await client.get("/v1/jobs", params={"prefix": f"jobs.{name}"}, headers=reader.headers)).json()
        assert [j["name"] for j in listed["items"]] == [ours]
        assert (await client.get("/v1/jobs")).status_code == 401


async def test_real_answers_fit_the_document(client: httpx.AsyncClient, name: str) -> None:
    one, ticks_path = "/v1/jobs/{name}", "/v1/jobs/{name}/ticks"
    check(await client.put(f"/v1/jobs/{name}", json={"schedule": "PT1S", "grace": "0s"}), one, "put")
    await cycle(client, name)
    check(await client.get(f"/v1/jobs/{name}"), one)
    check(await client.get("/v1/jobs", params={"prefix": name}), "/v1/jobs")
    check(await client.get(f"/v1/jobs/{name}/ticks"), ticks_path)
    check(await client.post(f"/v1/jobs/{name}/pause"), "/v1/jobs/{name}/pause", "post")
    check(await client.post(f"/v1/jobs/{name}/resume"), "/v1/jobs/{name}/resume", "post")
    check(await client.put(f"/v1/jobs/{name}", json={"schedule": "nope"}), one, "put")  # 422
    check(await client.get(f"/v1/jobs/{name}-never"), one)  # 404
    check(await client.get(f"/v1/jobs/{name}-never/ticks"), ticks_path)  # 404


async def test_badges(settings: Settings, name: str) -> None:
    reader = Token("badge-reader", prefixes=("badge.",), access="read")
    async with in_process(with_tokens(settings, reader)) as (_, client):
        ours, hidden = f"badge.{name}", f"badge.{name}.private"
        writer = {"Authorization": "Bearer " + reader.secret}
        async with in_process(settings) as (_, open_client):  # the same table, no tokens: register them
            await open_client.put(f"/v1/jobs/{ours}", json={"schedule": "@daily", "public": True})
            await open_client.put(f"/v1/jobs/{hidden}", json={"schedule": "@daily"})
            assert (await open_client.get(f"/v1/jobs/{ours}")).json()["public"] is True
        r = await client.get(f"/v1/jobs/{ours}/badge.svg")  # public: no token needed
        assert r.status_code == 200 and r.headers["content-type"] == "image/svg+xml"
        assert "<title>" in r.text and f"{ours}: new" in r.text
        assert (await client.get(f"/v1/jobs/{hidden}/badge.svg")).status_code == 404  # not public: not told apart
        assert (await client.get(f"/v1/jobs/{name}-never/badge.svg")).status_code == 404
        r = await client.get(f"/v1/jobs/{hidden}/badge.svg", headers=writer)  # a read token for the name
        assert r.status_code == 200 and f"{hidden}: new" in r.text
        assert (await client.get(f"/v1/jobs/other.{name}/badge.svg", headers=writer)).status_code == 403
        assert (
            await client.get(f"/v1/jobs/{ours}/badge.svg", headers={"Authorization": "Bearer nope"})
        ).status_code == 401


async def test_an_acquire_with_a_schedule_registers_its_job(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "1m", schedule="@hourly")).json()
    job = await get(client, name)
    assert (job["schedule"], job["timezone"], job["grace"], job["state"]) == ("0 * * * *", "UTC", "PT300S", "new")
    # An operator's settings stay; a changed schedule updates the job.
    await put(client, name, schedule="0 * * * *", grace="10m", description="kept")
    # Not completed: a completed hourly tick would make the new schedule's latest tick, earlier today, stale.
    await client.post(f"/v1/locks/{name}/release", json={"token": lease["token"], "completed": False})
    await acquire(client, name, "1m", schedule="30 2 * * *", timezone="Europe/Berlin")
    job = await get(client, name)
    assert (job["schedule"], job["timezone"], job["grace"], job["description"]) == (
        "30 2 * * *",
        "Europe/Berlin",
        "PT600S",
        "kept",
    )
    # A refused acquire registers nothing.
    other = f"{name}.held"
    held = (await acquire(client, other, "1m")).json()
    assert (await acquire(client, other, "1m", schedule="@daily")).status_code == 409
    assert (await client.get(f"/v1/jobs/{other}")).status_code == 404
    await client.post(f"/v1/locks/{other}/release", json={"token": held["token"]})
