"""The history API: keyset pages newest first, cursors that reject anything they did not issue (422, never 500),
the filters of /v1/runs, skips per run and per hour, and read access limited to a token's prefixes."""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.routes.runs import run_view
from app.history.runs import Run
from app.settings import Settings
from tests.support.api import acquire, release, ts
from tests.support.apps import in_process
from tests.support.openapi import check
from tests.support.tokens import Token, with_tokens

READER = Token("hist-reader", prefixes=("hist.",), access="read")


@pytest.fixture
def prefix() -> str:
    return f"hist.{uuid.uuid4().hex[:8]}."


async def cycle(client: httpx.AsyncClient, name: str, **body: Any) -> dict[str, Any]:
    lease: dict[str, Any] = (await acquire(client, name, "10m", **body)).json()
    assert (await release(client, name, lease["token"])).status_code == 200
    return lease


async def test_a_locks_runs_page_newest_first(client: httpx.AsyncClient, name: str) -> None:
    tokens = [(await cycle(client, name))["fencing_token"] for _ in range(5)]
    seen: list[int] = []
    cursor = None
    pages = 0
    while True:
        r = await client.get(f"/v1/locks/{name}/runs", params={"limit": 2} | ({"cursor": cursor} if cursor else {}))
        assert r.status_code == 200
        body = r.json()
        seen += [run["fencing_token"] for run in body["items"]]
        pages += 1
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == sorted(tokens, reverse=True) and pages == 3


async def test_a_name_never_taken_has_no_runs(client: httpx.AsyncClient, name: str) -> None:
    r = await client.get(f"/v1/locks/{name}/runs")
    assert r.status_code == 200 and r.json()["items"] == [] and r.json()["next_cursor"] is None
    assert r.json()["db_time"].endswith("Z")


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


BAD_CURSORS = [
    "",
    "x",
    "!!!!",
    "\x00",
    "cnVuczo\x00",
    "é",
    "a" * 201,
    _b64(b"runs:0"),
    _b64(b"runs:-1"),
    _b64(b"runs:01"),
    _b64(b"runs:9223372036854775808"),
    _b64(b"runs:1\x00"),
    _b64(b"runs:1 "),
    _b64(b"at:1:0"),
    _b64(b"at::5"),
    _b64(b"at:999999999999999999:5"),  # beyond the calendar
    _b64(b"at:1:9223372036854775808"),
    _b64(b"some-lock-name"),  # a cursor of the lock list
    _b64(b"\xff\xfe"),
]


@pytest.mark.parametrize("cursor", BAD_CURSORS)
@pytest.mark.parametrize("path", ["/v1/runs", "/v1/locks/job-x/runs"])
async def test_a_cursor_this_api_did_not_issue_is_422(client: httpx.AsyncClient, path: str, cursor: str) -> None:
    r = await client.get(path, params={"cursor": cursor})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["field"] == "cursor"


@pytest.mark.parametrize(
    ("path", "cursor"), [("/v1/runs", _b64(b"runs:5")), ("/v1/locks/job-x/runs", _b64(b"at:1700000000000000:5"))]
)
async def test_a_cursor_of_the_other_list_is_422(client: httpx.AsyncClient, path: str, cursor: str) -> None:
    r = await client.get(path, params={"cursor": cursor})
    assert r.status_code == 422 and r.json()["error"]["field"] == "cursor"


async def test_the_largest_cursors_are_accepted(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/locks/job-x/runs", params={"cursor": _b64(b"runs:9223372036854775807")})
    assert r.status_code == 200
    r = await client.get("/v1/runs", params={"cursor": _b64(b"at:-62135596800000000:9223372036854775807")})
    assert r.status_code == 200 and r.json()["items"] == []


async def test_every_locks_runs_page_newest_first(client: httpx.AsyncClient, prefix: str) -> None:
    tokens = [(await cycle(client, f"{prefix}{i % 2}"))["fencing_token"] for i in range(5)]
    seen: list[int] = []
    params: dict[str, Any] = {"prefix": prefix, "limit": 2}
    while True:
        body = (await client.get("/v1/runs", params=params)).json()
        seen += [run["fencing_token"] for run in body["items"]]
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]
    assert seen == sorted(tokens, reverse=True)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"limit": "x"}, "limit"),
        ({"since": "yesterday"}, "since"),
        ({"since": "0.5"}, "since"),  # not a Unix time
        ({"since": "2026-11-29"}, "since"),  # not a bare date
        ({"since": "2026-11-29T00:00:00\x00Z"}, "since"),
        ({"until": "0001-01-01T00:00:00+01:00"}, "until"),
        ({"until": "2026-13-01T00:00:00Z"}, "until"),
        ({"ended": "maybe"}, "ended"),
        ({"prefix": "a\x00"}, "prefix"),
        ({"prefix": "p" * 65}, "prefix"),
    ],
)
async def test_bad_filters_are_422(client: httpx.AsyncClient, params: dict[str, Any], field: str) -> None:
    r = await client.get("/v1/runs", params=params)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field


