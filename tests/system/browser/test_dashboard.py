"""The dashboard in real Chromium (Debian's, through Playwright), against real `schedlock-server serve` processes.

Every test runs with the network cut off but for the server under test (a route that refuses and records any other
host), fails on any script error, and leaves screenshots in .screenshots/ui/ (gitignored) to look at.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, Page, expect

from app.settings import Settings
from tests.support.browser import PHONE, Session, chromium, session
from tests.support.servers import LiveServer, start_server, stop_server
from tests.support.ui import SECRETS, ui_tokens

#: Skips are counted in memory and written every flush interval: short here, so a test sees them at once.
FAST_HISTORY = {"SCHEDLOCK_HISTORY_FLUSH_INTERVAL": "0.2"}
SHOTS = "ui"


@pytest.fixture(scope="module")
def prefix() -> str:
    return f"ui{uuid.uuid4().hex[:6]}."


@pytest.fixture(scope="module")
def open_server(settings: Settings) -> Iterator[LiveServer]:
    server = start_server(settings, FAST_HISTORY)
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
def token_server(settings: Settings, prefix: str) -> Iterator[LiveServer]:
    server = start_server(settings, {**FAST_HISTORY, "SCHEDLOCK_TOKENS": ui_tokens(f"{prefix}t.billing.")})
    yield server
    stop_server(server)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


def call(server: LiveServer, method: str, path: str, auth: str | None = None, **body: Any) -> httpx.Response:
    """A request to the API as token ``auth`` (a key of SECRETS), or as nobody."""
    headers = {"Authorization": f"Bearer {SECRETS[auth]}"} if auth else {}
    return httpx.request(method, f"{server.url}{path}", json=body or None, headers=headers, timeout=10)


def take(server: LiveServer, name: str, token: str | None = None, holder: str = "host-3", at_most: str = "10m") -> str:
    r = call(server, "POST", f"/v1/locks/{name}/acquire", token, lock_at_most_for=at_most, holder=holder)
    assert r.status_code == 200, r.text
    lease: str = r.json()["token"]
    return lease


def give_back(server: LiveServer, name: str, lease: str, token: str | None = None) -> None:
    assert call(server, "POST", f"/v1/locks/{name}/release", token, token=lease).status_code == 200


async def rows(page: Page, body: str) -> list[str]:
    return await page.locator(f"#{body} tr").all_inner_texts()


async def test_locks_page_lists_filters_and_counts_down(browser: Browser, open_server: LiveServer, prefix: str) -> None:
    for name in ("billing.nightly", "billing.hourly", "reports.weekly", "cleanup"):
        take(open_server, f"{prefix}{name}", holder="host-3 pod billing-7f9c")
    give_back(open_server, f"{prefix}billing.daily", take(open_server, f"{prefix}billing.daily", holder="host-2"))

    async with session(browser, open_server.url) as s:
        page = s.page
        await page.goto(f"{open_server.url}/ui?prefix={prefix}")
        await expect(page.locator("#lock-rows tr")).to_have_count(5)
        await expect(page.locator("#who-text")).to_contain_text("no API tokens")
        listed = await rows(page, "lock-rows")
        assert [r.split("\t")[0] for r in listed] == ["Free", "Held", "Held", "Held", "Held"]
        assert f"{prefix}billing.daily" in listed[0] and "host-2" in listed[0]
        assert f"{prefix}billing.hourly" in listed[1] and "host-3 pod billing-7f9c" in listed[1]
        await expect(page.locator("#summary")).to_have_text(f"5 locks starting with “{prefix}” · 4 held")
        assert re.fullmatch(r"free · [\d.]+ (ms|s) ago", await page.locator("#lock-rows .countdown").first.inner_text())
        countdown = page.locator("#lock-rows tr").nth(1).locator(".countdown")
        first = await countdown.inner_text()
        assert re.fullmatch(r"in 9m [45]\ds", first), first
        await expect(countdown).not_to_have_text(first, timeout=3000)  # it counts down, live
        await s.screenshot(SHOTS, "locks-desktop")

        # Keyboard only: the skip link, then the filters.
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.textContent") == "Skip to content"
        await page.focus("#prefix")
        await page.keyboard.press("End")
        await page.keyboard.type("billing.")
        await expect(page.locator("#lock-rows tr")).to_have_count(3)
        assert f"prefix={prefix}billing." in page.url  # the filter is in the address, to share
        await page.focus("#held")
        await page.keyboard.press("Space")
        await expect(page.locator("#lock-rows tr")).to_have_count(2)
        assert "held=true" in page.url
        await expect(page.locator("#summary")).to_have_text(f"2 held locks starting with “{prefix}billing.”")

        # The same page on a phone, reloaded from its address: the filters come back from it.
        await page.set_viewport_size(PHONE)
        await page.reload()
        await expect(page.locator("#lock-rows tr")).to_have_count(2)
        assert await page.locator("#held").is_checked()
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]  # no sideways scroll
        await s.screenshot(SHOTS, "locks-phone")

        # Enter on a name opens its page.
        await page.locator(f'a:text-is("{prefix}billing.nightly")').focus()
        await page.keyboard.press("Enter")
        await expect(page.locator("#app h1")).to_have_text(f"{prefix}billing.nightly")
        s.assert_clean()
        assert all(r.headers.get("authorization") is None for r in s.api_requests())


async def test_more_pages_than_the_server_gives_at_once(browser: Browser, settings: Settings, prefix: str) -> None:
    """With SCHEDLOCK_LIST_MAX_LIMIT=2, "Load more" pages on, and the 5-second refresh keeps every row shown."""
    server = start_server(settings, {"SCHEDLOCK_LIST_MAX_LIMIT": "2"})
    try:
        for i in range(5):
            take(server, f"{prefix}page.{i}")
        async with session(browser, server.url) as s:
            page = s.page
            await page.goto(f"{server.url}/ui?prefix={prefix}page.")
            await expect(page.locator("#lock-rows tr")).to_have_count(2)
            await expect(page.locator("#summary")).to_have_text(f"2+ locks starting with “{prefix}page.” · 2 held")
            for shown in (4, 5):
                await page.locator("#more").click()
                await expect(page.locator("#lock-rows tr")).to_have_count(shown)
            await expect(page.locator("#more")).to_be_hidden()
            before = len(s.api_requests("/v1/locks"))
            async with page.expect_request(lambda r: "/v1/locks?" in r.url, timeout=8000):
                pass  # the next refresh
            for _ in range(50):  # the refresh's pages come one after the other
                if len(s.api_requests("/v1/locks")) - before >= 3:
                    break
                await page.wait_for_timeout(100)
            assert len(s.api_requests("/v1/locks")) - before == 3  # three capped pages
            assert all("limit=" in r.url and int(r.url.split("limit=")[1].split("&")[0]) <= 2 for r in s.requests
                       if "/v1/locks?" in r.url)  # fmt: skip
            await expect(page.locator("#lock-rows tr")).to_have_count(5)
            s.assert_clean()
    finally:
        stop_server(server)


async def test_a_run_appears_and_an_admin_force_releases_it(
    browser: Browser, open_server: LiveServer, prefix: str
) -> None:
    name = f"{prefix}nightly-billing"
    give_back(open_server, name, take(open_server, name, holder="host-1"))
    take(open_server, name, holder="host-3 pod billing-7f9c")
    assert call(open_server, "POST", f"/v1/locks/{name}/acquire", lock_at_most_for="1m").status_code == 409

    async with session(browser, open_server.url) as s:
        page = s.page
        await page.goto(f"{open_server.url}/ui/locks/{name}")
        await expect(page.locator("#run-rows tr")).to_have_count(2)
        runs = await rows(page, "run-rows")
        assert runs[0].startswith("running") and "host-3 pod billing-7f9c" in runs[0]
        assert runs[1].startswith("released") and "host-1" in runs[1]
        await expect(page.locator("#lock-state")).to_have_text("Held")
        await expect(page.locator("#f-skipped")).to_have_text("1 attempt", timeout=8000)
        assert await page.locator("#chart rect").count() == 2
        await s.screenshot(SHOTS, "lock-held")

        # Escape leaves the dialog and changes nothing; an empty reason is refused in the page.
        force = page.locator("#force")
        await force.focus()
        await page.keyboard.press("Enter")
        dialog = page.locator("#force-dialog")
        await expect(dialog).to_be_visible()
        await expect(page.locator("#force-reason")).to_be_focused()
        await page.keyboard.press("Escape")
        await expect(dialog).to_be_hidden()
        await force.click()
        await page.locator("#force-confirm").click()
        assert await page.locator("#force-reason").evaluate("e => e.validity.valueMissing")
        assert call(open_server, "GET", f"/v1/locks/{name}").json()["held"] is True
        await page.locator("#force-reason").fill("host-3 died during the outage")
        await s.screenshot(SHOTS, "lock-force-dialog")
        await page.locator("#force-confirm").click()

        await expect(dialog).to_be_hidden()
        await expect(page.locator("#lock-state")).to_have_text("Free")
        await expect(page.locator("#run-rows tr").first).to_contain_text("force released")
        await expect(page.locator("#run-rows tr").first).to_contain_text("by anonymous: host-3 died during the outage")
        await expect(force).to_be_hidden()
        await s.screenshot(SHOTS, "lock-force-released")
        s.assert_clean()
        (post,) = [r for r in s.api_requests() if r.method == "POST"]
        assert post.url.endswith(f"/v1/locks/{name}/force-release")
        assert post.headers["content-type"] == "application/json"
        assert post.post_data_json == {"reason": "host-3 died during the outage"}

    lock = call(open_server, "GET", f"/v1/locks/{name}").json()
    assert lock["held"] is False
    run = call(open_server, "GET", f"/v1/locks/{name}/runs").json()["items"][0]
    assert (run["outcome"], run["forced_by"], run["force_reason"]) == (
        "force_released",
        "anonymous",
        "host-3 died during the outage",
    )


async def sign_in(s: Session, secret: str) -> None:
    await s.page.locator("#token").fill(secret)
    await s.page.keyboard.press("Enter")


async def test_with_tokens_the_page_asks_for_one_and_shows_only_what_it_may_read(
    browser: Browser, token_server: LiveServer, prefix: str
) -> None:
    mine, other = f"{prefix}t.billing.invoices", f"{prefix}t.payments.settle"
    take(token_server, mine, "ops", holder="host-3")
    take(token_server, other, "ops", holder="host-4")

    async with session(browser, token_server.url) as s:
        page = s.page
        await page.goto(f"{token_server.url}/ui?prefix={prefix}t.")
        await expect(page.locator("#signin")).to_be_visible()
        await expect(page.locator("#app")).to_be_hidden()
        await expect(page.locator("#token")).to_be_focused()
        assert s.api_requests() == [] and s.api_requests("/ui/session") == []
        await s.screenshot(SHOTS, "signin")

        await sign_in(s, "not-a-token-" + "x" * 30)
        await expect(page.locator("#signin-error")).to_contain_text("unknown token")
        assert await page.evaluate("sessionStorage.length") == 0

        # A read-only token limited to billing.: only its lock, no force-release.
        await sign_in(s, SECRETS["billing"])
        await expect(page.locator("#lock-rows tr")).to_have_count(1)
        await expect(page.locator("#lock-rows")).to_contain_text(mine)
        await expect(page.locator("#who-text")).to_contain_text("Token billing")
        await expect(page.locator("#who-text")).to_contain_text(f"names: {prefix}t.billing.")
        assert await page.evaluate("sessionStorage.getItem('schedlock.token')") == SECRETS["billing"]
        assert await s.context.cookies() == []
        await s.screenshot(SHOTS, "locks-read-only-token")
        await page.goto(f"{token_server.url}/ui/locks/{mine}")  # a new page in the same tab keeps the token
        await expect(page.locator("#run-rows tr")).to_have_count(1)
        await expect(page.locator("#lock-note")).to_have_text("Force-release needs an admin token.")
        await expect(page.locator("#force")).to_be_hidden()
        await page.goto(f"{token_server.url}/ui/locks/{other}")
        await expect(page.locator("#lock-note")).to_contain_text("This token may not read this lock")
        await expect(page.locator("#run-rows tr")).to_have_count(0)
        await expect(page.locator("#f-holder")).to_have_text("\u2013")  # the placeholder dash: nothing of that lock

        await page.locator("#signout").click()
        await expect(page.locator("#signin")).to_be_visible()
        assert await page.evaluate("sessionStorage.length") == 0

        # The admin token sees everything and may force-release.
        await sign_in(s, SECRETS["ops"])
        await expect(page.locator("#force")).to_be_visible()
        await page.locator("#force").click()
        await page.locator("#force-reason").fill("payments job stuck since the deploy")
        await page.locator("#force-confirm").click()
        await expect(page.locator("#run-rows tr").first).to_contain_text("by ops: payments job stuck")
        s.assert_clean()
        sent = s.api_requests() + s.api_requests("/ui/session")
        assert sent and all(r.headers.get("authorization", "").startswith("Bearer ") for r in sent)
        assert all("cookie" not in r.headers for r in s.requests)

    assert call(token_server, "GET", f"/v1/locks/{other}", "ops").json()["held"] is False
