"""One campaign: build the topology, run clients, Java nodes and the nemesis for a while, heal, probe every name,
read the table and the run history, and hand everything to the checker."""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx

from tests.chaos.checker import Final, Verdict, check
from tests.chaos.client import ClientConfig
from tests.chaos.history import Op, read_history, to_api_time
from tests.chaos.java_nodes import JavaNode
from tests.chaos.nemesis import DEFAULT_FAULTS, Nemesis
from tests.chaos.topology import ROOT, TABLE, Topology

PHASES: dict[str, float] = {}
PLANTS = ("java-unguarded", "server-unguarded")


@dataclass
class CampaignConfig:
    seed: int = 1
    duration: float = 45.0
    servers: int = 2
    clients: int = 2
    workers: int = 3
    java: int = 2
    names: int = 3
    faults: tuple[str, ...] = DEFAULT_FAULTS
    at_most_ms: int = 2000
    #: A bug planted for the checker to find: "java-unguarded" adds a Java node whose takeover has no expiry guard;
    #: "server-unguarded" launches server 0 through tests.chaos.planted, whose acquire has none either.
    plant: tuple[str, ...] = ()
    #: The last server reaches Postgres through PgBouncer in transaction pooling mode (tests/chaos/pgbouncer.py).
    pgbouncer: bool = False
    #: Postgres is a primary with a synchronous standby, which the pg_promote fault promotes.
    standby: bool = False
    #: The database's encoding: UTF8 (the cluster's), or LATIN1 / SQL_ASCII, a database of their own.
    encoding: str = "UTF8"
    workdir: str | None = None


@dataclass
class Report:
    config: CampaignConfig
    verdict: Verdict
    ops: int
    by_kind: dict[str, int]
    statuses: dict[str, int]
    faults: dict[str, int]
    fault_log: list[dict[str, Any]]
    wall_s: float
    workdir: str
    extra: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> str:
        v = self.verdict
        lines = [
            f"seed {self.config.seed}, {self.config.duration:.0f} s of faults, {self.wall_s:.0f} s wall; history in "
            f"{self.workdir}",
            f"operations: {self.ops} ({', '.join(f'{k} {n}' for k, n in sorted(self.by_kind.items()))})",
            f"answers: {', '.join(f'{k} {n}' for k, n in sorted(self.statuses.items()))}",
            f"grants: {len(v.grants)} acknowledged, {len(v.outlived)} holders outlived their lease (the caveat), "
            f"{v.orphan_runs} granted to nobody (unanswered acquires)",
            f"faults: {sum(self.faults.values())} ({', '.join(f'{k} {n}' for k, n in sorted(self.faults.items()))})",
            f"violations: {len(v.violations)}",
        ]
        return "\n".join([*lines, *(violation.describe() for violation in v.violations)])

    def to_json(self) -> dict[str, Any]:
        return {
            "config": asdict(self.config),
            "ops": self.ops,
            "by_kind": self.by_kind,
            "statuses": self.statuses,
            "faults": self.faults,
            "fault_log": self.fault_log,
            "grants": len(self.verdict.grants),
            "outlived": len(self.verdict.outlived),
            "orphan_runs": self.verdict.orphan_runs,
            "violations": [v.describe() for v in self.verdict.violations],
            "wall_s": round(self.wall_s, 1),
            **self.extra,
        }


def run(config: CampaignConfig) -> Report:
    """The campaign, start to verdict; the cluster and every process it started are gone when it returns."""
    return asyncio.run(_run(config))


async def _run(config: CampaignConfig) -> Report:
    started = time.monotonic()
    # The Java nodes' pool reports every failed reconnection while Postgres is down: the history has them.
    logging.getLogger("asyncpg").setLevel(logging.CRITICAL)
    workdir = Path(config.workdir or tempfile.mkdtemp(prefix="schedlock-chaos-"))
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    planted = "server-unguarded" in config.plant
    topology = await asyncio.to_thread(
        Topology, workdir, config.servers, planted, config.pgbouncer, config.standby, config.encoding
    )
    PHASES["setup"] = time.monotonic() - started
    try:
        return await _campaign(config, topology, workdir, started)
    finally:
        await asyncio.to_thread(topology.destroy)


