"""GET /metrics on the real app and a real Postgres: outcomes counted once each, bounded labels, no secrets."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from app.db import migrate
from app.ops.metrics import LOCK_OUTCOMES
from app.settings import Settings
from tests.support.api import acquire, extend, release
from tests.support.apps import in_process
from tests.support.metrics import outcomes, parse, scrape, value


async def test_every_lock_outcome_is_counted_once(client: httpx.AsyncClient, name: str) -> None:
    before = await scrape(client)
    lease = (await acquire(client, name, "10m")).json()
    assert (await acquire(client, name, "10m")).status_code == 409
    assert (await extend(client, name, lease["token"], "10m")).status_code == 200
    assert (await release(client, name, lease["token"])).status_code == 200
    assert (await release(client, name, lease["token"])).status_code == 200  # a repeated release is harmless
    assert (await extend(client, name, lease["token"], "10m")).status_code == 409  # keep-alive lost the lease
    assert (await release(client, name, "not-a-token")).status_code == 409
    assert (await release(client, f"{name}-never", "x")).status_code == 404
    assert (await acquire(client, name, "-5m")).status_code == 422
    assert (await extend(client, name, lease["token"], "soon")).status_code == 422
    after = await scrape(client)
    assert outcomes(before, after) == {
        ("acquire", "acquired"): 1,
        ("acquire", "held"): 1,
        ("acquire", "invalid"): 1,
        ("extend", "extended"): 1,
        ("extend", "not_holder"): 1,
        ("extend", "invalid"): 1,
        ("release", "released"): 2,
        ("release", "not_holder"): 1,
        ("release", "not_found"): 1,
    }


async def test_every_outcome_is_exported_from_the_start(settings: Settings) -> None:
    async with in_process(settings) as (_, client):
        samples = await scrape(client)
    for op, names in LOCK_OUTCOMES.items():
        for outcome in names:
            assert ("schedlock_lock_operations_total", frozenset({("operation", op), ("outcome", outcome)})) in samples


async def test_labels_are_route_templates_never_lock_names(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name)).json()
    await client.get(f"/v1/locks/{name}")
    await client.get("/v1/locks", params={"prefix": name})
    await client.get(f"/no/such/{name}")
    await client.request("BREW", f"/v1/locks/{name}")
    await release(client, name, lease["token"])
    r = await client.get("/metrics")
    assert name not in r.text and lease["token"] not in r.text
    samples = parse(r.text)
    routes = {dict(labels).get("route") for (metric, labels) in samples if metric == "schedlock_http_requests_total"}
    assert {"/v1/locks/{name}/acquire", "/v1/locks/{name}/release", "/v1/locks/{name}", "/v1/locks", "unmatched"} <= (
        routes
    )
    assert all(route is not None and (route.startswith("/") or route == "unmatched") for route in routes)
    methods = {dict(labels)["method"] for (metric, labels) in samples if metric == "schedlock_http_requests_total"}
    assert "other" in methods and "BREW" not in methods
    hist = {
        dict(labels)["route"]
        for (metric, labels) in samples
        if metric == "schedlock_http_request_duration_seconds_count"
    }
    assert "/v1/locks/{name}/acquire" in hist


async def test_database_latency_and_pool_usage(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    before = await scrape(client)
    lease = (await acquire(client, name)).json()
    await release(client, name, lease["token"])
    await client.get(f"/v1/locks/{name}")
    after = await scrape(client)
    for op in ("acquire", "release", "get"):
        count = "schedlock_db_statement_duration_seconds_count"
        assert value(after, count, operation=op) - value(before, count, operation=op) == 1, op
    assert value(after, "schedlock_db_statement_duration_seconds_sum", operation="acquire") > value(
        before, "schedlock_db_statement_duration_seconds_sum", operation="acquire"
    )
    settings: Settings = app.state.settings
    busy = value(after, "schedlock_db_pool_connections", state="busy")
    idle = value(after, "schedlock_db_pool_connections", state="idle")
    assert busy + idle >= 1 and idle >= 1  # nothing else runs while /metrics is served
    assert value(after, "schedlock_db_pool_max_connections") == settings.pool_max_size
    assert value(after, "schedlock_build_info", version=app.version) == 1
    assert value(after, "process_resident_memory_bytes") > 0


async def test_held_locks_gauge_counts_the_table_and_is_cached(database_url: str, schema: str, db: Any) -> None:
    settings = Settings(database_url=SecretStr(database_url), table=f"{schema}.held_{uuid.uuid4().hex[:6]}")
    await asyncio.to_thread(migrate.upgrade, settings)
    async with in_process(settings) as (app, client):
        app.state.metrics.held_locks_max_age = 0
        assert value(await scrape(client), "schedlock_locks_held") == 0
        leases = [(await acquire(client, f"job-{i}", "10m")).json() for i in range(3)]
        await release(client, "job-0", leases[0]["token"])
        # A Java ShedLock node's row counts too: the gauge is about the table, not this process.
        await db.execute(
            f"INSERT INTO {settings.table} (name, lock_until, locked_at, locked_by) VALUES ('java-job', "
            "timezone('utc', now()) + interval '5 minutes', timezone('utc', now()), 'java-host-1')"
        )
        samples = await scrape(client)
        direct = await db.fetchval(
            f"SELECT count(*) FROM {settings.table} WHERE lock_until > timezone('utc', CURRENT_TIMESTAMP)"
        )
        assert value(samples, "schedlock_locks_held") == direct == 3

        # Within max_age, scrapes reuse the count: no statement per scrape, nothing on the request path.
        app.state.metrics.held_locks_max_age = 3600
        count = "schedlock_db_statement_duration_seconds_count"
        first = await scrape(client)
        await acquire(client, "job-9", "10m")
        second = await scrape(client)
        assert value(second, count, operation="count_held") == value(first, count, operation="count_held")
        assert value(second, "schedlock_locks_held") == 3


async def test_the_event_loop_tasks_are_counted_at_each_scrape(client: httpx.AsyncClient) -> None:
    # The soak (bench/soak.py) watches this gauge for a leak of tasks.
    before = value(await scrape(client), "schedlock_event_loop_tasks")
    gate = asyncio.Event()
    waiting = [asyncio.create_task(gate.wait()) for _ in range(5)]
    assert value(await scrape(client), "schedlock_event_loop_tasks") == before + 5
    gate.set()
    await asyncio.gather(*waiting)
    assert value(await scrape(client), "schedlock_event_loop_tasks") == before


async def test_metrics_still_answer_when_the_database_is_down() -> None:
    settings = Settings(database_url=SecretStr("postgresql://u:hunter2@127.0.0.1:1/nowhere"), db_connect_timeout=1.0)
    async with in_process(settings) as (_, client):
        assert (await acquire(client, "x")).status_code == 503
        r = await client.get("/metrics")
    assert r.status_code == 200 and "hunter2" not in r.text
    samples = parse(r.text)
    assert ("schedlock_locks_held", frozenset()) not in samples  # unknown, rather than a made-up number
    assert value(samples, "schedlock_lock_operations_total", operation="acquire", outcome="error") == 1
    assert value(samples, "schedlock_db_errors_total", operation="acquire") == 1
    assert value(samples, "schedlock_db_errors_total", operation="count_held") == 1
    assert value(samples, "schedlock_db_pool_max_connections") == settings.pool_max_size


async def test_openmetrics_when_asked(client: httpx.AsyncClient) -> None:
    r = await client.get("/metrics", headers={"accept": "application/openmetrics-text; version=1.0.0"})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.rstrip().endswith("# EOF")


async def test_each_app_has_its_own_registry(settings: Settings) -> None:
    async with in_process(settings) as (_, one), in_process(settings) as (_, two):
        await acquire(one, f"job-{uuid.uuid4().hex[:8]}")
        a, b = await scrape(one), await scrape(two)
    total = "schedlock_lock_operations_total"
    assert value(a, total, operation="acquire", outcome="acquired") == 1
    assert value(b, total, operation="acquire", outcome="acquired") == 0


@pytest.mark.parametrize("status", [200, 201, 204])
def test_success_statuses_map_to_the_operation_verb(status: int) -> None:
    from app.api.edge import lock_outcome

    assert [lock_outcome(op, status) for op in ("acquire", "release", "extend")] == [
        "acquired",
        "released",
        "extended",
    ]


def test_error_statuses_map_to_bounded_outcomes() -> None:
    from app.api.edge import lock_outcome

    for op, names in LOCK_OUTCOMES.items():
        for status in range(400, 600):
            assert lock_outcome(op, status) in names, (op, status)
    assert lock_outcome("acquire", 409) == "held"
    assert lock_outcome("extend", 409) == lock_outcome("release", 409) == "not_holder"
    assert lock_outcome("release", 403) == "denied" and lock_outcome("release", 503) == "error"
