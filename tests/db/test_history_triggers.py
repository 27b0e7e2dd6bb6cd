"""Migration 0005's triggers do what 0001's, 0002's and 0003's did: the same operations, schedlock's (single,
batched and slotted) and a Java node's, replayed on a table at revision 0004 and on one at head, each pair in one
transaction (so both see the same now), leave equal lock rows after every step and equal runs, fencing tokens
included. The token name is 0002's on awkward holders; an upgrade from 0004 keeps the running runs; a downgrade
brings 0004's triggers back."""

from __future__ import annotations

import asyncio
import importlib
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from alembic import command

from app.db import migrate
from app.db.schema import qualified_name, runs_table
from app.locking.leases import hash_token, new_locked_by, new_token, released_marker
from app.locking.slots import fixed
from app.locking.statements import LockStatements
from app.settings import Settings
from tests.support.apps import fresh_table
from tests.support.java import JavaNode

NAMES = [f"job-{i}" for i in range(4)]
HOLDERS = ["java-host-1", "java-host-2"]
#: What one step does (acquire twice as often: most steps then find something to release, extend or take over).
KINDS = (
    "acquire",
    "acquire",
    "acquire_slot",
    "release",
    "stale_release",
    "extend",
    "acquire_many",
    "release_many",
    "force",
    "java_acquire",
    "java_take_over",
    "java_unlock",
    "java_extend",
)


async def alembic(settings: Settings, action: str, revision: str) -> None:
    await asyncio.to_thread(getattr(command, action), migrate.alembic_config(settings), revision)


@pytest.fixture
async def pair(database_url: str) -> AsyncIterator[tuple[Any, Settings, Settings]]:
    async with fresh_table(database_url, "trg0004") as (conn, old), fresh_table(database_url, "trghead") as (_, new):
        await alembic(old, "upgrade", "0004")
        await alembic(new, "upgrade", "head")
        yield conn, old, new


class Side:
    """One table and its statements; leases (name -> token hash) as this side's caller knows them."""

    def __init__(self, conn: Any, settings: Settings) -> None:
        self.conn, self.settings = conn, settings
        self.table = qualified_name(settings.table_name, settings.table_schema)
        self.runs = runs_table(settings.table_name, settings.table_schema)
        self.sql = LockStatements(self.table, self.runs)
        self.leases: dict[str, bytes] = {}

    def java(self, host: str) -> JavaNode:
        return JavaNode(self.conn, self.table, hostname=host)

    async def rows(self) -> list[Any]:
        return [dict(r) for r in await self.conn.fetch(f"SELECT * FROM {self.table} ORDER BY name")]

    async def runs_rows(self) -> list[Any]:
        return [dict(r) for r in await self.conn.fetch(f"SELECT * FROM {self.runs} ORDER BY fencing_token, name")]


