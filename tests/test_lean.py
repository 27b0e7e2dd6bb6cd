"""The lean path (app.api.middleware.lean) answers exactly as FastAPI's generic handling of the same routes would,
for every status code the OpenAPI document declares for them; and the tests' witness notices when it does not serve."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from pydantic import SecretStr

from app.api.routes.locks import LEAN_ENDPOINTS
from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.apps import in_process, lean_witness
from tests.support.servers import free_port

SECRET = "lean-test-secret-" + "s" * 40
READER = "lean-test-reader-" + "r" * 40


def _tokens() -> str:
    return json.dumps(
        {
            "tokens": [
                {"name": "jobs", "sha256": hash_secret(SECRET), "prefixes": ["lean."], "access": "read-write"},
                {"name": "reader", "sha256": hash_secret(READER), "prefixes": ["*"], "access": "read"},
            ]
        }
    )


@pytest.fixture(scope="module")
async def pair(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    configured = settings.model_copy(update={"tokens": _tokens(), "allowed_origins": [LISTED]})
    async with in_process(configured, lean=True) as (_, lean), in_process(configured, lean=False) as (_, generic):
        yield lean, generic


@pytest.fixture(scope="module")
async def down_pair(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    """The same two apps on a database address where nothing listens: every statement fails (503)."""
    dead = SecretStr(f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    configured = settings.model_copy(update={"tokens": _tokens(), "database_url": dead, "db_connect_timeout": 1.0})
    async with in_process(configured, lean=True) as (_, lean), in_process(configured, lean=False) as (_, generic):
        yield lean, generic


def _shape(r: httpx.Response, name: str) -> tuple[Any, ...]:
    """What must agree: status, the whole error (code, message, field, problems), the keys of a success, and the
    headers that matter."""
    body = json.loads(r.text.replace(name, "NAME"))  # each path works on a lock name of its own
    error = body.get("error")
    if error and error["code"] == "lock_held":  # the holder and the times differ between the two runs
        error = sorted(error)
    return (
        r.status_code,
        error or sorted(body),
        r.headers.get("www-authenticate"),
        r.headers.get("retry-after"),
        r.headers.get("allow"),
        r.headers.get("accept"),
        r.headers.get("access-control-allow-origin"),
    )


AUTH = {"Authorization": f"Bearer {SECRET}"}
JSON = "application/json; charset=utf-8"
LISTED = "https://jobs.example.com"
JSON_AUTH = {**AUTH, "content-type": "application/vnd.schedlock+json"}
_AUTH = {"headers": AUTH}
READ_ONLY = {"Authorization": f"Bearer {READER}"}


def _requests(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, httpx keyword arguments) in an order that walks a lease's whole life."""
    acquire = f"/v1/locks/{name}/acquire"
    return [
        ("POST", acquire, {"json": {"lock_at_most_for": "10m"}}),  # 401: no token
        ("POST", acquire, {"json": {"lock_at_most_for": "10m"}, "headers": {"Authorization": "Bearer nope"}}),
        ("POST", acquire, {"json": {"lock_at_most_for": "bad"}}),  # 401 before validation
        ("POST", "/v1/locks/other.x/acquire", {"json": {"lock_at_most_for": "10m"}, "headers": AUTH}),  # 403
        ("POST", acquire, {"json": {"lock_at_most_for": "10m"}, "headers": READ_ONLY}),  # 403 read-only
        ("POST", acquire, {"json": {"lock_at_most_for": "bad"}, "headers": AUTH}),
        ("POST", acquire, {"json": {"lock_at_most_for": "1m", "lock_at_least_for": "2m"}, "headers": AUTH}),
        ("POST", acquire, {"json": {"lock_at_most_for": "1m", "extra": 1}, "headers": AUTH}),
        ("POST", acquire, {"json": {"lock_at_most_for": "1m", "holder": 5}, "headers": AUTH}),
        ("POST", acquire, {"json": [1, 2], "headers": AUTH}),
        ("POST", acquire, {"content": b"{nope", "headers": {**AUTH, "content-type": "application/json"}}),
        ("POST", acquire, {"headers": AUTH}),  # no body
        ("POST", acquire, {"json": {"lock_at_most_for": "1m"}, "headers": {**AUTH, "Origin": "https://evil.example"}}),
        ("POST", acquire, {"json": {"lock_at_most_for": "bad"}, "headers": {**AUTH, "Origin": LISTED}}),
        # 415: a body not declared JSON, whatever it holds; then bodies orjson refuses and json.loads would take
        (
            "POST",
            acquire,
            {"content": b'{"lock_at_most_for": "1m"}', "headers": {**AUTH, "content-type": "text/plain"}},
        ),
        ("POST", acquire, {"data": {"lock_at_most_for": "1m"}, "headers": AUTH}),  # form-encoded
        ("POST", acquire, {"files": {"lock_at_most_for": b"1m"}, "headers": AUTH}),  # multipart
        ("POST", acquire, {"content": b'{"lock_at_most_for": "1m"}', "headers": AUTH}),  # no content type at all
        ("POST", acquire, {"content": b"{}", "headers": {**AUTH, "content-type": "application/jsonx"}}),
        ("POST", acquire, {"content": b"{}", "headers": {**AUTH, "content-type": "application/json/x"}}),
        ("POST", acquire, {"content": b"{}", "headers": {**AUTH, "content-type": "text/plain"}}),  # 401 first:
        ("POST", acquire, {"content": b"{}", "headers": {"content-type": "text/plain"}}),
        ("POST", acquire, {"content": b'{"lock_at_most_for": NaN}', "headers": {**AUTH, "content-type": JSON}}),
        ("POST", acquire, {"content": b'{"lock_at_most_for": "1m"}'.decode().encode("utf-16"), "headers": JSON_AUTH}),
        ("POST", acquire, {"content": b'{"lock_at_most_for": "1m", "holder": "\\ud800"}', "headers": JSON_AUTH}),
        ("POST", acquire, {"content": b"[" * 3000, "headers": JSON_AUTH}),
        ("POST", "/v1/locks/lean.a%2Fb/acquire", {"content": b"{nope", "headers": JSON_AUTH}),  # the body first
        ("POST", acquire, {"content": b"{}", "headers": {**AUTH, "content-type": "text/plain"}}),
        ("POST", acquire, {"json": {"lock_at_most_for": "1m", "holder": "h" * 20_000}, "headers": AUTH}),  # 413
        ("POST", f"/v1/locks/{'x' * 65}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": AUTH}),
        ("POST", "/v1/locks/lean.a%2Fb/acquire", {"json": {"lock_at_most_for": "bad"}, "headers": AUTH}),
        ("POST", acquire, {"json": {"lock_at_most_for": "10m", "holder": "h"}, "headers": AUTH}),  # 200
        ("POST", acquire, {"json": {"lock_at_most_for": "10m"}, "headers": AUTH}),  # 409 held
        ("GET", f"/v1/locks/{name}", {"headers": AUTH}),
        ("GET", f"/v1/locks/{name}", {"headers": READ_ONLY}),
        ("GET", f"/v1/locks/{name}", {"headers": {**READ_ONLY, "Origin": LISTED}}),
        ("GET", f"/v1/locks/{name}-missing", {"headers": AUTH}),
        ("GET", f"/v1/locks/{name}/acquire", {"headers": AUTH}),  # 405
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "wrong", "lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "wrong"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}-missing/release", {"json": {"token": "wrong"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"content": b'{"token": "t"}', "headers": {**AUTH, "content-type": ""}}),
        ("POST", f"/v1/locks/{name}/extend", {"data": {"token": "t", "lock_at_most_for": "1m"}, "headers": AUTH}),
        (
            "POST",
            f"/v1/locks/{name}/extend",
            {"json": {"token": "t", "lock_at_most_for": "x" * 20_000}, "headers": AUTH},
        ),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t" * 20_000}, "headers": AUTH}),
    ]


