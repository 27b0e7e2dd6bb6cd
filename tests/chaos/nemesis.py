"""The nemesis: faults, one at a time and several at once, drawn from a seeded RNG.

Each fault is a coroutine that breaks one target, waits, and mends it. Two faults never share a target (Postgres,
one server, one server's link, one client process, the faked clock), so that mending one never undoes another
mid-way. The schedule (which faults, on what, how long, how far apart) follows from the seed; the timing of
everything else follows the machine, so two runs of one seed inject the same faults, not the same history.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.java_nodes import JavaNode
from tests.chaos.topology import PG_SETTINGS, Topology

#: Faults the default campaign injects.
DEFAULT_FAULTS = (
    "server_kill",
    "server_pause",
    "client_pause",
    "net_blackhole",
    "net_reset",
    "net_delay",
    "net_half_open",
    "pg_restart_fast",
    "pg_restart_immediate",
    "long_transaction",
    "clock_jump",
    # A database or role default the statements must not depend on (issue 20, defect 3: they were 500s).
    "db_repeatable_read",
    "db_lock_timeout",
)
#: Faults only injected when asked for (--faults): a standby promotion (needs --standby; once a run).
OPT_IN_FAULTS = ("pg_promote",)
ALL_FAULTS = DEFAULT_FAULTS + OPT_IN_FAULTS


@dataclass
class Injected:
    kind: str
    target: str
    t0: float
    t1: float = 0.0
    detail: str = ""


@dataclass
class Nemesis:
    topology: Topology
    clients: list[subprocess.Popen[Any]]
    long_tx: JavaNode
    names: list[str]
    faults: tuple[str, ...]
    seed: int
    at_most: float
    log: list[Injected] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(f"nemesis-{self.seed}")

    @property
    def counts(self) -> Counter[str]:
        return Counter(fault.kind for fault in self.log)

    def _target(self, kind: str) -> str:
        servers = len(self.topology.ports)
        if kind.startswith(("pg_", "db_")):
            return "postgres"
        if kind == "client_pause":
            return f"client-{self.rng.randrange(len(self.clients))}"
        if kind == "clock_jump":
            return "clock"
        if kind == "long_transaction":
            return f"row-{self.rng.choice(self.names)}"
        index = 1 if servers == 1 else self.rng.randrange(servers)
        return f"{'link' if kind.startswith('net_') else 'server'}-{index}"

    async def run(self, until: float) -> None:
        """Inject faults until the monotonic clock reaches ``until``, with quiet spells in between."""
        while time.monotonic() < until:
            await asyncio.sleep(self.rng.uniform(0.3, 1.5))
            count = 2 if self.rng.random() < 0.35 else 1
            chosen: dict[str, str] = {}
            for _ in range(count * 3):
                kind = self.rng.choice(self.faults)
                target = self._target(kind)
                if target not in chosen.values() and len(chosen) < count:
                    chosen[kind] = target
            duration = self.rng.uniform(0.5, 3.0)
            await asyncio.gather(*(self._inject(kind, target, duration) for kind, target in chosen.items()))

    async def _inject(self, kind: str, target: str, duration: float) -> None:
        fault = Injected(kind, target, time.monotonic())
        self.log.append(fault)
        index = int(target.rsplit("-", 1)[1]) if target[-1].isdigit() else 0
        actions: dict[str, Callable[[], Awaitable[str]]] = {
            "server_kill": lambda: self._server_kill(index, duration),
            "server_pause": lambda: self._signal_pause(index, duration),
            "client_pause": lambda: self._client_pause(index),
            "net_blackhole": lambda: self._link(index, "blackhole", duration),
            "net_delay": lambda: self._link(index, "delay", duration),
            "net_half_open": lambda: self._link(index, "half_open", duration),
            "net_reset": lambda: self._reset(index),
            "pg_restart_fast": lambda: self._pg_restart("fast"),
            "pg_restart_immediate": lambda: self._pg_restart("immediate"),
            "long_transaction": lambda: self._long_transaction(target.removeprefix("row-"), duration),
            "clock_jump": lambda: self._clock_jump(),
            "pg_promote": lambda: asyncio.to_thread(self.topology.promote),
            "db_repeatable_read": lambda: self._db_setting(
                "default_transaction_isolation", "'repeatable read'", duration),
            "db_lock_timeout": lambda: self._db_setting("lock_timeout", "'50ms'", duration),
        }  # fmt: skip
        try:
            fault.detail = await actions[kind]()
        except Exception as e:  # the fault could not be injected or mended: the heal mends it
            fault.detail = f"failed: {type(e).__name__}: {str(e)[-400:]}"  # the end: a server's last lines
        fault.t1 = time.monotonic()

    async def _server_kill(self, index: int, duration: float) -> str:
        await asyncio.to_thread(self.topology.kill, index)
        await asyncio.sleep(duration)
        await asyncio.to_thread(self.topology.start, index)
        return f"down {duration:.1f} s"

    async def _signal_pause(self, index: int, duration: float) -> str:
        self.topology.signal(index, signal.SIGSTOP)
        await asyncio.sleep(duration)
        self.topology.signal(index, signal.SIGCONT)
        return f"stopped {duration:.1f} s"

    async def _client_pause(self, index: int) -> str:
        pause = self.at_most + self.rng.uniform(0.5, 1.5)  # past every lease it holds
        self.clients[index].send_signal(signal.SIGSTOP)
        await asyncio.sleep(pause)
        self.clients[index].send_signal(signal.SIGCONT)
        return f"stopped {pause:.1f} s"

    async def _link(self, index: int, mode: Any, duration: float) -> str:
        proxy = self.topology.proxies[index]
        await asyncio.to_thread(proxy.set_mode, mode)
        await asyncio.sleep(duration)
        await asyncio.to_thread(proxy.set_mode, "pass")
        return f"{mode} {duration:.1f} s"

    async def _reset(self, index: int) -> str:
        await asyncio.to_thread(self.topology.proxies[index].reset)
        return "every connection reset"

    async def _pg_restart(self, mode: str) -> str:
        cluster = self.topology.cluster
        await asyncio.to_thread(cluster.stop, mode)
        await asyncio.sleep(self.rng.uniform(0.1, 1.0))
        await asyncio.to_thread(lambda: cluster.start(**PG_SETTINGS))
        return f"{mode} stop and start"

    async def _long_transaction(self, name: str, duration: float) -> str:
        hold = duration + 1.0
        await self.long_tx.hold_open(name, self.at_most, hold)
        return f"row {name} locked {hold:.1f} s"

    async def _clock_jump(self) -> str:
        # Forward only: libfaketime did not take a backward move of its timestamp file (measured).
        jump = self.rng.choice([5.0, 30.0, 90.0, 600.0])
        self.topology.set_clock(self.topology.clock_offset + jump)
        await asyncio.sleep(1.5)  # the faked process reads the file every second
        return f"server-1 clock +{jump:.0f} s (now {self.topology.clock_offset:+.0f} s)"

    async def _db_setting(self, setting: str, value: str, duration: float) -> str:
        duration = 3 + 2 * duration  # the servers reconnect first: a second or more under load
        await self._alter(f"ALTER DATABASE {self.topology.dbname} SET {setting} = {value}")
        await asyncio.sleep(duration)
        await self._alter(f"ALTER DATABASE {self.topology.dbname} RESET {setting}")
        return f"{setting} = {value} for {duration:.1f} s"

    async def _alter(self, sql: str) -> None:
        """Change a database-level setting, then reset the servers' links: new connections pick it up."""
        await self.long_tx.pool.execute(sql)
        for proxy in self.topology.proxies:
            await asyncio.to_thread(proxy.reset)
