"""The list routes' shared paging (app/api/paging.py): a cursor is taken back only in the one spelling the API
hands out, by every list (locks, runs, a lock's runs, jobs, a job's ticks); anything else is 422 naming ``cursor``."""

from __future__ import annotations

import base64

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.api import paging

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def respelled(cursor: str) -> str:
    """The same bytes in another spelling: the last character's unused low bits set (base64 decoding ignores
    them)."""
    spare = {2: 0b1111, 3: 0b11}[len(cursor) % 4]
    other = cursor[:-1] + _ALPHABET[_ALPHABET.index(cursor[-1]) | spare]
    pad = "=" * (-len(cursor) % 4)
    assert other != cursor and base64.urlsafe_b64decode(other + pad) == base64.urlsafe_b64decode(cursor + pad)
    return other


@given(st.text(min_size=1).filter(lambda t: "\x00" not in t))
def test_every_cursor_made_is_taken_back(text: str) -> None:
    assert paging.decode(paging.encode(text)) == text


@given(st.text(alphabet=_ALPHABET + "=+/ \x00é", max_size=40))
def test_only_the_one_spelling_is_taken(cursor: str) -> None:
    text = paging.decode(cursor)
    assert text is None or paging.encode(text) == cursor


# One cursor of each list (each of a length that leaves unused bits in its last character), and where it goes.
CURSORS = [
    ("/v1/locks", "zz"),
    ("/v1/runs", "at:1700000000000000:55"),
    ("/v1/locks/{name}/runs", "runs:57"),
    ("/v1/jobs", "job:zzz"),
    ("/v1/jobs/{name}/ticks", "tick:17000000000000000"),
]


@pytest.mark.parametrize(("path", "text"), CURSORS)
async def test_a_cursor_in_another_spelling_is_422(client: httpx.AsyncClient, name: str, path: str, text: str) -> None:
    assert (await client.put(f"/v1/jobs/{name}", json={"schedule": "PT1M"})).status_code in (200, 201)
    url = path.format(name=name)
    cursor = paging.encode(text)
    assert (await client.get(url, params={"cursor": cursor})).status_code == 200
    r = await client.get(url, params={"cursor": respelled(cursor)})
    assert r.status_code == 422, r.text
    assert r.json()["error"] | {"message": None} == {
        "code": "invalid_request",
        "message": None,
        "field": "cursor",
        "problems": [{"field": "cursor", "message": "not a cursor returned by this API"}],
    }


@pytest.mark.parametrize(
    ("path", "other"), [(path, other) for path, own in CURSORS[1:] for _, other in CURSORS[1:] if other != own]
)
async def test_a_cursor_of_another_list_is_422(client: httpx.AsyncClient, name: str, path: str, other: str) -> None:
    # Each list's cursor names its kind (the lock list's is a bare name: any text is one of its cursors).
    assert (await client.put(f"/v1/jobs/{name}", json={"schedule": "PT1M"})).status_code in (200, 201)
    r = await client.get(path.format(name=name), params={"cursor": paging.encode(other)})
    assert r.status_code == 422 and r.json()["error"]["field"] == "cursor", r.text


async def test_a_limit_past_the_servers_is_422_on_every_list(client: httpx.AsyncClient, name: str) -> None:
    assert (await client.put(f"/v1/jobs/{name}", json={"schedule": "PT1M"})).status_code in (200, 201)
    for path, _ in CURSORS:
        r = await client.get(path.format(name=name), params={"limit": 1001})
        assert r.status_code == 422 and r.json()["error"]["field"] == "limit", (path, r.text)
        assert r.json()["error"]["message"] == "limit: must be at most 1000"
