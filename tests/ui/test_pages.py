"""The dashboard's routes, in process: the pages, their headers, their assets, /ui/session, and that nothing in them
points at another host. What the page does in a browser is tests/system/browser/test_dashboard.py.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest

from app.settings import Settings
from app.ui import STATIC, TEMPLATES
from tests.support.apps import in_process
from tests.support.ui import SECRETS, ui_tokens


@pytest.fixture(scope="module")
async def tokens_client(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    async with in_process(settings.model_copy(update={"tokens": ui_tokens()})) as (_, client):
        yield client


async def test_the_locks_page_is_html_with_its_filters_and_strict_headers(client: httpx.AsyncClient) -> None:
    r = await client.get("/ui", params={"prefix": 'billing."<x>', "held": "true"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert "default-src 'none'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert "'unsafe-inline'" not in csp
    assert r.headers["x-frame-options"] == "DENY" and r.headers["referrer-policy"] == "no-referrer"
    assert "set-cookie" not in r.headers
    page = r.text
    assert 'data-auth="open"' in page and 'data-page="locks"' in page
    assert 'value="billing.&#34;&lt;x&gt;"' in page  # the filter is echoed, escaped
    assert re.search(r'id="held"[^>]* checked', page)
    assert "<script>" not in page and " style=" not in page  # nothing inline: the CSP would refuse it


async def test_the_lock_page_carries_the_name_escaped(client: httpx.AsyncClient) -> None:
    r = await client.get("/ui/locks/" + "a<b>&c")
    assert r.status_code == 200
    assert 'data-lock="a&lt;b&gt;&amp;c"' in r.text and "<b>" not in r.text


@pytest.mark.parametrize("path", ["/ui/locks/" + "x" * 65, "/ui/locks/a%01b", "/ui?prefix=%01", "/ui?held=maybe"])
async def test_bad_page_input_is_a_4xx(client: httpx.AsyncClient, path: str) -> None:
    r = await client.get(path)
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"


async def test_assets_are_served_by_the_app(client: httpx.AsyncClient) -> None:
    """Every asset the page loads, and every module its script imports, with the type a browser insists on."""
    page = (await client.get("/ui")).text
    pending = re.findall(r'(?:href|src)="(/ui/static/[^"?]+)', page)
    assert {"/ui/static/ui.css", "/ui/static/main.js", "/ui/static/favicon.svg"} <= set(pending)
    types = {"css": "text/css", "js": "text/javascript", "svg": "image/svg+xml"}
    served: set[str] = set()
    while pending:
        asset = pending.pop()
        r = await client.get(asset)
        assert r.status_code == 200, asset
        assert r.headers["content-type"].startswith(types[asset.rsplit(".", 1)[1]]), asset
        assert r.headers["x-content-type-options"] == "nosniff"
        served.add(asset)
        imports = re.findall(r'\bfrom "\./([\w.]+)";', r.text) if asset.endswith(".js") else []
        pending += [f"/ui/static/{module}" for module in imports if f"/ui/static/{module}" not in served]
    assert {f"/ui/static/{p.name}" for p in STATIC.iterdir()} == served  # nothing unused ships
    assert (await client.get("/ui/static/nope.js")).status_code == 404


def test_nothing_in_the_page_points_at_another_host() -> None:
    """Offline by construction: no template or asset names a URL with a host (the SVG namespace is not a request)."""
    for path in [*TEMPLATES.iterdir(), *STATIC.iterdir()]:
        text = path.read_text()
        urls = set(re.findall(r"(?:https?:)?//[\w.-]+\.[a-z]{2,}[^\s\"')]*", text)) - {"http://www.w3.org/2000/svg"}
        assert not urls, f"{path.name} points elsewhere: {urls}"


async def test_the_pages_are_not_in_the_api_contract(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


async def test_session_on_an_open_server(client: httpx.AsyncClient) -> None:
    r = await client.get("/ui/session")
    assert r.json() == {"auth": False, "token": None, "prefixes": None, "access": "read-write", "admin": True}


async def test_session_says_what_the_token_may_do(tokens_client: httpx.AsyncClient) -> None:
    page = (await tokens_client.get("/ui")).text
    assert 'data-auth="tokens"' in page and '<div id="app" hidden>' in page
    r = await tokens_client.get("/ui/session")
    assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
    wrong = await tokens_client.get("/ui/session", headers={"Authorization": "Bearer " + "x" * 40})
    assert wrong.status_code == 401
    ops = await tokens_client.get("/ui/session", headers={"Authorization": f"Bearer {SECRETS['ops']}"})
    assert ops.json() == {"auth": True, "token": "ops", "prefixes": None, "access": "read-write", "admin": True}
    billing = await tokens_client.get("/ui/session", headers={"Authorization": f"Bearer {SECRETS['billing']}"})
    assert billing.json() == {
        "auth": True,
        "token": "billing",
        "prefixes": ["billing."],
        "access": "read",
        "admin": False,
    }
    assert ops.headers["cache-control"] == "no-store" and "set-cookie" not in ops.headers
