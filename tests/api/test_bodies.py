"""The lock operations' one way in (app.api.bodies' JsonBodyRoute behind app.api.edge): a battery of requests walks
every status the OpenAPI document declares for them, and each answer must be what it was when three paths served
them (FastAPI's generic handling, the lean path and the direct lane, which agreed on every one): the answers
recorded then, at c7e4a4c, are tests/support/lock_answers.json."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import APIRouter
from pydantic import BaseModel, SecretStr

from app.api.bodies import JsonBodyRoute
from app.api.deps import PrincipalDep
from app.auth.tokens import hash_secret
from app.errors import ERROR_CODES
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.servers import free_port

SECRET = "lean-test-secret-" + "s" * 40
READER = "lean-test-reader-" + "r" * 40
RECORDED = json.loads((Path(__file__).parents[1] / "support" / "lock_answers.json").read_text())
LIMITED_SECRET = "lean-test-limited-" + "l" * 40
#: A JWT of an issuer whose keys can never be fetched (nothing listens where they are): 503 issuer_unavailable.
DEAD_ISSUER = "https://dead-issuer.example"
UNFETCHABLE = (
    ".".join(
        base64.urlsafe_b64encode(json.dumps(part).encode()).rstrip(b"=").decode()
        for part in ({"alg": "RS256", "kid": "k1"}, {"iss": DEAD_ISSUER})
    )
    + ".c2ln"
)


def _tokens() -> str:
    limited = {"name": "limited", "sha256": hash_secret(LIMITED_SECRET), "prefixes": ["lean."], "access": "read-write"}
    dead_keys = f"http://127.0.0.1:{free_port()}/jwks"
    return json.dumps(
        {
            "tokens": [
                {"name": "jobs", "sha256": hash_secret(SECRET), "prefixes": ["lean."], "access": "read-write"},
                {"name": "reader", "sha256": hash_secret(READER), "prefixes": ["*"], "access": "read"},
                {**limited, "rate": 0.001, "burst": 1},  # one request, then 429 for the rest of the module
            ],
            "issuers": [{"name": "dead", "issuer": DEAD_ISSUER, "audiences": ["schedlock"], "jwks_url": dead_keys}],
            "bindings": [{"issuer": "dead", "prefixes": ["lean."], "access": "read-write"}],
        }
    )


@pytest.fixture(scope="module")
async def served(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    configured = settings.model_copy(update={"tokens": _tokens(), "allowed_origins": [LISTED]})
    async with in_process(configured) as (_, client):
        yield client


@pytest.fixture(scope="module")
async def down(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """The same app on a database address where nothing listens: every statement fails (503)."""
    dead = SecretStr(f"postgresql://postgres@127.0.0.1:{free_port()}/test")
    configured = settings.model_copy(update={"tokens": _tokens(), "database_url": dead, "db_connect_timeout": 1.0})
    async with in_process(configured) as (_, client):
        yield client


def _shape(r: httpx.Response, name: str) -> tuple[Any, ...]:
    """What must agree: status, the whole error (code, message, field, problems), the keys of a success, and the
    headers that matter."""
    body = json.loads(r.text.replace(name, "NAME"))  # each path works on a lock name of its own
    error = body.get("error")
    if error and error["code"] in ("lock_held", "slot_done"):  # the holder and the times differ between the runs
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
LOCK_OPERATIONS = ("acquireLock", "releaseLock", "extendLock", "getLock")
LEASE = "<the token of the last lease granted>"
_AUTH = {"headers": AUTH}
READ_ONLY = {"Authorization": f"Bearer {READER}"}
LIMITED = {"Authorization": f"Bearer {LIMITED_SECRET}"}
UNFETCHED = {"Authorization": f"Bearer {UNFETCHABLE}"}


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
        # Every operation refuses a caller without a token (401) or outside its prefixes (403).
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}}),
        ("POST", "/v1/locks/other.x/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}-missing/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, **_AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}}),
        ("POST", "/v1/locks/other.x/release", {"json": {"token": "t"}, "headers": AUTH}),
        ("GET", f"/v1/locks/{name}", {}),
        ("GET", "/v1/locks/other.x", {"headers": AUTH}),
        ("GET", f"/v1/locks/{'x' * 65}", {"headers": AUTH}),
        # A lease's whole life with a slot: LEASE in a body stands for the token of the last lease granted.
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "slot": "t1"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}.s/extend", {"json": {"token": LEASE, "lock_at_most_for": "2m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}.s/release", {"json": {"token": LEASE}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "slot": "t1"}, "headers": AUTH}),
        ("GET", f"/v1/locks/{name}.s", {"headers": AUTH}),
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "schedule": "@hourly"}, **_AUTH}),
        ("POST", f"/v1/locks/{name}.s/release", {"json": {"token": LEASE, "completed": False}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "schedule": "@often"}, **_AUTH}),
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "slot": "\u0000"}, **_AUTH}),
        ("POST", f"/v1/locks/{name}.s/acquire", {"json": {"lock_at_most_for": "1m", "timezone": "UTC"}, **_AUTH}),
    ]


def _down_requests(name: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Requests that reach the database, for apps whose database is down (503)."""
    return [
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "10m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": AUTH}),
        ("GET", f"/v1/locks/{name}", {"headers": AUTH}),
    ]


