"""Runs once per tick (docs/slots.md): slot_done, completed or not, expiry, Java takeovers, the slot computed from a
schedule on the database's clock, bad input, metrics and the access log. Against the real Postgres."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.settings import Settings
from tests.support.api import acquire, ts
from tests.support.java import JavaNode
from tests.support.logs import access, captured
from tests.support.metrics import outcomes, scrape
from tests.support.openapi import ACQUIRE, GET, LIST, RELEASE, check
from tests.support.patience import SETTLE


def key() -> str:
    return f"tick-{uuid.uuid4().hex[:8]}"


async def release(client: httpx.AsyncClient, name: str, token: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/locks/{name}/release", json={"token": token, **body})


def error(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code in (409, 422), r.text
    body: dict[str, Any] = r.json()["error"]
    return body


async def test_a_completed_slot_answers_slot_done_with_who_and_when(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    first = await acquire(client, name, "10m", slot=slot, holder="node-a")
    assert first.status_code == 200, first.text
    lease = first.json()
    assert lease["slot"] == slot
    done = await release(client, name, lease["token"])  # completed defaults to true
    assert done.status_code == 200
    assert done.json()["slot"] == slot and done.json()["completed"] is True

    again = await acquire(client, name, "10m", slot=slot, holder="node-b")
    assert again.status_code == 409
    err = error(again)
    assert err["code"] == "slot_done" and err["slot"] == slot
    assert err["locked_by"] == lease["locked_by"]  # who completed it
    assert ts(lease["locked_at"]) <= ts(err["completed_at"]) <= ts(err["db_time"])
    assert name in err["message"] and slot in err["message"]

    # Another tick of the same name runs.
    other = await acquire(client, name, "10m", slot=key())
    assert other.status_code == 200, other.text


async def test_slot_done_wins_over_a_held_lock(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    await release(client, name, lease["token"])
    await acquire(client, name, "10m")  # a plain holder now
    assert error(await acquire(client, name, "10m", slot=slot))["code"] == "slot_done"
    assert error(await acquire(client, name, "10m", slot=key()))["code"] == "lock_held"


async def test_a_failed_run_leaves_the_tick_open(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    failed = await release(client, name, lease["token"], completed=False)
    assert failed.status_code == 200 and failed.json()["completed"] is False
    retry = await acquire(client, name, "10m", slot=slot)
    assert retry.status_code == 200, retry.text
    assert (await release(client, name, retry.json()["token"])).json()["completed"] is True
    assert error(await acquire(client, name, "10m", slot=slot))["code"] == "slot_done"


async def test_release_stays_idempotent_and_the_first_release_decides(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    first = await release(client, name, lease["token"], completed=False)
    second = await release(client, name, lease["token"], completed=True)
    assert second.status_code == 200
    assert {**second.json(), "db_time": None} == {**first.json(), "db_time": None}
    assert second.json()["completed"] is False
    assert (await acquire(client, name, "10m", slot=slot)).status_code == 200


async def test_an_expired_lease_leaves_the_tick_to_the_next_node(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    dead = (await acquire(client, name, "100ms", slot=slot)).json()  # its holder never comes back
    await asyncio.sleep(0.2)
    taken = await acquire(client, name, "10m", slot=slot)
    assert taken.status_code == 200, taken.text
    # The dead holder's late release cannot complete a tick someone else now runs.
    assert (await release(client, name, dead["token"])).status_code == 409
    assert (await release(client, name, taken.json()["token"])).json()["completed"] is True


async def test_a_late_release_nobody_overtook_still_completes_the_tick(client: httpx.AsyncClient, name: str) -> None:
    """The lease ran out while the job finished, and nobody ran the tick meanwhile: it ran exactly once."""
    slot = key()
    lease = (await acquire(client, name, "100ms", slot=slot)).json()
    await asyncio.sleep(0.2)
    assert (await release(client, name, lease["token"])).json()["completed"] is True
    assert error(await acquire(client, name, "10m", slot=slot))["code"] == "slot_done"


async def test_get_and_list_show_the_last_completed_slot(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "10m")).json()
    before = (await client.get(f"/v1/locks/{name}")).json()
    assert before["last_completed_slot"] is None and before["last_completed_at"] is None  # no tick completed yet
    await release(client, name, lease["token"])

    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    released = (await release(client, name, lease["token"])).json()
    got = (await client.get(f"/v1/locks/{name}")).json()
    assert got["last_completed_slot"] == slot
    assert got["last_completed_at"] == released["db_time"]  # the release's own now
    items = (await client.get("/v1/locks", params={"prefix": name})).json()["items"]
    assert [(i["last_completed_slot"], i["last_completed_at"]) for i in items] == [(slot, released["db_time"])]


async def test_a_plain_acquisition_after_a_slotted_one_has_no_slot(client: httpx.AsyncClient, name: str) -> None:
    """A lease without a slot never completes the slot of an earlier lease it took over."""
    slot = key()
    await acquire(client, name, "100ms", slot=slot)
    await asyncio.sleep(0.2)
    plain = (await acquire(client, name, "10m")).json()
    assert "slot" not in plain
    released = (await release(client, name, plain["token"])).json()
    assert "slot" not in released and "completed" not in released
    assert (await acquire(client, name, "10m", slot=slot)).status_code == 200


async def test_a_java_takeover_clears_the_slot(client: httpx.AsyncClient, db: Any, java: JavaNode, name: str) -> None:
    slot = key()
    lease = (await acquire(client, name, "100ms", slot=slot)).json()
    await asyncio.sleep(0.2)
    assert await java.insert_or_take_over(name, 0.3)
    assert await db.fetchval(f"SELECT slot FROM {java.table} WHERE name = $1", name) is None
    assert (await release(client, name, lease["token"])).status_code == 409
    assert await java.unlock(name, 0)
    # Java's run had no slot: the tick is still open, and a later Java unlock never completes one.
    assert await db.fetchval(f"SELECT last_completed_slot FROM {java.table} WHERE name = $1", name) is None
    assert (await acquire(client, name, "10m", slot=slot)).status_code == 200


async def test_concurrent_nodes_run_a_tick_once(client: httpx.AsyncClient, name: str) -> None:
    """Many nodes fire for each tick at once, with a 1 ms job and no lock_at_least_for: one run per tick."""
    for _ in range(5):
        slot = key()
        runs: list[str] = []

        async def node(number: int, slot: str = slot, runs: list[str] = runs) -> str:
            r = await acquire(client, name, "1m", slot=slot, holder=f"node-{number}")
            if r.status_code != 200:
                return str(error(r)["code"])
            runs.append(r.json()["token"])
            await asyncio.sleep(0.001)
            assert (await release(client, name, r.json()["token"])).status_code == 200
            return "ran"

        answers = await asyncio.gather(*(node(n) for n in range(12)))
        assert len(runs) == 1, answers
        assert set(answers) <= {"ran", "lock_held", "slot_done"}
        assert error(await acquire(client, name, "1m", slot=slot))["code"] == "slot_done"


async def test_a_refusal_only_reads_and_answers_the_row_it_saw(
    client: httpx.AsyncClient, settings: Settings, database_url: str, name: str
) -> None:
    """Another transaction is completing the tick and holds the row locked; the acquire's snapshot still shows the
    lock held and the tick open. A refusal only reads (issue 19): it answers at once, lock_held by the holder it saw
    (the lock was held at that moment), instead of waiting on the row; once that commit lands, slot_done."""
    import asyncpg

    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    conn = await asyncpg.connect(database_url, server_settings={"timezone": "UTC"})
    try:
        tx = conn.transaction()
        await tx.start()
        await conn.execute(
            f"UPDATE {settings.table} SET lock_until = timezone('utc', now()), last_completed_slot = slot, "
            "last_completed_at = timezone('utc', now()), last_completed_by = locked_by WHERE name = $1",
            name,
        )
        r = await asyncio.wait_for(acquire(client, name, "10m", slot=slot), SETTLE)  # a wait on the row: 503, not 409
        assert error(r)["code"] == "lock_held"
        assert error(r)["locked_by"] == lease["locked_by"]
        await tx.commit()
    finally:
        await conn.close()
    after = await acquire(client, name, "10m", slot=slot)
    assert error(after)["code"] == "slot_done"
    assert error(after)["locked_by"] == lease["locked_by"]


def floor_minute(t: datetime) -> datetime:
    return t.replace(second=0, microsecond=0)


async def test_a_schedule_slot_is_the_latest_tick_by_the_statements_own_clock(
    client: httpx.AsyncClient, settings: Settings, name: str
) -> None:
    r = await acquire(client, name, "1m", schedule="* * * * *")
    assert r.status_code == 200, r.text
    lease = r.json()
    grace = settings.slot_early_grace
    expected = floor_minute(ts(lease["db_time"]) + grace)
    assert lease["slot"] == expected.strftime("%Y-%m-%dT%H:%M:00.000Z")
    assert ts(lease["locked_at"]) == ts(lease["db_time"])  # the same statement's now


@pytest.mark.parametrize(
    ("schedule", "zone", "expected"),
    [
        ("@hourly", None, lambda now: now.replace(minute=0, second=0, microsecond=0)),
        ("0 0 1 1 *", None, lambda now: datetime(now.year, 1, 1, tzinfo=UTC)),
        # Midnight in Tokyo (UTC+9, no DST) is 15:00 UTC the day before.
        (
            "0 0 * * *",
            "Asia/Tokyo",
            lambda now: (
                (now + timedelta(hours=9)).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(hours=9)
            ),
        ),
    ],
)
async def test_schedules_in_time_zones(
    client: httpx.AsyncClient, name: str, schedule: str, zone: str | None, expected: Any
) -> None:
    body: dict[str, Any] = {"schedule": schedule} | ({"timezone": zone} if zone else {})
    lease = (await acquire(client, name, "1m", **body)).json()
    assert ts(lease["slot"]) == expected(ts(lease["db_time"]) + timedelta(seconds=1))


async def test_a_wrong_estimate_of_the_database_clock_costs_a_retry_not_a_wrong_slot(
    app: FastAPI, client: httpx.AsyncClient, name: str
) -> None:
    clock = app.state.store.db_clock
    clock.learn(datetime.now(UTC) - timedelta(hours=5))  # as if this process had lived five hours behind
    before = scrape_count(app)
    lease = (await acquire(client, name, "1m", schedule="*/5 * * * *")).json()
    now = ts(lease["db_time"]) + timedelta(seconds=1)
    assert ts(lease["slot"]) == now.replace(minute=now.minute - now.minute % 5, second=0, microsecond=0)
    assert scrape_count(app) - before == 2  # the first statement missed its window and changed nothing
    assert abs((clock.now() - ts(lease["db_time"]).replace(tzinfo=None)).total_seconds()) < 5  # learned


def scrape_count(app: FastAPI) -> float:
    value = app.state.metrics.registry.get_sample_value(
        "schedlock_db_statement_duration_seconds_count", {"operation": "acquire"}
    )
    return float(value or 0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slot": "a", "schedule": "* * * * *"}, "slot"),
        ({"timezone": "Europe/Berlin"}, "timezone"),
        ({"slot": ""}, "slot"),
        ({"slot": "x" * 65}, "slot"),
        ({"slot": "a\u0000b"}, "slot"),
        ({"slot": "a\nb"}, "slot"),
        ({"slot": "a\u0085b"}, "slot"),
        ({"slot": 5}, "slot"),
        ({"schedule": "61 * * * *"}, "schedule"),
        ({"schedule": "* * * *"}, "schedule"),
        ({"schedule": "0 * * * * *"}, "schedule"),  # seconds: not a standard 5-field expression
        ({"schedule": "@reboot"}, "schedule"),
        ({"schedule": "* * 31 2 *"}, "schedule"),
        ({"schedule": "*\u0000 * * * *"}, "schedule"),
        ({"schedule": "9" * 200}, "schedule"),
        ({"schedule": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"schedule": "* * * * *", "timezone": "localtime"}, "timezone"),
        ({"schedule": "* * * * *", "timezone": "../../etc/passwd"}, "timezone"),
        ({"schedule": "* * * * *", "timezone": "Europe/Berlin\u0000"}, "timezone"),
    ],
)
async def test_bad_slot_input_is_a_422_naming_the_field(
    client: httpx.AsyncClient, name: str, body: dict[str, Any], field: str
) -> None:
    r = await acquire(client, name, "1m", **body)
    assert r.status_code == 422, r.text
    assert error(r)["code"] == "invalid_request" and error(r)["field"] == field


async def test_a_lone_surrogate_in_a_slot_is_refused_not_a_500(client: httpx.AsyncClient, name: str) -> None:
    raw = b'{"lock_at_most_for": "1m", "slot": "a\\ud800"}'
    r = await client.post(f"/v1/locks/{name}/acquire", content=raw, headers={"content-type": "application/json"})
    assert r.status_code == 422 and error(r)["code"] == "invalid_request"


async def test_release_refuses_a_completed_that_is_not_a_boolean(client: httpx.AsyncClient, name: str) -> None:
    lease = (await acquire(client, name, "1m", slot=key())).json()
    r = await release(client, name, lease["token"], completed="maybe")
    assert r.status_code == 422 and error(r)["field"] == "completed"


async def test_slot_done_is_counted_and_logged_apart_from_held(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    lease = (await acquire(client, name, "10m", slot=slot)).json()
    before = await scrape(client)
    with captured() as out:
        await acquire(client, name, "10m", slot=key())  # held
        await release(client, name, lease["token"])
        await acquire(client, name, "10m", slot=slot)  # done
    after = await scrape(client)
    assert outcomes(before, after) == {
        ("acquire", "held"): 1,
        ("release", "released"): 1,
        ("acquire", "slot_done"): 1,
    }
    logged = [(line["route"].rsplit("/", 1)[1], line["status"], line["outcome"]) for line in access(out)]
    assert logged == [("acquire", 409, "held"), ("release", 200, "released"), ("acquire", 409, "slot_done")]


async def test_slot_answers_fit_the_documents_schemas(client: httpx.AsyncClient, name: str) -> None:
    slot = key()
    lease = await acquire(client, name, "1m", slot=slot)
    check(lease, ACQUIRE, "post")
    check(await release(client, name, lease.json()["token"]), RELEASE, "post")
    check(await acquire(client, name, "1m", slot=slot), ACQUIRE, "post")  # 409 slot_done
    check(await client.get(f"/v1/locks/{name}"), GET, "get")
    check(await client.get("/v1/locks", params={"prefix": name}), LIST, "get")
    check(await acquire(client, name, "1m", schedule="0 0 31 2 *"), ACQUIRE, "post")  # 422


def tick(minute: int) -> str:
    """A tick-time key (docs/slots.md): the API's time format."""
    return f"2026-11-30T03:{minute:02d}:00.000Z"


