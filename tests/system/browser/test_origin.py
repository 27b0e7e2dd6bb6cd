"""Cross-site requests in a real browser (Debian's chromium via Playwright) against a real server without tokens
on loopback, the set-up the origin rule protects: the server's own /docs page can use the API, a page on another
origin cannot (neither a "simple" request nor a preflighted one), a listed origin can, and a page whose DNS name
was rebound to 127.0.0.1 cannot."""

from __future__ import annotations

import http.server
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, async_playwright

from app.settings import Settings
from tests.support.browser import CHROMIUM, FLAGS
from tests.support.servers import LiveServer, free_port, start_server, stop_server

ACQUIRE_JS = """async ([url, contentType, mode]) => {
  try {
    const r = await fetch(url, {method: "POST", mode, headers: {"content-type": contentType},
                                body: JSON.stringify({lock_at_most_for: "1m"})});
    return r.type === "opaque" ? "opaque" : String(r.status);
  } catch (e) {
    return "blocked";
  }
}"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<!doctype html><title>elsewhere</title><p>a page on another origin"
        self.send_response(200)
        self.send_header("content-type", "text/html")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _site() -> tuple[http.server.ThreadingHTTPServer, str]:
    site = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), _Page)
    threading.Thread(target=site.serve_forever, daemon=True).start()
    return site, f"http://127.0.0.1:{site.server_address[1]}"


@pytest.fixture(scope="module")
def sites() -> Iterator[tuple[str, str]]:
    """Two plain pages on other origins: one the server lists, one it does not."""
    listed, listed_url = _site()
    foreign, foreign_url = _site()
    yield listed_url, foreign_url
    for site in (listed, foreign):
        site.shutdown()
        site.server_close()


@pytest.fixture(scope="module")
def open_server(settings: Settings, sites: tuple[str, str]) -> Iterator[LiveServer]:
    server = start_server(settings, extra_env={"SCHEDLOCK_ALLOWED_ORIGINS": sites[0]})
    yield server
    output = stop_server(server)
    assert "Traceback" not in output, output


async def _acquire_from(page: Page, server: LiveServer, content_type: str, mode: str = "cors") -> tuple[str, str]:
    name = f"browser-{uuid.uuid4().hex[:10]}"
    outcome: str = await page.evaluate(ACQUIRE_JS, [f"{server.url}/v1/locks/{name}/acquire", content_type, mode])
    return name, outcome


def _taken(server: LiveServer, name: str) -> bool:
    return httpx.get(f"{server.url}/v1/locks/{name}").status_code == 200


async def test_only_the_servers_own_pages_and_listed_origins_can_take_locks(
    open_server: LiveServer, sites: tuple[str, str]
) -> None:
    listed, foreign = sites
    port = open_server.url.rsplit(":", 1)[1]
    rebinding = [*FLAGS, "--host-resolver-rules=MAP rebound.test 127.0.0.1"]
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=rebinding)
        try:
            page = await browser.new_page()

            await page.goto(f"{open_server.url}/docs")  # the server's own page, as Swagger UI's "Try it out"
            name, outcome = await _acquire_from(page, open_server, "application/json")
            assert outcome == "200" and _taken(open_server, name)

            await page.goto(foreign)
            for content_type, mode in (("text/plain", "no-cors"), ("application/x-www-form-urlencoded", "no-cors")):
                name, outcome = await _acquire_from(page, open_server, content_type, mode)
                assert outcome == "opaque" and not _taken(open_server, name), (content_type, "sent, and refused")
            name, outcome = await _acquire_from(page, open_server, "application/json")
            assert outcome == "blocked" and not _taken(open_server, name), "the preflight is refused"

            await page.goto(listed)
            name, outcome = await _acquire_from(page, open_server, "application/json")
            assert outcome == "200" and _taken(open_server, name), "a listed origin may, and may read the answer"

            # A page whose name now resolves to 127.0.0.1 is "same origin" to the browser: still not the server's.
            rebound = f"http://rebound.test:{port}"
            await page.goto(f"{rebound}/docs")
            outcome = await page.evaluate(
                ACQUIRE_JS, [f"{rebound}/v1/locks/rebound/acquire", "application/json", "cors"]
            )
            assert outcome == "403" and not _taken(open_server, "rebound")
        finally:
            await browser.close()
