"""Several server processes over one table behave as one lock service.

Concurrent clients hammer a few names through every replica. Each winner notes, on the machine-wide monotonic
clock, when it entered and left its critical section (after acquire answered, before release was sent: inside
the lease). That record is kept apart from the database, and no two entries for one name may overlap. One
replica runs under libfaketime an hour ahead: the database's clock decides, so it changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.db import migrate
from app.settings import Settings
from tests.support.api import ts
from tests.support.faketime import libfaketime
from tests.support.pgcluster import PgCluster
from tests.support.servers import LiveServer, start_server, stop_server


@dataclass
class Replicas:
    honest: list[LiveServer]
    skewed: LiveServer  # its own clock an hour ahead

    @property
    def all(self) -> list[LiveServer]:
        return [*self.honest, self.skewed]


@pytest.fixture(scope="module")
def shared_db() -> Iterator[Settings]:
    """The one database every replica uses: a cluster of this module's own, so that neither the other tests'
    load on the shared server nor its disk flushes decide how many rounds fit in the time."""
    cluster = PgCluster()
    cluster.start()
    settings = Settings(database_url=SecretStr(cluster.url), table="shedlock")
    migrate.upgrade(settings)
    yield settings
    cluster.destroy()


@pytest.fixture(scope="module")
def replicas(shared_db: Settings) -> Iterator[Replicas]:
    pool = {"SCHEDLOCK_POOL_MAX_SIZE": "6"}
    honest = [start_server(shared_db, pool), start_server(shared_db, pool)]
    # Every clock of that process, monotonic ones too: faking only the wall clock made libuv and asyncpg mix two
    # clocks and stall for hundreds of milliseconds. The record below uses the test's own monotonic clock.
    skew = {"LD_PRELOAD": libfaketime(), "FAKETIME": "+1h", **pool}
    skewed = start_server(shared_db, skew)
    yield Replicas(honest, skewed)
    for server in (*honest, skewed):
        stop_server(server)


@dataclass(frozen=True)
class Section:
    name: str
    enter: float
    leave: float
    fencing_token: int
    worker: int


def overlaps(sections: list[Section]) -> list[tuple[Section, Section]]:
    """Pairs of critical sections on the same name that overlap in time."""
    found = []
    by_name: dict[str, list[Section]] = defaultdict(list)
    for s in sections:
        by_name[s.name].append(s)
    for runs in by_name.values():
        runs.sort(key=lambda s: s.enter)
        latest = runs[0]
        for s in runs[1:]:
            if s.enter < latest.leave:
                found.append((latest, s))
            if s.leave > latest.leave:
                latest = s
    return found


def test_the_overlap_check_finds_overlaps() -> None:
    a, b, c = Section("x", 0.0, 2.0, 1, 1), Section("x", 1.0, 1.5, 2, 2), Section("x", 3.0, 4.0, 3, 1)
    assert overlaps([c, a, b]) == [(a, b)]
    assert overlaps([a, c, Section("y", 1.0, 3.5, 1, 2)]) == []


class Wire:
    """One keep-alive HTTP/1.1 connection, spoken by hand: httpx costs ~20 times more CPU per request, and on two
    cores the client would then decide the pace instead of the replicas."""

    def __init__(self, server: LiveServer) -> None:
        self.host, port = server.url.removeprefix("http://").rsplit(":", 1)
        self.port = int(port)

    async def open(self) -> Wire:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        return self

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode()
        self.writer.write(
            b"POST %s HTTP/1.1\r\nhost: replica\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (path.encode(), len(data), data)
        )
        status = int((await self.reader.readline()).split()[1])
        length = 0
        while (line := await self.reader.readline()) != b"\r\n":
            key, _, value = line.partition(b":")
            if key.strip().lower() == b"content-length":
                length = int(value)
        return status, json.loads(await self.reader.readexactly(length))

    def close(self) -> None:
        self.writer.close()


async def hammer(
    servers: list[LiveServer], names: list[str], *, workers: int, rounds: int, at_most: str, work: float
) -> tuple[list[Section], Counter[str]]:
    """``workers`` clients, each: acquire a random name on a random replica; if granted, note the critical
    section (``work`` seconds at most), release through another random replica; if held, skip. Stops after
    ``rounds`` acquire attempts in all (or a minute)."""
    sections: list[Section] = []
    outcomes: Counter[str] = Counter()
    deadline = time.monotonic() + 60

    async def worker(number: int) -> None:
        rng = random.Random(number)
        wires = [await Wire(s).open() for s in servers]
        try:
            while outcomes["acquired"] + outcomes["skipped"] < rounds and time.monotonic() < deadline:
                name = rng.choice(names)
                body = {"lock_at_most_for": at_most, "holder": f"worker-{number}"}
                status, lease = await rng.choice(wires).post(f"/v1/locks/{name}/acquire", body)
                if status == 409:
                    outcomes["skipped"] += 1
                    continue
                assert status == 200, lease
                enter = time.monotonic()
                await asyncio.sleep(rng.uniform(0, work))
                leave = time.monotonic()
                outcomes["acquired"] += 1
                sections.append(Section(name, enter, leave, lease["fencing_token"], number))
                status, _ = await rng.choice(wires).post(f"/v1/locks/{name}/release", {"token": lease["token"]})
                outcomes[f"release {status}"] += 1
        finally:
            for wire in wires:
                wire.close()

    await asyncio.gather(*(worker(n) for n in range(workers)))
    return sections, outcomes


async def test_replicas_never_grant_overlapping_leases(replicas: Replicas) -> None:
    names = [f"replica-{i}-{random.randrange(10**9)}" for i in range(4)]
    started = time.monotonic()
    sections, outcomes = await hammer(replicas.all, names, workers=24, rounds=6000, at_most="30s", work=0.003)
    elapsed = time.monotonic() - started
    rounds = outcomes["acquired"] + outcomes["skipped"]
    print(
        f"\n{len(replicas.all)} replicas, 24 clients, {len(names)} names, {elapsed:.1f} s: {rounds} acquire rounds, "
        f"{outcomes['acquired']} critical sections, {outcomes['skipped']} skips, "
        f"{len(overlaps(sections))} overlaps; {dict(outcomes)}"
    )
    assert rounds >= 6000 and outcomes["acquired"] >= 500, outcomes  # thousands of rounds, hundreds of them won
    assert overlaps(sections) == []
    assert outcomes["release 200"] == outcomes["acquired"], outcomes
    # The fencing token orders the holders of a name exactly as the independent record does.
    for name in names:
        tokens = [s.fencing_token for s in sorted(sections, key=lambda s: s.enter) if s.name == name]
        assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)


async def test_the_record_would_catch_a_double_grant(replicas: Replicas) -> None:
    """Control: leases shorter than the work expire mid-section, and others are rightly let in. The same record
    must then show overlaps, or the test above proves nothing."""
    names = [f"expiring-{random.randrange(10**9)}"]
    sections, outcomes = await hammer(replicas.honest, names, workers=6, rounds=300, at_most="5ms", work=0.05)
    print(f"\ncontrol with 5 ms leases: {len(overlaps(sections))} overlaps in {len(sections)} sections")
    assert overlaps(sections), outcomes
    assert outcomes["release 409"] > 0  # a holder whose lease was taken over cannot release it


async def test_a_replica_with_a_wrong_clock_changes_nothing(replicas: Replicas) -> None:
    honest, skewed = replicas.honest[0], replicas.skewed
    name = f"skew-{random.randrange(10**9)}"
    async with (
        httpx.AsyncClient(base_url=honest.url, timeout=10) as good,
        httpx.AsyncClient(base_url=skewed.url, timeout=10) as bad,
    ):
        # The skewed process really lives an hour ahead: its HTTP Date header says so.
        probe = await bad.get("/healthz")
        ahead = parsedate_to_datetime(probe.headers["date"]).timestamp() - time.time()
        assert 3500 < ahead < 3700, ahead

        # A lock taken through the honest replica is held, as seen and judged by the skewed one.
        lease = (await good.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "10m"})).json()
        assert (await bad.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})).status_code == 409
        assert (await bad.get(f"/v1/locks/{name}")).json()["held"] is True
        assert (await bad.post(f"/v1/locks/{name}/release", json={"token": lease["token"]})).status_code == 200

        # A lock taken through the skewed replica lasts what was asked, on the database's clock.
        other = f"{name}-b"
        taken = (await bad.post(f"/v1/locks/{other}/acquire", json={"lock_at_most_for": "2s"})).json()
        db_now = (await good.get(f"/v1/locks/{other}")).json()["db_time"]
        assert abs((ts(taken["locked_at"]) - ts(db_now)).total_seconds()) < 5
        assert (ts(taken["lock_until"]) - ts(taken["locked_at"])).total_seconds() == 2
        # Refused while it lasts (on a loaded machine the two seconds may be over by the time the request runs:
        # then it is granted, and only from its lock_until on).
        r = await good.post(f"/v1/locks/{other}/acquire", json={"lock_at_most_for": "1m"})
        if r.status_code == 200:
            assert ts(r.json()["locked_at"]) >= ts(taken["lock_until"]), r.text
        else:
            assert r.status_code == 409 and ts(r.json()["error"]["db_time"]) < ts(taken["lock_until"]), r.text
            # Once the database's clock passes lock_until (however long that takes here), it is free.
            while ts((await good.get(f"/v1/locks/{other}")).json()["db_time"]) < ts(taken["lock_until"]):  # noqa: ASYNC110 (the database clock sends no event)
                await asyncio.sleep(0.1)
            r = await good.post(f"/v1/locks/{other}/acquire", json={"lock_at_most_for": "1m"})
            assert r.status_code == 200, r.text

        # Extend through the skewed replica moves lock_until by the asked amount from the database's now.
        extended = (
            await bad.post(f"/v1/locks/{other}/extend", json={"token": r.json()["token"], "lock_at_most_for": "3s"})
        ).json()
        assert (ts(extended["lock_until"]) - ts(extended["db_time"])).total_seconds() == pytest.approx(3, abs=0.01)
