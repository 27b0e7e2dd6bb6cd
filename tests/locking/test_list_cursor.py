"""Paging never stops at a name the API would not make: a Java node may write any name (``billing/``, a space, a
control character, 64 four-byte characters), every row is listed exactly once, and every ``next_cursor`` the API
hands out is taken back. The dashboard's table pages through the same `GET /v1/locks` (app/ui/static/listing.js)."""

from __future__ import annotations

import asyncio
import base64
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.db import migrate
from tests.support.apps import drop_schema, in_process, make_settings

#: Any text a VARCHAR(64) of a UTF8 database holds: no NUL, no lone surrogate.
NAME = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=64)


@pytest.fixture(scope="module")
async def odd_table(database_url: str) -> AsyncIterator[tuple[Any, str, httpx.AsyncClient]]:
    """A lock table of its own, a direct connection to it (the Java node) and the service on it."""
    schema = f"odd_{uuid.uuid4().hex[:10]}"
    table_settings = make_settings(database_url, f"{schema}.shedlock")
    await asyncio.to_thread(migrate.upgrade, table_settings)
    conn = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    try:
        async with in_process(table_settings) as (_, client):
            yield conn, table_settings.table, client
    finally:
        await conn.close()
        await asyncio.to_thread(drop_schema, database_url, schema)


async def _every_page(client: httpx.AsyncClient, limit: int, most: int) -> list[str]:
    listed: list[str] = []
    cursor = None
    for _ in range(most + 1):
        answer = await client.get("/v1/locks", params={"limit": limit, **({"cursor": cursor} if cursor else {})})
        assert answer.status_code == 200, answer.text
        page = answer.json()
        listed += [item["name"] for item in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            return listed
    raise AssertionError(f"more pages than rows: {listed}")


@given(names=st.lists(NAME, min_size=1, max_size=20, unique=True), limit=st.integers(1, 5))
@example(names=["billing/", "billing", "a job", "tab\there", "é" * 64, "😀" * 64, "锁" * 64, "x" * 64], limit=1)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_every_row_is_listed_once_whatever_its_name(
    odd_table: tuple[Any, str, httpx.AsyncClient], names: list[str], limit: int
) -> None:
    conn, table, client = odd_table
    await conn.execute(f"DELETE FROM {table}")
    await conn.executemany(
        f"INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES ($1, now(), now(), 'java-host')",
        [(name,) for name in names],
    )
    listed = await _every_page(client, limit, len(names))
    assert listed == sorted(names, key=lambda name: name.encode())  # code point order, each once


@pytest.mark.parametrize(
    "cursor",
    [
        "!!!",  # not base64
        base64.urlsafe_b64encode(b"\xff\xfe").decode(),  # not UTF-8
        base64.urlsafe_b64encode(b"a\x00b").decode().rstrip("="),  # a NUL, which no row can hold
        "YR",  # decodes to "a", but the API spells that "YQ"
        "",
    ],
)
async def test_anything_else_is_still_not_a_cursor(client: httpx.AsyncClient, cursor: str) -> None:
    answer = await client.get("/v1/locks", params={"cursor": cursor})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "cursor"
