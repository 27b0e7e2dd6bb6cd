"""Hostile input beyond what the schema describes: oversized bodies (413), and the regressions the fuzzer found."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.servers import LiveServer

JSON = {"content-type": "application/json"}


async def chunks(padding: int, size: int = 1000) -> AsyncIterator[bytes]:
    """A valid acquire body, padded with whitespace: an app that read it would take the lock."""
    yield b'{"lock_at_most_for": "1m", "holder": "padded"'
    for start in range(0, padding, size):
        yield b" " * min(size, padding - start)
    yield b"}"


async def test_declared_oversized_body_is_413_before_it_is_read(
    client: httpx.AsyncClient, db: Any, settings: Settings, name: str
) -> None:
    body = b'{"lock_at_most_for": "1m"' + b" " * 20_000 + b"}"  # valid: without the limit, it would take the lock
    r = await client.post(f"/v1/locks/{name}/acquire", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 413, r.text
    assert r.json()["error"] == {
        "code": "payload_too_large",
        "message": "request body larger than 16384 bytes",
        "limit": 16384,
    }
    assert await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name) == 0


async def test_chunked_oversized_body_is_413_and_never_reaches_the_app(
    client: httpx.AsyncClient, db: Any, settings: Settings, name: str
) -> None:
    # No Content-Length: the limit counts what arrives, and the app never sees the body, whole or truncated.
    r = await client.post(f"/v1/locks/{name}/acquire", content=chunks(40_000), headers=JSON)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    assert await db.fetchval(f"SELECT count(*) FROM {settings.table} WHERE name = $1", name) == 0


async def test_chunked_body_within_the_limit_is_served(client: httpx.AsyncClient, name: str) -> None:
    r = await client.post(f"/v1/locks/{name}/acquire", content=chunks(100, size=10), headers=JSON)
    assert r.status_code == 200, r.text
    assert r.json()["locked_by"].startswith("padded [")


def test_real_server_refuses_an_oversized_body(live_server: LiveServer, name: str) -> None:
    body = b'{"lock_at_most_for": "1m"' + b" " * 1_000_000 + b"}"
    with httpx.Client(base_url=live_server.url, timeout=10) as http:
        r = http.post(f"/v1/locks/{name}/acquire", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
        assert http.get(f"/v1/locks/{name}").status_code == 404
        # The connection that carried the refused body was closed; the next request works on a fresh one.
        assert http.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}).status_code == 200


@pytest.mark.parametrize("holder", [5, True, [], {}, 1.5])
async def test_a_holder_that_is_not_a_string_is_422(client: httpx.AsyncClient, name: str, holder: Any) -> None:
    # Found by the fuzzer: the control-character check ran before the type check and raised a 500.
    r = await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m", "holder": holder})
    assert r.status_code == 422 and r.json()["error"]["field"] == "holder", r.text


@pytest.mark.parametrize(("method", "action", "allow"), [("GET", "acquire", "POST"), ("TRACE", "release", "POST")])
async def test_wrong_method_on_an_action_is_405_with_allow(
    client: httpx.AsyncClient, name: str, method: str, action: str, allow: str
) -> None:
    # Found by the fuzzer: GET .../acquire was read as a lock named "<name>/acquire" (422), and 405s lacked Allow.
    r = await client.request(method, f"/v1/locks/{name}/{action}")
    assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"
    assert r.headers["allow"] == allow


async def test_a_name_with_a_slash_is_a_row_name_on_read_and_a_clear_422_on_write(client: httpx.AsyncClient) -> None:
    # A Java node may have made "team/job": a read looks it up (tests/api/test_row_names.py), a write refuses it.
    r = await client.get("/v1/locks/team/job")
    assert r.status_code == 404 and r.json()["error"] == {
        "code": "lock_not_found",
        "message": "no lock named 'team/job'",
        "name": "team/job",
    }
    r = await client.post("/v1/locks/team/job/acquire", json={"lock_at_most_for": "1m"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name"


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/acquire"), ("POST", "/release"), ("POST", "/extend")],
)
async def test_a_name_with_a_newline_is_a_422_not_an_unknown_route(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    # Found by the fuzzer: the path pattern did not match a newline, so such a name was a 404 "no route".
    r = await client.request(method, f"/v1/locks/bad%0Aname{path}", json={"token": "x", "lock_at_most_for": "1m"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text
    # A read takes any row's name (a Java node's may hold a newline): the route still matches, no row is found.
    r = await client.get("/v1/locks/bad%0Aname")
    assert r.status_code == 404 and r.json()["error"]["name"] == "bad\nname", r.text
