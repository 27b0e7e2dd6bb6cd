"""Migration 0002 on tables that already exist: leases held during the upgrade get their run; adopted tables with
TIMESTAMPTZ times or longer names keep working, recorded in UTC; running it again changes nothing."""

from __future__ import annotations

from typing import Any

from app.settings import Settings
from tests.support.api import acquire, release, seconds
from tests.support.apps import in_process, upgrade_to
from tests.support.java import JavaNode


async def java_table(conn: Any, settings: Settings, *, name: str, ts: str, by: str) -> None:
    """A lock table as a Java deployment made it, with these column types, before schedlock adopts it."""
    await conn.execute(f'CREATE SCHEMA "{settings.table_schema}"')
    await conn.execute(
        f"""CREATE TABLE {settings.table}(name {name} NOT NULL, lock_until {ts} NOT NULL,
        locked_at {ts} NOT NULL, locked_by {by} NOT NULL, PRIMARY KEY (name))"""
    )


def runs_table(settings: Settings) -> str:
    return f'"{settings.table_schema}"."{settings.table_name}_runs"'


async def test_leases_held_during_the_upgrade_get_their_run(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await upgrade_to(settings, "0001")
    java = JavaNode(conn, settings.table, hostname="java-host-1")
    await java.insert_or_take_over("held", 600.0)
    await java.insert_or_take_over("free", 600.0)
    await java.unlock("free", 0.0)
    await upgrade_to(settings)
    rows = await conn.fetch(f"SELECT name, outcome, fencing_token FROM {runs_table(settings)}")
    assert [(r["name"], r["outcome"]) for r in rows] == [("held", "running")]
    assert rows[0]["fencing_token"] == (await java.row("held"))["fencing_token"]
    await java.unlock("held", 0.0)
    assert await conn.fetchval(f"SELECT outcome FROM {runs_table(settings)}") == "released"
    await upgrade_to(settings)  # again: nothing changes
    assert await conn.fetchval(f"SELECT count(*) FROM {runs_table(settings)}") == 1


async def test_a_timestamptz_table_is_recorded_in_utc(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await java_table(conn, settings, name="VARCHAR(64)", ts="TIMESTAMPTZ", by="VARCHAR(255)")
    await upgrade_to(settings)
    java = JavaNode(conn, settings.table, hostname="java-host-1")
    await java.insert_or_take_over("java-job", 600.0)
    async with in_process(settings) as (_, client):
        lease = (await acquire(client, "http-job", "10m", lock_at_least_for="1m")).json()
        (run,) = (await client.get("/v1/locks/http-job/runs")).json()["items"]
        assert run["acquired_at"] == lease["locked_at"] and run["lock_until"] == lease["lock_until"]
        released = (await release(client, "http-job", lease["token"])).json()
        (run,) = (await client.get("/v1/locks/http-job/runs")).json()["items"]
        assert run["outcome"] == "released" and run["lock_until"] == released["lock_until"]
        (java_run,) = (await client.get("/v1/locks/java-job/runs")).json()["items"]
        current = (await client.get("/v1/locks/java-job")).json()
        assert java_run["acquired_at"] == current["locked_at"] and java_run["outcome"] == "running"
        assert seconds(java_run["acquired_at"], current["db_time"]) < 30


async def test_an_adopted_table_with_longer_names_keeps_working(fresh: tuple[Any, Settings]) -> None:
    # A history row that does not fit must never make the lock change itself fail.
    conn, settings = fresh
    await java_table(conn, settings, name="VARCHAR(255)", ts="TIMESTAMP", by="VARCHAR(1000)")
    await upgrade_to(settings)
    java = JavaNode(conn, settings.table, hostname="h" * 900)
    assert await java.insert_or_take_over("n" * 200, 600.0)
    assert await conn.fetchval(f"SELECT length(locked_by) FROM {runs_table(settings)}") == 900
