"""The dashboard's jobs pages in real Chromium, against a real `schedlock-server serve`: the list (states, schedules,
the strip of last ticks) and a job's page (its ticks, newest first). Screenshots in .screenshots/jobs/ to look at."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, expect

from app.settings import Settings
from tests.support.browser import PHONE, chromium, session
from tests.support.servers import LiveServer, start_server, stop_server

SHOTS = "jobs"


@pytest.fixture(scope="module")
def server(settings: Settings) -> Iterator[LiveServer]:
    live = start_server(settings, {})
    yield live
    stop_server(live)


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with chromium() as b:
        yield b


def call(server: LiveServer, method: str, path: str, **body: Any) -> httpx.Response:
    r = httpx.request(method, f"{server.url}{path}", json=body or None, timeout=10)
    assert r.status_code < 300, r.text
    return r


def db_time(server: LiveServer, job: str) -> float:
    """The database's now, as seconds since the epoch."""
    stamp = call(server, "GET", f"/v1/jobs/{job}").json()["db_time"]
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def wait_ticks(server: LiveServer, job: str, seconds: float) -> None:
    """Until the database's clock has moved on ``seconds``."""
    start = db_time(server, job)
    while db_time(server, job) < start + seconds:
        time.sleep(0.1)


def run(server: LiveServer, name: str, completed: bool = True) -> None:
    lease = call(server, "POST", f"/v1/locks/{name}/acquire", lock_at_most_for="1m", holder="host-3").json()
    call(server, "POST", f"/v1/locks/{name}/release", token=lease["token"], completed=completed)


async def test_jobs_page_and_a_jobs_ticks(browser: Browser, server: LiveServer) -> None:
    prefix = f"uj{uuid.uuid4().hex[:6]}."
    billing, reports, paused = f"{prefix}billing", f"{prefix}reports", f"{prefix}paused"
    call(server, "PUT", f"/v1/jobs/{billing}", schedule="PT2S", grace="1s", description="invoices")
    call(server, "PUT", f"/v1/jobs/{reports}", schedule="0 3 * * *", timezone="Europe/Berlin")
    call(server, "PUT", f"/v1/jobs/{paused}", schedule="PT2S", paused=True)
    wait_ticks(server, billing, 2)
    run(server, billing)
    wait_ticks(server, billing, 2)
    run(server, billing, completed=False)
    wait_ticks(server, billing, 4.5)  # then nobody: missed, and the job down

    async with session(browser, server.url) as s:
        page = s.page
        await page.goto(f"{server.url}/ui/jobs?prefix={prefix}")
        await expect(page.locator("#job-rows tr")).to_have_count(3)
        listed = await page.locator("#job-rows tr").all_inner_texts()
        assert [r.split("\t")[0] for r in listed] == ["down", "paused", "new"]
        assert "PT2S" in listed[0] and "0 3 * * *" in listed[2] and "Europe/Berlin" in listed[2]
        await expect(page.locator("#summary")).to_have_text("3 jobs · 1 down · 0 late")
        cells = page.locator("#job-rows tr").first.locator(".strip .cell")
        classes = [await cells.nth(i).get_attribute("class") for i in range(await cells.count())]
        assert {"cell completed", "cell failed", "cell missed"} <= set(classes), classes
        assert await page.locator("#job-rows tr").nth(2).locator(".strip .cell").count() == 0
        await expect(page.locator("nav a[aria-current=page]")).to_have_text("Jobs")
        await s.screenshot(SHOTS, "jobs-desktop")
        await page.set_viewport_size(PHONE)
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        await s.screenshot(SHOTS, "jobs-phone")
        await page.set_viewport_size({"width": 1280, "height": 900})

        await page.locator(f'a:text-is("{billing}")').click()
        await expect(page.locator("#app h1")).to_have_text(billing)
        await expect(page.locator("#job-state")).to_have_text("down")
        await expect(page.locator("#f-description")).to_have_text("invoices")
        states = [t.split("\t")[0] for t in await page.locator("#tick-rows tr").all_inner_texts()]
        assert "completed" in states and "failed" in states and "missed" in states, states
        assert states.index("missed") < states.index("failed") < states.index("completed")  # newest first
        await expect(page.locator("#tick-rows")).to_contain_text("host-3")
        await expect(page.locator("#tick-rows")).to_contain_text("released with completed: false")
        await s.screenshot(SHOTS, "job-desktop")
        s.assert_clean()
