"""GET /v1/locks: name order, prefix and held filters, keyset pagination, and index use on a large table."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.locking.listing import list_query, prefix_upper_bound
from app.settings import Settings
from tests.support.api import acquire, release


async def all_pages(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    cursor = None
    while True:
        query = {**params, **({"cursor": cursor} if cursor else {})}
        r = await client.get("/v1/locks", params=query)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["db_time"].endswith("Z")
        items += body["items"]
        cursor = body["next_cursor"]
        if cursor is None:
            return items


async def test_pages_cover_every_name_once_in_order(client: httpx.AsyncClient) -> None:
    prefix = f"page-{uuid.uuid4().hex[:8]}."
    names = sorted(f"{prefix}{i:03d}" for i in range(23))
    await asyncio.gather(*(acquire(client, n, "10m") for n in names))
    items = await all_pages(client, prefix=prefix, limit=5)
    assert [i["name"] for i in items] == names
    assert all(i["held"] for i in items)
    first = (await client.get("/v1/locks", params={"prefix": prefix, "limit": 23})).json()
    assert first["next_cursor"] is None and len(first["items"]) == 23


async def test_held_filter(client: httpx.AsyncClient) -> None:
    prefix = f"held-{uuid.uuid4().hex[:8]}."
    leases = [(await acquire(client, f"{prefix}{i}", "10m")).json() for i in range(6)]
    for lease in leases[::2]:
        await release(client, lease["name"], lease["token"])
    held = await all_pages(client, prefix=prefix, held="true", limit=2)
    free = await all_pages(client, prefix=prefix, held="false", limit=2)
    assert [i["name"] for i in held] == [lease["name"] for lease in leases[1::2]]
    assert [i["name"] for i in free] == [lease["name"] for lease in leases[::2]]
    assert not any(i["held"] for i in free)


async def test_prefix_is_literal_not_a_pattern(client: httpx.AsyncClient) -> None:
    tag = uuid.uuid4().hex[:8]
    await acquire(client, f"{tag}_%x", "10m")
    await acquire(client, f"{tag}ab", "10m")
    items = await all_pages(client, prefix=f"{tag}_%")
    assert [i["name"] for i in items] == [f"{tag}_%x"]


async def test_items_do_not_leak_tokens(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    r = await client.get("/v1/locks", params={"prefix": name})
    assert lease["token"] not in r.text
    assert set(r.json()["items"][0]) == {
        *("name", "locked_by", "locked_at", "lock_until", "held", "fencing_token"),
        *("last_completed_slot", "last_completed_at"),  # null: no slot was ever completed (docs/slots.md)
    }


@given(st.text(min_size=1, max_size=8), st.text(max_size=8))
def test_prefix_upper_bound_brackets_exactly_the_prefixed_strings(prefix: str, rest: str) -> None:
    upper = prefix_upper_bound(prefix)
    as_bytes = (prefix + rest).encode("utf-8", "surrogatepass")
    assert as_bytes >= prefix.encode("utf-8", "surrogatepass")
    if upper is not None:
        assert as_bytes < upper.encode("utf-8", "surrogatepass")


@pytest.fixture(scope="module")
async def big_table(database_url: str) -> AsyncIterator[tuple[Any, str]]:
    """100,000 rows, as a large fleet would have."""
    schema = f"big_{uuid.uuid4().hex[:10]}"
    settings = Settings(database_url=database_url, table=f"{schema}.shedlock")  # type: ignore[arg-type]
    from app.db import migrate

    await asyncio.to_thread(migrate.upgrade, settings)
    conn = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    await conn.execute(
        f"INSERT INTO {settings.table} (name, lock_until, locked_at, locked_by) "
        "SELECT 'team' || (i % 50) || '.job-' || i, now() + (i % 3 - 1) * interval '1 hour', now(), 'host' "
        "FROM generate_series(1, 100000) AS i"
    )
    await conn.execute(f"ANALYZE {settings.table}")
    try:
        yield conn, settings.table
    finally:
        await conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
        await conn.close()


@pytest.mark.parametrize(
    "filters",
    [
        {},
        {"after": "team1.job-5"},
        {"prefix": "team7."},
        {"prefix": "team7.", "after": "team7.job-1007"},
        {"held": True},
        {"prefix": "team3", "held": False},
        {"scope": ["team7."]},
        {"scope": ["team7.", "team3."], "after": "team3.job-1003"},
        {"scope": ["team1.", "team4."], "prefix": "team"},
        {"scope": ["team2."], "prefix": "team2.job-1", "held": True},
    ],
    ids=str,
)
async def test_list_uses_the_name_index_on_100k_rows(big_table: tuple[Any, str], filters: dict[str, Any]) -> None:
    conn, table = big_table
    sql, args = list_query(
        table,
        prefix=filters.get("prefix"),
        held=filters.get("held"),
        after=filters.get("after"),
        limit=100,
        scope=filters.get("scope"),
    )
    # Force the generic plan a prepared statement ends up with after a few executions.
    await conn.execute("SET plan_cache_mode = force_generic_plan")
    statement = await conn.prepare(f"EXPLAIN {sql}")
    plan = "\n".join(r[0] for r in await statement.fetch(*args))
    await conn.execute("RESET plan_cache_mode")
    assert "name_c_idx" in plan, plan
    assert "Sort" not in plan and "Seq Scan" not in plan, plan
    rows = await conn.fetch(sql, *args)
    assert 0 < len(rows) <= 101
    names = [r["name"] for r in rows]
    assert names == sorted(names, key=lambda n: n.encode())
    assert all(n.startswith(tuple(filters.get("scope") or [""])) for n in names)
