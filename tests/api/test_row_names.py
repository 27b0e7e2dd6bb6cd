"""A row a Java node made under a name the API does not make (``billing/``, a tab, a ``..`` segment) can be read,
have its runs and skips read and be force-released: through a real server (uvicorn decoding the path), with the
Python client (which percent-encodes '/' and '.'), and on the dashboard's page. Acquire, extend and release still
refuse such names with a 422: callers make names by the API's rule (app.locking.names)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import asyncpg
import httpx
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.db import migrate
from schedlock import AsyncLockClient, InvalidRequest, LockClient
from tests.support.apps import drop_schema, in_process, make_settings
from tests.support.java import JavaNode
from tests.support.patience import ANSWER
from tests.support.servers import LiveServer

#: Appended to a test's own name: names a Java node's ShedLock takes and the API's writes refuse (the dots: names an
#: unencoded URL would lose to path normalisation).
#: The last one the writes take too: it is here for its percent-encoding.
ODD_BUT_WRITABLE = " 50% done?#"
ODD = ["/", "/nightly", "//double", "/./x", "/../x", "/.", "/..", "\ttab", ODD_BUT_WRITABLE]


def _path(name: str) -> str:
    return "/v1/locks/" + quote(name, safe="").replace(".", "%2E")


@pytest.mark.parametrize("suffix", ODD, ids=repr)
async def test_a_java_made_name_is_read_and_freed_with_the_client(
    java: JavaNode, live_server: LiveServer, name: str, suffix: str
) -> None:
    odd = name + suffix
    assert await java.insert_or_take_over(odd, 600)
    with LockClient(live_server.url, timeout=ANSWER) as client:
        info = await asyncio.to_thread(client.get, odd)
        assert (info.name, info.held, info.locked_by) == (odd, True, "java-host-1")
        runs = await asyncio.to_thread(client.history, odd)
        assert [(run.name, run.outcome, run.fencing_token) for run in runs.items] == [
            (odd, "running", info.fencing_token)
        ]
        assert (await asyncio.to_thread(client.skips, odd)).name == odd
        forced = await asyncio.to_thread(client.force_release, odd, "stuck Java node")
        assert forced.forced and forced.run is not None and forced.run.outcome == "force_released"
        assert not (await asyncio.to_thread(client.get, odd)).held
    async with httpx.AsyncClient(base_url=live_server.url) as raw:
        page = await raw.get("/ui/locks/" + quote(odd, safe=""))
        if "\t" in odd:  # the page shows the name: control characters are refused there
            assert page.status_code == 422
        else:
            assert page.status_code == 200 and 'data-lock="' in page.text
        for action in ("acquire", "extend", "release"):  # the writes keep the API's rule
            if suffix == ODD_BUT_WRITABLE:
                break
            body = {"lock_at_most_for": "1m", "token": "t"}
            answer = await raw.post(f"{_path(odd)}/{action}", json=body)
            assert answer.status_code == 422, (action, answer.text)
            assert answer.json()["error"]["field"] == "name"


async def test_the_client_still_refuses_to_take_such_a_name(live_server: LiveServer) -> None:
    with LockClient(live_server.url, timeout=ANSWER) as client:
        with pytest.raises(ValueError):
            client.acquire("billing/", "1m")
        with pytest.raises(InvalidRequest):
            await asyncio.to_thread(client.acquire, "tab\there", "1m")


#: Any text a VARCHAR(64) of a UTF8 database holds (no NUL, no lone surrogate), but for names ending in one of the
#: routes' own endings: ``GET /v1/locks/x/runs`` is the runs of "x", so a row "x/runs" can only be listed
#: (docs/api.md, "Names").
NAME = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), min_size=1, max_size=64).filter(
    lambda n: not n.endswith(("/acquire", "/release", "/extend", "/force-release", "/runs", "/skips"))
)


@pytest.fixture(scope="module")
async def odd_table(database_url: str) -> AsyncIterator[tuple[JavaNode, httpx.AsyncClient, Any]]:
    """A lock table of its own (other tests' listings never see these rows), a Java node and the service on it."""
    schema = f"rows_{uuid.uuid4().hex[:10]}"
    table_settings = make_settings(database_url, f"{schema}.shedlock")
    await asyncio.to_thread(migrate.upgrade, table_settings)
    pool = await asyncpg.create_pool(database_url, min_size=1, max_size=2, server_settings={"timezone": "UTC"})
    try:
        async with in_process(table_settings) as (app, client):
            yield JavaNode(pool, table_settings.table, hostname="java-host-1"), client, app
    finally:
        await pool.close()
        await asyncio.to_thread(drop_schema, database_url, schema)


@given(odd=NAME)
@example(odd="billing/")
@example(odd="..")
@example(odd="a/../b")
@example(odd="\n")
@example(odd="锁" * 64)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
async def test_any_name_a_row_can_have_is_read_back(
    odd_table: tuple[JavaNode, httpx.AsyncClient, Any], odd: str
) -> None:
    java, client, _ = odd_table
    await java.insert_or_take_over(odd, 600)  # False when an earlier example left the row held: read it anyway
    answer = await client.get(_path(odd))
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == odd
    runs = await client.get(f"{_path(odd)}/runs", params={"limit": 1})
    assert runs.status_code == 200 and runs.json()["items"][0]["name"] == odd


@pytest.mark.parametrize("dots", [".", ".."])
async def test_the_client_reads_a_name_of_dots(odd_table: tuple[JavaNode, httpx.AsyncClient, Any], dots: str) -> None:
    # A URL path segment "." or ".." is resolved away by URL libraries (httpx among them): the client encodes dots.
    java, _, app = odd_table
    await java.insert_or_take_over(dots, 600)
    transport = httpx.ASGITransport(app=app)
    async with AsyncLockClient("http://schedlock.test", transport=transport, timeout=ANSWER) as client:
        assert (await client.get(dots)).name == dots
        assert (await client.history(dots)).items[0].name == dots


@pytest.mark.parametrize("bad", ["x" * 65, ""], ids=["65 characters", "empty"])
async def test_a_name_no_row_can_have_is_still_a_422(client: httpx.AsyncClient, bad: str) -> None:
    answer = await client.get(f"/v1/locks/{bad}/runs")
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["field"] == "name"


async def test_reads_are_validated_with_the_reads_rule(client: Any, java: JavaNode, name: str) -> None:
    # A read of a name the write rule refuses: the route's binding (app.api.bodies) validates it with the read
    # route's own rule.
    assert await java.insert_or_take_over(f"{name}/lean", 600)
    answer = await client.get(_path(f"{name}/lean"))
    assert answer.status_code == 200 and answer.json()["name"] == f"{name}/lean"
