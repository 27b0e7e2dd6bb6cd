"""Sharing the table with Java ShedLock nodes, both ways, replaying Java's own statements (tests/support/java.py).
The real JdbcTemplateLockProvider runs in tests/system/integrations/ (ShedLock 7 in test_jdbc_template.py, ShedLock 6 in
test_spring_boot.py), so a release that changes its statements is caught there."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from tests.support.api import acquire, extend, release
from tests.support.java import JavaNode


async def test_http_acquire_is_refused_while_java_holds(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    assert await java.insert_or_take_over(name, 600.0)
    r = await acquire(client, name, "10m")
    assert r.status_code == 409
    assert r.json()["error"]["locked_by"] == "java-host-1"


async def test_http_acquire_succeeds_after_java_unlocks(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 600.0)
    assert await java.unlock(name, 0.0)
    assert (await acquire(client, name, "10m")).status_code == 200


async def test_java_unlock_keeps_its_at_least_window(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 600.0)
    await java.unlock(name, 60.0)
    assert (await acquire(client, name, "10m")).status_code == 409


async def test_java_is_refused_while_http_holds_and_cannot_unlock_or_extend_it(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    lease = (await acquire(client, name, "10m")).json()
    assert not await java.insert_or_take_over(name, 600.0)
    assert not await java.take_over(name, 600.0)
    assert not await java.unlock(name, 0.0)
    assert not await java.extend(name, 600.0)
    row = await java.row(name)
    assert row["locked_by"] == lease["locked_by"]
    assert (await release(client, name, lease["token"])).status_code == 200


async def test_java_takes_over_an_expired_http_lease_and_the_old_token_is_dead(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    assert await java.insert_or_take_over(name, 600.0)
    before = await java.row(name)
    r = await release(client, name, lease["token"])
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"
    r = await extend(client, name, lease["token"], "10m")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"
    assert await java.row(name) == before, "Java's row must be untouched"
    assert before["fencing_token"] > lease["fencing_token"]
    assert (await acquire(client, name, "10m")).status_code == 409


async def test_java_takeover_by_update_also_kills_the_old_token(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    lease = (await acquire(client, name, "100ms", lock_at_least_for="100ms")).json()
    await asyncio.sleep(0.2)
    assert await java.take_over(name, 600.0)
    assert (await release(client, name, lease["token"])).status_code == 409
    assert (await java.row(name))["locked_by"] == "java-host-1"


async def test_java_acquisitions_advance_the_fencing_token(
    client: httpx.AsyncClient, java: JavaNode, name: str
) -> None:
    seen = []
    await java.insert_or_take_over(name, 600.0)
    seen.append((await java.row(name))["fencing_token"])
    await java.unlock(name, 0.0)
    lease = (await acquire(client, name, "10m")).json()
    seen.append(lease["fencing_token"])
    await release(client, name, lease["token"])
    await java.take_over(name, 600.0)
    seen.append((await java.row(name))["fencing_token"])
    await java.extend(name, 900.0)  # an extend is not an acquisition
    seen.append((await java.row(name))["fencing_token"])
    await java.unlock(name, 0.0)
    lease = (await acquire(client, name, "10m")).json()
    seen.append(lease["fencing_token"])
    assert seen[0] < seen[1] < seen[2] == seen[3] < seen[4]


async def test_rows_are_never_deleted(client: httpx.AsyncClient, db: Any, settings: Any, name: str) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await release(client, name, lease["token"])
    await asyncio.sleep(0.2)
    count = await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name)
    assert count == 1


async def test_java_sees_a_released_http_lock_as_free(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    await release(client, name, lease["token"])
    assert await java.take_over(name, 600.0), "Java's UPDATE path (row known to exist) must take it"


async def test_two_java_nodes_and_http_exclude_each_other(
    client: httpx.AsyncClient, db: Any, settings: Any, name: str
) -> None:
    nodes = [JavaNode(db, settings.table, hostname=f"java-{i}") for i in range(2)]
    outcomes = await asyncio.gather(
        *(node.insert_or_take_over(name, 600.0) for node in nodes),
        *(acquire(client, name, "10m") for _ in range(4)),
    )
    java_wins = sum(1 for o in outcomes[:2] if o)
    http_wins = sum(1 for o in outcomes[2:] if isinstance(o, httpx.Response) and o.status_code == 200)
    assert java_wins + http_wins == 1
