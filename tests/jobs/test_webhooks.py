"""Webhooks on a job's state change, with two replicas on one table and a receiver on loopback: each change is
posted once (claimed in the database), signed with HMAC-SHA256 over the body, retried with backoff after a failure;
a paused job raises nothing. Waits for real ticks."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr, ValidationError

from app.db import migrate
from app.jobs.events import Events
from app.jobs.webhooks import Notifier
from app.settings import Settings
from tests.support.api import acquire, release, ts
from tests.support.apps import in_process
from tests.support.patience import SETTLE
from tests.support.webhooks import Receiver, receiver

SECRET = "webhook-secret-" + "w" * 30


def events(got: Receiver) -> list[dict[str, Any]]:
    with got.lock:
        return [json.loads(body) for _, body, status in got.received if status == 204]


#: The job's period, in seconds (see the test).
PERIOD = 6


async def db_time(client: Any) -> Any:
    return ts((await client.get("/v1/jobs/nightly")).json()["db_time"])


async def until_async(read: Any, reached: Any, what: str) -> None:
    """Until ``await read()`` is ``reached`` (or, for a time, past it); the deadline only bounds a failure."""
    deadline = time.monotonic() + SETTLE
    while True:
        value = await read()
        if value == reached or (not isinstance(reached, str) and value >= reached):
            return
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.05)


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + SETTLE
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


@pytest.mark.system  # two apps, a receiver and real ticks
async def test_each_change_is_posted_once_signed_and_retried(database_url: str, schema: str, db: Any) -> None:
    with receiver(fail_first=1) as got:
        settings = Settings(
            database_url=SecretStr(database_url),
            table=f"{schema}.wh_{uuid.uuid4().hex[:6]}",
            jobs_webhook_urls=got.url,  # type: ignore[arg-type]  # read comma-separated, as from the environment
            jobs_webhook_secret=SecretStr(SECRET),
            jobs_check_interval=0.2,
        )
        await asyncio.to_thread(migrate.upgrade, settings)
        async with AsyncExitStack() as stack:
            replicas = [await stack.enter_async_context(in_process(settings)) for _ in range(2)]
            client = replicas[0][1]
            # A job's first state is recorded, not posted, so a check must see the job new before its first tick
            # is run (a tick due a few milliseconds after the PUT was once run first: "up" became its first state).
            # The schedule ticks every PERIOD seconds, on multiples of it: register it just after one, its first tick
            # PERIOD away, so the checks (every 0.2 s idle, seconds apart at load 20) see it new, and the test runs
            # that first tick, well before it is missed (PT2S was too short on a loaded machine: the first tick
            # passed unrun before the test ran it, and "down" came twice).
            now = await db.fetchval("SELECT extract(epoch FROM clock_timestamp())::float8")
            await asyncio.sleep(PERIOD - now % PERIOD + 0.02)
            await client.put("/v1/jobs/nightly", json={"schedule": f"PT{PERIOD}S", "grace": f"{PERIOD // 2}s"})
            first_tick = ts((await client.get("/v1/jobs/nightly")).json()["next_tick"])
            jobs_table = replicas[0][0].state.notifier.events.jobs_table
            notified = f"SELECT notified_state FROM {jobs_table} WHERE name = 'nightly'"
            await until_async(lambda: db.fetchval(notified), "new", "no check saw the job new")
            await until_async(lambda: db_time(client), first_tick, "the database's clock did not reach the tick")
            lease = (await acquire(client, "nightly", "1m")).json()
            await release(client, "nightly", lease["token"])
            # Every caller stops: the job goes down, and the receiver hears it once.
            await until(lambda: any(e["state"] == "down" for e in events(got)), "no down event")
            await asyncio.sleep(1.0)  # both replicas check several more times
            posted = events(got)
            ids = [e["event_id"] for e in posted]
            assert len(ids) == len(set(ids)), posted
            assert [e["state"] for e in posted].count("down") == 1, posted
            for before, after in itertools.pairwise(posted):  # one chain of changes, in order
                assert after["previous"] == before["state"], posted
            assert posted[0]["previous"] == "new" and posted[-1]["state"] == "down", got.received
            with got.lock:
                _, first_body, first_status = got.received[0]
                delivered = [(h, b) for h, b, s in got.received if s == 204]
            # The first attempt got a 500: the same event came again, after a backoff, as attempt 2.
            assert first_status == 500 and json.loads(first_body)["event_id"] == posted[0]["event_id"]
            assert posted[0]["attempt"] == 2
            for headers, body in delivered:
                expected = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
                assert hmac.compare_digest(headers["x-schedlock-signature"], expected)
                assert headers["content-type"] == "application/json"

            # Paused, it raises nothing, while ticks pass unrun; resumed, it is watched from then on (new).
            count = len(events(got))
            await client.post("/v1/jobs/nightly/pause")
            await asyncio.sleep(PERIOD + 1)  # a tick passes unrun
            assert len(events(got)) == count
            await client.post("/v1/jobs/nightly/resume")
            await until(lambda: len(events(got)) > count, "no event after the resume")
            assert events(got)[count]["previous"] == "new"  # paused -> new was recorded, not posted


def test_webhook_urls_need_a_secret_and_must_be_http(database_url: str) -> None:
    with pytest.raises(ValidationError, match="needs jobs_webhook_secret"):
        Settings(database_url=SecretStr(database_url), jobs_webhook_urls="http://127.0.0.1:9/x")  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="not an http"):
        Settings(
            database_url=SecretStr(database_url),
            jobs_webhook_urls="file:///etc/passwd",  # type: ignore[arg-type]
            jobs_webhook_secret=SecretStr(SECRET),
        )
    ok = Settings(
        database_url=SecretStr(database_url),
        jobs_webhook_urls="http://127.0.0.1:9/a, https://hooks.example.com/b",  # type: ignore[arg-type]
        jobs_webhook_secret=SecretStr(SECRET),
    )
    assert ok.jobs_webhook_urls == ["http://127.0.0.1:9/a", "https://hooks.example.com/b"]


async def test_a_jobs_events_go_in_order_and_a_spent_one_holds_nothing_back(
    database_url: str, schema: str, db: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # An event in its backoff holds back the later ones of its job and URL (a receiver never hears "down" before
    # the "up" it follows); once delivered, the next claim follows in the same delivery; an event that ran out of
    # attempts holds nothing back. No chores run (the app has no webhook URLs): each step is called here.
    with receiver(fail_first=1) as got:
        settings = Settings(database_url=SecretStr(database_url), table=f"{schema}.wo_{uuid.uuid4().hex[:6]}")
        await asyncio.to_thread(migrate.upgrade, settings)
        async with in_process(settings) as (app, client):
            assert app.state.notifier is None
            events = Events(app.state.store.statements, settings.table_name, settings.table_schema)
            metrics = app.state.metrics
            notifier = Notifier(app.state.jobs, events, [got.url], SECRET.encode(), 2, metrics.count_webhook)
            table = notifier.events.events_table
            for job in ("a", "b"):
                assert (await client.put(f"/v1/jobs/{job}", json={"schedule": "PT1H"})).status_code in (200, 201)
                assert await notifier.events.claim(job, None, "new", [])  # a job's first state: only recorded
                assert await notifier.events.claim(job, "new", "up", [got.url])
                assert await notifier.events.claim(job, "up", "down", [got.url])

            def heard() -> list[tuple[str, str, int]]:
                with got.lock:
                    return [(json.loads(b)["job"], json.loads(b)["state"], s) for _, b, s in got.received]

            # a's "up" fails; a's "down" waits behind it; b's two go, in order, in the same delivery.
            assert await notifier.deliver_once() == 2
            assert heard() == [("a", "up", 500), ("b", "up", 204), ("b", "down", 204)]
            assert await notifier.deliver_once() == 0  # a's "up" is in its backoff: nothing of a's is due
            assert len(heard()) == 3

            # Its backoff over, a's "up" is delivered, then its "down", in order.
            await db.execute(f"UPDATE {table} SET next_attempt_at = now() AT TIME ZONE 'UTC' WHERE name = 'a'")
            assert await notifier.deliver_once() == 2
            assert heard()[3:] == [("a", "up", 204), ("a", "down", 204)]

            # An event that failed its last attempt (2 here) is spent: the one after it goes.
            got.fail_first = len(got.received) + 2
            assert await notifier.events.claim("a", "down", "up", [got.url])
            assert await notifier.events.claim("a", "up", "down", [got.url])
            assert await notifier.deliver_once() == 0
            await db.execute(f"UPDATE {table} SET next_attempt_at = now() AT TIME ZONE 'UTC' WHERE name = 'a'")
            assert await notifier.deliver_once() == 0  # its second and last attempt fails too
            assert await notifier.deliver_once() == 1
            assert heard()[5:] == [("a", "up", 500), ("a", "up", 500), ("a", "down", 204)]

            # Each POST's result is counted; the log names the receiver's origin, never its path (often a secret).
            text = (await client.get("/metrics")).text
            posts = {
                s.labels["result"]: s.value
                for family in text_string_to_metric_families(text)
                for s in family.samples
                if s.name == "schedlock_job_webhook_posts_total"
            }
            assert posts == {"delivered": 5, "failed": 2, "given_up": 1}
            failures = [r for r in caplog.records if r.name == "schedlock.jobs"]
            assert [r.levelname for r in failures] == ["WARNING", "WARNING", "ERROR"]
            assert "given up" in failures[-1].getMessage()
            assert all("/hooks" not in r.getMessage() and got.url.rsplit("/", 2)[0] in r.getMessage() for r in failures)