async def run_tick(client: httpx.AsyncClient, name: str, slot: str) -> None:
    lease = await acquire(client, name, "10m", slot=slot)
    assert lease.status_code == 200, lease.text
    assert (await release(client, name, lease.json()["token"])).json()["completed"] is True


async def test_a_late_trigger_of_an_older_tick_is_stale_and_the_record_stays(
    client: httpx.AsyncClient, name: str
) -> None:
    """Issue 43: a tick older than the last completed one answers slot_done, saying it is stale; it never runs, and
    the last completed tick does not move back (so the newer one is not run again)."""
    await run_tick(client, name, tick(5))
    late = await acquire(client, name, "10m", slot=tick(4), holder="late-node")
    err = error(late)
    assert late.status_code == 409 and err["code"] == "slot_done", late.text
    assert err["stale"] is True and err["slot"] == tick(4) and err["last_completed_slot"] == tick(5)
    assert "stale" in err["message"] and tick(5) in err["message"]
    check(late, ACQUIRE, "post")  # the document describes it
    got = (await client.get(f"/v1/locks/{name}")).json()
    assert got["last_completed_slot"] == tick(5)
    again = error(await acquire(client, name, "10m", slot=tick(5)))
    assert again["code"] == "slot_done" and "stale" not in again and "last_completed_slot" not in again
    await run_tick(client, name, tick(6))  # a newer tick runs


