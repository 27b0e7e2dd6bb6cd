"""The client's jobs call on both twins, and the ``schedlock jobs`` command (a table, JSON, --state, --down)."""

from __future__ import annotations

import json
import uuid

import httpx
import pytest

from schedlock import AsyncLockClient, InvalidRequest, JobPage, LockClient
from tests.support.cli import cli


@pytest.fixture
def prefix() -> str:
    return f"cj{uuid.uuid4().hex[:8]}."


def register(url: str, name: str, **body: object) -> None:
    r = httpx.put(f"{url}/v1/jobs/{name}", json={"schedule": "@daily", **body}, timeout=10)
    assert r.status_code == 200, r.text


async def test_both_twins_list_jobs(
    url: str, prefix: str, sync_client: LockClient, async_client: AsyncLockClient
) -> None:
    register(url, f"{prefix}a", timezone="Europe/Berlin")
    register(url, f"{prefix}b", paused=True)
    page = sync_client.jobs(prefix=prefix)
    assert isinstance(page, JobPage) and page.next_cursor is None
    assert [(j.name, j.state, j.timezone) for j in page.items] == [
        (f"{prefix}a", "new", "Europe/Berlin"),
        (f"{prefix}b", "paused", "UTC"),
    ]
    assert page.items[0].last_tick is None and page.items[0].next_tick is not None and page.items[0].recent == ()
    first = await async_client.jobs(prefix=prefix, limit=1)
    assert [j.name for j in first.items] == [f"{prefix}a"] and first.next_cursor is not None
    rest = await async_client.jobs(prefix=prefix, limit=1, cursor=first.next_cursor)
    assert [j.name for j in rest.items] == [f"{prefix}b"]
    assert [j.name for j in sync_client.jobs(prefix=prefix, state="paused").items] == [f"{prefix}b"]
    with pytest.raises(InvalidRequest):
        sync_client.jobs(state="sleepy")


def test_the_jobs_command(url: str, prefix: str) -> None:
    register(url, f"{prefix}nightly", timezone="Europe/Berlin")
    register(url, f"{prefix}paused", paused=True)
    result = cli(url, "jobs", "--prefix", prefix)
    assert result.returncode == 0, result.stderr
    header, *lines = result.stdout.splitlines()
    assert header.split() == ["STATE", "NAME", "SCHEDULE", "LAST", "TICKS", "NEXT", "TICK", "LAST", "COMPLETED"]
    assert lines[0].split()[:5] == ["new", f"{prefix}nightly", "0", "0", "*"] and "(Europe/Berlin)" in lines[0]
    assert lines[1].split()[:2] == ["paused", f"{prefix}paused"]
    data = json.loads(cli(url, "jobs", "--prefix", prefix, "--state", "paused", "--json").stdout)
    assert [j["name"] for j in data["items"]] == [f"{prefix}paused"] and data["items"][0]["paused"] is True
    assert cli(url, "jobs", "--prefix", prefix, "--down").returncode == 0  # none is down
    assert cli(url, "jobs", "--state", "sleepy").returncode == 2  # argparse: not a state