async def test_runs_filtered_by_prefix_and_ended(client: httpx.AsyncClient, prefix: str) -> None:
    released = await cycle(client, prefix + "a")
    running = (await acquire(client, prefix + "b", "10m")).json()
    expired = (await acquire(client, prefix + "c", "100ms")).json()
    await acquire(client, "other." + prefix, "10m")
    await asyncio.sleep(0.2)

    async def tokens(**params: Any) -> list[int]:
        r = await client.get("/v1/runs", params={"prefix": prefix, **params})
        assert r.status_code == 200, r.text
        return [run["fencing_token"] for run in r.json()["items"]]

    everything = [expired["fencing_token"], running["fencing_token"], released["fencing_token"]]
    assert await tokens() == everything
    assert await tokens(ended="true") == [expired["fencing_token"], released["fencing_token"]]
    assert await tokens(ended="false") == [running["fencing_token"]]
    assert await tokens(limit=1) == everything[:1]


async def test_runs_filtered_by_acquisition_time(client: httpx.AsyncClient, prefix: str) -> None:
    first = await cycle(client, prefix + "a")
    await asyncio.sleep(0.05)
    second = await cycle(client, prefix + "b")

    async def tokens(**params: Any) -> list[int]:
        r = await client.get("/v1/runs", params={"prefix": prefix, **params})
        assert r.status_code == 200, r.text
        return [run["fencing_token"] for run in r.json()["items"]]

    assert await tokens(since=second["locked_at"]) == [second["fencing_token"]]
    assert await tokens(until=second["locked_at"]) == [first["fencing_token"]]
    assert await tokens(since=first["locked_at"], until=second["locked_at"]) == [first["fencing_token"]]
    # The same instant with an offset, and without a zone (taken as UTC).
    at = ts(second["locked_at"])
    shifted = at.astimezone(timezone(timedelta(hours=2)))
    assert await tokens(since=shifted.isoformat()) == [second["fencing_token"]]
    assert await tokens(since=at.replace(tzinfo=None).isoformat()) == [second["fencing_token"]]
    assert await tokens(since="2999-01-01T00:00:00Z") == []


