"""The soak's fleet-like load: cycles started on an open-loop schedule, and reads beside them.

A cycle is one of (shares in ``MIX``):

- ``plain``: acquire a name of its own, extend it 0-3 times with short pauses (the job working), release;
- ``skip``: the same, and right after the acquire a second node tries the same name on the other server and is
  refused (409 ``lock_held``): the attempt the history counts as a skip;
- ``slot``: a ``slot`` acquire (a tick key that changes every 2 s) on one of a few shared names: the first of the
  fleet runs the tick, the others get 409 (``slot_done`` or ``lock_held``);
- ``job``: a ``schedule: "* * * * *"`` acquire on one of 128 job names (which registers the job, whose ticks the
  reads ask for): the first of the fleet each minute runs the tick, released ``completed`` (1 in 20
  ``completed: false``), the others get 409.

Every request is timed from when it is wanted (a wait for a free connection counts) to its answer, by operation,
and any answer but the expected ones is counted as unexpected (a 5xx, a refused connection, a timeout).
"""

from __future__ import annotations

import asyncio
import collections
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any

import orjson

from bench.soak_client import Server

MIX = (("plain", 0.60), ("skip", 0.15), ("slot", 0.10), ("job", 0.15))
#: A request that takes longer than this is counted as unexpected (and the cycle abandoned).
TIMEOUT_S = 15.0
#: Cycles in flight at most; a cycle due while this many run is not started, and counted as dropped.
MAX_IN_FLIGHT = 2000
LEASE_S = 30
AT_MOST = b'"lock_at_most_for": "%ds"' % LEASE_S


class Recorder:
    """Latencies and counts since the last ``take``."""

    def __init__(self) -> None:
        self.latencies: dict[str, list[float]] = collections.defaultdict(list)
        self.counts: collections.Counter[str] = collections.Counter()
        self.unexpected: collections.Counter[str] = collections.Counter()

    def take(self) -> tuple[dict[str, list[float]], dict[str, int], dict[str, int]]:
        out = (dict(self.latencies), dict(self.counts), dict(self.unexpected))
        self.latencies = collections.defaultdict(list)
        self.counts = collections.Counter()
        self.unexpected = collections.Counter()
        return out