async def _campaign(config: CampaignConfig, topology: Topology, workdir: Path, started: float) -> Report:
    # The last name is not Latin-1: a valid name (docs/api.md) that a LATIN1 database cannot store.
    names = [*(f"chaos.{chr(ord('a') + i)}" for i in range(config.names - 1)), "chaos.锁"]
    slot_names = ["chaos.slot.a", "chaos.slot.b"]
    at_most = config.at_most_ms / 1000
    clients = [_start_client(config, topology, workdir, i, names, slot_names) for i in range(config.clients)]
    pool = await asyncpg.create_pool(topology.java_url, min_size=1, max_size=config.java + 3)
    java_out = (workdir / "java.jsonl").open("w", buffering=1)
    stopping = asyncio.Event()
    try:
        nodes = [JavaNode(pool, TABLE, f"java-{i}", config.seed, java_out) for i in range(config.java)]
        if "java-unguarded" in config.plant:
            nodes.append(JavaNode(pool, TABLE, "java-planted", config.seed, java_out, unguarded=True))
        java = [asyncio.create_task(node.run(names, at_most, stopping)) for node in nodes]
        long_tx = JavaNode(pool, TABLE, "java-long-tx", config.seed, java_out)
        nemesis = Nemesis(topology, clients, long_tx, names, config.faults, config.seed, at_most)
        await nemesis.run(time.monotonic() + config.duration)
        t = time.monotonic()
        await asyncio.to_thread(topology.heal)
        PHASES["heal"] = time.monotonic() - t
        for client in clients:
            client.send_signal(signal.SIGCONT)
            client.send_signal(signal.SIGTERM)
        await asyncio.gather(*(asyncio.to_thread(client.wait, 60) for client in clients))
        stopping.set()
        await asyncio.gather(*java)
        healed_at = time.monotonic()
        PHASES["stop"] = healed_at - t
        probes = await _probe(topology.urls[0], [*names, *slot_names], healed_at + at_most + 10)
        final = Final(await _rows(pool), await _runs(topology.urls[0]))
        PHASES["probe"] = time.monotonic() - healed_at
    finally:
        stopping.set()
        java_out.close()
        for client in clients:
            if client.poll() is None:
                client.kill()
        await pool.close()
    ops = await asyncio.to_thread(lambda: read_history(sorted(workdir.glob("*.jsonl"))))
    verdict = check(ops, final, probes, healed_at, at_most + 1.0)
    statuses = Counter(str(op.status) if op.status is not None else "java" if op.is_java else "no answer" for op in ops)
    return Report(
        config,
        verdict,
        len(ops),
        dict(Counter(op.kind for op in ops)),
        dict(statuses),
        dict(nemesis.counts),
        [asdict(fault) for fault in nemesis.log],
        time.monotonic() - started,
        str(workdir),
        {"phases_s": {k: round(v, 1) for k, v in PHASES.items()}, "urls": topology.urls},
    )


def _start_client(
    config: CampaignConfig, topology: Topology, workdir: Path, index: int, names: list[str], slot_names: list[str]
) -> subprocess.Popen[bytes]:
    proc = f"client-{index}"
    client = ClientConfig(
        proc, topology.urls, names, slot_names, config.seed, config.workers, str(workdir / f"{proc}.jsonl"),
        config.at_most_ms,
    )  # fmt: skip
    return subprocess.Popen([sys.executable, "-m", "tests.chaos.client", json.dumps(asdict(client))], cwd=ROOT)


async def _probe(url: str, names: list[str], deadline: float) -> list[Op]:
    """After the heal: acquire each name until granted (then release it), every attempt recorded. All names at
    once, so that one name's wait does not count against the next one's bound."""
    async with httpx.AsyncClient(base_url=url, timeout=5) as http:
        per_name = await asyncio.gather(*(_probe_one(http, name, deadline) for name in names))
    return [op for ops in per_name for op in ops]


async def _probe_one(http: httpx.AsyncClient, name: str, deadline: float) -> list[Op]:
    ops: list[Op] = []
    lease = f"probe.{name}"
    while time.monotonic() < deadline:
        t0 = time.monotonic()
        body = {"lock_at_most_for": 2000, "holder": lease}
        try:
            r = await http.post(f"/v1/locks/{name}/acquire", json=body)
            op = Op(f"{lease}.{len(ops)}", "probe", "acquire", name, lease, t0, time.monotonic(), body,
                    r.status_code, r.json(), None, r.headers.get("retry-after"))  # fmt: skip
        except httpx.HTTPError as e:
            op = Op(f"{lease}.{len(ops)}", "probe", "acquire", name, lease, t0, time.monotonic(), body,
                    error=type(e).__name__)  # fmt: skip
        ops.append(op)
        if op.ok and op.body is not None:
            r0 = time.monotonic()
            r = await http.post(f"/v1/locks/{name}/release", json={"token": op.body["token"]})
            ops.append(Op(f"{lease}.r", "probe", "release", name, lease, r0, time.monotonic(), {},
                          r.status_code, r.json(), None, r.headers.get("retry-after")))  # fmt: skip
            break
        await asyncio.sleep(0.05)
    return ops


async def _rows(pool: Any) -> dict[str, dict[str, Any]]:
    sql = f"SELECT name, locked_by, locked_at, lock_until, fencing_token, last_completed_slot FROM {TABLE}"
    for attempt in range(5):  # the pool's connections may predate a Postgres restart: the first uses may fail
        try:
            records = await pool.fetch(sql)
            break
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError):
            if attempt == 4:
                raise
            await asyncio.sleep(0.5)
    return {
        r["name"]: {**dict(r), "locked_at": to_api_time(r["locked_at"]), "lock_until": to_api_time(r["lock_until"])}
        for r in records
    }


async def _runs(url: str) -> list[dict[str, Any]]:
    """Every run of the campaign's names, through GET /v1/runs, page by page."""
    runs: list[dict[str, Any]] = []
    cursor = None
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        while True:
            params: dict[str, Any] = {"prefix": "chaos.", "limit": 1000}
            if cursor:
                params["cursor"] = cursor
            r = await http.get("/v1/runs", params=params)
            r.raise_for_status()
            page = r.json()
            runs += page["items"]
            cursor = page["next_cursor"]
            if not cursor:
                return runs
