"""``python -m bench.soak``: a fleet-like load on two server processes over one database, for a chosen time, with
what could leak recorded every window and checked against the soak's targets (docs/reliability.md, "Soak").

The servers share one table in a schema of the soak's own (dropped at the end) and run retention with a short
retention (``--retention``, pruned every ``--prune-interval``), so the history is pruned while it is written. The
load (bench/soak_load.py): acquire -> extend* -> release cycles, skips, slot and schedule acquires, and reads
(lists, a lock's runs, jobs and ticks, the dashboard's pages) at ``--read-rate``. Every window (``--window``,
a minute by default) records, per server, its RSS, open file descriptors, pool connections and event-loop tasks
(``/metrics``), the database's connections (``pg_stat_activity``), p50/p99 per operation, and the history
tables' size and dead tuples. Writes the JSON and an SVG plot beside it; prints a line per window and a verdict
per target; exits 1 when a target fails.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import sys
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
from pydantic import SecretStr

from app.db import migrate
from app.db.schema import qualified_name, runs_table, skips_table
from app.settings import Settings
from bench import about, target
from bench.database import HELP, database, default_url
from bench.soak_client import Server
from bench.soak_load import Fleet, Recorder, drive
from bench.soak_report import checks, percentile, render, svg

RESULTS = Path(__file__).parent / "results"


def duration(text: str) -> float:
    """Seconds from ``90``, ``90s``, ``10m`` or ``1h``."""
    units = {"s": 1, "m": 60, "h": 3600}
    if text and text[-1] in units:
        return float(text[:-1]) * units[text[-1]]
    return float(text)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--database-url", default=default_url(), help=HELP)
    p.add_argument("--duration", type=duration, default=duration("30m"), help="how long (30m, 600s...; 30m)")
    p.add_argument("--rate", type=float, default=500.0, help="cycles started per second (%(default)s)")
    p.add_argument("--read-rate", type=float, default=10.0, help="reads per second (%(default)s)")
    p.add_argument("--servers", type=int, default=2, help="server processes over the one table (%(default)s)")
    p.add_argument("--connections", type=int, default=16, help="keep-alive connections per server (%(default)s)")
    p.add_argument("--window", type=duration, default=60.0, help="seconds per record (%(default)s)")
    p.add_argument("--settle", type=duration, default=300.0, help="RSS, FDs and connections judged after (300)")
    p.add_argument("--retention", type=duration, default=120.0, help="the history's retention, seconds (120)")
    p.add_argument("--prune-interval", type=duration, default=15.0, help="how often retention runs (15)")
    p.add_argument("--server-env", action="append", default=[], metavar="KEY=VALUE", help="for every server")
    p.add_argument("--output", type=Path, help="JSON to write (default: bench/results/soak-<time>.json)")
    p.add_argument("--plot", type=Path, help="SVG to write (default: the JSON's path with .svg)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    output: Path = args.output or RESULTS / f"soak-{stamp}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    with database(args.database_url) as url:
        record = run(args, url, output)
    output.write_text(json.dumps(record, indent=2) + "\n")
    (args.plot or output.with_suffix(".svg")).write_text(svg(record))
    print(render(record))
    print(f"\nresults: {output}")
    return 0 if all(c["verdict"] != "fail" for c in record["checks"].values()) else 1


def run(args: argparse.Namespace, url: str, output: Path) -> dict[str, Any]:
    run_id = uuid.uuid4().hex[:8]
    schema, prefix = f"soak_{run_id}", f"soak-{run_id}-"
    table = f"{schema}.shedlock"
    token, tokens = target.bench_token(prefixes=[prefix])
    env = {
        "SCHEDLOCK_TOKENS": tokens,
        "SCHEDLOCK_HISTORY_RETENTION": f"PT{int(args.retention)}S",
        "SCHEDLOCK_HISTORY_PRUNE_INTERVAL": f"PT{int(args.prune_interval)}S",
        **dict(item.split("=", 1) for item in args.server_env),
    }
    record: dict[str, Any] = {
        "title": f"soak: {args.servers} servers, {args.rate:g} cycles/s, {args.duration / 60:g} min",
        "started_at": about.now(),
        "machine": about.machine(url),
        "code": about.code(),
        "config": {
            "duration_s": args.duration,
            "rate": args.rate,
            "read_rate": args.read_rate,
            "servers": args.servers,
            "connections": args.connections,
            "window_s": args.window,
            "settle_s": args.settle,
            "retention_s": args.retention,
            "prune_interval_s": args.prune_interval,
            "server_env": about.redacted_env({k: v for k, v in env.items() if k != "SCHEDLOCK_TOKENS"}),
        },
    }
    with ExitStack() as stack:
        stack.callback(target.drop_schema, url, schema)
        migrate.upgrade(Settings(database_url=SecretStr(url), table=table))
        servers = []
        for i in range(args.servers):
            log = stack.enter_context(output.with_suffix(f".server{i}.log").open("ab"))
            server = target.start_server(url, table, env, log, ["{python}", "-m", "app", "serve", "--port", "{port}"])
            stack.callback(target.stop_server, server)
            servers.append(server)
        record["windows"] = asyncio.run(_soak(args, url, schema, prefix, token, servers))
    record["finished_at"] = about.now()
    record["checks"] = checks(record)
    return record


async def _soak(
    args: argparse.Namespace, url: str, schema: str, prefix: str, token: str, servers: list[target.Server]
) -> list[dict[str, Any]]:
    clients = [Server(s.url, token, args.connections) for s in servers]
    scrapers = [Server(s.url, token, 1) for s in servers]
    recorder = Recorder()
    fleet = Fleet(clients, prefix, recorder)
    db = await asyncpg.connect(url, server_settings={"application_name": "schedlock-soak"})
    windows: list[dict[str, Any]] = []
    try:
        load = asyncio.gather(
            drive(args.rate, args.duration, fleet.cycle, recorder),
            drive(args.read_rate, args.duration, fleet.read, recorder),
        )
        t0 = time.monotonic()
        while not load.done():
            await asyncio.wait([load], timeout=max(0.0, t0 + args.window * (len(windows) + 1) - time.monotonic()))
            elapsed = time.monotonic() - t0
            if load.done() and elapsed - args.window * len(windows) < args.window / 2 and windows:
                break  # the cycles still in flight at the end: not a window of their own
            windows.append(await _window(recorder, elapsed, windows, servers, scrapers, db, schema))
            print(f"# {elapsed:5.0f} s: {windows[-1]['cycles_per_s']:.0f} cycles/s", file=sys.stderr, flush=True)
        await load
    finally:
        await db.close()
        for client in [*clients, *scrapers]:
            await client.close()
    return windows


async def _window(
    recorder: Recorder,
    elapsed: float,
    windows: list[dict[str, Any]],
    servers: list[target.Server],
    scrapers: list[Server],
    db: asyncpg.Connection,
    schema: str,
) -> dict[str, Any]:
    latencies, counts, unexpected = recorder.take()
    span = elapsed - (windows[-1]["t_s"] if windows else 0.0)
    cycles = sum(n for kind, n in counts.items() if kind not in ("read", "dropped"))
    return {
        "t_s": round(elapsed, 1),
        "cycles": cycles,
        "cycles_per_s": round(cycles / span, 1),
        "reads": counts.get("read", 0),
        "kinds": {k: n for k, n in counts.items() if k not in ("read", "dropped")},
        "dropped": counts.get("dropped", 0),
        "unexpected": unexpected,
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "soak_cpu_s": round(time.process_time(), 2),
        "ops": {
            op: {"n": len(v), "p50_ms": _ms(percentile(v, 0.50)), "p99_ms": _ms(percentile(v, 0.99))}
            for op, v in sorted(latencies.items())
        },
        "servers": [await _server(s, scraper) for s, scraper in zip(servers, scrapers, strict=True)],
        "pg": await _pg(db),
        "history": await _history(db, schema),
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 2)


async def _server(server: target.Server, scraper: Server) -> dict[str, Any]:
    assert server.pid is not None
    metrics = _metrics((await scraper.request("GET", "/metrics")).body.decode())
    fds, clients = open_fds(server.pid), _sockets_on_port(urlsplit(server.url).port)
    return {
        "rss_mb": round(target.process_rss_mb(server.pid), 1),
        "cpu_s": round(target.process_cpu_s(server.pid), 2),
        "fds": len(fds),
        # Without the soak's own keep-alive connections to it, which come and go with the load's bursts.
        "fds_own": len([fd for fd in fds.values() if fd not in clients]),
        "pool_open": int(metrics.get('schedlock_db_pool_connections{state="busy"}', 0))
        + int(metrics.get('schedlock_db_pool_connections{state="idle"}', 0)),
        "pool_busy": int(metrics.get('schedlock_db_pool_connections{state="busy"}', 0)),
        "tasks": int(metrics.get("schedlock_event_loop_tasks", -1)),
    }


def open_fds(pid: int) -> dict[str, str]:
    """What each open file descriptor of ``pid`` points at (``socket:[inode]`` for a socket)."""
    out = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            out[fd] = os.readlink(f"/proc/{pid}/fd/{fd}")
    return out


def _sockets_on_port(port: int | None) -> set[str]:
    """TCP sockets whose local port is ``port``, as ``open_fds`` shows them (``socket:[inode]``)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port:
                    inodes.add(f"socket:[{fields[9]}]")
    return inodes


def _metrics(text: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            out[key] = float(value)
    return out


async def _pg(db: asyncpg.Connection) -> dict[str, Any]:
    rows = await db.fetch(
        "SELECT state, count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
        "AND application_name = 'schedlock' GROUP BY state"
    )
    by_state = {str(r["state"]): int(r["n"]) for r in rows}
    return {"connections": sum(by_state.values()), "by_state": by_state}


async def _history(db: asyncpg.Connection, schema: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, table in (("runs", runs_table("shedlock", schema)), ("skips", skips_table("shedlock", schema))):
        row = await db.fetchrow(
            "SELECT pg_total_relation_size($1::regclass) AS bytes, n_live_tup, n_dead_tup, autovacuum_count "
            "FROM pg_stat_user_tables WHERE relid = $1::regclass",
            table,
        )
        assert row is not None
        out[f"{key}_bytes"] = int(row["bytes"])
        out[f"{key}_live"] = int(row["n_live_tup"])
        out[f"{key}_dead"] = int(row["n_dead_tup"])
        out[f"{key}_autovacuums"] = int(row["autovacuum_count"])
    out["locks"] = int(await db.fetchval(f"SELECT count(*) FROM {qualified_name('shedlock', schema)}"))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