def operations(rng: random.Random) -> Callable[[Side], Awaitable[Any]]:
    """One operation, drawn from ``rng``, to be run on each side in turn."""
    name = rng.choice(NAMES)
    at_most = timedelta(seconds=rng.choice([0.05, 0.2, 60.0]))
    at_least = timedelta(seconds=rng.choice([0.0, 0.0, 0.1]))
    token = new_token()
    h, stale = hash_token(token), hash_token(new_token())
    locked_by = new_locked_by("host", rng.choice([None, "ops-token"]))
    host = rng.choice(HOLDERS)
    some = sorted(rng.sample(NAMES, rng.randint(1, len(NAMES))))
    hashes = [hash_token(new_token()) for _ in some]
    kind = rng.choice(KINDS)
    completed = rng.random() < 0.5
    rng_slot = rng.randint(1, 3)

    async def run(side: Side) -> Any:
        c, sql, known = side.conn, side.sql, side.leases
        if kind == "acquire":
            got = await c.fetch(sql.acquire, name, at_most, locked_by, h, at_least)
            if got and got[0]["ok"]:
                known[name] = h
        elif kind == "acquire_slot":
            slot = fixed(f"tick-{rng_slot}").args()
            got = await c.fetch(sql.acquire_slot, name, at_most, locked_by, h, at_least, *slot)
            if got and got[0]["ok"]:
                known[name] = h
        elif kind in ("release", "stale_release"):
            lease = known.get(name, stale) if kind == "release" else stale
            await c.fetch(sql.release, name, lease, released_marker(lease), completed)
        elif kind == "extend":
            await c.fetch(sql.extend, name, known.get(name, stale), at_most, None)
        elif kind == "acquire_many":
            n = len(some)
            got = await c.fetch(sql.acquire_many, some, [at_most] * n, [locked_by] * n, hashes, [at_least] * n)
            for r in got:
                if r["ok"]:
                    known[r["name"]] = hashes[some.index(r["name"])]
        elif kind == "release_many":
            leases = [known.get(x, stale) for x in some]
            await c.fetch(sql.release_many, some, leases, [released_marker(x) for x in leases], [True] * len(some))
        elif kind == "force":
            await c.fetch(sql.force_release, name, "admin", "stuck")
        elif kind == "java_acquire":
            await side.java(host).insert_or_take_over(name, at_most.total_seconds())
        elif kind == "java_take_over":
            await side.java(host).take_over(name, at_most.total_seconds())
        elif kind == "java_unlock":
            await side.java(host).unlock(name, at_least.total_seconds())
        else:
            await side.java(host).extend(name, at_most.total_seconds())
        return kind

    return run


async def test_the_same_operations_record_the_same_runs(pair: tuple[Any, Settings, Settings]) -> None:
    conn, old_settings, new_settings = pair
    old, new = Side(conn, old_settings), Side(conn, new_settings)
    rng = random.Random(20261202)
    kinds = set()
    for step in range(400):
        op = operations(rng)
        # One transaction, so both sides see the same CURRENT_TIMESTAMP.
        async with conn.transaction():
            for side in (old, new):
                kinds.add(await op(side))
        assert await new.rows() == await old.rows(), (step, kinds)
        if step % 25 == 24:
            await asyncio.sleep(0.06)  # let the shortest leases expire, so takeovers and late releases happen
    # A lease released after its lock_until, whatever the machine's speed (on a fast database the draws above may
    # release every short lease in time): its run ends "expired", on both sides alike.
    h = hash_token(new_token())
    async with conn.transaction():
        for side in (old, new):
            await conn.fetch(side.sql.acquire, "late", timedelta(seconds=0.05), "host", h, timedelta(0))
    await asyncio.sleep(0.1)
    async with conn.transaction():
        for side in (old, new):
            await conn.fetch(side.sql.release, "late", h, released_marker(h), True)
    async with conn.transaction():
        for side in (old, new):
            await side.java("java-host-1").insert_or_take_over("still-running", 600.0)
    assert await new.rows() == await old.rows()
    old_runs, new_runs = await old.runs_rows(), await new.runs_rows()
    assert new_runs == old_runs
    outcomes = {r["outcome"] for r in old_runs}
    assert outcomes >= {"running", "released", "expired", "taken_over", "force_released"}, outcomes
    assert any(r["token_name"] == "ops-token" for r in old_runs) and len(old_runs) > 50
    assert any(r["last_completed_slot"] is not None for r in await old.rows()), "a slot was completed"
    assert kinds == set(KINDS)


