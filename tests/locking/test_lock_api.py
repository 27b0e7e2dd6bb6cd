"""The v1 contract: acquire / release / extend / get, and their ShedLock semantics, against a real Postgres."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from app.locking.leases import new_token
from tests.support.api import acquire, extend, release, seconds, ts


async def test_acquire_returns_a_lease_with_db_times(client: httpx.AsyncClient, name: str) -> None:
    r = await acquire(client, name, "10m", holder="billing on host-3")
    assert r.status_code == 200, r.text
    body = r.json()
    assert set(body) == {
        "name",
        "acquired",
        "token",
        "fencing_token",
        "locked_at",
        "lock_until",
        "locked_by",
        "db_time",
    }
    assert body["name"] == name and body["acquired"] is True
    assert body["locked_at"] == body["db_time"]
    assert seconds(body["locked_at"], body["lock_until"]) == pytest.approx(600, abs=0.002)
    assert body["locked_by"].startswith("billing on host-3 [schedlock")
    assert len(body["token"]) >= 32
    assert body["fencing_token"] > 0


async def test_second_acquire_is_refused_with_the_holder(client: httpx.AsyncClient, name: str) -> None:
    first = (await acquire(client, name, "10m", holder="a")).json()
    r = await acquire(client, name, "10m", holder="b")
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["code"] == "lock_held"
    assert error["locked_by"] == first["locked_by"]
    assert error["locked_at"] == first["locked_at"]
    assert error["lock_until"] == first["lock_until"]
    assert ts(error["db_time"]) >= ts(first["db_time"])


async def test_locked_by_is_unique_per_acquisition_and_never_a_bare_hostname(
    client: httpx.AsyncClient, name: str
) -> None:
    seen = set()
    for _ in range(3):
        lease = (await acquire(client, name, "10m", holder="host-1")).json()
        seen.add(lease["locked_by"])
        assert lease["locked_by"] != "host-1"
        assert (await release(client, name, lease["token"])).status_code == 200
    assert len(seen) == 3


async def test_release_frees_the_lock_for_the_next_caller(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    r = await release(client, name, lease["token"])
    assert r.status_code == 200, r.text
    body = r.json()
    assert body == {"name": name, "released": True, "lock_until": body["lock_until"], "db_time": body["db_time"]}
    assert body["lock_until"] == body["db_time"]  # no at-least window: free from now on
    assert (await acquire(client, name, "10m")).status_code == 200


async def test_release_honours_lock_at_least_for_from_acquisition(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m", lock_at_least_for="5m")).json()
    body = (await release(client, name, lease["token"])).json()
    assert seconds(lease["locked_at"], body["lock_until"]) == pytest.approx(300, abs=0.002)
    r = await acquire(client, name, "10m")
    assert r.status_code == 409, "a second node a moment later must still skip"
    assert r.json()["error"]["lock_until"] == body["lock_until"]


async def test_release_after_the_at_least_window_frees_at_once(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10s", lock_at_least_for="200ms")).json()
    await asyncio.sleep(0.3)
    body = (await release(client, name, lease["token"])).json()
    assert body["lock_until"] == body["db_time"]
    assert (await acquire(client, name, "10m")).status_code == 200


async def test_release_is_idempotent(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m", lock_at_least_for="1m")).json()
    first = (await release(client, name, lease["token"])).json()
    again = await release(client, name, lease["token"])
    assert again.status_code == 200
    assert again.json()["lock_until"] == first["lock_until"]


async def test_release_with_a_wrong_token_is_refused(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    r = await release(client, name, "not-the-token")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"
    assert (await acquire(client, name, "10m")).status_code == 409, "the lease must be untouched"
    assert (await release(client, name, lease["token"])).status_code == 200


async def test_release_of_an_unknown_name_is_404(client: httpx.AsyncClient, name: str) -> None:
    r = await release(client, name, "whatever")
    assert r.status_code == 404 and r.json()["error"]["code"] == "lock_not_found"


async def test_release_works_after_expiry_while_nobody_took_it(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    assert (await release(client, name, lease["token"])).status_code == 200


async def test_expired_lease_is_taken_over_and_the_stale_token_is_dead(client: httpx.AsyncClient, name: str) -> None:
    stale = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    fresh = await acquire(client, name, "10m")
    assert fresh.status_code == 200
    assert fresh.json()["fencing_token"] > stale["fencing_token"]
    assert (await release(client, name, stale["token"])).json()["error"]["code"] == "not_holder"
    assert (await extend(client, name, stale["token"])).json()["error"]["code"] == "not_holder"
    current = (await client.get(f"/v1/locks/{name}")).json()
    assert current["locked_by"] == fresh.json()["locked_by"] and current["held"] is True
    assert current["lock_until"] == fresh.json()["lock_until"]


async def test_extend_moves_lock_until_from_db_now_and_keeps_locked_at(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "1m")).json()
    r = await extend(client, name, lease["token"], "20m")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["locked_at"] == lease["locked_at"]
    assert body["fencing_token"] == lease["fencing_token"]
    assert seconds(body["db_time"], body["lock_until"]) == pytest.approx(1200, abs=0.002)


async def test_extend_of_an_expired_lease_is_refused_even_if_nobody_took_it(
    client: httpx.AsyncClient, name: str
) -> None:
    lease = (await acquire(client, name, "100ms")).json()
    await asyncio.sleep(0.2)
    r = await extend(client, name, lease["token"], "10m")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"


async def test_extend_after_release_is_refused(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m", lock_at_least_for="5m")).json()
    await release(client, name, lease["token"])
    r = await extend(client, name, lease["token"], "10m")
    assert r.status_code == 409 and r.json()["error"]["code"] == "not_holder"


async def test_extend_can_change_the_at_least_window_still_measured_from_locked_at(
    client: httpx.AsyncClient, name: str
) -> None:
    lease = (await acquire(client, name, "10m")).json()
    await extend(client, name, lease["token"], "10m", lock_at_least_for="3m")
    body = (await release(client, name, lease["token"])).json()
    assert seconds(lease["locked_at"], body["lock_until"]) == pytest.approx(180, abs=0.002)


async def test_extend_with_a_wrong_token_or_unknown_name(client: httpx.AsyncClient, name: str) -> None:
    await acquire(client, name, "10m")
    assert (await extend(client, name, "nope")).json()["error"]["code"] == "not_holder"
    r = await extend(client, name + "-x", "nope")
    assert r.status_code == 404 and r.json()["error"]["code"] == "lock_not_found"


async def test_get_shows_the_row_without_the_token(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    r = await client.get(f"/v1/locks/{name}")
    assert r.status_code == 200
    body = r.json()
    assert set(body) == {
        *("name", "locked_by", "locked_at", "lock_until", "held", "fencing_token", "db_time"),
        *("last_completed_slot", "last_completed_at"),  # null: no slot was ever completed (docs/slots.md)
    }
    assert body["held"] is True and body["fencing_token"] == lease["fencing_token"]
    assert lease["token"] not in r.text
    await release(client, name, lease["token"])
    assert (await client.get(f"/v1/locks/{name}")).json()["held"] is False


async def test_get_unknown_is_404(client: httpx.AsyncClient, name: str) -> None:
    r = await client.get(f"/v1/locks/{name}")
    assert r.status_code == 404 and r.json()["error"]["code"] == "lock_not_found"


async def test_fencing_token_strictly_increases_per_acquisition(client: httpx.AsyncClient, name: str) -> None:
    tokens = []
    for _ in range(5):
        lease = (await acquire(client, name, "10m")).json()
        tokens.append(lease["fencing_token"])
        await extend(client, name, lease["token"], "10m")
        await release(client, name, lease["token"])
    assert tokens == sorted(set(tokens))


async def test_token_is_not_derivable_from_what_list_and_get_show(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    shown = (await client.get(f"/v1/locks/{name}")).text + (await client.get("/v1/locks", params={"prefix": name})).text
    assert lease["token"] not in shown
    for candidate in (lease["locked_by"], lease["locked_by"].split()[-1].rstrip("]"), str(lease["fencing_token"])):
        assert (await release(client, name, candidate)).status_code == 409


@pytest.mark.parametrize("concurrency", [2, 40])
async def test_concurrent_acquires_of_one_free_name_have_exactly_one_winner(
    client: httpx.AsyncClient, name: str, concurrency: int
) -> None:
    responses = await asyncio.gather(*(acquire(client, name, "10m") for _ in range(concurrency)))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200] + [409] * (concurrency - 1)


async def test_concurrent_takeover_of_an_expired_lock_has_exactly_one_winner(
    client: httpx.AsyncClient, name: str
) -> None:
    await acquire(client, name, "50ms")
    await asyncio.sleep(0.1)
    responses = await asyncio.gather(*(acquire(client, name, "10m") for _ in range(30)))
    assert sorted(r.status_code for r in responses) == [200] + [409] * 29


async def test_names_are_independent(client: httpx.AsyncClient, name: str) -> None:
    results: list[Any] = await asyncio.gather(*(acquire(client, f"{name}-{i}", "10m") for i in range(10)))
    assert all(r.status_code == 200 for r in results)


def test_lease_tokens_never_look_like_a_command_line_option() -> None:
    """``schedlock release NAME --token <token>`` must work for every token: none starts with "-"."""
    tokens = [new_token() for _ in range(5000)]  # about 78 would start with "-" if nothing prevented it
    assert not [token for token in tokens if token.startswith("-")]
    assert len(set(tokens)) == len(tokens) and {len(token) for token in tokens} == {43}
