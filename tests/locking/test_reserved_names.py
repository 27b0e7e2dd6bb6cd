"""Names starting with ``schedlock:`` are the service's own (its chores' locks, app.history.retention): every
operation that takes a name from a caller to change a lock refuses them with 422, ``field: "name"``, and leaves the
row alone; reading and listing show them like any other."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.history.retention import RETENTION_LOCK
from app.locking.names import RESERVED_PREFIX


def _refused(answer: httpx.Response) -> None:
    assert answer.status_code == 422, answer.text
    error = answer.json()["error"]
    assert error["code"] == "invalid_request" and error["field"] == "name", error
    assert "reserved" in error["message"], error


async def test_the_service_s_own_locks_are_refused_to_callers(app: FastAPI, client: httpx.AsyncClient) -> None:
    assert RETENTION_LOCK.startswith(RESERVED_PREFIX)
    name = f"{RESERVED_PREFIX}chore-{uuid.uuid4().hex[:8]}"
    lease = await app.state.store.acquire(name, timedelta(minutes=10), timedelta(0), "the service's chore")
    window: dict[str, Any] = {"lock_at_most_for": "PT10M"}
    for path, body in [
        ("acquire", window),
        ("acquire", {**window, "slot": "2026-12-01T03:00"}),
        ("acquire", {**window, "schedule": "0 3 * * *"}),
        ("release", {"token": lease.token}),
        ("extend", {**window, "token": lease.token}),
        ("force-release", {"reason": "looks stuck"}),
    ]:
        _refused(await client.post(f"/v1/locks/{name}/{path}", json=body))
    _refused(await client.post(f"/v1/locks/{RETENTION_LOCK}/acquire", json=window))
    # Nothing was done: the chore still holds its lease; reading and listing show it.
    shown = await client.get(f"/v1/locks/{name}")
    assert shown.status_code == 200 and shown.json()["held"] is True
    assert shown.json()["locked_by"] == lease.row.locked_by
    listed = await client.get("/v1/locks", params={"prefix": name})
    assert [item["name"] for item in listed.json()["items"]] == [name]
    await app.state.store.release(name, lease.token)


@pytest.mark.parametrize("name", ["schedlock", "schedlock-nightly", "Schedlock:x", "team.schedlock:x"])
async def test_only_the_prefix_itself_is_reserved(client: httpx.AsyncClient, name: str) -> None:
    name = f"{name}-{uuid.uuid4().hex[:8]}"
    answer = await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "PT1M"})
    assert answer.status_code == 200, answer.text
    await client.post(f"/v1/locks/{name}/release", json={"token": answer.json()["token"]})
