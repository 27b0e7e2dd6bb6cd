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
from pydantic import SecretStr, ValidationError

from app.db import migrate
from app.settings import Settings
from tests.support.api import acquire, release, ts
from tests.support.apps import in_process
from tests.support.webhooks import Receiver, receiver

SECRET = "webhook-secret-" + "w" * 30


def events(got: Receiver) -> list[dict[str, Any]]:
    with got.lock:
        return [json.loads(body) for _, body, status in got.received if status == 204]


async def until(check: Any, what: str) -> None:
    deadline = time.monotonic() + 40.0
    while not check():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.1)


@pytest.mark.system  # two apps, a receiver and real ticks
async def test_each_change_is_posted_once_signed_and_retried(database_url: str, schema: str) -> None:
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
            job = (await client.put("/v1/jobs/nightly", json={"schedule": "PT2S", "grace": "1s"})).json()
            moment = ts(job["next_tick"])
            for _ in range(200):
                if ts((await client.get("/v1/jobs/nightly")).json()["db_time"]) >= moment:
                    break
                await asyncio.sleep(0.05)
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
            assert posted[0]["previous"] == "new" and posted[-1]["state"] == "down"
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
            await asyncio.sleep(3)
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