def _identity_requests(name: str) -> list[tuple[str, str, dict[str, Any], int, str | None]]:
    """Answers added after the recording (issue 45), each (method, path, arguments, status, code): a caller over its
    quota (429) once its one request is spent, a JWT whose issuer has no keys to be had (503)."""
    extend = {"token": "t", "lock_at_most_for": "5m"}
    return [
        ("GET", f"/v1/locks/{name}", {"headers": LIMITED}, 404, "lock_not_found"),
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": LIMITED}, 429, None),
        ("POST", f"/v1/locks/{name}/extend", {"json": extend, "headers": LIMITED}, 429, None),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": LIMITED}, 429, None),
        ("GET", f"/v1/locks/{name}", {"headers": LIMITED}, 429, None),
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": UNFETCHED}, 503, None),
        ("POST", f"/v1/locks/{name}/extend", {"json": extend, "headers": UNFETCHED}, 503, None),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": UNFETCHED}, 503, None),
        ("GET", f"/v1/locks/{name}", {"headers": UNFETCHED}, 503, None),
    ]  # fmt: skip


def _operation(method: str, path: str) -> str:
    """The lock route a request is meant for (its OpenAPI operation id)."""
    action = path.rsplit("/", 1)[1]
    if method == "POST":
        return {"acquire": "acquireLock", "release": "releaseLock", "extend": "extendLock"}[action]
    return "getLock"


Reached = set[tuple[str, int, str | None]]


def _documented(app: Any) -> Reached:
    """(operation id, status, error code) for every status the OpenAPI document declares on a lock route, and each
    error code its description names (the document is read, not the router: what is promised is what counts)."""
    documented: Reached = set()
    for operations in app.openapi()["paths"].values():
        for operation in operations.values():
            if operation["operationId"] not in LOCK_OPERATIONS:
                continue
            for status, response in operation["responses"].items():
                named = set(re.findall(r"`([a-z_]+)`", response["description"]))
                codes = {c for c in named if ERROR_CODES.get(c) == int(status)} or {None}
                documented |= {(operation["operationId"], int(status), code) for code in codes}
    return documented


def _code(shape: list[str]) -> str | None:
    """The code of an error whose shape was reduced to its keys (lock_held, slot_done), else None (a success)."""
    if "code" not in shape:
        return None
    return "slot_done" if "completed_at" in shape else "lock_held"