class Fleet:
    def __init__(
        self,
        servers: list[Server],
        prefix: str,
        recorder: Recorder,
        seed: int = 46,
        names: int = 4096,
        shared: int = 32,
        jobs: int = 128,
    ) -> None:
        self.servers = servers
        self.prefix = prefix
        self.record = recorder
        self.rng = random.Random(seed)
        self.free = collections.deque(f"{prefix}n{i:05d}" for i in range(names))
        self.slot_names = [f"{prefix}slot{i:02d}" for i in range(shared)]
        self.jobs = [f"{prefix}job{i:03d}" for i in range(jobs)]
        self.reads = self._reads()

    async def call(
        self, op: str, server: Server, method: str, path: str, body: bytes | None, expected: tuple[int, ...]
    ) -> dict[str, object] | None:
        """One timed request; its JSON answer when its status is expected, else None (counted)."""
        t0 = time.perf_counter()
        try:
            answer = await asyncio.wait_for(server.request(method, path, body), TIMEOUT_S)
        except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            self.record.unexpected[f"{op}:{type(exc).__name__}"] += 1
            return None
        self.record.latencies[op].append(time.perf_counter() - t0)
        if answer.status not in expected:
            self.record.unexpected[f"{op}:{answer.status}"] += 1
            return None
        if not answer.body.startswith(b"{"):
            return {"status": answer.status}
        parsed: dict[str, object] = orjson.loads(answer.body)
        parsed["status"] = answer.status
        return parsed

    async def cycle(self, i: int) -> None:
        """Cycle number ``i``, of a kind drawn from MIX, on server ``i`` modulo their number."""
        kind = self.rng.choices([k for k, _ in MIX], [w for _, w in MIX])[0]
        self.record.counts[kind] += 1
        home = self.servers[i % len(self.servers)]
        other = self.servers[(i + 1) % len(self.servers)]
        if kind in ("plain", "skip"):
            await self._own(home, other if kind == "skip" else None)
        elif kind == "slot":
            key = str(int(time.time()) // 2)
            body = b'{"slot": "%s", %s}' % (key.encode(), AT_MOST)
            await self._shared("slot", home, self.rng.choice(self.slot_names), body, completed=True)
        else:
            body = b'{"schedule": "* * * * *", %s}' % AT_MOST
            await self._shared("job", home, self.rng.choice(self.jobs), body, completed=self.rng.random() > 0.05)

    async def _own(self, home: Server, other: Server | None) -> None:
        name = self.free.popleft()
        done = False
        try:
            base = f"/v1/locks/{name}"
            got = await self.call("acquire", home, "POST", f"{base}/acquire", b"{%s}" % AT_MOST, (200,))
            if got is None:
                return
            if other is not None:
                await self.call("skip", other, "POST", f"{base}/acquire", b"{%s}" % AT_MOST, (409,))
            token = str(got["token"]).encode()
            for _ in range(self.rng.choice((0, 1, 1, 2, 3))):
                await asyncio.sleep(self.rng.uniform(0, 0.04))
                body = b'{"token": "%s", %s}' % (token, AT_MOST)
                if await self.call("extend", home, "POST", f"{base}/extend", body, (200,)) is None:
                    return
            got = await self.call("release", home, "POST", f"{base}/release", b'{"token": "%s"}' % token, (200,))
            done = got is not None
        finally:
            if done:
                self.free.append(name)
            else:  # a cycle given up may still hold its lease: the name is free again once that has run out
                asyncio.get_running_loop().call_later(LEASE_S + 1, self.free.append, name)

    async def _shared(self, op: str, home: Server, name: str, body: bytes, completed: bool) -> None:
        base = f"/v1/locks/{name}"
        got = await self.call(op, home, "POST", f"{base}/acquire", body, (200, 409))
        if got is None or got["status"] != 200:
            return
        await asyncio.sleep(self.rng.uniform(0, 0.02))
        release = b'{"token": "%s", "completed": %s}' % (str(got["token"]).encode(), b"true" if completed else b"false")
        await self.call("release", home, "POST", f"{base}/release", release, (200,))

    def _reads(self) -> list[tuple[str, Callable[[], str], tuple[int, ...]]]:
        p = self.prefix
        return [
            ("read_locks", lambda: f"/v1/locks?prefix={p}&limit=50", (200,)),
            ("read_lock_runs", lambda: f"/v1/locks/{self.rng.choice(self.free)}/runs?limit=20", (200,)),
            ("read_runs", lambda: f"/v1/runs?prefix={p}&limit=50", (200,)),
            ("read_jobs", lambda: f"/v1/jobs?prefix={p}job&limit=50", (200,)),
            # 404 until the job's first acquire registered it.
            ("read_ticks", lambda: f"/v1/jobs/{self.rng.choice(self.jobs)}/ticks?limit=20", (200, 404)),
            ("read_ui", lambda: "/ui", (200,)),
            ("read_ui_jobs", lambda: "/ui/jobs", (200,)),
        ]

    async def read(self, i: int) -> None:
        op, path, expected = self.reads[i % len(self.reads)]
        self.record.counts["read"] += 1
        await self.call(op, self.servers[i % len(self.servers)], "GET", path(), None, expected)


async def drive(
    rate: float, seconds: float, start: Callable[[int], Coroutine[Any, Any, None]], recorder: Recorder
) -> None:
    """Start ``start(i)`` for i = 0, 1, ... at ``rate`` per second on an absolute schedule for ``seconds``: a late
    wake-up starts every cycle already due (an open loop: a slow server does not slow the load down)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    running: set[asyncio.Task[None]] = set()
    total = int(rate * seconds)
    i = 0
    while i < total:
        delay = t0 + i / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        while i < total and t0 + i / rate <= loop.time():
            if len(running) >= MAX_IN_FLIGHT:
                recorder.counts["dropped"] += 1
            else:
                task = asyncio.create_task(start(i))
                running.add(task)
                task.add_done_callback(running.discard)
            i += 1
    if running:
        await asyncio.wait(running)
