"""Debian's chromium driven by Playwright (never ``playwright install``: nothing is downloaded), cut off from every
host but the server under test, with what the page printed and asked for recorded, and screenshots kept.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from playwright.async_api import Browser, BrowserContext, Page, Request, Route, ViewportSize, async_playwright

CHROMIUM = "/usr/bin/chromium"
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Where tests leave their screenshots, to look at (gitignored); SCHEDLOCK_SCREENSHOTS moves them.
SCREENSHOTS = Path(os.environ.get("SCHEDLOCK_SCREENSHOTS", Path(__file__).parent.parent.parent / ".screenshots"))
PHONE = ViewportSize(width=390, height=844)
DESKTOP = ViewportSize(width=1280, height=860)


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    async with async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


@dataclass
class Session:
    """One browser context on one server: every request to another host is refused and recorded."""

    context: BrowserContext
    page: Page
    host: str
    outside: list[str] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    async def only_local(self, route: Route, request: Request) -> None:
        if urlparse(request.url).netloc == self.host:
            await route.continue_()
        else:
            self.outside.append(request.url)
            await route.abort()

    def api_requests(self, path: str = "/v1/") -> list[Request]:
        return [r for r in self.requests if urlparse(r.url).path.startswith(path)]

    async def screenshot(self, folder: str, name: str) -> Path:
        path = SCREENSHOTS / folder / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        await self.page.screenshot(path=path, full_page=True)
        return path

    def assert_clean(self) -> None:
        """Nothing left the host, and the page raised no error and logged none."""
        assert self.outside == [], f"requests left the host: {self.outside}"
        assert self.errors == [], self.errors


#: Chromium's own console advice, not the page's errors.
_NOISE = re.compile(r"^\[DOM\]|Failed to load resource: the server responded with a status of (401|403|404|409)")


@asynccontextmanager
async def session(browser: Browser, base_url: str, **context: object) -> AsyncIterator[Session]:
    """A fresh context (its own sessionStorage), cut off from every host but ``base_url``'s."""
    ctx = await browser.new_context(viewport=context.pop("viewport", DESKTOP), **context)  # type: ignore[arg-type]
    page = await ctx.new_page()
    s = Session(ctx, page, urlparse(base_url).netloc)
    await ctx.route("**/*", s.only_local)
    page.on("request", lambda request: s.requests.append(request))
    page.on("pageerror", lambda exc: s.errors.append(f"page error: {exc}"))
    page.on("console", lambda m: s.errors.append(m.text) if m.type == "error" and not _NOISE.search(m.text) else None)
    try:
        yield s
    finally:
        await ctx.close()
