"""The database's own settings never turn into 500s: each connection pins what the statements rely on (READ
COMMITTED, no lock timeout of the database's), contention is a 503 with Retry-After (a serialization failure or a
deadlock is sent once more first), text the database cannot store is the caller's 422 naming the field, and a
database that is not UTF8 is refused by `migrate` and reported by /readyz. Each test makes a database of its own."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest

from app.db import migrate
from app.db.statements import close_pool, create_pool, fetch
from app.errors import DatabaseContention, RowLockTimeout
from app.settings import Settings
from tests.support.apps import drop_schema, in_process, make_settings
from tests.support.databases import scratch_database, wait_for_lock_wait
from tests.support.servers import server_env

WINDOW = {"lock_at_most_for": "PT1M"}


async def _served(url: str, *, require_utf8: bool = True) -> tuple[Settings, Any]:
    settings = make_settings(url, "shedlock")
    await asyncio.to_thread(migrate.upgrade, settings, require_utf8=require_utf8)
    return settings, await asyncpg.connect(url, server_settings={"timezone": "UTC"})


async def _expired_row(conn: Any, name: str) -> None:
    await conn.execute(
        "INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES ($1, now() - interval '1 minute', "
        "now() - interval '2 minutes', 'java-host')",
        name,
    )


async def _acquire_while_row_locked(conn: Any, client: httpx.AsyncClient, name: str, hold: float) -> httpx.Response:
    """An acquire of ``name``'s expired row while another transaction holds its row lock for ``hold`` seconds
    after the acquire started waiting for it (a Java node's takeover in an outer transaction, say)."""
    await _expired_row(conn, name)
    async with conn.transaction():
        await conn.execute("UPDATE shedlock SET locked_by = 'java-host-2' WHERE name = $1", name)
        acquire = asyncio.create_task(client.post(f"/v1/locks/{name}/acquire", json=WINDOW))
        await wait_for_lock_wait(conn)
        await asyncio.sleep(hold)
    return await acquire


async def test_a_repeatable_read_default_does_not_make_a_takeover_fail(database_url: str, name: str) -> None:
    settings_ = {"default_transaction_isolation": "repeatable read"}
    async with scratch_database(database_url, settings=settings_) as url:
        settings, conn = await _served(url)
        try:
            async with in_process(settings) as (_, client):
                answer = await _acquire_while_row_locked(conn, client, name, hold=0.1)
        finally:
            await conn.close()
    # READ COMMITTED re-checks the row the other transaction committed, and takes it over (it stayed expired).
    assert answer.status_code == 200, answer.text


async def test_a_database_lock_timeout_does_not_apply(database_url: str, name: str) -> None:
    async with scratch_database(database_url, settings={"lock_timeout": "100ms"}) as url:
        settings, conn = await _served(url)
        try:
            async with in_process(settings) as (_, client):
                answer = await _acquire_while_row_locked(conn, client, name, hold=0.5)
        finally:
            await conn.close()
    assert answer.status_code == 200, answer.text


async def test_a_row_left_locked_is_that_acquire_s_503_not_an_outage(settings: Settings, db: Any, name: str) -> None:
    # Issue 20, defect 1: a transaction left open on a row (ShedLock #3577's takeover inside the job's transaction)
    # makes a lone acquire of that name wait. It gives up at the service's lock timeout, before the statement
    # timeout, as contention: 503 with Retry-After, and the database is not reported down.
    quick = settings.model_copy(update={"db_statement_timeout": 1.0})
    async with in_process(quick) as (app, client):
        assert (await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1ms"})).status_code == 200
        async with db.acquire() as conn, conn.transaction():
            await conn.execute(f"SELECT FROM {settings.table} WHERE name = $1 FOR UPDATE", name)
            started = time.monotonic()
            answer = await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
            waited = time.monotonic() - started
            assert not app.state.store.statements.pool.availability.down
        other = await client.post(f"/v1/locks/{name}-free/acquire", json={"lock_at_most_for": "1m"})
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
    assert 0.7 <= waited < 1.0  # the lock timeout (80% of 1 s), not the statement timeout
    assert other.status_code == 200


async def test_a_statement_the_database_cancels_is_a_503_not_an_outage(database_url: str, db: Any) -> None:
    # A statement that runs past the statement timeout (here a trigger's pg_sleep, not a row lock: that one meets
    # the lock timeout first) is cancelled by Postgres and rolled back: nothing was done, and the database answered.
    # 503 with Retry-After; the database is not reported down; the connection is kept (a pool of one, same backend).
    schema = f"slow_{uuid.uuid4().hex[:10]}"
    slow = make_settings(database_url, f"{schema}.shedlock").model_copy(
        update={"db_statement_timeout": 1.0, "pool_min_size": 1, "pool_max_size": 1}
    )
    await asyncio.to_thread(migrate.upgrade, slow)
    await db.execute(
        f"""CREATE FUNCTION {schema}.slow() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF NEW.name LIKE 'slow%' THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$"""
    )
    await db.execute(
        f"CREATE TRIGGER slow BEFORE INSERT OR UPDATE ON {schema}.shedlock "
        f"FOR EACH ROW EXECUTE FUNCTION {schema}.slow()"
    )
    try:
        async with in_process(slow) as (app, client):
            pool = app.state.store.statements.pool
            backend = await fetch(pool, 1.0, "pid", "SELECT pg_backend_pid() AS pid")
            started = time.monotonic()
            answer = await client.post("/v1/locks/slow-job/acquire", json={"lock_at_most_for": "1m"})
            waited = time.monotonic() - started
            assert not pool.availability.down
            assert await fetch(pool, 1.0, "pid", "SELECT pg_backend_pid() AS pid") == backend
            after = await client.post("/v1/locks/fast-job/acquire", json={"lock_at_most_for": "1m"})
        rows = await db.fetchval(f"SELECT count(*) FROM {schema}.shedlock WHERE name = 'slow-job'")
    finally:
        await asyncio.to_thread(drop_schema, database_url, schema)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
    error = answer.json()["error"]
    assert error["code"] == "storage_unavailable" and "cancelled the statement" in error["message"], error
    assert 0.9 <= waited < 2.0  # the statement timeout, not the trigger's 3 s
    assert rows == 0  # rolled back: nothing was done
    assert after.status_code == 200, after.text


@pytest.fixture
async def pool_and_counter(settings: Settings, db: Any, name: str) -> AsyncIterator[tuple[Any, str]]:
    """The service's pool, and a sequence (in the session's schema) a statement counts its attempts with."""
    sequence = f"{settings.table_schema}.attempts_{name.replace('-', '_')}"
    await db.execute(f"CREATE SEQUENCE {sequence}")
    pool = await create_pool(settings)
    try:
        yield pool, sequence
    finally:
        await close_pool(pool, 5)
        await db.execute(f"DROP SEQUENCE {sequence}")


def _failing(sequence: str, sqlstate: str, *, times: int) -> str:
    """A statement that fails with ``sqlstate`` on its first ``times`` runs (the sequence is not rolled back)."""
    return (
        f"DO $$ BEGIN IF nextval('{sequence}') <= {times} THEN "
        f"RAISE EXCEPTION 'planted' USING ERRCODE = '{sqlstate}'; END IF; END $$"
    )


@pytest.mark.parametrize("sqlstate", ["40001", "40P01"])
async def test_a_serialization_failure_or_deadlock_is_sent_once_more(
    pool_and_counter: tuple[Any, str], db: Any, sqlstate: str
) -> None:
    pool, sequence = pool_and_counter
    assert await fetch(pool, 5, "acquire", _failing(sequence, sqlstate, times=1)) == []
    assert await db.fetchval(f"SELECT last_value FROM {sequence}") == 2
    with pytest.raises(DatabaseContention) as raised:
        await fetch(pool, 5, "acquire", _failing(sequence, sqlstate, times=10))
    assert await db.fetchval(f"SELECT last_value FROM {sequence}") == 4  # tried twice, then 503
    assert raised.value.status == 503 and raised.value.code == "storage_unavailable"
    assert raised.value.headers["Retry-After"] == "1"
    assert not pool.availability.down  # the database answered: not an outage


async def test_a_lock_timeout_is_a_503_at_once(pool_and_counter: tuple[Any, str], db: Any) -> None:
    pool, sequence = pool_and_counter
    with pytest.raises(RowLockTimeout) as raised:  # a DatabaseContention its statement's code can tell apart
        await fetch(pool, 5, "acquire", _failing(sequence, "55P03", times=10))
    assert await db.fetchval(f"SELECT last_value FROM {sequence}") == 1  # not retried: that row's answer
    assert "locked by another transaction" in raised.value.message
    assert not pool.availability.down


@pytest.fixture(scope="module")
async def latin1(database_url: str) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """A LATIN1 database with a lock table (as an older release would have made it), served in process."""
    async with scratch_database(database_url, encoding="LATIN1") as url:
        settings, conn = await _served(url, require_utf8=False)
        await conn.close()
        async with in_process(settings) as (_, client):
            yield url, client


async def test_latin1_refuses_what_it_cannot_store_as_a_422_naming_the_field(
    latin1: tuple[str, httpx.AsyncClient], name: str
) -> None:
    _, client = latin1
    for method, path, body, field in [
        ("POST", "/v1/locks/锁/acquire", WINDOW, "name"),
        ("POST", f"/v1/locks/{name}/acquire", {**WINDOW, "holder": "😀"}, "holder"),
        ("GET", "/v1/locks/锁", None, "name"),
        ("GET", "/v1/locks?prefix=锁", None, "prefix"),
        ("GET", "/v1/locks/锁/runs", None, "name"),
        ("GET", "/v1/runs?prefix=锁", None, "prefix"),
        ("POST", "/v1/locks/锁/force-release", {"reason": "stuck"}, "name"),
        ("POST", f"/v1/locks/{name}/force-release", {"reason": "锁 stuck"}, "reason"),
    ]:
        answer = await client.request(method, path, json=body)
        assert answer.status_code == 422, (path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "invalid_request" and error["field"] == field, error
        assert "LATIN1" in error["message"] and "UTF8" in error["message"], error
    # What it can store still works: "é" is LATIN1.
    assert (await client.post(f"/v1/locks/{name}-é/acquire", json=WINDOW)).status_code == 200


async def test_latin1_refusal_is_one_callers_in_a_shared_statement(latin1: tuple[str, httpx.AsyncClient]) -> None:
    _, client = latin1
    names = [f"batch-{i}-{id(client)}" for i in range(15)] + ["锁-batch"]
    answers = await asyncio.gather(*(client.post(f"/v1/locks/{n}/acquire", json=WINDOW) for n in names))
    assert [a.status_code for a in answers] == [200] * 15 + [422], [a.text for a in answers]


async def test_readyz_and_migrate_refuse_a_database_that_is_not_utf8(
    latin1: tuple[str, httpx.AsyncClient], caplog: pytest.LogCaptureFixture
) -> None:
    url, client = latin1
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
    message = ready.json()["error"]["message"]
    assert "encoding is LATIN1, not UTF8" in message and "ENCODING 'UTF8'" in message, message
    settings = make_settings(url, "shedlock")
    with caplog.at_level(logging.WARNING, logger="schedlock.db"):
        async with in_process(settings):  # a server started on it says so at once
            pass
    assert "encoding is LATIN1, not UTF8" in caplog.text and "/readyz answers 503" in caplog.text
    settings = make_settings(url, "other_table")
    with pytest.raises(migrate.UnsuitableDatabase, match="encoding is LATIN1, not UTF8"):
        await asyncio.to_thread(migrate.upgrade, settings)
    check = await asyncpg.connect(url)
    try:  # refused before anything was made
        assert await check.fetchval("SELECT to_regclass('other_table')") is None
    finally:
        await check.close()


async def test_sql_ascii_refuses_a_name_too_long_in_bytes_as_a_422(database_url: str) -> None:
    async with scratch_database(database_url, encoding="SQL_ASCII") as url:
        settings, conn = await _served(url, require_utf8=False)
        await conn.close()
        async with in_process(settings) as (_, client):
            answer = await client.post(f"/v1/locks/{'é' * 40}/acquire", json=WINDOW)
            short = await client.post(f"/v1/locks/{'é' * 10}/acquire", json=WINDOW)
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["field"] == "name" and "SQL_ASCII" in error["message"], error
    assert short.status_code == 200, short.text


@pytest.mark.system
async def test_the_migrate_command_exits_2_saying_why(latin1: tuple[str, httpx.AsyncClient]) -> None:
    url, _ = latin1
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "app", "migrate"],
        env=server_env(make_settings(url, "cli_table")),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "encoding is LATIN1, not UTF8" in done.stderr, done.stderr