async def test_a_stale_tick_is_refused_while_the_lock_is_held_too(client: httpx.AsyncClient, name: str) -> None:
    await run_tick(client, name, tick(5))
    await acquire(client, name, "10m", slot=tick(7))  # a newer tick running
    assert error(await acquire(client, name, "10m", slot=tick(1)))["stale"] is True
    assert error(await acquire(client, name, "10m", slot=tick(6)))["code"] == "lock_held"


async def test_keys_that_are_not_tick_times_keep_the_old_rule(client: httpx.AsyncClient, name: str) -> None:
    """Only keys written as the API writes times compare as times; any other key is refused only when it is the last
    completed one, and a time key after another key (or before) runs."""
    await run_tick(client, name, "2026-11-30")
    await run_tick(client, name, "2026-11-29")  # not a tick time: an "older" key of one's own runs
    await run_tick(client, name, tick(5))
    await run_tick(client, name, "2026-11-30T03:04")  # not the API's form either
    await run_tick(client, name, tick(4))  # the last completed key is no tick: no order to keep
    assert error(await acquire(client, name, "10m", slot=tick(3)))["stale"] is True
    for almost in ("2026-11-30T03:03:00Z", "2026-11-30T03:03:00.000+00:00", "2026-11-30 03:03:00.000Z"):
        await run_tick(client, name, almost)
        await run_tick(client, name, tick(9))


