"""The lean path (app.api.middleware.lean) answers exactly as FastAPI's generic handling of the same routes would,
for every status code the OpenAPI document declares for them; and the tests' witness notices when it does not serve."""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute
from hypothesis import given
from hypothesis import settings as settings_
from hypothesis import strategies as st
from pydantic import SecretStr
from starlette.routing import Match

from app.api.middleware.lean import LeanRoutes
from app.api.routes import locks
from app.auth.tokens import hash_secret
from app.errors import ERROR_CODES
from app.settings import Settings
from tests.support.apps import in_process, lean_witness
from tests.support.servers import free_port

SECRET = "lean-test-secret-" + "s" * 40
READER = "lean-test-reader-" + "r" * 40
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
LEAN_OPERATIONS = ("acquireLock", "releaseLock", "extendLock", "getLock")
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
        # A caller over its quota (429), once its one request is spent; a JWT whose issuer has no keys (503).
        ("GET", f"/v1/locks/{name}", {"headers": LIMITED}),
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": LIMITED}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, "headers": LIMITED}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": LIMITED}),
        ("GET", f"/v1/locks/{name}", {"headers": LIMITED}),
        ("POST", f"/v1/locks/{name}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": UNFETCHED}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "t", "lock_at_most_for": "5m"}, "headers": UNFETCHED}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "t"}, "headers": UNFETCHED}),
        ("GET", f"/v1/locks/{name}", {"headers": UNFETCHED}),
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


Reached = set[tuple[str, int, str | None]]


def _documented(app: Any) -> Reached:
    """(operation id, status, error code) for every status the OpenAPI document declares on a lean route, and each
    error code its description names (the document is read, not the router: what is promised is what counts)."""
    documented: Reached = set()
    for operations in app.openapi()["paths"].values():
        for operation in operations.values():
            if operation["operationId"] not in LEAN_OPERATIONS:
                continue
            for status, response in operation["responses"].items():
                named = set(re.findall(r"`([a-z_]+)`", response["description"]))
                codes = {c for c in named if ERROR_CODES.get(c) == int(status)} or {None}
                documented |= {(operation["operationId"], int(status), code) for code in codes}
    return documented


async def _compare(pair: tuple[httpx.AsyncClient, httpx.AsyncClient], requests: Any) -> Reached:
    """Send the battery through both paths; they must agree. Returns the (operation, status, code) reached."""
    lean, generic = pair
    tag = uuid.uuid4().hex[:8]
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for label, client in (("lean", lean), ("generic", generic)):
        name = f"lean.{label}-{tag}"
        answers[label], token = [], None
        for method, path, kw in requests(name):
            if isinstance(kw.get("json"), dict) and kw["json"].get("token") == LEASE:
                kw = {**kw, "json": {**kw["json"], "token": token}}
            r = await client.request(method, path, **kw)
            if r.status_code == 200 and path.endswith("/acquire"):
                token = r.json()["token"]
            answers[label].append(_shape(r, name))
    for request, a, b in zip(requests("NAME"), answers["lean"], answers["generic"], strict=True):
        assert a == b, f"{request[0]} {request[1]}: lean {a} != generic {b}"
    return {
        (_operation(m, p), shape[0], shape[1]["code"] if isinstance(shape[1], dict) else _code(shape[1]))
        for (m, p, _), shape in zip(requests("NAME"), answers["lean"], strict=True)
    }


def _code(shape: list[str]) -> str | None:
    """The code of an error whose shape was reduced to its keys (lock_held, slot_done), else None (a success)."""
    if "code" not in shape:
        return None
    return "slot_done" if "completed_at" in shape else "lock_held"


async def test_both_paths_answer_alike_for_every_documented_status(
    app: Any,
    pair: tuple[httpx.AsyncClient, httpx.AsyncClient],
    down_pair: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    reached = await _compare(pair, _requests) | await _compare(down_pair, _down_requests)
    documented = _documented(app)
    assert ("acquireLock", 409, "slot_done") in documented and len(documented) > 25  # the reading works
    missing = documented - reached
    assert not missing, f"the battery must reach every documented (operation, status, code): {sorted(missing, key=str)}"
    assert {status for _, status, _ in reached} >= {200, 401, 403, 404, 405, 409, 413, 415, 422, 503}


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


def _lean_routes() -> LeanRoutes:
    routes = [r for r in locks.router.routes if isinstance(r, APIRoute) and r.endpoint in locks.LEAN_ENDPOINTS]
    return LeanRoutes(lambda scope, receive, send: None, routes)  # type: ignore[arg-type, return-value]


_POST_ENDINGS = ("/acquire", "/release", "/extend")
_PIECES = st.sampled_from(["/", "a", "acquire", "release", "extend", "runs", "\n", "%2F", ".", " ", "é", "/acquire"])


@settings_(max_examples=400, deadline=None)
@given(
    method=st.sampled_from(["POST", "GET", "PUT"]),
    middle=st.lists(_PIECES, max_size=6).map("".join),
    ending=st.sampled_from([*_POST_ENDINGS, "", "/acquire\n", "acquire"]),
    root_path=st.sampled_from(["", "/behind"]),
    prefix=st.sampled_from(["/v1/locks/", "/v1/locks", "/v1/lock/"]),
)
def test_a_post_matched_without_its_pattern_matches_as_the_route_would(
    method: str, middle: str, ending: str, root_path: str, prefix: str
) -> None:
    """``_match_post`` gives what the first route whose ``matches`` is FULL gives (endpoint, name, route), or leaves
    the path to the routes' patterns; and it does take the plain POSTs, the hot path it exists for."""
    lean = _lean_routes()
    path = root_path + prefix + middle + ending
    scope: dict[str, Any] = {"type": "http", "method": method, "path": path, "root_path": root_path}
    expected = None
    for route, _ in lean.routes:
        match, child = route.matches(dict(scope))
        if match is Match.FULL:
            expected = (child["endpoint"], child["path_params"], child["route"])
            break
    fast = dict(scope)
    plain = method == "POST" and not root_path and prefix == "/v1/locks/" and ending in _POST_ENDINGS
    # LeanRoutes asks _match_post only about paths that start with the routes' prefix.
    if path.startswith("/v1/locks/") and lean._match_post(fast, path, path[path.rfind("/") :]) is not None:
        assert (fast["endpoint"], fast["path_params"], fast["route"]) == expected, path
    elif plain:
        raise AssertionError(f"a plain POST to {path!r} was left to the patterns")


@pytest.mark.parametrize("first", [f"Bearer {SECRET}", "Bearer nope"])
async def test_the_first_authorization_header_is_the_one_both_paths_read(
    pair: tuple[httpx.AsyncClient, httpx.AsyncClient], first: str
) -> None:
    other = "Bearer nope" if first != "Bearer nope" else f"Bearer {SECRET}"
    statuses = []
    for client in pair:
        headers = [("Authorization", first), ("Authorization", other)]
        name = f"lean.twice-{uuid.uuid4().hex[:8]}"
        r = await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers=headers)
        statuses.append(r.status_code)
    assert statuses == ([200, 200] if first != "Bearer nope" else [401, 401])