async def _answers(client: httpx.AsyncClient, requests: Any) -> list[list[Any]]:
    """Send the battery; each answer's shape, as JSON has it (lists, not tuples)."""
    name, token = f"lean.one-{uuid.uuid4().hex[:8]}", None
    shapes = []
    for method, path, kw in requests(name):
        if isinstance(kw.get("json"), dict) and kw["json"].get("token") == LEASE:
            kw = {**kw, "json": {**kw["json"], "token": token}}
        r = await client.request(method, path, **kw)
        if r.status_code == 200 and path.endswith("/acquire"):
            token = r.json()["token"]
        shapes.append(json.loads(json.dumps(_shape(r, name))))
    return shapes


async def test_every_documented_status_is_answered_as_recorded(
    app: Any, served: httpx.AsyncClient, down: httpx.AsyncClient
) -> None:
    reached: Reached = set()
    for key, client, requests in (("up", served, _requests), ("down", down, _down_requests)):
        answers = await _answers(client, requests)
        for request, got, recorded in zip(requests("NAME"), answers, RECORDED[key], strict=True):
            assert got == recorded, f"{request[0]} {request[1]} {request[2]}: {got} != recorded {recorded}"
        reached |= {
            (_operation(m, p), shape[0], shape[1]["code"] if isinstance(shape[1], dict) else _code(shape[1]))
            for (m, p, _), shape in zip(requests("NAME"), answers, strict=True)
        }
    name = f"lean.id-{uuid.uuid4().hex[:8]}"
    for method, path, kw, status, code in _identity_requests(name):
        r = await served.request(method, path, **kw)
        expected = code or {429: "rate_limited", 503: "issuer_unavailable"}[status]
        assert (r.status_code, r.json()["error"]["code"]) == (status, expected), f"{method} {path}: {r.text}"
        assert status != 429 or int(r.headers["retry-after"]) >= 1
        reached.add((_operation(method, path), status, expected))
    documented = _documented(app)
    assert ("acquireLock", 409, "slot_done") in documented and len(documented) > 25  # the reading works
    missing = documented - reached
    assert not missing, f"the battery must reach every documented (operation, status, code): {sorted(missing, key=str)}"
    assert {status for _, status, _ in reached} >= {200, 401, 403, 404, 405, 409, 413, 415, 422, 429, 503}


async def test_the_same_body_is_validated_every_time(served: httpx.AsyncClient) -> None:
    """What was once kept as validated (a cache, gone) and what failed both answer the same the second time."""
    for _ in range(2):
        name = f"lean.again-{uuid.uuid4().hex[:8]}"
        good = await served.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers=AUTH)
        assert good.status_code == 200
        too_long = await served.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "400d"}, headers=AUTH)
        assert too_long.status_code == 422 and too_long.json()["error"]["field"] == "lock_at_most_for"
        bad_type = {**AUTH, "content-type": "text/plain"}
        refused = await served.post(
            f"/v1/locks/{name}/acquire", content=b'{"lock_at_most_for": "1m"}', headers=bad_type
        )
        assert refused.status_code == 415


@pytest.mark.parametrize("first", [f"Bearer {SECRET}", "Bearer nope"])
async def test_the_first_authorization_header_is_the_one_read(served: httpx.AsyncClient, first: str) -> None:
    other = "Bearer nope" if first != "Bearer nope" else f"Bearer {SECRET}"
    headers = [("Authorization", first), ("Authorization", other)]
    name = f"lean.twice-{uuid.uuid4().hex[:8]}"
    r = await served.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers=headers)
    assert r.status_code == (200 if first != "Bearer nope" else 401)


class _Body(BaseModel):
    x: int


def test_a_route_with_a_body_must_have_the_shape_the_route_class_binds() -> None:
    """A body is read in one place: an endpoint taking one beside a parameter the binding does not know (a query
    parameter here) is refused when the route is declared, not left to FastAPI's own body reading."""
    router = APIRouter(route_class=JsonBodyRoute)

    async def endpoint(name: str, body: _Body, principal: PrincipalDep, limit: int = 1) -> None:
        return None

    with pytest.raises(AssertionError, match="a body is read by Binding only"):
        router.post("/{name}")(endpoint)
