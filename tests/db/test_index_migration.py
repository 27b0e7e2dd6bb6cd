"""Migration 0007 (the runs by name and time) on a live history: built without holding the lock changes Java nodes
and schedlock write through the trigger, rebuilt when a failed build left it invalid, and used by the jobs' reads."""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest

from app.settings import Settings
from tests.support.apps import upgrade_to
from tests.support.java import JavaNode

INDEX = "shedlock_runs_name_acquired_idx"


async def index_state(conn: Any, settings: Settings) -> tuple[bool, str] | None:
    row = await conn.fetchrow(
        "SELECT i.indisvalid, pg_get_indexdef(i.indexrelid) AS def FROM pg_index i "
        "WHERE i.indexrelid = to_regclass($1)",
        f'"{settings.table_schema}".{INDEX}',
    )
    return None if row is None else (row["indisvalid"], row["def"])


async def test_the_index_is_built_while_java_nodes_keep_acquiring(
    fresh: tuple[Any, Settings], database_url: str
) -> None:
    conn, settings = fresh
    await upgrade_to(settings, "0005")
    runs = f'"{settings.table_schema}".shedlock_runs'
    await conn.execute(
        f"""INSERT INTO {runs} (name, fencing_token, locked_by, acquired_at, lock_until, outcome)
            SELECT 'old-' || i % 10, i, 'seed', now() - make_interval(mins => i), now() - make_interval(mins => i),
                   'released'
            FROM generate_series(1, 5000) AS i"""
    )
    # A Java node's acquisition in an open transaction: a concurrent build waits for it to end (a plain one would
    # too, and take a lock that queues every later writer behind it until then).
    first = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    second = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    try:
        open_tx = first.transaction()
        await open_tx.start()
        assert await JavaNode(first, settings.table, "java-1").insert_or_take_over("java.first", 60.0)
        migrating = asyncio.create_task(upgrade_to(settings))
        # The build has started once it waits for the open transaction.
        while not await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' "
            "AND wait_event_type = 'Lock'"
        ):
            assert not migrating.done(), migrating.result()
            await asyncio.sleep(0.05)
        # Meanwhile another node acquires and releases, not held up by the build (a blocked write would time out).
        await second.execute("SET lock_timeout = '5s'")
        java = JavaNode(second, settings.table, "java-2")
        assert await java.insert_or_take_over("java.second", 60.0)
        await java.unlock("java.second", 0.0)
        assert not migrating.done()
        await open_tx.commit()
        await migrating
    finally:
        await first.close()
        await second.close()
    valid, definition = await index_state(conn, settings) or (False, "")
    assert valid and definition.endswith("(name, acquired_at)"), definition
    # Both runs are in the history, and the index finds them.
    await conn.execute("SET enable_seqscan = off")
    found = await conn.fetch(
        f"SELECT name, outcome FROM {runs} WHERE name = ANY($1) AND acquired_at > now() - interval '1 hour' "
        "ORDER BY name",
        ["java.first", "java.second"],
    )
    assert [(r["name"], r["outcome"]) for r in found] == [("java.first", "running"), ("java.second", "released")]
    plan = "\n".join(
        r[0]
        for r in await conn.fetch(
            f"EXPLAIN SELECT * FROM {runs} WHERE name = 'old-1' AND acquired_at >= now() - interval '1 hour'"
        )
    )
    assert INDEX in plan, plan


async def test_an_invalid_index_left_by_a_failed_build_is_built_again(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await upgrade_to(settings, "0005")
    runs = f'"{settings.table_schema}".shedlock_runs'
    await conn.execute(
        f"""INSERT INTO {runs} (name, fencing_token, locked_by, acquired_at, lock_until)
            VALUES ('twice', 1, 'a', '2026-01-01', '2026-01-01'), ('twice', 2, 'b', '2026-01-01', '2026-01-01')"""
    )
    # A concurrent build that fails leaves its index behind, invalid (here: unique over duplicates).
    with pytest.raises(asyncpg.UniqueViolationError):
        await conn.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {INDEX} ON {runs} (name, acquired_at)")
    left = await index_state(conn, settings)
    assert left is not None and not left[0], left
    await upgrade_to(settings)
    valid, definition = await index_state(conn, settings) or (False, "")
    assert valid and "UNIQUE" not in definition, definition
    await upgrade_to(settings)  # again: nothing changes
    assert await index_state(conn, settings) == (True, definition)
