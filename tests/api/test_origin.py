"""Browsers may call the API only from the server's own pages or from listed origins (app.api.edge).

In process, the request's Host is the client's base URL: these tests choose it to play the server's own origin.
tests/system/browser/test_origin.py drives the same rules through a real browser.
"""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.servers import start_server, stop_server

SECRET = "origin-test-secret-" + "o" * 40
AUTH = {"Authorization": f"Bearer {SECRET}"}
LISTED = "https://jobs.example.com"
BODY = {"lock_at_most_for": "1m"}


def _tokens() -> str:
    entry = {"name": "ui", "sha256": hash_secret(SECRET), "prefixes": ["*"], "access": "read-write"}
    return json.dumps({"tokens": [entry]})


@asynccontextmanager
async def served(settings: Settings, base_url: str, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The app with ``overrides``, called as if it were at ``base_url`` (which sets the Host header)."""
    async with in_process(settings.model_copy(update=overrides)) as (_, client):
        client.base_url = httpx.URL(base_url)
        yield client


def lock() -> str:
    return f"origin-{uuid.uuid4().hex[:10]}"


async def assert_refused(client: httpx.AsyncClient, origin: str, **request: Any) -> None:
    name = lock()
    r = await client.post(
        f"/v1/locks/{name}/acquire", headers={**request.pop("headers", {}), "Origin": origin}, **request
    )
    assert r.status_code == 403, r.text
    assert r.json()["error"]["code"] == "forbidden" and "SCHEDLOCK_ALLOWED_ORIGINS" in r.json()["error"]["message"]
    assert "access-control-allow-origin" not in r.headers
    assert (await client.get(f"/v1/locks/{name}")).status_code == 404, "nothing may be written"


@pytest.mark.parametrize(
    "origin",
    ["https://evil.example", "http://127.0.0.1:9", "http://127.0.0.1", "null", "http://127.0.0.1:8000/path", "garbage"],
)
async def test_a_foreign_origin_is_refused_before_anything_happens(settings: Settings, origin: str) -> None:
    async with served(settings, "http://127.0.0.1:8000") as client:
        await assert_refused(client, origin, json=BODY)
        # the "simple" request a page can send without asking: refused for its origin, not only for its body
        await assert_refused(
            client, origin, content=b'{"lock_at_most_for": "1m"}', headers={"content-type": "text/plain"}
        )


@pytest.mark.parametrize(
    ("base_url", "origin"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
        ("http://localhost:8000", "http://localhost:8000"),
        ("http://[::1]:8000", "http://[::1]:8000"),
        ("http://localhost", "http://LOCALHOST:80"),  # the default port, spelled or not
        ("http://127.0.0.1:8000", "https://127.0.0.1:8000"),  # TLS ended by a proxy in front
    ],
)
async def test_the_servers_own_pages_may_call_it(settings: Settings, base_url: str, origin: str) -> None:
    async with served(settings, base_url) as client:
        r = await client.post(f"/v1/locks/{lock()}/acquire", json=BODY, headers={"Origin": origin})
        assert r.status_code == 200, r.text
        assert "access-control-allow-origin" not in r.headers  # same origin: nothing to allow


async def test_requests_without_origin_are_not_a_browsers_and_pass(settings: Settings) -> None:
    async with served(settings, "http://anything.example") as client:
        assert (await client.post(f"/v1/locks/{lock()}/acquire", json=BODY)).status_code == 200


async def test_without_tokens_on_loopback_the_own_origin_must_be_a_loopback_name(settings: Settings) -> None:
    """DNS rebinding: a page at evil.example:8000 whose name now resolves to 127.0.0.1 is same-origin to the
    browser, and its Host header says so too. Only loopback names are this server's own."""
    async with served(settings, "http://evil.example:8000") as client:
        await assert_refused(client, "http://evil.example:8000", json=BODY)
    # With tokens a rebinding page has nothing to send; a named host is the server's own (e.g. behind a proxy).
    async with served(settings, "https://schedlock.example", tokens=_tokens()) as client:
        r = await client.post(
            f"/v1/locks/{lock()}/acquire", json=BODY, headers={**AUTH, "Origin": "https://schedlock.example"}
        )
        assert r.status_code == 200, r.text


async def test_a_listed_origin_gets_cors(settings: Settings) -> None:
    async with served(settings, "https://schedlock.example", tokens=_tokens(), allowed_origins=[LISTED]) as client:
        preflight = await client.options(
            f"/v1/locks/{lock()}/acquire",
            headers={
                "Origin": LISTED,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type",
            },
        )
        assert preflight.status_code == 204, preflight.text
        assert preflight.headers["access-control-allow-origin"] == LISTED
        assert set(preflight.headers["access-control-allow-methods"].split(", ")) == {"GET", "POST"}
        assert {"authorization", "content-type"} <= set(
            preflight.headers["access-control-allow-headers"].lower().split(", ")
        )
        assert "access-control-allow-credentials" not in preflight.headers  # tokens, never cookies

        r = await client.post(f"/v1/locks/{lock()}/acquire", json=BODY, headers={**AUTH, "Origin": LISTED})
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == LISTED and r.headers["vary"] == "Origin"
        assert "X-Request-ID" in r.headers["access-control-expose-headers"]
        # errors are readable too, so the page can tell "held" from "refused"
        r = await client.post(f"/v1/locks/{lock()}/acquire", json=BODY, headers={"Origin": LISTED})
        assert r.status_code == 401 and r.headers["access-control-allow-origin"] == LISTED
        # another origin still is not
        refused = await client.options("/v1/locks", headers={"Origin": "https://other.example"})
        assert refused.status_code == 403


async def test_an_options_request_without_preflight_headers_is_routed_as_usual(settings: Settings) -> None:
    async with served(settings, "http://127.0.0.1:8000", allowed_origins=[LISTED]) as client:
        r = await client.options("/v1/locks", headers={"Origin": LISTED})
        assert r.status_code == 405 and r.json()["error"]["code"] == "method_not_allowed"


def test_allowed_origins_are_read_from_a_comma_separated_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDLOCK_ALLOWED_ORIGINS", " https://Jobs.Example.com/ ,http://ui.internal:8080,https://x:443")
    assert Settings().allowed_origins == ["https://jobs.example.com", "http://ui.internal:8080", "https://x"]
    monkeypatch.delenv("SCHEDLOCK_ALLOWED_ORIGINS")
    assert Settings().allowed_origins is None


@pytest.mark.parametrize(
    "bad", ["*", "jobs.example.com", "https://jobs.example.com/app", "ftp://x", "https://u:p@x", "https://x:99999"]
)
def test_anything_but_an_origin_is_refused_at_start_up(bad: str) -> None:
    with pytest.raises(ValidationError, match="not an origin"):
        Settings(allowed_origins=[bad])


def test_the_docs_examples_run(settings: Settings) -> None:
    """docs/cors.md's shell blocks, as written: the setting, then the preflight, against a real server."""
    text = (Path(__file__).parents[2] / "docs" / "cors.md").read_text()
    setting, preflight = re.findall(r"```sh\n(.*?)```", text, re.S)
    origins = re.fullmatch(r'export SCHEDLOCK_ALLOWED_ORIGINS="([^"]+)"\n', setting)
    assert origins is not None, setting
    server = start_server(settings, extra_env={"SCHEDLOCK_ALLOWED_ORIGINS": origins.group(1)})
    try:

        def run(script: str) -> str:
            env = {"SCHEDLOCK_URL": server.url, "PATH": "/usr/bin:/bin"}
            done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert run(setting + preflight) == "204\n"
        assert run(preflight.replace("jobs-dashboard.example.com", "elsewhere.example.com")) == "403\n"
    finally:
        stop_server(server)