def _down_requests(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Requests that reach the database, for apps whose database is down (503)."""
    return [
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "10m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": AUTH}),
        ("GET", f"/v1/locks/{name}", {"headers": AUTH}),
    ]


def _operation(method: str, path: str) -> str:
    """The lean route a request is meant for (its OpenAPI operation id)."""
    action = path.rsplit("/", 1)[1]
    if method == "POST":
        return {"acquire": "acquireLock", "release": "releaseLock", "extend": "extendLock"}[action]
    return "getLock"


def _documented(app: Any) -> set[tuple[str, int]]:
    """(operation id, status) for every status the OpenAPI document declares on a lean route."""
    documented = set()
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.endpoint in LEAN_ENDPOINTS:
            for status in [200, *route.responses]:
                documented.add((str(route.operation_id), int(status)))
    return documented


async def _compare(pair: tuple[httpx.AsyncClient, httpx.AsyncClient], requests: Any) -> set[tuple[str, int]]:
    """Send the battery through both paths; they must agree. Returns the (operation, status) pairs reached."""
    lean, generic = pair
    tag = uuid.uuid4().hex[:8]
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for label, client in (("lean", lean), ("generic", generic)):
        name = f"lean.{label}-{tag}"
        answers[label] = [_shape(await client.request(m, p, **kw), name) for m, p, kw in requests(name)]
    for request, a, b in zip(requests("NAME"), answers["lean"], answers["generic"], strict=True):
        assert a == b, f"{request[0]} {request[1]}: lean {a} != generic {b}"
    return {(_operation(m, p), shape[0]) for (m, p, _), shape in zip(requests("NAME"), answers["lean"], strict=True)}


async def test_both_paths_answer_alike_for_every_documented_status(
    app: Any,
    pair: tuple[httpx.AsyncClient, httpx.AsyncClient],
    down_pair: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    reached = await _compare(pair, _requests) | await _compare(down_pair, _down_requests)
    missing = _documented(app) - reached
    assert not missing, f"the battery must reach every documented (operation, status): {sorted(missing)}"
    assert {status for _, status in reached} >= {200, 401, 403, 404, 405, 409, 413, 415, 422, 503}


async def test_the_witness_fails_a_lock_request_the_generic_path_served(settings: Settings) -> None:
    """Every in-process test runs behind lean_witness: if the lean path stopped serving, they would all fail."""
    body = {"lock_at_most_for": "1m"}
    async with in_process(settings, lean=False) as (app, _):
        transport = httpx.ASGITransport(app=lean_witness(app))
        async with httpx.AsyncClient(transport=transport, base_url="http://schedlock.test") as witnessed:
            with pytest.raises(AssertionError, match="generic path"):
                await witnessed.post(f"/v1/locks/lean.w-{uuid.uuid4().hex[:8]}/acquire", json=body)
            assert (await witnessed.get("/v1/locks")).status_code == 200  # not a lean route: nothing to witness
    async with in_process(settings) as (_, lean):  # lean and witnessed: served without complaint
        assert (await lean.post(f"/v1/locks/lean.w-{uuid.uuid4().hex[:8]}/acquire", json=body)).status_code == 200


async def test_a_lease_taken_on_one_path_is_honoured_by_the_other(
    pair: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    lean, generic = pair
    name = f"lean.cross-{uuid.uuid4().hex[:8]}"
    lease = (await lean.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "10m"}, headers=AUTH)).json()
    assert (
        await generic.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers=AUTH)
    ).status_code == 409
    r = await generic.post(
        f"/v1/locks/{name}/extend", json={"token": lease["token"], "lock_at_most_for": "20m"}, headers=AUTH
    )
    assert r.status_code == 200
    r = await lean.post(f"/v1/locks/{name}/release", json={"token": lease["token"]}, headers=AUTH)
    assert r.status_code == 200
