"""What passed validation once passes again without it (app.api.middleware.validated): only what passed is kept,
bounded; every bad input is still validated and answered as before; a kept body cannot be changed."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pydantic
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as settings_
from hypothesis import strategies as st

from app.api.bodies import read_json
from app.api.middleware import lean, validated
from app.api.middleware.validated import Validated
from app.api.models import AcquireRequest, ExtendRequest, ReleaseRequest
from app.settings import Settings
from tests.support.apps import in_process

JSON = {"content-type": "application/json"}


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """How many bodies the lean path parsed and validated, from now on."""
    counts = {"parsed": 0, "validated": 0}
    validate_body = lean._LeanEndpoint._validate_body

    def parse(content_type: str | None, raw: bytes) -> Any:
        counts["parsed"] += 1
        return read_json(content_type, raw)

    def validate(self: Any, data: Any) -> Any:
        counts["validated"] += 1
        return validate_body(self, data)

    monkeypatch.setattr(lean, "read_json", parse)
    monkeypatch.setattr(lean._LeanEndpoint, "_validate_body", validate)
    yield counts


def _body(**fields: Any) -> bytes:
    """An acquire body no other test sends (its holder is new)."""
    return json.dumps({"lock_at_most_for": "10m", "holder": f"v-{uuid.uuid4().hex[:8]}", **fields}).encode()


async def test_an_acquire_that_passed_is_not_validated_again(
    client: httpx.AsyncClient, name: str, counted: dict[str, int]
) -> None:
    body = _body()
    first = await client.post(f"/v1/locks/{name}/acquire", content=body, headers=JSON)
    second = await client.post(f"/v1/locks/{name}/acquire", content=body, headers=JSON)
    assert (first.status_code, second.status_code) == (200, 409)
    assert second.json()["error"]["code"] == "lock_held"
    assert counted == {"parsed": 1, "validated": 1}
    # Another name with the known body: the name's rule runs, the body is still known.
    assert (await client.post(f"/v1/locks/{name}.b/acquire", content=body, headers=JSON)).status_code == 200
    assert counted == {"parsed": 2, "validated": 2}  # a new name goes the whole way once...
    await client.post(f"/v1/locks/{name}.b/acquire", content=body, headers=JSON)
    assert counted == {"parsed": 2, "validated": 2}  # ...and then not again


async def test_the_endpoint_checks_still_run_on_a_known_body(client: httpx.AsyncClient, name: str) -> None:
    """The server's maximum duration and the reserved names are the endpoint's: never skipped."""
    long = _body(lock_at_most_for="P400D")
    for _ in range(2):
        r = await client.post(f"/v1/locks/{name}/acquire", content=long, headers=JSON)
        assert r.status_code == 422 and r.json()["error"]["field"] == "lock_at_most_for"


async def test_what_failed_is_validated_and_refused_every_time(
    client: httpx.AsyncClient, name: str, counted: dict[str, int]
) -> None:
    bad = _body(lock_at_most_for="soon")
    for _ in range(2):
        r = await client.post(f"/v1/locks/{name}/acquire", content=bad, headers=JSON)
        assert r.status_code == 422 and r.json()["error"]["field"] == "lock_at_most_for"
    assert counted == {"parsed": 2, "validated": 2}


async def test_a_known_body_still_needs_a_json_type_and_a_good_name(client: httpx.AsyncClient, name: str) -> None:
    body = _body()
    assert (await client.post(f"/v1/locks/{name}/acquire", content=body, headers=JSON)).status_code == 200
    plain = await client.post(f"/v1/locks/{name}/acquire", content=body, headers={"content-type": "text/plain"})
    assert plain.status_code == 415 and plain.json()["error"]["code"] == "unsupported_media_type"
    untyped = await client.post(f"/v1/locks/{name}/acquire", content=body)
    assert untyped.status_code == 415
    long_name = await client.post(f"/v1/locks/{'n' * 65}/acquire", content=body, headers=JSON)
    assert long_name.status_code == 422 and long_name.json()["error"]["field"] == "name"


async def test_release_and_extend_bodies_are_never_kept(client: httpx.AsyncClient, name: str) -> None:
    """They carry a lease token: new each time, and a secret."""
    r = await client.post(f"/v1/locks/{name}/acquire", content=_body(), headers=JSON)
    token = r.json()["token"]
    body = json.dumps({"token": token, "lock_at_most_for": "5m"}).encode()
    assert (await client.post(f"/v1/locks/{name}/extend", content=body, headers=JSON)).status_code == 200
    release = json.dumps({"token": token}).encode()
    assert (await client.post(f"/v1/locks/{name}/release", content=release, headers=JSON)).status_code == 200
    for model, raw in ((ExtendRequest, body), (ReleaseRequest, release)):
        record = Validated(model)
        record.passed("application/json", name, name, raw, model.model_validate_json(raw))
        assert record.body(raw) is None


def test_a_kept_body_cannot_be_changed() -> None:
    kept = AcquireRequest.model_validate({"lock_at_most_for": "10m"})
    with pytest.raises(pydantic.ValidationError, match="frozen"):
        kept.holder = "someone else"


def test_what_is_kept_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(validated, "NAMES_KEPT", 3)
    monkeypatch.setattr(validated, "BODIES_KEPT", 2)
    record = Validated(AcquireRequest)
    model = AcquireRequest.model_validate({"lock_at_most_for": "1m"})
    for i in range(3):
        record.passed("application/json", f"n{i}", f"n{i}", b"{%d}" % i, model)
    assert [record.has_name(f"n{i}") for i in range(3)] == [True, True, True]
    assert record.body(b"{0}") is None and record.body(b"{2}") is model  # the third body emptied the record first
    record.passed("application/json", "n3", "n3", b"x" * (validated.BODY_BYTES_KEPT + 1), model)
    assert not record.has_name("n0") and record.has_name("n3")  # the fourth name emptied it
    assert record.body(b"x" * (validated.BODY_BYTES_KEPT + 1)) is None  # too large to keep
    record.passed("text/plain", "n4", "changed", b"", None)  # no body: its type says nothing; a changed name
    assert not record.has_type("text/plain") and not record.has_name("n4")


_VALUES = st.one_of(
    st.sampled_from(["1m", "10m", "PT5M", "0", "-1s", "P400D", "", "soon", "10 m", "500ms"]),
    st.integers(min_value=-5, max_value=10**7),
    st.none(),
    st.text(max_size=8),
    st.booleans(),
)
_BODIES = st.dictionaries(
    st.sampled_from(["lock_at_most_for", "lock_at_least_for", "holder", "slot", "extra"]), _VALUES, max_size=4
)


@pytest.fixture(scope="module")
async def pair(settings: Settings) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    async with in_process(settings) as (_, lean_client), in_process(settings, lean=False) as (_, generic):
        yield lean_client, generic


@settings_(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_BODIES)
async def test_a_body_seen_before_is_answered_as_the_generic_path_answers_it(
    pair: tuple[httpx.AsyncClient, httpx.AsyncClient], body: dict[str, Any]
) -> None:
    """The same body sent twice to a fresh name (the second meets the record when the first passed), on the lean
    path and on FastAPI's generic path: the same statuses and errors."""
    raw = json.dumps(body).encode()
    answers = []
    for client in pair:
        shown, name = [], f"v.{uuid.uuid4().hex[:10]}"
        for _ in range(2):
            r = await client.post(f"/v1/locks/{name}/acquire", content=raw, headers=JSON)
            error = r.json().get("error", {})
            shown.append((r.status_code, error.get("code"), error.get("field"), error.get("problems")))
        answers.append(shown)
    assert answers[0] == answers[1]
