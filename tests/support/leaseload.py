"""Jobs taking leases through schedlock servers while a database cluster fails over: each client acquires a
fresh name, extends it, releases it, and again, recording every answer and every acknowledged grant.

``check_leases`` then asks the (new) primary whether it shows exactly what the clients were told: every granted
lease in the run history with its holder, every acknowledged extend's ``lock_until``, every acknowledged release,
and the lock row still carrying an unreleased lease's token. An operation answered 503, or not answered before the
client gave up (status 0: on a loaded machine a server may not answer within the client's timeout), has an unknown
outcome (the write may or may not have happened), so the checks after it are the ones that hold either way.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import asyncpg
import httpx

from app.locking.leases import hash_token

AT_MOST = {"lock_at_most_for": "5m"}  # longer than any switch: a lease never expires during a test


@dataclass
class Grant:
    """A lease some client was told it holds, and what it was told since."""

    name: str
    token: str
    fencing_token: int
    locked_by: str
    route: str
    granted_at: float
    extended_until: datetime | None = None  # the lock_until of the last acknowledged extend
    released: bool = False
    #: An extend or release of it was answered 503, or not at all (the client gave up): it may or may not have happened.
    unknown: bool = False


@dataclass(frozen=True)
class Answer:
    at: float  # seconds since the load started
    route: str
    operation: str
    status: int  # 0: no HTTP answer at all
    retry_after: str | None
    code: str | None
    message: str | None = None
    name: str = ""  # the lock's
    sent: float = 0.0  # when the request was sent (``at`` is when its answer, or the client's giving up, came)


@dataclass
class LeaseLoad:
    """``routes``: a name for each way to the database (multi-host, haproxy) and its servers' base URLs."""

    routes: dict[str, list[str]]
    clients_per_server: int = 2
    pause: float = 0.02
    started: float = field(default_factory=time.monotonic)
    grants: list[Grant] = field(default_factory=list)
    answers: list[Answer] = field(default_factory=list)
    _running: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _clients: list[httpx.AsyncClient] = field(default_factory=list)

    def now(self) -> float:
        return time.monotonic() - self.started

    async def start(self) -> None:
        self._running = True
        for route, urls in self.routes.items():
            for url in urls:
                client = httpx.AsyncClient(base_url=url, timeout=15)
                self._clients.append(client)
                for index in range(self.clients_per_server):
                    self._tasks.append(asyncio.create_task(self._worker(client, route, index)))

    async def stop(self) -> None:
        self._running = False
        await asyncio.gather(*self._tasks)
        self._tasks.clear()
        for client in self._clients:
            await client.aclose()
        self._clients.clear()

    async def _call(
        self, client: httpx.AsyncClient, route: str, operation: str, name: str, body: dict[str, str]
    ) -> httpx.Response | None:
        sent = self.now()
        try:
            r = await client.post(f"/v1/locks/{name}/{operation}", json=body)
        except httpx.HTTPError:
            self.answers.append(Answer(self.now(), route, operation, 0, None, None, name=name, sent=sent))
            return None
        error = r.json().get("error", {}) if r.status_code != 200 else {}
        retry_after = r.headers.get("retry-after")
        self.answers.append(
            Answer(
                self.now(),
                route,
                operation,
                r.status_code,
                retry_after,
                error.get("code"),
                error.get("message"),
                name=name,
                sent=sent,
            )
        )
        return r

    async def _worker(self, client: httpx.AsyncClient, route: str, index: int) -> None:
        holder = f"{route}-{index}"
        while self._running:
            name = f"ha-{holder}-{uuid.uuid4().hex[:10]}"
            r = await self._call(client, route, "acquire", name, {**AT_MOST, "holder": holder})
            if r is not None and r.status_code == 200:
                body = r.json()
                grant = Grant(name, body["token"], body["fencing_token"], body["locked_by"], route, self.now())
                self.grants.append(grant)
                r = await self._call(client, route, "extend", name, {"token": grant.token, **AT_MOST})
                if r is not None and r.status_code == 200:
                    grant.extended_until = _parse(r.json()["lock_until"])
                elif r is None or r.status_code == 503:  # no answer in time, or 503: it may or may not have happened
                    grant.unknown = True
                r = await self._call(client, route, "release", name, {"token": grant.token})
                if r is not None and r.status_code == 200:
                    grant.released = True
                elif r is None or r.status_code == 503:
                    grant.unknown = True
            await asyncio.sleep(self.pause)

    def between(self, start: float, end: float = float("inf")) -> Counter[tuple[str, int]]:
        return Counter((a.operation, a.status) for a in self.answers if start <= a.at < end)

    def first_grant_after(self, moment: float, route: str | None = None) -> float | None:
        return next((g.granted_at for g in self.grants if g.granted_at >= moment and route in (None, g.route)), None)

    def first_refusal_after(self, moment: float, route: str | None = None) -> float | None:
        return next(
            (a.at for a in self.answers if a.at >= moment and a.status == 503 and route in (None, a.route)), None
        )

    async def wait_for_refusal(self, moment: float, within: float, route: str | None = None) -> float | None:
        """The first 503 after ``moment``, or None if there was none within ``within`` seconds."""
        deadline = time.monotonic() + within
        # The answers are a list the workers append to, not an event.
        while self.first_refusal_after(moment, route) is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        return self.first_refusal_after(moment, route)

    async def wait_for_grant(self, moment: float, within: float, route: str | None = None) -> float:
        """The first grant after ``moment``; AssertionError if there was none within ``within`` seconds."""
        deadline = time.monotonic() + within
        while (first := self.first_grant_after(moment, route)) is None:
            if time.monotonic() > deadline:
                said = Counter(a.message for a in self.answers if a.at >= moment and a.status == 503)
                raise AssertionError(f"no lock granted {within} s after {moment:.1f} s: {self.between(moment)}, {said}")
            await asyncio.sleep(0.1)
        return first


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value).astimezone(UTC).replace(tzinfo=None)