async def test_a_schedules_slot_older_than_the_last_completed_tick_is_stale(
    client: httpx.AsyncClient, name: str
) -> None:
    await run_tick(client, name, "2999-01-01T00:00:00.000Z")  # a tick key far ahead of the schedule's
    err = error(await acquire(client, name, "10m", schedule="* * * * *"))
    assert err["code"] == "slot_done" and err["stale"] is True
    assert err["last_completed_slot"] == "2999-01-01T00:00:00.000Z"


async def completed_older(db: Any, settings: Settings, name: str, lease_slot: str, last: str) -> None:
    """Put the row in a state the acquire rule no longer lets arise (a lease taken under the old rule, before an
    upgrade): its lease runs ``lease_slot`` while the name's last completed tick is the newer ``last``."""
    await db.execute(
        f"UPDATE {settings.table} SET slot = $2, last_completed_slot = $3, last_completed_at = now(), "
        "last_completed_by = 'newer' WHERE name = $1",
        *(name, lease_slot, last),
    )


async def test_completing_an_older_tick_never_moves_the_record_back(
    client: httpx.AsyncClient, db: Any, settings: Settings, name: str
) -> None:
    lease = (await acquire(client, name, "10m", slot=tick(4))).json()
    await completed_older(db, settings, name, tick(4), tick(5))
    released = (await release(client, name, lease["token"])).json()
    assert released["slot"] == tick(4) and released["completed"] is False  # released, but not recorded
    got = (await client.get(f"/v1/locks/{name}")).json()
    assert (got["last_completed_slot"], got["held"]) == (tick(5), False)


