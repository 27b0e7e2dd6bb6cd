"""The jobs' metrics (docs/operations.md): each registered job's up, state and last completion, computed on scrape
and cached; its ticks counted by state once decided; a paused job raises nothing; an unregistered one goes."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.db import migrate
from app.settings import Settings
from tests.support.api import acquire, release, ts
from tests.support.apps import in_process
from tests.support.metrics import Samples, scrape, value
from tests.support.patience import SETTLE

STATES = ("up", "late", "down", "paused", "new")


def state_of(samples: Samples, job: str) -> list[str]:
    return [s for s in STATES if value(samples, "schedlock_job_state", job_name=job, state=s) == 1]


async def scrape_until(client: httpx.AsyncClient, job: str, state: str) -> Samples:
    deadline = time.monotonic() + SETTLE
    while True:
        samples = await scrape(client)
        if state_of(samples, job) == [state] or time.monotonic() > deadline:
            assert state_of(samples, job) == [state]
            return samples
        await asyncio.sleep(0.1)


@pytest.mark.system  # waits for real ticks
async def test_up_down_paused_and_gone(database_url: str, schema: str) -> None:
    settings = Settings(database_url=SecretStr(database_url), table=f"{schema}.jm_{uuid.uuid4().hex[:6]}")
    await asyncio.to_thread(migrate.upgrade, settings)
    async with in_process(settings) as (app, client):
        app.state.metrics.held_locks_max_age = 0
        job = "nightly"
        other = "weekly"
        await client.put(f"/v1/jobs/{other}", json={"schedule": "0 3 * * 0"})
        r = await client.put(f"/v1/jobs/{job}", json={"schedule": "PT2S", "grace": "1s"})
        first = await scrape(client)  # where tick counting starts
        assert state_of(first, other) == ["new"] and value(first, "schedlock_job_up", job_name=other) == 1
        await _wait_until(client, job, ts(r.json()["next_tick"]))
        lease: dict[str, Any] = (await acquire(client, job, "1m")).json()
        released = (await release(client, job, lease["token"])).json()
        samples = await scrape(client)
        stamp = value(samples, "schedlock_job_last_completed_timestamp_seconds", job_name=job)
        assert abs(stamp - ts(released["db_time"]).timestamp()) < 0.01
        # Every caller stops: the next tick is missed, the job down, and the tick counted once.
        samples = await scrape_until(client, job, "down")
        assert value(samples, "schedlock_job_up", job_name=job) == 0
        assert value(samples, "schedlock_job_ticks_total", job_name=job, state="missed") >= 1
        assert value(samples, "schedlock_job_ticks_total", job_name=job, state="completed") == 1
        assert state_of(samples, other) == ["new"]
        # Paused, it raises nothing.
        await client.post(f"/v1/jobs/{job}/pause")
        samples = await scrape_until(client, job, "paused")
        assert value(samples, "schedlock_job_up", job_name=job) == 1
        missed = value(samples, "schedlock_job_ticks_total", job_name=job, state="missed")
        db_time = ts((await client.get(f"/v1/jobs/{job}")).json()["db_time"])
        await _wait_until(client, job, db_time + timedelta(seconds=4.5))  # two ticks nobody runs
        samples = await scrape(client)
        assert value(samples, "schedlock_job_ticks_total", job_name=job, state="missed") == missed
        assert state_of(samples, job) == ["paused"]
        # Unregistered, its series go.
        await client.delete(f"/v1/jobs/{job}")
        samples = await scrape(client)
        assert not [key for key in samples if dict(key[1]).get("job_name") == job]
        assert state_of(samples, other) == ["new"]


async def _wait_until(client: httpx.AsyncClient, job: str, moment: Any) -> None:
    """Until the database's clock reaches ``moment``."""
    for _ in range(600):
        if ts((await client.get(f"/v1/jobs/{job}")).json()["db_time"]) >= moment:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the database's clock did not reach the moment")


async def test_the_jobs_metrics_are_cached(database_url: str, schema: str) -> None:
    settings = Settings(database_url=SecretStr(database_url), table=f"{schema}.jc_{uuid.uuid4().hex[:6]}")
    await asyncio.to_thread(migrate.upgrade, settings)
    async with in_process(settings) as (app, client):
        app.state.metrics.held_locks_max_age = 3600
        count = "schedlock_db_statement_duration_seconds_count"
        await client.put("/v1/jobs/a", json={"schedule": "@daily"})
        first = await scrape(client)
        await client.put("/v1/jobs/b", json={"schedule": "@daily"})
        second = await scrape(client)
        assert value(second, count, operation="job_runs") == value(first, count, operation="job_runs") + 1  # b's PUT
        assert state_of(second, "a") == ["new"] and state_of(second, "b") == []  # not read again yet
