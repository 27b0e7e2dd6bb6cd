"""A client process of the campaign: HTTP workers doing acquire → extend* → release, and slot acquires, over a few
names, through every server at random, each operation written to a history file as it ends.

Run by the campaign as ``python -m tests.chaos.client '<json config>'``, a process of its own so that the nemesis can
SIGSTOP it past its leases, as a paused VM or a stuck GC does. SIGTERM lets every worker finish its lease and stop.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

import httpx

from tests.chaos.history import Op


@dataclass(frozen=True)
class ClientConfig:
    proc: str
    urls: list[str]
    names: list[str]
    slot_names: list[str]
    seed: int
    workers: int
    history: str
    at_most_ms: int = 2000
    timeout: float = 5.0


class Worker:
    def __init__(self, config: ClientConfig, index: int, http: httpx.AsyncClient, out: TextIO) -> None:
        self.config = config
        self.rng = random.Random(f"{config.seed}-{config.proc}-{index}")
        self.http = http
        self.out = out
        self.prefix = f"{config.proc}.{index}"
        self.leases = 0
        self.ops = 0

    async def send(self, kind: str, name: str, lease: str, path: str, body: dict[str, Any]) -> Op:
        url = f"{self.rng.choice(self.config.urls)}/v1/locks/{name}/{path}"
        self.ops += 1
        t0 = time.monotonic()
        status = answer = error = retry_after = None
        try:
            response = await self.http.post(url, json=body)
            status, retry_after = response.status_code, response.headers.get("retry-after")
            try:
                answer = response.json()
            except ValueError:
                answer = {"text": response.text[:200]}
        except httpx.HTTPError as e:
            error = f"{type(e).__name__}: {e}"[:200]
        req = {k: v for k, v in body.items() if k != "token"} | {"server": url.split("/v1")[0]}
        op = Op(f"{lease}.{self.ops}", self.config.proc, kind, name, lease, t0, time.monotonic(), req, status,
                answer, error, retry_after)  # fmt: skip
        self.out.write(op.to_json() + "\n")
        self.out.flush()
        return op

    async def lease(self) -> None:
        self.leases += 1
        lease = f"{self.prefix}.{self.leases}"
        slotted = self.rng.random() < 0.25
        name = self.rng.choice(self.config.slot_names if slotted else self.config.names)
        body: dict[str, Any] = {
            "lock_at_most_for": self.config.at_most_ms,
            "lock_at_least_for": 0 if slotted else self.rng.choice([0, 0, 200, 800]),
            "holder": lease,
        }
        if slotted:
            # A schedule, not keys of this client's own: the server picks the tick with the statement's own now, so
            # a request delayed in flight past the next tick's completion asks for that tick, not an older one. (A
            # key older than the last completed one is not refused, docs/slots.md: with keys of its own, the
            # 10-minute run saw a tick run twice that way.)
            body["schedule"] = "* * * * *"
        acquired = await self.send("acquire", name, lease, "acquire", body)
        if not acquired.ok or acquired.body is None:
            return
        token = acquired.body["token"]
        for _ in range(self.rng.choice([0, 0, 1, 2])):
            await asyncio.sleep(self.rng.uniform(0.05, 0.5))
            extended = await self.send(
                "extend", name, lease, "extend", {"token": token, "lock_at_most_for": self.config.at_most_ms}
            )
            if not extended.ok:
                break
        await asyncio.sleep(self.rng.uniform(0, 0.4))
        release: dict[str, Any] = {"token": token}
        if slotted:
            release["completed"] = self.rng.random() < 0.8
        for _ in range(3):  # an unanswered release is sent again, as a careful caller does
            if not (await self.send("release", name, lease, "release", release)).unknown:
                break
            await asyncio.sleep(0.2)

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            await self.lease()
            await asyncio.sleep(self.rng.uniform(0, 0.1))


async def main(config: ClientConfig) -> None:
    stopping = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    limits = httpx.Limits(max_connections=config.workers * 2)
    with open(config.history, "a", buffering=1) as out:  # noqa: ASYNC230 (opened once, before any request)
        async with httpx.AsyncClient(timeout=config.timeout, limits=limits) as http:
            workers = [Worker(config, i, http, out) for i in range(config.workers)]
            await asyncio.gather(*(w.run(stopping) for w in workers))


if __name__ == "__main__":
    asyncio.run(main(ClientConfig(**json.loads(sys.argv[1]))))
