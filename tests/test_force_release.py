"""Force-release: only admin tokens (within their prefixes) or an open server; frees the lock now, the at-least
window ignored; ends the lease (release and extend answer not_holder); records who and why; logs an audit line."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import tomllib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.auth.authenticator import Authenticator
from app.auth.tokens import TokenConfigError, parse_tokens
from app.settings import Settings
from tests.support.api import acquire, extend, release, seconds
from tests.support.apps import in_process
from tests.support.java import JavaNode
from tests.support.tokens import Token, with_tokens

ADMIN = Token("ops", prefixes=("fr.",), admin=True)
ELSEWHERE = Token("ops-elsewhere", prefixes=("other.",), admin=True)
WRITER = Token("jobs", prefixes=("fr.",))
READER = Token("auditor", access="read")


async def acquire_as(client: httpx.AsyncClient, token: Token, name: str, **body: Any) -> httpx.Response:
    json = {"lock_at_most_for": "10m", **body}
    return await client.post(f"/v1/locks/{name}/acquire", json=json, headers=token.headers)


async def force(client: httpx.AsyncClient, name: str, reason: str = "holder died", **kw: Any) -> httpx.Response:
    return await client.post(f"/v1/locks/{name}/force-release", json={"reason": reason}, **kw)


@pytest.fixture(scope="module")
async def api(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with in_process(with_tokens(settings, ADMIN, ELSEWHERE, WRITER, READER)) as (_, client):
        yield client


@pytest.fixture
def fr_name(name: str) -> str:
    return f"fr.{name}"


async def test_an_admin_token_frees_a_held_lock(api: httpx.AsyncClient, fr_name: str) -> None:
    lease = (await acquire_as(api, WRITER, fr_name)).json()
    r = await force(api, fr_name, "host-3 died in the outage", headers=ADMIN.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["name"] == fr_name and body["forced"] is True and body["lock_until"] == body["db_time"]
    run = body["run"]
    assert run["fencing_token"] == lease["fencing_token"] and run["outcome"] == "force_released"
    assert run["forced_by"] == "ops" and run["force_reason"] == "host-3 died in the outage"
    assert run["ended_at"] == body["db_time"] and run["token_name"] == "jobs"
    again = (await api.get(f"/v1/locks/{fr_name}/runs", headers=READER.headers)).json()["items"][0]
    assert again == run | {"duration_ms": again["duration_ms"]}
    assert (await acquire_as(api, WRITER, fr_name)).status_code == 200


@pytest.mark.parametrize(
    ("token", "why"),
    [(WRITER, "not an admin token"), (READER, "read-only"), (ELSEWHERE, "may not use lock")],
)
async def test_other_tokens_are_forbidden(api: httpx.AsyncClient, fr_name: str, token: Token, why: str) -> None:
    await acquire_as(api, WRITER, fr_name)
    r = await force(api, fr_name, headers=token.headers)
    assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
    assert why in r.json()["error"]["message"]
    assert (await api.get(f"/v1/locks/{fr_name}", headers=READER.headers)).json()["held"] is True


async def test_without_a_token_it_is_401(api: httpx.AsyncClient, fr_name: str) -> None:
    r = await force(api, fr_name)
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"


async def test_an_open_server_allows_it(client: httpx.AsyncClient, name: str) -> None:
    await acquire(client, name, "10m")
    body = (await force(client, name)).json()
    assert body["forced"] is True and body["run"]["forced_by"] == "anonymous"


def test_an_admin_token_must_be_read_write() -> None:
    text = (
        '{"tokens": [{"name": "x", "sha256": "' + "a" * 64 + '", "prefixes": ["*"], "access": "read", "admin": true}]}'
    )
    with pytest.raises(TokenConfigError, match="admin"):
        parse_tokens(text, "test")
    assert parse_tokens(text.replace('"read"', '"read-write"'), "test")[0].admin is True


async def test_the_lease_is_over_for_its_holder(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    await force(client, name)
    for r in (await release(client, name, lease["token"]), await extend(client, name, lease["token"], "10m")):
        assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"


async def test_the_at_least_window_is_ignored(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "2h", lock_at_least_for="1h")).json()
    await release(client, name, lease["token"])
    assert (await acquire(client, name, "10m")).status_code == 409  # the window holds it
    body = (await force(client, name)).json()
    assert body["forced"] is True
    assert body["run"]["outcome"] == "released", "a run that already ended keeps its outcome"
    assert (await acquire(client, name, "10m")).status_code == 200


async def test_a_free_lock_is_left_alone(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    released = (await release(client, name, lease["token"])).json()
    body = (await force(client, name)).json()
    assert body["forced"] is False and body["lock_until"] == released["lock_until"]
    assert body["run"]["outcome"] == "released"
    assert (await release(client, name, lease["token"])).status_code == 200, "the released lease is untouched"
    twice = await force(client, name)
    assert twice.status_code == 200 and twice.json()["forced"] is False


async def test_an_unknown_name_is_404(client: httpx.AsyncClient, name: str) -> None:
    r = await force(client, name)
    assert r.status_code == 404 and r.json()["error"]["code"] == "lock_not_found"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (None, "body"),
        ({}, "reason"),
        ({"reason": ""}, "reason"),
        ({"reason": "r" * 501}, "reason"),
        ({"reason": "line\nbreak"}, "reason"),
        ({"reason": "nul\x00"}, "reason"),
        ({"reason": 7}, "reason"),
        ({"reason": "ok", "force": True}, "force"),
    ],
)
async def test_a_bad_reason_is_422(client: httpx.AsyncClient, name: str, body: Any, field: str) -> None:
    await acquire(client, name, "10m")
    r = await client.post(f"/v1/locks/{name}/force-release", json=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    assert (await client.get(f"/v1/locks/{name}")).json()["held"] is True


async def test_a_body_that_is_not_said_to_be_json_is_415(client: httpx.AsyncClient, name: str) -> None:
    await acquire(client, name, "10m")
    body = b'{"reason": "sent as text"}'
    r = await client.post(f"/v1/locks/{name}/force-release", content=body, headers={"content-type": "text/plain"})
    assert r.status_code == 415 and r.json()["error"]["code"] == "unsupported_media_type"
    assert (await client.get(f"/v1/locks/{name}")).json()["held"] is True


async def test_an_audit_line_is_logged(client: httpx.AsyncClient, name: str, caplog: pytest.LogCaptureFixture) -> None:
    lease = (await acquire(client, name, "10m", holder="host-3")).json()
    with caplog.at_level(logging.INFO, logger="schedlock.audit"):
        await force(client, name, "stuck since the outage")
    (record,) = [r for r in caplog.records if r.name == "schedlock.audit"]
    fields = record.fields  # type: ignore[attr-defined]
    assert fields["lock"] == name and fields["by"] == "anonymous" and fields["reason"] == "stuck since the outage"
    assert fields["fencing_token"] == lease["fencing_token"] and fields["locked_by"] == lease["locked_by"]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="schedlock.audit"):
        await force(client, name)  # nothing forced: nothing to audit
    assert not [r for r in caplog.records if r.name == "schedlock.audit"]


async def test_a_java_holder_after_a_force_release(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    await java.insert_or_take_over(name, 600.0)
    body = (await force(client, name)).json()
    assert body["run"]["outcome"] == "force_released" and body["run"]["source"] == "table"
    assert not await java.extend(name, 600.0), "its keep-alive fails"
    # Its unlock still matches (locked_by is its hostname): inside lockAtLeastFor, the row is held again.
    assert await java.unlock(name, 60.0)
    row = (await client.get(f"/v1/locks/{name}")).json()
    assert row["held"] is True and seconds(row["locked_at"], row["lock_until"]) == pytest.approx(60, abs=0.002)
    (run,) = (await client.get(f"/v1/locks/{name}/runs")).json()["items"]
    assert run["outcome"] == "force_released" and run["lock_until"] == body["lock_until"]


async def test_force_release_racing_release_and_takeover(client: httpx.AsyncClient, java: JavaNode, name: str) -> None:
    for _ in range(15):
        lease = (await acquire(client, name, "10m")).json()
        answers = await asyncio.gather(
            force(client, name), release(client, name, lease["token"]), java.insert_or_take_over(name, 0.001)
        )
        assert {answers[0].status_code, answers[1].status_code} <= {200, 409}
        (run, *_) = (await client.get(f"/v1/locks/{name}/runs", params={"limit": 3})).json()["items"]
        await asyncio.sleep(0.002)
        assert run["outcome"] in {"released", "force_released", "expired", "running", "taken_over"}
    runs = (await client.get(f"/v1/locks/{name}/runs", params={"limit": 1000})).json()["items"]
    assert all(r["outcome"] != "running" or r["source"] == "table" for r in runs)
    assert sum(r["source"] == "api" for r in runs) == 15


def test_new_token_makes_admin_tokens() -> None:
    def new_token(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "app", "new-token", "ops", "--prefix", "fr.", *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)

    made = new_token("--admin")
    assert made.returncode == 0, made.stderr
    assert tomllib.loads(made.stderr)["tokens"][0]["admin"] is True
    principal = asyncio.run(Authenticator(Settings(tokens=made.stderr)).authenticate(f"Bearer {made.stdout.strip()}"))
    assert principal.is_admin and principal.prefixes == ("fr.",)
    as_json = new_token("--admin", "--format", "json")
    assert json.loads(as_json.stderr)["admin"] is True
    assert "admin" not in json.loads(new_token("--format", "json").stderr), "unchanged for other tokens"
    refused = new_token("--admin", "--read-only")
    assert refused.returncode == 2 and 'admin token must have access = "read-write"' in refused.stderr