async def test_skips_are_counted_per_run_and_per_hour(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    for _ in range(3):
        assert (await acquire(client, name, "10m")).status_code == 409
    await app.state.skips.flush(app.state.store)
    assert (await acquire(client, name, "10m")).status_code == 409
    await app.state.skips.flush(app.state.store)  # a second flush adds to the same hour
    (run,) = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    assert run["fencing_token"] == lease["fencing_token"] and run["skipped"] == 4
    body = (await client.get(f"/v1/locks/{name}/skips")).json()
    assert body["name"] == name and body["hours"] == 24 and body["total"] == 4
    (hour,) = body["items"]
    assert hour["skipped"] == 4 and hour["hour"].endswith(":00:00.000Z")
    assert ts(hour["hour"]) <= ts(body["db_time"])
    await release(client, name, lease["token"])
    second = await cycle(client, name)
    newest, oldest = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    assert newest["fencing_token"] == second["fencing_token"] and newest["skipped"] == 0 and oldest["skipped"] == 4


@pytest.mark.parametrize("hours", ["0", "745", "x", "1.5", "1\v", " 1", "1 ", "1_0", "\u0661", "+1"])
async def test_skips_hours_out_of_range_are_422(client: httpx.AsyncClient, hours: str) -> None:
    r = await client.get("/v1/locks/job-x/skips", params={"hours": hours})
    assert r.status_code == 422 and r.json()["error"]["field"] == "hours"


@pytest.mark.parametrize("path", ["/v1/locks", "/v1/locks/job-x/runs", "/v1/jobs"])
@pytest.mark.parametrize("limit", ["1\v", " 2", "1_0", "\u0661"])
async def test_a_limit_in_anything_but_ascii_digits_is_422(client: httpx.AsyncClient, path: str, limit: str) -> None:
    """An integer query is digits alone: pydantic's lax int took "1\\v" (found by schemathesis in CI) and more."""
    r = await client.get(path, params={"limit": limit})
    assert r.status_code == 422 and r.json()["error"]["field"] == "limit", r.text
    assert (await client.get(path, params={"limit": "2"})).status_code == 200


async def test_history_routes_beside_the_lock_routes(client: httpx.AsyncClient) -> None:
    assert (await client.get("/v1/locks/runs")).json()["error"]["code"] == "lock_not_found"  # a lock named "runs"
    r = await client.get("/v1/locks/a/b/runs")  # the runs of a Java node's "a/b": none
    assert r.status_code == 200 and r.json()["items"] == []
    r = await client.get("/v1/locks/job-x/force-release")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = await client.post("/v1/locks/job-x/runs")
    assert r.status_code == 405 and r.headers["allow"] == "GET"


@pytest.fixture(scope="module")
async def reader(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """A server with tokens: one client with a read-only token for 'hist.' names, one with no token."""
    async with in_process(with_tokens(settings, READER, Token("writer"))) as (app, client):
        client.headers.update(READER.headers)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as anonymous:
            yield client, anonymous


async def test_reading_needs_a_token_and_stays_within_its_prefixes(
    reader: tuple[httpx.AsyncClient, httpx.AsyncClient], client: httpx.AsyncClient, prefix: str
) -> None:
    api, anonymous = reader
    mine = await cycle(client, prefix + "a")
    await cycle(client, "nothist." + prefix)
    for path in ("/v1/runs", f"/v1/locks/{prefix}a/runs", f"/v1/locks/{prefix}a/skips"):
        r = await anonymous.get(path)
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    assert (await api.get(f"/v1/locks/{prefix}a/runs")).json()["items"][0]["fencing_token"] == mine["fencing_token"]
    for path in (f"/v1/locks/nothist.{prefix}/runs", f"/v1/locks/nothist.{prefix}/skips"):
        r = await api.get(path)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    names = {run["name"] for run in (await api.get("/v1/runs", params={"limit": 1000})).json()["items"]}
    assert prefix + "a" in names and all(n.startswith("hist.") for n in names)
    assert (await api.get("/v1/runs", params={"prefix": "nothist."})).json()["items"] == []


async def test_real_answers_fit_the_document(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    check(await client.get(f"/v1/locks/{name}/runs"), "/v1/locks/{name}/runs")  # a running run: nulls
    await acquire(client, name, "10m")
    await release(client, name, lease["token"])
    check(await client.get(f"/v1/locks/{name}/runs"), "/v1/locks/{name}/runs")
    check(await client.get(f"/v1/locks/{name}/runs", params={"cursor": "x"}), "/v1/locks/{name}/runs")
    check(await client.get("/v1/runs", params={"limit": 1}), "/v1/runs")
    check(await client.get("/v1/runs", params={"since": "x"}), "/v1/runs")
    check(await client.get(f"/v1/locks/{name}/skips"), "/v1/locks/{name}/skips")
    await acquire(client, name, "10m")
    path = "/v1/locks/{name}/force-release"
    check(await client.post(f"/v1/locks/{name}/force-release", json={"reason": "test"}), path, "post")
    check(await client.post(f"/v1/locks/{name}/force-release", json={"reason": "again"}), path, "post")
    check(await client.post(f"/v1/locks/{name}-never/force-release", json={"reason": "x"}), path, "post")
    check(await client.post(f"/v1/locks/{name}/force-release", json={}), path, "post")


def test_a_runs_duration_is_the_difference_of_the_times_shown() -> None:
    """Times are shown truncated to the millisecond; the duration must be their difference, not the raw one
    rounded (86.9 ms → 92.3 ms shows as .086 → .092: 6 ms, where the raw 5.4 ms rounds to 5)."""
    acquired = datetime(2026, 11, 30, 3, 0, 0, 86_900)
    ended = acquired + timedelta(microseconds=5_400)
    run = Run("n", 1, "h", None, acquired, acquired, ended, "released", 0, None, None)
    view = run_view(run, acquired)
    assert view.duration_ms == 6
    shown = json.loads(view.model_dump_json())
    assert (ts(shown["ended_at"]) - ts(shown["acquired_at"])).total_seconds() * 1000 == view.duration_ms
