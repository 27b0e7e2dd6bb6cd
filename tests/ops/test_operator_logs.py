"""What the log tells an operator: where the docs are and which tokens loaded, an unmigrated table once with the
command to run, and the database's outages as one line per change (down, still down, back), never per attempt."""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.auth.tokens import hash_secret
from app.db import migrate
from app.db.availability import Availability
from app.settings import Settings
from tests.support.apps import drop_schema, in_process, make_settings
from tests.support.logs import captured, lines
from tests.support.patience import SETTLE
from tests.support.pgcluster import PgCluster, migrated_cluster
from tests.support.servers import free_port, server_env, spawn_server, start_server, stop_server, wait_for

SECRET = "operator-secret-" + "s" * 40


def db_lines(records: list[dict[str, Any]]) -> list[str]:
    return [r["message"] for r in records if r["logger"] == "schedlock.db"]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_outage_is_one_line_down_a_reminder_every_interval_and_one_line_back() -> None:
    clock = Clock()
    availability = Availability(every=30, clock=clock)
    with captured() as out:
        availability.answered()  # up and answering: nothing to say
        for _ in range(50):  # a burst of failed requests: one line
            availability.failed("acquire", "ConnectionRefusedError")
        clock.now += 29
        availability.failed("acquire", "ConnectionRefusedError")
        clock.now += 2  # 31 s down: a reminder
        availability.failed("get", "ConnectionRefusedError")
        clock.now += 10
        availability.failed("get", "ConnectionRefusedError")
        clock.now += 4.5
        availability.answered()
        availability.answered()
    said = lines(out)
    assert [r["message"] for r in said] == [
        "database unavailable (ConnectionRefusedError during acquire): lock requests get 503 until it answers again",
        "database still unavailable after 31 s (ConnectionRefusedError)",
        "database available again after 45.5 s",
    ]
    assert [r["database"] for r in said] == ["down", "down", "up"] and said[2]["down_seconds"] == 45.5
    assert all(r["level"] == "warning" for r in said)  # the pair shows at the same level


async def test_requests_to_a_dead_database_log_no_line_each_and_no_traceback() -> None:
    settings = Settings(
        database_url=SecretStr(f"postgresql://postgres@127.0.0.1:{free_port()}/x"), db_connect_timeout=1
    )
    with captured() as out:
        async with in_process(settings) as (_, client):
            for _ in range(20):  # each one tries a new connection
                r = await client.post("/v1/locks/x/acquire", json={"lock_at_most_for": "1m"})
                assert r.status_code == 503
    records = lines(out)
    assert db_lines(records) == [
        "database unavailable (ConnectionRefusedError during start-up): lock requests get 503 until it answers again"
    ]
    assert "Traceback" not in out.getvalue()
    assert len([r for r in records if r["logger"] == "schedlock.access"]) == 20  # each request is still logged


async def test_an_unmigrated_table_is_reported_once_at_start_up_with_the_command(database_url: str) -> None:
    schema = f"unmigrated_{uuid.uuid4().hex[:8]}"
    settings = make_settings(database_url, f"{schema}.shedlock")
    try:
        with captured() as out:
            async with in_process(settings) as (_, client):
                for _ in range(3):
                    assert (
                        await client.post("/v1/locks/x/acquire", json={"lock_at_most_for": "1m"})
                    ).status_code == 503
                    assert (await client.get("/readyz")).status_code == 503
        warnings = [r["message"] for r in lines(out) if r["logger"] == "schedlock" and r["level"] == "warning"]
        assert warnings == [
            f"table {settings.table} is not migrated: lock requests will fail until it is; run `schedlock-server "
            "migrate` with the same SCHEDLOCK_DATABASE_URL and SCHEDLOCK_TABLE"
        ]
        await asyncio.to_thread(migrate.upgrade, settings)
        with captured() as out:
            async with in_process(settings):
                pass
        assert not [r for r in lines(out) if r["level"] == "warning"], "a migrated table is not mentioned"
    finally:
        await asyncio.to_thread(drop_schema, database_url, schema)


def test_start_up_says_where_the_docs_are_and_how_many_tokens_loaded(settings: Settings) -> None:
    tokens = [
        {"name": f"t{i}", "sha256": hash_secret(f"{SECRET}{i}"), "prefixes": ["*"], "access": "read"} for i in range(3)
    ]
    server = start_server(
        settings,
        extra_env={"SCHEDLOCK_TOKENS": json.dumps({"tokens": tokens}), "SCHEDLOCK_LOG_FORMAT": "json"},
    )
    output = stop_server(server)
    said = [json.loads(line)["message"] for line in output.split("\n") if line.strip()]
    announcement = next(line for line in said if "API docs at" in line)
    assert f"API docs at {server.url}/docs" in announcement
    assert "3 API token(s) loaded from SCHEDLOCK_TOKENS" in announcement


@pytest.fixture
def cluster() -> Iterator[PgCluster]:
    with migrated_cluster() as cluster:
        yield cluster


@pytest.mark.system
def test_a_served_process_logs_an_outage_as_state_changes(cluster: PgCluster) -> None:
    """A real server while its database stops and starts again: one line down, one line back, no traceback, and
    it serves again without a restart."""
    settings = Settings(
        database_url=SecretStr(cluster.url), table="shedlock", db_connect_timeout=1, db_pool_timeout=1, pool_min_size=1
    )
    port = free_port()
    server = spawn_server(
        [sys.executable, "-m", "app", "serve", "--port", str(port)],
        server_env(settings, {"SCHEDLOCK_LOG_FORMAT": "json"}),
        port,
    )
    try:
        wait_for(server)
        acquire = {"lock_at_most_for": "1m"}
        with httpx.Client(base_url=server.url, timeout=10) as client:
            assert client.post("/v1/locks/before/acquire", json=acquire).status_code == 200
            cluster.stop("immediate")
            statuses = [client.post(f"/v1/locks/down-{i}/acquire", json=acquire).status_code for i in range(30)]
            cluster.start()
            deadline = time.monotonic() + SETTLE
            while client.post("/v1/locks/after/acquire", json=acquire).status_code != 200:
                assert time.monotonic() < deadline, "did not recover"
                time.sleep(0.2)
    finally:
        output = stop_server(server)
    assert set(statuses) == {503}
    records = [json.loads(line) for line in output.split("\n") if line.strip()]
    said = db_lines(records)
    assert len(said) == 2, said
    assert said[0].startswith("database unavailable (") and said[1].startswith("database available again after")
    assert "Traceback" not in output
    assert not [r for r in records if r["level"] in ("error", "critical")]
