"""The /docs page renders the API in a real browser with the network cut off (Debian's chromium via Playwright)."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest
from playwright.async_api import Request, Route, async_playwright

from tests.support.browser import CHROMIUM, FLAGS
from tests.support.servers import LiveServer

pytestmark = pytest.mark.system  # a real browser (Debian's chromium)


async def test_swagger_ui_renders_every_operation_offline(live_server: LiveServer) -> None:
    host = urlparse(live_server.url).netloc
    outside: list[str] = []
    failed: list[str] = []

    async def only_local(route: Route, request: Request) -> None:
        if urlparse(request.url).netloc == host:
            await route.continue_()
        else:
            outside.append(request.url)
            await route.abort()

    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await page.route("**/*", only_local)
            page.on("requestfailed", lambda request: failed.append(request.url))
            await page.goto(f"{live_server.url}/docs")
            await page.wait_for_selector(".opblock", timeout=20_000)
            summaries = await page.locator(".opblock-summary-path").all_inner_texts()
            title = await page.locator(".info .title").inner_text()
        finally:
            await browser.close()

    assert "schedlock" in title
    paths = {s.replace("\u200b", "") for s in summaries}
    assert {
        "/v1/locks/{name}/acquire",
        "/v1/locks/{name}/release",
        "/v1/locks/{name}/extend",
        "/v1/locks/{name}",
        "/v1/locks",
        "/healthz",
        "/readyz",
    } <= paths
    assert outside == [], "the docs page must not reach the internet"
    assert failed == []