async def test_the_token_name_is_0002s(pair: tuple[Any, Settings, Settings]) -> None:
    conn, _, _ = pair
    m = importlib.import_module("app.db.migrations.versions.0005_cheaper_triggers")
    holders = [
        new_locked_by("host", "ops-token"),
        new_locked_by("host", None),
        new_locked_by("é [schedlock via x lease 1]", "a.b:c@d-e_f"),
        "java-host",
        "",
        "a [schedlock via t lease 1] ",
        "a [schedlock via t lease ]",
        "a [schedlock via  lease 1]",
        "a [schedlock via t x lease 1]",
        "a [schedlock via t lease 1g]",
        "x [schedlock via a lease 1] [schedlock via b lease 2]",
        "x [schedlock via a lease 1] [schedlock lease 2]",
        "[schedlock via a lease 1]",
        " [schedlock via a lease 1]",
        "a [schedlock via t lease lease 1]",
        "a [schedlock via t.é lease 1]",
        "a [schedlock via t lease 1] lease 2]",
        "a [schedlock via t lease 1]]",
        "a  [schedlock via t lease 1]",
        "a [schedlock via [schedlock via t lease 1]",
        "a [schedlock via t lease 1]\n",
        "a [schedlock via T lease 0A]",
        "a [SCHEDLOCK via t lease 1]",
    ]
    got = await conn.fetch(
        f"SELECT h, {m.token_name('h')} AS new, substring(h from '{m.TOKEN_NAME_RE}') AS old FROM unnest($1::text[]) h",
        holders,
    )
    assert [(r["h"], r["new"]) for r in got] == [(r["h"], r["old"]) for r in got]
    assert {r["new"] for r in got} == {"ops-token", "a.b:c@d-e_f", "b", "a", "t", None}


async def test_an_upgrade_from_0004_keeps_the_running_runs(database_url: str) -> None:
    async with fresh_table(database_url, "trgup") as (conn, settings):
        await alembic(settings, "upgrade", "0004")
        side = Side(conn, settings)
        java = side.java("java-host-1")
        h = hash_token(new_token())
        await conn.fetch(side.sql.acquire, "api", timedelta(minutes=5), new_locked_by("h", "ops"), h, timedelta(0))
        await java.insert_or_take_over("java", 300.0)
        await java.insert_or_take_over("expired", 0.05)
        await alembic(settings, "upgrade", "head")
        await asyncio.sleep(0.1)
        await conn.fetch(side.sql.release, "api", h, released_marker(h), True)
        await java.unlock("java", 0.0)
        await java.insert_or_take_over("expired", 300.0)
        runs = await conn.fetch(f"SELECT name, outcome, token_name FROM {side.runs} ORDER BY fencing_token")
        assert [tuple(r) for r in runs] == [
            ("api", "released", "ops"),
            ("java", "released", None),
            ("expired", "taken_over", None),
            ("expired", "running", None),
        ]
        at_head = await trigger_definitions(conn, side.table)
        assert "UPDATE OF locked_at, locked_by, fencing_token" in at_head["shedlock_schedlock_fence"]
        await alembic(settings, "downgrade", "0004")
        at_0004 = await trigger_definitions(conn, side.table)
        assert (
            sorted(at_0004)
            == sorted(at_head)
            == [
                "shedlock_schedlock_fence",
                "shedlock_schedlock_runs",
                "shedlock_schedlock_slot",
            ]
        )
        assert "BEFORE INSERT OR UPDATE ON" in at_0004["shedlock_schedlock_fence"]
        await java.unlock("expired", 0.0)  # 0002's trigger, as it was
        assert await conn.fetchval(f"SELECT outcome FROM {side.runs} ORDER BY fencing_token DESC LIMIT 1") == "released"
        await java.insert_or_take_over("after", 300.0)  # and 0001's token on insert
        assert (await java.row("after"))["fencing_token"] > 0
        await alembic(settings, "upgrade", "head")
        assert await trigger_definitions(conn, side.table) == at_head
        await java.unlock("after", 0.0)
        assert await conn.fetchval(f"SELECT count(*) FROM {side.runs} WHERE outcome = 'running'") == 0


async def trigger_definitions(conn: Any, table: str) -> dict[str, str]:
    rows = await conn.fetch(
        "SELECT tgname, pg_get_triggerdef(oid) AS d FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal",
        table,
    )
    return {r["tgname"]: r["d"] for r in rows}
