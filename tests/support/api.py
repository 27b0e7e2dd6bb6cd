"""Small helpers for calling the API in tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx


async def acquire(client: httpx.AsyncClient, name: str, at_most: Any = "10m", **body: Any) -> httpx.Response:
    return await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": at_most, **body})


async def release(client: httpx.AsyncClient, name: str, token: str) -> httpx.Response:
    return await client.post(f"/v1/locks/{name}/release", json={"token": token})


async def extend(client: httpx.AsyncClient, name: str, token: str, at_most: Any = "10m", **body: Any) -> httpx.Response:
    return await client.post(f"/v1/locks/{name}/extend", json={"token": token, "lock_at_most_for": at_most, **body})


def ts(value: str) -> datetime:
    """Parse the API's time format (and insist on it: UTC, milliseconds, Z)."""
    assert value.endswith("Z") and len(value) == 24, value
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def seconds(a: str, b: str) -> float:
    """b - a in seconds, for two API timestamps."""
    return (ts(b) - ts(a)).total_seconds()