async def test_the_batched_release_keeps_the_order_too(
    app: FastAPI, client: httpx.AsyncClient, db: Any, settings: Settings
) -> None:
    """The coalesced release (app.coalescing.batches) is its own statement: the same guard, per name."""
    from app.locking.leases import hash_token, released_marker

    names, tokens = [f"batch-{uuid.uuid4().hex[:10]}" for _ in range(2)], []
    for n, lease_slot in zip(names, (tick(4), tick(6)), strict=True):
        tokens.append((await acquire(client, n, "10m", slot=lease_slot)).json()["token"])
        await completed_older(db, settings, n, lease_slot, tick(5))
    hashes = [hash_token(t) for t in tokens]
    rows = await db.fetch(
        app.state.store.sql.release_many, names, hashes, [released_marker(h) for h in hashes], [True, True]
    )
    assert sorted((r["name"], r["ok"], r["last_completed_slot"]) for r in rows) == sorted(
        [
            (names[0], True, tick(5)),
            (names[1], True, tick(6)),
        ]  # the older one kept the newer record; the newer moved it
    )


@pytest.mark.parametrize(
    "key",
    [
        tick(0),
        "0001-01-01T00:00:00.000Z",
        "2026-11-30T03:00:00.000z",
        "2026-11-30T03:00:00Z",
        "2026-11-30T03:00:00.0000Z",
        " 2026-11-30T03:00:00.000Z",
        "2026-11-30T03:00:00.000Z\n",
        "2026-11-30T03:00:00.000Zx",
        "2026-11-30T03:00:00,000Z",
        "\uff12026-11-30T03:00:00.000Z",  # a fullwidth digit: a digit to Python's \d, not to the pattern
        "batch-42",
    ],
)
async def test_the_tick_pattern_is_the_same_in_python_and_in_sql(db: Any, key: str) -> None:
    from app.locking.slots import TICK_SQL, is_tick

    assert await db.fetchval(f"SELECT $1::text ~ {TICK_SQL}", key) is is_tick(key)
