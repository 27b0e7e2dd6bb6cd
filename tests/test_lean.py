"""The lean path (app.routes.lean) answers exactly as FastAPI's generic handling of the same routes would."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.conftest import in_process

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
    configured = settings.model_copy(update={"tokens": _tokens()})
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
    )


AUTH = {"Authorization": f"Bearer {SECRET}"}
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
        ("POST", f"/v1/locks/{'x' * 65}/acquire", {"json": {"lock_at_most_for": "1m"}, "headers": AUTH}),
        ("POST", "/v1/locks/lean.a%2Fb/acquire", {"json": {"lock_at_most_for": "bad"}, "headers": AUTH}),
        ("POST", acquire, {"json": {"lock_at_most_for": "10m", "holder": "h"}, "headers": AUTH}),  # 200
        ("POST", acquire, {"json": {"lock_at_most_for": "10m"}, "headers": AUTH}),  # 409 held
        ("GET", f"/v1/locks/{name}", {"headers": AUTH}),
        ("GET", f"/v1/locks/{name}", {"headers": READ_ONLY}),
        ("GET", f"/v1/locks/{name}-missing", {"headers": AUTH}),
        ("GET", f"/v1/locks/{name}/acquire", {"headers": AUTH}),  # 405
        ("POST", f"/v1/locks/{name}/extend", {"json": {"token": "wrong", "lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/extend", {"json": {"lock_at_most_for": "5m"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {"token": "wrong"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}-missing/release", {"json": {"token": "wrong"}, "headers": AUTH}),
        ("POST", f"/v1/locks/{name}/release", {"json": {}, "headers": AUTH}),
    ]


async def test_both_paths_answer_alike(pair: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    lean, generic = pair
    tag = uuid.uuid4().hex[:8]
    answers: dict[str, list[tuple[Any, ...]]] = {}
    for label, client in (("lean", lean), ("generic", generic)):
        name = f"lean.{label}-{tag}"
        answers[label] = [_shape(await client.request(m, p, **kw), name) for m, p, kw in _requests(name)]
    for request, a, b in zip(_requests("NAME"), answers["lean"], answers["generic"], strict=True):
        assert a == b, f"{request[0]} {request[1]}: lean {a} != generic {b}"
    statuses = {shape[0] for shape in answers["lean"]}
    assert statuses == {200, 401, 403, 404, 405, 409, 422}, "the battery must reach every outcome"


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
