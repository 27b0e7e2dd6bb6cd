"""Through Debian's PgBouncer (1.18) in transaction mode, which keeps no prepared statement from one transaction to
the next and refuses startup parameters it does not track: with SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0 every lock
operation works (migrate included); without it the server says at start-up what to set, and never answers 500."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.db import migrate
from app.settings import Settings
from tests.support.apps import drop_schema, in_process, make_settings
from tests.support.databases import scratch_database, with_database
from tests.support.pgbouncer import pgbouncer

WINDOW = {"lock_at_most_for": "PT1M"}


@pytest.fixture(scope="module")
def bouncer(database_url: str) -> Iterator[str]:
    with pgbouncer(database_url, pool_mode="transaction", pool_size=2) as url:
        yield url


@pytest.fixture(scope="module")
def through_bouncer(bouncer: str, database_url: str) -> Iterator[Settings]:
    """A lock table of its own, migrated through PgBouncer, with the statement cache off."""
    schema = f"bouncer_{uuid.uuid4().hex[:10]}"
    settings = make_settings(bouncer, f"{schema}.shedlock", db_statement_cache_size=0, pool_max_size=8)
    try:
        migrate.upgrade(settings)
        yield settings
    finally:
        drop_schema(database_url, schema)


async def _workload(client: httpx.AsyncClient, tag: str) -> list[httpx.Response]:
    """Acquires of many names at once (batched statements), of one name at once, slotted, extends, releases,
    reads."""
    names = [f"{tag}.job-{i:02}" for i in range(24)]
    answers = list(await asyncio.gather(*(client.post(f"/v1/locks/{n}/acquire", json=WINDOW) for n in names)))
    same = await asyncio.gather(*(client.post(f"/v1/locks/{tag}.one/acquire", json=WINDOW) for _ in range(8)))
    answers += same
    for _ in range(2):  # the slotted acquire: the first takes this minute's tick, the second finds it taken
        answers.append(await client.post(f"/v1/locks/{tag}.slot/acquire", json={**WINDOW, "schedule": "* * * * *"}))
    tokens = {a.json()["name"]: a.json()["token"] for a in answers if a.status_code == 200}
    answers += await asyncio.gather(
        *(client.post(f"/v1/locks/{n}/extend", json={**WINDOW, "token": t}) for n, t in tokens.items())
    )
    answers += await asyncio.gather(*(client.get(f"/v1/locks/{n}") for n in names[:5]))
    answers.append(await client.get("/v1/locks", params={"prefix": f"{tag}.", "limit": 10}))
    answers.append(await client.get(f"/v1/locks/{names[0]}/runs"))
    answers += await asyncio.gather(
        *(client.post(f"/v1/locks/{n}/release", json={"token": t}) for n, t in tokens.items())
    )
    return answers


async def test_every_operation_works_with_the_statement_cache_off(
    through_bouncer: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    tag = f"pgb-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="schedlock.db"):
        async with in_process(through_bouncer) as (_, client):
            assert (await client.get("/readyz")).status_code == 200
            for round_ in range(3):  # the pool's connections are reused across PgBouncer's server connections
                answers = await _workload(client, f"{tag}-{round_}")
                statuses = [a.status_code for a in answers]
                assert statuses.count(409) == 8 and set(statuses) == {200, 409}, [a.text for a in answers]
            page = (await client.get("/v1/locks", params={"prefix": f"{tag}-0.", "limit": 10})).json()
            assert len(page["items"]) == 10 and page["next_cursor"] is not None
            rest = await client.get("/v1/locks", params={"prefix": f"{tag}-0.", "cursor": page["next_cursor"]})
            assert [i["name"] for i in rest.json()["items"]][-2:] == [f"{tag}-0.one", f"{tag}-0.slot"]
    said = caplog.text
    assert "refused startup parameters" in said and "connection pooler (PgBouncer)" in said, said
    assert "SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0" not in said  # it is set: nothing to advise
    # The test server's own statement_timeout (0) applies through the pooler: the log says how to pin it.
    assert "statement_timeout = '0'" in said and "ALTER ROLE postgres SET" in said, said


async def test_with_the_cache_on_it_says_what_to_set_and_never_answers_500(
    through_bouncer: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    cached = through_bouncer.model_copy(update={"db_statement_cache_size": 100})
    tag = f"pgb-{uuid.uuid4().hex[:6]}"
    with caplog.at_level(logging.WARNING, logger="schedlock.db"):
        async with in_process(cached) as (_, client):
            statuses = [a.status_code for _ in range(3) for a in await _workload(client, tag)]
    assert set(statuses) <= {200, 409, 404, 503}, statuses
    assert "if it pools by transaction or statement, set SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0" in caplog.text


async def test_the_role_s_defaults_that_differ_are_named_at_start_up(
    bouncer: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings_ = {"default_transaction_isolation": "repeatable read", "statement_timeout": "5s"}
    async with scratch_database(database_url, settings=settings_) as url:
        database = url.rsplit("/", 1)[1]
        settings = make_settings(with_database(bouncer, database), "shedlock", db_statement_cache_size=0)
        await asyncio.to_thread(migrate.upgrade, settings)
        with caplog.at_level(logging.WARNING, logger="schedlock.db"):
            async with in_process(settings) as (_, client):
                answer = await client.post(f"/v1/locks/{uuid.uuid4().hex}/acquire", json=WINDOW)
                assert answer.status_code == 200, answer.text
    said: Any = caplog.text
    assert "default_transaction_isolation = 'repeatable read'" in said, said
    assert "default_transaction_isolation = 'read committed'" in said and "statement_timeout =" not in said, said
