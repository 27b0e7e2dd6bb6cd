"""/docs (Swagger UI) and /redoc (ReDoc) render the API in a real browser with the network cut off (Debian's
chromium via Playwright), make no request off the host, and show the document's examples, not made-up values."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from urllib.parse import urlparse

from playwright.async_api import Page, Request, Route, async_playwright

from tests.support.browser import CHROMIUM, FLAGS
from tests.support.servers import LiveServer

PATHS = {
    "/v1/locks/{name}/acquire",
    "/v1/locks/{name}/release",
    "/v1/locks/{name}/extend",
    "/v1/locks/{name}",
    "/v1/locks",
    "/healthz",
    "/readyz",
}


@dataclass
class Offline:
    """A page whose requests off the server's host are aborted and recorded, as are failed ones."""

    page: Page
    outside: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


@asynccontextmanager
async def offline_page(server: LiveServer) -> AsyncIterator[Offline]:
    host = urlparse(server.url).netloc
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            seen = Offline(page)

            async def only_local(route: Route, request: Request) -> None:
                if urlparse(request.url).netloc == host or request.url.startswith(("data:", "blob:")):
                    await route.continue_()
                else:
                    seen.outside.append(request.url)
                    await route.abort()

            await page.route("**/*", only_local)
            page.on("requestfailed", lambda request: seen.failed.append(request.url))
            yield seen
        finally:
            await browser.close()


async def test_swagger_ui_renders_every_operation_offline_with_the_documents_examples(live_server: LiveServer) -> None:
    async with offline_page(live_server) as seen:
        page = seen.page
        await page.goto(f"{live_server.url}/docs")
        await page.wait_for_selector(".opblock", timeout=20_000)
        summaries = await page.locator(".opblock-summary-path").all_inner_texts()
        title = await page.locator(".info .title").inner_text()
        acquire = page.locator("#operations-locks-acquireLock")
        await acquire.locator(".opblock-summary").click()
        await acquire.locator(".responses-wrapper").wait_for(timeout=10_000)
        shown = await acquire.inner_text()

    assert "schedlock" in title
    assert {s.replace("\u200b", "") for s in summaries} >= PATHS
    assert '"lock_at_most_for": "14m"' in shown  # the request example
    assert '"locked_by": "billing on host-3' in shown  # a response example
    assert '"string"' not in shown and "additionalProp" not in shown
    assert seen.outside == [], "the docs page must not reach the internet"
    assert seen.failed == []


async def test_redoc_renders_every_operation_offline(live_server: LiveServer) -> None:
    async with offline_page(live_server) as seen:
        page = seen.page
        await page.goto(f"{live_server.url}/redoc")
        await page.wait_for_selector("[data-section-id^='operation/']", timeout=20_000)
        await page.wait_for_load_state("networkidle")
        sections = await page.locator("[data-section-id^='operation/']").evaluate_all(
            "nodes => nodes.map(n => n.getAttribute('data-section-id'))"
        )
        text = await page.locator("body").inner_text()
        broken = await page.locator("img").evaluate_all(
            "images => images.filter(i => !i.complete || i.naturalWidth === 0).map(i => i.src)"
        )

    assert {"operation/acquireLock", "operation/releaseLock", "operation/getLock", "operation/listLocks"} <= set(
        sections
    )
    assert "nightly-billing" in text and '"string"' not in text
    assert seen.outside == [], "the ReDoc page must not reach the internet"
    assert seen.failed == [] and broken == []
