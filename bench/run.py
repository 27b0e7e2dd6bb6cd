"""One benchmark run, start to end: set up the target, run every phase, tear down, return the results as data."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from app.db.schema import qualified_name
from bench import about, hop, scaling, target
from bench import etcd as etcd_peer
from bench.direct import run_direct
from bench.loadgen import Load, wrk_version
from bench.measure import measure
from bench.stats import Phase, pooled
from bench.summary import RATIOS, SIDES, compare, max_rss
from bench.targets import evaluate


def default_peers() -> list[str]:
    """etcd when its binary is installed (Debian's ``etcd-server``), else none."""
    return ["etcd"] if etcd_peer.etcd_path() else []


@dataclass
class Config:
    """Every knob of a run; all of it is written into the results."""

    database_url: str = ""  # empty: bench.database starts one
    url: str | None = None  # an existing server; None: start one
    table: str | None = None  # that server's table (required with url)
    server_pid: int | None = None  # that server's pid, for RSS and CPU
    server_env: dict[str, str] = field(default_factory=dict)
    clients: int = 32
    names: int = 1024
    contended_names: int = 4
    seconds: int = 10
    repeat: int = 3
    warmup_seconds: int = 2
    rate: float = 500.0
    latency_clients: int = 8
    latency_seconds: int = 10
    low_rate: float = 20.0  # the low-load latency: one client, paced, against one lone statement at a time
    low_seconds: int = 5  # each turn's
    low_turns: int = 3  # turns of each side at low load, alternating, first side rotating
    list_rows: int = 100_000
    list_rate: float = 100.0
    list_clients: int = 2
    list_seconds: int = 5
    skip_direct: bool = False
    peers: list[str] = field(default_factory=default_peers)  # "etcd", or none
    etcd_lease: str = "exact"  # bench.etcd.LEASE_MODES
    etcd_dir: str | None = None  # parent of etcd's data directory (default: the system's temp directory)
    scaling_repeat: int = 1  # runs of each load on one process, 2 workers and 2 replicas; 0: no scaling phase
    profile: bool = False
    auth: bool = True  # the started server requires an API token (as any non-loopback deployment does)


def run(config: Config, output: Path, say: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole benchmark; the server's log and any profile go next to ``output``."""
    run_id = uuid.uuid4().hex[:8]
    prefix = f"bench-{run_id}-"
    results: dict[str, Any] = {
        "schema_version": 1,
        "run_id": run_id,
        "started_at": about.now(),
        "machine": about.machine(config.database_url),
        "code": about.code(),
        "load_generator": wrk_version(),
        "config": {
            **asdict(config),
            "database_url": about.redact_url(config.database_url),
            "server_env": about.redacted_env(config.server_env),
        },
    }
    say(f"schedlock benchmark {run_id}: {results['machine']['description']}")
    with _target(config, run_id, output) as (server, table, token), _etcd(config, output) as etcd:
        schema, _, name = table.rpartition(".")
        sql_table = qualified_name(name, schema or None)
        bench = _Bench(config, server, table, sql_table, prefix, say, token, etcd)
        if server.pid is not None:
            results["server_rss_mb_idle"] = round(target.tree_rss_mb(server.pid), 1)
        if server.process is not None and config.list_rows:
            say(f"seeding {config.list_rows:,} rows for the list")
            target.seed_list_rows(config.database_url, sql_table, config.list_rows)
        results["server"] = {
            "url": server.url,
            "pid": server.pid,
            "env": about.redacted_env(server.env),
            "table": table,
            "auth": "API token (bearer) on every request" if token else "none",
        }
        if etcd is not None:
            results["peers"] = {"etcd": _etcd_about(config, etcd)}
        results["throughput"] = bench.throughput()
        if etcd is not None:
            results["peers"]["etcd"]["rss_mb_max"] = bench.etcd_rss_mb
        if config.scaling_repeat and server.process is not None:
            results["scaling"] = bench.scaling(output)
        elif config.scaling_repeat:
            say("scaling: skipped (it starts servers like the one it measures: not with --url)")
        results["latency"] = bench.latency(output)
        results["list"] = bench.listing()
        if config.profile:
            results["profile"] = bench.profile(output.with_suffix(".profile.svg"))
        results["table_rows"] = target.table_rows(config.database_url, sql_table)
    results["server_rss_mb_max"] = max_rss(results)
    results["targets"] = evaluate(results, config.clients, config.rate, config.etcd_lease)
    results["finished_at"] = about.now()
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    return results


class _Bench:
    def __init__(
        self,
        config: Config,
        server: target.Server,
        table: str,
        sql_table: str,
        prefix: str,
        say: Callable[[str], None],
        token: str | None = None,
        etcd: etcd_peer.Etcd | None = None,
    ) -> None:
        self.c = config
        self.etcd = etcd
        self.etcd_rss_mb: float | None = None
        self.token = token
        self.server = server
        self.table = table
        self.sql_table = sql_table
        self.prefix = prefix
        self.say = say

    def _http(self, load: Load, servers: Sequence[target.Server] = ()) -> Phase:
        """The load on the server, or split between ``servers`` at once (one wrk each, the clients shared)."""
        servers = servers or [self.server]
        runs = list(zip(servers, replace(load, token=self.token).split(len(servers)), strict=True))
        phase = measure(self.c.database_url, runs)
        target.expire_bench_leases(self.c.database_url, self.sql_table, self.prefix)
        return phase

    def _etcd(self, load: Load) -> Phase:
        """The same load on etcd; its process's CPU is the "server" CPU of the phase (there is no database)."""
        assert self.etcd is not None
        at_most_s = int(load.at_most.removesuffix("s"))  # Load.at_most is written "<n>s"
        etcd = target.Server(self.etcd.url, self.etcd.pid)
        phase = measure(None, [(etcd, load)], etcd_peer.wrk_env(self.c.etcd_lease, at_most_s))
        # etcd's RSS is kept apart (peers), not taken for the server's.
        self.etcd_rss_mb, phase.server_rss_mb = max(self.etcd_rss_mb or 0.0, phase.server_rss_mb or 0.0), None
        self.etcd.reset()
        return phase

    def _direct(self, load: Load) -> Phase:
        phase = run_direct(self.c.database_url, self.table, load)
        target.expire_bench_leases(self.c.database_url, self.sql_table, self.prefix)
        return phase

    def _loads(self) -> dict[str, Load]:
        c = self.c
        return {
            "uncontended": Load("own", c.clients, c.seconds, c.names, self.prefix),
            "contended": Load("random", c.clients, c.seconds, c.contended_names, self.prefix),
        }

    def _in_turns(
        self, sides: dict[str, Callable[[Load], Phase]], repeat: int, ratios: dict[str, tuple[str, str]]
    ) -> dict[str, Any]:
        """Each side warmed up, then each load on every side ``repeat`` times, the sides taking turns."""
        c = self.c
        self.say(f"warm-up: {c.warmup_seconds} s each")
        for run_side in sides.values():
            run_side(Load("own", c.clients, c.warmup_seconds, c.names, self.prefix))
        order = list(sides)
        out: dict[str, Any] = {}
        for label, load in self._loads().items():
            phases: dict[str, list[Phase]] = {side: [] for side in sides}
            for i in range(repeat):
                # Rotate which side goes first, so a drift in the machine's load does not favour one side.
                for side in order[i % len(order) :] + order[: i % len(order)]:
                    self.say(f"{label} {side} run {i + 1}/{repeat}: {load.clients} clients, {load.names} names")
                    phases[side].append(sides[side](load))
            out[label] = compare(load, phases, ratios)
        return out

    def throughput(self) -> dict[str, Any]:
        run_side = {"http": self._http, "direct": self._direct, "etcd": self._etcd}
        skip = {"direct": self.c.skip_direct, "etcd": not self.etcd}
        return self._in_turns({s: run_side[s] for s in SIDES if not skip.get(s)}, self.c.repeat, RATIOS)

    def scaling(self, logs: Path) -> dict[str, Any]:
        """Two server processes against one: ``serve --workers 2``, and this server with a second replica on its
        table (the load split between them), in turns with this server alone."""
        started = time.monotonic()
        with scaling.servers(self.server, logs) as (workers, replica):
            sides: dict[str, Callable[[Load], Phase]] = {
                "one": self._http,
                "workers": lambda load: self._http(load, [workers]),
                "replicas": lambda load: self._http(load, [self.server, replica]),
            }
            figures = self._in_turns(sides, self.c.scaling_repeat, scaling.RATIOS)
        # What the phase adds to a run: the servers' start and stop, the warm-ups and the runs.
        return {"sides": scaling.SIDES, **figures, "seconds": round(time.monotonic() - started, 1)}

    def _hop(self, hop_server: target.Server) -> Callable[[Load], Phase]:
        """A side that drives a bare server (bench.hop): no token, no database; its RSS is not the server's."""

        def run(load: Load) -> Phase:
            phase = measure(None, [(hop_server, load)])
            phase.server_rss_mb = None
            return phase

        return run

    def latency(self, logs: Path) -> dict[str, Any]:
        c = self.c
        per_client = c.rate / c.latency_clients
        load = Load("own", c.latency_clients, c.latency_seconds, c.names, self.prefix, rate=per_client)
        self.say(f"latency at {c.rate:g} cycles/s: {c.latency_clients} clients")
        out: dict[str, Any] = {"rate_target": c.rate, "clients": c.latency_clients, "http": self._http(load).summary()}
        if not c.skip_direct:
            out["direct"] = self._direct(load).summary()
        # At low load nothing coalesces: one client, paced, so each request meets an idle server, and direct sends
        # one lone statement at a time. The difference is what the HTTP path adds to a statement. The sides take
        # turns, the first rotating: right after the throughput runs the database is still busy (autovacuum,
        # checkpoints) and whichever side went first alone paid for it (docs/performance-journal.md, 2026-12-03).
        # Beside them, in the same turns, the floor: a hop to a bare server on the same stack (bench.hop).
        low = Load("own", 1, c.low_seconds, c.names, self.prefix, rate=c.low_rate)
        turn_count = max(1, c.low_turns)
        with open(logs.with_suffix(".hop.log"), "wb") as log, hop.servers(log) as bare:
            sides: dict[str, Callable[[Load], Phase]] = {"http": self._http}
            if not c.skip_direct:
                sides["direct"] = self._direct
            sides |= {f"hop_{mode}": self._hop(server) for mode, server in bare.items()}
            order = list(sides)
            turns: dict[str, list[Phase]] = {side: [] for side in sides}
            for i in range(turn_count):
                for side in order[i % len(order) :] + order[: i % len(order)]:
                    self.say(f"latency at low load: 1 client, {c.low_rate:g} cycles/s, {side} turn {i + 1}")
                    turns[side].append(sides[side](low))
        out["low"] = {"rate_target": c.low_rate, "clients": 1, "turns": turn_count}
        for side, phases in turns.items():
            out["low"][side] = {
                **pooled(phases).summary(),
                "turn_acquire_p50_ms": [p.summary()["acquire"]["p50_ms"] for p in phases],
            }
        return out

    def listing(self) -> dict[str, Any]:
        c = self.c
        pages = {
            "first_page": "/v1/locks?limit=100",
            "prefix_page": "/v1/locks?prefix=list-05&limit=100",
            "held_page": "/v1/locks?held=true&limit=100",
        }
        out: dict[str, Any] = {"rate": c.list_rate, "clients": c.list_clients}
        for label, path in pages.items():
            self.say(f"list {label}: {path} at {c.list_rate:g}/s")
            load = Load("get", c.list_clients, c.list_seconds, path=path, rate=c.list_rate / c.list_clients)
            out[label] = {"path": path, **self._http(load).summary()}
        return out

    def profile(self, svg: Path) -> dict[str, Any]:
        """py-spy on the server during one extra uncontended HTTP run (not counted in the figures)."""
        assert self.server.pid is not None, "--profile needs the server's pid"
        c = self.c
        self.say(f"profiling the server with py-spy for {c.seconds} s -> {svg}")
        # --subprocesses: a server with workers is a supervisor and the processes that serve.
        command = [_py_spy(), "record", "--pid", str(self.server.pid), "--subprocesses", "--rate", "200"]
        spy = subprocess.Popen(
            [*command, "--output", str(svg)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        time.sleep(1)
        phase = self._http(Load("own", c.clients, c.seconds, c.names, self.prefix))
        spy.send_signal(2)  # SIGINT: py-spy writes the flame graph and exits
        spy.wait(timeout=60)
        return {"flamegraph": str(svg), "cycles_per_s_while_profiling": phase.summary()["cycles_per_s"]}


def _py_spy() -> str:
    """py-spy from this interpreter's environment (``pip install -e '.[bench]'``), else from PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if found is None:
        raise SystemExit("--profile needs py-spy: pip install -e '.[bench]'")
    return found


@contextlib.contextmanager
def _target(config: Config, run_id: str, output: Path) -> Iterator[tuple[target.Server, str, str | None]]:
    """The server, its table, and the API token to send (None: none)."""
    if config.url is not None:
        if not config.table:
            raise SystemExit("--url needs --table (the server's SCHEDLOCK_TABLE)")
        token = os.environ.get("SCHEDLOCK_TOKEN") or None  # as the client and the `schedlock` command take it
        yield target.Server(config.url.rstrip("/"), config.server_pid), config.table, token
        return
    schema = f"bench_{run_id}"
    table = f"{schema}.shedlock"
    log_path = output.with_suffix(".server.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(config.server_env)
    token = None
    if config.auth:
        token, env["SCHEDLOCK_TOKENS"] = target.bench_token(prefixes=[f"bench-{run_id}-", "list-"])
    with log_path.open("wb") as log:
        server = target.start_server(config.database_url, table, env, log)
        try:
            yield server, table, token
        finally:
            target.stop_server(server)
            target.drop_schema(config.database_url, schema)


@contextlib.contextmanager
def _etcd(config: Config, output: Path) -> Iterator[etcd_peer.Etcd | None]:
    """etcd, when it is one of the peers: started on its own ports and data directory, removed at the end."""
    unknown = set(config.peers) - {"etcd"}
    if unknown:
        raise SystemExit(f"unknown peer(s): {', '.join(sorted(unknown))} (known: etcd)")
    if "etcd" not in config.peers:
        yield None
        return
    with output.with_suffix(".etcd.log").open("wb") as log:
        etcd = etcd_peer.start(log, Path(config.etcd_dir) if config.etcd_dir else None)
        try:
            yield etcd
        finally:
            etcd_peer.stop(etcd)


def _etcd_about(config: Config, etcd: etcd_peer.Etcd) -> dict[str, Any]:
    return {
        "version": etcd_peer.version(),
        "url": etcd.url,
        "data_dir": str(etcd.data_dir),
        "lease": config.etcd_lease,
        "settings": "as shipped (fsync on every commit, snapshot every 100,000 entries, no auto-compaction)",
    }