async def check_leases(url: str, table: str, grants: list[Grant]) -> list[tuple[Grant, str]]:
    """What the primary at ``url`` does not show of what the clients were told, lease by lease, with the reason."""
    names = [g.name for g in grants]
    conn = await asyncpg.connect(url)
    try:
        runs = await conn.fetch(
            f"SELECT name, fencing_token, locked_by, lock_until, outcome FROM {table}_runs WHERE name = ANY($1)", names
        )
        rows = await conn.fetch(f"SELECT name, lease_token_hash FROM {table} WHERE name = ANY($1)", names)
    finally:
        await conn.close()
    run_of = {(r["name"], r["fencing_token"]): r for r in runs}
    hash_of = {r["name"]: bytes(r["lease_token_hash"] or b"") for r in rows}
    lost: list[tuple[Grant, str]] = []
    for grant in grants:
        run = run_of.get((grant.name, grant.fencing_token))
        if run is None or run["locked_by"] != grant.locked_by:
            lost.append((grant, "acquire"))
        elif grant.released:
            if run["outcome"] != "released":
                lost.append((grant, "release"))
        elif not grant.unknown:  # nothing in doubt: the lease is held, as last told
            if run["outcome"] != "running" or hash_of.get(grant.name) != hash_token(grant.token):
                lost.append((grant, "extend" if grant.extended_until else "acquire"))
            elif grant.extended_until and run["lock_until"] < grant.extended_until - timedelta(milliseconds=1):
                lost.append((grant, "extend"))
        elif (  # a release in doubt, the extend told: held until then at least, or released
            grant.extended_until
            and run["outcome"] == "running"
            and run["lock_until"] < grant.extended_until - timedelta(milliseconds=1)
        ):
            lost.append((grant, "extend"))
    return lost
