"""The proof of issue 14 (docs/slots.md), with real server processes and real time: two nodes whose triggers fire up
to 2 s apart run a 1 ms job (lock_at_least_for 0) exactly once per tick, also when one node's run fails or its lease
expires; and a schedule's slot is the database's tick at a minute boundary, whichever server computes it, one of
them under libfaketime an hour ahead."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from app.settings import Settings
from tests.support.api import ts
from tests.support.faketime import libfaketime
from tests.support.patience import ANSWER
from tests.support.servers import LiveServer, start_server, stop_server

#: No connection kept alive between requests.
ONE_SHOT = httpx.Limits(max_keepalive_connections=0)


@dataclass
class Nodes:
    honest: LiveServer
    skewed: LiveServer  # its own clock an hour ahead


@pytest.fixture(scope="module")
def nodes(settings: Settings, live_server: LiveServer) -> Iterator[Nodes]:
    skewed = start_server(settings, {"LD_PRELOAD": libfaketime(), "FAKETIME": "+1h"})
    yield Nodes(live_server, skewed)
    stop_server(skewed)


@dataclass
class Tick:
    name: str
    slot: str
    kind: str  # "ok": both nodes healthy; "fail": the first run fails; "expire": the first holder dies
    runs: list[str]  # the nodes whose run completed
    answers: Counter[str]


async def fire(client: httpx.AsyncClient, tick: Tick, node: str, behaviour: str) -> None:
    """One node's trigger: acquire the tick's slot; if granted, run the 1 ms job and release (or fail, or die)."""
    at_most = "300ms" if behaviour == "die" else "1m"
    r = await client.post(
        f"/v1/locks/{tick.name}/acquire",
        json={"lock_at_most_for": at_most, "lock_at_least_for": 0, "slot": tick.slot, "holder": node},
    )
    if r.status_code != 200:
        assert r.status_code == 409, r.text
        tick.answers[r.json()["error"]["code"]] += 1
        return
    tick.answers["ran"] += 1
    await asyncio.sleep(0.001)  # the job
    if behaviour == "die":
        return  # never releases: the lease expires
    completed = behaviour != "fail"
    body = {"token": r.json()["token"], "completed": completed}
    released = await client.post(f"/v1/locks/{tick.name}/release", json=body)
    assert released.status_code == 200, released.text
    if completed:
        tick.runs.append(node)


async def fail_first(tick: Tick, a: httpx.AsyncClient, b: httpx.AsyncClient, rng: random.Random) -> None:
    """Node a's run fails (or a dies holding the lease); node b's trigger fires up to 2 s later, after the lease is
    gone (a dead holder's 300 ms lease has run out by then)."""
    first = "fail" if tick.kind == "fail" else "die"
    await fire(a, tick, "a", first)
    await asyncio.sleep(rng.uniform(0.35, 2.0))
    await fire(b, tick, "b", "ok")


async def test_two_nodes_firing_up_to_2s_apart_run_each_tick_once(nodes: Nodes) -> None:
    rng = random.Random(14)
    async with (
        # A connection per request: a kept-alive one idle past the server's keep-alive timeout (the sleeps here, longer
        # at load) may be closed by the server just as it is reused (httpx.ReadError, seen beside two CPU hogs).
        httpx.AsyncClient(base_url=nodes.honest.url, timeout=ANSWER, limits=ONE_SHOT) as a,
        httpx.AsyncClient(base_url=nodes.skewed.url, timeout=ANSWER, limits=ONE_SHOT) as b,
    ):

        async def job(number: int) -> list[Tick]:
            """One job (a lock name) whose ticks come one after another, every 2.2 s."""
            name = f"nightly-{number}-{uuid.uuid4().hex[:6]}"
            ticks = []
            for round_ in range(5):
                kind = rng.choice(["ok", "ok", "ok", "fail", "expire"])
                tick = Tick(name, f"tick-{round_}", kind, [], Counter())
                if kind == "ok":
                    delays = (rng.uniform(0, 2), rng.uniform(0, 2))

                    async def later(client: httpx.AsyncClient, node: str, delay: float, tick: Tick = tick) -> None:
                        await asyncio.sleep(delay)
                        await fire(client, tick, node, "ok")

                    await asyncio.gather(later(a, "a", delays[0]), later(b, "b", delays[1]), asyncio.sleep(2.2))
                else:
                    await fail_first(tick, a, b, rng)
                    await asyncio.sleep(0.1)
                ticks.append(tick)
            return ticks

        started = time.monotonic()
        ticks = [t for job_ticks in await asyncio.gather(*(job(n) for n in range(20))) for t in job_ticks]
        elapsed = time.monotonic() - started
    kinds = Counter(t.kind for t in ticks)
    answers = sum((t.answers for t in ticks), Counter[str]())
    print(f"\n{len(ticks)} ticks in {elapsed:.1f} s, {dict(kinds)}; answers {dict(answers)}")
    assert len(ticks) == 100 and kinds["ok"] >= 40 and kinds["fail"] >= 5 and kinds["expire"] >= 5
    for tick in ticks:
        assert len(tick.runs) == 1, tick  # exactly one completed run per tick
        if tick.kind != "ok":
            assert tick.runs == ["b"], tick  # the failed or dead run left the tick to the other node
    # The later trigger of an "ok" tick is refused, once: the tick done (slot_done, however late it came), or still
    # running (lock_held). Which depends on the machine's speed (this test asked for 40 or more of the first; at
    # load 20 there were 27 of 64): both are right, and the first must happen.
    assert answers["slot_done"] + answers["lock_held"] == kinds["ok"] and answers["slot_done"] >= 1


def minute(value: datetime) -> str:
    return value.replace(second=0, microsecond=0).strftime("%Y-%m-%dT%H:%M:00.000Z")


async def test_the_schedule_slot_is_the_databases_tick_at_a_minute_boundary(
    nodes: Nodes, db: Any, settings: Settings
) -> None:
    grace = settings.slot_early_grace
    async with (
        httpx.AsyncClient(base_url=nodes.honest.url, timeout=ANSWER) as honest,
        httpx.AsyncClient(base_url=nodes.skewed.url, timeout=ANSWER) as skewed,
    ):
        probe = await skewed.get("/healthz")
        ahead = parsedate_to_datetime(probe.headers["date"]).timestamp() - time.time()
        assert 3500 < ahead < 3700, ahead  # the skewed server really lives an hour ahead

        seen: list[tuple[str, str, datetime, datetime, datetime]] = []
        tag = uuid.uuid4().hex[:6]
        body = {"lock_at_most_for": "1m", "lock_at_least_for": 0, "schedule": "* * * * *"}

        one_at_a_time = asyncio.Lock()  # the sweep and the pair share the one connection

        async def db_now() -> datetime:
            async with one_at_a_time:
                now: datetime = (await db.fetchval("SELECT now()")).astimezone(UTC)
            return now

        async def until(moment: datetime) -> None:
            """Until the database's clock reaches ``moment`` (not a sleep of this process's: it races that clock)."""
            while await db_now() < moment:  # noqa: ASYNC110 (the database's clock sends no event)
                await asyncio.sleep(0.02)

        async def sweep(boundary: datetime) -> None:
            for i in range(40):  # every 100 ms for 4 s or more, alternating servers, a fresh name each time
                client, which = (honest, "honest") if i % 2 else (skewed, "skewed")
                before = await db_now()
                r = await client.post(f"/v1/locks/boundary-{tag}-{boundary.minute}-{i}/acquire", json=body)
                after = await db_now()
                assert r.status_code == 200, r.text
                lease = r.json()
                seen.append((which, lease["slot"], ts(lease["db_time"]), before, after))
                await asyncio.sleep(0.1)

        async def pair(boundary: datetime) -> tuple[httpx.Response, httpx.Response]:
            """A node 0.7 s early by the database's clock, then one 0.8 s late: one tick, one run."""
            name = f"boundary-pair-{tag}-{boundary.minute}"
            await until(boundary - timedelta(seconds=0.7))
            early = await skewed.post(f"/v1/locks/{name}/acquire", json=body)
            assert early.status_code == 200, early.text
            await skewed.post(f"/v1/locks/{name}/release", json={"token": early.json()["token"]})
            await until(boundary + timedelta(seconds=0.8))
            return early, await honest.post(f"/v1/locks/{name}/acquire", json=body)

        # Start 2 s before a minute's end by the database's clock. On a loaded machine a request may take longer than
        # the margins: when the sweep's first acquire or the early one ran only after the boundary, the scene was
        # not set (nothing was wrong) and it is played again at the next minute.
        for _ in range(3):
            now = await db_now()
            boundary = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
            if boundary - now < timedelta(seconds=2.5):
                boundary += timedelta(minutes=1)
            await until(boundary - timedelta(seconds=2))
            seen.clear()
            _, (early, late) = await asyncio.gather(sweep(boundary), pair(boundary))
            if seen[0][2] < boundary and ts(early.json()["db_time"]) < boundary:
                break

    for which, slot, at, before, after in seen:
        # The slot is the tick of the statement's own now (its db_time), which lies between the two SELECT now().
        assert before <= at <= after, (which, at, before, after)
        assert slot == minute(at + grace), (which, slot, at)
    slots = {s for _, s, _, _, _ in seen}
    assert len(slots) == 2, slots  # the run crossed the boundary
    assert {w for w, s, *_ in seen if s == max(slots)} == {"honest", "skewed"}  # both servers saw the new tick
    early_at = ts(early.json()["db_time"])
    assert boundary - grace <= early_at < boundary, early_at  # it really came early, within the grace
    assert early.json()["slot"] == minute(boundary)  # so it ran the coming tick
    assert late.status_code == 409 and late.json()["error"]["code"] == "slot_done", late.text
    assert late.json()["error"]["slot"] == minute(boundary)
